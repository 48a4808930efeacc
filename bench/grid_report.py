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
import shlex
import subprocess
import sys
from typing import Any, Optional, Sequence

import numpy as np

from bench import positive
from bench.random_agent import play_random
from bench.study import NAME_PATTERN, find_run_dir, json_ready
from physics_grid import draw_heatmaps, draw_maps, held_out_table, mean_table, play_cells, region_means

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPORT_KEY = "_report"  # OUT.json's key of the table and maps; no configuration can be named so (NAME_PATTERN)
NO_FIGURE = "–"  # a figure with nothing to measure (no held-out cell, no specialist)


def random_grid(
    env_name: str, episodes: int, seed: int, *, num_envs: Optional[int] = None, max_episode_steps: Optional[int] = None
) -> dict[str, Any]:
    """Random play in each cell on an agent's grid's env seeds (the floor), each cell's draws seeded afresh."""
    grid = play_cells(
        env_name,
        episodes,
        seed,
        num_envs,
        max_episode_steps,
        lambda envs: play_random(envs, episodes, np.random.default_rng(seed)),
    )
    return {**grid, "policy": "random"}


def worst_decile(means: Sequence[float]) -> float:
    """The mean of the worst tenth of the cells' mean returns, at least one cell."""
    ordered = np.sort(np.asarray(means, dtype=np.float64))
    return float(ordered[: max(1, len(ordered) // 10)].mean())


def fraction_of_ceiling(score: float, floor: float, ceiling: float) -> float:
    """0 for random play, 1 for the specialist; NaN where the ceiling is not above the floor."""
    return (score - floor) / (ceiling - floor) if ceiling > floor else float("nan")


def draw_difference(grid: dict[str, Any], differences: Sequence[np.ndarray], titles: Sequence[str], path: str) -> None:
    """Per-cell differences in mean return side by side, on one diverging scale centred on 0."""
    largest = max(float(np.nanmax(np.abs(d))) for d in differences) or 1.0
    draw_maps(
        [grid] * len(differences),
        list(differences),
        titles,
        path,
        cmap="RdBu",
        low=-largest,
        high=largest,
        label="difference in mean return",
        number="{:+.0f}",
        held_out=[None] * len(differences),
    )


def cell_mean(grid: dict, cell: dict[str, float]) -> float:
    """The mean return of ``grid``'s cell at ``cell``'s axis values."""
    (found,) = [c for c in grid["cells"] if all(c[name] == value for name, value in cell.items())]
    return float(found["mean"])


def specialist_ceilings(
    specialists: dict[str, tuple[dict[str, float], list[dict[str, Any]]]], floor: dict
) -> list[dict[str, Any]]:
    """Each specialist's cell (name -> (its cell, its runs' ``seed`` and ``grid``)) with its seeds' scores
    there, their mean (the ceiling) and random play's (the floor)."""
    ceilings = []
    for name, (cell, runs) in specialists.items():
        scores = [cell_mean(run["grid"], cell) for run in runs]
        ceilings.append(
            {
                **cell,
                "specialist": name,
                "seeds": [run["seed"] for run in runs],
                "scores": scores,
                "ceiling": float(np.mean(scores)),
                "floor": cell_mean(floor, cell),
            }
        )
    return ceilings


def ceiling_fractions(grid: dict, ceilings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """An agent's score in each specialist's cell and its ``fraction_of_ceiling``."""
    fractions = []
    for ceiling in ceilings:
        cell = {name: ceiling[name] for name in grid["axes"]}
        score = cell_mean(grid, cell)
        fractions.append(
            {**cell, "score": score, "fraction": fraction_of_ceiling(score, ceiling["floor"], ceiling["ceiling"])}
        )
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
    header = [
        "configuration",
        "seeds",
        "mean return over the cells",
        f"worst decile ({decile} cell{'s' if decile > 1 else ''})",
        "mean over held-out cells",
        "default physics",
        f"cells at {solved:g} or more",
        "fraction of the ceiling" + (f" ({len(ceilings)} cell{'s' if len(ceilings) > 1 else ''})" if ceilings else ""),
    ]
    header += [f"mean minus {baseline}"] if baseline is not None else []
    lines = [command, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    tables, held_out, rows = {}, {}, []
    for name, runs in results.items():
        for run in runs:
            run["summary"] = {
                **grid_summary(run["grid"], solved, ceilings),
                "default_physics": run["default_physics"]["mean"] if "default_physics" in run else None,
            }
            if ceilings:
                run["ceiling_fraction"] = ceiling_fractions(run["grid"], ceilings)
        rows.append(
            {
                "config": name,
                "seeds": [run["seed"] for run in runs],
                **{
                    key: [run["summary"].get(key) for run in runs]
                    for key in (
                        "mean",
                        "worst",
                        "worst_decile",
                        "held_out",
                        "default_physics",
                        "solved",
                        "ceiling_fraction",
                    )
                },
            }
        )
        tables[name] = np.mean([mean_table(run["grid"]) for run in runs], axis=0)
        masks = [held_out_table(run["grid"]) for run in runs]
        held_out[name] = None if any(m is None for m in masks) else np.mean(masks, axis=0)
    base = next((r for r in rows if r["config"] == baseline), None)
    for row in rows:
        cells = [
            row["config"],
            " ".join(map(str, row["seeds"])),
            _over_seeds(row["mean"], ".1f"),
            _over_seeds(row["worst_decile"], ".1f"),
            _over_seeds(row["held_out"], ".1f"),
            _over_seeds(row["default_physics"], ".1f"),
            _over_seeds(row["solved"], ".0%"),
            _over_seeds(row["ceiling_fraction"], ".2f"),
        ]
        if base is not None:
            row["mean_minus_baseline"] = None if row is base else float(np.mean(row["mean"]) - np.mean(base["mean"]))
            cells.append(NO_FIGURE if row is base else f"{row['mean_minus_baseline']:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")

    report: dict[str, Any] = {"solved": solved, "rows": rows, "baseline": baseline}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    draw_heatmaps(
        [runs[0]["grid"] for runs in results.values()],
        [f"{name}: mean of {len(runs)} seed{'s' if len(runs) > 1 else ''}" for name, runs in results.items()],
        out + ".png",
        tables=list(tables.values()),
        held_out=list(held_out.values()),
    )
    if baseline is not None:
        others = [name for name in results if name != baseline]
        differences = [tables[name] - tables[baseline] for name in others]
        report["difference"] = {name: d.tolist() for name, d in zip(others, differences)}
        draw_difference(
            first, differences, [f"{name} minus {baseline}: mean over seeds" for name in others], out + "_diff.png"
        )
    if ceilings:
        report.update(ceilings=ceilings, floor=floor)
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(out + ".json", "w") as f:
        json.dump(json_ready({**results, REPORT_KEY: report}), f, indent=1)
    return "\n".join(lines) + "\n"


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

    with open(os.path.join(run_dir, "config.json")) as f:
        return Config.from_dict(json.load(f))


def play(run_dir: str, episodes: int, grid: bool) -> dict:
    """``main.py --eval`` of a run's ``a2c_last`` over the physics grid (``grid``) or on the default
    physics, one thread on the CPU; the ``--json`` it writes beside the checkpoint."""
    load = os.path.join(run_dir, "a2c_last")
    table = f"{load}_{'physics_grid' if grid else 'default_physics'}.json"
    subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "main.py"),
            "--eval",
            "--load",
            load,
            "--episodes",
            str(episodes),
            "--json",
            table,
            "--no-cuda",
            "--threads",
            "1",
            *(["--physics-grid", "--out", f"{load}_physics_grid.png"] if grid else []),
        ],
        check=True,
    )
    with open(table) as f:
        return json.load(f)


def specialist_cell(env_name: str, physics: str) -> dict[str, float]:
    """The grid cell a specialist's ``--physics`` names; ``ValueError`` (or ``UsageError``) otherwise."""
    import randomize
    from physics import FAMILIES

    if not physics:
        raise ValueError("trained on the default physics (no --physics), not on one cell")
    values = randomize.parse_physics(env_name, physics)
    names, axes = randomize.grid(env_name)
    if any(values[name] not in axis for name, axis in zip(names, axes)) or any(
        values[name] != value for name, value in FAMILIES[env_name].grid_fixed.items()
    ):
        raise ValueError(f"--physics {physics} is not a cell of the {env_name} grid")
    return {name: values[name] for name in names}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log-dir", required=True, help="the study's --log-dir")
    p.add_argument("--configs", nargs="+", required=True, metavar="NAME", help="the configurations to compare")
    p.add_argument("--episodes", type=positive, default=10, help="episodes a cell (default: %(default)s)")
    p.add_argument(
        "--episodes-default",
        type=positive,
        default=30,
        help="episodes of each run on the default physics (default: %(default)s)",
    )
    p.add_argument("--solved", type=float, default=200.0, help="a cell is solved from this mean return (default: 200)")
    p.add_argument("--baseline", metavar="NAME", help="one of --configs: each other's difference to it")
    p.add_argument(
        "--specialists",
        nargs="+",
        default=[],
        metavar="NAME",
        help="configurations trained on one grid cell each (--physics): their score there is the ceiling",
    )
    return p


def main(argv: Optional[list[str]] = None) -> int:
    from utils import UsageError

    p = build_parser()
    args = p.parse_args(argv)
    names, specialists, baseline = list(dict.fromkeys(args.configs)), args.specialists, args.baseline
    bad = [name for name in names + specialists if not NAME_PATTERN.fullmatch(name)]
    if bad:
        p.error(f"not a configuration name: {bad[0]!r}")
    if baseline is not None and baseline not in names:
        p.error(f"--baseline: {baseline} is not one of --configs ({' '.join(names)})")
    if baseline is not None and len(names) < 2:
        p.error(f"--baseline: --configs names no configuration to compare with {baseline}")
    runs_of = {name: grid_run_dirs(args.log_dir, name) for name in dict.fromkeys(names + specialists)}
    for name, runs in runs_of.items():
        if not runs:
            p.error(f"no runs of {name} in --log-dir {args.log_dir}")
    env_name = run_settings(runs_of[names[0]][0][1]).env_name
    cells: dict[str, dict[str, float]] = {}
    for name in specialists:  # every specialist's cell, before anything plays
        settings = [run_settings(run_dir) for _, run_dir in runs_of[name]]
        if any(s.env_name != env_name for s in settings) or len({s.physics for s in settings}) > 1:
            p.error(f"--specialists: the runs of {name} trained on other games or physics than one cell of {env_name}")
        try:
            cells[name] = specialist_cell(env_name, settings[0].physics)
        except (ValueError, UsageError) as exc:
            p.error(f"--specialists: {name}: {exc}")
        if [other for other, cell in cells.items() if other != name and cell == cells[name]]:
            p.error(f"--specialists: two of them trained on the cell {settings[0].physics}")

    # Run directory -> its grid, each played once (a configuration may also be a specialist).
    played = {
        run_dir: play(run_dir, args.episodes, grid=True)
        for run_dir in dict.fromkeys(run_dir for runs in runs_of.values() for _, run_dir in runs)
    }
    results = {
        name: [
            {
                "seed": seed,
                "run_dir": run_dir,
                "grid": played[run_dir],
                "default_physics": play(run_dir, args.episodes_default, grid=False),
            }
            for seed, run_dir in runs_of[name]
        ]
        for name in names
    }
    ceilings = floor = None
    if specialists:
        some = next(iter(played.values()))  # every grid played on the same env seeds
        floor = random_grid(env_name, some["episodes"], some["seed"], num_envs=len(some["episodes_per_env"]))
        ceilings = specialist_ceilings(
            {
                name: (cells[name], [{"seed": seed, "grid": played[run_dir]} for seed, run_dir in runs_of[name]])
                for name in specialists
            },
            floor,
        )
    out = os.path.join(args.log_dir, "grid")
    command = (
        f"Each run's `a2c_last` over the physics grid, {args.episodes} episodes a cell, and "
        f"{args.episodes_default} on the default physics (`python -m bench.grid_report "
        f"{shlex.join(sys.argv[1:] if argv is None else argv)}`)."
    )
    print(compare_grids(results, out, command, args.solved, baseline=baseline, ceilings=ceilings, floor=floor))
    print(f"wrote {out}.md, {out}.json, {out}.png" + (f", {out}_diff.png" if baseline else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
