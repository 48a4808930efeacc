"""A sparse-reward image task: a textured corridor whose only reward sits at the far end.

The corridor is a line of ``length`` cells, cell 0 (the start) to cell ``length - 1`` (the goal).
Each cell has a wall texture of its own (a column of 7 grey blocks drawn once, from a fixed seed,
so the level is the same in every env and episode, like a game level). The observation is the
agent's view, side-scrolling as in a platform game: a ``uint8`` frame ``[1, 42, 42]`` showing the
7 cells around the agent (3 behind, its own, 3 ahead), 6 pixels a cell, with the agent drawn as a
bright block in the middle column. Beyond the ends lies a uniform dark wall; the goal cell is a
solid light-grey column, visible from 3 cells away. Every position gives its own frame.

Actions: ``1 = forward`` (one cell towards the goal) and ``0 = back``. With ``back_to_start``
(the default) "back" drops the agent all the way to the start, like letting go of a ladder, so
reaching the goal takes ``length - 1`` forward moves in a row; without it "back" is one cell
back (a plain corridor; at the start it stays). Reaching the goal gives ``+1`` and terminates
the episode; every other step gives 0; after ``max_steps`` steps the episode is truncated (a time
limit). ``info["success"]`` is set on the last step of every episode, ``info["position"]`` on every
step.

A uniformly random policy almost never gets there: with ``back_to_start`` it needs ``length - 1``
heads in a row within the time limit (about ``2**-(length - 1)`` per try); the exact chance for
either variant is :func:`random_success_probability`.

Why textures and a scrolling view: a curiosity module rewards transitions its forward model
cannot yet predict. Moving forward at the frontier of what the agent has seen scrolls a never-
seen texture column into view, which no model can predict before visiting it, while transitions
it has made many times become predictable. (If the frame only showed a block moving over a
blank grid, a forward model would predict unseen cells as well as seen ones and curiosity would
carry no sense of novelty.)

Frames are 42x42, the size at which the project's conv encoder (4 stride-2 convs) reaches its
3x3 grid without pooling.
"""
from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecFrameStack

SIZE = 42
CELL = 6                      # pixels per corridor cell across the frame
VIEW = SIZE // CELL           # 7 cells in view: the agent's and 3 on each side
AGENT_ROWS = slice(18, 24)    # where the agent is drawn, in the middle column of the view
AGENT, GOAL, OUTSIDE = 255, 200, 24
SHADES = (0, 72, 144)         # the grey levels of the cells' wall textures
BACK, FORWARD = 0, 1
LAYOUT_SEED = 2017            # the level: one fixed texture, the same in every env and episode


def move(position: int, action: int, length: int, back_to_start: bool = True) -> int:
    """The dynamics: one cell forward, or back (to the start, or one cell, never before it)."""
    if action == FORWARD:
        return min(position + 1, length - 1)
    return 0 if back_to_start else max(position - 1, 0)


def level_strip(length: int, layout_seed: int = LAYOUT_SEED) -> np.ndarray:
    """The whole level as one image ``[SIZE, (length + VIEW - 1) * CELL]``, padded by ``VIEW // 2`` cells each side.

    Every cell is a column of 7 blocks of 6x6 pixels, each a grey drawn from ``SHADES``; the goal
    cell is solid ``GOAL``; beyond both ends lies a uniform ``OUTSIDE`` wall.
    """
    rng = np.random.default_rng(layout_seed)
    pad = VIEW // 2
    blocks = np.full((SIZE // CELL, length + 2 * pad), OUTSIDE, dtype=np.uint8)
    blocks[:, pad:pad + length] = rng.choice(np.asarray(SHADES, dtype=np.uint8), size=(SIZE // CELL, length))
    blocks[:, pad + length - 1] = GOAL
    return np.kron(blocks, np.ones((CELL, CELL), dtype=np.uint8))


class SparseCorridorEnv(gym.Env):
    """Walk a textured corridor of ``length`` cells to its far end within ``max_steps`` steps."""

    metadata = {"render_modes": []}

    def __init__(self, length: int = 25, max_steps: Optional[int] = None, back_to_start: bool = True) -> None:
        if length < 2:
            raise ValueError("length must be at least 2 (a start and a goal)")
        self.length, self.back_to_start = length, bool(back_to_start)
        self.max_steps = int(max_steps) if max_steps is not None else 2 * length
        if self.max_steps < length - 1:
            raise ValueError(f"max_steps {self.max_steps} is too short to ever reach the goal ({length - 1} moves)")
        self.observation_space = spaces.Box(0, AGENT, shape=(1, SIZE, SIZE), dtype=np.uint8)
        self.action_space = spaces.Discrete(2)
        self._strip = level_strip(length)
        self._position, self._t = 0, 0

    def frame(self, position: int) -> np.ndarray:
        """The observation with the agent at cell ``position``: the view centred on it."""
        frame = self._strip[None, :, position * CELL:position * CELL + SIZE].copy()
        centre = (VIEW // 2) * CELL
        frame[0, AGENT_ROWS, centre + 1:centre + CELL - 1] = AGENT
        return frame

    @property
    def position(self) -> int:
        return self._position

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._position, self._t = 0, 0
        return self.frame(0), {"position": 0}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._position = move(self._position, int(action), self.length, self.back_to_start)
        self._t += 1
        terminated = self._position == self.length - 1
        truncated = not terminated and self._t >= self.max_steps
        info: dict[str, Any] = {"position": self._position}
        if terminated or truncated:
            info["success"] = terminated
        return self.frame(self._position), (1.0 if terminated else 0.0), terminated, truncated, info


def random_success_probability(length: int, max_steps: int, p_forward: float = 0.5,
                               back_to_start: bool = True) -> float:
    """Exact chance that a policy moving forward with probability ``p_forward`` reaches the goal in time.

    Dynamic programming over the distribution of positions, with the env's own :func:`move`.
    """
    dist = np.zeros(length)
    dist[0] = 1.0
    reached = 0.0
    for _ in range(max_steps):
        new = np.zeros(length)
        for position in range(length - 1):
            new[move(position, FORWARD, length, back_to_start)] += p_forward * dist[position]
            new[move(position, BACK, length, back_to_start)] += (1.0 - p_forward) * dist[position]
        reached += new[length - 1]
        new[length - 1] = 0.0
        dist = new
    return float(reached)


def make_corridor_vec_env(num_envs: int, seed: int, length: int = 25, max_steps: Optional[int] = None,
                          n_stack: int = 1, back_to_start: bool = True) -> VecEnv:
    """``num_envs`` monitored corridors, frame-stacked channel-first: observations ``[num_envs, n_stack, 42, 42]``.

    The same wrapper kinds as the Atari pipeline (Monitor per env, DummyVecEnv, VecFrameStack);
    env i is seeded with ``seed + i`` on the first reset. The Monitor copies ``success`` into
    ``info["episode"]``.
    """
    venv = DummyVecEnv([lambda: Monitor(SparseCorridorEnv(length, max_steps, back_to_start), info_keywords=("success",))
                        for _ in range(num_envs)])
    venv.seed(seed)
    return VecFrameStack(venv, n_stack=n_stack, channels_order="first")
