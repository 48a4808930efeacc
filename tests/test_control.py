"""control.py and metrics.py: a stop request from a signal, decisions shared by every process, and
metrics that a process other than the main one keeps to itself."""

from __future__ import annotations

import os
import signal
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from recording_writer import RecordingWriter

from control import RunContext, StopSignals
from metrics import Metrics


def test_a_signal_inside_becomes_a_request_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.reason == "stopped by SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # a second one changes nothing
        assert stop.reason == "stopped by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_single_process_decides_alone():
    context = RunContext()
    assert context.is_main and context.any(True) and not context.any(False)


def _vote(rank: int, port: int, flags: list[bool], results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        context = RunContext(rank, 2)
        results[rank] = [context.any(flag) for flag in flags[rank::2]]
    finally:
        dist.destroy_process_group()


def test_processes_agree_to_stop_when_any_of_them_would():
    """Two processes over Gloo on this machine: each decision is true on both if true on either."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # rank 0 votes flags[0::2], rank 1 flags[1::2]: (F, F), (T, F), (F, T), (T, T)
    flags = [False, False, True, False, False, True, True, True]
    results = mp.Manager().dict()
    mp.spawn(_vote, args=(port, flags, results), nprocs=2, join=True)
    assert results[0] == results[1] == [False, True, True, True]


@pytest.mark.parametrize("enabled", [True, False])
def test_metrics_write_only_on_the_enabled_process(enabled):
    writer = RecordingWriter()
    metrics = Metrics(writer, enabled=enabled)
    metrics.scalar("episode/return", 1.0, 10)
    metrics.histogram("rollout/values", torch.zeros(3), 10)
    metrics.add_update({"total": 1.0, "explained_variance": 0.5, "rollout/value_mean": 0.1, "skipped": 0.0})
    metrics.log_interval(10, lr=7e-4, steps_per_second=100.0)
    metrics.close()
    if enabled:
        assert writer.tags == [
            "episode/return",
            "rollout/values",
            "loss/total",
            "train/explained_variance",
            "rollout/value_mean",
            "train/lr",
            "train/steps_per_second",
            "train/resident_memory_mib",
        ]
    else:
        assert writer.tags == []


def test_checkpoints_are_written_only_on_the_main_process(tmp_path):
    from checkpoints import Checkpoints, TrainingState
    from config import Config

    class Agent:
        def state(self, full=True):
            return {"model": {"w": torch.ones(2)}}

    state = TrainingState()
    for enabled in (False, True):
        checkpoints = Checkpoints(str(tmp_path), Agent(), Config(), enabled=enabled)
        checkpoints.save("a2c_last", state)
        checkpoints.loss_computed(state, 1.0)
        assert sorted(os.listdir(tmp_path)) == ([] if not enabled else ["a2c_best_loss", "a2c_last"])
        state.best_loss = float("inf")
