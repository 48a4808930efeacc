"""Do the two env paths learn alike? Train on SB3's wrappers (dummy) and on ale-py's vector env (ale) side by side.

Two real runs of ``main.py`` start together, identical but for ``--vec-env``, each with one
torch thread so that they share the machine evenly; after ``--minutes`` both get SIGTERM (which
finishes the update, writes ``a2c_last`` and exits). Then their TensorBoard logs are read and
compared:

* env steps reached and games finished;
* mean raw return of the last 100 games at the end of each run, and at the env-step count both
  reached (learning per env step, the fair comparison when one path is faster);
* resident memory (``train/resident_memory_mib``, logged every ``--log-interval`` updates):
  its value after ``--settle-minutes`` and at the end, and the growth in between. The first
  minute is left out because the allocator and the libraries fill their pools then.

    python bench/env_paths.py --minutes 30                          # Pong, 16 envs
    python bench/env_paths.py --minutes 5 --env-name BreakoutNoFrameskip-v4 --log-dir runs/paths
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from plots import load_scalars  # noqa: E402

PATHS = ("dummy", "ale")


def start_run(path: str, args: argparse.Namespace) -> subprocess.Popen:
    log_dir = os.path.join(args.log_dir, path)
    command = [sys.executable, os.path.join(ROOT, "main.py"), "--env-name", args.env_name, "--vec-env", path,
               "--seed", str(args.seed), "--threads", "1", "--no-progress", "--no-cuda", "--log-dir", log_dir]
    log = open(os.path.join(args.log_dir, f"{path}.log"), "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def run_dir_of(path: str, log_dir: str) -> str:
    root = os.path.join(log_dir, path)
    (name,) = os.listdir(root)  # one run per path in a fresh log dir
    return os.path.join(root, name)


def mean_last(returns: np.ndarray, count: int = 100) -> float:
    return float(returns[-count:].mean()) if len(returns) else float("nan")


def summarize(run_dir: str, common_step: int, settle_minutes: float, minutes: float) -> dict[str, float]:
    scalars = load_scalars(run_dir)
    steps, returns = scalars["episode/return"]
    rss_steps, rss = scalars["train/resident_memory_mib"]
    last_step = int(scalars["loss/total"][0][-1])
    # RSS is logged against env steps; the run's pace turns the settling time into a step count.
    settle_step = last_step * settle_minutes / minutes
    settled = rss[rss_steps >= settle_step]
    first_rss = float(settled[0]) if len(settled) else float("nan")
    return {"steps": last_step, "games": len(returns), "return_end": mean_last(returns),
            "return_common": mean_last(returns[steps <= common_step]),
            "rss_settled": first_rss, "rss_end": float(rss[-1]),
            "rss_growth": 100.0 * (float(rss[-1]) - first_rss) / first_rss}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0, help="wall-clock minutes each run trains")
    p.add_argument("--env-name", default="PongNoFrameskip-v4", help="Atari game, gymnasium id")
    p.add_argument("--seed", type=int, default=42, help="seed of both runs")
    p.add_argument("--settle-minutes", type=float, default=1.0,
                   help="memory growth is measured from this point of the run to its end")
    p.add_argument("--log-dir", default=os.path.join("runs", "env_paths"),
                   help="a new directory for the two runs (and their console logs)")
    args = p.parse_args(argv)
    if os.path.exists(args.log_dir) and os.listdir(args.log_dir):
        p.error(f"--log-dir {args.log_dir} is not empty; give a new directory")
    os.makedirs(args.log_dir, exist_ok=True)

    runs = {path: start_run(path, args) for path in PATHS}
    print(f"{args.env_name}: training on {', '.join(PATHS)} side by side for {args.minutes:g} minutes "
          f"(logs in {args.log_dir})", flush=True)
    deadline = time.monotonic() + 60 * args.minutes
    while time.monotonic() < deadline and all(run.poll() is None for run in runs.values()):
        time.sleep(5)
    for run in runs.values():
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
    codes = {path: run.wait() for path, run in runs.items()}
    if any(codes.values()):
        print(f"error: a run failed: exit codes {codes}; see {args.log_dir}/*.log", file=sys.stderr)
        return 1

    dirs = {path: run_dir_of(path, args.log_dir) for path in PATHS}
    common = min(int(load_scalars(d)["loss/total"][0][-1]) for d in dirs.values())
    rows = {path: summarize(d, common, args.settle_minutes, args.minutes) for path, d in dirs.items()}
    print(f"\n{'path':<6} {'env steps':>10} {'games':>6} {'return (last 100)':>18} "
          f"{'at ' + format(common, ',') + ' steps':>20} {'RSS settled':>12} {'RSS end':>9} {'growth':>7}")
    for path, r in rows.items():
        print(f"{path:<6} {r['steps']:>10,} {r['games']:>6} {r['return_end']:>18.2f} {r['return_common']:>20.2f} "
              f"{r['rss_settled']:>8.0f} MiB {r['rss_end']:>5.0f} MiB {r['rss_growth']:>6.1f}%")
    print(f"steps/s ratio (ale / dummy): {rows['ale']['steps'] / rows['dummy']['steps']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
