"""Measure a GPU machine in pieces, each short enough for a 10-minute shell command.

    python -m bench.gpu env          # torch, CUDA, cuDNN, GPU, bf16, CPUs, library versions, git commit
    python -m bench.gpu smoke        # python -m pytest -m cuda: the tests marked cuda
    python -m bench.gpu throughput   # Pong at --envs: ours (recurrent, fast, fast bf16), compiled, grouped, vs SB3
    python -m bench.gpu pong         # a timed Pong run of --preset fast-gpu, to a mean-100 of 18, then 20
    python -m bench.gpu all          # the four in order

Each piece merges its results and its command into OUT_DIR/gpu.json and rewrites OUT_DIR/gpu.md. Without CUDA every
piece but env refuses in one line, exit code 2. Throughput keeps each env count apart, so ``--envs 16`` then
``--envs 64`` split it; a compiled row is timed from the end of its first update, which compiles. Pong trains for
``--minutes``, stops the run with SIGTERM, and the next pong resumes it, its wall time added up, until 20 or 2M steps.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import statistics
import subprocess
import sys
import time
from importlib.metadata import version
from typing import Any, NamedTuple, Optional, Sequence

import torch

from bench import ROOT, markdown_table, positive, study, write_report
from bench import throughput as tp

PONG, PONG_TARGETS, PONG_BUDGET = "PongNoFrameskip-v4", (18.0, 20.0), 2_000_000
PONG_FLAGS = ["--preset", "fast-gpu", "--cuda", "--threads", "0"]  # the preset over its own 2M env steps
THROUGHPUT_STEPS = 20_000  # env steps of each timed run, rounded down to whole updates


class BenchError(Exception):
    """Bad input or an unusable machine: one line on stderr, exit code 2."""


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    return "-" if value is None else f"{value:,}" if type(value) is int else str(value)  # a bool is no int here


def figures(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every figure under ``value`` as (its keys joined with `` / ``, value); lists and commands left out."""
    if isinstance(value, dict):
        keys = [(key, v) for key, v in value.items() if key != "command"]
        return [row for key, v in keys for row in figures(v, f"{path} / {key}" if path else key)]
    return [] if isinstance(value, list) else [(path, value)]


def save(out_dir: str, piece: str, new: dict[str, Any], argv: Sequence[str], replace: bool = False) -> None:
    """Put ``new`` and its command line into gpu.json as ``piece``, over that piece's entry (each env count
    of throughput kept apart) or with ``replace`` in place of it, the other pieces kept; rewrite gpu.md."""
    results = load(out_dir)
    command = shlex.join(["python", "-m", "bench.gpu", *argv])
    results[piece] = {**({} if replace else results.get(piece, {})), **new, "command": command}
    rows = [(name, what, _fmt(v)) for name in PIECES for what, v in figures(results.get(name, {}))]
    commands = [f"- {name}: `{results[name]['command']}`" for name in PIECES if "command" in results.get(name, {})]
    lines = ["# GPU benchmark", "", *markdown_table(["piece", "figure", "value"], rows), "", "Commands:", "", *commands]
    write_report(os.path.join(out_dir, "gpu"), "\n".join(lines) + "\n", results)


def load(out_dir: str) -> dict[str, Any]:
    path = os.path.join(out_dir, "gpu.json")
    try:
        return json.loads(pathlib.Path(path).read_text()) if os.path.exists(path) else {}
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read {path}: {exc}") from None


def cuda_available() -> bool:
    return torch.cuda.is_available()


def require_cuda(piece: str) -> None:
    if not cuda_available():
        raise BenchError(f"the {piece} piece needs a CUDA GPU, and this machine has none")


