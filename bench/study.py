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
import dataclasses
import glob
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import types
from typing import Any, Iterable, Optional, Sequence

import numpy as np

import main as train_cli
import recipes
from bench import positive
from plots import load_scalars, plot_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RETURN_TAG, SPEED_TAG = "episode/return_mean100", "train/steps_per_second"
EXPLAINED_VARIANCE_TAG = "train/explained_variance"
TAIL_FRACTION = 0.1  # explained variance is averaged over this last share of a run's env steps
# What the study sets itself, and flags that would make a run no training run: refused in a configuration.
STUDY_OWNED = {
    "env_name": "--env-name",
    "seed": "--seeds",
    "log_dir": "--log-dir",
    "num_updates": "--steps",
    "max_env_steps": "--steps",
}
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


def _settings(flags: Sequence[str], env_name: str) -> Any:
    config, _, typed = train_cli.parse_args(["--env-name", env_name, *flags])
    return recipes.with_env_defaults(config, typed)


def updates_for(steps: int, flags: Sequence[str], env_name: str = "PongNoFrameskip-v4") -> int:
    """``--num-updates`` for ``steps`` env steps: ``ceil(steps / (num_envs * rollout_size))`` as main.py reads
    ``flags`` for ``env_name``; GRPO, whose rounds vary in length, keeps its own (see ``step_budget``)."""
    settings = _settings(flags, env_name)
    if settings.algo == "grpo":
        return settings.num_updates
    return max(1, math.ceil(steps / (settings.num_envs * settings.rollout_size)))


def step_budget(steps: int, flags: Sequence[str], env_name: str = "PongNoFrameskip-v4") -> list[str]:
    """``--max-env-steps steps`` where the update count cannot hold a run to them (``--algo grpo``)."""
    return ["--max-env-steps", str(steps)] if _settings(flags, env_name).algo == "grpo" else []


def run_command(
    env_name: str,
    seed: int,
    updates: int,
    flags: Sequence[str],
    log_dir: Optional[str] = None,
    resume: Optional[str] = None,
) -> list[str]:
    """One run's ``main.py`` command: a new one under ``log_dir``, or one continued from the checkpoint
    ``resume`` (in its own run directory); one torch thread, no progress bar, ``flags`` last."""
    if (log_dir is None) == (resume is None):
        raise ValueError("give either log_dir (a new run) or resume (a checkpoint to continue)")
    where = ["--log-dir", log_dir] if resume is None else []
    start = ["--resume", resume] if resume is not None else []
    return [
        sys.executable,
        os.path.join(ROOT, "main.py"),
        *start,
        "--env-name",
        env_name,
        "--threads",
        "1",
        "--seed",
        str(seed),
        "--no-progress",
        *where,
        "--num-updates",
        str(updates),
        *flags,
    ]


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


