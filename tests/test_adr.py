"""Automatic domain randomization (adr.py, ``--randomize-domain adr``): the rule that moves the
ranges, worked by hand; the draws; the wrapper on a real env; the ranges in checkpoints, logs and
a resumed run; ``--physics`` (a specialist of one grid cell); and the one-line refusals."""

from __future__ import annotations

import glob
import json
import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import main
import physics
import randomize
from adr import ADR, ADRPhysics
from config import Config


def lander(**kwargs) -> ADR:
    return ADR("LunarLander-v3", **{"low": 100.0, "high": 200.0, "step": 0.05, "episodes": 2, **kwargs})


def test_ranges_start_at_the_default_physics_and_edges_at_a_bound_never_move():
    adr = lander()
    assert adr.ranges == {"gravity": [-10.0, -10.0], "wind_power": [0.0, 0.0], "turbulence_power": [0.0, 0.0]}
    # Wind power and turbulence start at their lower bound (0): only their upper edges move.
    assert adr.edges == [("gravity", 0), ("gravity", 1), ("wind_power", 1), ("turbulence_power", 1)]
    assert ADR("CartPole-v1").ranges == {"gravity": [9.8, 9.8], "masspole": [0.1, 0.1], "length": [0.5, 0.5]}


def test_an_edge_moves_out_at_the_high_threshold_and_back_below_the_low_one():
    adr = lander()
    step = 0.05 * (-0.01 - -11.99)  # 0.599: 5% of gravity's whole range
    low = ("gravity", 0)
    adr.record(low, 250.0)
    assert adr.ranges["gravity"] == [-10.0, -10.0]  # one episode of two: no decision yet
    adr.record(low, 150.0)  # mean 200 >= 200: out by one step
    assert adr.ranges["gravity"][0] == pytest.approx(-10.0 - step)
    assert adr.buffers[low] == []
    adr.record(low, 120.0)
    adr.record(low, 180.0)  # mean 150: between the thresholds, it stays
    assert adr.ranges["gravity"][0] == pytest.approx(-10.0 - step)
    adr.record(low, 50.0)
    adr.record(low, 100.0)  # mean 75 < 100: back in by one step
    assert adr.ranges["gravity"][0] == pytest.approx(-10.0)
    adr.record(low, -100.0)
    adr.record(low, -100.0)  # never past the default value
    assert adr.ranges["gravity"] == [-10.0, -10.0]
    for _ in range(10):  # out until the family's bound, no further
        adr.record(low, 300.0)
        adr.record(low, 300.0)
    assert adr.ranges["gravity"][0] == -11.99
    high = ("gravity", 1)
    adr.record(high, 200.0)
    adr.record(high, 200.0)
    assert adr.ranges["gravity"] == [-11.99, pytest.approx(-10.0 + step)]
    adr.record(("wind_power", 1), 300.0)
    adr.record(("wind_power", 1), 300.0)
    assert adr.ranges["wind_power"] == [0.0, pytest.approx(1.0)]  # 5% of 0-20


def test_draws_stay_in_the_ranges_and_a_boundary_share_plays_one_edge():
    adr = lander(boundary_prob=0.5)
    adr.ranges = {"gravity": [-11.0, -8.0], "wind_power": [0.0, 5.0], "turbulence_power": [0.0, 1.0]}
    draws = [adr.sample() for _ in range(4000)]
    at_edge = [edge for _, edge in draws if edge is not None]
    assert abs(len(at_edge) / len(draws) - 0.5) < 0.03
    assert set(at_edge) == set(adr.edges)
    for drawn, edge in draws:
        assert drawn["enable_wind"] is True  # switches stay at the default value (wind on, from calm air)
        for name, (low, high) in adr.ranges.items():
            assert low <= drawn[name] <= high
        if edge is not None:
            assert drawn[edge[0]] == adr.ranges[edge[0]][edge[1]]
    gravities = np.array([drawn["gravity"] for drawn, edge in draws if edge is None])
    assert gravities.min() < -10.8 and gravities.max() > -8.2  # the whole range is drawn


