"""Several agents of one recipe, one a seed, as one figure with its uncertainty: what a result over
seeds should report (Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice").

    python main.py --eval --load RUN_SEED1/a2c_last --protocol machado --episodes 30 --json seed1.json
    ...
    python main.py --plot seed1.json seed2.json seed3.json --out pong_seeds.png

From the JSON files of ``--eval --json`` it prints each agent's mean and, over the agents:

* the mean of the agents' means;
* its 95% interval, a two-level percentile bootstrap: each resample draws the agents with
  replacement, then the games of each drawn agent with replacement, and takes the mean of those
  agents' means, so that the interval holds both the spread between seeds and that between games;
* the interquartile mean (IQM) of all their games: the mean of the middle half of the scores, a
  quarter cut from each end (``scipy.stats.trim_mean(scores, 0.25)``, as rliable computes it).

It draws every game's score by agent, each agent's mean, and the overall mean with its interval.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from utils import UsageError, read_json

RESAMPLES = 10_000
CONFIDENCE = 0.95


def iqm(scores: Sequence[float]) -> float:
    """The mean of the scores left when ``int(n / 4)`` are cut from each end of the sorted ``n``."""
    ordered = np.sort(np.asarray(scores, dtype=np.float64))
    cut = len(ordered) // 4
    return float(ordered[cut : len(ordered) - cut].mean())


def bootstrap_interval(
    games: Sequence[Sequence[float]], resamples: int = RESAMPLES, confidence: float = CONFIDENCE, seed: int = 0
) -> tuple[float, float]:
    """The percentile interval of the mean of agents' means (``games[i]``: agent i's scores), agents
    and then each drawn agent's games resampled with replacement; the same ``seed``, the same interval."""
    rng = np.random.default_rng(seed)
    # Each agent's mean in every resample of its games: [agents, resamples].
    means = np.stack(
        [np.asarray(g, dtype=np.float64)[rng.integers(len(g), size=(resamples, len(g)))].mean(axis=1) for g in games]
    )
    drawn = rng.integers(len(games), size=(resamples, len(games)))  # the agents of each resample
    overall = means[drawn, np.arange(resamples)[:, None]].mean(axis=1)
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(overall, [tail, 100 - tail])
    return float(low), float(high)


def summary(games: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The figures over agents (``games[i]``: agent i's scores): see the module's docstring."""
    low, high = bootstrap_interval(games)
    return {
        "agents": len(games),
        "games": sum(len(g) for g in games),
        "mean": float(np.mean([np.mean(g) for g in games])),
        "interval": [low, high],
        "confidence": CONFIDENCE,
        "iqm": iqm([s for g in games for s in g]),
    }


def read(path: str) -> dict[str, Any]:
    result = read_json(path)
    scores = result.get("scores") if isinstance(result, dict) else None
    if not scores or not all(isinstance(s, (int, float)) for s in scores):
        raise UsageError(f"{path} is not the JSON of --eval --json (it has no scores)")
    return result


def summarize_command(paths: list[str], out: str) -> int:
    """Print the agents' figures and their summary; draw them into ``out``."""
    results = [read(path) for path in paths]
    games = {(r.get("env_name"), r.get("protocol"), r.get("sticky_actions")) for r in results}
    if len(games) > 1:
        raise UsageError("the agents were played under different envs or protocols: " + "; ".join(map(str, games)))
    labels = [os.path.basename(path).removesuffix(".json") for path in paths]
    width = max(map(len, labels))
    for label, result in zip(labels, results):
        scores = np.asarray(result["scores"], dtype=np.float64)
        print(f"{label:<{width}}  {scores.mean():9.2f} over {len(scores)} games")
    figures = summary([r["scores"] for r in results])
    low, high = figures["interval"]
    print(
        f"over {figures['agents']} agents ({figures['games']} games): mean {figures['mean']:.2f}, "
        f"{figures['confidence']:.0%} bootstrap interval [{low:.2f}, {high:.2f}], IQM {figures['iqm']:.2f}"
    )
    try:
        draw(results, labels, figures, out)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}")
    return 0


def draw(results: Sequence[dict[str, Any]], labels: Sequence[str], figures: dict[str, Any], path: str) -> None:
    """Each agent's games (dots) and mean (bar); the overall mean (line) and its interval (band)."""
    from matplotlib.figure import Figure

    from plots import save_png

    fig = Figure(figsize=(1.2 + 0.9 * len(results), 4.0))
    ax = fig.subplots()
    rng = np.random.default_rng(0)  # the dots' jitter
    for i, result in enumerate(results):
        scores = np.asarray(result["scores"], dtype=np.float64)
        ax.scatter(i + rng.uniform(-0.2, 0.2, len(scores)), scores, s=8, alpha=0.5, color="tab:blue")
        ax.hlines(scores.mean(), i - 0.3, i + 0.3, color="black")
    ax.axhspan(*figures["interval"], color="tab:orange", alpha=0.2, linewidth=0)
    ax.axhline(figures["mean"], color="tab:orange", label=f"mean {figures['mean']:.2f}, 95% interval")
    ax.set_xticks(range(len(results)), labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("score (whole games)")
    ax.set_title(f"{results[0].get('env_name')}, {results[0].get('protocol')}", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_png(fig, path)
