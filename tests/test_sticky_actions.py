"""Sticky actions in training (``--sticky-actions P``, Machado et al. 2018): the emulator of every env
path gets the same probability, the id's own by default; the run keeps it in its settings, fixes it
on resume and says it in its first lines; a probability outside [0, 1) is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ale_py.vector_env as ale_vector
import numpy as np
import pytest

from ale_vec_env import AleVecEnv
from checkpoints import upgraded
from envs import id_sticky_actions, make_vec_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", *args], cwd=REPO, capture_output=True, text=True, timeout=240)


def emulator_stickiness(venv, path: str) -> list[float]:
    """What each env's emulator was set to. SB3's in-process envs are asked directly; a worker
    process's emulator cannot be sent back, so its gymnasium spec (the arguments its emulator
    was built with) is read instead."""
    while hasattr(venv, "venv"):  # VecTransposeImage -> VecFrameStack -> the vector env
        venv = venv.venv
    if path == "dummy":
        return [env.unwrapped.ale.getFloat("repeat_action_probability") for env in venv.envs]
    return [spec.kwargs["repeat_action_probability"] for spec in venv.get_attr("spec")]


def test_each_id_has_its_own_default():
    assert id_sticky_actions("PongNoFrameskip-v4") == 0.0
    assert id_sticky_actions("ALE/Pong-v5") == 0.25


@pytest.mark.parametrize("path", ["dummy", "subproc"])
@pytest.mark.parametrize(
    "env_name, sticky, expected",
    [("ALE/Pong-v5", None, 0.25), ("PongNoFrameskip-v4", 0.1, 0.1)],
)
def test_sb3_paths_set_the_emulator(path, env_name, sticky, expected):
    venv = make_vec_env(env_name, 2, seed=1, vec_env=path, sticky_actions=sticky)
    try:
        assert emulator_stickiness(venv, path) == pytest.approx([expected, expected])
    finally:
        venv.close()


@pytest.mark.parametrize(
    "env_name, sticky, expected",
    [("ALE/Pong-v5", None, 0.25), ("PongNoFrameskip-v4", 0.1, 0.1)],
)
def test_ale_path_builds_its_emulator_with_the_probability(monkeypatch, env_name, sticky, expected):
    # The C++ vector env keeps its settings to itself: what it was built with is read at its constructor.
    built = []
    original = ale_vector.AtariVectorEnv

    def spy(*args, **kwargs):
        built.append(kwargs["repeat_action_probability"])
        return original(*args, **kwargs)

    monkeypatch.setattr(ale_vector, "AtariVectorEnv", spy)
    venv = make_vec_env(env_name, 2, seed=1, vec_env="ale", sticky_actions=sticky)
    venv.close()
    assert built == [pytest.approx(expected)]


@pytest.mark.parametrize("sticky, diverge", [(0.0, False), (0.25, True)])
def test_ale_path_emulator_repeats_actions_only_when_sticky(sticky, diverge):
    # Two games from different seeds, no no-op starts, the same actions: a deterministic emulator
    # shows both the same screens; with sticky actions each repeats at its own random frames.
    venv = AleVecEnv("PongNoFrameskip-v4", 2, seed=5, noop_max=0, num_threads=1, repeat_action_probability=sticky)
    rng = np.random.default_rng(0)
    differed = False
    try:
        venv.reset()
        for _ in range(60):
            action = rng.integers(venv.action_space.n)
            obs, _, _, _ = venv.step(np.array([action, action]))
            differed |= not np.array_equal(obs[0], obs[1])
    finally:
        venv.close()
    assert differed == diverge


def test_non_atari_envs_refuse_sticky_actions():
    from utils import UsageError

    with pytest.raises(UsageError, match="--sticky-actions is for Atari games"):
        make_vec_env("CartPole-v1", 2, sticky_actions=0.1)


@pytest.mark.parametrize("value", ["1", "-0.1", "nan", "high"])
def test_out_of_range_is_refused_in_one_line(value, capsys):
    import main as cli

    with pytest.raises(SystemExit) as stopped:
        cli.main(["--sticky-actions", value])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err.count("\n") == 1 and "probability in [0, 1)" in err


def test_a_checkpoint_without_the_setting_trained_under_its_ids_own():
    for env_name, expected in (("PongNoFrameskip-v4", 0.0), ("ALE/Breakout-v5", 0.25)):
        data = upgraded({"format": "recurrent-a2c/2", "env_name": env_name, "config": {"env_name": env_name}})
        assert data["config"]["sticky_actions"] == expected
    kept = upgraded({"format": "recurrent-a2c/2", "env_name": "ALE/Pong-v5", "config": {"sticky_actions": 0.1}})
    assert kept["config"]["sticky_actions"] == 0.1


def test_a_run_says_and_keeps_its_protocol_and_resume_fixes_it(tmp_path):
    small = [
        "--num-envs",
        "2",
        "--num-updates",
        "2",
        "--no-progress",
        "--no-cuda",
        "--threads",
        "1",
        "--log-dir",
        str(tmp_path),
    ]
    result = run_cli("--env-name", "ALE/Pong-v5", *small)
    assert result.returncode == 0, result.stderr
    head = result.stdout.splitlines()[:4]
    assert any(line.startswith("protocol: sticky actions 0.25") for line in head), head
    (run_dir,) = [os.path.join(tmp_path, name) for name in os.listdir(tmp_path)]
    with open(os.path.join(run_dir, "config.json")) as f:
        assert json.load(f)["sticky_actions"] == 0.25

    refused = run_cli("--resume", os.path.join(run_dir, "a2c_last"), "--sticky-actions", "0", "--num-updates", "3")
    assert refused.returncode == 2 and "--sticky-actions 0.25" in refused.stderr
    resumed = run_cli(
        "--resume",
        os.path.join(run_dir, "a2c_last"),
        "--num-updates",
        "3",
        "--no-progress",
        "--no-cuda",
        "--threads",
        "1",
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "protocol: sticky actions 0.25" in resumed.stdout
