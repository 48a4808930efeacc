"""Where a run's numbers go: TensorBoard scalars and histograms, the console progress bar, warnings.

The runner decides what to log and when; :class:`Metrics` decides where it goes. Every scalar is
logged against the env-step count. Built with ``enabled=False`` (every process of a data-parallel
run but one) it writes nothing and shows no bar; warnings still reach the console.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Optional

import torch
from tqdm import tqdm

from utils import resident_memory_mib

# Per-update stats whose logged name is train/<name>; plain names are loss terms (loss/<name>),
# and names with a slash keep their group.
TRAIN_STATS = ("explained_variance", "grad_norm")
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
        self.bar = tqdm(total=total_steps, initial=initial_step, unit="step", unit_scale=True,
                        disable=not (show and self.enabled), dynamic_ncols=True, file=sys.stderr)

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
