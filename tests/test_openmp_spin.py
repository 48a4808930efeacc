"""bench/openmp_spin.py: one tiny run end to end, each setting in a process of its own."""
from __future__ import annotations

import os
import subprocess
import sys

from bench.openmp_spin import COLUMNS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_tiny_run_times_each_setting_alone_and_taking_turns():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "openmp_spin.py"), "--spins", "default", "0",
                          "--steps", "6", "--repeats", "1", "--num-envs", "2", "--threads", "1"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    lines = out.strip().splitlines()
    assert "2 games of Pong" in lines[0] and "torch 1 threads" in lines[0]
    assert lines[1].split()[0] == "GOMP_SPINCOUNT"
    for name in (*COLUMNS, "step after fwd"):
        assert name in lines[1]
    rows = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in lines[2:]}
    assert list(rows) == ["default", "0"]
    for values in rows.values():
        send, recv = values[COLUMNS.index("send")], values[COLUMNS.index("recv")]
        # (a bare send can take under 0.005 ms, which prints as 0.00)
        assert len(values) == len(COLUMNS) + 1 and all(v >= 0 for v in values) and recv > 0 and values[-1] > 0
        assert abs(values[-1] - (send + recv)) <= 0.011  # the step is its two halves (each printed to 0.01 ms)
