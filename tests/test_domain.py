"""Vector-observation training beyond the defaults: observation normalization (saved, frozen in
evaluation, restored on resume), domain randomization through the env factory and the runner,
and the physics-grid evaluation."""

import glob
import json
import os

import numpy as np
import pytest
import torch

import main
import recipes
from checkpoints import load_checkpoint
from envs import make_vec_env
from normalize import load as load_normalizer
from normalize import normalized

pytestmark = pytest.mark.usefixtures("torch_single_thread")

SMALL = ["--num-envs", "2", "--rollout-size", "5", "--no-progress", "--no-cuda", "--threads", "1"]


def train(tmp_path, *flags: str) -> str:
    assert main.main(["--env-name", "CartPole-v1", *SMALL, "--log-dir", str(tmp_path), *flags]) == 0
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1_*"))
    return run_dir


# ------------------------------------------------------------------------------------------------ normalization
def test_normalized_observations_by_hand():
    """(obs - mean) / sqrt(var + 1e-8), clipped to +-10, with frozen statistics: a variance of
    1e-4 multiplies by about 100 (a cart at 0.03 becomes 3); anything beyond 0.1 is clipped."""
    envs = normalized(make_vec_env("CartPole-v1", 2, seed=3, vec_env="sync"), obs=True, reward=False, training=False)
    raw_envs = make_vec_env("CartPole-v1", 2, seed=3, vec_env="sync")
    try:
        stats = {
            "mean": torch.zeros(4, dtype=torch.float64),
            "var": torch.full((4,), 1e-4, dtype=torch.float64),
            "count": 10.0,
        }
        load_normalizer(envs, {"obs_normalizer": stats})
        obs, raw = envs.reset(), raw_envs.reset()
        expected = np.clip(raw / np.sqrt(1e-4 + 1e-8), -10, 10)
        np.testing.assert_allclose(obs, expected, rtol=1e-5)
        assert float(envs.obs_rms.count) == 10.0  # frozen: a reset did not count
    finally:
        envs.close()
        raw_envs.close()


def test_normalize_obs_is_saved_frozen_in_evaluation_and_restored_on_resume(tmp_path, monkeypatch):
    run_dir = train(tmp_path, "--num-updates", "3", "--normalize-obs", "--normalize-reward")
    last = load_checkpoint(f"{run_dir}/a2c_last")
    # The reset's 2 observations and 3 updates x 5 steps x 2 envs, after SB3's initial count of 1e-4.
    assert last["obs_normalizer"]["count"] == pytest.approx(32 + 1e-4)
    assert last["obs_normalizer"]["mean"].shape == (4,) and "reward_normalizer" in last
    best = load_checkpoint(f"{run_dir}/a2c_best_loss")  # a weights-only file plays with them too
    assert "obs_normalizer" in best

    import evaluate
    import play

    seen = []
    real = evaluate.evaluate
    monkeypatch.setattr(
        play,
        "evaluate",
        lambda model, envs, *a, **k: (
            seen.append((envs.obs_rms.mean.copy(), envs.training, envs.norm_reward)) or real(model, envs, *a, **k)
        ),
    )
    assert main.main(["--no-cuda", "--eval", "--load", f"{run_dir}/a2c_last", "--episodes", "2", "--no-cuda"]) == 0
    ((mean, training, norm_reward),) = seen
    np.testing.assert_array_equal(mean, last["obs_normalizer"]["mean"].numpy())
    assert not training and not norm_reward  # frozen, and the scores are raw

    assert main.main(["--no-cuda", "--resume", f"{run_dir}/a2c_last", "--num-updates", "5", "--no-progress"]) == 0
    resumed = load_checkpoint(f"{run_dir}/a2c_last")
    # Carried on from the saved statistics: + the new reset's 2 observations + 2 updates x 10.
    assert resumed["obs_normalizer"]["count"] == pytest.approx(32 + 2 + 20 + 1e-4)


