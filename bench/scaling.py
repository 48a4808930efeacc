"""Data-parallel scaling on this machine: env steps per second and learning per env step at world
sizes 1 and 2 (one process, or ``torchrun --standalone --nproc-per-node 2``), each process on one
torch thread (``--threads 1``, ``OMP_NUM_THREADS=1``), on the CPU with Gloo.

Two measurements, every run a real ``main.py`` run:

* speed: ``--speed-env`` (Pong, the fast configuration ``--arch nature --no-recurrent``) with
  ``--speed-envs`` envs a process for ``--speed-updates`` updates: the batch grows with the world
  size (weak scaling). On each env path of ``--speed-vec-envs``: ``dummy`` keeps each process on
  one thread; ``ale``, the default path, steps the games in C++ threads, one per core, so one
  process already uses every core in part. The figure is the median of the ``train/steps_per_second`` the run logged
  (global env steps of all ranks), leaving out the first interval (start-up).
* learning: ``--learn-env`` (CartPole-v1, its defaults) for ``--learn-steps`` env steps over
  ``--seeds``, as one process of ``--learn-envs`` envs, as 2 ranks of half as many each (the same
  batch per update: the learning per env step should not change), and as 2 ranks of
  ``--learn-envs`` each (twice the batch, the same learning rate). The figure is
  ``episode/return_mean100`` (the mean return of the last 100 games of all ranks) at fixed env steps.

* networks: each network's parameter count and gradient bytes a rank sends in an update, the
  time a ring all-reduce of them would take at 10 and 100 Gb/s (on paper: each rank sends and
  receives 2 (N-1)/N times the gradient, counted at N large, latency left out), and the measured
  time of one update's forward and backward pass on this CPU (one thread, ``--network-envs`` envs
  x 5 steps, the median of ``--network-repeats``): where the first nears the second, adding
  ranks stops paying.

    python bench/scaling.py                     # 5 min 26 s on this project's shared 2-core machine
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


def train(world_size: int, flags: Sequence[str], log_dir: str) -> tuple[str, float, float]:
    """Run it to the end; its run directory, wall time and CPU time of all its processes (start-up included)."""
    tic, cpu = time.perf_counter(), _children_cpu()
    subprocess.run(command(world_size, [*flags, "--log-dir", log_dir, "--threads", "1", "--no-progress",
                                        "--no-cuda", "--eval-interval", "0"]),
                   check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
    (run,) = os.listdir(log_dir)
    return os.path.join(log_dir, run), time.perf_counter() - tic, _children_cpu() - cpu


def _children_cpu() -> float:
    """User and system CPU seconds of the finished child processes (and theirs) so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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
    for vec_env in args.speed_vec_envs:
        for world_size in args.world_sizes:
            with tempfile.TemporaryDirectory(prefix="bench-scaling-") as log_dir:
                run_dir, wall, cpu = train(world_size, ["--env-name", args.speed_env, *args.speed_flags.split(),
                                                   "--vec-env", vec_env, "--num-envs", str(args.speed_envs),
                                                   "--num-updates", str(args.speed_updates), "--log-interval", "20"],
                                      log_dir)
                rows.append({"world_size": world_size, "vec_env": vec_env, "envs_per_rank": args.speed_envs,
                             "steps_per_second": median_speed(scalars(run_dir, "train/steps_per_second")),
                             "env_steps": args.speed_updates * args.speed_envs * 5 * world_size, "wall_s": wall,
                             "cpu_s": cpu})
            print(f"speed: --vec-env {vec_env}, world size {world_size}: {rows[-1]['steps_per_second']:.0f} "
                  f"env steps/s", flush=True)
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
                run_dir, wall, _ = train(world_size, ["--env-name", args.learn_env, "--num-envs", str(envs),
                                                   "--num-updates", str(updates), "--seed", str(seed)], log_dir)
                mean100 = scalars(run_dir, "episode/return_mean100")
                rows.append({"world_size": world_size, "envs_per_rank": envs, "batch": world_size * envs * 5,
                             "seed": seed, "steps_per_second": median_speed(scalars(run_dir, "train/steps_per_second")),
                             "mean100_at": {str(mark): value_at(mean100, mark) for mark in marks}, "wall_s": wall})
            print(f"learning: world size {world_size} x {envs} envs, seed {seed}: mean100 "
                  + ", ".join(f"{v:.1f} at {k}" if v is not None else f"none at {k}"
                              for k, v in rows[-1]["mean100_at"].items()), flush=True)
    return rows


NETWORKS = {  # name: (settings, observation shape, actions)
    "recurrent default (universe + LSTM), Pong": ({}, (4, 84, 84), 6),
    "fast configuration (nature, feed-forward), Pong": ({"arch": "nature", "recurrent": False}, (4, 84, 84), 6),
    "recurrent default with --icm, Pong": ({"curiosity.enabled": True}, (4, 84, 84), 6),
    "MLP 64-64 (actor and critic), LunarLander-v3": ({"recurrent": False}, (8,), 4),
}


