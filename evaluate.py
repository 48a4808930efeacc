"""Play a saved agent for whole episodes and report raw game scores."""
from __future__ import annotations

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv
from torch.distributions import Categorical

from model import ActorCritic


@torch.no_grad()
def evaluate(model: ActorCritic, envs: VecEnv, episodes: int) -> list[float]:
    """Raw full-game scores of ``episodes`` episodes, played with actions sampled from the policy.

    Each env plays a fixed share of the episodes (env i plays ``(episodes + i) // num_envs``), so
    short episodes are not over-counted by envs that happen to finish first. Scores come from
    the Monitor under the Atari wrappers: unclipped, all lives.
    """
    device = next(model.parameters()).device
    n = envs.num_envs
    targets = [(episodes + i) // n for i in range(n)]
    played = [0] * n
    scores: list[float] = []
    obs = torch.as_tensor(envs.reset(), device=device)
    state = model.initial_state(n, device)
    episode_starts = torch.ones(n, device=device)
    while any(p < t for p, t in zip(played, targets)):
        logits, _, state = model(obs, state, episode_starts)
        actions = Categorical(logits=logits).sample()
        obs_np, _, dones, infos = envs.step(actions.cpu().numpy())
        for i, info in enumerate(infos):
            if "episode" in info and played[i] < targets[i]:
                scores.append(float(info["episode"]["r"]))
                played[i] += 1
        obs = torch.as_tensor(obs_np, device=device)
        episode_starts = torch.as_tensor(dones, dtype=torch.float32, device=device)
    return scores


def summarize(scores: list[float]) -> str:
    s = np.asarray(scores, dtype=np.float64)
    return (f"episodes: {len(s)}  mean: {s.mean():.2f}  std: {s.std():.2f}  "
            f"min: {s.min():.2f}  max: {s.max():.2f}")
