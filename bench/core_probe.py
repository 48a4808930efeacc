"""Is the recurrent core alive? Train a few hundred updates and read the network on fixed frames.

Trains the configuration that ``main.py`` flags describe (``--flags``, one torch thread, no
checkpoints or TensorBoard) and, before the first update and every ``--every`` updates after it,
reads the network on 48 fixed frames of random play (12 envs at 4 points of 200 random steps):

* ``features``: the encoder's mean feature and its largest;
* ``saturated``: the share of the LSTM's gate pre-activations beyond +-3 after 8 steps on the
  frames from a zero state (where their gradient nearly vanishes);
* ``spread``: the LSTM output's standard deviation across the frames, averaged over units (the
  features' for a feed-forward network), and the value's;
* with each training interval's mean explained variance, gradient norm and the mean of the
  last 100 games.

    python bench/core_probe.py --updates 300 --every 25                                  # the default
    python bench/core_probe.py --updates 300 --every 25 --flags="--optimizer torch-rmsprop"
    python bench/core_probe.py --updates 100 --every 50 --flags="--env-name BreakoutNoFrameskip-v4 \\
        --vec-env dummy --icm --icm-normalize --extrinsic-coeff 0 --seed 1 --optimizer torch-rmsprop"
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from agent import agent_from_config  # noqa: E402
from envs import make_vec_env  # noqa: E402
from main import parse_args  # noqa: E402
from model import ActorCritic  # noqa: E402
from runner import Runner  # noqa: E402
from utils import seed_everything  # noqa: E402


def fixed_frames(envs, rng: np.random.Generator, count: int = 12, steps: int = 200, every: int = 50) -> torch.Tensor:
    """``count`` envs' observations at every ``every``-th of ``steps`` random steps."""
    frames, obs = [], envs.reset()
    for i in range(steps):
        obs, *_ = envs.step(rng.integers(0, envs.action_space.n, envs.num_envs))
        if i % every == every - 1:
            frames.append(torch.as_tensor(obs[:count].copy()))
    return torch.cat(frames)


@torch.no_grad()
def health(model: ActorCritic, frames: torch.Tensor) -> dict[str, float]:
    features = model.encode(frames)
    out = {"feature_mean": float(features.mean()), "feature_max": float(features.max())}
    core = features
    if model.recurrent:
        n, lstm = frames.shape[0], model.lstm
        h, c = torch.zeros(n, model.hidden_size), torch.zeros(n, model.hidden_size)
        for _ in range(8):
            gates = model.gate_preactivations(features, h)
            h, c = lstm(features, (h, c))
        out["saturated"] = float((gates.abs() > 3).float().mean())
        core = h
    out["output_spread"] = float(core.std(0).mean())
    heads_read = torch.cat([features, core], 1) if model.core_skip else core  # --core-skip: both
    out["value_spread"] = float(model.critic(heads_read).squeeze(-1).std())
    return out


def quiet_setup(flags: str):
    """The settings that ``main.py`` flags describe, without TensorBoard, progress bar, logging or
    checkpoints, on one torch thread and seeded as ``main.py`` seeds; and their envs."""
    config, _, _ = parse_args(shlex.split(flags))
    config.tensorboard, config.progress, config.threads = False, False, 1
    config.log_interval = config.checkpoint_interval = 10**9
    torch.set_num_threads(1)
    seed_everything(config.seed)
    return config, make_vec_env(config.env_name, config.num_envs, config.n_stack, config.seed, config.vec_env)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--every", type=int, default=25)
    p.add_argument("--flags", default="", help="main.py flags of the configuration to train")
    args = p.parse_args(argv)
    config, envs = quiet_setup(args.flags)
    try:
        frames = fixed_frames(envs, np.random.default_rng(0))
        agent = agent_from_config(config, envs.observation_space.shape, int(envs.action_space.n))
        runner = Runner(agent, envs, config, tempfile.gettempdir())
        runner.checkpoints.enabled = False  # a probe writes no checkpoints
        print(f"{'update':>6}  " + "  ".join(f"{k:>13}" for k in health(agent.model, frames)) +
              "  explained_var  grad_norm  mean100", flush=True)
        print(f"{0:>6}  " + "  ".join(f"{v:>13.4g}" for v in health(agent.model, frames).values()), flush=True)
        tic = time.perf_counter()
        for done in range(args.every, args.updates + 1, args.every):
            config.num_updates = done
            runner.train()
            recent = list(runner.history)[-args.every:]
            ev = [h["explained_variance"] for h in recent if math.isfinite(h["explained_variance"])]
            print(f"{done:>6}  " + "  ".join(f"{v:>13.4g}" for v in health(agent.model, frames).values()) +
                  f"  {np.mean(ev) if ev else float('nan'):>13.3f}  {np.mean([h['grad_norm'] for h in recent]):>9.3f}"
                  f"  {runner.state.episodes.mean:>7.2f}", flush=True)
        print(f"{args.updates} updates in {time.perf_counter() - tic:.0f} s", flush=True)
    finally:
        envs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