# ------------------------------------------------------------------------------------------------ randomization
def test_physics_come_from_the_seed_once_or_at_every_episode():
    def first_physics(every):
        envs = make_vec_env("CartPole-v1", 3, seed=9, vec_env="sync", randomize=every)
        envs.reset()
        physics = [info["physics"] for info in envs.reset_infos]
        return envs, physics

    for every in ("never", "episode"):
        envs, physics = first_physics(every)
        again = first_physics(every)
        again[0].close()
        assert physics == again[1]  # reproducible from the seed
        assert len({p["gravity"] for p in physics}) == 3  # each env its own
        later = {i: [] for i in range(3)}
        for _ in range(200):  # random play drops the pole within a few dozen steps
            _, _, dones, infos = envs.step(np.array([envs.action_space.sample() for _ in range(3)]))
            for i in np.flatnonzero(dones):
                later[int(i)].append(infos[i]["physics"])
        envs.close()
        assert all(later.values())
        for i, drawn in later.items():
            if every == "never":
                assert all(p == physics[i] for p in drawn)
            else:
                assert all(p != physics[i] for p in drawn) and len({p["gravity"] for p in drawn}) == len(drawn)


def test_a_randomized_run_logs_the_physics_it_drew(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = train(tmp_path, "--num-updates", "40", "--randomize-domain", "--histogram-interval", "20")
    events = EventAccumulator(run_dir, size_guidance={"histograms": 0})
    events.Reload()
    assert {"physics/gravity", "physics/masspole", "physics/length"} <= set(events.Tags()["histograms"])
    histograms = events.Histograms("physics/gravity")
    assert len(histograms) == 2
    first = histograms[0].histogram_value
    assert first.num >= 2 and 5 <= first.min <= first.max < 15  # the reset's draws and those since
    assert json.load(open(f"{run_dir}/config.json"))["randomize_domain"] == "uniform"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--env-name", "Pendulum-v1", "--randomize-domain"],
            "--randomize-domain knows LunarLander-v3, LunarLanderContinuous-v3, CartPole-v1; not Pendulum-v1",
        ),
        (["--env-name", "PongNoFrameskip-v4", "--randomize-domain"], "--randomize-domain knows"),
        (
            ["--env-name", "PongNoFrameskip-v4", "--normalize-obs"],
            "--normalize-obs and --normalize-reward are for vector",
        ),
        (["--env-name", "CartPole-v1", "--randomize-every", "sometimes"], "invalid choice: 'sometimes'"),
        (["--physics-grid"], "--physics-grid is for --eval"),
    ],
)
def test_bad_domain_input_is_one_line(one_line_error, tmp_path, argv, message):
    assert message in one_line_error([*argv, "--log-dir", str(tmp_path), "--num-updates", "1"])
    assert not os.listdir(tmp_path)


# ------------------------------------------------------------------------------------------------ physics grid
def test_physics_grid_plays_every_cell_and_writes_a_table_and_a_heat_map(tmp_path, one_line_error):
    run_dir = train(tmp_path, "--num-updates", "3", "--normalize-obs")
    out, table = tmp_path / "grid.png", tmp_path / "grid.json"
    assert (
        main.main(
            [
                "--no-cuda",
                "--eval",
                "--load",
                f"{run_dir}/a2c_last",
                "--physics-grid",
                "--episodes",
                "2",
                "--max-episode-frames",
                "30",
                "--json",
                str(table),
                "--out",
                str(out),
                "--no-cuda",
            ]
        )
        == 0
    )
    grid = json.load(open(table))
    assert grid["axes"] == {"gravity": [5.0, 7.5, 10.0, 12.5, 15.0], "length": [0.25, 0.5, 0.75, 1.0]}
    assert [(c["gravity"], c["length"]) for c in grid["cells"]] == [
        (g, length) for g in grid["axes"]["gravity"] for length in grid["axes"]["length"]
    ]
    for cell in grid["cells"]:
        assert len(cell["scores"]) == 2 and all(1 <= s <= 30 for s in cell["scores"])
        assert cell["mean"] == pytest.approx(np.mean(cell["scores"]))
    # A pole twice as long at low gravity falls more slowly than a short one at high gravity.
    cells = {(c["gravity"], c["length"]): c["mean"] for c in grid["cells"]}
    assert cells[(5.0, 1.0)] >= cells[(15.0, 0.25)]
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"

    # Pendulum has no grid: refused in one line, before playing.
    assert main.main(["--env-name", "Pendulum-v1", *SMALL, "--log-dir", str(tmp_path / "p"), "--num-updates", "1"]) == 0
    (pendulum,) = glob.glob(str(tmp_path / "p" / "Pendulum-v1_*"))
    assert (
        "--physics-grid knows LunarLander-v3, LunarLanderContinuous-v3, CartPole-v1; not Pendulum-v1"
        in one_line_error(
            ["--eval", "--load", f"{pendulum}/a2c_last", "--physics-grid", "--out", str(tmp_path / "x.png")]
        )
    )
    assert not (tmp_path / "x.png").exists()


