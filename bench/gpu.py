"""Measure a GPU machine in pieces, each short enough for a 10-minute shell command.

    python -m bench.gpu env          # torch, CUDA, cuDNN, GPU, bf16, CPUs, library versions, git commit
    python -m bench.gpu smoke        # python -m pytest -m cuda: the tests marked cuda
    python -m bench.gpu throughput   # Pong at --envs: ours (recurrent, fast, fast bf16) against SB3's A2C
    python -m bench.gpu pong         # a timed Pong run of the fast configuration, to a mean-100 of 18, then 20
    python -m bench.gpu all          # the four in order

Each piece merges its results and its command into OUT_DIR/gpu.json and rewrites OUT_DIR/gpu.md.
Without CUDA every piece but env refuses in one line, exit code 2. Throughput keeps each env count
apart, so ``--envs 16`` then ``--envs 64`` split it; pong trains for ``--minutes``, stops the run
with SIGTERM, and the next pong resumes it, its wall time added up, until 20 or 10M env steps.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, NamedTuple, Optional, Sequence

from bench import positive
from bench.study import find_run_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIECES = ("env", "smoke", "throughput", "pong")
PONG, PONG_TARGETS, PONG_BUDGET = "PongNoFrameskip-v4", (18.0, 20.0), 10_000_000
THROUGHPUT_STEPS = 20_000  # env steps of each timed run, rounded down to whole updates
MEAN100 = "episode/return_mean100"


class BenchError(Exception):
    """Bad input or an unusable machine: one line on stderr, exit code 2."""


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def figures(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every figure under ``value`` as (its keys joined with `` / ``, value); lists and commands left out."""
    if isinstance(value, dict):
        return [
            row
            for key, v in value.items()
            if key != "command"
            for row in figures(v, f"{path} / {key}" if path else key)
        ]
    return [] if isinstance(value, list) else [(path, value)]


def save(out_dir: str, piece: str, new: dict[str, Any], argv: Sequence[str], replace: bool = False) -> dict[str, Any]:
    """Put ``new`` and its command line into gpu.json as ``piece``, over that piece's entry (each env count
    of throughput kept apart) or with ``replace`` in place of it, the other pieces kept; rewrite gpu.md."""
    results = load(out_dir)
    results[piece] = {
        **({} if replace else results.get(piece, {})),
        **new,
        "command": shlex.join(["python", "-m", "bench.gpu", *argv]),
    }
    lines = ["# GPU benchmark", "", "| piece | figure | value |", "|---|---|---|"]
    lines += [f"| {name} | {what} | {_fmt(v)} |" for name in PIECES for what, v in figures(results.get(name, {}))]
    lines += ["", "Commands:", ""] + [
        f"- {name}: `{results[name]['command']}`" for name in PIECES if "command" in results.get(name, {})
    ]
    for name, text in (("gpu.json", json.dumps(results, indent=2) + "\n"), ("gpu.md", "\n".join(lines) + "\n")):
        with open(os.path.join(out_dir, name + ".tmp"), "w") as f:
            f.write(text)
        os.replace(os.path.join(out_dir, name + ".tmp"), os.path.join(out_dir, name))
    return results


def load(out_dir: str) -> dict[str, Any]:
    path = os.path.join(out_dir, "gpu.json")
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read {path}: {exc}") from None


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def require_cuda(piece: str) -> None:
    if not cuda_available():
        raise BenchError(f"the {piece} piece needs a CUDA GPU, and this machine has none")


def piece_env(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    from importlib.metadata import version

    import torch

    cuda = cuda_available()
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30
            ).stdout.strip()
            or None
        )
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
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-m", "cuda", "-q"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=args.minutes * 60,
        )
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or "", None
    print(output[-4000:])
    summary = (output.strip().splitlines() or ["no output"])[-1].strip("= ")  # 11 passed, 400 deselected in 30s
    return {"summary": summary, "exit_code": code}, 0 if code in (0, 5) else 1  # 5: no test is marked cuda


