"""Evaluate a saved agent: whole games under a fixed protocol, raw scores, optional videos.

Two evaluation protocols build the envs (`envs.make_eval_envs`) on the env path the agent was trained
on: ale-py's C++ vector env (``--vec-env ale``, the default) with the protocol's emulator settings,
or SB3's Atari wrappers, whose per-game envs also record videos (``--video`` always plays there)::

    gym.make(id) -> [GameRecorder] -> Monitor -> AtariWrapper -> DummyVecEnv -> frame stack -> [C, H, W]

Other envs (flat vector observations) play as they trained, in gymnasium's vector env, which
records their rendered frames with ``--video`` (in one process)::

    gym.make(id, render_mode="rgb_array") -> [GameRecorder] -> RecordEpisodeStatistics -> GymVecEnv (sync)

- ``classic``, the NoFrameskip-v4 protocol: up to 30 no-op starts, no sticky actions, the minimal
  action set (and the id's own ALE frame limit, 108,000 frames for the registered Atari ids).
- ``machado``, Machado et al. 2018 ("Revisiting the ALE"): sticky actions with probability 0.25
  (in the emulator, per frame), no no-op starts, games capped at 108,000 emulator frames, the
  full action set optionally.

Scores are raw full-game scores over all lives (the Monitor sits under the Atari wrappers; the
C++ path reports the same);
the agent still sees a lost life as the end of its episode, and its memory is reset there,
as in training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv

from envs import make_eval_envs
from model import ActorCritic
from normalize import copy_obs_stats, normalized
from utils import atomic_write


# ------------------------------------------------------------------------------------------------ results
@dataclass
class EvalResult:
    """Raw full-game scores and lengths (emulator frames) of the evaluated episodes.

    ``std`` is the population standard deviation (``ddof=0``, numpy's default). The statistics
    of an empty result are NaN.
    """

    scores: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    def _stat(self, fn) -> float:
        return float(fn(np.asarray(self.scores, dtype=np.float64))) if self.scores else float("nan")

    @property
    def mean(self) -> float:
        return self._stat(np.mean)

    @property
    def std(self) -> float:
        return self._stat(np.std)

    @property
    def median(self) -> float:
        return self._stat(np.median)

    @property
    def min(self) -> float:
        return self._stat(np.min)

    @property
    def max(self) -> float:
        return self._stat(np.max)

    def to_dict(self) -> dict[str, Any]:
        return {
            "episodes": len(self.scores),
            "mean": self.mean,
            "std": self.std,
            "median": self.median,
            "min": self.min,
            "max": self.max,
            "scores": [float(s) for s in self.scores],
            "lengths": [int(n) for n in self.lengths],
        }


def episode_shares(episodes: int, num_envs: int) -> list[int]:
    """Episodes each env plays: env i plays ``(episodes + i) // num_envs`` (they sum to ``episodes``)."""
    return [(episodes + i) // num_envs for i in range(num_envs)]


@torch.no_grad()
def evaluate(
    model: ActorCritic,
    envs: VecEnv,
    episodes: int,
    deterministic: bool = False,
    generator: Optional[torch.Generator] = None,
) -> EvalResult:
    """Play ``episodes`` whole games; return their raw scores and lengths.

    Actions are sampled from the policy, or with ``deterministic=True`` the most probable action
    (argmax of the logits, or a Gaussian policy's mean) is taken. Each env plays a fixed share of the episodes (see
    `episode_shares`), so short games are not over-counted by envs that happen to finish first;
    the envs step together as one vector. Scores and lengths come from the Monitor under the
    Atari wrappers (``info["episode"]``): unclipped, all lives, lengths in emulator frames. The
    recurrent state is reset where the agent's episode ends (``dones``, a lost life included).
    Sampling draws from ``generator`` when given (else torch's global one).
    """
    device = next(model.parameters()).device
    n = envs.num_envs
    targets = episode_shares(episodes, n)
    played = [0] * n
    result = EvalResult()
    obs = torch.as_tensor(envs.reset(), device=device)
    state = model.initial_state(n, device)
    episode_starts = torch.ones(n, device=device)
    with model.casting_once():  # a bfloat16 encoder casts its weights once, not at every step
        while any(p < t for p, t in zip(played, targets)):
            logits, _, state = model(obs, state, episode_starts)
            if deterministic:
                actions = model.mode(logits)
            elif model.continuous:  # the Gaussian's mean plus its spread times noise from the generator
                mean = model.mode(logits)
                actions = model.policy.sample_with(
                    logits, torch.randn(mean.shape, generator=generator, device=mean.device)
                )
            else:
                actions = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)
            obs_np, _, dones, infos = envs.step(actions.cpu().numpy())
            for i, info in enumerate(infos):
                if "episode" in info and played[i] < targets[i]:
                    result.scores.append(float(info["episode"]["r"]))
                    result.lengths.append(int(info["episode"].get("l", 0)))
                    played[i] += 1
            obs = torch.as_tensor(obs_np, device=device)
            episode_starts = torch.as_tensor(dones, dtype=torch.float32, device=device)
    return result


class PeriodicEvaluator:
    """Evaluation during training: plays the current network for ``episodes`` whole games on envs of
    its own (classic protocol, sampled actions, as in training), a new set of games each call.

    Its actions are drawn from a random generator of its own, so evaluating leaves training's
    random numbers, and so the training run itself, exactly as they would be without it.
    """

    def __init__(
        self,
        env_name: str,
        episodes: int,
        seed: int,
        n_stack: int = 4,
        frame_size: int = 84,
        num_envs: Optional[int] = None,
        max_episode_frames: Optional[int] = None,
        vec_env: str = "dummy",
        obs_stats_from: Optional[VecEnv] = None,
        observation_window: tuple[int, bool] = (1, False),
    ) -> None:
        self.episodes = episodes
        self.generator = torch.Generator().manual_seed(seed)
        self.envs = make_eval_envs(
            env_name,
            num_envs or min(episodes, 8),
            seed,
            "classic",
            n_stack,
            max_episode_frames=max_episode_frames,
            vec_env=vec_env,
            frame_size=frame_size,
            observation_window=observation_window,
        )
        # With --normalize-obs: the training envs, whose statistics each evaluation plays with, frozen.
        self.obs_stats_from = obs_stats_from
        self.envs = normalized(self.envs, obs_stats_from is not None, False, training=False)

    def __call__(self, model: ActorCritic) -> list[float]:
        if self.obs_stats_from is not None:
            copy_obs_stats(self.obs_stats_from, self.envs)
        device = next(model.parameters()).device
        if self.generator.device != device:  # the first call on a GPU: the same stream, on its device
            self.generator = torch.Generator(device).manual_seed(self.generator.initial_seed())
        return evaluate(model, self.envs, self.episodes, generator=self.generator).scores

    def close(self) -> None:
        self.envs.close()


def summarize(r: EvalResult) -> str:
    """One line: episode count, mean, std (population), median, min and max of the scores."""
    return (
        f"episodes: {len(r.scores)}  mean: {r.mean:.2f}  std: {r.std:.2f}  median: {r.median:.2f}  "
        f"min: {r.min:.2f}  max: {r.max:.2f}"
    )


def write_json(data: dict[str, Any], path: str) -> None:
    """Write ``data`` as indented JSON, atomically (see `utils.atomic_write`)."""
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=2) + "\n"), binary=False)
