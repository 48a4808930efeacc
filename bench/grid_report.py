"""Does domain randomization generalize? Every run of a study's configurations plays its env's physics
grid and default physics (``main.py --eval``), and a row a configuration compares them, each figure
the mean over its seeds then each seed's (docs/control.md says what each figure is). Writes
LOG_DIR/grid.md, .json and .png (a heat map a configuration; with ``--baseline``, grid_diff.png).

    python -m bench.grid_report --log-dir runs/dr --configs default randomized --baseline default
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import pathlib
import shlex
import subprocess
import sys
from typing import Any, Optional, Sequence

import numpy as np

from bench import ROOT, markdown_table, positive, write_report
from bench.random_agent import play_random
from bench.study import NAME_PATTERN, find_run_dir
from physics_grid import draw_heatmaps, draw_maps, held_out_table, mean_table, play_cells, region_means

REPORT_KEY = "_report"  # OUT.json's key of the table and maps; no configuration can be named so (NAME_PATTERN)
NO_FIGURE = "–"  # a figure with nothing to measure (no held-out cell, no specialist)
# Each run's figures, and the format of each the table shows (the worst cell it leaves out).
FIGURES = {"mean": ".1f", "worst": "", "worst_decile": ".1f", "held_out": ".1f", "default_physics": ".1f"}
FIGURES |= {"solved": ".0%", "ceiling_fraction": ".2f"}


def random_grid(
    env_name: str, episodes: int, seed: int, *, num_envs: Optional[int] = None, max_episode_steps: Optional[int] = None
) -> dict[str, Any]:
    """Random play in each cell on an agent's grid's env seeds (the floor), each cell's draws seeded afresh."""

    def play(envs: Any) -> Any:
        return play_random(envs, episodes, np.random.default_rng(seed))

    return {**play_cells(env_name, episodes, seed, num_envs, max_episode_steps, play), "policy": "random"}


