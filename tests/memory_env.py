"""A tiny image-observation memory task, used to prove that the agent's LSTM is actually used.

Episode of ``length`` steps (observations ``o_0 .. o_{L-1}``, one action on each):

* ``o_0`` shows the **cue**: a bright block on the left or the right half of the frame, drawn
  at random at reset with the env's own ``np_random`` (so seeding the env fixes the sequence).
* ``o_1 .. o_{L-2}`` are **blank**: the same all-black frame whatever the cue was.
* ``o_{L-1}`` shows the **query** marker: a bright horizontal bar across the middle, symmetric
  left/right, so it says "answer now" and nothing about the cue.

Only the action taken on the query frame counts: ``+1`` if it names the cue (0 = left,
1 = right), ``-1`` otherwise; every other action gives 0. The episode then terminates.

With ``length > n_stack`` the frame stack at the query step holds ``o_{L-n_stack} .. o_{L-1}``:
blank frames and the query, never the cue. A feed-forward agent therefore sees exactly the
same input whichever side was cued and cannot beat chance (its success is Bernoulli(0.5)
whatever its policy); only a recurrent agent that carries the cue in its state for
``length - 1`` steps can. Frames are 42x42, the size at which the project's conv encoder
reaches its 3x3 grid without pooling.
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecFrameStack

SIZE = 42
BRIGHT = 255
LEFT, RIGHT = 0, 1


class MemoryEnv(gym.Env):
    """Remember a left/right cue seen only on the first frame; answer it on the last frame.

    ``info["cue"]`` is given at every step (for tests; the agent never sees ``info``), and
    ``info["success"]`` on the final step.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 8) -> None:
        if length < 2:
            raise ValueError("length must be at least 2 (a cue frame and a query frame)")
        self.length = length
        self.observation_space = spaces.Box(0, BRIGHT, shape=(1, SIZE, SIZE), dtype=np.uint8)
        self.action_space = spaces.Discrete(2)
        self._t = 0
        self._cue = LEFT

    # ------------------------------------------------------------------ frames
    @staticmethod
    def cue_frame(cue: int) -> np.ndarray:
        """Bright block filling most of the left (cue 0) or the right (cue 1) half."""
        frame = np.zeros((1, SIZE, SIZE), dtype=np.uint8)
        half = SIZE // 2
        cols = slice(3, half - 3) if cue == LEFT else slice(half + 3, SIZE - 3)
        frame[0, 6 : SIZE - 6, cols] = BRIGHT
        return frame

    @staticmethod
    def blank_frame() -> np.ndarray:
        return np.zeros((1, SIZE, SIZE), dtype=np.uint8)

    @staticmethod
    def query_frame() -> np.ndarray:
        """A full-width horizontal bar through the middle: unlike either cue, and left/right symmetric."""
        frame = np.zeros((1, SIZE, SIZE), dtype=np.uint8)
        frame[0, SIZE // 2 - 4 : SIZE // 2 + 4, :] = BRIGHT
        return frame

    def _observation(self) -> np.ndarray:
        if self._t == 0:
            return self.cue_frame(self._cue)
        if self._t == self.length - 1:
            return self.query_frame()
        return self.blank_frame()

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._cue = int(self.np_random.integers(2))
        return self._observation(), {"cue": self._cue}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        info: dict[str, Any] = {"cue": self._cue}
        if self._t == self.length - 1:  # the action on the query frame is the answer
            success = int(action) == self._cue
            info["success"] = success
            # The returned observation is never acted on (the episode is over); repeat the query.
            return self.query_frame(), (1.0 if success else -1.0), True, False, info
        self._t += 1
        return self._observation(), 0.0, False, False, info


def make_memory_vec_env(num_envs: int, seed: int, length: int = 8, n_stack: int = 4) -> VecEnv:
    """``num_envs`` monitored MemoryEnvs, frame-stacked: observations ``[num_envs, n_stack, 42, 42]`` uint8.

    The same wrapper kinds as the Atari pipeline (Monitor per env, DummyVecEnv, VecFrameStack),
    stacked channel-first because MemoryEnv is already ``[1, H, W]``. Env i is seeded with
    ``seed + i`` on the first reset. All envs reset together and every episode lasts exactly
    ``length`` steps, so with ``rollout_size = length`` every rollout is exactly one episode.
    """
    venv = DummyVecEnv([lambda: Monitor(MemoryEnv(length)) for _ in range(num_envs)])
    venv.seed(seed)
    return VecFrameStack(venv, n_stack=n_stack, channels_order="first")
