"""The fast environment path: ale-py's C++ vector env behind the stable-baselines3 ``VecEnv`` interface.

``AtariVectorEnv`` steps all games in C++ threads and does the preprocessing there (no-op
starts, frame skip 4 with max-pooling over the last two frames, fire on reset, grayscale resized
to 84x84 or ``frame_size``, frame stack). :class:`AleVecEnv` adds what the SB3 path gets from its wrappers, so the runner
cannot tell the two apart:

* rewards are clipped to their sign for learning, while ``info["episode"] = {"r", "l", "t"}``
  reports the raw, unclipped full-game score and length in emulator frames when a game ends
  (what SB3's ``Monitor`` reports under its Atari wrappers);
* a life loss ends the learning episode (``done``) without resetting the game; a game over
  resets it (the observation returned with that ``done`` is the new game's first one);
* a time limit sets ``info["TimeLimit.truncated"]`` and ``info["terminal_observation"]``.

Two differences from SB3's wrappers remain, both after a life loss that is not a game over:
SB3 resets its frame stack to zeros there and presses no-op then FIRE (its ``reset`` runs on
every ``done``), while here the stack goes on and the agent presses FIRE itself when it must.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices

from utils import UsageError


def frame_cap(game_cap: Optional[int], max_episode_frames: Optional[int]) -> Optional[int]:
    """The emulator frames a game may last: the smaller of the id's own cap and the time limit (None: no cap)."""
    caps = [int(cap) for cap in (game_cap, max_episode_frames) if cap]
    return min(caps) if caps else None


