"""The physics grid's report (physics_grid.py, bench/grid_report.py): cells inside the training physics
told from held-out ones, random play's floor, the worst decile, the fraction of a specialist's
ceiling, the heat maps, and a study's runs compared, with --baseline and --specialists."""

from __future__ import annotations

import glob
import json
import math
import os
import sys

import numpy as np
import pytest

import main
from agent import load_model
from bench import grid_report
from bench.grid_report import draw_difference, fraction_of_ceiling, random_grid, worst_decile
from bench.random_agent import play_random
from checkpoints import atomic_save, load_checkpoint
from envs import make_vec_env
from physics_grid import draw_heatmaps, evaluate_grid, held_out_table, mean_table, region_means, run_training_ranges
from utils import UsageError

pytestmark = pytest.mark.usefixtures("torch_single_thread")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--num-envs", "2", "--rollout-size", "5", "--num-updates", "1", "--no-progress", "--no-cuda", "--threads", "1"]


@pytest.fixture(scope="module")
def lander_runs(tmp_path_factory) -> dict[str, str]:
    """One-update LunarLander runs: on the default physics, with --randomize-domain (uniform) and with ADR."""
    root = tmp_path_factory.mktemp("lander")
    runs = {}
    for name, flags in (("default", []), ("uniform", ["--randomize-domain"]), ("adr", ["--randomize-domain", "adr"])):
        assert main.main(["--env-name", "LunarLander-v3", *TINY, "--log-dir", str(root / name), *flags]) == 0
        (runs[name],) = glob.glob(str(root / name / "LunarLander-v3_*"))
    return runs


def lander_grid(run_dir: str, checkpoint: dict | None = None) -> dict:
    """One 5-step episode a cell: only the cells' marks matter here."""
    load = f"{run_dir}/a2c_last"
    return evaluate_grid(
        load_model(load), "LunarLander-v3", 1, 0, checkpoint=checkpoint or load_checkpoint(load), max_episode_steps=5
    )


# ------------------------------------------------------------------------------------------------ held out
def test_a_run_on_the_default_physics_holds_out_every_lander_cell(lander_runs):
    grid = lander_grid(lander_runs["default"])
    # Gymnasium's gravity is -10, no value of the grid (-11, -9, ..., -1): no cell is the run's physics.
    assert grid["training_ranges"] == {
        "gravity": [-10.0, -10.0],
        "wind_power": [0.0, 0.0],
        "turbulence_power": [0.0, 0.0],
    }
    assert len(grid["cells"]) == 30 and not any(cell["inside"] for cell in grid["cells"])
    assert {"env_name", "axes", "fixed", "episodes", "episodes_per_env", "seed", "deterministic"} <= set(grid)
    assert all({"gravity", "wind_power", "mean", "std", "scores"} <= set(cell) for cell in grid["cells"])
    np.testing.assert_array_equal(held_out_table(grid), np.ones((6, 5)))
    means = [cell["mean"] for cell in grid["cells"]]
    assert region_means(grid) == {"held_out": pytest.approx(np.mean(means)), "inside": None}


def test_a_uniformly_randomized_run_holds_out_no_cell(lander_runs):
    grid = lander_grid(lander_runs["uniform"])
    assert grid["training_ranges"]["gravity"] == [-11.99, -0.01] and grid["training_ranges"]["wind_power"] == [0, 20]
    assert all(cell["inside"] for cell in grid["cells"])
    assert region_means(grid)["held_out"] is None


def test_an_adr_run_s_ranges_come_from_its_checkpoint(lander_runs):
    checkpoint = load_checkpoint(f"{lander_runs['adr']}/a2c_last")
    grid = lander_grid(lander_runs["adr"], checkpoint)
    saved = checkpoint["adr"]["ranges"]
    assert grid["training_ranges"] == {name: saved[name] for name in ("gravity", "wind_power", "turbulence_power")}
    # One update leaves the ranges where they start, at the default physics: no cell is inside them yet.
    assert saved["gravity"] == [-10.0, -10.0] and not any(cell["inside"] for cell in grid["cells"])


