"""``python bench/study.py --grid``: does domain randomization generalize? Each run of the
configurations named plays its env's physics grid (``main.py --eval --physics-grid``) and the env's
default physics (``main.py --eval``), and one row a configuration compares them, each figure the
mean over its seeds followed by each seed's: the mean return over the cells, the worst decile (the
mean of the worst tenth of the cells, at least one), the mean over the held-out cells (outside the
physics the run trained on), the default physics, the share of cells at ``--solved`` or more, and
with ``--specialists`` (configurations trained with ``--physics`` on one cell each) the fraction of
the ceiling: in each specialist's cell ``(score - floor) / (ceiling - floor)``, the ceiling the
specialist's mean return there and the floor that of uniformly random actions on the same env
seeds. ``--baseline NAME`` adds each configuration's mean minus the baseline's and ``OUT_diff.png``,
the per-cell differences. It writes ``OUT.md``, ``OUT.json`` (every cell of every run; the table,
ceilings and floor under ``_report``) and ``OUT.png`` (one heat map a configuration, the mean over
its seeds, held-out cells hatched).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys
from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
for _path in (ROOT, BENCH):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from evaluate import EvalResult, episode_shares  # noqa: E402
from physics_grid import draw_heatmaps, draw_maps, held_out_table, mean_table, play_cells, region_means  # noqa: E402
from study import GRID_DEFAULTS, NAME_PATTERN, find_run_dir, json_ready  # noqa: E402

# ------------------------------------------------------------------------------------------------ random play, the floor
def random_grid(env_name: str, episodes: int, seed: int, *, num_envs: Optional[int] = None,
                max_episode_steps: Optional[int] = None) -> dict[str, Any]:
    """Scores of uniformly random actions in each grid cell, the floor a score is measured from: the
    same dict as :func:`evaluate_grid` (``"policy": "random"``, no ``inside``), on the same env seeds.

    Actions come from a numpy generator seeded ``seed`` afresh in every cell (so two calls agree):
    each of a ``Discrete`` space's actions with equal probability, a ``Box`` action uniform
    between its bounds.
    """
    def play(envs: Any) -> EvalResult:
        return _play_random(envs, episodes, np.random.default_rng(seed))

    grid = play_cells(env_name, episodes, seed, num_envs, max_episode_steps, play)
    cells = grid.pop("cells")
    return {**grid, "policy": "random", "cells": cells}


def _play_random(envs: Any, episodes: int, rng: np.random.Generator) -> EvalResult:
    """``episodes`` whole episodes of uniformly random actions, each env its share (as ``evaluate`` counts them)."""
    space = envs.action_space
    targets = episode_shares(episodes, envs.num_envs)
    played = [0] * envs.num_envs
    result = EvalResult()
    envs.reset()
    while any(p < t for p, t in zip(played, targets)):
        if isinstance(space, gym.spaces.Discrete):
            actions = space.start + rng.integers(space.n, size=envs.num_envs)
        else:
            actions = rng.uniform(space.low, space.high, size=(envs.num_envs, *space.shape)).astype(space.dtype)
        _, _, _, infos = envs.step(actions)
        for i, info in enumerate(infos):
            if "episode" in info and played[i] < targets[i]:
                result.scores.append(float(info["episode"]["r"]))
                result.lengths.append(int(info["episode"].get("l", 0)))
                played[i] += 1
    return result


def worst_decile(means: Sequence[float]) -> float:
    """The mean of the worst tenth of the cells' mean returns: the worst ``len(means) // 10``, at
    least one (LunarLander's 30 cells: the worst 3; CartPole's 20: the worst 2)."""
    ordered = np.sort(np.asarray(means, dtype=np.float64))
    return float(ordered[:max(1, len(ordered) // 10)].mean())


def fraction_of_ceiling(score: float, floor: float, ceiling: float) -> float:
    """``(score - floor) / (ceiling - floor)``: 0 for random play's score in a cell (``floor``), 1 for
    the score of a specialist trained there alone (``ceiling``); NaN where the ceiling is not above
    the floor (a cell that no agent was seen to do better in than random play)."""
    return (score - floor) / (ceiling - floor) if ceiling > floor else float("nan")


def draw_difference(grid: dict[str, Any], differences: Sequence[np.ndarray], titles: Sequence[str],
                    path: str) -> None:
    """One map per table of per-cell differences in mean return (laid out as ``grid``'s
    :func:`mean_table`), side by side on one diverging colour scale centred on 0 (red: less, blue:
    more), each cell's difference printed with its sign."""
    largest = max(float(np.nanmax(np.abs(d))) for d in differences) or 1.0
    draw_maps([grid] * len(differences), list(differences), titles, path, cmap="RdBu", low=-largest, high=largest,
              label="difference in mean return", number="{:+.0f}", held_out=[None] * len(differences))


