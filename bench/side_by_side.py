"""Do two settings learn alike? Train two runs side by side that differ in one setting, and compare.

Two real runs of ``main.py`` start together, identical (same game, same seed, the flags of
``--flags``) but for the flags of their ``--variants``, each with one torch thread so that they
share the machine evenly; after ``--minutes`` both get SIGTERM (which finishes the update,
writes ``a2c_last`` and exits). The default variants are the two env paths: SB3's wrappers
(``--vec-env dummy``) and ale-py's vector env (``--vec-env ale``). Then their TensorBoard logs
are read and compared:

* env steps reached and games finished;
* mean raw return of the last 100 games at the end of each run, and at the env-step count both
  reached (learning per env step, the fair comparison when one path is faster);
* resident memory (``train/resident_memory_mib``, logged every ``--log-interval`` updates):
  its value after ``--settle-minutes`` and at the end, and the growth in between. The first
  minute is left out because the allocator and the libraries fill their pools then;
* with ``--reach``, the env steps each run took until the mean of its last 100 games first
  reached each of the given scores (sample efficiency, read off the same learning curves).

``--report-only`` compares two runs already in ``--log-dir`` without training (give the
``--minutes`` they trained for: it places the settling point of the memory figures).

    python bench/side_by_side.py --minutes 30                       # Pong, 16 envs: dummy vs ale
    python bench/side_by_side.py --minutes 5 --env-name BreakoutNoFrameskip-v4 --log-dir runs/paths
    python bench/side_by_side.py --minutes 5 --log-dir runs/paths --report-only --reach 1 5 10
    python bench/side_by_side.py --minutes 75 --env-name BreakoutNoFrameskip-v4 --log-dir runs/bf16 \
        --flags="--vec-env ale --arch nature --no-recurrent" --variants float32= bf16=--bf16
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from plots import load_scalars, moving_average  # noqa: E402

ENV_PATHS = ["dummy=--vec-env dummy", "ale=--vec-env ale"]


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``NAME=FLAGS`` -> (name, flags): ``bf16=--bf16``, ``ale=--vec-env ale``, ``float32=`` (no flags)."""
    name, sep, flags = text.partition("=")
    if not sep or not name or not name.replace("-", "").replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"expected NAME=FLAGS with a plain NAME, got '{text}'")
    return name, shlex.split(flags)


def run_command(name: str, flags: list[str], args: argparse.Namespace) -> list[str]:
    """The ``main.py`` command of one variant: shared settings, then ``--flags``, then the variant's own."""
    return [sys.executable, os.path.join(ROOT, "main.py"), "--env-name", args.env_name, "--seed", str(args.seed),
            "--threads", "1", "--no-progress", "--no-cuda", "--log-dir", os.path.join(args.log_dir, name),
            *shlex.split(args.flags), *flags]