def piece_throughput(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    require_cuda("throughput")
    import torch

    from bench import throughput as tp

    bf16 = torch.cuda.is_bf16_supported()  # the bf16 twin of the fast configuration only
    ours = {name: flags for name, flags in tp.ours("both", bf16).items() if name != tp.RECURRENT + tp.BF16}
    cells: dict[str, Any] = {}
    for num_envs in args.envs:
        per_update = tp.cli_config([], PONG, num_envs).steps_per_update
        steps = max(per_update, THROUGHPUT_STEPS // per_update * per_update)
        common = dict(env_name=PONG, num_envs=num_envs, device="cuda")
        trainers = {name: (tp.train_ours, {**common, "flags": flags}) for name, flags in ours.items()}
        trainers[tp.SB3] = (tp.train_sb3, common)
        print(f"{PONG}, {num_envs} envs, {steps} env steps a run, {args.repeats} rounds", flush=True)
        trials = tp.run_alternating(trainers, steps, args.repeats, warmup_steps=0)
        tp.print_table(trials)
        cells[str(num_envs)] = {
            "steps": steps,
            "repeats": args.repeats,
            "trainers": {
                name: {"steps_per_s": round(t.median_rate, 1), "rounds": [round(r, 1) for r in t.rates]}
                for name, t in trials.items()
            },
            "ratios_over_sb3": {name: round(trials[name].median_rate / trials[tp.SB3].median_rate, 3) for name in ours},
        }
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
    return sum(
        max(0.0, (wall_time if s.get("end") is None else min(s["end"], wall_time)) - s["start"]) for s in segments
    )


def read_points(run_dir: str) -> tuple[list[Point], int]:
    """The run's mean-100 points and the largest env step of any scalar it logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags()["scalars"]
    last = max((e.step for tag in tags for e in events.Scalars(tag)), default=0)
    return [Point(e.step, e.value, e.wall_time) for e in events.Scalars(MEAN100)] if MEAN100 in tags else [], last


def pong_summary(
    state: dict[str, Any], points: Sequence[Point], last_step: int, budget: int, ended: bool = False
) -> dict[str, Any]:
    """``state`` brought up to date: each target's first reach in env steps and training seconds, what was
    trained, and whether it is done (20 reached, ``budget`` spent, or ``ended`` by itself at --max-env-steps)."""
    reached = {}
    for target in PONG_TARGETS:
        point = first_reach(points, target)
        seconds = point and round(wall_seconds_at(state["segments"], point.wall_time), 1)
        reached[f"{target:g}"] = point and {"env_steps": point.step, "wall_seconds": seconds}
    goal = reached[f"{PONG_TARGETS[-1]:g}"]
    done = goal is not None or last_step >= budget or ended
    status = (
        "done: reached 20"
        if goal
        else "running: run pong again to continue"
        if not done
        else f"done: the run ended (budget {budget:,} env steps) without reaching 20"
    )
    return {
        **state,
        "reached": reached,
        "env_steps": last_step,
        "done": done,
        "status": status,
        "wall_seconds": round(sum(s["end"] - s["start"] for s in state["segments"] if s.get("end")), 1),
        "last_mean100": max(points, key=lambda p: p.step).value if points else None,
    }


def stop_at(proc: subprocess.Popen, deadline: float) -> str:
    """Wait for ``proc``; at ``deadline`` SIGTERM it (it writes a2c_last and exits; killed 2 minutes later
    if not). Returns "stopped", "ended" (by itself) or "interrupted" (Ctrl+C, which it got too)."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.time()))
        return "ended"
    except subprocess.TimeoutExpired:
        print("pong: the minutes are up; stopping the run with SIGTERM", flush=True)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return "stopped"
    except KeyboardInterrupt:
        proc.wait()
        return "interrupted"


def piece_pong(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    require_cuda("pong")
    deadline = args.started + args.minutes * 60
    runs = os.path.abspath(os.path.join(args.out_dir, "pong_runs"))  # main.py runs in the repository root
    os.makedirs(runs, exist_ok=True)
    state: dict[str, Any] = load(args.out_dir).get("pong") or {"segments": []}
    state.pop("command", None)
    for seg in state["segments"]:  # a piece killed before it closed its segment: closed at the run's last event
        if seg.get("end") is None:
            seg["end"] = max([seg["start"], *(p.wall_time for p in read_points(find_run_dir(runs) or runs)[0])])
    if state.get("done"):
        print(f"pong: this run is done; delete {runs} and the pong entry of gpu.json to start again")
    code, budget = 0, str(PONG_BUDGET)
    while not state.get("done") and deadline - time.time() > 30:
        run_dir = find_run_dir(runs)
        last = run_dir and os.path.join(run_dir, "a2c_last")
        if last and os.path.exists(last):
            command = [sys.executable, "main.py", "--resume", last, "--num-updates", budget, "--cuda"]
        else:  # the first run gets as many updates as env steps: --max-env-steps stops it first
            command = [
                sys.executable,
                "main.py",
                "--env-name",
                PONG,
                "--arch",
                "nature",
                "--no-recurrent",
                "--cuda",
                "--log-dir",
                runs,
                "--num-updates",
                budget,
            ]
            state = {"segments": []}
        command += ["--max-env-steps", budget]
        log = os.path.join(runs, f"segment-{time.strftime('%Y%m%d-%H%M%S')}.log")
        print(f"$ {shlex.join(command)}\n  (its output: {log})", flush=True)
        segment: dict[str, Any] = {"start": time.time(), "end": None, "command": shlex.join(command)}
        state["segments"].append(segment)
        save(args.out_dir, "pong", state, args.argv, replace=True)
        with open(log, "w") as out:
            proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        how = stop_at(proc, deadline)
        segment.update(end=time.time(), exit_code=proc.returncode, how=how)
        run_dir, steps_before = find_run_dir(runs), state.get("env_steps", 0)
        if run_dir is not None:  # a run that ended by itself, cleanly, spent its budget
            state = pong_summary(state, *read_points(run_dir), PONG_BUDGET, how == "ended" and proc.returncode == 0)
        save(args.out_dir, "pong", state, args.argv, replace=True)
        if proc.returncode != 0 or run_dir is None:
            print(f"error: the training run exited with code {proc.returncode}; see {log}", file=sys.stderr)
            code = 1
        if code or how == "interrupted" or state["env_steps"] <= steps_before:
            break  # failed, interrupted, or ended without training
    for goal, reach in state.get("reached", {}).items():
        print(
            f"pong: mean-100 >= {goal}: "
            + (f"after {reach['env_steps']:,} env steps, {reach['wall_seconds']:,.0f} s" if reach else "not yet")
        )
    print(
        f"pong: {state.get('env_steps', 0):,} env steps in {state.get('wall_seconds', 0):,.0f} s; "
        f"{state.get('status', 'not started')}"
    )
    return state, code


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise BenchError(message)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("piece", choices=[*PIECES, "all"], help="what to measure")
    p.add_argument("--out-dir", default="bench_gpu", help="where gpu.json, gpu.md and pong_runs/ go")
    p.add_argument("--repeats", type=positive, default=2, help="throughput: rounds; medians are reported")
    p.add_argument("--envs", type=positive, nargs="+", default=[16, 64, 256], help="throughput: env counts")
    p.add_argument(
        "--minutes",
        type=lambda text: positive(text, float),
        default=9.0,
        help="pong: wall-clock minutes this piece trains; smoke: its time limit",
    )
    return p


RUNNERS = {"env": piece_env, "smoke": piece_smoke, "throughput": piece_throughput, "pong": piece_pong}


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
            results, piece_code = RUNNERS[piece](args)
            save(args.out_dir, piece, results, argv, replace=piece == "pong")
            code = max(code, piece_code)
        print(f"results: {os.path.join(args.out_dir, 'gpu.json')}, {os.path.join(args.out_dir, 'gpu.md')}")
        return code
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
