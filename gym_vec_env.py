"""Any gymnasium env with a flat ``Box`` observation, in gymnasium's own vector env, behind the
vector-env interface the runner speaks (stable-baselines3's ``VecEnv``: ``reset() -> obs``,
``step(actions) -> obs, rewards, dones, infos``).

Gymnasium 1.x vector envs reset a finished env on the *next* step by default, so the step after
an episode's end would hand the agent a transition from a terminal state into a reset, with a
reward and an action that belong to no episode. This adapter runs them in the same-step mode
(``AutoresetMode.SAME_STEP``), as SB3's envs and :class:`ale_vec_env.AleVecEnv` do: the step that
ends an episode returns the next episode's first observation with ``done = True``, and the
episode's last observation goes in ``infos[i]["terminal_observation"]``, with
``infos[i]["TimeLimit.truncated"]`` when a time limit (not the game) ended it, so the runner
bootstraps from the true final observation of a truncated episode and from nothing after a
terminal one. No fake transition reaches a rollout.

Each env is wrapped in ``RecordEpisodeStatistics``: the episode's raw return and length arrive in
``infos[i]["episode"]`` (``{"r", "l"}``) on the step it ends, as from SB3's ``Monitor``.

:class:`ObservationWindow` (``--obs-history``, ``--prev-action-reward``) lets a feed-forward policy see
more than the current observation: the ones before it, and what it did and got one step ago.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import RecordEpisodeStatistics
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices

from control import workers_ignore_stop_signals

VECTOR_MODES = ("sync", "async")  # gymnasium's SyncVectorEnv (one process) or AsyncVectorEnv (a process an env)


class ObservationWindow(gym.Wrapper):
    """The observation the policy sees: the last ``length`` observations of the episode, newest
    first (zeros before its first), and with ``actions_rewards`` the previous action (one-hot for
    ``Discrete`` actions, as sent for ``Box`` ones) and the previous raw reward (zeros at the
    episode's first step), all in one flat float32 vector. From these a feed-forward policy can
    tell how the env answers its actions (LunarLander's gravity and wind), which one observation
    does not show."""

    def __init__(self, env: gym.Env, length: int = 1, actions_rewards: bool = False) -> None:
        super().__init__(env)
        space, actions = env.observation_space, env.action_space
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
            raise ValueError(f"History needs a flat Box observation, got {space}")
        self.length, self.actions_rewards = int(length), bool(actions_rewards)
        self.discrete = isinstance(actions, gym.spaces.Discrete)
        action_size = int(actions.n) if self.discrete else int(np.prod(actions.shape))
        low, high = [np.tile(space.low, self.length)], [np.tile(space.high, self.length)]
        if self.actions_rewards:
            action_low = np.zeros(action_size) if self.discrete else np.ravel(actions.low)
            action_high = np.ones(action_size) if self.discrete else np.ravel(actions.high)
            low += [action_low, [-np.inf]]
            high += [action_high, [np.inf]]
        self.observation_space = gym.spaces.Box(
            np.concatenate(low).astype(np.float32), np.concatenate(high).astype(np.float32), dtype=np.float32
        )
        self.frames: deque[np.ndarray] = deque(maxlen=self.length)
        self.last = np.zeros(action_size + 1 if self.actions_rewards else 0, np.float32)

    def _observation(self) -> np.ndarray:
        return np.concatenate([*reversed(self.frames), self.last]).astype(np.float32)

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        zeros = np.zeros_like(obs, dtype=np.float32)
        self.frames.extend([zeros] * self.length)
        self.frames.append(np.asarray(obs, np.float32))
        self.last[:] = 0.0
        return self._observation(), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames.append(np.asarray(obs, np.float32))
        if self.actions_rewards:
            self.last[:] = 0.0
            if self.discrete:
                self.last[int(action)] = 1.0
            else:
                self.last[:-1] = np.ravel(action)
            self.last[-1] = reward
        return self._observation(), reward, terminated, truncated, info


def _make_env(
    env_id: str,
    kwargs: dict[str, Any],
    max_episode_steps: Optional[int],
    rank: int,
    wrap: Optional[Callable[[int, gym.Env], gym.Env]],
    observation_window: tuple[int, bool] = (1, False),
) -> gym.Env:
    extra = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    env = gym.make(env_id, **kwargs, **extra)
    env = env if wrap is None else wrap(rank, env)
    if observation_window != (1, False):
        env = ObservationWindow(env, *observation_window)
    return RecordEpisodeStatistics(env)


def _physics_of(info: dict[str, Any], i: int) -> dict[str, Any]:
    """``{"physics": {name: value}}`` of env i from a vector env's info (after a reset of env i,
    when its physics are randomized: see ``randomize.py``), or ``{}``."""
    physics = info.get("physics")
    if physics is None or not info.get("_physics", np.ones(i + 1, bool))[i]:
        return {}
    return {"physics": {name: values[i].item() for name, values in physics.items() if not name.startswith("_")}}


class GymVecEnv(VecEnv):
    """``num_envs`` copies of a gymnasium env; env i is seeded with ``seed + i`` at the first reset
    and built with ``env_kwargs[i]`` (per-env keyword arguments of ``gym.make``, e.g. physics).

    ``mode`` is ``sync`` (all envs in this process) or ``async`` (one worker process an env;
    the script that trains must then guard its entry point with ``if __name__ == "__main__":``).

    ``wrap``, when given, wraps each env under its ``RecordEpisodeStatistics``: env i is
    ``RecordEpisodeStatistics(wrap(i, gym.make(env_id, ...)))`` (e.g. ``video.GameRecorder``,
    which needs ``render_mode="rgb_array"`` in ``env_kwargs``; a wrapper that writes files is
    best run in ``sync`` mode). ``observation_window``: (observations, previous action and reward) that
    :class:`ObservationWindow` shows the policy; (1, False), the default, is the observation alone.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int = 0,
        mode: str = "sync",
        env_kwargs: Optional[Sequence[dict[str, Any]]] = None,
        max_episode_steps: Optional[int] = None,
        wrap: Optional[Callable[[int, gym.Env], gym.Env]] = None,
        observation_window: tuple[int, bool] = (1, False),
    ) -> None:
        if mode not in VECTOR_MODES:
            raise ValueError(f"unknown vector mode {mode!r} (one of {', '.join(VECTOR_MODES)})")
        kwargs = list(env_kwargs) if env_kwargs is not None else [{} for _ in range(num_envs)]
        if len(kwargs) != num_envs:
            raise ValueError(f"{len(kwargs)} sets of env kwargs for {num_envs} envs")
        makers: list[Callable[[], gym.Env]] = [
            (lambda i=i, k=k: _make_env(env_id, k, max_episode_steps, i, wrap, observation_window))
            for i, k in enumerate(kwargs)
        ]
        if mode == "sync":
            self.envs = gym.vector.SyncVectorEnv(makers, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        else:
            with workers_ignore_stop_signals():  # Ctrl+C stops the run, not its workers (see control.py)
                self.envs = gym.vector.AsyncVectorEnv(makers, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.seed_base, self.mode, self.env_id = seed, mode, env_id
        self._seeded = False
        self._next_seeds: Optional[list[int]] = None
        self._actions: Optional[np.ndarray] = None
        super().__init__(num_envs, self.envs.single_observation_space, self.envs.single_action_space)

    def set_reset_seeds(self, seeds: Sequence[int]) -> None:
        """The next :meth:`reset` seeds env i with ``seeds[i]`` (e.g. one seed for a whole group of
        envs, so that they start from the same state); later resets go on as before."""
        if len(seeds) != self.num_envs:
            raise ValueError(f"{len(seeds)} seeds for {self.num_envs} envs")
        self._next_seeds = [int(s) for s in seeds]

    def reset(self) -> np.ndarray:
        """First call: env i reset with seed ``seed + i``; later calls continue each env's own stream,
        unless :meth:`set_reset_seeds` gave the seeds of this one."""
        seeds = [self.seed_base + i for i in range(self.num_envs)] if not self._seeded else None
        seeds, self._next_seeds = self._next_seeds or seeds, None
        self._seeded = True
        obs, info = self.envs.reset(seed=seeds)
        self.reset_infos = [_physics_of(info, i) for i in range(self.num_envs)]
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Continuous actions are clipped to the action space's bounds here, on their way to the env
        (the agent keeps and learns from the actions it sampled)."""
        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            actions = np.clip(actions, space.low, space.high).astype(space.dtype)
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        obs, rewards, terminated, truncated, info = self.envs.step(self._actions)
        dones = np.logical_or(terminated, truncated)
        infos: list[dict] = [{} for _ in range(self.num_envs)]
        final_obs = info.get("final_obs")
        episode = info.get("final_info", {}).get("episode")
        for i in np.flatnonzero(dones):
            infos[i].update(_physics_of(info, i))  # the next episode's, with its first observation
            infos[i]["terminal_observation"] = final_obs[i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            if episode is not None and episode["_r"][i]:
                infos[i]["episode"] = {"r": float(episode["r"][i]), "l": int(episode["l"][i])}
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.envs.close()

    # The rest of SB3's VecEnv interface, for the few callers that use it.
    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        values = self.envs.get_attr(attr_name)
        return [values[i] for i in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise NotImplementedError("GymVecEnv does not set env attributes")

    def env_method(self, method_name: str, *args: Any, indices: VecEnvIndices = None, **kwargs: Any) -> list[Any]:
        results = self.envs.call(method_name, *args, **kwargs)
        return [results[i] for i in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [wrapper_class is RecordEpisodeStatistics] * len(self._get_indices(indices))

    def _get_indices(self, indices: VecEnvIndices) -> Sequence[int]:
        if indices is None:
            return range(self.num_envs)
        return [indices] if isinstance(indices, int) else list(indices)
