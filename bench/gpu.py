"""Measure a GPU machine in pieces, each short enough for a 10-minute shell command.

    python bench/gpu.py env          # torch, CUDA, cuDNN, GPU, bf16, CPUs, library versions, git commit
    python bench/gpu.py smoke        # python -m pytest -m cuda -q: the tests marked ``cuda``
    python bench/gpu.py throughput   # env steps/s: ours (recurrent, fast, fast bf16) against SB3's A2C
    python bench/gpu.py pong         # a timed Pong run of the fast configuration, to a mean-100 of 18, then 20
    python bench/gpu.py all          # the four in order

Every piece merges its results into ``OUT_DIR/gpu.json`` (``--out-dir``, default ``bench_gpu/``),
keeping what the other pieces wrote, with its own command line, and rewrites ``OUT_DIR/gpu.md``, a
table of every figure with its unit. ``env`` runs anywhere; without CUDA every other piece exits
with code 2 and one line on stderr.

* ``throughput`` times, for Pong at each of ``--envs`` (default 16 64 256), the recurrent default,
  the fast configuration, it in bfloat16 and SB3's A2C, all on the GPU, with bench/throughput.py's
  trainers and ``run_alternating``. Results are kept per env count, so ``--envs 16`` and then
  ``--envs 64`` split it where one command does not fit (on one H200, 256 envs ran past 110 s in
  SB3's run alone).
* ``pong`` trains ``python main.py --env-name PongNoFrameskip-v4 --arch nature --no-recurrent
  --cuda`` (plus ``--flags``) under ``OUT_DIR/pong_runs`` for at most ``--minutes`` of wall-clock
  time, then stops it with SIGTERM; the next ``pong`` resumes it and adds its wall time, until the
  mean-100 (``episode/return_mean100``) first reaches 18 and 20 or ``--max-env-steps`` are spent.
  Repeat it until it says it is done; delete ``OUT_DIR/pong_runs`` and the ``pong`` entry to start again.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, NamedTuple, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
PIECES = ("env", "smoke", "throughput", "pong")
PONG = "PongNoFrameskip-v4"
PONG_TARGETS = (18.0, 20.0)
MEAN100 = "episode/return_mean100"


class BenchError(Exception):
    """Bad input or an unusable machine: one line on stderr, exit code 2."""


# ------------------------------------------------------------------------------------------------
# The results file: merged, never overwritten wholesale, and the markdown made from it.
# ------------------------------------------------------------------------------------------------
def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` with ``new`` merged in: dicts merge key by key, at every depth; anything else is replaced."""
    merged = dict(old)
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def figures(results: dict[str, Any]) -> list[tuple[str, str, Any, str]]:
    """Every figure of ``results`` as (piece, what, value, unit), in the order of the pieces."""
    rows: list[tuple[str, str, Any, str]] = []
    env = results.get("env", {})
    units = {"gpu_memory_gib": "GiB", "cpu_count": "cores"}
    rows += [("env", key, value, units.get(key, "")) for key, value in env.items() if key != "command"]
    smoke = results.get("smoke", {})
    rows += [("smoke", key, smoke[key], "tests" if key != "exit_code" else "")
             for key in ("passed", "failed", "skipped", "errors", "exit_code") if key in smoke]
    throughput = results.get("throughput", {})
    for envs in sorted((key for key in throughput if key.isdigit()), key=int):
        cell = throughput[envs]
        for name, trainer in cell.get("trainers", {}).items():
            rows.append(("throughput", f"{name}, {envs} envs", trainer["steps_per_s"], "env steps/s"))
            if trainer.get("peak_gpu_mib"):
                rows.append(("throughput", f"{name}, {envs} envs, peak GPU memory", trainer["peak_gpu_mib"], "MiB"))
        for name, ratio in cell.get("ratios_over_sb3", {}).items():
            rows.append(("throughput", f"{name} / sb3, {envs} envs", ratio, "x"))
    pong = results.get("pong", {})
    if pong:
        for goal, reach in pong.get("reached", {}).items():
            reach = reach or {}
            rows.append(("pong", f"mean-100 first >= {goal}: env steps", reach.get("env_steps"), "env steps"))
            rows.append(("pong", f"mean-100 first >= {goal}: wall clock", reach.get("wall_seconds"), "s"))
        rows += [("pong", "env steps trained", pong.get("env_steps"), "env steps"),
                 ("pong", "wall clock so far", pong.get("wall_seconds"), "s"),
                 ("pong", "last mean-100", pong.get("last_mean100"), "raw return"),
                 ("pong", "status", pong.get("status"), "")]
    return rows


