"""Where a run's numbers go: TensorBoard scalars and histograms, the console progress bar, warnings;
and the statistics they are made of (an update's read back from the device in one transfer, the
critic's explained variance, the episodes' returns).

The runner decides what to log and when; :class:`Metrics` decides where it goes. Every scalar is
logged against the env-step count. Built with ``enabled=False`` (every process of a data-parallel
run but one) it writes nothing and shows no bar; warnings still reach the console.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from typing import Any, Iterable, Optional

import numpy as np
import torch
from tqdm import tqdm

from perf import resident_memory_mib

# Per-update stats whose logged name is train/<name>; plain names are loss terms (loss/<name>),
# and names with a slash keep their group.
TRAIN_STATS = ("explained_variance", "grad_norm", "entropy_coeff")
NOT_LOGGED = ("skipped", "lr")


class Metrics:
    """A TensorBoard ``writer`` (or None), a progress bar, and the running means of an interval."""

    def __init__(self, writer: Any = None, enabled: bool = True) -> None:
        self.writer = writer if enabled else None
        self.enabled = enabled
        self.bar: Optional[tqdm] = None
        self._sums: dict[str, list[float]] = {}  # [sum, count] of each finite stat since the last log
        self.interval_updates = 0

    # ------------------------------------------------------------------ TensorBoard
    def scalar(self, tag: str, value: float, step: int) -> None:
        if self.writer is not None:
            self.writer.add_scalar(tag, value, step)

    def histogram(self, tag: str, values: torch.Tensor, step: int) -> None:
        if self.writer is not None:
            self.writer.add_histogram(tag, values, step)

    def add_update(self, stats: dict[str, float]) -> None:
        """Count one good update's stats into the interval's means (a non-finite value, such as an
        undefined explained variance, is left out of its mean rather than poisoning it)."""
        self.interval_updates += 1
        for key, value in stats.items():
            if math.isfinite(value):
                total = self._sums.setdefault(key, [0.0, 0])
                total[0] += value
                total[1] += 1

    def log_interval(self, step: int, lr: float, steps_per_second: float) -> None:
        """Write the interval's means (``loss/*``, ``train/*`` and grouped names) and start a new interval."""
        for key, (total, count) in self._sums.items():
            if key in NOT_LOGGED:
                continue
            tag = key if "/" in key else (f"train/{key}" if key in TRAIN_STATS else f"loss/{key}")
            self.scalar(tag, total / count, step)
        self.scalar("train/lr", lr, step)
        self.scalar("train/steps_per_second", steps_per_second, step)
        self.scalar("train/resident_memory_mib", resident_memory_mib(), step)
        self._sums, self.interval_updates = {}, 0

    # ------------------------------------------------------------------ console
    def start_progress(self, total_steps: int, initial_step: int, show: bool) -> None:
        """A progress bar over the run's env steps (shown only with ``show`` on the enabled process)."""
        self.bar = tqdm(
            total=total_steps,
            initial=initial_step,
            unit="step",
            unit_scale=True,
            disable=not (show and self.enabled),
            dynamic_ncols=True,
            file=sys.stderr,
        )

    def progress(self, steps: int, mean100: Optional[float] = None, episodes: Optional[int] = None) -> None:
        if self.bar is None:
            return
        self.bar.update(steps)
        if mean100 is not None:
            self.bar.set_postfix(mean100=f"{mean100:.1f}", episodes=episodes, refresh=False)

    @staticmethod
    def say(message: str) -> None:
        """One line on stderr that does not break the progress bar ("warning: ...", "error: ...")."""
        tqdm.write(message, file=sys.stderr)

    def close(self) -> None:
        """Close the progress bar and flush TensorBoard (the writer itself stays open)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.writer is not None:
            self.writer.flush()


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------
def read_back(tensors: dict[str, torch.Tensor]) -> dict[str, float]:
    """0-d tensors (on any device) as floats, read back in one transfer instead of one each."""
    if not tensors:
        return {}
    return dict(zip(tensors, torch.stack([t.detach().float().reshape(()) for t in tensors.values()]).tolist()))


def explained_variance(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """1 - Var(targets - predictions) / Var(targets): 1 is perfect, 0 is no better than a constant.
    A 0-d tensor on the inputs' device (read back with the other statistics of an update).

    NaN when the targets have no variance (nothing to explain).
    """
    var_targets = torch.var(targets.detach())
    explained = 1.0 - torch.var(targets.detach() - predictions.detach()) / var_targets
    return torch.where(var_targets == 0, torch.full_like(explained, float("nan")), explained)


class EpisodeStats:
    """Raw (unclipped, full-game) episode returns and lengths, with a moving window for the mean."""

    def __init__(self, window: int = 100, history: Iterable[float] = (), count: Optional[int] = None) -> None:
        self.returns: deque[float] = deque(history, maxlen=window)
        # All the episodes added so far (the window keeps the last of them); by default those of ``history``.
        self.count = len(self.returns) if count is None else count

    def add(self, episode_return: float) -> None:
        self.returns.append(float(episode_return))
        self.count += 1

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns)) if self.returns else float("nan")
