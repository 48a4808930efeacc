"""stable-baselines3's A2C, the reference this project is measured against: its settings and its one
training loop in bench/, and a command line that reports what it learned.

``train`` is the one place bench/ trains SB3's A2C: ``bench/throughput.py`` times it against this
project's trainers (speed), and this script's command line reports its mean return of the last 100
training episodes, the number a ``bench/study.py`` run of this project reports as "final mean-100"
(learning). Both get the RL Zoo's settings (rl-baselines3-zoo ``hyperparams/a2c.yml``):

* an Atari game (entry ``atari``): SB3's ``make_atari_env`` (``AtariWrapper``) and a 4-frame
  ``VecFrameStack``, ``CnnPolicy``, 5-step rollouts, learning rate 7e-4, entropy coefficient 0.01,
  value coefficient 0.25, ``RMSpropTFLike`` with eps 1e-5;
* any other env (entry ``LunarLander-v2``): SB3's ``make_vec_env``, ``MlpPolicy`` (separate 64-64
  tanh networks for actor and critic), 5-step rollouts, gamma 0.995, a learning rate of 8.3e-4
  decayed linearly to 0 over the run, entropy coefficient 1e-5;

and SB3's defaults for the rest (RMSprop with alpha 0.99 and eps 1e-5, value coefficient 0.5 where
the entry names none, gradient clip 0.5, gae_lambda 1.0). The envs are stepped by SB3's
``DummyVecEnv`` or ``SubprocVecEnv`` (``vec_env``), each env inside its ``Monitor``, so the
returns are raw. The envs are reset before the timed part, and SB3 writes no log folder.

    python bench/sb3_reference.py --steps 200000 --seeds 1 2 3
    python bench/study.py --env-name LunarLander-v3 --configs zoo200k="--num-envs 8" --seeds 1 2 3 --steps 200000
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@dataclass
class SB3Run:
    """What one training run of SB3's A2C did: env steps trained, seconds of ``model.learn`` and the
    mean raw return of its last 100 finished episodes (nan if none finished)."""

    steps: int
    seconds: float
    mean100: float


def zoo_settings(env_name: str) -> dict[str, Any]:
    """The RL Zoo's A2C keyword arguments for ``env_name``: its ``atari`` entry for an ALE game, its
    ``LunarLander-v2`` entry for any other env."""
    from envs import is_atari

    if is_atari(env_name):
        from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

        return dict(policy="CnnPolicy", learning_rate=7e-4, n_steps=5, ent_coef=0.01, vf_coef=0.25,
                    policy_kwargs=dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5)))
    from stable_baselines3.common.utils import LinearSchedule

    return dict(policy="MlpPolicy", n_steps=5, gamma=0.995, learning_rate=LinearSchedule(8.3e-4, 0.0, 1.0),
                ent_coef=1e-5)


def make_envs(env_name: str, num_envs: int, seed: int, vec_env: str = "dummy"):
    """SB3's own env pipeline for ``env_name``: ``num_envs`` envs in SB3's vector env class ``vec_env``
    (a key of ``envs.VEC_ENVS``: dummy or subproc)."""
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from envs import VEC_ENVS, is_atari, wrapper_skips_frames

    if is_atari(env_name):
        return VecFrameStack(make_atari_env(env_name, n_envs=num_envs, seed=seed,
                                            env_kwargs=wrapper_skips_frames(env_name),
                                            vec_env_cls=VEC_ENVS[vec_env]), n_stack=4)
    return make_vec_env(env_name, n_envs=num_envs, seed=seed, vec_env_cls=VEC_ENVS[vec_env])


def train(env_name: str, num_envs: int, steps: int, seed: int = 0, *, vec_env: str = "dummy",
          device: str = "cpu") -> SB3Run:
    """Train SB3's A2C with the Zoo's settings for ``env_name`` for ``steps`` env steps (SB3 rounds up
    to whole rollouts). Only ``model.learn`` is timed: building the model and the first reset are not."""
    import numpy as np
    from stable_baselines3 import A2C
    from stable_baselines3.common.logger import Logger

    from seeds import seed_everything

    seed_everything(seed)
    envs = make_envs(env_name, num_envs, seed, vec_env)
    try:
        model = A2C(env=envs, seed=seed, device=device, verbose=0, stats_window_size=100, **zoo_settings(env_name))
        # A logger that writes nothing: SB3's own, with no log folder given, makes one in /tmp on every run.
        model.set_logger(Logger(folder=None, output_formats=[]))
        # Reset outside the timed part, as this project's runner does; learn() then keeps this first observation.
        model._last_obs = model.env.reset()
        model._last_episode_starts = np.ones((model.env.num_envs,), dtype=bool)
        tic = time.perf_counter()
        model.learn(total_timesteps=steps, reset_num_timesteps=False)
        seconds = time.perf_counter() - tic
    finally:
        envs.close()
    returns = [info["r"] for info in model.ep_info_buffer]
    return SB3Run(model.num_timesteps, seconds, float(statistics.mean(returns)) if returns else math.nan)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-name", default="LunarLander-v3")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    finals = []
    for seed in args.seeds:
        final = train(args.env_name, args.num_envs, args.steps, seed).mean100
        finals.append(final)
        print(f"SB3 A2C, {args.env_name}, seed {seed}: mean return of the last 100 episodes after "
              f"{args.steps:,} env steps: {final:.2f}", flush=True)
    print(f"mean over seeds: {statistics.mean(finals):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
