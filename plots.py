"""Compare training runs in one PNG, read from their TensorBoard event files.

``plot_runs(["runs/a", "runs/b"], "compare.png")`` draws a grid of panels (episode return,
entropy, value loss, policy loss, explained variance, gradient norm), each run overlaid in its own
colour, against the env-step count that `runner.Runner` logs every scalar at.

A run directory may hold several event files: a resumed run (``main.py --resume``) opens a new
one. `load_scalars` merges them the way TensorBoard shows them: a newer file that starts with a
restart marker (``SummaryWriter(purge_step=S)``) hides the older files' points at steps ``>= S``,
and where the same step of a tag is in several files the newest file's value is kept.

Drawing uses matplotlib's ``Figure`` with the Agg renderer directly (no pyplot, so no window and
no global figure state); the PNG is written atomically.
"""

from __future__ import annotations

import glob
import math
import os
import textwrap
from typing import NamedTuple, Optional

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto.event_pb2 import SessionLog

from utils import UsageError, atomic_write

EVENT_FILE_PATTERN = "events.out.tfevents.*"

# Keep every scalar; of the other kinds keep only one item per tag (they are not plotted).
SIZE_GUIDANCE = {
    event_accumulator.SCALARS: 0,
    event_accumulator.TENSORS: 1,
    event_accumulator.HISTOGRAMS: 1,
    event_accumulator.COMPRESSED_HISTOGRAMS: 1,
    event_accumulator.IMAGES: 1,
    event_accumulator.AUDIO: 1,
}

# Figure geometry: each panel is PANEL_WIDTH x PANEL_HEIGHT inches, plus HEADER_HEIGHT for the
# title and legend; at DPI dots per inch, a 2 x 3 grid is 1500 x 800 pixels.
PANEL_WIDTH, PANEL_HEIGHT, HEADER_HEIGHT = 5.0, 3.5, 1.0
MAX_COLUMNS = 3
DPI = 100


class Panel(NamedTuple):
    """One plotted quantity: its title, the TensorBoard tag it reads, its y-axis label and, where
    the scale is known, fixed y-axis limits (points outside them are out of view)."""

    title: str
    tag: str
    ylabel: str
    ylim: Optional[tuple[float, float]] = None