def test_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    adr = lander(seed=3)
    for _ in range(7):
        physics, edge = adr.sample()
        if edge is not None:
            adr.record(edge, 300.0)
    path = tmp_path / "state.pt"
    torch.save({"adr": adr.state_dict()}, path)
    again = lander(seed=99)
    again.load_state_dict(torch.load(path, weights_only=True)["adr"])
    assert again.ranges == adr.ranges and again.buffers == adr.buffers
    assert [again.sample() for _ in range(20)] == [adr.sample() for _ in range(20)]


def test_the_wrapper_applies_the_draw_and_reports_returns_at_an_edge():
    adr = ADR(
        "CartPole-v1", low=-2000.0, high=-1000.0, episodes=1, boundary_prob=1.0, seed=0
    )  # every edge episode widens
    env = ADRPhysics(gym.make("CartPole-v1"), "CartPole-v1", adr)
    obs, info = env.reset(seed=0)
    edge = env.edge
    assert info["physics"] == env.physics and env.physics[edge[0]] == adr.ranges[edge[0]][edge[1]]
    cart = env.unwrapped
    for name in ("gravity", "masspole", "length"):
        assert getattr(cart, name) == env.physics[name]
    assert cart.polemass_length == pytest.approx(env.physics["masspole"] * env.physics["length"])
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        total += reward
        done = terminated or truncated
    name, side = edge
    assert adr.ranges[name][side] != physics.FAMILIES["CartPole-v1"].nominal[name]  # it moved out
    assert env.episode_return == total and env.edge is None


def run(tmp_path, *flags: str) -> str:
    assert (
        main.main(
            [
                "--env-name",
                "CartPole-v1",
                "--algo",
                "ppo",
                "--num-envs",
                "4",
                "--rollout-size",
                "128",
                "--minibatches",
                "4",
                "--epochs",
                "1",
                "--threads",
                "1",
                "--no-cuda",
                "--no-progress",
                "--log-dir",
                str(tmp_path),
                *flags,
            ]
        )
        == 0
    )
    return sorted(glob.glob(f"{tmp_path}/CartPole-v1_*"))[-1]


def test_an_adr_run_logs_saves_and_resumes_its_ranges(tmp_path):
    widen = [
        "--randomize-domain",
        "adr",
        "--adr-low",
        "-2000",
        "--adr-high",
        "-1000",
        "--adr-episodes",
        "1",
        "--log-interval",
        "1",
    ]
    run_dir = run(tmp_path, "--num-updates", "4", *widen)
    saved = torch.load(f"{run_dir}/a2c_last", weights_only=True)
    ranges = saved["adr"]["ranges"]
    assert any(high > low for low, high in ranges.values())  # every edge episode widened its edge
    assert json.load(open(f"{run_dir}/config.json"))["adr"]["high"] == -1000
    scalars = EventAccumulator(run_dir).Reload().Tags()["scalars"]
    assert {"adr/gravity_low", "adr/gravity_high", "adr/length_high"} <= set(scalars)
    assert (
        main.main(
            ["--resume", f"{run_dir}/a2c_last", "--num-updates", "6", "--threads", "1", "--no-cuda", "--no-progress"]
        )
        == 0
    )
    resumed = torch.load(f"{run_dir}/a2c_last", weights_only=True)["adr"]["ranges"]
    for name, (low, high) in ranges.items():  # carried on, not started again from the default physics
        assert resumed[name][0] <= low and resumed[name][1] >= high
    # No step logged twice: the resumed run's curve goes on after the first's (the two event files may be
    # read in either order, as their names sort by a per-process counter within one second).
    steps = [e.step for e in EventAccumulator(run_dir).Reload().Scalars("adr/gravity_high")]
    assert len(steps) == len(set(steps)) and max(steps) > 2048


def test_a_specialist_trains_on_its_cell(tmp_path):
    run_dir = run(tmp_path, "--num-updates", "1", "--physics", "gravity=12.5,length=0.75", "--histogram-interval", "1")
    assert json.load(open(f"{run_dir}/config.json"))["physics"] == "gravity=12.5,length=0.75"
    histogram = EventAccumulator(run_dir, size_guidance={"histograms": 0}).Reload().Histograms("physics/length")
    assert histogram[0].histogram_value.min == histogram[0].histogram_value.max == 0.75
    assert randomize.parse_physics("CartPole-v1", "gravity=12.5,length=0.75") == {
        "gravity": 12.5,
        "masspole": 0.1,
        "length": 0.75,
    }


