"""Small helpers shared by every module: errors, seeding, atomic checkpoints, statistics.

Nothing here imports another module of this project.
"""
from __future__ import annotations

import os
import random
import tempfile
from collections import deque
from typing import IO, Any, Callable, Iterable, Optional

import numpy as np
import torch


class UsageError(Exception):
    """Bad input from the user. `main` prints it as one line on stderr and exits with code 2."""


# ---------------------------------------------------------------------------------------------
# Seeding and random-number-generator state
# ---------------------------------------------------------------------------------------------
def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (the envs are seeded where they are built)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Every global RNG state, in a form `torch.load(weights_only=True)` accepts (tensors, ints)."""
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "name": np_name,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "gauss": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` saved."""
    random.setstate(_as_tuples(state["python"]))
    np_state = state["numpy"]
    np.random.set_state((np_state["name"], np_state["keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        # One state a GPU the run was saved with; a machine with fewer GPUs restores those it has.
        for index, cuda_state in enumerate(state["cuda"][:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, index)


def _as_tuples(value: Any) -> Any:
    """`random.setstate` wants nested tuples; a round trip through a checkpoint may give lists."""
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuples(v) for v in value)
    return value


# ---------------------------------------------------------------------------------------------
# Files: atomic writes
# ---------------------------------------------------------------------------------------------
def atomic_write(path: str, write: Callable[[IO], Any], binary: bool = True) -> None:
    """Create or replace the file `path` with what `write(file)` writes, all or nothing.

    The data goes to a temporary file in the same directory, is flushed to disk, and then
    replaces `path` with one `os.replace` (atomic on POSIX and Windows).
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp_path = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; the result is an ordinary file
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise


def frame_cap(game_cap: Optional[int], max_episode_frames: Optional[int]) -> Optional[int]:
    """The emulator frames a game may last: the smaller of the id's own cap and the time limit (None: no cap)."""
    caps = [int(cap) for cap in (game_cap, max_episode_frames) if cap]
    return min(caps) if caps else None


def probe_writable(directory: str) -> None:
    """Raise ``OSError`` unless a file can be created in ``directory`` (checked before long work, not after)."""
    with tempfile.TemporaryFile(dir=directory):
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


def linear_schedule(base: float, progress: float) -> float:
    """Value of a linear decay from `base` (progress 0) to 0 (progress 1)."""
    return base * max(0.0, 1.0 - progress)



# ---------------------------------------------------------------------------------------------
# Process memory
# ---------------------------------------------------------------------------------------------
def resident_memory_mib() -> float:
    """This process's resident set size now (Linux ``/proc``; NaN elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