def measure_networks(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    sys.path.insert(0, ROOT)
    from algorithms import make_agent
    from config import Config, with_settings
    from storage import Batch

    torch.set_num_threads(1)
    rows = []
    for name, (settings, shape, actions) in NETWORKS.items():
        torch.manual_seed(0)
        agent = make_agent(with_settings(Config(), settings), shape, actions)
        T, N = 5, args.network_envs
        obs = (torch.randint(0, 256, (T + 1, N, *shape), dtype=torch.uint8) if len(shape) == 3
               else torch.randn(T + 1, N, *shape))
        batch = Batch(obs=obs[:-1], episode_starts=torch.zeros(T, N), actions=torch.randint(0, actions, (T, N)),
                      returns=torch.randn(T, N), advantages=torch.randn(T, N), values=torch.zeros(T, N),
                      log_probs=torch.zeros(T, N), initial_state=agent.model.initial_state(N), next_obs=obs[1:],
                      valid=torch.ones(T, N))
        times = []
        for _ in range(args.network_repeats + 1):  # the first is a warm-up
            tic = time.perf_counter()
            agent.optimizer.zero_grad()
            agent.loss(batch)["total"].backward()
            times.append(time.perf_counter() - tic)
        params = sum(p.numel() for p in agent.params)
        rows.append({"network": name, "parameters": params, "gradient_bytes": 4 * params,
                     "allreduce_ms_10gbps": 2 * 4 * params / (10e9 / 8) * 1e3,
                     "allreduce_ms_100gbps": 2 * 4 * params / (100e9 / 8) * 1e3,
                     "update_ms_this_cpu": statistics.median(times[1:]) * 1e3, "batch": T * N})
    return rows


def summary_lines(speed: Sequence[dict[str, Any]], learning: Sequence[dict[str, Any]],
                  networks: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The table printed at the end: speed against world size 1, the mean learning curve of each
    setup, and each network's gradient against its update's compute."""
    lines = []
    for row in networks:
        lines.append(f"network {row['network']}: {row['parameters']:,} parameters, "
                     f"{row['gradient_bytes'] / 1e6:.2f} MB "
                     f"of gradient; all-reduce on paper {row['allreduce_ms_10gbps']:.2f} ms at 10 Gb/s, "
                     f"{row['allreduce_ms_100gbps']:.2f} ms at 100 Gb/s; forward + backward of {row['batch']} "
                     f"samples {row['update_ms_this_cpu']:.1f} ms on this CPU (1 thread)")
    base = {row["vec_env"]: row["steps_per_second"] for row in speed if row["world_size"] == 1}
    for row in speed:
        lines.append(f"speed  --vec-env {row['vec_env']}, world {row['world_size']} x {row['envs_per_rank']} envs: "
                     f"{row['steps_per_second']:7.0f} env steps/s "
                     f"({row['steps_per_second'] / base.get(row['vec_env'], float('nan')):.2f}x world size 1); "
                     f"{1000 * row.get('cpu_s', float('nan')) / row['env_steps']:.1f} CPU s a 1000 env steps, "
                     f"start-up included")
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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    p.add_argument("--speed-env", default="PongNoFrameskip-v4")
    p.add_argument("--speed-flags", default="--arch nature --no-recurrent",
                   help="flags of the speed runs (one string)")
    p.add_argument("--speed-vec-envs", nargs="+", default=["dummy", "ale"],
                   help="env paths of the speed runs: dummy steps the games in the process's own thread; ale in "
                        "C++ threads, one per core, beside the process's torch thread")
    p.add_argument("--speed-envs", type=int, default=8, help="envs a process in the speed runs")
    p.add_argument("--speed-updates", type=int, default=200)
    p.add_argument("--learn-env", default="CartPole-v1")
    p.add_argument("--learn-envs", type=int, default=8, help="envs of the one-process learning run")
    p.add_argument("--learn-steps", type=int, default=60_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    p.add_argument("--network-envs", type=int, default=16, help="envs of the batch timed in the network table")
    p.add_argument("--network-repeats", type=int, default=5)
    p.add_argument("--skip-networks", action="store_true")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-learning", action="store_true")
    p.add_argument("--json", metavar="PATH", help="write every figure here")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    networks = [] if args.skip_networks else measure_networks(args)
    speed = [] if args.skip_speed else measure_speed(args)
    learning = [] if args.skip_learning else measure_learning(args)
    for line in summary_lines(speed, learning, networks):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"networks": networks, "speed": speed, "learning": learning, "cpus": os.cpu_count()}, f,
                      indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
