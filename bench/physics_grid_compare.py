"""Does domain randomization generalize? Evaluate every run of a study on its env's physics grid
and compare configurations side by side.

For each run directory ``LOG_DIR/NAME_seedS/<run>/`` of the configurations named, this plays its
checkpoint (``--checkpoint``, default ``a2c_last``) over the grid with

    python main.py --eval --load CHECKPOINT --physics-grid --episodes E --json ... --out ...

(the run's own table and heat map land beside the checkpoint), then writes ``OUT.md`` (a table:
per configuration, the mean return over all cells, the worst cell's, the share of cells at or
above ``--solved`` (200: LunarLander's "solved"), each as the mean over seeds with each seed's
value), ``OUT.json`` (every cell of every run) and ``OUT.png`` (one heat map per configuration:
the mean over its seeds of each cell's mean return, on one colour scale).

    python bench/study.py --env-name LunarLander-v3 --configs default= randomized=--randomize-domain \\
        --seeds 1 2 3 --steps 2000000 --parallel 1 --log-dir runs/dr --flags="..."
    python bench/physics_grid_compare.py --log-dir runs/dr --configs default randomized --out runs/dr/grid
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from typing import Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from physics_grid import draw_heatmaps, mean_table  # noqa: E402


def run_dirs(log_dir: str, config: str) -> list[tuple[int, str]]:
    """(seed, run directory) of each run of ``config`` in a study's log dir, by seed."""
    found = []
    for path in glob.glob(os.path.join(log_dir, f"{config}_seed*", "*", "config.json")):
        seed = int(os.path.basename(os.path.dirname(os.path.dirname(path))).rsplit("_seed", 1)[1])
        found.append((seed, os.path.dirname(path)))
    return sorted(found)


def grid_of(run_dir: str, checkpoint: str, episodes: int, threads: int, max_steps: Optional[int] = None) -> dict:
    load = os.path.join(run_dir, checkpoint)
    table, image = f"{load}_physics_grid.json", f"{load}_physics_grid.png"
    cap = ["--max-episode-frames", str(max_steps)] if max_steps else []
    subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), "--eval", "--load", load, "--physics-grid",
                    "--episodes", str(episodes), "--json", table, "--out", image, "--no-cuda",
                    "--threads", str(threads), *cap], check=True)
    with open(table) as f:
        return json.load(f)


def summary(grid: dict, solved: float) -> dict[str, float]:
    means = np.array([cell["mean"] for cell in grid["cells"]])
    return {"mean": float(means.mean()), "worst": float(means.min()), "solved": float((means >= solved).mean())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log-dir", required=True, help="a study's log dir (bench/study.py --log-dir)")
    p.add_argument("--configs", nargs="+", required=True, help="configuration names of the study")
    p.add_argument("--checkpoint", default="a2c_last", help="which checkpoint of each run plays (default: %(default)s)")
    p.add_argument("--episodes", type=int, default=10, help="episodes a cell (default: %(default)s)")
    p.add_argument("--solved", type=float, default=200.0, help="a cell counts as solved from this mean (default: 200)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-episode-steps", type=int, default=None, help="cap on an episode's steps (quick checks)")
    p.add_argument("--out", required=True, metavar="PREFIX", help="writes PREFIX.md, PREFIX.json, PREFIX.png")
    args = p.parse_args()

    results: dict[str, list[dict]] = {}
    for config in args.configs:
        runs = run_dirs(args.log_dir, config)
        if not runs:
            print(f"error: no runs of {config} in {args.log_dir}", file=sys.stderr)
            return 2
        results[config] = [{"seed": seed, "run_dir": run_dir,
                            "grid": grid_of(run_dir, args.checkpoint, args.episodes, args.threads,
                                            args.max_episode_steps)}
                           for seed, run_dir in runs]

    lines = [f"Each run's `{args.checkpoint}` over the physics grid, {args.episodes} episodes a cell "
             f"(`python bench/physics_grid_compare.py --log-dir {args.log_dir} --configs {' '.join(args.configs)} "
             f"--checkpoint {args.checkpoint} --episodes {args.episodes}`).", "",
             f"| configuration | seeds | mean return over the cells | worst cell | cells at {args.solved:g} or more |",
             "|---|---|---|---|---|"]
    tables, grids = [], []
    for config, runs in results.items():
        rows = [summary(run["grid"], args.solved) for run in runs]
        for run, row in zip(runs, rows):
            run["summary"] = row

        def show(key: str, fmt: str) -> str:
            values = [row[key] for row in rows]
            return f"{np.mean(values):{fmt}} ({', '.join(f'{v:{fmt}}' for v in values)})"

        lines.append(f"| {config} | {' '.join(str(run['seed']) for run in runs)} | {show('mean', '.1f')} | "
                     f"{show('worst', '.1f')} | {show('solved', '.0%')} |")
        tables.append(np.mean([mean_table(run["grid"]) for run in runs], axis=0))
        grids.append(runs[0]["grid"])
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out + ".md", "w") as f:
        f.write(text)
    with open(args.out + ".json", "w") as f:
        json.dump(results, f, indent=1)
    titles = [f"{config}: mean of {len(runs)} seed{'s' if len(runs) > 1 else ''}" for config, runs in results.items()]
    draw_heatmaps(grids, titles, args.out + ".png", tables=tables)
    print(f"wrote {args.out}.md, {args.out}.json, {args.out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
