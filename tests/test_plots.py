"""plots.py: the moving average, reading and merging event files, and a figure from two real short runs."""

from __future__ import annotations

import os

import matplotlib.image
import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

import plots
import seeds
from algorithms import make_agent
from config import Config
from envs import make_vec_env
from runner import Runner, save_settings

ALL_PANELS = ["episode return", "entropy", "value loss", "policy loss", "explained variance", "gradient norm"]


def write_scalars(run_dir, points: dict[str, list[tuple[int, float]]], purge_step=None) -> None:
    """One SummaryWriter session (one event file) logging ``tag -> [(step, value), ...]`` in the given order."""
    writer = SummaryWriter(str(run_dir), purge_step=purge_step)
    for tag, series in points.items():
        for step, value in series:
            writer.add_scalar(tag, value, step)
    writer.close()


# ------------------------------------------------------------------------------------ moving_average
def test_moving_average_by_hand():
    assert plots.moving_average(np.array([1.0, 2.0, 3.0, 4.0]), 2).tolist() == [1.0, 1.5, 2.5, 3.5]
    assert plots.moving_average(np.array([3, 6, 9]), 5).tolist() == [3.0, 4.5, 6.0]  # window longer than data
    assert plots.moving_average(np.array([2.0, 4.0]), 1).tolist() == [2.0, 4.0]
    assert plots.moving_average(np.array([]), 3).shape == (0,)
    with pytest.raises(ValueError, match="at least 1"):
        plots.moving_average(np.array([1.0]), 0)


# ------------------------------------------------------------------------------------ load_scalars
def test_load_scalars_merges_files_newest_value_wins_sorted_by_step(tmp_path):
    write_scalars(tmp_path, {"loss/value": [(s, float(s)) for s in range(5)], "train/lr": [(0, 0.5), (4, 0.25)]})
    # A second session in the same directory (as after a resume without a purge), steps out of order.
    write_scalars(tmp_path, {"loss/value": [(6, 106.0), (3, 103.0), (5, 105.0), (4, 104.0)]})
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2

    scalars = plots.load_scalars(str(tmp_path))
    assert set(scalars) == {"loss/value", "train/lr"}
    steps, values = scalars["loss/value"]
    assert steps.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert values.tolist() == [0.0, 1.0, 2.0, 103.0, 104.0, 105.0, 106.0]
    assert steps.dtype == np.int64 and values.dtype == np.float64
    assert [a.tolist() for a in scalars["train/lr"]] == [[0, 4], [0.5, 0.25]]  # only in the older file: kept


def test_run_directories_named_like_glob_patterns_are_read(tmp_path):
    run_dir = tmp_path / "lr[0.001]*"
    write_scalars(run_dir, {"loss/value": [(0, 1.0), (1, 2.0)]})
    assert plots.load_scalars(str(run_dir))["loss/value"][1].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match=r"holds 1 run directory \(e.g. .*lr\[0.001\]\*\)"):
        plots.load_scalars(str(tmp_path))


def test_load_scalars_drops_points_a_resume_purged(tmp_path):
    """main.py resumes with SummaryWriter(purge_step=checkpoint step + 1): later old points are orphans."""
    write_scalars(
        tmp_path, {"episode/return": [(s, -21.0) for s in (3, 6, 9, 12)], "loss/value": [(s, 1.0) for s in (5, 10, 15)]}
    )
    write_scalars(tmp_path, {"episode/return": [(8, -20.0), (13, -19.0)], "loss/value": [(15, 2.0)]}, purge_step=7)
    scalars = plots.load_scalars(str(tmp_path))
    assert [a.tolist() for a in scalars["episode/return"]] == [[3, 6, 8, 13], [-21.0, -21.0, -20.0, -19.0]]
    assert [a.tolist() for a in scalars["loss/value"]] == [[5, 15], [1.0, 2.0]]


def test_load_scalars_errors(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match=r"^run directory not found: .*nope$"):
        plots.load_scalars(str(missing))
    (tmp_path / "notes.txt").write_text("no events here")
    with pytest.raises(ValueError, match=r"no TensorBoard event files \(events\.out\.tfevents\.\*\) in "):
        plots.load_scalars(str(tmp_path))
    with pytest.raises(ValueError, match="is not a directory"):
        plots.load_scalars(str(tmp_path / "notes.txt"))
    write_scalars(tmp_path / "run_a", {"loss/value": [(0, 1.0)]})
    with pytest.raises(ValueError, match=r"holds 1 run directory \(e\.g\. .*run_a\): pass those"):
        plots.load_scalars(str(tmp_path))  # a log dir instead of a run dir