def render_markdown(results: dict[str, Any]) -> str:
    lines = ["# GPU benchmark", "", "| piece | figure | value | unit |", "|---|---|---|---|"]
    lines += [f"| {piece} | {what} | {_fmt(value)} | {unit} |" for piece, what, value, unit in figures(results)]
    lines += ["", "Commands:", ""]
    lines += [f"- {piece}: `{results[piece]['command']}`" for piece in PIECES
              if isinstance(results.get(piece), dict) and "command" in results[piece]]
    return "\n".join(lines) + "\n"


def save(out_dir: str, piece: str, new: dict[str, Any], argv: Sequence[str], replace: bool = False) -> dict[str, Any]:
    """Merge ``new`` as piece ``piece`` (with its command line) into gpu.json, or with ``replace``
    put it in place of that piece's old entry (the other pieces' stay); rewrite gpu.md."""
    old = load(out_dir)
    new = {**new, "command": shlex.join(["python", "bench/gpu.py", *argv])}
    results = {**old, piece: new} if replace else merge(old, {piece: new})
    for name, text in (("gpu.json", json.dumps(results, indent=2) + "\n"), ("gpu.md", render_markdown(results))):
        tmp = os.path.join(out_dir, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(out_dir, name))
    return results


def load(out_dir: str) -> dict[str, Any]:
    path = os.path.join(out_dir, "gpu.json")
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read {path}: {exc}") from None


# ------------------------------------------------------------------------------------------------
# The pieces.
# ------------------------------------------------------------------------------------------------
def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def require_cuda(piece: str) -> None:
    if not cuda_available():
        raise BenchError(f"the {piece} piece needs a CUDA GPU, and this machine has none")


def _version(package: str) -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def piece_env(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    import torch

    cuda = cuda_available()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "gpu_name": torch.cuda.get_device_name(0) if cuda else None,
            "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 2) if cuda else None,
            "bf16_supported": torch.cuda.is_bf16_supported() if cuda else None,
            "cpu_count": os.cpu_count(), "ale_py": _version("ale-py"),
            "stable_baselines3": _version("stable-baselines3"), "gymnasium": _version("gymnasium"),
            "git_commit": commit}
    for key, value in info.items():
        print(f"{key:>18}: {_fmt(value)}")
    if not cuda:
        print("no CUDA device: only the env piece runs")
    return info, 0


def parse_pytest_summary(output: str) -> dict[str, int]:
    """Counts from pytest's last summary line (``3 passed, 1 skipped, 400 deselected in 2.1s``)."""
    pattern = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)\b")
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "deselected": 0}
    for line in reversed(output.splitlines()):
        found = pattern.findall(line)
        if found:
            for number, what in found:
                counts["errors" if what.startswith("error") else what] = int(number)
            break
    return counts