def test_the_adr_ranges_a_checkpoint_holds_decide_the_cells_inside(lander_runs, tmp_path, capsys):
    checkpoint = load_checkpoint(f"{lander_runs['default']}/a2c_last")
    checkpoint["config"]["randomize_domain"] = "adr"
    with pytest.raises(UsageError, match="holds no ADR ranges"):
        run_training_ranges("LunarLander-v3", checkpoint)
    checkpoint["adr"] = {"ranges": {"gravity": [-10.0, -6.5], "wind_power": [0.0, 5.0], "turbulence_power": [0.0, 0.5]}}
    load = str(tmp_path / "adr_last")
    atomic_save(checkpoint, load)
    table, image = tmp_path / "grid.json", tmp_path / "grid.png"
    assert (
        main.main(
            [
                "--eval",
                "--load",
                load,
                "--physics-grid",
                "--episodes",
                "1",
                "--max-episode-frames",
                "5",
                "--json",
                str(table),
                "--out",
                str(image),
                "--no-cuda",
            ]
        )
        == 0
    )
    grid = json.loads(table.read_text())
    # Gravity -9 and -7 lie in [-10, -6.5], wind power 0 and 5 in [0, 5] (turbulence 0 in [0, 0.5]).
    assert {(c["gravity"], c["wind_power"]) for c in grid["cells"] if c["inside"]} == {
        (-9.0, 0.0),
        (-9.0, 5.0),
        (-7.0, 0.0),
        (-7.0, 5.0),
    }
    held_out = np.mean([c["mean"] for c in grid["cells"] if not c["inside"]])
    inside = np.mean([c["mean"] for c in grid["cells"] if c["inside"]])
    assert (
        f"held out (26 cells) {held_out:.2f}, inside the training physics (4 cells) {inside:.2f}"
        in capsys.readouterr().out
    )
    assert image.read_bytes()[:4] == b"\x89PNG"


# ------------------------------------------------------------------------------------------------ the floor
def test_random_play_is_reproducible_and_differs_by_cell():
    first = random_grid("LunarLander-v3", 2, 5, max_episode_steps=40)
    assert random_grid("LunarLander-v3", 2, 5, max_episode_steps=40) == first
    assert first["policy"] == "random" and first["seed"] == 5 and first["episodes_per_env"] == [1, 1]
    means = [cell["mean"] for cell in first["cells"]]
    assert len(set(means)) == 30  # each cell's physics move the lander its own way
    assert all(len(cell["scores"]) == 2 for cell in first["cells"])
    assert mean_table(first).shape == (6, 5)
    other = random_grid("LunarLander-v3", 2, 6, max_episode_steps=40)
    assert [cell["mean"] for cell in other["cells"]] != means


def test_random_continuous_actions_stay_between_the_bounds():
    envs = make_vec_env("LunarLanderContinuous-v3", 2, seed=0, vec_env="sync", max_episode_frames=5)
    taken = []
    step = envs.step
    envs.step = lambda actions: taken.append(actions) or step(actions)
    try:
        result = play_random(envs, 2, np.random.default_rng(0))
    finally:
        envs.close()
    actions = np.concatenate(taken)
    assert len(result.scores) == 2 and actions.shape == (10, 2)
    assert actions.min() >= -1 and actions.max() <= 1 and actions.std() > 0.3  # uniform on [-1, 1]: std 0.58


# ------------------------------------------------------------------------------------------------ the figures
def test_the_worst_decile_is_the_mean_of_the_worst_tenth_of_the_cells():
    assert worst_decile([float(v) for v in range(30, 0, -1)]) == 2.0  # 30 cells: the worst 3, (1 + 2 + 3) / 3
    assert worst_decile([float(v) for v in range(1, 21)]) == 1.5  # 20 cells: the worst 2
    assert worst_decile([5.0, -7.0, 3.0]) == -7.0  # under 10 cells: the worst one
    assert worst_decile([-100.0, 250.0] + [200.0] * 27 + [-40.0]) == pytest.approx(20.0)  # (-100 - 40 + 200) / 3