# ------------------------------------------------------------------------------------ plot_runs
def test_panels_without_data_are_left_out_and_no_data_is_an_error(tmp_path):
    write_scalars(tmp_path / "a", {"loss/entropy": [(10, 1.7), (20, 1.6)], "train/lr": [(10, 7e-4)]})
    write_scalars(tmp_path / "b", {"train/grad_norm": [(10, 0.9)], "train/lr": [(10, 7e-4)]})  # one point
    out = tmp_path / "new" / "dir" / "plot.png"
    titles = plots.plot_runs([str(tmp_path / "a"), str(tmp_path / "b")], str(out))
    assert titles == ["entropy", "gradient norm"]
    assert matplotlib.image.imread(str(out)).shape[:2] == (450, 1000)  # 1 x 2 panels of 5 x 3.5 in + 1 in, 100 dpi
    assert os.listdir(out.parent) == ["plot.png"]  # no temporary file left behind

    write_scalars(tmp_path / "lr_only", {"train/lr": [(0, 1.0)]})
    with pytest.raises(ValueError, match="none of the runs logged any of the plotted tags"):
        plots.plot_runs([str(tmp_path / "lr_only")], str(tmp_path / "x.png"))
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(ValueError, match="2 labels for 1 run directories"):
        plots.plot_runs([str(tmp_path / "a")], str(tmp_path / "x.png"), labels=["p", "q"])


def test_run_labels_lengthen_only_clashing_names():
    assert plots.run_labels(["runs/a", "runs/b"]) == ["a", "b"]
    assert plots.run_labels(["x/seed1/run", "y/seed1/run", "z/other"]) == ["x/seed1/run", "y/seed1/run", "other"]
    with pytest.raises(ValueError, match="given twice"):
        plots.run_labels(["runs/a", "runs/./a"])


def train_short_run(run_dir: str, seed: int) -> None:
    """A real training run, built as main.py builds one: Pong, 2 envs, 64 updates, 400-frame episodes."""
    config = Config(
        env_name="PongNoFrameskip-v4",
        num_envs=2,
        num_updates=64,
        log_interval=1,
        cuda=False,
        progress=False,
        log_dir=os.path.dirname(run_dir),
        max_episode_frames=400,
        seed=seed,
    )
    seeds.seed_everything(config.seed)
    envs = make_vec_env(
        config.env_name, config.num_envs, config.n_stack, config.seed, "dummy", config.max_episode_frames
    )
    try:
        agent = make_agent(config, envs.observation_space.shape, int(envs.action_space.n))
        writer = SummaryWriter(run_dir)
        save_settings(config, run_dir, writer)
        Runner(agent, envs, config, run_dir, writer=writer).train()
        writer.close()
    finally:
        envs.close()


@pytest.fixture(scope="module")
def two_real_runs(tmp_path_factory, torch_single_thread):
    """Two short real runs with different seeds, trained once for this module."""
    root = tmp_path_factory.mktemp("runs")
    run_dirs = [str(root / f"pong_seed{seed}") for seed in (1, 2)]
    for run_dir, seed in zip(run_dirs, (1, 2)):
        os.makedirs(run_dir)
        train_short_run(run_dir, seed)
    return run_dirs


def test_real_runs_log_every_plotted_tag(two_real_runs):
    for run_dir in two_real_runs:
        scalars = plots.load_scalars(run_dir)
        for panel in plots.PANELS:
            assert panel.tag in scalars, panel.tag
        steps, _ = scalars["loss/entropy"]
        assert steps.tolist() == [10 * (u + 1) for u in range(64)]  # log_interval 1, 2 envs x 5 steps per update
        assert len(scalars["episode/return"][0]) >= 4  # 400-frame episodes end within 64 updates


def test_plot_of_two_real_runs(two_real_runs, tmp_path):
    out = tmp_path / "plots" / "compare.png"
    titles = plots.plot_runs(two_real_runs, str(out), smoothing=3)
    assert titles == ALL_PANELS

    image = matplotlib.image.imread(str(out))  # RGBA floats in [0, 1]
    assert image.shape == (800, 1500, 4)  # 2 x 3 panels of 5 x 3.5 inches + a 1-inch header, at 100 dpi
    rgb = image[..., :3]
    assert rgb.std() > 0.05  # not blank
    for colour in plots.run_colours(2):  # both runs' lines are drawn
        close = np.abs(rgb - np.array(colour)).max(axis=-1) < 0.03
        assert close.sum() > 500, colour

    # Drawing again (other labels) replaces the file, leaving no temporary file behind.
    before = out.read_bytes()
    assert plots.plot_runs(two_real_runs, str(out), labels=["seed 1", "seed 2"]) == ALL_PANELS
    assert out.read_bytes() != before and os.listdir(out.parent) == ["compare.png"]
