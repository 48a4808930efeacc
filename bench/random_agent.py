"""Raw score and length of a uniformly random agent, through the training env pipeline: the reference a
trained agent must beat.

    python -m bench.random_agent --env-name BreakoutNoFrameskip-v4 --episodes 30
"""

from __future__ import annotations

import argparse
from typing import Any, Optional

import gymnasium as gym
import numpy as np

from bench import positive
from envs import VEC_ENV_CHOICES, make_vec_env
from evaluate import EvalResult, episode_shares
from utils import UsageError


def random_actions(space: gym.Space, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Uniformly random actions of ``space`` in an array of ``size`` (a ``Box``'s between its bounds)."""
    if isinstance(space, gym.spaces.Discrete):
        return space.start + rng.integers(space.n, size=size)
    return rng.uniform(space.low, space.high, size=(*size, *space.shape)).astype(space.dtype)


def play_random(envs: Any, episodes: int, rng: np.random.Generator) -> EvalResult:
    """``episodes`` whole episodes of random actions, each env its fixed share (no bias to short games)."""
    targets, played, result = episode_shares(episodes, envs.num_envs), [0] * envs.num_envs, EvalResult()
    envs.reset()
    while any(p < t for p, t in zip(played, targets)):
        _, _, _, infos = envs.step(random_actions(envs.action_space, rng, (envs.num_envs,)))
        for i, info in enumerate(infos):
            if "episode" in info and played[i] < targets[i]:
                result.scores.append(float(info["episode"]["r"]))
                result.lengths.append(int(info["episode"].get("l", 0)))
                played[i] += 1
    return result


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-name", default="BreakoutNoFrameskip-v4")
    p.add_argument("--episodes", type=positive, default=30)
    p.add_argument("--num-envs", type=positive, default=8)
    p.add_argument("--seed", type=int, default=0)
    path = "env path (SB3's wrappers press FIRE after every lost life; on ale the agent must)"
    p.add_argument("--vec-env", choices=VEC_ENV_CHOICES, default="ale", help=path)
    args = p.parse_args(argv)
    try:
        envs = make_vec_env(args.env_name, args.num_envs, seed=args.seed, vec_env=args.vec_env)
    except UsageError as exc:
        p.error(str(exc))
    try:
        result = play_random(envs, args.episodes, np.random.default_rng(args.seed))
    finally:
        envs.close()
    scores = result.scores
    print(f"{args.env_name}, random agent, --vec-env {args.vec_env}, {len(scores)} episodes")
    print(f"score:  mean {np.mean(scores):.2f}  std {np.std(scores):.2f}  min {min(scores):g}  max {max(scores):g}")
    print(f"length (emulator frames): mean {np.mean(result.lengths):.0f}  std {np.std(result.lengths):.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
