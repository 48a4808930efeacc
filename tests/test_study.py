"""bench/study.py: configurations, update counts, steps-to-reach, the table, runs stopped at a deadline,
and one tiny study end to end."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from bench import study

pytestmark = pytest.mark.usefixtures("torch_single_thread")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------------------ configurations
def test_a_configuration_is_a_name_and_its_main_py_flags():
    assert study.parse_config("roll20=--rollout-size 20") == ("roll20", ["--rollout-size", "20"])
    assert study.parse_config("adam1e-4=--optimizer adam --lr 1e-4") == (
        "adam1e-4",
        ["--optimizer", "adam", "--lr", "1e-4"],
    )
    assert study.parse_config("default=") == ("default", [])
    assert study.parse_config("clip0.5=--max-grad-norm 0.5") == ("clip0.5", ["--max-grad-norm", "0.5"])


@pytest.mark.parametrize(
    "text", ["roll20", "=--rollout-size 20", "../up=", "a/b=", "two words=", ".hidden=", "quote=--env-name 'Pong"]
)
def test_a_configuration_without_a_plain_name_or_with_unsplittable_flags_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        study.parse_config(text)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--seed", "3"], "--seed is set by the study (use its --seeds)"),
        (["--log-dir", "x"], "--log-dir is set by the study"),
        (["--num-updates", "9"], "--num-updates is set by the study (use its --steps)"),
        (["--env-name", "BreakoutNoFrameskip-v4"], "--env-name is set by the study"),
        (["--resume", "runs/x/a2c_last"], "--resume is not a training flag"),
        (["--no-tensorboard"], "--no-tensorboard leaves the report nothing to read"),
        (["--lr", "-1"], "argument --lr: expected a positive number, got '-1'"),
        (["--nope"], "unrecognized arguments: --nope"),
    ],
)
def test_flags_main_py_refuses_or_the_study_sets_itself_are_refused(flags, message):
    with pytest.raises(ValueError) as exc:
        study.check_flags(flags)
    assert message in str(exc.value)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--configs", "a=", "a=--lr 1e-3"], "--configs: a name is given twice: a"),
        (["--configs", "a=--seed 3"], "configuration a: --seed is set by the study"),
        (["--configs", "a=", "--flags=--lr 0"], "configuration a: argument --lr: expected a positive number"),
        (["--configs", "oops"], "expected NAME=FLAGS"),
        (["--configs", "a=", "--seeds", "1", "1"], "--seeds: a seed is given twice"),
        (["--configs", "a=", "--steps", "0"], "argument --steps: expected a positive integer, got '0'"),
        ([], "the following arguments are required: --configs"),
        (["--configs", "a=", "--parallel", "0"], "expected a positive integer, got '0'"),
    ],
)
def test_the_command_line_refuses_bad_studies_before_training(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        study.main([*argv, "--log-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not os.listdir(tmp_path)  # nothing started


# ------------------------------------------------------------------------------------------------ update counts
def test_updates_cover_the_step_budget_with_main_py_s_envs_and_rollout_length():
    assert study.budget(1_500_000, []) == (18_750, [])  # 16 envs x 5 steps
    assert study.budget(1_500_000, ["--rollout-size", "20"]) == (4_688, [])  # 1,500,160 steps: rounded up
    assert study.budget(1_500_000, ["--num-envs", "8"])[0] == 37_500
    assert study.budget(1_500_000, ["--num-envs", "8", "--rollout-size", "20"])[0] == 9_375
    # The common flags come first and a configuration's own after them: the last one given wins.
    assert study.budget(1_500_000, ["--rollout-size", "10", "--lr", "1e-3", "--rollout-size", "20"])[0] == 4_688
    assert study.budget(40, ["--num-envs", "2"])[0] == 4
    assert study.budget(41, ["--num-envs", "2"])[0] == 5
    assert study.budget(1, [])[0] == 1
    assert study.budget(1_000_000, [], "CartPole-v1") == (25_000, [])  # its own default: 8 envs x 5 steps
    # GRPO's rounds vary in length: its budget is a step limit, and the update count no bound.
    updates, limit = study.budget(300_000, ["--algo", "grpo"], "CartPole-v1")
    assert updates >= 300_000 and limit == ["--max-env-steps", "300000"]


def test_a_run_s_command_fixes_the_game_seed_thread_and_updates_and_puts_the_flags_last():
    flags = ["--num-envs", "2", "--rollout-size", "20"]
    run = study.Run("roll20", 7, flags, 9, "out/roll20_seed7")
    new = study.run_command(run, "PongNoFrameskip-v4")
    assert new[0] == sys.executable and new[1] == os.path.join(ROOT, "main.py")
    assert new[2:] == [
        "--env-name",
        "PongNoFrameskip-v4",
        "--threads",
        "1",
        "--seed",
        "7",
        "--no-progress",
        "--log-dir",
        "out/roll20_seed7",
        "--num-updates",
        "9",
        *flags,
    ]
    # A stopped run carries on in its own run directory: the checkpoint says where, so no --log-dir.
    resumed = study.run_command(run, "PongNoFrameskip-v4", resume="out/roll20_seed7/run/a2c_last")
    assert resumed[2:4] == ["--resume", "out/roll20_seed7/run/a2c_last"] and "--log-dir" not in resumed
    assert resumed[-len(flags) - 2 :] == ["--num-updates", "9", *flags]


# ------------------------------------------------------------------------------------------------ the figures
def test_steps_to_reach_is_the_first_step_whose_mean_reaches_the_score():
    steps = np.array([100, 200, 300, 400, 500])
    means = np.array([-21.0, -18.0, -14.0, -16.0, 19.0])
    assert study.steps_to_reach(steps, means, -15) == 300  # not undone by the dip after it
    assert study.steps_to_reach(steps, means, -14) == 300  # reaching means at least
    assert study.steps_to_reach(steps, means, -21) == 100
    assert study.steps_to_reach(steps, means, 18) == 500
    assert study.steps_to_reach(steps, means, 20) is None  # never reached
    assert study.steps_to_reach(np.zeros(0, dtype=np.int64), np.zeros(0), -21) is None  # no game ended


def test_the_tail_mean_averages_the_last_tenth_of_the_run():
    steps = np.arange(10, 101, 10)
    values = np.arange(10, dtype=float)
    assert study.tail_mean(steps, values, end=100) == 8.5  # steps 90 and 100
    assert study.tail_mean(steps, values, end=100, fraction=0.5) == 6.5  # steps 50 .. 100
    assert study.tail_mean(np.array([10]), np.array([0.25]), end=100) == 0.25  # nothing that late: the last
    assert np.isnan(study.tail_mean(np.zeros(0), np.zeros(0), end=100))


def scalars(means: list[tuple[int, float]], ev: list[tuple[int, float]], speeds: list[float]) -> dict:
    """Hand-made `plots.load_scalars` output of one run."""

    def series(points):
        return (np.array([s for s, _ in points], dtype=np.int64), np.array([v for _, v in points], dtype=float))

    return {
        study.RETURN_TAG: series(means),
        study.EXPLAINED_VARIANCE_TAG: series(ev),
        study.SPEED_TAG: series(list(zip(range(100, 100 * len(speeds) + 1, 100), speeds))),
    }


def test_a_configuration_s_row_from_its_runs_scalars():
    reach = [-15.0, 18.0]
    fast = study.summarize_run(
        scalars([(50, -21.0), (400, -10.0), (900, 19.0)], [(500, 0.1), (950, 0.5), (1000, 0.7)], [100.0, 300.0]), reach
    )
    assert fast == {
        "steps": 1000,
        "reach": [400, 900],
        "final": 19.0,
        "explained_variance": 0.6,
        "steps_per_second": 200.0,
    }
    slow = study.summarize_run(scalars([(300, -20.0), (700, -12.0)], [(800, 0.3)], [50.0]), reach)
    assert slow["steps"] == 800 and slow["reach"] == [700, None] and slow["final"] == -12.0
    nothing = study.summarize_run({}, reach)  # a run stopped before it logged anything
    assert nothing["steps"] == 0 and nothing["reach"] == [None, None] and np.isnan(nothing["final"])

    row = study.config_row("roll20", ["--rollout-size", "20"], [1, 2], [fast, slow], reach)
    assert row == {
        "config": "roll20",
        "flags": "--rollout-size 20",
        "seeds": [1, 2],
        "env_steps": 800,
        "steps_to_reach": {"-15": [400, 700], "18": [900, None]},
        "final_mean100": [19.0, -12.0],
        "explained_variance": pytest.approx(0.45),
        "steps_per_second": pytest.approx(125.0),
    }
    table = study.study_table([row, study.config_row("default", [], [1], [nothing], reach)], reach).splitlines()
    assert (
        table[2] == "| roll20 | `--rollout-size 20` | 1 2 | 800 | 400 / 700 | 900 / not reached | 19.00 / -12.00 "
        "| 0.450 | 125 |"
    )
    assert table[3] == "| default | none | 1 | 0 | not reached | not reached | - | - | - |"


# ------------------------------------------------------------------------------------------------ the runs
def test_a_deadline_stops_the_runs_unfinished_and_a_run_that_ends_by_itself_is_done(tmp_path):
    sleeper = study.Run("sleeper", 1, [], 5, str(tmp_path / "sleeper_seed1"))
    quick = study.Run("quick", 1, [], 5, str(tmp_path / "quick_seed1"))
    todo = [(quick, [sys.executable, "-c", "pass"]), (sleeper, [sys.executable, "-c", "import time; time.sleep(60)"])]
    began = time.monotonic()
    failed, signum = study.train_runs(todo, 2, "CartPole-v1", deadline=time.time() + 3)
    assert failed == [] and signum == study.signal.SIGTERM and time.monotonic() - began < 30
    assert study.done_updates(quick.root) == 5 and study.done_updates(sleeper.root) == 0  # stopped: resumed later
    assert study.plan(quick, "CartPole-v1") is None
    assert "import time" in (tmp_path / "sleeper_seed1" / study.LOG_FILE).read_text()
    assert json.loads((tmp_path / "sleeper_seed1" / study.RUN_FILE).read_text())["env_name"] == "CartPole-v1"


# ------------------------------------------------------------------------------------------------ end to end
def test_a_tiny_study_trains_each_configuration_reports_and_carries_on_where_it_left(tmp_path, capsys):
    log_dir, out = tmp_path / "study", tmp_path / "report" / "tiny"
    # Games of 40 frames (10 steps) end at step t = 9 of each env: env 0's at env step 9 * 2 + 1 = 19, env 1's
    # at 20 (each env's steps counted in turn); 40 steps are 4 updates of a, 10 of b.
    argv = [
        "--configs",
        "a=",
        "b=--rollout-size 2",
        "--flags",
        "--num-envs 2 --max-episode-frames 40 --log-interval 1 --no-cuda",
        "--steps",
        "40",
        "--parallel",
        "2",
        "--log-dir",
        str(log_dir),
        "--out",
        str(out),
        "--reach",
        "-21",
        "5",
    ]
    result = subprocess.run([sys.executable, "-m", "bench.study", *argv], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| a | none | 42 | 40 | 19 | not reached | 0.00 |" in result.stdout
    assert "| b | `--rollout-size 2` | 42 | 40 | 19 | not reached | 0.00 |" in result.stdout
    for suffix in (".md", ".json", ".png"):
        assert (tmp_path / "report" / f"tiny{suffix}").stat().st_size > 0
    rows = json.loads((tmp_path / "report" / "tiny.json").read_text())["rows"]
    assert [row["config"] for row in rows] == ["a", "b"]
    for row in rows:
        assert row["seeds"] == [42] and row["env_steps"] == 40
        assert row["steps_to_reach"] == {"-21": [19], "5": [None]}
    for name, updates in (("a", 4), ("b", 10)):
        root = log_dir / f"{name}_seed42"
        assert (root / "done").read_text().strip() == str(updates)
        assert "run directory: " in (root / "train.log").read_text()
        (run_dir,) = [d for d in root.iterdir() if d.is_dir()]
        assert run_dir.name.startswith("PongNoFrameskip-v4_") and run_dir.name.endswith("_seed42")

    # Started again, the study finds both runs finished: it trains nothing and reports the same rows.
    assert study.main(argv) == 0
    out_text = capsys.readouterr().out
    assert "2 finished already, 0 to train" in out_text and "starting" not in out_text
    assert len([d for d in (log_dir / "a_seed42").iterdir() if d.is_dir()]) == 1
    assert json.loads((tmp_path / "report" / "tiny.json").read_text())["rows"] == rows