def test_the_fraction_of_the_ceiling_counts_from_random_play_to_the_specialist():
    # Random play crashes at -150 a game, the specialist lands at 250: 400 between them.
    assert fraction_of_ceiling(50.0, -150.0, 250.0) == 0.5  # 200 of the 400
    assert fraction_of_ceiling(-150.0, -150.0, 250.0) == 0.0
    assert fraction_of_ceiling(250.0, -150.0, 250.0) == 1.0
    assert fraction_of_ceiling(-250.0, -150.0, 250.0) == -0.25  # worse than chance
    # Where nobody lands (floor -300, the specialist -100), -150 is 150 of the 200 that can be gained.
    assert fraction_of_ceiling(-150.0, -300.0, -100.0) == 0.75
    assert math.isnan(fraction_of_ceiling(10.0, 20.0, 20.0)) and math.isnan(fraction_of_ceiling(10.0, 20.0, 15.0))


def hand_grid(means: list[list[float]], inside: list[list[bool]] | None = None) -> dict:
    """A 2 x 2 grid (gravity 5, 10 x length 0.25, 0.5) with these mean returns, the first axis in rows."""
    axes = {"gravity": [5.0, 10.0], "length": [0.25, 0.5]}
    cells = []
    for r, gravity in enumerate(axes["gravity"]):
        for c, length in enumerate(axes["length"]):
            cell = {"gravity": gravity, "length": length, "mean": means[r][c], "std": 0.0, "scores": [means[r][c]]}
            if inside is not None:
                cell["inside"] = inside[r][c]
            cells.append(cell)
    return {"env_name": "CartPole-v1", "axes": axes, "episodes": 1, "episodes_per_env": [1], "seed": 0, "cells": cells}


def hand_ceilings() -> list[dict]:
    """Specialists of three cells over random play: (5, 0.25) ceiling (100 + 140) / 2 = 120 over a floor
    of 20; (10, 0.25) ceiling 200 over 0; (10, 0.5) ceiling (30 + 50) / 2 = 40, not above its floor 40."""
    floor = hand_grid([[20.0, 0.0], [0.0, 40.0]])
    specialists = {
        "g5l25": (
            {"gravity": 5.0, "length": 0.25},
            [
                {"seed": 1, "grid": hand_grid([[100.0, 0], [0, 0]])},
                {"seed": 2, "grid": hand_grid([[140.0, 0], [0, 0]])},
            ],
        ),
        "g10l25": ({"gravity": 10.0, "length": 0.25}, [{"seed": 1, "grid": hand_grid([[0, 0], [200.0, 0]])}]),
        "g10l50": (
            {"gravity": 10.0, "length": 0.5},
            [{"seed": 1, "grid": hand_grid([[0, 0], [0, 30.0]])}, {"seed": 2, "grid": hand_grid([[0, 0], [0, 50.0]])}],
        ),
    }
    return grid_report.specialist_ceilings(specialists, floor)


