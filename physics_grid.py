"""How a saved agent does across physics: ``python main.py --eval --load CKPT --physics-grid``.

The agent plays ``episodes`` whole episodes in every cell of its env's evaluation grid (see
``randomize.grid``: LunarLander's gravity x wind power, CartPole's gravity x pole length), every
cell on the same env seeds, with the observation statistics it was saved with (frozen). The
result is a table (JSON) and a heat map of the mean return per cell (PNG).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

import normalize
import physics
import randomize
from config import Config
from envs import make_vec_env
from evaluate import EvalResult, episode_shares, evaluate
from model import ActorCritic
from utils import UsageError


def run_training_ranges(env_name: str, checkpoint: dict[str, Any]) -> randomize.Ranges:
    """The physics the run saved in ``checkpoint`` trained on (``randomize.training_ranges``): read from
    its settings (``--randomize-domain``, ``--physics``) and, for ADR, the ranges it saved."""
    config = Config.from_dict(checkpoint.get("config", {}))
    adr_ranges = (checkpoint.get("adr") or {}).get("ranges")
    if config.randomize_domain == "adr" and adr_ranges is None:
        raise UsageError(
            "the checkpoint of an ADR run (--randomize-domain adr) holds no ADR ranges to tell held-out cells by"
        )
    return randomize.training_ranges(env_name, config.randomize_domain, config.physics, adr_ranges)


def evaluate_grid(
    model: ActorCritic,
    env_name: str,
    episodes: int,
    seed: int,
    *,
    checkpoint: dict[str, Any],
    normalize_obs: bool = False,
    deterministic: bool = False,
    num_envs: Optional[int] = None,
    max_episode_steps: Optional[int] = None,
) -> dict[str, Any]:
    """Scores of ``model`` in each grid cell: ``{"env_name", "axes": {name: values}, "fixed": {...},
    "episodes", "seed", "deterministic", "training_ranges": {name: [low, high]},
    "cells": [{<axis values>, "mean", "std", "scores", "inside"}]}``.

    Cells run in the grid's order (the first axis slowest). Each plays ``episodes`` episodes on
    ``num_envs`` envs (default min(episodes, 8)) seeded ``seed + i``, with sampled actions drawn
    from a generator seeded ``seed`` afresh in every cell (``deterministic``: the most probable).
    ``inside``: the cell's physics (its axis values and the grid's fixed ones) lie in the run's
    training ranges (:func:`run_training_ranges`); a cell outside them is held out.
    """
    ranges = run_training_ranges(env_name, checkpoint)

    def play(envs: Any) -> EvalResult:
        envs = normalize.normalized(envs, normalize_obs, False, training=False)
        normalize.load(envs, checkpoint)
        generator = torch.Generator(next(model.parameters()).device).manual_seed(seed)
        return evaluate(model, envs, episodes, deterministic, generator=generator)

    grid = play_cells(
        env_name,
        episodes,
        seed,
        num_envs,
        max_episode_steps,
        play,
        observation_window=Config.from_dict(checkpoint.get("config", {})).observation_window,
    )
    cells = grid.pop("cells")
    for cell in cells:
        physics = randomize.cell_kwargs(env_name, **{name: cell[name] for name in grid["axes"]})
        cell["inside"] = randomize.inside(physics, ranges)
    return {
        **grid,
        "deterministic": bool(deterministic),
        "training_ranges": {name: [low, high] for name, (low, high) in ranges.items()},
        "cells": cells,
    }


def play_cells(
    env_name: str,
    episodes: int,
    seed: int,
    num_envs: Optional[int],
    max_episode_steps: Optional[int],
    play: Callable[[Any], EvalResult],
    observation_window: tuple[int, bool] = (1, False),
) -> dict[str, Any]:
    """``play(envs)`` in every cell of the grid, on ``num_envs`` envs seeded ``seed + i``; the grid dict
    (also how bench/grid_report.py plays random actions over it)."""
    names, axes = randomize.grid(env_name)
    n = num_envs or min(episodes, 8)
    cells = []
    for values in itertools.product(*axes):
        where = dict(zip(names, values))
        envs = make_vec_env(
            env_name,
            n,
            seed=seed,
            vec_env="sync",
            max_episode_frames=max_episode_steps,
            physics=randomize.cell_kwargs(env_name, **where),
            observation_window=observation_window,
        )
        try:
            result = play(envs)
        finally:
            envs.close()
        cells.append({**where, "mean": result.mean, "std": result.std, "scores": result.scores})
    return {
        "env_name": env_name,
        "axes": dict(zip(names, (list(a) for a in axes))),
        "fixed": physics.FAMILIES[env_name].grid_fixed,
        "episodes": episodes,
        "episodes_per_env": episode_shares(episodes, n),
        "seed": seed,
        "cells": cells,
    }


def mean_table(grid: dict[str, Any]) -> np.ndarray:
    """The mean returns as a ``[len(first axis), len(second axis)]`` array."""
    (first, rows), (second, columns) = grid["axes"].items()
    table = np.full((len(rows), len(columns)), np.nan)
    for cell in grid["cells"]:
        table[rows.index(cell[first]), columns.index(cell[second])] = cell["mean"]
    return table


def held_out_table(grid: dict[str, Any]) -> Optional[np.ndarray]:
    """1.0 where a cell is held out (outside the run's training physics), 0.0 inside, laid out as
    :func:`mean_table`; None for a grid whose cells do not say (an older table, random play)."""
    if not all("inside" in cell for cell in grid["cells"]):
        return None
    return mean_table({**grid, "cells": [{**cell, "mean": 0.0 if cell["inside"] else 1.0} for cell in grid["cells"]]})


def region_means(grid: dict[str, Any]) -> dict[str, Optional[float]]:
    """The mean return over the held-out cells and over those inside the training physics
    (``{"held_out": ..., "inside": ...}``), None for a region without cells (or cells that do not say)."""

    def mean(inside: bool) -> Optional[float]:
        means = [cell["mean"] for cell in grid["cells"] if "inside" in cell and cell["inside"] == inside]
        return float(np.mean(means)) if means else None

    return {"held_out": mean(False), "inside": mean(True)}


def draw_heatmaps(
    grids: Sequence[dict[str, Any]],
    titles: Sequence[str],
    path: str,
    tables: Optional[Sequence[np.ndarray]] = None,
    held_out: Optional[Sequence[Optional[np.ndarray]]] = None,
) -> None:
    """One heat map of mean return per cell for each grid, side by side on one colour scale
    (``tables`` replaces the grids' own means, e.g. a mean over seeds), with each cell's number.

    Held-out cells are hatched (``//``), and explained below the maps: ``held_out`` gives each map's
    :func:`held_out_table` (default: the grids' own), or, as a mean over seeds, the share of seeds
    that held each cell out (a share between 0 and 1 is dotted: held out by some seeds only).
    """
    tables = list(tables) if tables is not None else [mean_table(g) for g in grids]
    held_out = list(held_out) if held_out is not None else [held_out_table(g) for g in grids]
    low, high = min(float(np.nanmin(t)) for t in tables), max(float(np.nanmax(t)) for t in tables)
    draw_maps(
        grids,
        tables,
        titles,
        path,
        cmap="viridis",
        low=low,
        high=high,
        label="mean return",
        number="{:.0f}",
        held_out=held_out,
    )


def draw_maps(
    grids: Sequence[dict[str, Any]],
    tables: Sequence[np.ndarray],
    titles: Sequence[str],
    path: str,
    *,
    cmap: str,
    low: float,
    high: float,
    label: str,
    number: str,
    held_out: Sequence[Optional[np.ndarray]],
) -> None:
    """Maps of ``tables`` side by side on one colour scale ``low`` .. ``high``, each cell's value as
    ``number`` formats it, held-out cells hatched; one PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize
    from matplotlib.patches import Patch, Rectangle

    colours = plt.get_cmap(cmap)
    scale = Normalize(low, high)
    fig, panels = plt.subplots(
        1, len(tables), figsize=(4.2 * len(tables) + 1, 4.3), squeeze=False, layout="constrained"
    )
    image, hatched = None, set()
    for panel, grid, table, title, shares in zip(panels[0], grids, tables, titles, held_out):
        (first, rows), (second, columns) = grid["axes"].items()
        image = panel.imshow(table, cmap=cmap, vmin=low, vmax=high, origin="lower", aspect="auto")
        panel.set_xticks(range(len(columns)), [f"{c:g}" for c in columns])
        panel.set_yticks(range(len(rows)), [f"{r:g}" for r in rows])
        panel.set_xlabel(second)
        panel.set_ylabel(first)
        panel.set_title(title, fontsize=10)
        for (r, c), value in np.ndenumerate(table):
            # Black on light cells, white on dark ones (a colour's luminance, as the eye weighs it).
            red, green, blue, _ = colours(scale(value)) if np.isfinite(value) else (1, 1, 1, 1)
            dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
            ink = "white" if dark else "black"
            if shares is not None and shares[r, c] > 0:
                hatch = "//" if shares[r, c] >= 1 else ".."
                hatched.add(hatch)
                panel.add_patch(
                    Rectangle(
                        (c - 0.5, r - 0.5),
                        1,
                        1,
                        fill=False,
                        hatch=hatch,
                        linewidth=0,
                        edgecolor=(*matplotlib.colors.to_rgb(ink), 0.45),
                    )
                )
            panel.text(
                c,
                r,
                number.format(value),
                ha="center",
                va="center",
                fontsize=8,
                color=ink,
                bbox={"boxstyle": "round,pad=0.15", "linewidth": 0, "facecolor": (red, green, blue, 0.85)}
                if shares is not None
                else None,
            )
    fig.colorbar(image, ax=panels[0].tolist(), label=label)
    legend = {"//": "held out: outside the physics the run trained on", "..": "held out by some of the seeds"}
    if hatched:
        fig.legend(
            handles=[
                Patch(facecolor="none", edgecolor="grey", hatch=h, label=legend[h]) for h in legend if h in hatched
            ],
            loc="outside lower center",
            ncols=2,
            fontsize=8,
            frameon=False,
        )
    fig.savefig(path, dpi=110)
    plt.close(fig)