def piece_env(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    cuda = cuda_available()
    try:
        git = ["git", "rev-parse", "--short", "HEAD"]
        commit = subprocess.run(git, cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    info = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
        "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 2) if cuda else None,
        "bf16_supported": torch.cuda.is_bf16_supported() if cuda else None,
        "cpu_count": os.cpu_count(),
        **{name.replace("-", "_"): version(name) for name in ("ale-py", "stable-baselines3", "gymnasium")},
        "git_commit": commit,
    }
    for key, value in info.items():
        print(f"{key:>18}: {_fmt(value)}")
    if not cuda:
        print("no CUDA device: only the env piece runs")
    return info, 0


def piece_smoke(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    require_cuda("smoke")
    pytest = [sys.executable, "-m", "pytest", "-m", "cuda", "-q"]
    try:
        done = subprocess.run(pytest, cwd=ROOT, capture_output=True, text=True, timeout=args.minutes * 60)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or "", None
    print(output[-4000:])
    summary = (output.strip().splitlines() or ["no output"])[-1].strip("= ")  # 11 passed, 400 deselected in 30s
    return {"summary": summary, "exit_code": code}, 0 if code in (0, 5) else 1  # 5: no test is marked cuda


def piece_throughput(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    require_cuda("throughput")
    # The recurrent default, the fast configuration and (where the GPU computes bfloat16) the latter's
    # bfloat16 twin; then the first two compiled, and the first two with their steps overlapped.
    bf16 = [tp.BF16] if torch.cuda.is_bf16_supported() else []
    ours = {name: f for name, f in tp.ours("both", *bf16).items() if name != tp.RECURRENT + tp.BF16}
    for lever in (tp.COMPILED, tp.GROUPED):
        ours.update(tp.twins(tp.ours("both"), lever))
    cells = {}
    for num_envs in args.envs:
        common = dict(env_name=PONG, num_envs=num_envs, device="cuda")
        trainers = {**tp.timed(tp.train_ours, common, ours), tp.SB3: (tp.train_sb3, common)}
        steps = tp.whole_updates(THROUGHPUT_STEPS, PONG, num_envs)
        print(f"{PONG}, {num_envs} envs, {steps} env steps a run, {args.repeats} rounds", flush=True)
        trials = tp.run_alternating(trainers, steps, args.repeats, warmup_steps=0)
        tp.print_report(trials)
        ratios: dict[str, dict[str, float]] = {}  # each of ours / SB3, and / itself without its lever
        for (name, other), ratio in tp.comparisons(trials).items():
            ratios.setdefault(name, {})[other] = round(ratio, 3)
        rates = {
            name: {"steps_per_s": round(statistics.median(t.rates), 1), "rounds": [round(r, 1) for r in t.rates]}
            for name, t in trials.items()
        }
        cells[str(num_envs)] = {"steps": steps, "repeats": args.repeats, "trainers": rates, "ratios": ratios}
        save(args.out_dir, "throughput", {str(num_envs): cells[str(num_envs)]}, args.argv)  # kept if cut off
    return cells, 0


class Point(NamedTuple):
    step: int
    value: float
    wall_time: float = 0.0


def first_reach(points: Sequence[Point], target: float) -> Optional[Point]:
    """The first point (in step order) whose value is at least ``target``; None if none is."""
    return next((p for p in sorted(points, key=lambda p: p.step) if p.value >= target), None)


def wall_seconds_at(segments: Sequence[dict[str, Any]], wall_time: float) -> float:
    """Training seconds up to ``wall_time`` over the segments (``end`` None: still running), pauses left out."""
    ends = [wall_time if s.get("end") is None else min(s["end"], wall_time) for s in segments]
    return sum(max(0.0, end - s["start"]) for end, s in zip(ends, segments))


def read_points(run_dir: str) -> tuple[list[Point], int]:
    """The run's mean-100 points with their wall times and the largest env step of any scalar it logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags()["scalars"]
    last = max((e.step for tag in tags for e in events.Scalars(tag)), default=0)
    means = events.Scalars(study.RETURN_TAG) if study.RETURN_TAG in tags else []
    return [Point(e.step, e.value, e.wall_time) for e in means], last


def pong_summary(state: dict, points: Sequence[Point], last_step: int, budget: int, ended: bool = False) -> dict:
    """``state`` brought up to date: each target's first reach in env steps and training seconds, what was
    trained, and whether it is done (20 reached, ``budget`` spent, or ``ended`` by itself at --max-env-steps)."""
    reached = {}
    for target in PONG_TARGETS:
        point = first_reach(points, target)
        seconds = point and round(wall_seconds_at(state["segments"], point.wall_time), 1)
        reached[f"{target:g}"] = point and {"env_steps": point.step, "wall_seconds": seconds}
    goal = reached[f"{PONG_TARGETS[-1]:g}"]
    done = goal is not None or last_step >= budget or ended
    status = "done: reached 20" if goal else f"done: the run ended (budget {budget:,} env steps) without reaching 20"
    status = status if done else "running: run pong again to continue"
    wall = round(sum(s["end"] - s["start"] for s in state["segments"] if s.get("end")), 1)
    mean100 = max(points, key=lambda p: p.step).value if points else None
    new = dict(reached=reached, env_steps=last_step, done=done, status=status, wall_seconds=wall, last_mean100=mean100)
    return {**state, **new}


def piece_pong(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    """One segment of the Pong run, trained as a study trains a run (``bench.study``), until the minutes are up."""
    require_cuda("pong")
    root = os.path.abspath(os.path.join(args.out_dir, "pong_runs"))  # main.py runs in the repository root
    run = study.Run("pong", 42, PONG_FLAGS, study.budget(PONG_BUDGET, PONG_FLAGS, PONG)[0], root)
    state: dict[str, Any] = load(args.out_dir).get("pong") or {"segments": []}
    for seg in state["segments"]:  # a piece killed before it closed its segment: closed at the run's last event
        if seg.get("end") is None:
            seg["end"] = max([seg["start"], *(p.wall_time for p in read_points(study.find_run_dir(root) or root)[0])])
    command = None if state.get("done") else study.plan(run, PONG)
    code, deadline = 0, args.started + args.minutes * 60
    if command is None:
        print(f"pong: this run is done; delete {root} and the pong entry of gpu.json to start again")
    elif deadline - time.time() > 30:
        if "--resume" not in command:
            state = {"segments": []}
        segment: dict[str, Any] = {"start": time.time(), "end": None, "command": shlex.join(command)}
        state["segments"].append(segment)
        save(args.out_dir, "pong", state, args.argv, replace=True)
        failed, _ = study.train_runs([(run, command)], 1, PONG, deadline)
        segment["end"], code = time.time(), 1 if failed else 0
        run_dir = study.find_run_dir(root)
        if run_dir is not None:  # a run that ended by itself, cleanly (its done marker), spent its budget
            state = pong_summary(state, *read_points(run_dir), PONG_BUDGET, study.done_updates(root) > 0)
    for goal, reach in state.get("reached", {}).items():
        at = f"after {reach['env_steps']:,} env steps, {reach['wall_seconds']:,.0f} s" if reach else "not yet"
        print(f"pong: mean-100 >= {goal}: {at}")
    steps, seconds, status = state.get("env_steps", 0), state.get("wall_seconds", 0), state.get("status", "not started")
    print(f"pong: {steps:,} env steps in {seconds:,.0f} s; {status}")
    return state, code


PIECES = {"env": piece_env, "smoke": piece_smoke, "throughput": piece_throughput, "pong": piece_pong}  # in order


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise BenchError(message)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("piece", choices=[*PIECES, "all"], help="what to measure")
    p.add_argument("--out-dir", default="bench_gpu", help="where gpu.json, gpu.md and pong_runs/ go")
    p.add_argument("--repeats", type=positive, default=2, help="throughput: rounds; medians are reported")
    p.add_argument("--envs", type=positive, nargs="+", default=[16, 64, 256], help="throughput: env counts")
    minutes = "pong: wall-clock minutes this piece trains; smoke: its time limit"
    p.add_argument("--minutes", type=lambda text: positive(text, float), default=9.0, help=minutes)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        try:
            os.makedirs(args.out_dir, exist_ok=True)
        except OSError as exc:
            raise BenchError(f"cannot write to --out-dir '{args.out_dir}': {exc.strerror or exc}") from None
        args.argv, code = argv, 0
        for piece in PIECES if args.piece == "all" else [args.piece]:
            print(f"== {piece}", flush=True)
            args.started = time.time()  # under all, pong's minutes start with pong
            results, piece_code = PIECES[piece](args)
            save(args.out_dir, piece, results, argv, replace=piece == "pong")
            code = max(code, piece_code)
        print(f"results: {os.path.join(args.out_dir, 'gpu.json')}, {os.path.join(args.out_dir, 'gpu.md')}")
        return code
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
