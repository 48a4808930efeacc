"""bench/side_by_side.py: how its two runs are told apart and built."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from bench import side_by_side as bench


def test_a_variant_is_a_name_and_the_flags_that_set_it_apart():
    assert bench.parse_variant("bf16=--bf16") == ("bf16", ["--bf16"])
    assert bench.parse_variant("ale=--vec-env ale") == ("ale", ["--vec-env", "ale"])
    assert bench.parse_variant("float32=") == ("float32", [])
    for bad in ("bf16", "=--bf16", "../x=--bf16"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_variant(bad)


def test_the_runs_share_everything_but_their_variant_flags():
    args = argparse.Namespace(env_name="BreakoutNoFrameskip-v4", seed=7, log_dir="out",
                              flags="--arch nature --no-recurrent")
    plain = bench.run_command("float32", [], args)
    fast = bench.run_command("bf16", ["--bf16"], args)
    assert plain[1].endswith("main.py")
    # One torch thread each, so that they share the machine evenly; each in a directory of its own.
    for command, name in ((plain, "float32"), (fast, "bf16")):
        assert command[command.index("--threads") + 1] == "1"
        assert command[command.index("--log-dir") + 1].endswith(name)
        assert command[-3 if name == "float32" else -4:][:3] == ["--arch", "nature", "--no-recurrent"]
    differ = [a for a, b in zip(plain, fast) if a != b]
    assert differ == ["out/float32"] and fast[len(plain):] == ["--bf16"]


@pytest.mark.parametrize("argv, message", [
    (["--variants", "a=--bf16", "a="], "--variants: give the two runs different names"),
    (["--variants", "oops", "b="], "expected NAME=FLAGS with a plain NAME, got 'oops'"),
])
def test_refuses_bad_variants(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_first_reach_is_the_step_of_the_first_full_window_whose_mean_reaches_the_score():
    steps = np.array([10, 20, 30, 40, 50])
    returns = np.array([-3.0, -1.0, 1.0, 3.0, 5.0])
    # Means of 2 games: -2 (at 20), 0 (30), 2 (40), 4 (50).
    assert bench.first_reach(steps, returns, 0.0, count=2) == 30
    assert bench.first_reach(steps, returns, 1.5, count=2) == 40
    assert bench.first_reach(steps, returns, -5.0, count=2) == 20  # never before a full window
    assert bench.first_reach(steps, returns, 4.5, count=2) is None
    assert bench.first_reach(steps[:1], returns[:1], -5.0, count=2) is None


def write_run(run_dir: str, returns: list[float], steps_per_game: int) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(run_dir) as writer:
        for i, r in enumerate(returns):
            step = (i + 1) * steps_per_game
            writer.add_scalar("episode/return", r, step)
            writer.add_scalar("loss/total", 1.0, step)
            writer.add_scalar("train/resident_memory_mib", 500.0 + i, step)


def test_report_only_compares_runs_already_logged(tmp_path, capsys):
    write_run(str(tmp_path / "slow" / "run"), [0.0, 1.0, 2.0, 3.0], steps_per_game=100)
    write_run(str(tmp_path / "fast" / "run"), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0], steps_per_game=100)
    assert bench.main(["--report-only", "--log-dir", str(tmp_path), "--variants", "slow=", "fast=",
                       "--minutes", "4", "--settle-minutes", "0", "--reach", "1", "100"]) == 0
    out = capsys.readouterr().out
    rows = {}  # each run's first line: its row of the table
    for line in out.splitlines():
        if line.split():
            rows.setdefault(line.split()[0], line.split())
    # Both ran to their last step; the common point is the slower run's 400 steps.
    assert rows["slow"][1:3] == ["400", "4"] and rows["fast"][1:3] == ["600", "6"]
    assert "at 400 steps" in out
    # Mean of the last 100 games (all of them here): 1.5 and 5.0 at the end; 1.5 and 3.0 at 400 steps.
    assert [float(x) for x in rows["slow"][3:5]] == [1.5, 1.5]
    assert [float(x) for x in rows["fast"][3:5]] == [5.0, 3.0]
    assert "steps/s ratio (fast / slow): 1.50x" in out
    # Fewer than 100 games: no full window, so no score is ever reached.
    assert out.splitlines()[-3:-1] == [f"{'slow':<4}      never       never", f"{'fast':<4}      never       never"]


def test_report_only_refuses_a_log_dir_without_the_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--report-only", "--log-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "no runs named dummy and ale" in capsys.readouterr().err
