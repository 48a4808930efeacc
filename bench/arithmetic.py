"""How near the processor's arithmetic the fast-cpu preset's network runs, and so how much faster
its passes could still get on this CPU.

    python bench/arithmetic.py                                   # the preset, torch's default threads
    python bench/arithmetic.py --threads 1 --flags="--conv-filters 16"

In one process, one after the other (FLOPs counted by ``torch.utils.flop_counter.FlopCounterMode``,
a multiply-add as two):

* ``matmul``: a float32 matrix product of 1024x1024 by 1024x1024, the rate torch reaches on this
  processor where it has the most room (its practical peak);
* ``encoder forward`` and ``encoder forward+backward``: the preset's convolutional encoder over a
  batch of ``num_envs`` frames, as the runner acts (under ``no_grad``, then with gradients);
* ``network alone``: the preset training on envs that cost nothing (``bench/throughput.py``'s
  ``StillEnvs``: its network, storage and update alone), in env steps/s, times the FLOPs one env
  step costs (one update's count over its env steps).

Each rate is the best of ``--repeats`` timings; the summary gives each as a share of ``matmul``'s,
and the env steps/s the network alone would reach if all its arithmetic ran at ``matmul``'s rate.
Measure on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.throughput import cli_config, train_config  # noqa: E402
from config import Config  # noqa: E402
from utils import UsageError  # noqa: E402

MATMUL = 1024


def counted_flops(fn: Callable[[], object]) -> int:
    """The FLOPs torch counts in ``fn()`` (a multiply-add as two)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def best_rate(fn: Callable[[], object], flops: float, repeats: int, calls: int) -> float:
    """FLOPs per second of ``fn`` (``flops`` a call): the best of ``repeats`` timings of ``calls``
    calls, after two untimed."""
    fn(), fn()
    best = float("inf")
    for _ in range(repeats):
        tic = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - tic) / calls)
    return flops / best


def preset_argv(flags: str) -> list[str]:
    """What ``python main.py`` trains here: Pong with ``--preset fast-cpu`` and ``flags`` after it."""
    return ["--env-name", "PongNoFrameskip-v4", "--preset", "fast-cpu", *shlex.split(flags)]


def preset_frames(config: Config) -> torch.Tensor:
    """A batch of ``num_envs`` stacked frames of the config's shape (uint8, as the envs give them)."""
    shape = (config.num_envs, config.n_stack, config.frame_size, config.frame_size)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def preset_encoder(config: Config) -> torch.nn.Module:
    """The config's convolutional encoder, as the agent builds it."""
    from agent import build_networks

    model, _ = build_networks(config, (config.n_stack, config.frame_size, config.frame_size), 6)
    return model.encoder


def flops_per_env_step(argv: list[str]) -> float:
    """FLOPs of one env step of training ``argv`` on still envs: the count over three updates less
    that over one (what a run costs once, its set-up, drops out), over two updates' env steps."""
    per_update = cli_config(argv).steps_per_update

    def count(updates: int) -> int:
        with tempfile.TemporaryDirectory(prefix="bench-arith-") as log_dir:
            config = cli_config(argv, 0, updates * per_update, log_dir)
            return counted_flops(lambda: train_config(config, log_dir, "cpu", still=True))
    return (count(3) - count(1)) / (2 * per_update)


def network_rate(argv: list[str], steps: int, repeats: int) -> float:
    """Env steps/s of training ``argv`` on still envs: the best of ``repeats`` runs of ``steps``."""
    best = 0.0
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="bench-arith-") as log_dir:
            done, seconds = train_config(cli_config(argv, 0, steps, log_dir), log_dir, "cpu", still=True)
        best = max(best, done / seconds)
    return best


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--flags", default="", help="main.py's flags typed beside --preset fast-cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--steps", type=int, default=8000, help="env steps of each network-alone run")
    parser.add_argument("--repeats", type=int, default=3, help="timings of each rate; the best counts")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threads < 0 or args.steps < 1 or args.repeats < 1:
        parser.error("--threads is at least 0, --steps and --repeats at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    train_argv = preset_argv(args.flags)
    try:
        config = cli_config(train_argv)
    except (UsageError, SystemExit) as exc:  # main.py's parser has said what is wrong with its flags
        parser.error(f"--flags {args.flags!r}: {exc if isinstance(exc, UsageError) else 'not flags main.py takes'}")
    torch.manual_seed(0)

    a, b = torch.randn(MATMUL, MATMUL), torch.randn(MATMUL, MATMUL)
    matmul = best_rate(lambda: a @ b, counted_flops(lambda: a @ b), args.repeats, 20)

    encoder, frames = preset_encoder(config), preset_frames(config)

    def forward() -> None:
        with torch.no_grad():
            encoder(frames)

    def forward_backward() -> None:
        encoder.zero_grad(set_to_none=True)
        encoder(frames).sum().backward()

    rates = {"matmul": matmul,
             "encoder forward": best_rate(forward, counted_flops(forward), args.repeats, 50),
             "encoder forward+backward": best_rate(forward_backward, counted_flops(forward_backward),
                                                   args.repeats, 20)}
    per_step = flops_per_env_step(train_argv)
    steps_per_s = network_rate(train_argv, args.steps, args.repeats)
    rates["network alone"] = steps_per_s * per_step

    print(f"--preset fast-cpu {args.flags}".strip() + f": {config.num_envs} envs, frames of {config.frame_size}, "
          f"torch threads: {torch.get_num_threads()}")
    for name, rate in rates.items():
        print(f"{name:26s} {rate / 1e9:7.1f} GFLOP/s  ({rate / matmul:.0%} of matmul)")
    print(f"network alone: {steps_per_s:,.0f} env steps/s at {per_step / 1e6:.2f} MFLOP an env step; "
          f"at matmul's rate {matmul / per_step:,.0f} env steps/s ({matmul / rates['network alone']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
