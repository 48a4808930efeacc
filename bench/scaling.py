"""Data-parallel scaling on this machine: env steps per second and learning per env step at world
sizes 1 and 2 (one process, or ``torchrun --standalone --nproc-per-node 2``), each process on one
torch thread (``--threads 1``, ``OMP_NUM_THREADS=1``), on the CPU with Gloo.

Two measurements, every run a real ``main.py`` run:

* speed: ``--speed-env`` (Pong, the fast configuration ``--arch nature --no-recurrent``) with
  ``--speed-envs`` envs a process for ``--speed-updates`` updates: the batch grows with the world
  size (weak scaling). The figure is the median of the ``train/steps_per_second`` the run logged
  (global env steps of all ranks), leaving out the first interval (start-up).
* learning: ``--learn-env`` (CartPole-v1, its defaults) for ``--learn-steps`` env steps over
  ``--seeds``, as one process of ``--learn-envs`` envs, as 2 ranks of half as many each (the same
  batch per update: the learning per env step should not change), and as 2 ranks of
  ``--learn-envs`` each (twice the batch, the same learning rate). The figure is
  ``episode/return_mean100`` (the mean return of the last 100 games of all ranks) at fixed env steps.

    python bench/scaling.py                     # about 4 minutes on an idle 2-core machine
    python bench/scaling.py --json scaling.json

A shared machine makes the speed figures move; compare sizes measured in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(world_size: int, flags: Sequence[str]) -> list[str]:
    """``python main.py FLAGS`` for one process, else a standalone torchrun job of ``world_size`` ranks."""
    launcher = [] if world_size == 1 else ["-m", "torch.distributed.run", "--standalone",
                                           "--nproc-per-node", str(world_size)]
    return [sys.executable, *launcher, os.path.join(ROOT, "main.py"), *flags]


def train(world_size: int, flags: Sequence[str], log_dir: str) -> tuple[str, float]:
    """Run it to the end; its run directory and wall time (start-up included)."""
    tic = time.perf_counter()
    subprocess.run(command(world_size, [*flags, "--log-dir", log_dir, "--threads", "1", "--no-progress",
                                        "--no-cuda", "--eval-interval", "0"]),
                   check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
    (run,) = os.listdir(log_dir)
    return os.path.join(log_dir, run), time.perf_counter() - tic


def scalars(run_dir: str, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)] if tag in events.Tags()["scalars"] else []


def median_speed(points: Sequence[tuple[int, float]]) -> float:
    """The median logged env steps per second, the first interval (start-up) left out."""
    rates = [value for _, value in points[1:]] or [value for _, value in points]
    return statistics.median(rates) if rates else float("nan")


def value_at(points: Sequence[tuple[int, float]], step: int) -> Optional[float]:
    """The last value logged at or before env step ``step`` (None before the first)."""
    before = [value for at, value in points if at <= step]
    return before[-1] if before else None


def measure_speed(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for world_size in args.world_sizes:
        with tempfile.TemporaryDirectory(prefix="bench-scaling-") as log_dir:
            run_dir, wall = train(world_size, ["--env-name", args.speed_env, *args.speed_flags.split(),
                                               "--num-envs", str(args.speed_envs), "--num-updates",
                                               str(args.speed_updates), "--log-interval", "20"], log_dir)
            rows.append({"world_size": world_size, "envs_per_rank": args.speed_envs,
                         "steps_per_second": median_speed(scalars(run_dir, "train/steps_per_second")),
                         "env_steps": args.speed_updates * args.speed_envs * 5 * world_size, "wall_s": wall})
        print(f"speed: world size {world_size}: {rows[-1]['steps_per_second']:.0f} env steps/s", flush=True)
    return rows


def learning_setups(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(world size, envs a rank): one process; the same batch split over the ranks; the batch doubled."""
    setups = [(1, args.learn_envs)]
    for world_size in args.world_sizes:
        if world_size > 1:
            setups += [(world_size, args.learn_envs // world_size), (world_size, args.learn_envs)]
    return setups


def measure_learning(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    marks = [args.learn_steps * (i + 1) // 4 for i in range(4)]
    for world_size, envs in learning_setups(args):
        updates = args.learn_steps // (world_size * envs * 5)
        for seed in args.seeds:
            with tempfile.TemporaryDirectory(prefix="bench-scaling-") as log_dir:
                run_dir, wall = train(world_size, ["--env-name", args.learn_env, "--num-envs", str(envs),
                                                   "--num-updates", str(updates), "--seed", str(seed)], log_dir)
                mean100 = scalars(run_dir, "episode/return_mean100")
                rows.append({"world_size": world_size, "envs_per_rank": envs, "batch": world_size * envs * 5,
                             "seed": seed, "steps_per_second": median_speed(scalars(run_dir, "train/steps_per_second")),
                             "mean100_at": {str(mark): value_at(mean100, mark) for mark in marks}, "wall_s": wall})
            print(f"learning: world size {world_size} x {envs} envs, seed {seed}: mean100 "
                  + ", ".join(f"{v:.1f} at {k}" if v is not None else f"none at {k}"
                              for k, v in rows[-1]["mean100_at"].items()), flush=True)
    return rows


def summary_lines(speed: Sequence[dict[str, Any]], learning: Sequence[dict[str, Any]]) -> list[str]:
    """The table printed at the end: speed against world size 1, and the mean learning curve of each setup."""
    lines = []
    base = speed[0]["steps_per_second"] if speed else float("nan")
    for row in speed:
        lines.append(f"speed  world {row['world_size']} x {row['envs_per_rank']} envs: {row['steps_per_second']:7.0f} "
                     f"env steps/s ({row['steps_per_second'] / base:.2f}x world size 1)")
    setups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for row in learning:
        setups.setdefault((row["world_size"], row["envs_per_rank"]), []).append(row)
    for (world_size, envs), rows in setups.items():
        curve = []
        for mark in rows[0]["mean100_at"]:
            values = [row["mean100_at"][mark] for row in rows if row["mean100_at"][mark] is not None]
            curve.append(f"{statistics.mean(values):6.1f} at {int(mark) // 1000}k" if values else f"none at {mark}")
        speed_mean = statistics.mean(row["steps_per_second"] for row in rows)
        lines.append(f"learn  world {world_size} x {envs} envs (batch {rows[0]['batch']}), {len(rows)} seed(s): "
                     f"mean100 {', '.join(curve)}; {speed_mean:.0f} env steps/s")
    return lines


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    p.add_argument("--speed-env", default="PongNoFrameskip-v4")
    p.add_argument("--speed-flags", default="--arch nature --no-recurrent",
                   help="flags of the speed runs (one string)")
    p.add_argument("--speed-envs", type=int, default=8, help="envs a process in the speed runs")
    p.add_argument("--speed-updates", type=int, default=200)
    p.add_argument("--learn-env", default="CartPole-v1")
    p.add_argument("--learn-envs", type=int, default=8, help="envs of the one-process learning run")
    p.add_argument("--learn-steps", type=int, default=60_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-learning", action="store_true")
    p.add_argument("--json", metavar="PATH", help="write every figure here")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    speed = [] if args.skip_speed else measure_speed(args)
    learning = [] if args.skip_learning else measure_learning(args)
    for line in summary_lines(speed, learning):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"speed": speed, "learning": learning, "cpus": os.cpu_count()}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