def test_an_older_config_reads_its_switch_as_uniform_draws():
    assert Config.from_dict({"randomize_domain": True}).randomize_domain == "uniform"
    assert Config.from_dict({"randomize_domain": False}).randomize_domain == ""


def test_the_training_ranges_of_each_kind_of_run():
    assert randomize.training_ranges("LunarLander-v3") == {
        "gravity": (-10.0, -10.0),
        "wind_power": (0.0, 0.0),
        "turbulence_power": (0.0, 0.0),
    }
    assert randomize.training_ranges("CartPole-v1", "uniform")["length"] == (0.25, 1.0)
    assert randomize.training_ranges(
        "LunarLander-v3", "adr", adr_ranges={"gravity": [-11, -8], "wind_power": [0, 4], "turbulence_power": [0, 0]}
    )["wind_power"] == (0.0, 4.0)
    cell = randomize.training_ranges("LunarLander-v3", physics="gravity=-3,wind_power=15")
    assert cell["gravity"] == (-3.0, -3.0) and cell["wind_power"] == (15.0, 15.0)
    assert randomize.inside({"gravity": -9.0, "wind_power": 4.0}, {"gravity": (-11, -8), "wind_power": (0, 4)})
    assert not randomize.inside({"gravity": -7.0, "wind_power": 0.0}, {"gravity": (-11, -8), "wind_power": (0, 4)})


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--randomize-domain", "adr", "--adr-low", "300", "--adr-high", "200"], "is above --adr-high"),
        (["--adr-step", "0.1"], "are for --randomize-domain adr"),
        (["--randomize-domain", "adr", "--adr-step", "0"], "must be above 0"),
        (["--randomize-domain", "adr", "--randomize-every", "never"], "--randomize-every is for"),
        (["--randomize-domain", "adr", "--vec-env", "async"], "--vec-env sync"),
        (["--randomize-domain", "adr", "--algo", "grpo"], "is for --algo a2c and ppo"),
        (["--physics", "gravity=-3", "--randomize-domain"], "give one"),
        (["--physics", "gravity"], "NAME=NUMBER"),
        (["--physics", "gravity=nan"], "NAME=NUMBER"),
        (["--physics", "mass=3"], "has no randomized physics mass"),
        (["--physics", "gravity=20"], "outside"),
    ],
)
def test_bad_adr_and_physics_input_is_one_line(tmp_path, capsys, flags, message):
    env = "CartPole-v1" if "--physics" in flags and "gravity=-3" not in flags else "LunarLander-v3"
    code = main.main(
        ["--env-name", env, "--num-updates", "1", "--log-dir", str(tmp_path), "--no-progress", "--no-cuda", *flags]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert not os.listdir(tmp_path)  # refused before a run directory was made


def test_adr_needs_an_env_with_a_family(tmp_path, capsys):
    assert main.main(["--env-name", "Pendulum-v1", "--randomize-domain", "adr", "--log-dir", str(tmp_path)]) == 2
    assert "--randomize-domain knows" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main.main(["--env-name", "CartPole-v1", "--randomize-domain", "adr", "--adr-high", "inf"])
    assert exit_info.value.code == 2


def test_a_recurrent_ppo_agent_trains_on_adr_physics(tmp_path):
    """The recurrent core on vector envs with ADR: PPO's minibatches of whole envs, the layer-normalized
    LSTM over the MLP, and the ranges saved beside it."""
    run_dir = run(
        tmp_path,
        "--num-updates",
        "2",
        "--randomize-domain",
        "adr",
        "--recurrent",
        "--lstm-norm",
        "--hidden-size",
        "8",
        "--minibatches",
        "2",
    )
    saved = torch.load(f"{run_dir}/a2c_last", weights_only=True)
    assert saved["model_spec"]["recurrent"] and saved["model_spec"]["lstm_norm"]
    assert set(saved["adr"]["ranges"]) == {"gravity", "masspole", "length"}