def start_run(name: str, flags: list[str], args: argparse.Namespace) -> subprocess.Popen:
    log = open(os.path.join(args.log_dir, f"{name}.log"), "w")
    return subprocess.Popen(run_command(name, flags, args), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def run_dir_of(name: str, log_dir: str) -> str:
    root = os.path.join(log_dir, name)
    (run,) = os.listdir(root)  # one run per variant in a fresh log dir
    return os.path.join(root, run)


def mean_last(returns: np.ndarray, count: int = 100) -> float:
    return float(returns[-count:].mean()) if len(returns) else float("nan")


def first_reach(steps: np.ndarray, returns: np.ndarray, score: float, count: int = 100) -> int | None:
    """The env step of the game at which the mean of the last ``count`` games first reached ``score``
    (only full windows of ``count`` games count); None if it never did."""
    if len(returns) < count:
        return None
    means = moving_average(returns, count)[count - 1:]  # means[i]: games i .. i + count - 1
    reached = np.flatnonzero(means >= score)
    return int(steps[reached[0] + count - 1]) if len(reached) else None


def summarize(scalars: dict[str, tuple[np.ndarray, np.ndarray]], common_step: int, settle_minutes: float,
              minutes: float) -> dict[str, float]:
    """One run's row, from its TensorBoard scalars (``plots.load_scalars``)."""
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


def train_side_by_side(variants: dict[str, list[str]], args: argparse.Namespace) -> bool:
    """Start both runs, stop them after ``args.minutes``; False (and a line on stderr) if one failed."""
    os.makedirs(args.log_dir, exist_ok=True)
    runs = {name: start_run(name, flags, args) for name, flags in variants.items()}
    print(f"{args.env_name}: training {' and '.join(variants)} side by side for {args.minutes:g} minutes "
          f"(logs in {args.log_dir})", flush=True)
    deadline = time.monotonic() + 60 * args.minutes
    while time.monotonic() < deadline and all(run.poll() is None for run in runs.values()):
        time.sleep(5)
    for run in runs.values():
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
    codes = {name: run.wait() for name, run in runs.items()}
    if any(codes.values()):
        print(f"error: a run failed: exit codes {codes}; see {args.log_dir}/*.log", file=sys.stderr)
        return False
    return True


def report(names: list[str], args: argparse.Namespace) -> None:
    """Print the comparison of the two runs ``names`` in ``args.log_dir``, read from their TensorBoard logs."""
    scalars = {name: load_scalars(run_dir_of(name, args.log_dir)) for name in names}
    common = min(int(tags["loss/total"][0][-1]) for tags in scalars.values())
    rows = {name: summarize(tags, common, args.settle_minutes, args.minutes) for name, tags in scalars.items()}
    width = max(len("run"), *map(len, rows))
    print(f"\n{'run':<{width}} {'env steps':>10} {'games':>6} {'return (last 100)':>18} "
          f"{'at ' + format(common, ',') + ' steps':>20} {'RSS settled':>12} {'RSS end':>9} {'growth':>7}")
    for name, r in rows.items():
        print(f"{name:<{width}} {r['steps']:>10,} {r['games']:>6} {r['return_end']:>18.2f} "
              f"{r['return_common']:>20.2f} {r['rss_settled']:>8.0f} MiB {r['rss_end']:>5.0f} MiB "
              f"{r['rss_growth']:>6.1f}%")
    marks = [common * k // 4 for k in (1, 2, 3, 4)]
    print("\nmean return of the last 100 games at " + ", ".join(f"{m:,}" for m in marks) + " env steps:")
    for name, tags in scalars.items():
        steps, returns = tags["episode/return"]
        print(f"{name:<{width}} " + "  ".join(f"{mean_last(returns[steps <= m]):8.2f}" for m in marks))
    if args.reach:
        print("\nenv steps until the mean of the last 100 games first reached " +
              ", ".join(f"{score:g}" for score in args.reach) + ":")
        for name, tags in scalars.items():
            reached = [first_reach(*tags["episode/return"], score) for score in args.reach]
            print(f"{name:<{width}} " + "  ".join(f"{step:>10,}" if step is not None else f"{'never':>10}"
                                               for step in reached))
    first, second = rows
    print(f"steps/s ratio ({second} / {first}): {rows[second]['steps'] / rows[first]['steps']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0, help="wall-clock minutes each run trains")
    p.add_argument("--env-name", default="PongNoFrameskip-v4", help="Atari game, gymnasium id")
    p.add_argument("--seed", type=int, default=42, help="seed of both runs")
    p.add_argument("--settle-minutes", type=float, default=1.0,
                   help="memory growth is measured from this point of the run to its end")
    p.add_argument("--log-dir", default=os.path.join("runs", "side_by_side"),
                   help="a new directory for the two runs (and their console logs)")
    p.add_argument("--flags", default="", help="main.py flags of both runs, as one string")
    p.add_argument("--variants", nargs=2, type=parse_variant, default=[parse_variant(v) for v in ENV_PATHS],
                   metavar="NAME=FLAGS", help="the two runs: a name each and the flags that set it apart "
                                              f"(default: {' '.join(repr(v) for v in ENV_PATHS)})")
    p.add_argument("--reach", nargs="+", type=float, default=[], metavar="SCORE",
                   help="also print the env steps until the mean of the last 100 games first reached each score")
    p.add_argument("--report-only", action="store_true",
                   help="compare the two runs already in --log-dir, without training")
    args = p.parse_args(argv)
    variants = dict(args.variants)
    if len(variants) != 2:
        p.error("--variants: give the two runs different names")
    if args.report_only:
        if not all(os.path.isdir(os.path.join(args.log_dir, name)) for name in variants):
            p.error(f"--report-only: no runs named {' and '.join(variants)} in --log-dir {args.log_dir}")
    else:
        if os.path.exists(args.log_dir) and os.listdir(args.log_dir):
            p.error(f"--log-dir {args.log_dir} is not empty; give a new directory")
        if not train_side_by_side(variants, args):
            return 1
    report(list(variants), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