class CppVecEnv(VecEnv):
    """The attribute interface of ``VecEnv`` for envs that live in C++ and expose nothing per env."""

    render_mode = None  # nothing to render: the screens stay in C++

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [getattr(self, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise AttributeError(f"{type(self).__name__} has no per-env attributes to set")

    def env_method(self, method_name: str, *args: Any, indices: VecEnvIndices = None, **kwargs: Any) -> list[Any]:
        raise AttributeError(f"{type(self).__name__} cannot call {method_name!r} on its C++ envs")

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False] * len(self._get_indices(indices))

    def _get_indices(self, indices: VecEnvIndices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        return [indices] if isinstance(indices, int) else list(indices)


class AleVecEnv(CppVecEnv):
    """``num_envs`` copies of an Atari game from the gymnasium id ``env_name``; observations
    ``[N, n_stack, frame_size, frame_size]`` uint8 (84x84 by default).

    The id's own emulator settings are kept (sticky actions for ``ALE/...-v5`` ids, the action
    set, the 108,000-frame cap) unless ``repeat_action_probability`` or ``full_action_space`` say
    otherwise; up to ``noop_max`` no-ops start each game. ``max_episode_frames`` caps games sooner (a larger value leaves
    the id's cap, as on SB3's path, whose emulator keeps it under the time limit). Env i is seeded
    with ``seed + i`` at the first reset. ``num_threads=0`` lets ale-py choose (one per core).
    """

    def __init__(
        self,
        env_name: str,
        num_envs: int,
        n_stack: int = 4,
        seed: int = 0,
        max_episode_frames: Optional[int] = None,
        num_threads: int = 0,
        repeat_action_probability: Optional[float] = None,
        full_action_space: Optional[bool] = None,
        noop_max: int = 30,
        frame_size: int = 84,
    ) -> None:
        from ale_py.vector_env import AtariVectorEnv

        settings = gym.registry[env_name].kwargs
        if "game" not in settings:
            raise UsageError(f"'{env_name}' does not name an ALE game")
        self.env_name, self.seed_value = env_name, seed
        # The id's own emulator settings unless told otherwise (an evaluation protocol sets them).
        if repeat_action_probability is None:
            repeat_action_probability = settings.get("repeat_action_probability", 0.0)
        if full_action_space is None:
            full_action_space = settings.get("full_action_space", False)
        self.repeat_action_probability, self.full_action_space = repeat_action_probability, full_action_space
        self.noop_max = noop_max
        self.ale = AtariVectorEnv(
            settings["game"],
            num_envs,
            num_threads=num_threads,
            stack_num=n_stack,
            img_height=frame_size,
            img_width=frame_size,
            repeat_action_probability=repeat_action_probability,
            full_action_space=full_action_space,
            max_num_frames_per_episode=frame_cap(
                settings.get("max_num_frames_per_episode", 108_000), max_episode_frames
            ),
            noop_max=noop_max,
            frameskip=4,
            maxpool=True,
            use_fire_reset=True,
            episodic_life=False,  # would reset the whole game at every life loss
            life_loss_info=True,  # a life loss ends the learning episode; the game goes on
            reward_clipping=False,  # clipped here, so the raw score can be reported
            autoreset_mode="SameStep",
        )
        super().__init__(num_envs, self.ale.single_observation_space, self.ale.single_action_space)
        self._actions: Optional[np.ndarray] = None
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._game_start = np.zeros(num_envs, dtype=np.int64)  # frame_number at which each game began
        self._game_time = np.zeros(num_envs, dtype=np.float64)
        self._first_reset = True

    # ------------------------------------------------------------------ VecEnv
    def reset(self) -> np.ndarray:
        seed = self.seed_value if self._first_reset else None
        self._first_reset = False
        obs, info = self.ale.reset(seed=seed)
        self._returns[:] = 0.0
        self._game_start[:] = self._starts(info)
        self._game_time[:] = time.perf_counter()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        self.ale.send(self._actions)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        obs, rewards, terminated, truncated, info = self.ale.recv()
        raw = rewards.astype(np.float64)
        self._returns += raw
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            starts = self._starts(info)
            game_over = starts != self._game_start  # the game was reset: its frame origin moved
            now = time.perf_counter()
            for i in np.flatnonzero(dones):
                if truncated[i] and not terminated[i]:
                    infos[i]["TimeLimit.truncated"] = True
                    infos[i]["terminal_observation"] = info["final_obs"][i]
                if game_over[i]:
                    infos[i]["episode"] = {
                        "r": float(self._returns[i]),
                        "l": int(starts[i] - self._game_start[i]),
                        "t": round(now - self._game_time[i], 6),
                    }
                    self._returns[i] = 0.0
                    self._game_start[i] = starts[i]
                    self._game_time[i] = now
        return obs, np.sign(raw).astype(np.float32), dones, infos

    def close(self) -> None:
        self.ale.close()

    @staticmethod
    def _starts(info: dict[str, np.ndarray]) -> np.ndarray:
        return info["frame_number"].astype(np.int64) - info["episode_frame_number"].astype(np.int64)


class EnvGroups(CppVecEnv):
    """``groups`` vector envs of ``num_envs // groups`` games each, side by side as one vector env of
    ``num_envs``: ``make(n, first)`` builds the group of ``n`` games whose first is game ``first``.
    A collector can step the groups one by one (:meth:`send`, then :meth:`receive`): see overlap.py."""

    def __init__(self, make: Callable[[int, int], AleVecEnv], num_envs: int, groups: int) -> None:
        size = num_envs // groups
        self.groups = [make(size, g * size) for g in range(groups)]
        self.slices = [slice(g * size, (g + 1) * size) for g in range(groups)]
        first = self.groups[0]
        super().__init__(num_envs, first.observation_space, first.action_space)

    def reset(self) -> np.ndarray:
        return np.concatenate([group.reset() for group in self.groups])

    def send(self, g: int, actions: np.ndarray) -> None:
        """Start group ``g``'s step with its ``actions``; its games step in C++ threads until :meth:`receive`."""
        self.groups[g].step_async(actions)

    def receive(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Every group's step, as one vector env of all the games returns it."""
        results = [group.step_wait() for group in self.groups]
        obs, rewards, dones = (np.concatenate([r[k] for r in results]) for k in range(3))
        return obs, rewards, dones, [info for r in results for info in r[3]]

    def step_async(self, actions: np.ndarray) -> None:
        for g, part in enumerate(self.slices):
            self.send(g, np.asarray(actions)[part])

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        return self.receive()

    def close(self) -> None:
        for group in self.groups:
            group.close()
