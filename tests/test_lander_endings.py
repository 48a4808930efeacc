"""bench/lander_endings.py: how LunarLander games end, read from the env itself."""
from __future__ import annotations

import glob
from types import SimpleNamespace

import pytest

import main
from bench import lander_endings

pytestmark = pytest.mark.usefixtures("torch_single_thread")

ENDS = ("rest", "crash", "off screen", "time limit")


def fake_env(awake: bool) -> SimpleNamespace:
    return SimpleNamespace(unwrapped=SimpleNamespace(lander=SimpleNamespace(awake=awake)))


def test_each_end_is_the_envs_own_reason():
    assert lander_endings.ending(fake_env(awake=True), terminated=False, x=0.0) == "time limit"
    assert lander_endings.ending(fake_env(awake=True), terminated=True, x=-1.0) == "off screen"
    assert lander_endings.ending(fake_env(awake=True), terminated=True, x=1.2) == "off screen"
    assert lander_endings.ending(fake_env(awake=False), terminated=True, x=0.1) == "rest"
    assert lander_endings.ending(fake_env(awake=True), terminated=True, x=0.1) == "crash"


def test_a_checkpoint_plays_its_games_and_every_game_is_counted_once(tmp_path, capsys):
    assert main.main(["--env-name", "LunarLander-v3", "--num-envs", "2", "--rollout-size", "5", "--num-updates", "1",
                      "--normalize-obs", "--no-progress", "--no-cuda", "--threads", "1",
                      "--log-dir", str(tmp_path)]) == 0
    (run,) = glob.glob(str(tmp_path / "LunarLander-v3_*"))
    capsys.readouterr()
    assert lander_endings.main([f"{run}/a2c_last", "--episodes", "3", "--seed", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    games = [line for line in lines if line.strip().startswith("game ")]
    assert [g.split(":")[0].strip() for g in games] == ["game 5", "game 6", "game 7"]
    assert all(any(f" {end} " in g for end in ENDS) for g in games)
    summary = lines[-1]
    counts = [int(summary.split(f"{end} ")[1].split(";")[0].split(",")[0]) for end in ENDS]
    assert sum(counts) == 3
    # The same games again give the same numbers (fixed env seeds and sampling seed).
    assert lander_endings.main([f"{run}/a2c_last", "--episodes", "3", "--seed", "5"]) == 0
    assert capsys.readouterr().out.splitlines() == lines


def test_another_envs_checkpoint_is_refused_in_one_line(tmp_path, capsys):
    assert main.main(["--env-name", "CartPole-v1", "--num-envs", "2", "--num-updates", "1", "--no-progress",
                      "--no-cuda", "--threads", "1", "--log-dir", str(tmp_path)]) == 0
    (run,) = glob.glob(str(tmp_path / "CartPole-v1_*"))
    capsys.readouterr()
    assert lander_endings.main([f"{run}/a2c_last"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not LunarLander-v3" in err
    assert lander_endings.main([str(tmp_path / "missing")]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
