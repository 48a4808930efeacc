"""Every seed a run draws, in one place: the envs' (training, resumed, evaluation, each rank's,
GRPO's groups) and each rank's sampling stream; and the global random-number generators (Python's,
numpy's, torch's) seeded, saved and restored (torch is imported when they are, not with this module,
which the command line reads).

Seeds are below ``SEED_LIMIT`` = 2**30, so every env seed made from one (plus an env index, plus
the evaluation offset) stays below 2**31, the largest seed ale-py takes. Env i of a vector gets
its env 0's seed + i.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

SEED_LIMIT = 2**30
EVAL_SEED_OFFSET = 1_000_000  # evaluation envs play games apart from the training envs'
RESUME_SEED_STRIDE = 7919  # a resumed run's envs move this far past the seed per update already done
# GRPO's groups start this far past the run's seed, above the evaluation envs' seeds, and climb from
# there: they meet those again only after wrapping at SEED_LIMIT, hundreds of millions of groups later.
GROUP_SEED_OFFSET = 5_000_000


def env_seed(seed: int, *, update: int = 0, evaluation: bool = False, rank: int = 0, num_envs: int = 0) -> int:
    """The seed of env 0 of a vector (env i gets this + i).

    Training envs start at ``seed``; a run resumed at ``update`` moves past the seeds it already used
    (so it does not replay their games) and wraps below :data:`SEED_LIMIT` however long the run;
    in a data-parallel run, rank r's ``num_envs`` envs take the seeds after rank r-1's, so no two
    envs of the run play the same seed; evaluation envs (``--eval`` and ``--eval-interval``) are
    ``EVAL_SEED_OFFSET`` apart.
    """
    if evaluation:
        return seed + EVAL_SEED_OFFSET
    return (seed + update * RESUME_SEED_STRIDE) % SEED_LIMIT + rank * num_envs


def group_seeds(seed: int, round_index: int, groups: int, group_size: int) -> list[int]:
    """Reset seeds of the ``groups x group_size`` envs in GRPO's round ``round_index`` of a run
    seeded ``seed``: group g's members all get the same seed, and no two groups of a run share one
    (below :data:`SEED_LIMIT`, after which they wrap)."""
    first = seed + GROUP_SEED_OFFSET + round_index * groups
    return [(first + g) % SEED_LIMIT for g in range(groups) for _ in range(group_size)]


def sampling_seed(seed: int, rank: int, update: int = 0) -> int:
    """The seed of rank ``rank``'s random streams (action sampling) from ``update`` on: rank 0 keeps
    the run's seed, every other rank a stream of its own, drawn from (seed, rank, update)."""
    if rank == 0:
        return seed
    return int(np.random.SeedSequence([seed, rank, update]).generate_state(1)[0])


# ---------------------------------------------------------------------------------------------
# The global random-number generators: seeded, saved, restored
# ---------------------------------------------------------------------------------------------
def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (the envs are seeded where they are built)."""
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Every global RNG state, in a form `torch.load(weights_only=True)` accepts (tensors, ints)."""
    import torch

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
    import torch

    random.setstate(_as_tuples(state["python"]))
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["name"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["gauss"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        # One state a GPU the run was saved with; a machine with fewer GPUs restores those it has.
        for index, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, index)


def _as_tuples(value: Any) -> Any:
    """`random.setstate` wants nested tuples; a round trip through a checkpoint may give lists."""
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuples(v) for v in value)
    return value
