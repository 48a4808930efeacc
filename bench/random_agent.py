"""Raw score and length of a uniformly random agent on an Atari game, through the training env pipeline.

The reference a trained (or purely curious) agent must beat:

    python bench/random_agent.py --env-name BreakoutNoFrameskip-v4 --episodes 30
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs import VEC_ENV_CHOICES, make_vec_env  # noqa: E402


def random_episodes(env_name: str, episodes: int, num_envs: int, seed: int,
                    vec_env: str = "ale") -> tuple[list[float], list[int]]:
    """Scores and lengths (emulator frames) of ``episodes`` full games played with uniform random actions."""
    envs = make_vec_env(env_name, num_envs, seed=seed, vec_env=vec_env)
    rng = np.random.default_rng(seed)
    envs.reset()
    scores: list[float] = []
    lengths: list[int] = []
    targets = [(episodes + i) // num_envs for i in range(num_envs)]  # a fixed share per env: no bias to short games
    played = [0] * num_envs
    while any(p < t for p, t in zip(played, targets)):
        _, _, _, infos = envs.step(rng.integers(envs.action_space.n, size=num_envs))
        for i, info in enumerate(infos):
            if "episode" in info and played[i] < targets[i]:
                scores.append(float(info["episode"]["r"]))
                lengths.append(int(info["episode"]["l"]))
                played[i] += 1
    envs.close()
    return scores, lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-name", default="BreakoutNoFrameskip-v4")
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vec-env", choices=VEC_ENV_CHOICES, default="ale",
                        help="env path (SB3's wrappers press FIRE after every lost life; on ale the agent must)")
    args = parser.parse_args()
    scores, lengths = random_episodes(args.env_name, args.episodes, args.num_envs, args.seed, args.vec_env)
    print(f"{args.env_name}, random agent, --vec-env {args.vec_env}, {len(scores)} episodes")
    print(f"score:  mean {np.mean(scores):.2f}  std {np.std(scores):.2f}  min {min(scores):g}  max {max(scores):g}")
    print(f"length (emulator frames): mean {np.mean(lengths):.0f}  std {np.std(lengths):.0f}")


if __name__ == "__main__":
    main()
