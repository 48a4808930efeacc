"""Tiny runs through ``main.py`` for the tests that train one: the flags of a tiny run, one trained
in-process, and one trained in a process of its own that is stopped with a signal once it has
written its first ``a2c_last``."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import main as cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 2 envs x 5 steps = 10 env steps an update; one torch thread, nothing but what a test reads.
TINY = [
    "--num-envs",
    "2",
    "--rollout-size",
    "5",
    "--no-progress",
    "--no-cuda",
    "--threads",
    "1",
    "--no-tensorboard",
    "--seed",
    "3",
    "--eval-interval",
    "0",
]


def train(log_dir, *extra: str) -> str:
    """A tiny run through ``main.main`` in-process; the path of its run directory."""
    assert cli.main([*TINY, "--log-dir", str(log_dir), *extra]) == 0
    (run,) = os.listdir(log_dir)
    return os.path.join(log_dir, run)


def wait_for_first_last(proc: subprocess.Popen) -> str:
    """The path of the a2c_last of the run ``proc`` trains, once it has been written (or 60 s passed)."""
    line = proc.stdout.readline()
    if line.startswith("device: "):  # the first line names the device
        line = proc.stdout.readline()
    assert line.startswith("run directory:"), proc.stderr.read() if proc.poll() is not None else line
    last_path = os.path.join(line.split(":", 1)[1].strip(), "a2c_last")
    deadline = time.monotonic() + 60
    while not os.path.exists(last_path) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    return last_path


def stop_after_first_last(argv: list[str], signum: int) -> tuple[subprocess.Popen, str, str, str]:
    """Train ``main.py argv`` in a process, send it ``signum`` once its first a2c_last is written
    (inside the loop: the handlers are in place), and wait for it to end.

    Returns the process, the a2c_last path, and its stdout and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "main.py", *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        last_path = wait_for_first_last(proc)
        assert os.path.exists(last_path)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc, last_path, out, err
