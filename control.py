"""Stopping a run cleanly, and the decisions every process of a run must take together.

:class:`StopSignals` turns Ctrl+C and SIGTERM into a request: the runner finishes its update,
writes ``a2c_last`` and leaves. :class:`RunContext` says which process this is; a decision that
all processes must share (stop now, give up after non-finite losses) goes through
:meth:`RunContext.any`, so that no process stops while another waits for it.
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class RunContext:
    """This process's place in the run: rank ``rank`` of ``world_size`` (0 of 1 for a plain run)."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """The one process that writes checkpoints, TensorBoard and the progress bar."""
        return self.rank == 0

    def any(self, flag: bool) -> bool:
        """True on every process if ``flag`` is true on any of them (one all-reduce in a group)."""
        if self.world_size == 1:
            return bool(flag)
        value = torch.tensor([1.0 if flag else 0.0], device=collective_device())
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())

    def mean(self, values: dict[str, float]) -> dict[str, float]:
        """Each value's mean over the processes (one all-reduce); every process passes the same keys."""
        if self.world_size == 1:
            return dict(values)
        keys = sorted(values)
        total = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=collective_device())
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return dict(zip(keys, (total / self.world_size).tolist()))

    def gather(self, item: Any) -> list[Any]:
        """Every process's ``item`` (any picklable value), in rank order, on every process."""
        if self.world_size == 1:
            return [item]
        items: list[Any] = [None] * self.world_size
        dist.all_gather_object(items, item)
        return items


def collective_device() -> torch.device:
    """Where a collective's tensor must be: NCCL reduces GPU tensors only."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class StopSignals:
    """Inside ``with StopSignals() as stop:``, SIGINT and SIGTERM set ``stop.requested`` (and
    ``stop.reason``) instead of killing the process; the previous handlers come back on exit.
    Outside the main thread, where Python cannot take signals, it installs nothing."""

    def __init__(self) -> None:
        self.requested = False
        self.reason = ""
        self._previous: dict[int, Any] = {}

    def request(self, signum: int = 0, frame: Any = None) -> None:
        if not self.requested:
            self.requested = True
            self.reason = f"stopped by {signal.Signals(signum).name}" if signum else "stopped"

    def __enter__(self) -> "StopSignals":
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self.request)
        except ValueError:  # not the main thread: leave signals alone
            pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


@contextlib.contextmanager
def workers_ignore_stop_signals() -> Iterator[None]:
    """Env worker processes started inside this block ignore SIGINT and SIGTERM.

    A terminal's Ctrl+C reaches the whole process group: workers left to Python's default would
    die of a KeyboardInterrupt in mid-step and take the run down with them. Ignoring both, they
    leave the decision to the training process, which finishes its update and closes them (and
    a worker whose parent is gone ends when its pipe closes). Forked and spawned workers alike
    inherit an ignored signal. Outside the main thread, where Python cannot set handlers, it does nothing.
    """
    previous: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
