"""Data-parallel training under ``torchrun``: one process (rank) per device, each stepping envs of its own.

``torchrun`` launches the processes and tells each its place through the environment (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``); this module reads it, starts the process group (NCCL on CUDA,
each rank on ``cuda:LOCAL_RANK``; Gloo on the CPU), makes the weights of every rank the same, and
averages the gradients of an update across ranks. A plain ``python main.py`` has no process group
and none of this runs. What every rank must decide together goes through
:class:`control.RunContext`.

The collectives of an update, all small but the first: one all-reduce of every gradient,
flattened into one buffer (:func:`average_gradients`); one all-gather of the games that ended in
the rollout (:func:`gather_games`); one all-reduce of the update's statistics and one of each
shared decision (``RunContext``); with normalization, one all-reduce of the running statistics
(:class:`SharedStatistics`). docs/scaling.md has the whole design and its costs.
"""

from __future__ import annotations

import datetime
import os
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

from config import Config
from control import RunContext, collective_device
from utils import UsageError

# torchrun's variables; WORLD_SIZE alone, set by hand, does not start a data-parallel run.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
# Settings a machine may choose for itself: how it computes and where it would write (rank 0 alone writes).
PER_MACHINE = ("threads", "speed", "log_dir", "progress", "tensorboard")
# A rank waits this long for the others at any collective before giving up with an error: longer
# than rank 0's periodic evaluation can take while the others wait (a rank that died is noticed by
# torchrun first, which then ends the job).
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=30)


class RankError(UsageError):
    """Bad input that this rank alone may see (its GPU, its variables): printed by every rank that
    meets it, where an error all ranks meet alike is printed once a machine (``LOCAL_RANK`` 0)."""

    every_rank = True


def context_from_environment() -> RunContext:
    """This process's rank and the world size from torchrun's variables (0 of 1 without them).

    Read before anything starts, so that every rank refuses bad input before the group exists.
    """
    if not all(name in os.environ for name in TORCHRUN_VARIABLES):
        return RunContext()
    try:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        int(os.environ["LOCAL_RANK"])
    except ValueError:
        raise RankError("RANK, WORLD_SIZE and LOCAL_RANK must be integers (set by torchrun)") from None
    if not 0 <= rank < world_size:
        raise RankError(f"RANK {rank} is not within WORLD_SIZE {world_size}")
    return RunContext(rank, world_size)