def worst_decile(means: Sequence[float]) -> float:
    """The mean of the worst tenth of the cells' mean returns, at least one cell."""
    ordered = np.sort(np.asarray(means, dtype=np.float64))
    return float(ordered[: max(1, len(ordered) // 10)].mean())


def fraction_of_ceiling(score: float, floor: float, ceiling: float) -> float:
    """0 for random play, 1 for the specialist; NaN where the ceiling is not above the floor."""
    return (score - floor) / (ceiling - floor) if ceiling > floor else float("nan")


def draw_difference(grid: dict[str, Any], differences: Sequence[np.ndarray], titles: Sequence[str], path: str) -> None:
    """Per-cell differences in mean return side by side, on one diverging scale centred on 0."""
    largest, n = max(float(np.nanmax(np.abs(d))) for d in differences) or 1.0, len(differences)
    scale = dict(cmap="RdBu", low=-largest, high=largest, label="difference in mean return", number="{:+.0f}")
    draw_maps([grid] * n, list(differences), titles, path, **scale, held_out=[None] * n)


def cell_mean(grid: dict, cell: dict[str, float]) -> float:
    """The mean return of ``grid``'s cell at ``cell``'s axis values."""
    (found,) = [c for c in grid["cells"] if all(c[name] == value for name, value in cell.items())]
    return float(found["mean"])


def specialist_ceilings(specialists: dict[str, tuple[dict[str, float], list[dict]]], floor: dict) -> list[dict]:
    """Each specialist's cell (name -> (its cell, its runs' ``seed`` and ``grid``)) with its seeds' scores
    there, their mean (the ceiling) and random play's (the floor)."""
    ceilings = []
    for name, (cell, runs) in specialists.items():
        scores = [cell_mean(run["grid"], cell) for run in runs]
        ceiling = dict(specialist=name, seeds=[run["seed"] for run in runs], scores=scores)
        ceilings.append({**cell, **ceiling, "ceiling": float(np.mean(scores)), "floor": cell_mean(floor, cell)})
    return ceilings


def ceiling_fractions(grid: dict, ceilings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """An agent's score in each specialist's cell and its ``fraction_of_ceiling``."""
    fractions = []
    for ceiling in ceilings:
        cell = {name: ceiling[name] for name in grid["axes"]}
        score = cell_mean(grid, cell)
        fraction = fraction_of_ceiling(score, ceiling["floor"], ceiling["ceiling"])
        fractions.append({**cell, "score": score, "fraction": fraction})
    return fractions


def grid_summary(grid: dict, solved: float, ceilings: Optional[Sequence[dict[str, Any]]] = None) -> dict[str, Any]:
    """One run's figures over the grid; the held-out mean and the fraction of the ceiling (over the cells
    where the ceiling is above the floor) None where there is none."""
    means = np.array([cell["mean"] for cell in grid["cells"]])
    summary: dict[str, Any] = {
        "mean": float(means.mean()),
        "worst": float(means.min()),
        "worst_decile": worst_decile(means),
        "held_out": region_means(grid)["held_out"],
        "solved": float((means >= solved).mean()),
    }
    if ceilings:
        fractions = [f["fraction"] for f in ceiling_fractions(grid, ceilings) if math.isfinite(f["fraction"])]
        summary["ceiling_fraction"] = float(np.mean(fractions)) if fractions else None
    return summary


def _over_seeds(values: Sequence[Optional[float]], fmt: str) -> str:
    """The mean over seeds, then each seed's: ``12.5 (10.0, 15.0)``; ``–`` for none."""
    known = [v for v in values if v is not None and math.isfinite(v)]
    each = ", ".join(NO_FIGURE if v is None or not math.isfinite(v) else f"{v:{fmt}}" for v in values)
    return f"{np.mean(known):{fmt}} ({each})" if known else NO_FIGURE


def compare_grids(
    results: dict[str, list[dict[str, Any]]],
    out: str,
    command: str,
    solved: float,
    *,
    baseline: Optional[str] = None,
    ceilings: Optional[list[dict[str, Any]]] = None,
    floor: Optional[dict] = None,
) -> str:
    """Write ``out.md``, ``out.json``, ``out.png`` (and with ``baseline`` ``out_diff.png``) from each
    configuration's runs (``seed``, ``run_dir``, ``grid``, ``default_physics``); returns the markdown."""
    first = next(iter(results.values()))[0]["grid"]
    decile = max(1, len(first["cells"]) // 10)
    fraction = f" ({len(ceilings)} cell{'s' * (len(ceilings) > 1)})" if ceilings else ""
    header = ["configuration", "seeds", "mean return over the cells"]
    header += [f"worst decile ({decile} cell{'s' * (decile > 1)})", "mean over held-out cells", "default physics"]
    header += [f"cells at {solved:g} or more", "fraction of the ceiling" + fraction]
    header += [f"mean minus {baseline}"] if baseline is not None else []
    tables, held_out, rows = {}, {}, []
    for name, runs in results.items():
        for run in runs:
            default = run["default_physics"]["mean"] if "default_physics" in run else None
            run["summary"] = {**grid_summary(run["grid"], solved, ceilings), "default_physics": default}
            if ceilings:
                run["ceiling_fraction"] = ceiling_fractions(run["grid"], ceilings)
        figures = {key: [run["summary"].get(key) for run in runs] for key in FIGURES}
        rows.append({"config": name, "seeds": [run["seed"] for run in runs], **figures})
        tables[name] = np.mean([mean_table(run["grid"]) for run in runs], axis=0)
        masks = [held_out_table(run["grid"]) for run in runs]
        held_out[name] = None if any(m is None for m in masks) else np.mean(masks, axis=0)
    base, cells = next((r for r in rows if r["config"] == baseline), None), []
    for row in rows:
        shown = [_over_seeds(row[key], form) for key, form in FIGURES.items() if form]
        cells.append([row["config"], " ".join(map(str, row["seeds"])), *shown])
        if base is not None:
            row["mean_minus_baseline"] = None if row is base else float(np.mean(row["mean"]) - np.mean(base["mean"]))
            cells[-1].append(NO_FIGURE if row is base else f"{row['mean_minus_baseline']:+.1f}")

    report: dict[str, Any] = {"solved": solved, "rows": rows, "baseline": baseline}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    titles = [f"{name}: mean of {len(runs)} seed{'s' * (len(runs) > 1)}" for name, runs in results.items()]
    grids = [runs[0]["grid"] for runs in results.values()]
    draw_heatmaps(grids, titles, out + ".png", tables=list(tables.values()), held_out=list(held_out.values()))
    if baseline is not None:
        others = [name for name in results if name != baseline]
        differences = [tables[name] - tables[baseline] for name in others]
        report["difference"] = {name: d.tolist() for name, d in zip(others, differences)}
        titles = [f"{name} minus {baseline}: mean over seeds" for name in others]
        draw_difference(first, differences, titles, out + "_diff.png")
    if ceilings:
        report.update(ceilings=ceilings, floor=floor)
    markdown = "\n".join([command, "", *markdown_table(header, cells)]) + "\n"
    write_report(out, markdown, {**results, REPORT_KEY: report})
    return markdown


def grid_run_dirs(log_dir: str, name: str) -> list[tuple[int, str]]:
    """(seed, run directory) of each run of configuration ``name`` in a study's log dir: the one it resumes."""
    found = []
    for root in glob.glob(os.path.join(glob.escape(log_dir), f"{name}_seed*")):
        run_dir = find_run_dir(root) if os.path.isdir(root) else None
        if run_dir and os.path.isfile(os.path.join(run_dir, "config.json")):
            found.append((int(os.path.basename(root).rsplit("_seed", 1)[1]), run_dir))
    return sorted(found)


def run_settings(run_dir: str) -> Any:
    """The settings a run trained with (its ``config.json``)."""
    from config import Config

    return Config.from_dict(json.loads(pathlib.Path(run_dir, "config.json").read_text()))


def play(run_dir: str, episodes: int, grid: bool) -> dict:
    """``main.py --eval`` of a run's ``a2c_last`` over the physics grid (``grid``) or on the default
    physics, one thread on the CPU; the ``--json`` it writes beside the checkpoint."""
    load = os.path.join(run_dir, "a2c_last")
    table = f"{load}_{'physics_grid' if grid else 'default_physics'}.json"
    where = ["--physics-grid", "--out", f"{load}_physics_grid.png"] if grid else []
    flags = ["--eval", "--load", load, "--episodes", str(episodes), "--json", table, "--no-cuda", "--threads", "1"]
    subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *flags, *where], check=True)
    return json.loads(pathlib.Path(table).read_text())


def specialist_cell(env_name: str, settings: Sequence[Any]) -> dict[str, float]:
    """The grid cell a specialist's runs (``settings``) all trained on, else ``ValueError`` (or ``UsageError``)."""
    import randomize
    from physics import FAMILIES

    physics = settings[0].physics
    if any(s.env_name != env_name or s.physics != physics for s in settings):
        raise ValueError(f"its runs trained on other games or physics than one cell of {env_name}")
    if not physics:
        raise ValueError("trained on the default physics (no --physics), not on one cell")
    values = randomize.parse_physics(env_name, physics)
    names, axes = randomize.grid(env_name)
    off_grid = any(values[name] not in axis for name, axis in zip(names, axes))
    if off_grid or any(values[name] != value for name, value in FAMILIES[env_name].grid_fixed.items()):
        raise ValueError(f"--physics {physics} is not a cell of the {env_name} grid")
    return {name: values[name] for name in names}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log-dir", required=True, help="the study's --log-dir")
    p.add_argument("--configs", nargs="+", required=True, metavar="NAME", help="the configurations to compare")
    p.add_argument("--episodes", type=positive, default=10, help="episodes a cell (default: %(default)s)")
    default = "episodes of each run on the default physics (default: %(default)s)"
    p.add_argument("--episodes-default", type=positive, default=30, help=default)
    p.add_argument("--solved", type=float, default=200.0, help="a cell is solved from this mean return (default: 200)")
    p.add_argument("--baseline", metavar="NAME", help="one of --configs: each other's difference to it")
    specialists = "configurations trained on one grid cell each (--physics): their score there is the ceiling"
    p.add_argument("--specialists", nargs="+", default=[], metavar="NAME", help=specialists)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    from utils import UsageError

    p = build_parser()
    args = p.parse_args(argv)
    names, specialists, baseline = list(dict.fromkeys(args.configs)), args.specialists, args.baseline
    bad = [name for name in names + specialists if not NAME_PATTERN.fullmatch(name)]
    if bad:
        p.error(f"not a configuration name: {bad[0]!r}")
    if baseline is not None and (baseline not in names or len(names) < 2):
        p.error(f"--baseline: {baseline} is not one of --configs ({' '.join(names)}) beside another to compare with")
    runs_of = {name: grid_run_dirs(args.log_dir, name) for name in dict.fromkeys(names + specialists)}
    for name, runs in runs_of.items():
        if not runs:
            p.error(f"no runs of {name} in --log-dir {args.log_dir}")
    env_name = run_settings(runs_of[names[0]][0][1]).env_name
    cells: dict[str, dict[str, float]] = {}
    for name in specialists:  # every specialist's cell, before anything plays
        settings = [run_settings(run_dir) for _, run_dir in runs_of[name]]
        try:
            cells[name] = specialist_cell(env_name, settings)
        except (ValueError, UsageError) as exc:
            p.error(f"--specialists: {name}: {exc}")
        if [other for other, cell in cells.items() if other != name and cell == cells[name]]:
            p.error(f"--specialists: two of them trained on the cell {settings[0].physics}")

    # Run directory -> its grid, each played once (a configuration may also be a specialist).
    played = {
        run_dir: play(run_dir, args.episodes, grid=True)
        for run_dir in dict.fromkeys(run_dir for runs in runs_of.values() for _, run_dir in runs)
    }
    results = {name: [] for name in names}
    for name, runs in results.items():
        for seed, run_dir in runs_of[name]:
            default = play(run_dir, args.episodes_default, grid=False)
            runs.append({"seed": seed, "run_dir": run_dir, "grid": played[run_dir], "default_physics": default})
    ceilings = floor = None
    if specialists:
        some = next(iter(played.values()))  # every grid played on the same env seeds
        floor = random_grid(env_name, some["episodes"], some["seed"], num_envs=len(some["episodes_per_env"]))
        seeds = {name: [{"seed": seed, "grid": played[run_dir]} for seed, run_dir in runs_of[name]] for name in cells}
        ceilings = specialist_ceilings({name: (cell, seeds[name]) for name, cell in cells.items()}, floor)
    out = os.path.join(args.log_dir, "grid")
    typed = shlex.join(sys.argv[1:] if argv is None else argv)
    plays = f"{args.episodes} episodes a cell, and {args.episodes_default} on the default physics"
    command = f"Each run's `a2c_last` over the physics grid, {plays} (`python -m bench.grid_report {typed}`)."
    print(compare_grids(results, out, command, args.solved, baseline=baseline, ceilings=ceilings, floor=floor))
    print(f"wrote {out}.md, {out}.json, {out}.png" + (f", {out}_diff.png" if baseline else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