def test_a_run_s_grid_figures_by_hand():
    ceilings = hand_ceilings()
    assert [(c["specialist"], c["scores"], c["ceiling"], c["floor"]) for c in ceilings] == [
        ("g5l25", [100.0, 140.0], 120.0, 20.0),
        ("g10l25", [200.0], 200.0, 0.0),
        ("g10l50", [30.0, 50.0], 40.0, 40.0),
    ]
    agent = hand_grid([[70.0, 210.0], [50.0, 90.0]], inside=[[True, True], [False, False]])
    fractions = grid_report.ceiling_fractions(agent, ceilings)
    assert [(f["gravity"], f["length"], f["score"]) for f in fractions] == [
        (5.0, 0.25, 70.0),
        (10.0, 0.25, 50.0),
        (10.0, 0.5, 90.0),
    ]
    assert fractions[0]["fraction"] == 0.5  # (70 - 20) / (120 - 20)
    assert fractions[1]["fraction"] == 0.25  # (50 - 0) / (200 - 0)
    assert math.isnan(fractions[2]["fraction"])  # the specialist did no better than chance: left out
    assert grid_report.grid_summary(agent, solved=200.0, ceilings=ceilings) == {
        "mean": 105.0,  # (70 + 210 + 50 + 90) / 4
        "worst": 50.0,
        "worst_decile": 50.0,  # 4 cells: the worst one
        "held_out": 70.0,  # the gravity 10 row: (50 + 90) / 2
        "solved": 0.25,  # 210 alone
        "ceiling_fraction": 0.375,
    }  # (0.5 + 0.25) / 2
    assert "ceiling_fraction" not in grid_report.grid_summary(agent, solved=200.0)


def test_the_table_the_maps_and_the_json_of_a_comparison_by_hand(tmp_path):
    ceilings = hand_ceilings()
    inside_all = [[True, True], [True, True]]
    results = {
        "plain": [
            {
                "seed": 1,
                "run_dir": "p1",
                "grid": hand_grid([[70.0, 210.0], [50.0, 90.0]], [[False] * 2] * 2),
                "default_physics": {"mean": 300.0},
            },
            {
                "seed": 2,
                "run_dir": "p2",
                "grid": hand_grid([[120.0, 0.0], [100.0, 10.0]], [[False] * 2] * 2),
                "default_physics": {"mean": 100.0},
            },
        ],
        "dr": [
            {
                "seed": 1,
                "run_dir": "d1",
                "grid": hand_grid([[120.0, 220.0], [150.0, 30.0]], inside_all),
                "default_physics": {"mean": 50.0},
            }
        ],
    }
    out = str(tmp_path / "cmp")
    text = grid_report.compare_grids(
        results,
        out,
        "the command",
        200.0,
        baseline="plain",
        ceilings=ceilings,
        floor=hand_grid([[20.0, 0.0], [0.0, 40.0]]),
    )
    lines = text.splitlines()
    # plain: means 105 and 57.5 (their mean 81.25); worst cells 50 and 0; every cell held out; fractions
    # seed 1 (0.5 + 0.25) / 2 = 0.375, seed 2 ((120 - 20) / 100 + (100 - 0) / 200) / 2 = 0.75.
    assert lines[4] == (
        "| plain | 1 2 | 81.2 (105.0, 57.5) | 25.0 (50.0, 0.0) | 81.2 (105.0, 57.5) "
        "| 200.0 (300.0, 100.0) | 12% (25%, 0%) | 0.56 (0.38, 0.75) | – |"
    )
    # dr: mean 130, 30 - 81.25 = +48.75 over the baseline; no held-out cell; fractions 1 and 0.75.
    assert lines[5] == "| dr | 1 | 130.0 (130.0) | 30.0 (30.0) | – | 50.0 (50.0) | 25% (25%) | 0.88 (0.88) | +48.8 |"
    report = json.loads((tmp_path / "cmp.json").read_text())
    assert [run["seed"] for run in report["plain"]] == [1, 2]  # the runs under their names, as before
    assert report["_report"]["difference"] == {"dr": [[120.0 - 95.0, 220.0 - 105.0], [150.0 - 75.0, 30.0 - 50.0]]}
    assert [f["fraction"] for f in report["dr"][0]["ceiling_fraction"]] == [1.0, 0.75, None]
    assert report["_report"]["rows"][1]["mean_minus_baseline"] == 48.75
    for image in ("cmp.png", "cmp_diff.png"):
        assert (tmp_path / image).read_bytes()[:4] == b"\x89PNG"