def local_rank() -> int:
    """This process's index among the ranks of its machine (torchrun's ``LOCAL_RANK``; 0 without it)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def place(device: torch.device, context: RunContext) -> torch.device:
    """The device of this rank on CUDA: ``cuda:LOCAL_RANK`` when the process sees every GPU of its
    machine, or ``cuda:0`` when it sees one alone (a launcher that gives each rank its GPU through
    ``CUDA_VISIBLE_DEVICES``). On the CPU, the CPU."""
    if context.world_size == 1 or device.type != "cuda":
        return device
    index, visible = local_rank(), torch.cuda.device_count()
    if visible == 1:
        index = 0
    elif index >= visible:
        raise RankError(
            f"LOCAL_RANK {index} has no GPU: this process sees {visible}; start at most that many "
            f"processes per node (--nproc-per-node), or give each its own with CUDA_VISIBLE_DEVICES"
        )
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def start(context: RunContext, device: torch.device) -> None:
    """Join the process group: NCCL for CUDA devices, Gloo for the CPU. Nothing for a single process."""
    if context.world_size == 1:
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend, timeout=COLLECTIVE_TIMEOUT, **({"device_id": device} if device.type == "cuda" else {})
    )


def check_same_run(config: Config, update: int, context: RunContext) -> None:
    """Refuse, on every rank alike, a job whose ranks were started with other settings or resumed
    at another update than rank 0 (another command line or checkpoint on another machine)."""
    if context.world_size == 1:
        return
    mine: dict = {k: v for k, v in config.to_dict().items() if k not in PER_MACHINE}
    mine["update"] = update
    first: dict = broadcast_object(mine, context)  # type: ignore[assignment]
    differ = context.gather(sorted(k for k in mine if mine[k] != first.get(k)))
    for rank, names in enumerate(differ):
        if names:
            raise UsageError(
                f"rank {rank} was started with other settings than rank 0 ({', '.join(names)}); "
                f"start every machine with the same command"
            )


def stop(context: RunContext) -> None:
    """Leave the process group (if this process is in one)."""
    if context.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_parameters(modules: Sequence[torch.nn.Module], context: RunContext) -> None:
    """Every rank takes rank 0's weights and buffers (each rank also built them from the same seed;
    this makes them equal bit for bit whatever happened before, a resume included)."""
    if context.world_size == 1:
        return
    with torch.no_grad():
        for module in modules:
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)


def broadcast_object(obj: object, context: RunContext) -> object:
    """Rank 0's ``obj`` on every rank."""
    if context.world_size == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def average_gradients(params: Sequence[torch.nn.Parameter], world_size: int) -> None:
    """Replace each gradient by its mean over the ranks, in one all-reduce of one flat buffer.

    Called after ``backward`` has returned, so every gradient is complete, those accumulated at the
    end of the backward call included (the bfloat16 encoder's, ``model.casting_once``), and those of
    every module in ``params`` (the policy's and the curiosity module's). A parameter without a
    gradient on one rank counts as zero there; one without a gradient on every rank keeps none.
    A non-finite gradient on one rank (``A2CAgent.step`` makes every gradient NaN where the loss
    was not) makes the average non-finite on every rank, so they all skip the update together.
    """
    device = params[0].device
    grads = [p.grad for p in params]
    flat = torch.cat(
        [
            torch.zeros(p.numel(), device=device) if g is None else g.detach().reshape(-1).float()
            for p, g in zip(params, grads)
        ]
        + [torch.tensor([0.0 if g is None else 1.0 for g in grads], device=device)]
    )
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat[: -len(params)] /= world_size
    offset = 0
    for p, present in zip(params, flat[-len(params) :].tolist()):
        if present:
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))  # keeps the gradient's memory format
        offset += p.numel()


def sum_over_ranks(context: RunContext) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """What ``A2CAgent.sum_over_ranks`` is set to: the sum of a small tensor over the ranks (one
    all-reduce), for statistics of the whole batch such as ``--normalize-advantages``'s; None for one process."""
    if context.world_size == 1:
        return None

    def total(values: torch.Tensor) -> torch.Tensor:
        summed = values.to(collective_device())
        dist.all_reduce(summed, op=dist.ReduceOp.SUM)
        return summed.to(values.device)

    return total


def gather_games(
    games: list[tuple[int, int, float, int]], capacity: int, context: RunContext
) -> list[list[tuple[int, int, float, int]]]:
    """Every rank's games ``(step in rollout, env, return, length)``, in rank order, on every rank:
    one all-gather of a fixed-size float64 table (``capacity``: the most games a rank can finish in
    a rollout, one per env and step), cheaper than gathering pickled objects."""
    if context.world_size == 1:
        return [list(games)]
    table = torch.zeros(capacity + 1, 4, dtype=torch.float64)
    table[0, 0] = len(games)
    if games:
        table[1 : len(games) + 1] = torch.tensor(games, dtype=torch.float64)
    tables = [torch.empty_like(table, device=collective_device()) for _ in range(context.world_size)]
    dist.all_gather(tables, table.to(collective_device()))
    return [
        [(int(t), int(i), float(r), int(length)) for t, i, r, length in rank[1 : int(rank[0, 0]) + 1].tolist()]
        for rank in (table.cpu() for table in tables)
    ]


def gradient_reducer(context: RunContext) -> Optional[object]:
    """What ``A2CAgent.gradient_reducer`` is set to for this run: None for a single process."""
    if context.world_size == 1:
        return None

    def reduce(params: Sequence[torch.nn.Parameter]) -> None:
        average_gradients(params, context.world_size)

    return reduce


