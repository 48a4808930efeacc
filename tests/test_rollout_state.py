"""The recurrent state across a rollout in the runner: the bootstrap value of the last observation is
computed from the state the rollout's last step produced, without advancing it, so the next rollout
starts from that very state (with and without the collected forward pass, ``--keep-graph``).
(The model's ``value`` alone: tests/test_recurrence.py.)"""

from __future__ import annotations

import pytest
import torch

from config import Config, Speed

pytestmark = pytest.mark.usefixtures("torch_single_thread")


@pytest.mark.parametrize("keep_graph", [True, False])
def test_bootstrap_value_does_not_advance_the_recurrent_state(make_runner, tmp_path, keep_graph):
    config = Config(
        num_envs=2,
        rollout_size=5,
        num_updates=3,
        seed=11,
        tensorboard=False,
        progress=False,
        max_episode_frames=120,
        checkpoint_interval=10**6,
        speed=Speed(keep_graph=keep_graph),
    )
    runner = make_runner(config, tmp_path)
    name = "act_with_graph" if keep_graph else "act"
    act = getattr(runner.agent, name)
    produced = []  # the state each step of the rollout produced

    def recording_act(obs, state, starts):
        out = act(obs, state, starts)
        produced.append(tuple(s.detach().clone() for s in out[-1]))
        return out

    setattr(runner.agent, name, recording_act)
    for _ in range(3):
        produced.clear()
        before = tuple(s.clone() for s in runner.recurrent_state)
        runner.collect()
        assert len(produced) == config.rollout_size
        last = produced[-1]
        assert not all(torch.equal(a, b) for a, b in zip(before, last))  # the rollout did move it
        # The next rollout starts from the state of the rollout's last step, not one step further.
        assert len(runner.recurrent_state) == len(last) == 2
        assert all(torch.equal(a, b) for a, b in zip(runner.recurrent_state, last))
        # ... and the bootstrap value was computed from that very state.
        with torch.no_grad():
            expected = runner.agent.model.value(runner.obs, last, runner.episode_starts)
        torch.testing.assert_close(runner.collector.storage.last_values, expected, rtol=0, atol=1e-6)
    runner.collect()  # the next rollout is stored as starting from it
    assert all(torch.equal(a, b) for a, b in zip(runner.collector.storage.initial_state, last))
