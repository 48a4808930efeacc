"""How an Atari agent's score holds up when the emulator stops being predictable: its games played
across sticky actions (the probability that a frame repeats the previous action, Machado et al.
2018) and no-op starts (up to 30 random no-ops before the agent's first action), one cell each.

An agent that learned to play scores about the same across a row; one that memorized the timing
of a deterministic emulator falls as the stickiness rises. ``python main.py --eval --load AGENT
--robustness`` plays the cells (``play.play_robustness``); this module holds the grid, its table
and its figure.
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np

from envs import MACHADO_MAX_FRAMES, Protocol
from utils import UsageError, read_json

STICKINESS = (0.0, 0.05, 0.1, 0.25, 0.5)
NOOP_MAXES = (0, 30)  # none, and the classic protocol's up to 30


def cell_protocols(stickiness: Sequence[float] = STICKINESS, noop_maxes: Sequence[int] = NOOP_MAXES) -> list[Protocol]:
    """The grid's cells, as evaluation protocols: every stickiness with every no-op start, games
    capped at 108,000 emulator frames (the machado protocol's cap, and the ids' own)."""
    return [
        Protocol(repeat_action_probability=float(p), noop_max=int(n), max_episode_frames=MACHADO_MAX_FRAMES)
        for n in noop_maxes
        for p in stickiness
    ]


def cell_summary(protocol: Protocol, scores: Sequence[float], lengths: Sequence[int]) -> dict[str, Any]:
    """One cell of the JSON: its settings, its scores, their mean, population std and the standard
    error of the mean (std / sqrt(n - 1), NaN with fewer than two games)."""
    values = np.asarray(scores, dtype=np.float64)
    n = len(values)
    std = float(values.std()) if n else math.nan
    return {
        "sticky_actions": protocol.repeat_action_probability,
        "noop_max": protocol.noop_max,
        "episodes": n,
        "mean": float(values.mean()) if n else math.nan,
        "std": std,
        "stderr": std / math.sqrt(n - 1) if n > 1 else math.nan,
        "scores": [float(s) for s in scores],
        "lengths": [int(x) for x in lengths],
    }


def noop_label(noop_max: int) -> str:
    return "no no-op starts" if noop_max == 0 else f"up to {noop_max} no-op starts"


def table(result: dict[str, Any]) -> str:
    """The cells as a text table: a row for each stickiness, a column for each no-op start, each
    cell its mean ± standard error over its games."""
    cells = result["cells"]
    stickiness = sorted({c["sticky_actions"] for c in cells})
    noops = sorted({c["noop_max"] for c in cells})
    by_key = {(c["sticky_actions"], c["noop_max"]): c for c in cells}
    header = ["sticky actions", *(noop_label(n) for n in noops)]
    rows = [
        [f"{p:g}", *(f"{by_key[p, n]['mean']:.2f} ± {by_key[p, n]['stderr']:.2f}" for n in noops)] for p in stickiness
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(text.rjust(width) for text, width in zip(row, widths)) for row in [header, *rows]]
    return "\n".join(lines)


def draw(results: Sequence[dict[str, Any]], labels: Sequence[str], path: str) -> None:
    """One image: score against stickiness, a panel for each game, in it a line for each agent
    (colour) and no-op start (solid: none; dashed: up to 30), its standard error as a band."""
    from matplotlib.figure import Figure

    from envs import game_of
    from plots import run_colours, save_png

    games = list(dict.fromkeys(game_of(result["env_name"]) for result in results))
    fig = Figure(figsize=(4.2 * len(games), 4.2))
    axes = fig.subplots(1, len(games), squeeze=False)[0]
    styles = ["-", "--", ":", "-."]
    for ax, game in zip(axes, games):
        for colour, label, result in zip(run_colours(len(results)), labels, results):
            if game_of(result["env_name"]) != game:
                continue
            noops = sorted({c["noop_max"] for c in result["cells"]})
            for style, noop in zip(styles, noops):
                cells = sorted((c for c in result["cells"] if c["noop_max"] == noop), key=lambda c: c["sticky_actions"])
                x = np.array([c["sticky_actions"] for c in cells])
                mean = np.array([c["mean"] for c in cells])
                err = np.nan_to_num(np.array([c["stderr"] for c in cells]))
                ax.plot(x, mean, style, color=colour, marker="o", markersize=3, label=f"{label}, {noop_label(noop)}")
                ax.fill_between(x, mean - err, mean + err, color=colour, alpha=0.12, linewidth=0)
        ax.set_title(game)
        ax.set_xlabel("sticky actions")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    axes[0].set_ylabel("score (mean of whole games)")
    fig.tight_layout()
    save_png(fig, path)


def is_robustness_json(path: str) -> bool:
    """Whether ``path`` reads as the JSON of ``--eval --robustness`` (False where it cannot be read)."""
    try:
        return isinstance(read_json(path).get("cells"), list)
    except (UsageError, AttributeError):
        return False


def plot_robustness(paths: list[str], out: str) -> int:
    """Draw the robustness curves written by ``--eval --robustness`` (JSON files) into one image,
    each agent labelled with its file's name."""
    results = []
    for path in paths:
        result = read_json(path)
        cells = result.get("cells") if isinstance(result, dict) else None
        if not cells or not all(isinstance(cell, dict) and "sticky_actions" in cell for cell in cells):
            raise UsageError(f"{path} is not the JSON of --eval --robustness (give run directories or only such files)")
        results.append(result)
    labels = [os.path.basename(path).removesuffix(".json").removesuffix("_robustness") for path in paths]
    try:
        draw(results, labels, out)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}: score against sticky actions of {len(results)} agent(s)")
    return 0
