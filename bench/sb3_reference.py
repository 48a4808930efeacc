"""Learning against a reference: stable-baselines3's A2C with the RL Zoo's settings, on the same env
and budget as a ``bench/study.py`` run of this project, so a gap between the two shows.

For each ``--seeds`` seed, SB3's ``A2C("MlpPolicy")`` trains ``--env-name`` (LunarLander-v3) for
``--steps`` env steps in ``--num-envs`` envs of SB3's ``make_vec_env`` (each with its ``Monitor``),
with the Zoo's LunarLander hyperparameters (5-step rollouts, gamma 0.995, a learning rate of
8.3e-4 decayed linearly to 0 over the run, entropy coefficient 1e-5; the rest SB3's defaults:
RMSprop with alpha 0.99 and eps 1e-5, value coefficient 0.5, gradient clip 0.5, separate 64-64
tanh networks for actor and critic). It prints the mean return of the last 100 training episodes
at the end, seed by seed, the number this project's study reports as "final mean-100":

    python bench/sb3_reference.py --steps 200000 --seeds 1 2 3
    python bench/study.py --env-name LunarLander-v3 --configs zoo200k="--num-envs 8" --seeds 1 2 3 --steps 200000
"""
from __future__ import annotations

import argparse
import statistics


def train_sb3(env_name: str, num_envs: int, steps: int, seed: int, threads: int = 1) -> float:
    """The mean return of SB3 A2C's last 100 training episodes after ``steps`` env steps."""
    import torch
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import LinearSchedule

    torch.set_num_threads(threads)
    envs = make_vec_env(env_name, n_envs=num_envs, seed=seed)
    model = A2C("MlpPolicy", envs, n_steps=5, gamma=0.995, ent_coef=1e-5, seed=seed, device="cpu",
                learning_rate=LinearSchedule(8.3e-4, 0.0, 1.0), stats_window_size=100)
    model.learn(total_timesteps=steps)
    returns = [info["r"] for info in model.ep_info_buffer]
    envs.close()
    return float(sum(returns) / len(returns))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-name", default="LunarLander-v3")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    finals = []
    for seed in args.seeds:
        final = train_sb3(args.env_name, args.num_envs, args.steps, seed, args.threads)
        finals.append(final)
        print(f"SB3 A2C, {args.env_name}, seed {seed}: mean return of the last 100 episodes after "
              f"{args.steps:,} env steps: {final:.2f}", flush=True)
    print(f"mean over seeds: {statistics.mean(finals):.2f}")


if __name__ == "__main__":
    main()
