"""The algorithms a run trains with (``--algo``), by name: each is one file and one line here.

    a2c   agent.py   A2CAgent: one gradient step on each rollout
    ppo   ppo.py     PPOAgent: epochs of clipped minibatch steps on each rollout
    grpo  grpo.py    GRPOAgent, and GroupCollector, whose batches are rounds of whole episodes

An algorithm is an agent class and what the run needs to know of it:

* the agent (a subclass of ``agent.Agent``), built by ``Agent.from_config(model, config)``, learns
  from a collected batch with ``update(batch, index, on_loss)``: one method for every algorithm,
  called by the one training loop (``runner.Runner``);
* the collector that gathers its batches for that loop: ``runner.RolloutCollector`` (rollouts of
  ``rollout_size`` steps), or one of its own;
* the settings only it reads, refused when typed for another algorithm;
* a check that refuses, in one line, what it cannot train;
* the settings of its own that a resumed run cannot change, and whether it trains under torchrun.

``register`` adds one more, from anywhere (a test registers a small algorithm of its own and
trains it through the command line).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

import grpo
import ppo
from agent import A2CAgent, Agent, build_network
from checkpoints import load_checkpoint
from config import Config
from runner import RolloutCollector
from utils import UsageError


def _anything(config: Config) -> None:
    """The check of an algorithm that trains whatever the env factory can make."""


@dataclass(frozen=True)
class Algorithm:
    agent: type[Agent]
    """The agent class: ``from_config`` builds it, ``update`` is its update."""
    collector: type = RolloutCollector
    """What gathers its batches for the loop (``runner.Collector``), built with the runner."""
    settings: tuple[str, ...] = ()
    """Settings (``config.setting_names``) only this algorithm reads."""
    check: Callable[[Config], None] = _anything
    """Raises ``UsageError`` for what it cannot train, before anything is written."""
    fixed: tuple[str, ...] = ()
    """Settings of its own that a resumed run cannot change."""
    data_parallel: bool = False
    """Whether it trains under torchrun (its update averages gradients across ranks)."""


ALGORITHMS: dict[str, Algorithm] = {}


def register(name: str, algorithm: Algorithm) -> None:
    """Make ``--algo name`` train with ``algorithm``."""
    ALGORITHMS[name] = algorithm


register("a2c", Algorithm(A2CAgent, data_parallel=True))
register("ppo", Algorithm(ppo.PPOAgent, settings=ppo.SETTINGS, check=ppo.check))
register("grpo", Algorithm(grpo.GRPOAgent, grpo.GroupCollector, settings=grpo.SETTINGS, check=grpo.check,
                           fixed=("group.size",)))


def algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name``, or a one-line ``UsageError``."""
    if name not in ALGORITHMS:
        raise UsageError(f"unknown --algo {name!r} (one of {', '.join(ALGORITHMS)})")
    return ALGORITHMS[name]


def check_algorithm_settings(config: Config, typed: set[str], flag_of: Callable[[str], str]) -> None:
    """The settings of one algorithm typed for a run of another are refused, not ignored."""
    mine = set(algorithm(config.algo).settings)
    for setting in sorted(typed - mine):
        owners = [name for name, other in ALGORITHMS.items() if setting in other.settings]
        if owners:
            raise UsageError(f"{flag_of(setting)} is for --algo {' or '.join(owners)}")


def make_agent(config: Config, obs_shape: tuple[int, ...], num_actions: int, device: torch.device | str = "cpu",
               continuous: bool = False) -> Agent:
    """A fresh agent of ``config.algo`` with the network and optimizer that ``config`` describes
    (and what else its algorithm builds: A2C's curiosity module); ``continuous``: ``num_actions``
    is the dimension of a continuous action."""
    model = build_network(config, obs_shape, num_actions, device, continuous)
    return algorithm(config.algo).agent.from_config(model, config)


def load_agent(path: str, device: torch.device | str = "cpu") -> Agent:
    """An agent rebuilt from any checkpoint: its settings, weights, and optimizer state when saved (a2c_last)."""
    data = load_checkpoint(path)
    config = Config.from_dict(data["config"])
    spec = data["model_spec"]
    agent = make_agent(config, tuple(spec["obs_shape"]), spec["num_actions"], device,
                       continuous=spec.get("continuous", False))
    agent.load(data, path)
    return agent


def fixed_on_resume(name: str) -> set[str]:
    """The settings of algorithm ``name`` that a resumed run of it cannot change."""
    return set(algorithm(name).fixed)