def test_the_heat_maps_are_written_with_held_out_cells_and_differences(tmp_path):
    grid = hand_grid([[70.0, 210.0], [50.0, 90.0]], inside=[[True, False], [False, False]])
    draw_heatmaps([grid], ["one"], str(tmp_path / "map.png"))
    draw_difference(grid, [mean_table(grid) - 100.0, np.zeros((2, 2))], ["a", "b"], str(tmp_path / "diff.png"))
    for image in ("map.png", "diff.png"):
        assert (tmp_path / image).stat().st_size > 10_000


# ------------------------------------------------------------------------------------------------ a study's runs
def test_the_grid_plays_one_run_a_seed_the_one_training_resumes(tmp_path):
    for name, stamp, last in (
        ("a_seed1", "20260101-000000", True),
        ("a_seed2", "20260101-000000", True),
        ("a_seed2", "20260102-000000", False),
    ):  # a start that stopped before a2c_last
        run_dir = tmp_path / name / f"CartPole-v1_{stamp}_seed{name[-1]}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.json").write_text("{}")
        if last:
            (run_dir / "a2c_last").write_bytes(b"")
    (tmp_path / "ab_seed1" / "CartPole-v1_20260101-000000_seed1").mkdir(parents=True)  # another configuration
    assert grid_report.grid_run_dirs(str(tmp_path), "a") == [
        (1, str(tmp_path / "a_seed1" / "CartPole-v1_20260101-000000_seed1")),
        (2, str(tmp_path / "a_seed2" / "CartPole-v1_20260101-000000_seed2")),
    ]


@pytest.fixture(scope="module")
def cartpole_runs(tmp_path_factory) -> str:
    """One-update CartPole runs as a study lays them out: plain (seeds 1, 2), dr (uniform draws) and two
    specialists, on a grid cell and off it."""
    root = tmp_path_factory.mktemp("study")
    for name, seed, flags in (
        ("plain", 1, []),
        ("plain", 2, []),
        ("dr", 1, ["--randomize-domain"]),
        ("spec", 1, ["--physics", "gravity=5,length=0.25"]),
        ("off", 1, ["--physics", "gravity=6,length=0.25"]),
    ):
        assert (
            main.main(
                [
                    "--env-name",
                    "CartPole-v1",
                    *TINY,
                    "--seed",
                    str(seed),
                    "--log-dir",
                    str(root / f"{name}_seed{seed}"),
                    *flags,
                ]
            )
            == 0
        )
    return str(root)


