"""Which training settings learn fastest? Run a study unattended, then write one table and one plot.

A study is a list of configurations, each a name and the ``main.py`` flags that set it apart
(``NAME=FLAGS``: ``adam1e-4=--optimizer adam --lr 1e-4``, ``default=`` for none). Every
configuration trains once per ``--seeds`` seed for an env-step budget of ``--steps``, each run

    python main.py --env-name ENV --threads 1 --seed S --no-progress --log-dir LOG_DIR/NAME_seedS \
        --num-updates U FLAGS

with ``U = ceil(steps / (num_envs * rollout_size))`` read from the run's flags (a GRPO run gets
``--max-env-steps steps`` instead), ``--parallel`` at a time, its output in ``train.log`` beside it.
The same command started again carries on: finished runs are skipped, stopped ones resumed from
their ``a2c_last``, and a larger ``--steps`` continues finished ones. Ctrl+C or SIGTERM stops the
runs in progress cleanly (each writes ``a2c_last``); a second one leaves at once.

The report reads each run's TensorBoard logs and writes ``OUT.md`` (also printed), ``OUT.json``
and ``OUT.png`` (every run's curves), one row per configuration: the seeds and env steps reached;
for each ``--reach`` score, the env step at which each seed's mean return of the last 100 games
first reached it, and that mean at the end; the critic's explained variance over the last 10% of
each run, and the training speed. ``--report-only`` trains nothing and reports on the runs in
``--log-dir``. Runs train where ``main.py`` does (the GPU if there is one): add
``--flags=--no-cuda`` to keep them on the CPU (with ``=``, as argparse reads a lone ``--no-cuda``
as a flag of the study). ``--grid`` plays every run of the configurations named over its env's
physics grid and compares them: ``bench/grid_report.py``.

    python bench/study.py --configs default= lr1e-3="--lr 1e-3" --steps 5e6 --env-name BreakoutNoFrameskip-v4
    python bench/study.py --log-dir runs/study --report-only --reach -20 0 10 --out runs/study/early
    python bench/study.py --env-name LunarLander-v3 --configs default= randomized=--randomize-domain \
        --seeds 1 2 3 --steps 1000000 --log-dir runs/dr --flags=--no-cuda
    python bench/study.py --grid --log-dir runs/dr --configs default randomized --baseline default
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
from typing import Any, Iterable, Optional, Sequence

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.dirname(os.path.abspath(__file__))):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import main as train_cli  # noqa: E402  (imports only config at top level: no torch in the parser)
import recipes  # noqa: E402
from plots import load_scalars, plot_runs  # noqa: E402

RETURN_TAG = "episode/return_mean100"
EXPLAINED_VARIANCE_TAG = "train/explained_variance"
SPEED_TAG = "train/steps_per_second"
TAIL_FRACTION = 0.1  # explained variance is averaged over this last share of a run's env steps
POLL_SECONDS = 0.5

# --grid's settings, when not given (bench/grid_report.py).
GRID_DEFAULTS = {"checkpoint": "a2c_last", "episodes": 10, "solved": 200.0, "threads": 1, "max_episode_steps": None,
                 "episodes_default": 30, "baseline": None, "specialists": None}

# Settings the study gives each run itself, and flags that would make a run no training run (or
# one without the TensorBoard logs the report reads): refused in a configuration's flags.
STUDY_OWNED = {"env_name": "--env-name", "seed": "--seeds", "log_dir": "--log-dir", "num_updates": "--steps",
               "max_env_steps": "--steps"}
NOT_TRAINING = ("resume", "eval", "load", "plot", "out")

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # usable as a directory name everywhere
DONE_MARKER = "done"  # in a run's directory: the number of updates it finished with exit code 0
RUN_FILE = "run.json"  # in a run's directory: the name, seed, game and flags it was started with
LOG_FILE = "train.log"


# ------------------------------------------------------------------------------------------------ pure parts
def parse_config(text: str) -> tuple[str, list[str]]:
    """``NAME=FLAGS`` -> (name, flags): ``roll20=--rollout-size 20`` -> ("roll20", ["--rollout-size", "20"]).

    ``default=`` has no flags. NAME becomes a directory name, so it is letters, digits and
    ``._+-``, starting with a letter or digit. Raises ``argparse.ArgumentTypeError`` otherwise
    (or for flags that do not split like a shell line).
    """
    name, sep, flags = text.partition("=")
    if not sep or not NAME_PATTERN.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"expected NAME=FLAGS with a NAME of letters, digits and ._+- (it names a directory), got '{text}'")
    try:
        return name, shlex.split(flags)
    except ValueError as exc:  # an unclosed quote
        raise argparse.ArgumentTypeError(f"cannot split the flags of '{text}': {exc}") from None


def train_settings(flags: Sequence[str], typed_only: bool = False) -> argparse.Namespace:
    """What ``main.py`` makes of ``flags``: every setting (with its default where not given), or with
    ``typed_only`` just the ones given. Raises ``ValueError`` with main.py's message for bad flags."""
    parser = train_cli.build_parser(with_defaults=not typed_only)

    def refuse(message: str = "", *_: Any) -> None:  # instead of printing and exiting
        raise ValueError(message or "--help is no training flag")

    parser.error = refuse  # type: ignore[method-assign]
    parser.exit = refuse  # type: ignore[method-assign]
    return parser.parse_args(list(flags))


