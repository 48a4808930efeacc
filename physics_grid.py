"""How a saved agent does across physics: ``python main.py --eval --load CKPT --physics-grid``.

The agent plays ``episodes`` whole episodes in every cell of its env's evaluation grid (see
``randomize.grid``: LunarLander's gravity x wind power, CartPole's gravity x pole length), every
cell on the same env seeds, with the observation statistics it was saved with (frozen). The
result is a table (JSON) and a heat map of the mean return per cell (PNG).
"""
from __future__ import annotations

import itertools
from typing import Any, Optional, Sequence

import numpy as np
import torch

import normalize
import randomize
from envs import make_vec_env
from evaluate import episode_shares, evaluate
from model import ActorCritic


def evaluate_grid(model: ActorCritic, env_name: str, episodes: int, seed: int, *, checkpoint: dict[str, Any],
                  normalize_obs: bool = False, deterministic: bool = False, num_envs: Optional[int] = None,
                  max_episode_steps: Optional[int] = None) -> dict[str, Any]:
    """Scores of ``model`` in each grid cell: ``{"env_name", "axes": {name: values}, "fixed": {...},
    "episodes", "seed", "deterministic", "cells": [{<axis values>, "mean", "std", "scores"}]}``.

    Cells run in the grid's order (the first axis slowest). Each plays ``episodes`` episodes on
    ``num_envs`` envs (default min(episodes, 8)) seeded ``seed + i``, with sampled actions drawn
    from a generator seeded ``seed`` afresh in every cell (``deterministic``: the most probable).
    """
    names, axes = randomize.grid(env_name)
    n = num_envs or min(episodes, 8)
    cells = []
    for values in itertools.product(*axes):
        where = dict(zip(names, values))
        envs = make_vec_env(env_name, n, seed=seed, vec_env="sync", max_episode_frames=max_episode_steps,
                            physics=randomize.cell_kwargs(env_name, **where))
        envs = normalize.normalized(envs, normalize_obs, False, training=False)
        normalize.load(envs, checkpoint)
        try:
            generator = torch.Generator(next(model.parameters()).device).manual_seed(seed)
            result = evaluate(model, envs, episodes, deterministic, generator=generator)
        finally:
            envs.close()
        cells.append({**where, "mean": result.mean, "std": result.std, "scores": result.scores})
    return {"env_name": env_name, "axes": dict(zip(names, (list(a) for a in axes))),
            "fixed": randomize.FAMILIES[env_name].grid_fixed, "episodes": episodes,
            "episodes_per_env": episode_shares(episodes, n), "seed": seed, "deterministic": bool(deterministic),
            "cells": cells}


def mean_table(grid: dict[str, Any]) -> np.ndarray:
    """The mean returns as a ``[len(first axis), len(second axis)]`` array."""
    (first, rows), (second, columns) = grid["axes"].items()
    table = np.full((len(rows), len(columns)), np.nan)
    for cell in grid["cells"]:
        table[rows.index(cell[first]), columns.index(cell[second])] = cell["mean"]
    return table


def draw_heatmaps(grids: Sequence[dict[str, Any]], titles: Sequence[str], path: str,
                  tables: Optional[Sequence[np.ndarray]] = None) -> None:
    """One heat map of mean return per cell for each grid, side by side on one colour scale
    (``tables`` replaces the grids' own means, e.g. a mean over seeds), with each cell's number."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = list(tables) if tables is not None else [mean_table(g) for g in grids]
    low, high = min(float(np.nanmin(t)) for t in tables), max(float(np.nanmax(t)) for t in tables)
    fig, panels = plt.subplots(1, len(tables), figsize=(4.2 * len(tables) + 1, 4), squeeze=False,
                               layout="constrained")
    image = None
    for panel, grid, table, title in zip(panels[0], grids, tables, titles):
        (first, rows), (second, columns) = grid["axes"].items()
        image = panel.imshow(table, cmap="viridis", vmin=low, vmax=high, origin="lower", aspect="auto")
        panel.set_xticks(range(len(columns)), [f"{c:g}" for c in columns])
        panel.set_yticks(range(len(rows)), [f"{r:g}" for r in rows])
        panel.set_xlabel(second)
        panel.set_ylabel(first)
        panel.set_title(title, fontsize=10)
        for (r, c), value in np.ndenumerate(table):
            panel.text(c, r, f"{value:.0f}", ha="center", va="center", fontsize=8,
                       color="white" if value < (low + high) / 2 else "black")
    fig.colorbar(image, ax=panels[0].tolist(), label="mean return")
    fig.savefig(path, dpi=110)
    plt.close(fig)
