"""Which training settings learn fastest? Run a study unattended, then write one table and one plot.

Each configuration (``NAME=FLAGS``: main.py's flags; ``default=`` for none) trains once per seed for
``--steps`` env steps, ``--parallel`` runs at a time, in ``LOG_DIR/NAME_seedS``. Started again, the
study skips finished runs and resumes stopped ones; Ctrl+C or SIGTERM stops the runs cleanly. The
report (``OUT.md``, ``.json``, ``.png``) gives each configuration's env steps until the mean-100
reached each ``--reach`` score, its mean-100 at the end, explained variance and speed.

    python -m bench.study --env-name LunarLander-v3 --configs default= randomized=--randomize-domain \\
        --seeds 1 2 3 --steps 1000000 --log-dir runs/dr --flags=--no-cuda
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time
import types
from typing import Any, Iterable, NamedTuple, Optional, Sequence

import numpy as np

import main as train_cli
import recipes
from bench import ROOT, markdown_table, positive, write_report
from plots import load_scalars, plot_runs

RETURN_TAG, SPEED_TAG = "episode/return_mean100", "train/steps_per_second"
EXPLAINED_VARIANCE_TAG = "train/explained_variance"
TAIL_FRACTION = 0.1  # explained variance is averaged over this last share of a run's env steps
# What the study sets itself (with its option that does), and flags that would make a run no training
# run: refused in a configuration.
STUDY_OWNED = dict(
    env_name="--env-name", seed="--seeds", log_dir="--log-dir", num_updates="--steps", max_env_steps="--steps"
)
NOT_TRAINING = ("resume", "eval", "load", "plot", "out")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # usable as a directory name everywhere
DONE_MARKER, RUN_FILE, LOG_FILE = "done", "run.json", "train.log"  # in a run's directory


def parse_config(text: str) -> tuple[str, list[str]]:
    """``NAME=FLAGS`` -> (name, flags): ``roll20=--rollout-size 20`` -> ("roll20", ["--rollout-size", "20"])."""
    name, sep, flags = text.partition("=")
    if not sep or not NAME_PATTERN.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"expected NAME=FLAGS with a NAME of letters, digits and ._+- (it names a directory), got '{text}'"
        )
    try:
        return name, shlex.split(flags)
    except ValueError as exc:  # an unclosed quote
        raise argparse.ArgumentTypeError(f"cannot split the flags of '{text}': {exc}") from None


def check_flags(flags: Sequence[str]) -> None:
    """``ValueError`` for bad ``main.py`` flags (with main.py's message), ones the study sets itself, ones
    that ask for something other than training, and ``--no-tensorboard`` (the report reads its logs)."""
    parser = train_cli.build_parser(with_defaults=False)  # what is typed, and nothing else

    def refuse(message: str = "", *_: Any) -> None:  # instead of printing and exiting
        raise ValueError(message or "--help is no training flag")

    parser.error = parser.exit = refuse  # type: ignore[method-assign]
    typed = vars(parser.parse_args(list(flags)))
    for field, instead in STUDY_OWNED.items():
        if field in typed:
            raise ValueError(f"--{field.replace('_', '-')} is set by the study (use its {instead})")
    for field in NOT_TRAINING:
        if field in typed:
            raise ValueError(f"--{field} is not a training flag")
    if typed.get("tensorboard") is False:
        raise ValueError("--no-tensorboard leaves the report nothing to read")


def budget(steps: int, flags: Sequence[str], env_name: str = "PongNoFrameskip-v4") -> tuple[int, list[str]]:
    """``--num-updates`` for ``steps`` env steps, ``ceil(steps / (num_envs * rollout_size))`` as main.py reads
    ``flags`` for ``env_name``, and no more flags; for GRPO, whose rounds vary in length, its own update
    count and ``--max-env-steps steps``, which holds a run to them."""
    config, _, typed = train_cli.parse_args(["--env-name", env_name, *flags])
    settings = recipes.with_env_defaults(config, typed)
    if settings.algo == "grpo":
        return settings.num_updates, ["--max-env-steps", str(steps)]
    return max(1, math.ceil(steps / settings.steps_per_update)), []


class Run(NamedTuple):
    """One configuration trained with one seed, in ``root`` (``LOG_DIR/NAME_seedS``)."""

    name: str
    seed: int
    flags: list[str]  # the common --flags, then the configuration's own
    updates: int
    root: str

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.seed}"


def run_command(run: Run, env_name: str, resume: Optional[str] = None) -> list[str]:
    """``run``'s ``main.py`` command: a new run in ``run.root``, or one continued from the checkpoint
    ``resume`` (in its own run directory); one torch thread, no progress bar, the run's flags last."""
    start = [sys.executable, os.path.join(ROOT, "main.py"), *(["--resume", resume] if resume else [])]
    fixed = ["--env-name", env_name, "--threads", "1", "--seed", str(run.seed), "--no-progress"]
    where = [] if resume else ["--log-dir", run.root]
    return [*start, *fixed, *where, "--num-updates", str(run.updates), *run.flags]


def steps_to_reach(steps: np.ndarray, values: np.ndarray, score: float) -> Optional[int]:
    """The first of ``steps`` whose value (a mean of the last 100 games) is at least ``score``; None if none is."""
    reached = np.flatnonzero(np.asarray(values) >= score)
    return int(np.asarray(steps)[reached[0]]) if len(reached) else None


def tail_mean(steps: np.ndarray, values: np.ndarray, end: int, fraction: float = TAIL_FRACTION) -> float:
    """Mean of the ``values`` logged in the last ``fraction`` of env steps ``0 .. end`` (else the last; NaN: none)."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=np.float64)
    if not len(values):
        return float("nan")
    tail = values[steps >= end * (1.0 - fraction)]
    return float(tail.mean()) if len(tail) else float(values[-1])


def summarize_run(scalars: dict[str, tuple[np.ndarray, np.ndarray]], reach: Sequence[float]) -> dict[str, Any]:
    """One run's figures from its scalars (``plots.load_scalars``): its last env step, ``steps_to_reach``
    each score, its last mean-100, ``tail_mean`` of the explained variance, its mean speed (NaN: none)."""
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0))
    end = max((int(s[-1]) for s, _ in scalars.values() if len(s)), default=0)
    steps, means = scalars.get(RETURN_TAG, empty)
    speeds = scalars.get(SPEED_TAG, empty)[1]
    return {
        "steps": end,
        "reach": [steps_to_reach(steps, means, score) for score in reach],
        "final": float(means[-1]) if len(means) else float("nan"),
        "explained_variance": tail_mean(*scalars.get(EXPLAINED_VARIANCE_TAG, empty), end=end),
        "steps_per_second": float(np.mean(speeds)) if len(speeds) else float("nan"),
    }


def config_row(
    name: str, flags: Sequence[str], seeds: Sequence[int], runs: Sequence[dict[str, Any]], reach: Sequence[float]
) -> dict[str, Any]:
    """A configuration's row from its runs' ``summarize_run``: per-seed steps-to-reach and final means,
    the least env steps, explained variance and speed averaged over the seeds that logged them."""

    def mean(values: Iterable[float]) -> float:
        finite = [v for v in values if math.isfinite(v)]
        return float(np.mean(finite)) if finite else float("nan")

    return {
        "config": name,
        "flags": shlex.join(flags),
        "seeds": list(seeds),
        "env_steps": min((r["steps"] for r in runs), default=0),
        "steps_to_reach": {format(score, "g"): [r["reach"][i] for r in runs] for i, score in enumerate(reach)},
        "final_mean100": [r["final"] for r in runs],
        "explained_variance": mean(r["explained_variance"] for r in runs),
        "steps_per_second": mean(r["steps_per_second"] for r in runs),
    }


def study_table(rows: Sequence[dict[str, Any]], reach: Sequence[float]) -> str:
    """The rows of ``config_row`` as a markdown table, several seeds' values joined with `` / ``."""

    def number(value: Optional[float], digits: int) -> str:
        return "-" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"

    def steps(each: Sequence[Optional[int]]) -> str:
        return " / ".join("not reached" if s is None else f"{s:,}" for s in each)

    header = ["config", "flags", "seeds", "env steps", *[f"steps to {score:g}" for score in reach]]
    header += ["final mean-100", "explained variance (last 10%)", "steps/s"]
    cells = []
    for row in rows:
        flags = f"`{row['flags']}`".replace("|", "\\|") if row["flags"] else "none"
        reached = [steps(row["steps_to_reach"][f"{score:g}"]) for score in reach]
        cells.append([row["config"], flags, " ".join(map(str, row["seeds"])), f"{row['env_steps']:,}", *reached])
        cells[-1].append(" / ".join(number(v, 2) for v in row["final_mean100"]))
        cells[-1] += [number(row["explained_variance"], 3), number(row["steps_per_second"], 0)]
    return "\n".join(markdown_table(header, cells)) + "\n"


def find_run_dir(root: str) -> Optional[str]:
    """The ``main.py`` run directory (``ENV_TIME_seedS``) in ``root``: of several (a start that failed
    before its first checkpoint, then another), the newest holding an ``a2c_last``, else the newest."""
    dirs = [d for d in glob.glob(os.path.join(glob.escape(root), "*_seed*")) if os.path.isdir(d)]
    saved = [d for d in dirs if os.path.isfile(os.path.join(d, "a2c_last"))]
    return max(saved or dirs, key=lambda d: (os.path.getmtime(d), d)) if dirs else None


def done_updates(root: str) -> int:
    """The updates the run in ``root`` finished with (its ``done`` marker); 0 if it has not finished."""
    try:
        return int(pathlib.Path(root, DONE_MARKER).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def check_same_run(run: Run, env_name: str) -> None:
    """``ValueError`` if ``run.root`` holds a run of another game or flags: that would mix two configurations."""
    try:
        before = json.loads(pathlib.Path(run.root, RUN_FILE).read_text())
    except (OSError, ValueError):
        return
    if (before.get("env_name"), before.get("flags")) != (env_name, run.flags):
        raise ValueError(
            f"{run.root} holds a run of {before.get('env_name')} with the flags "
            f"'{shlex.join(before.get('flags', []))}'; give it another NAME, or another --log-dir"
        )


def plan(run: Run, env_name: str) -> Optional[list[str]]:
    """The command that brings ``run`` to its update count: new, resumed from the ``a2c_last`` a stopped
    run left, or None where it has them already."""
    if done_updates(run.root) >= run.updates:
        return None
    from checkpoints import load_checkpoint
    from utils import UsageError

    run_dir, update = find_run_dir(run.root), None
    last = os.path.join(run_dir, "a2c_last") if run_dir else None
    try:
        update = int(load_checkpoint(last)["update"]) if last and os.path.isfile(last) else None
    except (UsageError, KeyError, TypeError, ValueError) as exc:  # unreadable: trained anew
        print(f"warning: {exc}", file=sys.stderr)
    if update is not None and update >= run.updates:  # it finished, but the study stopped before marking it
        pathlib.Path(run.root, DONE_MARKER).write_text(f"{update}\n")
        return None
    return run_command(run, env_name, resume=last if update is not None else None)


def train_runs(
    todo: list[tuple[Run, list[str]]], parallel: int, env_name: str, deadline: Optional[float] = None
) -> tuple[list[str], int]:
    """Run the commands ``parallel`` at a time, each logging to its ``train.log``; a run that exits 0
    unasked gets its ``done`` marker. The first SIGINT or SIGTERM, or the clock reaching ``deadline``, stops
    the runs (each writes ``a2c_last``); a second signal raises KeyboardInterrupt. Returns the runs that
    failed and the signal that stopped them (SIGTERM at the deadline)."""
    pending, active, signalled, failed, stop = list(todo), {}, set(), [], types.SimpleNamespace(signum=0)

    def request(signum: int, frame: Any = None, why: str = "") -> None:
        if stop.signum:
            raise KeyboardInterrupt
        stop.signum = signum
        why = why or f"{signal.Signals(signum).name} (again to leave at once)"
        print(f"{why}: stopping the runs (they write a2c_last), starting no more", file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, request) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while pending or active:
            if deadline is not None and time.time() >= deadline and not stop.signum:
                request(signal.SIGTERM, why="the time is up")
            if stop.signum:
                pending.clear()
                for proc in set(active) - signalled:
                    proc.send_signal(signal.SIGTERM)
                    signalled.add(proc)
            while pending and len(active) < parallel:
                run, command = pending.pop(0)
                os.makedirs(run.root, exist_ok=True)
                about = {"name": run.name, "seed": run.seed, "env_name": env_name, "flags": run.flags}
                pathlib.Path(run.root, RUN_FILE).write_text(json.dumps(about))
                with open(os.path.join(run.root, LOG_FILE), "a") as log:  # the run writes to its own copy
                    log.write(f"$ {shlex.join(command)}\n")
                    log.flush()
                    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
                active[proc] = run, time.monotonic()
                how = f"{'resuming' if '--resume' in command else 'starting'} {run.label}: {run.updates:,} updates"
                print(f"[{len(todo) - len(pending)}/{len(todo)}] {how} (log: {log.name})", flush=True)
            for proc in [p for p in active if p.poll() is not None]:
                run, began = active.pop(proc)
                minutes = f"{(time.monotonic() - began) / 60:.1f} min"
                if stop.signum:
                    print(f"stopped {run.label} ({minutes}; it resumes where it stopped when run again)", flush=True)
                elif proc.returncode == 0:  # one stopped just as it finished: see plan
                    pathlib.Path(run.root, DONE_MARKER).write_text(f"{run.updates}\n")
                    print(f"finished {run.label} ({minutes})", flush=True)
                else:
                    failed.append(run.label)
                    log = os.path.join(run.root, LOG_FILE)
                    print(f"error: {run.label} failed with exit code {proc.returncode}; see {log}", file=sys.stderr)
            if active:
                time.sleep(0.5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return failed, stop.signum


def report(runs: Sequence[Run], configs: Sequence[tuple[str, list[str]]], common: Sequence[str], args: Any) -> bool:
    """Print the table of each configuration's runs (``configs``: its name and own flags) and write the
    report ``args.out`` (.md, .json, .png); False if no run had logs to read."""
    rows, run_dirs, labels = [], [], []
    for name, flags in configs:
        seeds, summaries = [], []
        for run in (run for run in runs if run.name == name):
            run_dir = find_run_dir(run.root)
            try:
                scalars = load_scalars(run_dir) if run_dir else None
            except ValueError:  # a start that failed before TensorBoard wrote anything
                scalars = None
            if scalars is not None:
                seeds.append(run.seed)
                summaries.append(summarize_run(scalars, args.reach))
                run_dirs.append(run_dir)
                labels.append(run.label)
        if summaries:
            row = config_row(name, flags, seeds, summaries, args.reach)
            rows.append({**row, "runs": run_dirs[-len(summaries) :]})
    if not rows:
        print("error: no run with TensorBoard logs to report on", file=sys.stderr)
        return False
    table = study_table(rows, args.reach)
    flags = f"`{shlex.join(common)}`" if common else "none"
    heading = f"{args.env_name}: {len(run_dirs)} runs of {len(rows)} configurations; flags of all runs: {flags}"
    print(f"\n{heading}\n\n{table}", flush=True)
    data = {"env_name": args.env_name, "common_flags": shlex.join(common), "reach": args.reach, "rows": rows}
    written = write_report(args.out, f"# Study: {heading}\n\n{table}", data)
    try:
        plot_runs(run_dirs, args.out + ".png", labels=labels)
        written.append(args.out + ".png")
    except (ValueError, OSError) as exc:  # e.g. runs too short to have logged any curve
        print(f"warning: no plot: {exc}", file=sys.stderr)
    print("wrote " + ", ".join(written), flush=True)
    return True


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    configs = "the configurations: a name each (it names their directories) and their main.py flags"
    p.add_argument("--configs", nargs="+", type=parse_config, required=True, metavar="NAME=FLAGS", help=configs)
    p.add_argument("--flags", default="", help="main.py flags of every run, as one string, before a configuration's")
    p.add_argument("--env-name", default="PongNoFrameskip-v4", help="Atari game, gymnasium id (default: %(default)s)")
    seeds = "each configuration trains once per seed (default: 42)"
    p.add_argument("--seeds", nargs="+", type=train_cli.parse_seed, default=[42], metavar="SEED", help=seeds)
    p.add_argument("--steps", type=positive, default=1_500_000, help="env-step budget of each run (default: 1,500,000)")
    p.add_argument("--parallel", type=positive, default=2, help="runs training at a time (default: %(default)s)")
    log_dir = "the study's runs, each in NAME_seedS; started again here it carries on (default: %(default)s)"
    p.add_argument("--log-dir", default=os.path.join("bench", "out", "study"), help=log_dir)
    p.add_argument("--out", metavar="PREFIX", help="the report PREFIX.md, .json, .png (default: LOG_DIR/study)")
    reach = "report the env steps until the mean of the last 100 games first reached each score (default: -15 18)"
    p.add_argument("--reach", nargs="+", type=float, default=[-15.0, 18.0], metavar="SCORE", help=reach)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    names = [name for name, _ in args.configs]
    if len(set(names)) != len(names):
        p.error(f"--configs: a name is given twice: {' '.join(sorted({n for n in names if names.count(n) > 1}))}")
    if len(set(args.seeds)) != len(args.seeds):
        p.error("--seeds: a seed is given twice")
    try:
        common = shlex.split(args.flags)
    except ValueError as exc:
        p.error(f"--flags: {exc}")
    runs = []
    for name, own in args.configs:
        try:
            check_flags(common + own)
            updates, limit = budget(args.steps, common + own, args.env_name)
            for seed in args.seeds:
                root = os.path.join(args.log_dir, f"{name}_seed{seed}")
                runs.append(Run(name, seed, common + own + limit, updates, root))
                check_same_run(runs[-1], args.env_name)
        except ValueError as exc:
            p.error(f"configuration {name}: {exc}")

    todo = [(run, command) for run in runs if (command := plan(run, args.env_name)) is not None]
    what = f"{len(args.configs)} configurations x {len(args.seeds)} seeds, {args.steps:,} env steps each"
    left = f"{len(runs) - len(todo)} finished already, {len(todo)} to train, {args.parallel} at a time"
    print(f"{args.env_name}: {what}; {left} (in {args.log_dir})", flush=True)
    try:
        failed, signum = train_runs(todo, args.parallel, args.env_name)
    except KeyboardInterrupt:  # a second Ctrl+C: the runs already have their SIGTERM and stop on their own
        print("error: interrupted; the runs in progress write a2c_last and stop on their own", file=sys.stderr)
        return 130
    args.out = args.out or os.path.join(args.log_dir, "study")
    reported = report(runs, args.configs, common, args)
    if failed:
        print(f"error: {len(failed)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 128 + signum if signum else 0 if reported else 1


if __name__ == "__main__":
    sys.exit(main())