def check_flags(flags: Sequence[str]) -> None:
    """Raise ``ValueError`` if ``flags`` are bad ``main.py`` flags, set what the study sets itself
    (game, seed, log directory, update count), ask for something other than training, or turn
    TensorBoard off (the report reads its logs)."""
    typed = vars(train_settings(flags, typed_only=True))
    for field, instead in STUDY_OWNED.items():
        if field in typed:
            raise ValueError(f"--{field.replace('_', '-')} is set by the study (use its {instead})")
    for field in NOT_TRAINING:
        if field in typed:
            raise ValueError(f"--{field} is not a training flag")
    if typed.get("tensorboard") is False:
        raise ValueError("--no-tensorboard leaves the report nothing to read")


def updates_for(steps: int, flags: Sequence[str], env_name: str = "PongNoFrameskip-v4") -> int:
    """``main.py --num-updates`` for a budget of ``steps`` env steps: ``ceil(steps / (num_envs * rollout_size))``,
    both taken from ``flags`` (the last one given wins, as in main.py) or main.py's defaults for ``env_name``."""
    settings = _settings(flags, env_name)
    if settings.algo == "grpo":  # rounds vary in length: the budget is --max-env-steps (see step_budget)
        return settings.num_updates
    return max(1, math.ceil(steps / (settings.num_envs * settings.rollout_size)))


def step_budget(steps: int, flags: Sequence[str], env_name: str = "PongNoFrameskip-v4") -> list[str]:
    """Flags that hold a run to ``steps`` env steps where its update count cannot (``--algo grpo``,
    whose rounds vary in length: ``--max-env-steps``); none for A2C."""
    return ["--max-env-steps", str(steps)] if _settings(flags, env_name).algo == "grpo" else []


def _settings(flags: Sequence[str], env_name: str) -> Any:
    config, _, typed = train_cli.parse_args(["--env-name", env_name, *flags])
    return recipes.with_env_defaults(config, typed)


def run_name(name: str, seed: int) -> str:
    """The directory of configuration ``name``'s run with ``seed``, inside the study's log directory."""
    return f"{name}_seed{seed}"


def run_command(env_name: str, seed: int, updates: int, flags: Sequence[str], log_dir: Optional[str] = None,
                resume: Optional[str] = None) -> list[str]:
    """The ``main.py`` command line of one run: a new one under ``log_dir``, or one continued from the
    checkpoint ``resume`` (whose run directory it keeps writing to, so no ``--log-dir``).

    One torch thread and no progress bar; ``flags`` come last, after the settings the study fixes.
    """
    if (log_dir is None) == (resume is None):
        raise ValueError("give either log_dir (a new run) or resume (a checkpoint to continue)")
    where = ["--log-dir", log_dir] if resume is None else []
    start = ["--resume", resume] if resume is not None else []
    return [sys.executable, os.path.join(ROOT, "main.py"), *start, "--env-name", env_name, "--threads", "1",
            "--seed", str(seed), "--no-progress", *where, "--num-updates", str(updates), *flags]