# (count, mean, var) of a running statistic, and how to set them.
Moments = tuple[float, np.ndarray, np.ndarray]


class SharedStatistics:
    """Running means and variances kept alike on every rank: the observation and reward
    normalizers' (``--normalize-obs``, ``--normalize-reward``) and the curiosity reward's running
    std (``--icm-normalize``). Each rank adds its own samples as usual; after every rollout
    (:meth:`merge`) the samples every rank added since the last merge are pooled (their count,
    and sums of deviations and squared deviations from the last merged mean, in float64, in one
    all-reduce) and every rank takes the pooled statistics, as if one process had seen them all.
    """

    def __init__(
        self,
        context: RunContext,
        stats: Sequence[tuple[Callable[[], Moments], Callable[[float, np.ndarray, np.ndarray], None]]],
    ) -> None:
        self.context, self.stats = context, list(stats)
        self.merged = [self._read(get) for get, _ in self.stats]

    @staticmethod
    def _read(get: Callable[[], Moments]) -> Moments:
        count, mean, var = get()
        return float(count), np.asarray(mean, dtype=np.float64).copy(), np.asarray(var, dtype=np.float64).copy()

    def merge(self) -> None:
        if self.context.world_size == 1 or not self.stats:
            return
        parts = []
        for (get, _), (n0, m0, v0) in zip(self.stats, self.merged):
            n, m, v = self._read(get)
            d = m - m0  # this rank's samples since the merge: count, sum and sum of squares about m0
            parts.append(np.concatenate([[n - n0], (n * d).ravel(), (n * (v + d * d) - n0 * v0).ravel()]))
        flat = torch.from_numpy(np.concatenate(parts)).to(collective_device())
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        pooled, offset = flat.cpu().numpy(), 0
        for index, ((_, set_moments), (n0, m0, v0)) in enumerate(zip(self.stats, self.merged)):
            size = m0.size
            count = n0 + pooled[offset]
            sums = pooled[offset + 1 : offset + 1 + size].reshape(m0.shape)
            squares = pooled[offset + 1 + size : offset + 1 + 2 * size].reshape(m0.shape)
            offset += 1 + 2 * size
            if count <= 0:
                continue
            shift = sums / count  # the pooled mean's distance from m0
            mean, var = m0 + shift, np.maximum((n0 * v0 + squares) / count - shift * shift, 0.0)
            set_moments(float(count), mean, var)
            self.merged[index] = (float(count), mean.copy(), var.copy())


def shared_statistics(envs: object, agent: object, context: RunContext) -> SharedStatistics:
    """The running statistics of this run that every rank must share (see :class:`SharedStatistics`)."""
    from normalize import normalizer_of

    stats = []
    norm = normalizer_of(envs)  # type: ignore[arg-type]
    for name, used in (
        ("obs_rms", norm is not None and norm.norm_obs),
        ("ret_rms", norm is not None and norm.norm_reward),
    ):
        if used:

            def get(name: str = name) -> Moments:
                rms = getattr(norm, name)
                return rms.count, rms.mean, rms.var

            def put(count: float, mean: np.ndarray, var: np.ndarray, name: str = name) -> None:
                rms = getattr(norm, name)
                rms.count, rms.mean, rms.var = count, mean.copy(), var.copy()

            stats.append((get, put))
    running_std = getattr(agent, "intrinsic_std", None)
    if running_std is not None:

        def get_std() -> Moments:
            return running_std.count, running_std.mean, running_std.m2 / running_std.count if running_std.count else 0.0

        def put_std(count: float, mean: np.ndarray, var: np.ndarray) -> None:
            running_std.count, running_std.mean, running_std.m2 = count, float(mean), float(var) * count

        stats.append((get_std, put_std))
    return SharedStatistics(context, stats)
