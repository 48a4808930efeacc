"""Ctrl+C through the command line: a terminal's SIGINT reaches every process of its group, the env
workers too; the training process finishes its update, writes a2c_last where it stopped, says so
and exits 0, while the workers leave the stop to it. (SIGTERM: tests/test_cli.py; a signal inside
``control.StopSignals``: tests/test_control.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch
from tiny_run import REPO, TINY, wait_for_first_last


@pytest.mark.parametrize(
    "argv",
    [
        ["--env-name", "CartPole-v1", "--vec-env", "async"],  # gymnasium's AsyncVectorEnv workers
        [*TINY, "--vec-env", "subproc", "--max-episode-frames", "120"],  # SB3's SubprocVecEnv workers
    ],
    ids=["gymnasium-async", "atari-subproc"],
)
def test_ctrl_c_to_the_process_group_stops_the_run_not_its_env_workers(tmp_path, argv):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "main.py",
            *argv,
            "--num-envs",
            "2",
            "--rollout-size",
            "5",
            "--num-updates",
            "100000",
            "--checkpoint-interval",
            "1",
            "--no-progress",
            "--threads",
            "1",
            "--log-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        last_path = wait_for_first_last(proc)
        assert os.path.exists(last_path)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err  # README: Ctrl+C ... exits with code 0
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    final = out.strip().splitlines()[-1]
    assert final.startswith("stopped by SIGINT; ")
    last = torch.load(last_path, weights_only=True)
    assert 1 <= last["update"] < 100000 and last["step"] == 10 * last["update"]
    assert f"{last['step']} env steps, {last['update']} updates" in final  # a2c_last: where it stopped