def test_a_grid_cell_plays_its_physics():
    from randomize import cell_kwargs

    physics = cell_kwargs("CartPole-v1", gravity=12.5, length=0.75)
    envs = make_vec_env("CartPole-v1", 2, seed=0, vec_env="sync", physics=physics)
    try:
        envs.reset()
        assert [info["physics"] for info in envs.reset_infos] == [physics, physics]
        assert list(envs.get_attr("gravity")) == [12.5, 12.5] and list(envs.get_attr("length")) == [0.75, 0.75]
        assert list(envs.get_attr("polemass_length")) == pytest.approx([0.1 * 0.75] * 2)
    finally:
        envs.close()


# ------------------------------------------------------------------------------------------------ defaults
def test_vector_envs_get_their_family_defaults_and_a_typed_flag_wins():
    from config import Config

    config, _, typed = main.parse_args(["--env-name", "LunarLander-v3"])
    lander = recipes.with_env_defaults(config, typed)
    assert (
        lander.recurrent,
        lander.num_envs,
        lander.gamma,
        lander.gae_lambda,
        lander.lr,
        lander.lr_schedule,
        lander.entropy_coeff,
        lander.total_steps,
    ) == (False, 192, 0.999, 0.98, 2.5e-3, "linear", 1e-5, 1_000_320)
    config, _, typed = main.parse_args(["--env-name", "LunarLanderContinuous-v3", "--no-normalize-reward"])
    continuous = recipes.with_env_defaults(config, typed)
    assert (
        continuous.num_envs,
        continuous.rollout_size,
        continuous.total_steps,
        continuous.gae_lambda,
        continuous.entropy_coeff,
        continuous.log_std_init,
        continuous.sde,
        continuous.normalize_obs,
        continuous.normalize_reward,
        continuous.lr,
        continuous.lr_schedule,
    ) == (4, 8, 5_000_000, 0.9, 0.0, -2.0, True, True, False, 7e-4, "linear")
    config, _, typed = main.parse_args(["--env-name", "Pendulum-v1"])
    pendulum = recipes.with_env_defaults(config, typed)
    assert (pendulum.sde, pendulum.gamma, pendulum.total_steps, pendulum.num_envs) == (True, 0.9, 1_000_000, 8)
    config, _, typed = main.parse_args(["--env-name", "BipedalWalker-v3"])
    walker = recipes.with_env_defaults(config, typed)
    assert (
        walker.sde,
        walker.num_envs,
        walker.rollout_size,
        walker.total_steps,
        walker.value_coeff,
        walker.lr,
        walker.normalize_obs,
        walker.normalize_reward,
    ) == (True, 16, 8, 5_000_064, 0.4, 9.6e-4, True, True)
    config, _, typed = main.parse_args(["--env-name", "LunarLanderContinuous-v3", "--algo", "grpo"])
    grpo = recipes.with_env_defaults(config, typed)  # GRPO has no critic whose targets reward normalization would scale
    assert (grpo.normalize_reward, grpo.normalize_obs, grpo.critic) == (False, True, False)
    config, _, typed = main.parse_args(["--env-name", "LunarLander-v3", "--num-envs", "4"])
    assert recipes.with_env_defaults(config, typed).num_envs == 4
    config, _, typed = main.parse_args(["--env-name", "CartPole-v1", "--recurrent"])
    cartpole = recipes.with_env_defaults(config, typed)
    assert (cartpole.recurrent, cartpole.num_envs, cartpole.entropy_coeff, cartpole.gamma) == (True, 8, 0.0, 0.99)
    config, _, typed = main.parse_args(["--env-name", "PongNoFrameskip-v4"])
    assert recipes.with_env_defaults(config, typed) == Config()
