"""The algorithm registry: every algorithm is an agent class with one update method, the collector
of its batches, and its own block of settings (with their flags), defaults and check; a new one is
one file and one line.

Shown here by registering a small algorithm from this file, with a setting of its own, and training
it through the command line.
"""

import glob
import os
from dataclasses import dataclass

import pytest
import torch

import algorithms
import config as settings
import main as cli
import recipes
from agent import A2CAgent, rollout_settings
from algorithms import Algorithm, check_algorithm_settings
from config import Config, flag_of, positive_float, setting
from envs import is_atari
from training import check_settings
from utils import UsageError

SMALL = [
    "--env-name",
    "CartPole-v1",
    "--num-envs",
    "2",
    "--rollout-size",
    "5",
    "--no-progress",
    "--no-cuda",
    "--threads",
    "1",
]


@dataclass
class Weighting:
    """ReturnWeighted's own settings."""

    power: float = setting(
        1.0,
        "Each return is raised to this power (keeping its sign) before it weighs the log-probabilities.",
        flag="--return-power",
        parse=positive_float,
        metavar="P",
    )


class ReturnWeighted(A2CAgent):
    """Policy gradient weighted by the rollout's returns instead of its advantages (the critic
    still learns): a small algorithm of this file's own, with a setting of its own."""

    updates: list[tuple[int, float]] = []

    def __init__(self, model, *, power: float = 1.0, **kwargs) -> None:
        super().__init__(model, **kwargs)
        self.power = power

    @classmethod
    def from_config(cls, model, config):
        return cls(model, **rollout_settings(config), power=config.weighting.power)

    def update(self, batch, index=0, on_loss=None):
        ReturnWeighted.updates.append((index, self.power))
        dist = self.model.distribution(
            self.model.forward_sequence(batch.obs, batch.initial_state, batch.episode_starts)[0]
        )
        weights = batch.returns.sign() * batch.returns.abs().pow(self.power)
        policy = -(dist.log_prob(batch.actions) * weights.detach()).mean()
        return self.step(
            {"total": policy, "policy": policy},
            before_step=None if on_loss is None else (lambda stats: on_loss(stats["total"])),
        )


def refuse_atari(config: Config) -> None:
    if "NoFrameskip" in config.env_name:
        raise UsageError("--algo returns works on vector-observation envs")


@pytest.fixture
def registered():
    ReturnWeighted.updates = []
    algorithms.register(
        "returns",
        Algorithm(ReturnWeighted, blocks={"weighting": Weighting}, check=refuse_atari, fixed=("weighting.power",)),
    )
    yield
    del algorithms.ALGORITHMS["returns"], settings.ALGORITHM_BLOCKS["weighting"]


def test_an_algorithm_registered_from_a_test_trains_through_the_command_line(registered, tmp_path):
    assert "--return-power P" in cli.build_parser().format_help()  # its flag, made from its setting
    assert (
        cli.main([*SMALL, "--algo", "returns", "--return-power", "2", "--num-updates", "4", "--log-dir", str(tmp_path)])
        == 0
    )
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1_*"))
    last = torch.load(os.path.join(run_dir, "a2c_last"), weights_only=True)
    # The typed setting reached the agent and the saved config: the block was not ignored.
    assert ReturnWeighted.updates == [(0, 2.0), (1, 2.0), (2, 2.0), (3, 2.0)] and last["update"] == 4
    assert last["config"]["algo"] == "returns" and last["config"]["weighting"] == {"power": 2.0}
    assert os.path.exists(os.path.join(run_dir, "a2c_best_loss"))  # the best-loss rule saw the update's loss
    # It resumes through the registry with the setting it was trained with, which a resume cannot
    # change (the algorithm fixes it), and plays as any checkpoint does.
    assert cli.main(["--no-cuda", "--resume", os.path.join(run_dir, "a2c_last"), "--num-updates", "6"]) == 0
    assert ReturnWeighted.updates[4:] == [(4, 2.0), (5, 2.0)]
    assert cli.main(["--no-cuda", "--eval", "--load", os.path.join(run_dir, "a2c_last"), "--episodes", "1"]) == 0
    agent = algorithms.load_agent(os.path.join(run_dir, "a2c_last"))
    assert isinstance(agent, ReturnWeighted) and agent.power == 2.0


def test_an_algorithm_s_check_and_settings_refuse_in_one_line(registered, one_line_error, tmp_path):
    assert (
        one_line_error([*SMALL, "--env-name", "PongNoFrameskip-v4", "--algo", "returns", "--log-dir", str(tmp_path)])
        == "error: --algo returns works on vector-observation envs"
    )
    # Its own settings are accepted for it and refused for another; so are another's; so is an unknown name.
    check_algorithm_settings(Config(algo="returns"), {"weighting.power"}, flag_of)
    assert (
        one_line_error([*SMALL, "--return-power", "2", "--log-dir", str(tmp_path)])
        == "error: --return-power is for --algo returns"
    )
    with pytest.raises(UsageError, match="--group-size is for --algo grpo"):
        check_algorithm_settings(Config(algo="returns"), {"group.size"}, flag_of)
    assert one_line_error([*SMALL, "--return-power", "0"]).startswith("error: argument --return-power: expected a")
    assert one_line_error([*SMALL, "--algo", "nope"]) == "error: unknown --algo 'nope' (one of a2c, ppo, grpo, returns)"
    assert not os.listdir(tmp_path)


# An Atari game, a vector-observation env without a recipe of its own, and every env with one.
ENV_FAMILIES = ["PongNoFrameskip-v4", "Acrobot-v1", *recipes.ENV_DEFAULTS]


@pytest.mark.parametrize(
    "memory", [[], ["--recurrent"], ["--no-recurrent"]], ids=["default", "recurrent", "feedforward"]
)
@pytest.mark.parametrize("env_name", ENV_FAMILIES)
@pytest.mark.parametrize("algo", ["a2c", "ppo", "grpo"])
def test_the_defaults_of_every_algorithm_env_and_memory_are_accepted(algo, env_name, memory):
    """A new run's settings with nothing typed but the env, the algorithm and the memory: its
    algorithm's defaults fit together on every env, or the algorithm refuses the env family itself."""
    config, _, typed = cli.parse_args(["--env-name", env_name, "--algo", algo, *memory])
    config = recipes.with_env_defaults(config, typed)
    try:
        check_settings(config)
    except UsageError as error:
        assert is_atari(env_name) and algo != "a2c" and "vector-observation envs" in str(error), error
    if memory:
        assert config.recurrent is (memory == ["--recurrent"])
