"""bench/cpu_levers.py: each lever's loop steps every env once a step, whole halves at a time,
and the summary judges each lever against the 1.10x a speed option must earn."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from bench import cpu_levers
from bench.throughput import Trials

pytestmark = pytest.mark.usefixtures("torch_single_thread")


class CountingEnvs:
    """A stand-in for ale-py's vector env: counts each env's steps and checks that every send is
    received before the next."""

    single_action_space = spaces.Discrete(6)

    def __init__(self, num_envs: int, frame_size: int):
        self.num_envs, self.frame_size = num_envs, frame_size
        self.steps = np.zeros(num_envs, dtype=int)
        self.pending = False

    def observation(self):
        return np.zeros((self.num_envs, 4, self.frame_size, self.frame_size), dtype=np.uint8)

    def send(self, actions):
        assert not self.pending, "sent twice without a recv"
        assert actions.shape == (self.num_envs,)
        self.pending = True
        self.steps += 1

    def recv(self):
        assert self.pending, "recv without a send"
        self.pending = False
        return (self.observation(),)

    def step(self, actions):
        self.send(actions)
        return self.recv()

    def close(self):
        assert not self.pending, "closed with a step in flight"


@pytest.mark.parametrize("lever", ["sequential", "halves", "lagged"])
def test_every_env_steps_once_a_step_of_every_update(lever, monkeypatch):
    made = []

    def make_envs(num_envs, frame_size, seed, threads):
        assert threads == 1  # --ale-threads reaches each vector env
        made.append(CountingEnvs(num_envs, frame_size))
        return made[-1], torch.from_numpy(made[-1].observation())

    monkeypatch.setattr(cpu_levers, "make_envs", make_envs)
    steps, seconds = cpu_levers.train_lever(3 * 8 * cpu_levers.ROLLOUT, lever, num_envs=8, frame_size=42,
                                            warmup_updates=2, ale_threads=1)
    assert steps == 3 * 8 * cpu_levers.ROLLOUT and seconds > 0
    assert [e.num_envs for e in made] == ([4, 4] if lever == "halves" else [8])
    for envs in made:  # 2 warm-up updates and 3 timed ones, 5 steps each
        assert envs.steps.tolist() == [5 * cpu_levers.ROLLOUT] * envs.num_envs

def test_the_lagged_update_applies_the_gradient_at_the_weights_that_acted_then_hands_them_the_new_ones():
    # master at w = (0, 0), b = 0; the actor still at w = (1, 0), b = 0 (one update old). On x = (1, 2)
    # the actor's value is 1 and the stand-in loss, its square, has the gradient 2 * 1 * x = (2, 4) and
    # 2 for b; SGD at 0.5 moves the master to (-1, -2), -1. At the master's own weights the value is 0,
    # and so would be the gradient.
    master, actor = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        master.weight.zero_(), master.bias.zero_()
        actor.weight.copy_(torch.tensor([[1.0, 0.0]])), actor.bias.zero_()
    optimizer = torch.optim.SGD(master.parameters(), lr=0.5)
    value = actor(torch.tensor([[1.0, 2.0]])).squeeze(1)
    cpu_levers.learn_lagged(master, optimizer, actor, [torch.zeros(1)], [value])
    assert master.weight.tolist() == [[-1.0, -2.0]] and master.bias.tolist() == [-1.0]
    assert actor.weight.tolist() == [[-1.0, -2.0]] and actor.bias.tolist() == [-1.0]


def test_the_lagged_loop_acts_with_the_weights_from_before_the_update_running_beside_it(monkeypatch):
    acted, learned = [], []

    def make_envs(num_envs, frame_size, seed, threads):
        envs = CountingEnvs(num_envs, frame_size)
        return envs, torch.from_numpy(envs.observation())

    real_act = cpu_levers.act

    def act(model, obs, state):
        acted.append(getattr(model, "weights_after_update", None))
        return real_act(model, obs, state)

    def learn_lagged(master, optimizer, actor, log_probs, values):
        learned.append(len(learned) + 1)  # update n done
        actor.weights_after_update = len(learned)  # the actor now holds the weights after update n

    monkeypatch.setattr(cpu_levers, "make_envs", make_envs)
    monkeypatch.setattr(cpu_levers, "act", act)
    monkeypatch.setattr(cpu_levers, "learn_lagged", learn_lagged)
    cpu_levers.train_lever(4 * 8 * cpu_levers.ROLLOUT, "lagged", num_envs=8, frame_size=42, warmup_updates=0)
    assert learned == [1, 2, 3, 4]  # every rollout's update, the last one waited for
    rollouts = [acted[i] for i in range(0, len(acted), cpu_levers.ROLLOUT)]
    # Rollouts 1 and 2 act with the first weights (two copies); rollout 3 with those after update 1,
    # which ran beside rollout 2, and rollout 4 with those after update 2: one update behind.
    assert rollouts == [None, None, 1, 2]


def test_the_summary_judges_each_lever_by_its_ratio_to_the_runners_order():
    def trials(name, rate):
        return Trials(name, steps=[int(rate)], seconds=[1.0])

    lines = cpu_levers.summary_lines({"sequential": trials("sequential", 1000), "halves": trials("halves", 830),
                                      "compiled": trials("compiled", 1150)})
    assert lines == ["halves / sequential: 0.83x: does not earn its place (under 1.10x)",
                     "compiled / sequential: 1.15x: earns its place"]
    assert cpu_levers.summary_lines({"halves": trials("halves", 830)}) == []


@pytest.mark.parametrize("argv, message", [(["--num-envs", "7"], "--num-envs must be even"),
                                           (["--num-envs", "0"], "--num-envs must be even"),
                                           (["--steps", "0"], "--steps and --repeats must be positive"),
                                           (["--ale-threads", "-1"], "--threads and --ale-threads must be 0 or more")])
def test_refuses_bad_counts_with_exit_code_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cpu_levers.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