# ------------------------------------------------------------------------------------------------ runs over the grid
REPORT_KEY = "_report"  # OUT.json's key of the table and maps; no configuration can be named so (NAME_PATTERN)
NO_FIGURE = "–"  # a figure with nothing to measure (no held-out cell, no specialist)


def grid_run_dirs(log_dir: str, name: str) -> list[tuple[int, str]]:
    """(seed, run directory) of each run of configuration ``name`` in a study's log dir, by seed: one a
    seed, the run its training resumes (``find_run_dir``), so a start that stopped before its first
    ``a2c_last`` is passed over."""
    found = []
    for root in glob.glob(os.path.join(glob.escape(log_dir), f"{name}_seed*")):
        run_dir = find_run_dir(root) if os.path.isdir(root) else None
        if run_dir and os.path.isfile(os.path.join(run_dir, "config.json")):
            found.append((int(os.path.basename(root).rsplit("_seed", 1)[1]), run_dir))
    return sorted(found)


def run_settings(run_dir: str) -> Any:
    """The settings a run trained with (its ``config.json``, as ``config.Config``)."""
    from config import Config

    with open(os.path.join(run_dir, "config.json")) as f:
        return Config.from_dict(json.load(f))


def play_grid(run_dir: str, checkpoint: str, episodes: int, threads: int, max_steps: Optional[int] = None) -> dict:
    """``main.py --eval --physics-grid`` of one run's checkpoint; its table, also written beside the checkpoint."""
    load = os.path.join(run_dir, checkpoint)
    table, image = f"{load}_physics_grid.json", f"{load}_physics_grid.png"
    cap = ["--max-episode-frames", str(max_steps)] if max_steps else []
    subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), "--eval", "--load", load, "--physics-grid",
                    "--episodes", str(episodes), "--json", table, "--out", image, "--no-cuda",
                    "--threads", str(threads), *cap], check=True)
    with open(table) as f:
        return json.load(f)


def play_default(run_dir: str, checkpoint: str, episodes: int, threads: int, max_steps: Optional[int] = None) -> dict:
    """``main.py --eval`` of one run's checkpoint on its env's default physics; the ``--json`` it writes
    beside the checkpoint (``mean``, ``scores``, ...)."""
    load = os.path.join(run_dir, checkpoint)
    table = f"{load}_default_physics.json"
    cap = ["--max-episode-frames", str(max_steps)] if max_steps else []
    subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), "--eval", "--load", load, "--episodes",
                    str(episodes), "--json", table, "--no-cuda", "--threads", str(threads), *cap], check=True)
    with open(table) as f:
        return json.load(f)


def specialist_cell(env_name: str, physics: str) -> dict[str, float]:
    """The grid cell (axis name -> value) a specialist's ``--physics`` names; ``ValueError`` (or
    ``UsageError``) for physics that are not one cell of ``env_name``'s grid."""
    import randomize
    from physics import FAMILIES

    if not physics:
        raise ValueError("trained on the default physics (no --physics), not on one cell")
    values = randomize.parse_physics(env_name, physics)
    names, axes = randomize.grid(env_name)
    fixed = FAMILIES[env_name].grid_fixed
    if any(values[name] not in axis for name, axis in zip(names, axes)) or \
            any(values[name] != value for name, value in fixed.items()):
        raise ValueError(f"--physics {physics} is not a cell of the {env_name} grid")
    return {name: values[name] for name in names}


