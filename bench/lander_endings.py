"""How a LunarLander agent's games end: at rest on the ground, hull on the ground (a crash), out of
the screen, or at the time limit, with how low it flew and how often it fired the main engine.

A mean return says how well an agent lands; this says what it does when it does not. Each
checkpoint plays ``--episodes`` games on the env seeds ``--seed``, ``--seed + 1``, ... (the same
games for every checkpoint), with sampled actions (``--deterministic``: the most likely), its
saved observation statistics applied when it was trained with ``--normalize-obs``:

    python bench/lander_endings.py RUN/a2c_best_reward RUN/a2c_last --episodes 10 --seed 1000

It prints one line per game and one summary line per checkpoint. The ends are the env's own:
``rest`` (the lander fell asleep: +100), ``crash`` (the hull touched the ground: -100), ``off
screen`` (|x| >= 1: -100), ``time limit`` (1,000 steps).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MAIN_ENGINE = 2  # LunarLander-v3's discrete actions: noop, left engine, main engine, right engine


def ending(env, terminated: bool, x: float) -> str:
    """The env's reason for the end of a game (see the module's docstring)."""
    if not terminated:
        return "time limit"
    if abs(x) >= 1.0:
        return "off screen"
    return "rest" if not env.unwrapped.lander.awake else "crash"


def play(path: str, episodes: int, seed: int, deterministic: bool) -> list[dict]:
    import gymnasium as gym
    from agent import load_model
    from checkpoints import load_checkpoint

    data = load_checkpoint(path)
    if data["env_name"] != "LunarLander-v3":
        raise ValueError(f"{path} was trained on {data['env_name']}, not LunarLander-v3")
    model = load_model(path)
    model.eval()
    stats = data.get("obs_normalizer")
    env = gym.make("LunarLander-v3")
    games = []
    for game in range(episodes):
        obs, _ = env.reset(seed=seed + game)
        total, steps, main, lowest = 0.0, 0, 0, float(obs[1])
        state = model.initial_state(1, "cpu")
        while True:
            x = obs
            if stats is not None:  # as the frozen normalizer of --eval does it
                x = np.clip((obs - stats["mean"].numpy()) / np.sqrt(stats["var"].numpy() + 1e-8), -10, 10)
            with torch.no_grad():
                logits, _, state = model.forward(torch.as_tensor(x[None], dtype=torch.float32), state, torch.zeros(1))
            if deterministic:
                action = int(logits.argmax(-1))
            else:
                action = int(torch.distributions.Categorical(logits=logits).sample())
            obs, reward, terminated, truncated, _ = env.step(action)
            total, steps, main = total + float(reward), steps + 1, main + (action == MAIN_ENGINE)
            lowest = min(lowest, float(obs[1]))
            if terminated or truncated:
                break
        games.append({"return": total, "steps": steps, "end": ending(env, terminated, float(obs[0])),
                      "x": float(obs[0]), "lowest_y": lowest, "main_engine": main / steps})
    env.close()
    return games


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", help="checkpoints of LunarLander-v3 runs")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1000, help="env seed of the first game")
    parser.add_argument("--deterministic", action="store_true", help="the most likely action, not a sampled one")
    args = parser.parse_args(argv)
    from utils import UsageError

    torch.manual_seed(0)
    for path in args.checkpoints:
        try:
            games = play(path, args.episodes, args.seed, args.deterministic)
        except (ValueError, OSError, UsageError) as error:
            print(f"lander_endings.py: {error}", file=sys.stderr)
            return 2
        print(path)
        for i, g in enumerate(games):
            print(f"  game {args.seed + i}: {g['return']:8.1f} in {g['steps']:4d} steps, {g['end']:<10} "
                  f"x {g['x']:+.2f}, lowest y {g['lowest_y']:+.2f}, main engine {g['main_engine']:.0%}")
        ends = Counter(g["end"] for g in games)
        print(f"  mean {np.mean([g['return'] for g in games]):.1f}; "
              + ", ".join(f"{name} {ends[name]}" for name in ("rest", "crash", "off screen", "time limit"))
              + f"; lowest y {min(g['lowest_y'] for g in games):+.2f} to {max(g['lowest_y'] for g in games):+.2f}"
              + f"; main engine {np.mean([g['main_engine'] for g in games]):.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
