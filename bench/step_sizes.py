"""How far does each optimizer move each part of the network? Train a few updates and measure.

Trains the configuration that ``main.py`` flags describe (``--flags``, one torch thread, no
checkpoints or TensorBoard) for ``--updates`` updates and prints, for each part of the network
(encoder, lstm, actor, critic), the root mean square of its weights' gradients over the second
half of the updates, and of the change each update makes to them (the step) over the first 5
updates and over the second half.

    python bench/step_sizes.py --updates 150                                   # the default (TensorFlow's RMSprop)
    python bench/step_sizes.py --updates 150 --flags="--optimizer torch-rmsprop"
    python bench/step_sizes.py --updates 150 --flags="--optimizer adam --lr 3e-4"
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from agent import agent_from_config  # noqa: E402
from bench.core_probe import quiet_setup  # noqa: E402
from envs import action_size  # noqa: E402
from runner import Runner  # noqa: E402


def rms(tensors: list[torch.Tensor]) -> float:
    return float(torch.cat([t.flatten() for t in tensors]).pow(2).mean().sqrt())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--updates", type=int, default=150)
    p.add_argument("--flags", default="", help="main.py flags of the configuration to train")
    args = p.parse_args(argv)
    config, envs = quiet_setup(args.flags)
    config.num_updates = args.updates
    try:
        num_actions, continuous = action_size(envs.action_space)
        agent = agent_from_config(config, envs.observation_space.shape, num_actions, continuous=continuous)
        runner = Runner(agent, envs, config, tempfile.gettempdir())
        runner.checkpoints.enabled = False
        parts: dict[str, list[torch.nn.Parameter]] = {}
        for name, param in agent.model.named_parameters():
            parts.setdefault(name.split(".")[0], []).append(param)
        grads: dict[str, list[float]] = {part: [] for part in parts}
        steps: dict[str, list[float]] = {part: [] for part in parts}
        step = agent.optimizer.step

        def measured_step(*a, **k):
            before = {part: [p.detach().clone() for p in params] for part, params in parts.items()}
            for part, params in parts.items():
                grads[part].append(rms([p.grad for p in params if p.grad is not None]))
            out = step(*a, **k)
            for part, params in parts.items():
                steps[part].append(rms([p.detach() - b for p, b in zip(params, before[part])]))
            return out

        agent.optimizer.step = measured_step
        runner.train()
    finally:
        envs.close()
    half = slice(args.updates // 2, None)
    print(f"{config.optimizer} lr {config.lr}, {args.updates} updates: rms of gradient and step per weight")
    print(f"{'part':>8}  {'gradient':>9}  {'step, first 5':>13}  {'step, 2nd half':>14}")
    for part in parts:
        print(f"{part:>8}  {np.mean(grads[part][half]):>9.2e}  {np.mean(steps[part][:5]):>13.2e}  "
              f"{np.mean(steps[part][half]):>14.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