def piece_smoke(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    require_cuda("smoke")
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q"]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.minutes * 60)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        output, code = out.decode(errors="replace") if isinstance(out, bytes) else out, None
    print(output[-4000:])
    counts = parse_pytest_summary(output)
    print(f"smoke: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped, "
          f"exit code {code if code is not None else f'none (timed out after {args.minutes:g} min)'}"
          + (" (no test is marked cuda)" if code == 5 else ""))
    return {**counts, "exit_code": code}, 0 if code in (0, 5) else 1  # 5: no test marked cuda


def piece_throughput(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    require_cuda("throughput")
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    import throughput as tp  # noqa: E402  (imports torch and the project)
    import torch

    bf16 = torch.cuda.is_bf16_supported()
    setups = tp.ours_setups("both", "ale", bf16=bf16)
    names = [tp.OURS_RECURRENT, tp.OURS_FEEDFORWARD] + ([tp.OURS_FEEDFORWARD + tp.BF16] if bf16 else [])
    if not bf16:
        print("bf16 is not supported on this GPU: the bf16 trainer is left out")
    cells: dict[str, Any] = {}
    for num_envs in args.envs:
        per_update = tp.steps_per_update(num_envs)
        steps = max(per_update, args.steps // per_update * per_update)
        common = dict(env_name=PONG, num_envs=num_envs, seed=0, device="cuda")
        trainers = {name: (tp.train_ours, {**common, **setups[name]}) for name in names}
        trainers[tp.SB3] = (tp.train_sb3, {**common, "vec_env": args.sb3_vec_env})
        print(f"{PONG}, {num_envs} envs, {steps} env steps a run, {args.repeats} rounds", flush=True)
        trials = tp.run_alternating(trainers, steps, args.repeats, warmup_steps=0)
        sb3 = trials[tp.SB3].median_rate
        cells[str(num_envs)] = {
            "steps": steps, "repeats": args.repeats, "sb3_vec_env": args.sb3_vec_env,
            "trainers": {name: {"steps_per_s": round(t.median_rate, 1), "rounds": [round(r, 1) for r in t.rates],
                                "peak_gpu_mib": round(max(t.peak_gpu_mib, default=0.0), 1)}
                         for name, t in trials.items()},
            "ratios_over_sb3": {name: round(trials[name].median_rate / sb3, 3) for name in names}}
        for name, t in trials.items():
            print(f"  {name:<34} {t.median_rate:9.1f} env steps/s" +
                  (f"  ({t.median_rate / sb3:.2f}x sb3)" if name != tp.SB3 else ""))
        save(args.out_dir, "throughput", {str(num_envs): cells[str(num_envs)]}, args.argv)  # keep it if cut off
    return cells, 0


# ------------------------------------------------------------------------------------------------
# Pong: a run trained in pieces, its wall-clock time added up across them.
# ------------------------------------------------------------------------------------------------
class Point(NamedTuple):
    step: int
    value: float
    wall_time: float = 0.0


def first_reach(points: Sequence[Point], target: float) -> Optional[Point]:
    """The first point (in step order) whose value is at least ``target``; None if none is."""
    return next((p for p in sorted(points, key=lambda p: p.step) if p.value >= target), None)


def wall_seconds_at(segments: Sequence[dict[str, Any]], wall_time: float) -> float:
    """Training seconds spent up to ``wall_time``, summed over the segments (``start``, ``end``:
    time.time() stamps; ``end`` None for one still running), pauses between pieces left out."""
    total = 0.0
    for seg in segments:
        end = wall_time if seg.get("end") is None else min(seg["end"], wall_time)
        total += max(0.0, end - seg["start"])
    return total


def read_points(run_dir: str) -> tuple[list[Point], int]:
    """The run's ``episode/return_mean100`` points and the largest env step of any scalar."""
    from glob import escape, glob

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points, last_step = [], 0
    for path in sorted(glob(os.path.join(escape(run_dir), "events.out.tfevents.*"))):
        acc = EventAccumulator(path, size_guidance={"scalars": 0, "histograms": 1, "tensors": 1})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            events = acc.Scalars(tag)
            last_step = max([last_step] + [e.step for e in events])
            if tag == MEAN100:
                points += [Point(e.step, e.value, e.wall_time) for e in events]
    return points, last_step


def pong_summary(state: dict[str, Any], points: Sequence[Point], last_step: int, budget: int,
                 ended: bool = False) -> dict[str, Any]:
    """``state`` brought up to date with the run's points: the first reach of each target, in env
    steps and accumulated wall seconds, what was trained so far (``last_step``: the largest env
    step logged), and whether the run is done: 20 reached, ``budget`` env steps trained, or the
    run ``ended`` by itself (main.py stops at its --max-env-steps, logging every 10 updates)."""
    reached = {}
    for target in PONG_TARGETS:
        point = first_reach(points, target)
        reached[f"{target:g}"] = None if point is None else {
            "env_steps": point.step, "wall_seconds": round(wall_seconds_at(state["segments"], point.wall_time), 1)}
    wall = round(sum(s["end"] - s["start"] for s in state["segments"] if s.get("end") is not None), 1)
    done = reached[f"{PONG_TARGETS[-1]:g}"] is not None or last_step >= budget or ended
    status = ("done: reached 20" if reached[f"{PONG_TARGETS[-1]:g}"] else
              f"done: the run ended (budget {budget:,} env steps) without reaching 20" if done else
              "running: run pong again to continue")
    last = max(points, key=lambda p: p.step).value if points else None
    return {**state, "reached": reached, "env_steps": last_step, "wall_seconds": wall, "done": done,
            "status": status, "last_mean100": last}


def new_run_dir(runs: str, before: set[str]) -> Optional[str]:
    made = {name for name in set(os.listdir(runs)) - before if os.path.isdir(os.path.join(runs, name))}
    return os.path.join(runs, sorted(made)[0]) if len(made) == 1 else None


def log_tail(path: str, lines: int = 3) -> list[str]:
    """The last lines of a run's output, its progress bar's carriage returns counted as line ends."""
    with open(path, errors="replace") as f:
        f.seek(max(0, os.path.getsize(path) - 4096))
        return [line.strip() for line in re.split(r"[\r\n]+", f.read()) if line.strip()][-lines:]


def pong_command(state: dict[str, Any], args: argparse.Namespace, runs: str) -> list[str]:
    """Resume the run from its ``a2c_last``, or, without one, start it (``state`` emptied then).

    The first run gets as many updates as env steps, so that ``--max-env-steps`` always stops it
    first; a resume applies the budget again (it may have changed) with ``--num-updates``."""
    flags, budget = shlex.split(args.flags), str(args.max_env_steps)
    last = state["run_dir"] and os.path.join(state["run_dir"], "a2c_last")
    if last and os.path.exists(last):
        return [sys.executable, "main.py", "--resume", last, "--num-updates", budget, "--max-env-steps", budget,
                "--cuda", *flags]
    state.clear()
    state.update(run_dir=None, segments=[])
    return [sys.executable, "main.py", "--env-name", PONG, "--arch", "nature", "--no-recurrent", "--cuda",
            "--log-dir", runs, "--max-env-steps", budget, "--num-updates", budget, *flags]


def wait_or_stop(proc: subprocess.Popen, deadline: float, on_tick: Any) -> str:
    """Wait for ``proc``; at ``deadline`` stop it with SIGTERM (it writes a2c_last and exits), and
    kill it if it has not left 2 minutes later. Calls ``on_tick()`` every 2 s meanwhile. Returns
    how it ended: "stopped" (SIGTERM), "ended" (by itself) or "interrupted" (Ctrl+C, which it got too)."""
    try:
        while proc.poll() is None:
            on_tick()
            if time.time() >= deadline:
                print("pong: the minutes are up; stopping the run with SIGTERM", flush=True)
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                return "stopped"
            time.sleep(2)
    except KeyboardInterrupt:
        proc.wait()
        return "interrupted"
    return "ended"


def piece_pong(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    require_cuda("pong")
    deadline = args.started + args.minutes * 60
    runs = os.path.abspath(os.path.join(args.out_dir, "pong_runs"))  # main.py runs in the repository root
    os.makedirs(runs, exist_ok=True)
    state: dict[str, Any] = load(args.out_dir).get("pong") or {"run_dir": None, "segments": []}
    state.pop("command", None)
    for seg in state["segments"]:  # a piece killed before it closed its segment: close it at the run's last event
        if seg.get("end") is None:
            walls = [p.wall_time for p in read_points(state["run_dir"])[0]] if state["run_dir"] else []
            seg["end"], seg["interrupted"] = max([seg["start"], *walls]), True

    def store() -> None:
        save(args.out_dir, "pong", state, args.argv, replace=True)

    if state.get("done"):
        print(f"pong: this run is done; delete {runs} and the pong entry of gpu.json to start again")
    code = 0
    while not state.get("done") and deadline - time.time() > 30:
        command = pong_command(state, args, runs)
        log = os.path.join(runs, f"segment-{time.strftime('%Y%m%d-%H%M%S')}.log")
        print(f"$ {shlex.join(command)}\n  (its output: {log})", flush=True)
        before = set(os.listdir(runs))
        segment: dict[str, Any] = {"start": time.time(), "end": None, "command": shlex.join(command), "log": log}
        state["segments"].append(segment)
        store()
        with open(log, "w") as out:
            proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

        def note_run_dir() -> None:  # as soon as it exists, so that a later piece can resume a killed one
            if state["run_dir"] is None and (found := new_run_dir(runs, before)):
                state["run_dir"] = found
                store()

        how = wait_or_stop(proc, deadline, note_run_dir)
        segment["end"], segment["exit_code"], segment["how"] = time.time(), proc.returncode, how
        print("\n".join("  " + line for line in log_tail(log)), flush=True)
        note_run_dir()
        if state["run_dir"] is None:
            store()
            print("error: the training run made no run directory", file=sys.stderr)
            return state, 1
        steps_before = state.get("env_steps", 0)
        # A run that ended by itself, cleanly, spent its budget: no resume would train it further.
        ended = how == "ended" and proc.returncode == 0
        state = pong_summary(state, *read_points(state["run_dir"]), args.max_env_steps, ended)
        store()
        if proc.returncode != 0:
            print(f"error: the training run exited with code {proc.returncode}", file=sys.stderr)
            code = 1
        if proc.returncode != 0 or how == "interrupted" or state["env_steps"] <= steps_before:
            break  # failed, interrupted, or ended without training
    for goal, reach in state.get("reached", {}).items():
        print(f"pong: mean-100 >= {goal}: " + (f"after {reach['env_steps']:,} env steps, {reach['wall_seconds']:,.0f} s"
                                               if reach else "not yet"))
    print(f"pong: {state.get('env_steps', 0):,} env steps in {state.get('wall_seconds', 0):,.0f} s; "
          f"{state.get('status', 'not started')}")
    return state, code


# ------------------------------------------------------------------------------------------------
class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise BenchError(message)


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'") from None
        if not value > 0 or (isinstance(value, float) and math.isinf(value)):
            raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
        return value
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("piece", choices=[*PIECES, "all"], help="what to measure")
    p.add_argument("--out-dir", default="bench_gpu", help="where gpu.json, gpu.md and pong_runs/ go")
    p.add_argument("--steps", type=_positive(int), default=20_000,
                   help="throughput: env steps of each timed run (rounded down to whole updates)")
    p.add_argument("--repeats", type=_positive(int), default=2, help="throughput: rounds; medians are reported")
    p.add_argument("--envs", type=_positive(int), nargs="+", default=[16, 64, 256], help="throughput: env counts")
    p.add_argument("--sb3-vec-env", choices=["dummy", "subproc"], default="dummy",
                   help="throughput: SB3's vector env class (bench/throughput.py's default: dummy)")
    p.add_argument("--minutes", type=_positive(float), default=9.0,
                   help="pong: wall-clock minutes this piece trains; smoke: its time limit")
    p.add_argument("--max-env-steps", type=_positive(int), default=10_000_000, help="pong: env-step budget of the run")
    p.add_argument("--flags", default="", help='pong: more flags for main.py, as --flags="--lr 1e-3"')
    return p


def check_out_dir(out_dir: str) -> None:
    try:
        os.makedirs(out_dir, exist_ok=True)
        probe = os.path.join(out_dir, ".write-probe")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise BenchError(f"cannot write to --out-dir '{out_dir}': {exc.strerror or exc}") from None


RUNNERS = {"env": piece_env, "smoke": piece_smoke, "throughput": piece_throughput, "pong": piece_pong}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        try:
            shlex.split(args.flags)
        except ValueError as exc:
            raise BenchError(f"--flags: {exc}") from None
        check_out_dir(args.out_dir)
        args.argv, args.started = argv, time.time()
        code = 0
        for piece in PIECES if args.piece == "all" else [args.piece]:
            print(f"== {piece}", flush=True)
            results, piece_code = RUNNERS[piece](args)
            save(args.out_dir, piece, results, argv, replace=piece == "pong")
            code = max(code, piece_code)
            args.started = time.time()  # under `all`, pong's minutes start with pong
        print(f"results: {os.path.join(args.out_dir, 'gpu.json')}, {os.path.join(args.out_dir, 'gpu.md')}")
        return code
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