@pytest.fixture
def cartpole_study(cartpole_runs, tmp_path, monkeypatch) -> str:
    """A fresh copy of ``cartpole_runs``, whose main.py evaluations run in this process."""
    import shutil

    def in_process(command: list[str], check: bool) -> None:  # main.py's own command line, without a new python
        assert command[:2] == [sys.executable, os.path.join(ROOT, "main.py")] and check
        assert main.main(command[2:]) == 0

    monkeypatch.setattr(grid_report.subprocess, "run", in_process)
    return shutil.copytree(cartpole_runs, str(tmp_path / "study"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--configs", "nothing"], "no runs of nothing in --log-dir"),
        (["--configs", "../up"], "not a configuration name: '../up'"),
        (
            ["--configs", "plain", "dr", "--baseline", "spec"],
            "--baseline: spec is not one of --configs (plain dr) beside another",
        ),
        (
            ["--configs", "plain", "--baseline", "plain"],
            "--baseline: plain is not one of --configs (plain) beside another",
        ),
        (["--configs", "plain", "--specialists", "plain"], "--specialists: plain: trained on the default physics"),
        (["--configs", "plain", "--specialists", "off"], "gravity=6,length=0.25 is not a cell of the CartPole-v1 grid"),
        (["--configs", "plain", "--episodes-default", "0"], "expected a positive integer, got '0'"),
    ],
)
def test_bad_comparisons_are_refused_before_anything_plays(cartpole_study, argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        grid_report.main(["--log-dir", cartpole_study, *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not glob.glob(os.path.join(cartpole_study, "*", "*", "a2c_last_*"))


def test_each_configuration_over_its_seeds(cartpole_study):
    assert grid_report.main(["--log-dir", cartpole_study, "--configs", "plain", "dr", "--episodes", "1"]) == 0
    rows = [
        line
        for line in open(os.path.join(cartpole_study, "grid.md")).read().splitlines()
        if line.startswith(("| plain", "| dr"))
    ]
    assert rows[0].startswith("| plain | 1 2 |") and rows[1].startswith("| dr | 1 |")
    results = json.load(open(os.path.join(cartpole_study, "grid.json")))
    plain_means = [np.mean([c["mean"] for c in run["grid"]["cells"]]) for run in results["plain"]]
    assert f"{np.mean(plain_means):.1f} ({plain_means[0]:.1f}, {plain_means[1]:.1f})" in rows[0]
    plain, dr = ([column.strip() for column in row.strip("|").split("|")] for row in rows)
    # CartPole's default gravity, 9.8, is no grid value: the plain runs held out every cell, the randomized none.
    assert plain[4] == plain[2] and dr[4] == "–"
    assert plain[7] == dr[7] == "–"  # no specialists, no ceiling
    defaults = [run["default_physics"] for run in results["plain"]]
    assert [d["episodes"] for d in defaults] == [30, 30]  # --episodes-default's default, on the default physics
    assert (
        f"{np.mean([d['mean'] for d in defaults]):.1f} ({defaults[0]['mean']:.1f}, {defaults[1]['mean']:.1f})"
        in rows[0]
    )
    assert all(os.path.exists(os.path.join(run["run_dir"], "a2c_last_physics_grid.png")) for run in results["dr"])
    assert open(os.path.join(cartpole_study, "grid.png"), "rb").read()[:4] == b"\x89PNG"


def test_a_comparison_with_a_baseline_and_a_specialist(cartpole_study):
    assert (
        grid_report.main(
            [
                "--log-dir",
                cartpole_study,
                "--configs",
                "plain",
                "dr",
                "--baseline",
                "plain",
                "--specialists",
                "spec",
                "--episodes",
                "2",
                "--episodes-default",
                "3",
            ]
        )
        == 0
    )
    text = open(os.path.join(cartpole_study, "grid.md")).read()
    results = json.load(open(os.path.join(cartpole_study, "grid.json")))
    report = results["_report"]
    (ceiling,) = report["ceilings"]
    spec_grid = json.load(
        open(glob.glob(os.path.join(cartpole_study, "spec_seed1", "*", "a2c_last_physics_grid.json"))[0])
    )
    assert (ceiling["gravity"], ceiling["length"], ceiling["specialist"]) == (5.0, 0.25, "spec")
    assert ceiling["ceiling"] == grid_report.cell_mean(spec_grid, {"gravity": 5.0, "length": 0.25})
    assert ceiling["floor"] == grid_report.cell_mean(report["floor"], {"gravity": 5.0, "length": 0.25})
    assert report["floor"]["seed"] == spec_grid["seed"] and report["floor"]["policy"] == "random"
    for name in ("plain", "dr"):
        for run in results[name]:
            assert run["default_physics"]["episodes"] == 3
            assert run["summary"]["default_physics"] == run["default_physics"]["mean"]
            (cell,) = run["ceiling_fraction"]
            expected = fraction_of_ceiling(cell["score"], ceiling["floor"], ceiling["ceiling"])
            assert cell["fraction"] == (None if math.isnan(expected) else pytest.approx(expected))
    plain = np.mean([run["summary"]["mean"] for run in results["plain"]])
    dr = results["dr"][0]["summary"]["mean"]
    assert report["rows"][1]["mean_minus_baseline"] == pytest.approx(dr - plain)
    row = next(line for line in text.splitlines() if line.startswith("| dr | 1 |"))
    assert row.endswith(f"| {dr - plain:+.1f} |") and "| – |" in row  # no held-out cell after uniform draws
    assert open(os.path.join(cartpole_study, "grid_diff.png"), "rb").read()[:4] == b"\x89PNG"