def cell_mean(grid: dict, cell: dict[str, float]) -> float:
    """The mean return of ``grid``'s cell at ``cell``'s axis values."""
    (found,) = [c for c in grid["cells"] if all(c[name] == value for name, value in cell.items())]
    return float(found["mean"])


def specialist_ceilings(specialists: dict[str, tuple[dict[str, float], list[dict[str, Any]]]],
                        floor: dict) -> list[dict[str, Any]]:
    """Each specialist configuration's cell (name -> (its cell, its runs with their ``seed`` and ``grid``)):
    ``{<axis values>, "specialist", "seeds", "scores": each seed's mean return there, "ceiling": their
    mean, "floor": random play's mean return there (``floor``, `random_grid`)}``."""
    ceilings = []
    for name, (cell, runs) in specialists.items():
        scores = [cell_mean(run["grid"], cell) for run in runs]
        ceilings.append({**cell, "specialist": name, "seeds": [run["seed"] for run in runs], "scores": scores,
                         "ceiling": float(np.mean(scores)), "floor": cell_mean(floor, cell)})
    return ceilings


def ceiling_fractions(grid: dict, ceilings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """An agent's score in each specialist cell as a fraction of the way from random play to the
    specialist (`fraction_of_ceiling`): ``{<axis values>, "score", "fraction"}``."""
    axes = list(grid["axes"])
    fractions = []
    for ceiling in ceilings:
        cell = {name: ceiling[name] for name in axes}
        score = cell_mean(grid, cell)
        fractions.append({**cell, "score": score,
                          "fraction": fraction_of_ceiling(score, ceiling["floor"], ceiling["ceiling"])})
    return fractions


def grid_summary(grid: dict, solved: float, ceilings: Optional[Sequence[dict[str, Any]]] = None) -> dict[str, Any]:
    """One run's figures over the grid: the mean return over its cells, its worst cell's, its worst
    decile's (`worst_decile`), the mean over its held-out cells (None where none is),
    the share of cells at ``solved`` or more, and with ``ceilings`` the mean of its fractions of the
    ceiling over the specialist cells where the ceiling is above the floor (None where none is)."""
    means = np.array([cell["mean"] for cell in grid["cells"]])
    summary: dict[str, Any] = {"mean": float(means.mean()), "worst": float(means.min()),
                               "worst_decile": worst_decile(means), "held_out": region_means(grid)["held_out"],
                               "solved": float((means >= solved).mean())}
    if ceilings:
        fractions = [f["fraction"] for f in ceiling_fractions(grid, ceilings) if math.isfinite(f["fraction"])]
        summary["ceiling_fraction"] = float(np.mean(fractions)) if fractions else None
    return summary


def _over_seeds(values: Sequence[Optional[float]], fmt: str) -> str:
    """The mean of a figure over seeds, then each seed's: ``12.5 (10.0, 15.0)``; ``–`` for none."""
    known = [v for v in values if v is not None and math.isfinite(v)]
    if not known:
        return NO_FIGURE
    each = ", ".join(NO_FIGURE if v is None or not math.isfinite(v) else f"{v:{fmt}}" for v in values)
    return f"{np.mean(known):{fmt}} ({each})"


def compare_grids(results: dict[str, list[dict[str, Any]]], out: str, command: str, solved: float, *,
                  baseline: Optional[str] = None, ceilings: Optional[list[dict[str, Any]]] = None,
                  floor: Optional[dict] = None) -> str:
    """Write ``out.md``, ``out.json`` and ``out.png`` (and with ``baseline`` ``out_diff.png``) from each
    configuration's runs (``seed``, ``run_dir``, ``grid``, and where played ``default_physics``, the
    ``main.py --eval --json`` of the default physics); returns the markdown (``command``: what
    produced it). ``ceilings`` (`specialist_ceilings`) and ``floor`` (its random play) add the
    fraction of the ceiling."""
    first = next(iter(results.values()))[0]["grid"]
    decile = max(1, len(first["cells"]) // 10)
    header = ["configuration", "seeds", "mean return over the cells",
              f"worst decile ({decile} cell{'s' if decile > 1 else ''})", "mean over held-out cells",
              "default physics", f"cells at {solved:g} or more",
              f"fraction of the ceiling ({len(ceilings)} cell{'s' if len(ceilings) > 1 else ''})" if ceilings
              else "fraction of the ceiling"]
    if baseline is not None:
        header.append(f"mean minus {baseline}")
    lines = [command, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    tables, held_out, rows = {}, {}, []
    for name, runs in results.items():
        for run in runs:
            run["summary"] = grid_summary(run["grid"], solved, ceilings)
            run["summary"]["default_physics"] = run["default_physics"]["mean"] if "default_physics" in run else None
            if ceilings:
                run["ceiling_fraction"] = ceiling_fractions(run["grid"], ceilings)
        rows.append({"config": name, "seeds": [run["seed"] for run in runs],
                     **{key: [run["summary"].get(key) for run in runs]
                        for key in ("mean", "worst", "worst_decile", "held_out", "default_physics", "solved",
                                    "ceiling_fraction")}})
        tables[name] = np.mean([mean_table(run["grid"]) for run in runs], axis=0)
        masks = [held_out_table(run["grid"]) for run in runs]
        held_out[name] = None if any(m is None for m in masks) else np.mean(masks, axis=0)
    for row in rows:
        if baseline is not None:
            base = next(r for r in rows if r["config"] == baseline)
            row["mean_minus_baseline"] = None if row is base else float(np.mean(row["mean"]) - np.mean(base["mean"]))
        cells = [row["config"], " ".join(map(str, row["seeds"])), _over_seeds(row["mean"], ".1f"),
                 _over_seeds(row["worst_decile"], ".1f"), _over_seeds(row["held_out"], ".1f"),
                 _over_seeds(row["default_physics"], ".1f"), _over_seeds(row["solved"], ".0%"),
                 _over_seeds(row["ceiling_fraction"], ".2f")]
        if baseline is not None:
            difference = row["mean_minus_baseline"]
            cells.append(NO_FIGURE if difference is None else f"{difference:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"

    report: dict[str, Any] = {"solved": solved, "rows": rows, "baseline": baseline}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    titles = [f"{name}: mean of {len(runs)} seed{'s' if len(runs) > 1 else ''}" for name, runs in results.items()]
    draw_heatmaps([runs[0]["grid"] for runs in results.values()], titles, out + ".png",
                  tables=list(tables.values()), held_out=list(held_out.values()))
    if baseline is not None:
        others = [name for name in results if name != baseline]
        differences = [tables[name] - tables[baseline] for name in others]
        report["difference"] = {name: d.tolist() for name, d in zip(others, differences)}
        draw_difference(first, differences, [f"{name} minus {baseline}: mean over seeds" for name in others],
                        out + "_diff.png")
    if ceilings:
        report.update(ceilings=ceilings, floor=floor)
    with open(out + ".md", "w") as f:
        f.write(text)
    with open(out + ".json", "w") as f:
        json.dump(json_ready({**results, REPORT_KEY: report}), f, indent=1)
        f.write("\n")
    return text


def grid_mode(p: argparse.ArgumentParser, args: argparse.Namespace, names: list[str]) -> int:
    """``--grid``: every run of each configuration named over its env's physics grid, compared; with
    ``--specialists``, the specialists' runs too, and random play over the grid for the floor."""
    from utils import UsageError

    if not names:
        p.error("--grid: give the configurations to compare: --configs NAME ...")
    options = {key: GRID_DEFAULTS[key] if getattr(args, key) is None else getattr(args, key) for key in GRID_DEFAULTS}
    baseline, specialists = options["baseline"], list(options["specialists"] or [])
    if baseline is not None and baseline not in names:
        p.error(f"--baseline: {baseline} is not one of --configs ({' '.join(names)})")
    if baseline is not None and len(set(names)) < 2:
        p.error(f"--baseline: --configs names no configuration to compare with {baseline}")
    bad = [name for name in specialists if not NAME_PATTERN.fullmatch(name)]
    if bad:
        p.error(f"--specialists: not a configuration name: {bad[0]!r}")
    runs_of: dict[str, list[tuple[int, str]]] = {}
    for name in dict.fromkeys(names + specialists):
        runs_of[name] = [(seed, run_dir) for seed, run_dir in grid_run_dirs(args.log_dir, name)
                         if args.seeds is None or seed in args.seeds]
        if not runs_of[name]:
            p.error(f"--grid: no runs of {name} in --log-dir {args.log_dir}")
    env_name = run_settings(runs_of[names[0]][0][1]).env_name
    cells: dict[str, dict[str, float]] = {}
    for name in specialists:  # every specialist's cell, before anything plays
        settings = [run_settings(run_dir) for _, run_dir in runs_of[name]]
        if any(s.env_name != env_name for s in settings):
            p.error(f"--specialists: {name} trained on {settings[0].env_name}, not {env_name}")
        if len({s.physics for s in settings}) > 1:
            p.error(f"--specialists: the runs of {name} trained on different physics")
        try:
            cells[name] = specialist_cell(env_name, settings[0].physics)
        except (ValueError, UsageError) as exc:
            p.error(f"--specialists: {name}: {exc}")
        same = [other for other, cell in cells.items() if other != name and cell == cells[name]]
        if same:
            p.error(f"--specialists: {same[0]} and {name} both trained on the cell {settings[0].physics}")

    played: dict[str, dict] = {}  # run directory -> its grid (a configuration may also be a specialist)

    def grid_of(run_dir: str) -> dict:
        if run_dir not in played:
            played[run_dir] = play_grid(run_dir, options["checkpoint"], options["episodes"], options["threads"],
                                        options["max_episode_steps"])
        return played[run_dir]

    results: dict[str, list[dict[str, Any]]] = {}
    for name in dict.fromkeys(names):
        results[name] = [{"seed": seed, "run_dir": run_dir, "grid": grid_of(run_dir),
                          "default_physics": play_default(run_dir, options["checkpoint"], options["episodes_default"],
                                                          options["threads"], options["max_episode_steps"])}
                         for seed, run_dir in runs_of[name]]
    ceilings = floor = None
    if specialists:
        their_runs = {name: (cells[name], [{"seed": seed, "grid": grid_of(run_dir)} for seed, run_dir in runs_of[name]])
                      for name in specialists}
        played_as = next(iter(played.values()))  # every grid played on the same env seeds
        floor = random_grid(env_name, played_as["episodes"], played_as["seed"],
                            num_envs=len(played_as["episodes_per_env"]),
                            max_episode_steps=options["max_episode_steps"])
        ceilings = specialist_ceilings(their_runs, floor)
    out = args.out or os.path.join(args.log_dir, "grid")
    extra = (f" --baseline {baseline}" if baseline else "") + \
            (f" --specialists {' '.join(specialists)}" if specialists else "")
    command = (f"Each run's `{options['checkpoint']}` over the physics grid, {options['episodes']} episodes a cell, "
               f"and {options['episodes_default']} episodes on the default physics "
               f"(`python bench/study.py --grid --log-dir {args.log_dir} --configs {' '.join(names)} "
               f"--checkpoint {options['checkpoint']} --episodes {options['episodes']} "
               f"--episodes-default {options['episodes_default']}{extra}`).")
    print(compare_grids(results, out, command, options["solved"], baseline=baseline, ceilings=ceilings, floor=floor))
    print(f"wrote {out}.md, {out}.json, {out}.png" + (f", {out}_diff.png" if baseline else ""))
    return 0
