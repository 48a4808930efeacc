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


@pytest.mark.parametrize("lever", ["sequential", "halves"])
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