def steps_to_reach(steps: np.ndarray, values: np.ndarray, score: float) -> Optional[int]:
    """The first of ``steps`` whose value is at least ``score``; None if none is.

    ``values`` is a run's ``episode/return_mean100``: the mean of its last 100 games, logged at
    the env step each game ended (over fewer games until 100 have ended).
    """
    reached = np.flatnonzero(np.asarray(values) >= score)
    return int(np.asarray(steps)[reached[0]]) if len(reached) else None


def tail_mean(steps: np.ndarray, values: np.ndarray, end: int, fraction: float = TAIL_FRACTION) -> float:
    """Mean of the ``values`` logged in the last ``fraction`` of env steps ``0 .. end``; the last value
    where none falls in it (a run too short to log there); NaN for none at all."""
    steps, values = np.asarray(steps), np.asarray(values, dtype=np.float64)
    if not len(values):
        return float("nan")
    tail = values[steps >= end * (1.0 - fraction)]
    return float(tail.mean()) if len(tail) else float(values[-1])


def summarize_run(scalars: dict[str, tuple[np.ndarray, np.ndarray]], reach: Sequence[float]) -> dict[str, Any]:
    """One run's figures from its TensorBoard scalars (`plots.load_scalars`).

    ``steps``: the last env step it logged anything at; ``reach``: `steps_to_reach` of each
    score; ``final``: its last mean of 100 games (NaN before its first game ended);
    ``explained_variance``: `tail_mean` of the critic's explained variance; ``steps_per_second``:
    the mean of its logged training speeds (NaN where none was logged).
    """
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0))
    end = max((int(s[-1]) for s, _ in scalars.values() if len(s)), default=0)
    steps, means = scalars.get(RETURN_TAG, empty)
    speeds = scalars.get(SPEED_TAG, empty)[1]
    return {"steps": end,
            "reach": [steps_to_reach(steps, means, score) for score in reach],
            "final": float(means[-1]) if len(means) else float("nan"),
            "explained_variance": tail_mean(*scalars.get(EXPLAINED_VARIANCE_TAG, empty), end=end),
            "steps_per_second": float(np.mean(speeds)) if len(speeds) else float("nan")}


def config_row(name: str, flags: Sequence[str], seeds: Sequence[int], runs: Sequence[dict[str, Any]],
               reach: Sequence[float]) -> dict[str, Any]:
    """A configuration's row from its runs' `summarize_run` figures (one per seed, in ``seeds`` order).

    Per-seed lists for steps-to-reach and the final mean; env steps as the least of the runs;
    explained variance and speed averaged over the seeds that logged them (NaN where none did).
    """
    def mean(values: Iterable[float]) -> float:
        finite = [v for v in values if math.isfinite(v)]
        return float(np.mean(finite)) if finite else float("nan")

    return {"config": name, "flags": shlex.join(flags), "seeds": list(seeds),
            "env_steps": min((r["steps"] for r in runs), default=0),
            "steps_to_reach": {format(score, "g"): [r["reach"][i] for r in runs] for i, score in enumerate(reach)},
            "final_mean100": [r["final"] for r in runs],
            "explained_variance": mean(r["explained_variance"] for r in runs),
            "steps_per_second": mean(r["steps_per_second"] for r in runs)}


