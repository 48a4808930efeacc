"""Env stepping overlapped with the network: ``--env-groups G``, a speed setting (off by default).

The games are split into ``G`` groups, each ale-py C++ vector env of its own (``ale_vec_env.EnvGroups``).
At each step of a rollout the network acts for group 0 and sends its actions; while group 0's games
step in their C++ threads, the network acts for group 1, and so on; then every group's step is
received, and the step goes on as the serial loop's (``runner.RolloutCollector``).

Only when the games step changes. Env ``g * n + i`` (group ``g``'s env ``i``, ``n`` envs a group)
is seeded as env ``g * n + i`` of one vector env of all the games, so with the same actions every
game plays the same frames, rewards and ends (``tests/test_overlap.py``); the rollout and the update
are the serial loop's. The network runs on ``G`` smaller batches, so it launches ``G`` times the
kernels a step: whether the overlap pays depends on the machine (docs/speed.md).
"""

from __future__ import annotations

import torch

from model import State
from runner import EnvStep, RolloutCollector, Runner


class OverlappedRolloutCollector(RolloutCollector):
    """A2C's rollouts (:class:`runner.RolloutCollector`) collected with the groups' steps overlapped
    with the network's passes: the same storage, bootstrap and batch."""

    def act_and_step(self, runner: Runner, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State, EnvStep]:
        agent, envs = runner.agent, runner.envs
        obs, starts, state = runner.obs, runner.episode_starts, runner.recurrent_state
        act = agent.act_with_graph if runner.config.speed.keep_graph else agent.act
        parts = []
        for g, part in enumerate(envs.slices):
            out = act(obs[part], tuple(s[part] for s in state), starts[part])
            envs.send(g, out[0].cpu().numpy())  # group g steps while the network acts for the next group
            parts.append(out)
        joined = [torch.cat([p[k] for p in parts]) for k in range(len(parts[0]) - 1)]
        next_state = tuple(torch.cat([p[-1][k] for p in parts]) for k in range(len(state)))
        actions, log_probs, values = self.kept(runner, joined)
        return actions, log_probs, values, next_state, runner.took_step(*envs.receive(), next_state, t)