RETURN_PANEL = Panel("episode return", "episode/return", "raw game score")
PANELS = (
    RETURN_PANEL,
    Panel("entropy", "loss/entropy", "mean policy entropy (nats)"),
    Panel("value loss", "loss/value", "mean (R - V)^2"),
    Panel("policy loss", "loss/policy", "policy loss"),
    # At most 1; early rollouts can reach -1000, which would flatten every later point: view [-1, 1].
    Panel("explained variance", "train/explained_variance", "1 - Var(R - V) / Var(R), view [-1, 1]", (-1.05, 1.05)),
    Panel("gradient norm", "train/grad_norm", "norm before clipping"),
)


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """The mean of the last ``window`` values at each point, as float64, same length as ``values``.

    The first ``window - 1`` points average what there is so far:
    ``moving_average([1, 2, 3, 4], 2) == [1, 1.5, 2.5, 3.5]``.
    """
    if window < 1:
        raise ValueError(f"moving-average window must be at least 1, got {window}")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"moving_average takes a 1-D array, got shape {values.shape}")
    sums = np.concatenate(([0.0], np.cumsum(values)))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def load_scalars(run_dir: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every scalar of a run: ``tag -> (steps, values)``, both sorted by step (int64, float64).

    Reads all ``events.out.tfevents.*`` files directly in ``run_dir``, oldest first (by the time of
    their first event), and merges them: a file that starts with a restart marker at step ``S``
    (written by ``SummaryWriter(purge_step=S)`` on resume) drops the older files' points at steps
    ``>= S`` for every tag, and a step logged more than once for a tag keeps the newest value.

    Raises ``ValueError`` if ``run_dir`` is not a directory or holds no event files.
    """
    if not os.path.isdir(run_dir):
        what = "is not a directory" if os.path.exists(run_dir) else "not found"
        raise ValueError(f"run directory {what}: {run_dir}")
    paths = glob.glob(os.path.join(glob.escape(run_dir), EVENT_FILE_PATTERN))  # the name is no pattern
    if not paths:
        raise ValueError(f"no TensorBoard event files ({EVENT_FILE_PATTERN}) in {run_dir}{_subdir_hint(run_dir)}")

    files = []
    for path in paths:
        accumulator = event_accumulator.EventAccumulator(path, size_guidance=SIZE_GUIDANCE)
        accumulator.Reload()
        try:
            first_time = accumulator.FirstEventTimestamp()
        except ValueError:  # an empty file (a writer killed before its first flush): nothing to merge
            continue
        files.append((first_time, path, accumulator))
    files.sort(key=lambda f: (f[0], f[1]))

    merged: dict[str, dict[int, float]] = {}
    for _, path, accumulator in files:
        restart = _restart_step(path)
        if restart is not None:
            for points in merged.values():
                for step in [s for s in points if s >= restart]:
                    del points[step]
        for tag in accumulator.Tags()[event_accumulator.SCALARS]:
            points = merged.setdefault(tag, {})
            for event in accumulator.Scalars(tag):
                points[event.step] = event.value
    scalars = {}
    for tag, points in merged.items():
        if points:
            steps = np.array(sorted(points), dtype=np.int64)
            scalars[tag] = (steps, np.array([points[s] for s in steps], dtype=np.float64))
    return scalars


def _restart_step(path: str) -> Optional[int]:
    """The step of the restart marker (``SessionLog.START``) an event file opens with, if any.

    ``SummaryWriter(purge_step=S)`` writes it right after the file-version event, before any
    summary, so only the file's first events are read.
    """
    for event in EventFileLoader(path).Load():
        if event.HasField("session_log") and event.session_log.status == SessionLog.START:
            return event.step
        if event.HasField("summary"):
            return None
    return None


def _subdir_hint(directory: str) -> str:
    """A hint for when a log directory (holding run directories) was given instead of a run directory."""
    pattern = os.path.join(glob.escape(directory), "*", EVENT_FILE_PATTERN)
    inner = sorted({os.path.dirname(p) for p in glob.glob(pattern)})
    if not inner:
        return ""
    return f"; it holds {len(inner)} run director{'y' if len(inner) == 1 else 'ies'} (e.g. {inner[0]}): pass those"


def run_labels(run_dirs: list[str]) -> list[str]:
    """Legend labels: each directory's base name, lengthened to ``parent/name`` (and further up the
    path) only where two runs would otherwise share a label.

    Raises ``ValueError`` if the same directory is given twice.
    """
    parts = [os.path.abspath(d).split(os.sep) for d in run_dirs]
    seen: dict[tuple[str, ...], str] = {}
    for d, p in zip(run_dirs, parts):
        key = tuple(p)
        if key in seen:
            raise ValueError(f"the same run directory is given twice: {seen[key]} and {d}")
        seen[key] = d
    depth = [1] * len(run_dirs)
    while True:
        labels = ["/".join(p[-k:]) for p, k in zip(parts, depth)]
        clashing = [i for i, label in enumerate(labels) if labels.count(label) > 1]
        if not clashing:
            return labels
        for i in clashing:
            depth[i] += 1


def plot_runs(
    run_dirs: list[str], out_path: str, labels: Optional[list[str]] = None, smoothing: int = 100
) -> list[str]:
    """Draw one PNG at ``out_path`` comparing the runs in ``run_dirs``; return the panel titles drawn.

    One panel per quantity of `PANELS` that at least one run logged (the others are left out), in
    a grid of up to three columns, every run in its own colour; the x axis is env steps. The
    episode-return panel shows each episode's raw return thin and translucent, and its mean over
    the last ``smoothing`` episodes solid. ``labels`` name the runs in the legend and the figure
    title (default: `run_labels`). The output's directory is created if missing, and the file is
    replaced atomically.

    Raises ``ValueError`` for no runs, a bad ``labels`` length or ``smoothing``, a run that
    `load_scalars` cannot read, or runs that logged none of the plotted tags.
    """
    if not run_dirs:
        raise ValueError("no run directories to plot")
    if labels is None:
        labels = run_labels(run_dirs)
    elif len(labels) != len(run_dirs):
        raise ValueError(f"{len(labels)} labels for {len(run_dirs)} run directories")
    if smoothing < 1:
        raise ValueError(f"smoothing must be at least 1 episode, got {smoothing}")

    runs = [load_scalars(d) for d in run_dirs]
    panels = [p for p in PANELS if any(p.tag in run for run in runs)]
    if not panels:
        raise ValueError(f"none of the runs logged any of the plotted tags ({', '.join(p.tag for p in PANELS)})")
    colours = run_colours(len(run_dirs))

    columns = min(MAX_COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig = Figure(figsize=(columns * PANEL_WIDTH, rows * PANEL_HEIGHT + HEADER_HEIGHT), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, panel in zip(axes, panels):
        for run, colour in zip(runs, colours):
            if panel.tag not in run:
                continue
            steps, values = run[panel.tag]
            marker = "o" if len(steps) == 1 else None  # a lone point draws no line
            if panel is RETURN_PANEL:
                ax.plot(steps, values, color=colour, linewidth=0.6, alpha=0.3, marker=marker)
                ax.plot(steps, moving_average(values, smoothing), color=colour, linewidth=1.8, marker=marker)
            else:
                ax.plot(steps, values, color=colour, linewidth=1.2, marker=marker)
        ax.set_title(panel.title)
        ax.set_xlabel("env steps")
        ax.set_ylabel(panel.ylabel)
        if panel.ylim is not None:
            ax.set_ylim(panel.ylim)
        if panel is RETURN_PANEL:
            key = [Line2D([], [], color="grey", linewidth=0.6, alpha=0.5), Line2D([], [], color="grey", linewidth=1.8)]
            ax.legend(key, ["each episode", f"mean of last {smoothing}"], fontsize="small")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)

    fig.suptitle(textwrap.fill("Training runs: " + ", ".join(labels), width=int(columns * PANEL_WIDTH * 10)))
    handles = [Line2D([], [], color=c, linewidth=1.8) for c in colours]
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 2 * columns), frameon=False)
    save_png(fig, out_path)
    return [p.title for p in panels]


def run_colours(count: int) -> list[tuple[float, ...]]:
    """``count`` distinct colours: matplotlib's tab10 for up to ten runs, else samples of turbo."""
    if count <= 10:
        return list(matplotlib.colormaps["tab10"].colors[:count])
    return [tuple(c) for c in matplotlib.colormaps["turbo"](np.linspace(0.0, 1.0, count))]


def save_png(fig: Figure, path: str) -> None:
    """Render ``fig`` as PNG onto ``path`` all or nothing (see `utils.atomic_write`); the directory is created if missing."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=DPI))


def plot_command(run_dirs: list[str], out: str) -> int:
    """Draw the runs' TensorBoard curves side by side into ``out``."""

    try:
        panels = plot_runs(run_dirs, out)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}: {', '.join(panels)} of {len(run_dirs)} run(s)")
    return 0