def markdown_table(rows: Sequence[dict[str, Any]], reach: Sequence[float]) -> str:
    """The rows of `config_row` as a markdown table; several seeds' values are joined with `` / ``."""
    def number(value: Optional[float], digits: int) -> str:
        return "-" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"

    def steps(value: Optional[int]) -> str:
        return "not reached" if value is None else f"{value:,}"

    header = ["config", "flags", "seeds", "env steps", *[f"steps to {score:g}" for score in reach],
              "final mean-100", "explained variance (last 10%)", "steps/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        flags = f"`{row['flags']}`".replace("|", "\\|") if row["flags"] else "none"
        cells = [row["config"], flags, " ".join(map(str, row["seeds"])), f"{row['env_steps']:,}",
                 *[" / ".join(map(steps, row["steps_to_reach"][format(score, "g")])) for score in reach],
                 " / ".join(number(v, 2) for v in row["final_mean100"]),
                 number(row["explained_variance"], 3), number(row["steps_per_second"], 0)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def json_ready(value: Any) -> Any:
    """NaN (no data) as JSON null, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------------ runs on disk
@dataclasses.dataclass
class Run:
    """One configuration trained with one seed, in ``root`` (``LOG_DIR/NAME_seedS``)."""

    name: str
    seed: int
    flags: list[str]  # the common --flags, then the configuration's own
    own: list[str]  # the configuration's own flags, what the table shows
    updates: int
    root: str
    order: int  # the configuration's place in the study, kept so --report-only lists them alike

    @property
    def label(self) -> str:
        return f"{self.name} seed {self.seed}"


def find_run_dir(root: str) -> Optional[str]:
    """The ``main.py`` run directory (``ENV_TIME_seedS``) inside ``root``; None if there is none.

    Where there are several (a start that failed before its first checkpoint is followed by a new
    one), the newest of those holding an ``a2c_last``, else the newest.
    """
    dirs = [d for d in glob.glob(os.path.join(glob.escape(root), "*_seed*")) if os.path.isdir(d)]
    if not dirs:
        return None
    saved = [d for d in dirs if os.path.isfile(os.path.join(d, "a2c_last"))]
    return max(saved or dirs, key=lambda d: (os.path.getmtime(d), d))


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


def read_run_file(root: str) -> Optional[dict[str, Any]]:
    try:
        with open(os.path.join(root, RUN_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_run_file(run: Run, env_name: str) -> None:
    with open(os.path.join(run.root, RUN_FILE), "w") as f:
        json.dump({"name": run.name, "seed": run.seed, "env_name": env_name, "flags": run.flags,
                   "config_flags": run.own, "order": run.order}, f, indent=1)


def check_same_run(run: Run, env_name: str) -> None:
    """Raise ``ValueError`` if ``run.root`` holds a run started with another game or other settings:
    continuing it with these would mix two configurations under one name."""
    before = read_run_file(run.root)
    if before is None:
        return
    if before.get("env_name") != env_name:
        raise ValueError(f"{run.root} holds a run of {before.get('env_name')}, not {env_name}; "
                         f"give another --log-dir")
    try:
        same = vars(train_settings(before.get("flags", []))) == vars(train_settings(run.flags))
    except ValueError:
        same = False
    if not same:
        raise ValueError(f"{run.root} holds a run started with other flags ({shlex.join(before.get('flags', []))}); "
                         f"give the configuration another NAME, or another --log-dir")


def plan(run: Run, env_name: str) -> Optional[list[str]]:
    """The command that brings ``run`` to its update count: a new run, one resumed from the
    ``a2c_last`` a stopped one left, or None where it has them already."""
    if done_updates(run.root) >= run.updates:
        return None
    run_dir = find_run_dir(run.root)
    last = os.path.join(run_dir, "a2c_last") if run_dir else None
    if last and os.path.isfile(last):
        update = checkpoint_update(last)
        if update is not None:
            if update >= run.updates:  # it finished, but the study stopped before it could mark it
                mark_done(run.root, update)
                return None
            return run_command(env_name, run.seed, run.updates, run.flags, resume=last)
    return run_command(env_name, run.seed, run.updates, run.flags, log_dir=run.root)


# ------------------------------------------------------------------------------------------------ training
class StopRequest:
    """Within ``with``: the first SIGINT or SIGTERM sets ``signum`` (the study then stops its runs
    cleanly); a second raises KeyboardInterrupt, to leave without waiting for them."""

    def __init__(self) -> None:
        self.signum = 0
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> "StopRequest":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self.request)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def request(self, signum: int, frame: Any = None) -> None:
        if self.signum:
            raise KeyboardInterrupt
        self.signum = signum
        print(f"{signal.Signals(signum).name}: stopping the runs in progress (they write a2c_last), "
              f"starting no more; again to leave at once", file=sys.stderr, flush=True)


def train_runs(todo: list[tuple[Run, list[str]]], parallel: int, env_name: str) -> tuple[list[str], int]:
    """Run the commands, ``parallel`` at a time, each logging to ``train.log`` in its run's directory.

    A run that exits with code 0 unasked gets its ``done`` marker. Returns the labels of the runs
    that failed and the signal that stopped the study (0 if none did).
    """
    pending = list(todo)
    active: dict[subprocess.Popen, tuple[Run, Any, float]] = {}
    signalled: set[subprocess.Popen] = set()
    failed: list[str] = []
    started = 0
    with StopRequest() as stop:
        while pending or active:
            if stop.signum:
                pending.clear()
                for proc in active:
                    if proc not in signalled:
                        proc.send_signal(signal.SIGTERM)
                        signalled.add(proc)
            while pending and len(active) < parallel and not stop.signum:
                run, command = pending.pop(0)
                os.makedirs(run.root, exist_ok=True)
                write_run_file(run, env_name)
                log = open(os.path.join(run.root, LOG_FILE), "a")
                log.write(f"$ {shlex.join(command)}\n")
                log.flush()
                active[subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)] = \
                    (run, log, time.monotonic())
                started += 1
                how = "resuming" if "--resume" in command else "starting"
                print(f"[{started}/{len(todo)}] {how} {run.label}: {run.updates:,} updates "
                      f"(log: {os.path.join(run.root, LOG_FILE)})", flush=True)
            for proc in [p for p in active if p.poll() is not None]:
                run, log, began = active.pop(proc)
                log.close()
                minutes = (time.monotonic() - began) / 60
                if proc.returncode == 0 and (not stop.signum or _finished(run)):
                    mark_done(run.root, run.updates)
                    print(f"finished {run.label} ({minutes:.1f} min)", flush=True)
                elif stop.signum:
                    print(f"stopped {run.label} ({minutes:.1f} min; resumed when the study is run again)",
                          flush=True)
                else:
                    failed.append(run.label)
                    print(f"error: {run.label} failed with exit code {proc.returncode}; see "
                          f"{os.path.join(run.root, LOG_FILE)}", file=sys.stderr, flush=True)
            if active:
                time.sleep(POLL_SECONDS)
    return failed, stop.signum


def _finished(run: Run) -> bool:
    """Whether a run that exited after the study asked it to stop had all its updates anyway."""
    run_dir = find_run_dir(run.root)
    update = checkpoint_update(os.path.join(run_dir, "a2c_last")) if run_dir else None
    return update is not None and update >= run.updates


# ------------------------------------------------------------------------------------------------ report
def report(configs: list[tuple[str, list[str], list[tuple[int, str]]]], common: Sequence[str],
           reach: Sequence[float], out: str, env_name: str) -> bool:
    """Read the runs (``(name, own flags, [(seed, root), ...])`` per configuration; ``common``: the flags
    of all), print the table and write ``out.md``, ``out.json`` and ``out.png``. False if no run had
    logs to read."""
    rows, run_dirs, labels = [], [], []
    for name, flags, runs in configs:
        seeds, summaries = [], []
        for seed, root in runs:
            run_dir = find_run_dir(root)
            try:
                scalars = load_scalars(run_dir) if run_dir else None
            except ValueError:  # a start that failed before TensorBoard wrote anything
                scalars = None
            if scalars is None:
                continue
            seeds.append(seed)
            summaries.append(summarize_run(scalars, reach))
            run_dirs.append(run_dir)
            labels.append(f"{name} seed {seed}")
        if summaries:
            row = config_row(name, flags, seeds, summaries, reach)
            row["runs"] = run_dirs[len(run_dirs) - len(summaries):]
            rows.append(row)
    if not rows:
        print("error: no run with TensorBoard logs to report on", file=sys.stderr)
        return False
    table = markdown_table(rows, reach)
    shared = f"`{shlex.join(common)}`" if common else "none"
    heading = f"{env_name}: {len(run_dirs)} runs of {len(rows)} configurations; flags of all runs: {shared}"
    print(f"\n{heading}\n\n{table}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".md", "w") as f:
        f.write(f"# Study: {heading}\n\n{table}")
    with open(out + ".json", "w") as f:
        json.dump(json_ready({"env_name": env_name, "common_flags": shlex.join(common), "reach": list(reach),
                               "rows": rows}), f, indent=1)
        f.write("\n")
    written = [out + ".md", out + ".json"]
    try:
        plot_runs(run_dirs, out + ".png", labels=labels)
        written.append(out + ".png")
    except (ValueError, OSError) as exc:  # e.g. runs too short to have logged any curve
        print(f"warning: no plot: {exc}", file=sys.stderr)
    print("wrote " + ", ".join(written), flush=True)
    return True


def discovered_runs(log_dir: str) -> list[dict[str, Any]]:
    """The run files (``run.json``) of the runs in ``log_dir``, each with its ``root`` added, in study order."""
    found = []
    for path in glob.glob(os.path.join(glob.escape(log_dir), "*", RUN_FILE)):
        info = read_run_file(os.path.dirname(path))
        if info and {"name", "seed", "flags", "config_flags"} <= set(info):
            found.append({**info, "root": os.path.dirname(path)})
    return sorted(found, key=lambda r: (r.get("order", 0), r["name"], r["seed"]))


# ------------------------------------------------------------------------------------------------ command line
def _steps(text: str) -> int:
    """A positive step count: ``1500000``, ``1_500_000`` or ``1.5e6``."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value >= 1 and value.is_integer()):
        raise argparse.ArgumentTypeError(f"expected a positive whole number of env steps, got '{text}'")
    return int(value)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", nargs="+", default=[], metavar="NAME=FLAGS",
                   help="the configurations: a name each (it names their directories) and their main.py flags "
                        "(with --grid: their names)")
    p.add_argument("--flags", default="", help="main.py flags of every run, as one string (before a "
                                               "configuration's own)")
    p.add_argument("--env-name", default="PongNoFrameskip-v4", help="Atari game, gymnasium id (default: %(default)s)")
    p.add_argument("--seeds", nargs="+", type=train_cli.parse_seed, default=None, metavar="SEED",
                   help="each configuration trains once per seed (default: 42; with --report-only: all found)")
    p.add_argument("--steps", type=_steps, default=1_500_000, help="env-step budget of each run (default: 1,500,000)")
    p.add_argument("--parallel", type=_positive, default=2, help="runs training at a time (default: %(default)s)")
    p.add_argument("--log-dir", default=os.path.join("bench", "out", "study"),
                   help="the study's runs, each in a directory NAME_seedS; a study started again here carries on "
                        "(default: %(default)s)")
    p.add_argument("--out", default=None, metavar="PREFIX",
                   help="the report's files PREFIX.md, PREFIX.json, PREFIX.png (default: LOG_DIR/study; with --grid: "
                        "LOG_DIR/grid)")
    p.add_argument("--reach", nargs="+", type=float, default=[-15.0, 18.0], metavar="SCORE",
                   help="report the env steps until the mean of the last 100 games first reached each score "
                        "(default: -15 18)")
    p.add_argument("--report-only", action="store_true", help="train nothing; report on the runs in --log-dir")
    grid = p.add_argument_group("--grid: the runs of each configuration over their env's physics grid")
    grid.add_argument("--grid", action="store_true",
                      help="train nothing; play every run of --configs over the physics grid and compare them")
    grid.add_argument("--checkpoint", default=None, help=f"the checkpoint of each run that plays "
                                                        f"(default: {GRID_DEFAULTS['checkpoint']})")
    grid.add_argument("--episodes", type=_positive, default=None,
                      help=f"episodes a cell (default: {GRID_DEFAULTS['episodes']})")
    grid.add_argument("--solved", type=float, default=None,
                      help=f"a cell counts as solved from this mean return (default: {GRID_DEFAULTS['solved']:g})")
    grid.add_argument("--threads", type=_positive, default=None,
                      help=f"torch threads of each evaluation (default: {GRID_DEFAULTS['threads']})")
    grid.add_argument("--max-episode-steps", type=_positive, default=None,
                      help="cap on an episode's steps (quick checks; default: the env's own)")
    grid.add_argument("--episodes-default", type=_positive, default=None,
                      help=f"episodes of each run on the env's default physics (default: "
                           f"{GRID_DEFAULTS['episodes_default']})")
    grid.add_argument("--baseline", default=None, metavar="NAME",
                      help="one of --configs: map and table each other configuration's difference to it")
    grid.add_argument("--specialists", nargs="+", default=None, metavar="NAME",
                      help="configurations of the study trained on one grid cell each (--physics): their score "
                           "there is the cell's ceiling")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    given = list(args.configs)
    if args.grid:
        if args.report_only:
            p.error("--grid and --report-only: give one")
        names = [text.partition("=")[0] for text in given]
        bad = [name for name in names if not NAME_PATTERN.fullmatch(name)]
        if bad:
            p.error(f"--configs: not a configuration name: {bad[0]!r}")
        from grid_report import grid_mode

        return grid_mode(p, args, names)
    typed = [f"--{key.replace('_', '-')}" for key in GRID_DEFAULTS if getattr(args, key) is not None]
    if typed:
        p.error(f"{typed[0]} is for --grid")
    try:
        configs = [parse_config(c) for c in given]
    except argparse.ArgumentTypeError as exc:
        p.error(f"argument --configs: {exc}")
    names = [name for name, _ in configs]
    if len(set(names)) != len(names):
        p.error(f"--configs: a name is given twice: {' '.join(sorted({n for n in names if names.count(n) > 1}))}")
    if args.seeds is not None and len(set(args.seeds)) != len(args.seeds):
        p.error("--seeds: a seed is given twice")
    try:
        common = shlex.split(args.flags)
    except ValueError as exc:
        p.error(f"--flags: {exc}")
    out = args.out or os.path.join(args.log_dir, "study")

    if args.report_only:
        found = [r for r in discovered_runs(args.log_dir)
                 if (not configs or r["name"] in names) and (args.seeds is None or r["seed"] in args.seeds)]
        if not found:
            p.error(f"--report-only: no runs of this study in --log-dir {args.log_dir}")
        # The study's --flags come before each run's own; runs of studies with other --flags show all theirs.
        shared = [r["flags"][:len(r["flags"]) - len(r["config_flags"])] for r in found]
        same = all(f == shared[0] for f in shared)
        common_found = shared[0] if same else []
        grouped: dict[str, tuple[str, list[str], list[tuple[int, str]]]] = {}
        for r in found:
            shown = r["config_flags"] if same else r["flags"]
            grouped.setdefault(r["name"], (r["name"], shown, []))[2].append((r["seed"], r["root"]))
        order = names or list(grouped)
        return 0 if report([grouped[n] for n in order if n in grouped], common_found, args.reach, out,
                           found[0].get("env_name", args.env_name)) else 1

    if not configs:
        p.error("give the configurations: --configs NAME=FLAGS ...")
    seeds = args.seeds or [42]
    runs = []
    for order, (name, own) in enumerate(configs):
        flags = common + own
        try:
            check_flags(flags)
        except ValueError as exc:
            p.error(f"configuration {name}: {exc}")
        updates = updates_for(args.steps, flags, args.env_name)
        flags = flags + step_budget(args.steps, flags, args.env_name)
        runs += [Run(name, seed, flags, own, updates, os.path.join(args.log_dir, run_name(name, seed)), order)
                 for seed in seeds]
    try:
        for run in runs:
            check_same_run(run, args.env_name)
    except ValueError as exc:
        p.error(str(exc))

    todo = [(run, command) for run in runs if (command := plan(run, args.env_name)) is not None]
    print(f"{args.env_name}: {len(configs)} configurations x {len(seeds)} seeds, {args.steps:,} env steps "
          f"each; {len(runs) - len(todo)} finished already, {len(todo)} to train, {args.parallel} at a time "
          f"(in {args.log_dir})", flush=True)
    try:
        failed, signum = train_runs(todo, args.parallel, args.env_name)
    except KeyboardInterrupt:  # a second Ctrl+C: the runs already have their SIGTERM and stop on their own
        print("error: interrupted; the runs in progress finish their update and write a2c_last on their own",
              file=sys.stderr)
        return 130
    reported = report([(name, own, [(r.seed, r.root) for r in runs if r.name == name]) for name, own in configs],
                      common, args.reach, out, args.env_name)
    if failed:
        print(f"error: {len(failed)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if signum:
        return 128 + signum
    return 0 if reported else 1


if __name__ == "__main__":
    sys.exit(main())