def markdown_table(rows: Sequence[dict[str, Any]], reach: Sequence[float]) -> str:
    """The rows of ``config_row`` as a markdown table, several seeds' values joined with `` / ``."""

    def number(value: Optional[float], digits: int) -> str:
        return "-" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"

    header = [
        "config",
        "flags",
        "seeds",
        "env steps",
        *[f"steps to {score:g}" for score in reach],
        "final mean-100",
        "explained variance (last 10%)",
        "steps/s",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        flags = f"`{row['flags']}`".replace("|", "\\|") if row["flags"] else "none"
        cells = [
            row["config"],
            flags,
            " ".join(map(str, row["seeds"])),
            f"{row['env_steps']:,}",
            *[
                " / ".join("not reached" if s is None else f"{s:,}" for s in row["steps_to_reach"][f"{score:g}"])
                for score in reach
            ],
            " / ".join(number(v, 2) for v in row["final_mean100"]),
            number(row["explained_variance"], 3),
            number(row["steps_per_second"], 0),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def json_ready(value: Any) -> Any:
    """NaN (no data) as JSON null, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    return [json_ready(v) for v in value] if isinstance(value, (list, tuple)) else value


@dataclasses.dataclass
class Run:
    """One configuration trained with one seed, in ``root`` (``LOG_DIR/NAME_seedS``)."""

    name: str
    seed: int
    flags: list[str]  # the common --flags, then the configuration's own
    updates: int
    root: str

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.seed}"


def find_run_dir(root: str) -> Optional[str]:
    """The ``main.py`` run directory (``ENV_TIME_seedS``) in ``root``: of several (a start that failed
    before its first checkpoint, then another), the newest holding an ``a2c_last``, else the newest."""
    dirs = [d for d in glob.glob(os.path.join(glob.escape(root), "*_seed*")) if os.path.isdir(d)]
    saved = [d for d in dirs if os.path.isfile(os.path.join(d, "a2c_last"))]
    return max(saved or dirs, key=lambda d: (os.path.getmtime(d), d)) if dirs else None


def checkpoint_update(path: str) -> Optional[int]:
    """The update count saved in the checkpoint at ``path``; None if it cannot be read."""
    from checkpoints import load_checkpoint
    from utils import UsageError

    try:
        return int(load_checkpoint(path)["update"])
    except (UsageError, KeyError, TypeError, ValueError) as exc:
        print(f"warning: {exc}", file=sys.stderr)
        return None


def done_updates(root: str) -> int:
    """The updates the run in ``root`` finished with (its ``done`` marker); 0 if it has not finished."""
    try:
        with open(os.path.join(root, DONE_MARKER)) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def mark_done(root: str, updates: int) -> None:
    with open(os.path.join(root, DONE_MARKER), "w") as f:
        f.write(f"{updates}\n")


def check_same_run(run: Run, env_name: str) -> None:
    """``ValueError`` if ``run.root`` holds a run of another game or flags: that would mix two configurations."""
    try:
        with open(os.path.join(run.root, RUN_FILE)) as f:
            before = json.load(f)
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
    run_dir = find_run_dir(run.root)
    last = os.path.join(run_dir, "a2c_last") if run_dir else None
    update = checkpoint_update(last) if last and os.path.isfile(last) else None
    if update is not None and update >= run.updates:  # it finished, but the study stopped before marking it
        mark_done(run.root, update)
        return None
    if update is not None:
        return run_command(env_name, run.seed, run.updates, run.flags, resume=last)
    return run_command(env_name, run.seed, run.updates, run.flags, log_dir=run.root)


def train_runs(todo: list[tuple[Run, list[str]]], parallel: int, env_name: str) -> tuple[list[str], int]:
    """Run the commands ``parallel`` at a time, each logging to its ``train.log``; a run that exits 0
    unasked gets its ``done`` marker. The first SIGINT or SIGTERM stops the runs (each writes ``a2c_last``),
    a second raises KeyboardInterrupt. Returns the runs that failed and the signal that stopped the study."""
    pending, active, signalled, failed, started, stop = list(todo), {}, set(), [], 0, types.SimpleNamespace(signum=0)

    def request(signum: int, frame: Any = None) -> None:
        if stop.signum:
            raise KeyboardInterrupt
        stop.signum = signum
        print(
            f"{signal.Signals(signum).name}: stopping the runs in progress (they write a2c_last), "
            f"starting no more; again to leave at once",
            file=sys.stderr,
            flush=True,
        )

    previous = {sig: signal.signal(sig, request) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while pending or active:
            if stop.signum:
                pending.clear()
                for proc in set(active) - signalled:
                    proc.send_signal(signal.SIGTERM)
                    signalled.add(proc)
            while pending and len(active) < parallel and not stop.signum:
                run, command = pending.pop(0)
                os.makedirs(run.root, exist_ok=True)
                with open(os.path.join(run.root, RUN_FILE), "w") as f:
                    json.dump({"name": run.name, "seed": run.seed, "env_name": env_name, "flags": run.flags}, f)
                log = open(os.path.join(run.root, LOG_FILE), "a")
                log.write(f"$ {shlex.join(command)}\n")
                log.flush()
                active[subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)] = (
                    run,
                    log,
                    time.monotonic(),
                )
                started += 1
                print(
                    f"[{started}/{len(todo)}] {'resuming' if '--resume' in command else 'starting'} {run.label}: "
                    f"{run.updates:,} updates (log: {os.path.join(run.root, LOG_FILE)})",
                    flush=True,
                )
            for proc in [p for p in active if p.poll() is not None]:
                run, log, began = active.pop(proc)
                log.close()
                minutes = (time.monotonic() - began) / 60
                if proc.returncode == 0 and not stop.signum:  # a stopped one that finished: see plan
                    mark_done(run.root, run.updates)
                    print(f"finished {run.label} ({minutes:.1f} min)", flush=True)
                elif stop.signum:
                    print(f"stopped {run.label} ({minutes:.1f} min; resumed when the study is run again)", flush=True)
                else:
                    failed.append(run.label)
                    print(
                        f"error: {run.label} failed with exit code {proc.returncode}; see "
                        f"{os.path.join(run.root, LOG_FILE)}",
                        file=sys.stderr,
                        flush=True,
                    )
            if active:
                time.sleep(0.5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return failed, stop.signum


def report(
    configs: list[tuple[str, list[str], list[Run]]],
    common: Sequence[str],
    reach: Sequence[float],
    out: str,
    env_name: str,
) -> bool:
    """Print the table of the runs of each configuration (name, its own flags, its runs) and write
    ``out.md``, ``out.json`` and ``out.png``; False if no run had logs to read."""
    rows, run_dirs, labels = [], [], []
    for name, flags, runs in configs:
        seeds, summaries = [], []
        for run in runs:
            run_dir = find_run_dir(run.root)
            try:
                scalars = load_scalars(run_dir) if run_dir else None
            except ValueError:  # a start that failed before TensorBoard wrote anything
                scalars = None
            if scalars is not None:
                seeds.append(run.seed)
                summaries.append(summarize_run(scalars, reach))
                run_dirs.append(run_dir)
                labels.append(run.label)
        if summaries:
            rows.append({**config_row(name, flags, seeds, summaries, reach), "runs": run_dirs[-len(summaries) :]})
    if not rows:
        print("error: no run with TensorBoard logs to report on", file=sys.stderr)
        return False
    table = markdown_table(rows, reach)
    heading = f"{env_name}: {len(run_dirs)} runs of {len(rows)} configurations; flags of all runs: " + (
        f"`{shlex.join(common)}`" if common else "none"
    )
    print(f"\n{heading}\n\n{table}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".md", "w") as f:
        f.write(f"# Study: {heading}\n\n{table}")
    with open(out + ".json", "w") as f:
        json.dump(
            json_ready({"env_name": env_name, "common_flags": shlex.join(common), "reach": list(reach), "rows": rows}),
            f,
            indent=1,
        )
    written = [out + ".md", out + ".json"]
    try:
        plot_runs(run_dirs, out + ".png", labels=labels)
        written.append(out + ".png")
    except (ValueError, OSError) as exc:  # e.g. runs too short to have logged any curve
        print(f"warning: no plot: {exc}", file=sys.stderr)
    print("wrote " + ", ".join(written), flush=True)
    return True


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--configs",
        nargs="+",
        type=parse_config,
        required=True,
        metavar="NAME=FLAGS",
        help="the configurations: a name each (it names their directories) and their main.py flags",
    )
    p.add_argument("--flags", default="", help="main.py flags of every run, as one string, before a configuration's")
    p.add_argument("--env-name", default="PongNoFrameskip-v4", help="Atari game, gymnasium id (default: %(default)s)")
    p.add_argument(
        "--seeds",
        nargs="+",
        type=train_cli.parse_seed,
        default=[42],
        metavar="SEED",
        help="each configuration trains once per seed (default: 42)",
    )
    p.add_argument("--steps", type=positive, default=1_500_000, help="env-step budget of each run (default: 1,500,000)")
    p.add_argument("--parallel", type=positive, default=2, help="runs training at a time (default: %(default)s)")
    p.add_argument(
        "--log-dir",
        default=os.path.join("bench", "out", "study"),
        help="the study's runs, each in NAME_seedS; started again here it carries on (default: %(default)s)",
    )
    p.add_argument(
        "--out", default=None, metavar="PREFIX", help="the report PREFIX.md, .json, .png (default: LOG_DIR/study)"
    )
    p.add_argument(
        "--reach",
        nargs="+",
        type=float,
        default=[-15.0, 18.0],
        metavar="SCORE",
        help="report the env steps until the mean of the last 100 games first reached each score (default: -15 18)",
    )
    return p


def main(argv: Optional[list[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    configs = args.configs
    names = [name for name, _ in configs]
    if len(set(names)) != len(names):
        p.error(f"--configs: a name is given twice: {' '.join(sorted({n for n in names if names.count(n) > 1}))}")
    if len(set(args.seeds)) != len(args.seeds):
        p.error("--seeds: a seed is given twice")
    try:
        common = shlex.split(args.flags)
    except ValueError as exc:
        p.error(f"--flags: {exc}")
    runs = []
    for name, own in configs:
        try:
            check_flags(common + own)
        except ValueError as exc:
            p.error(f"configuration {name}: {exc}")
        updates = updates_for(args.steps, common + own, args.env_name)
        flags = common + own + step_budget(args.steps, common + own, args.env_name)
        runs += [
            Run(name, seed, flags, updates, os.path.join(args.log_dir, f"{name}_seed{seed}")) for seed in args.seeds
        ]
    try:
        for run in runs:
            check_same_run(run, args.env_name)
    except ValueError as exc:
        p.error(str(exc))

    todo = [(run, command) for run in runs if (command := plan(run, args.env_name)) is not None]
    print(
        f"{args.env_name}: {len(configs)} configurations x {len(args.seeds)} seeds, {args.steps:,} env steps "
        f"each; {len(runs) - len(todo)} finished already, {len(todo)} to train, {args.parallel} at a time "
        f"(in {args.log_dir})",
        flush=True,
    )
    try:
        failed, signum = train_runs(todo, args.parallel, args.env_name)
    except KeyboardInterrupt:  # a second Ctrl+C: the runs already have their SIGTERM and stop on their own
        print(
            "error: interrupted; the runs in progress finish their update and write a2c_last on their own",
            file=sys.stderr,
        )
        return 130
    reported = report(
        [(name, own, [r for r in runs if r.name == name]) for name, own in configs],
        common,
        args.reach,
        args.out or os.path.join(args.log_dir, "study"),
        args.env_name,
    )
    if failed:
        print(f"error: {len(failed)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 128 + signum if signum else 0 if reported else 1


if __name__ == "__main__":
    sys.exit(main())
