"""The algorithm registry: every algorithm is an agent class with one update method, a loop that
collects its batches, and the settings and checks of its own; a new one is one class and one line.

Shown here by registering a small algorithm from this file and training it through the command line.
"""
import glob
import inspect
import os

import pytest
import torch

import algorithms
import main as cli
from agent import A2CAgent, Agent
from algorithms import Algorithm, check_algorithm_settings
from config import Config
from utils import UsageError

SMALL = ["--env-name", "CartPole-v1", "--num-envs", "2", "--rollout-size", "5", "--no-progress", "--no-cuda",
         "--threads", "1"]


class ReturnWeighted(A2CAgent):
    """Policy gradient weighted by the rollout's returns instead of its advantages (the critic
    still learns): a small algorithm of this file's own."""

    updates: list[int] = []

    def update(self, batch, index=0, on_loss=None):
        ReturnWeighted.updates.append(index)
        dist = self.model.distribution(self.model.forward_sequence(batch.obs, batch.initial_state,
                                                                   batch.episode_starts)[0])
        policy = -(dist.log_prob(batch.actions) * batch.returns.detach()).mean()
        return self.step({"total": policy, "policy": policy},
                         before_step=None if on_loss is None else (lambda stats: on_loss(stats["total"])))


def refuse_atari(config: Config) -> None:
    if "NoFrameskip" in config.env_name:
        raise UsageError("--algo returns works on vector-observation envs")


@pytest.fixture
def registered(monkeypatch):
    ReturnWeighted.updates = []
    monkeypatch.setitem(algorithms.ALGORITHMS, "returns",
                        Algorithm(ReturnWeighted, settings=("ppo.epochs",), check=refuse_atari))


def test_an_algorithm_registered_from_a_test_trains_through_the_command_line(registered, tmp_path):
    assert cli.main([*SMALL, "--algo", "returns", "--num-updates", "4", "--log-dir", str(tmp_path)]) == 0
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1_*"))
    last = torch.load(os.path.join(run_dir, "a2c_last"), weights_only=True)
    assert ReturnWeighted.updates == [0, 1, 2, 3] and last["update"] == 4 and last["config"]["algo"] == "returns"
    assert os.path.exists(os.path.join(run_dir, "a2c_best_loss"))  # the best-loss rule saw the update's loss
    # It resumes through the registry, and plays as any checkpoint does.
    assert cli.main(["--no-cuda", "--resume", os.path.join(run_dir, "a2c_last"), "--num-updates", "6"]) == 0
    assert ReturnWeighted.updates == [0, 1, 2, 3, 4, 5]
    assert cli.main(["--no-cuda", "--eval", "--load", os.path.join(run_dir, "a2c_last"), "--episodes", "1"]) == 0
    assert isinstance(algorithms.load_agent(os.path.join(run_dir, "a2c_last")), ReturnWeighted)


def test_an_algorithm_s_check_and_settings_refuse_in_one_line(registered, one_line_error, tmp_path):
    assert one_line_error([*SMALL, "--env-name", "PongNoFrameskip-v4", "--algo", "returns", "--log-dir",
                           str(tmp_path)]) == "error: --algo returns works on vector-observation envs"
    # Its own settings are accepted for it; another algorithm's are refused; so is an unknown name.
    check_algorithm_settings(Config(algo="returns"), {"ppo.epochs"}, cli._flag)
    with pytest.raises(UsageError, match="--group-size is for --algo grpo"):
        check_algorithm_settings(Config(algo="returns"), {"group.size"}, cli._flag)
    assert one_line_error([*SMALL, "--algo", "nope"]) == "error: unknown --algo 'nope' (one of a2c, ppo, grpo, returns)"
    assert not os.listdir(tmp_path)


def test_the_built_in_algorithms_share_the_update_contract():
    for name in ("a2c", "ppo", "grpo"):
        agent = algorithms.ALGORITHMS[name].agent
        assert issubclass(agent, Agent), name
        assert list(inspect.signature(agent.update).parameters)[1:4] == ["batch", "index", "on_loss"], name
