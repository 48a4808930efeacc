"""The algorithms a run trains with (``--algo``), by name: each is one file and one line here.

    a2c   agent.py   A2CAgent: one gradient step on each rollout
    ppo   ppo.py     PPOAgent: epochs of clipped minibatch steps on each rollout
    grpo  grpo.py    GRPOAgent, and GroupCollector, whose batches are rounds of whole episodes

An algorithm is an agent class and what the run needs to know of it, all declared in its file:

* the agent (a subclass of ``agent.Agent``), built by ``Agent.from_config(model, config)``, learns
  from a collected batch with ``update(batch, index, on_loss)``: one method for every algorithm,
  called by the one training loop (``runner.Runner``);
* the collector that gathers its batches for that loop: ``runner.RolloutCollector`` (rollouts of
  ``rollout_size`` steps), or one of its own;
* its own block of settings (a dataclass of ``config.setting`` fields: default, help and flag),
  which every config then holds (``config.clip``) and the command line offers; its settings, and
  those of other blocks it reads, are refused when typed for another algorithm;
* its defaults, over its env family's (``recipes.py``), and the settings it fits to the others;
* a check that refuses, in one line, what it cannot train;
* the settings of its own that a resumed run cannot change, and whether it trains under torchrun.

``register`` adds one more, from anywhere (a test registers a small algorithm with a block of
its own and trains it through the command line).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

import grpo
import ppo
from agent import A2CAgent, Agent, build_network
from checkpoints import load_checkpoint
from config import Config, add_algorithm_block
from families import EnvFamily
from runner import RolloutCollector
from utils import UsageError


def _anything(config: Config) -> None:
    """The check of an algorithm that trains whatever the env factory can make."""


def _family(env_name: str, family: EnvFamily) -> dict[str, Any]:
    """The defaults of an algorithm that trains with its env family's (``families.EnvFamily.defaults``)."""
    return family.defaults(env_name)


@dataclass(frozen=True)
class Algorithm:
    agent: type[Agent]
    """The agent class: ``from_config`` builds it, ``update`` is its update."""
    collector: type = RolloutCollector
    """What gathers its batches for the loop (``runner.Collector``), built with the runner."""
    blocks: dict[str, type] = field(default_factory=dict)
    """Its own blocks of settings by name (``{"clip": ppo.Clipped}``), which every config holds."""
    shares: tuple[str, ...] = ()
    """Settings of other algorithms' blocks that it reads too (``config.setting_names``)."""
    defaults: Callable[[str, EnvFamily], dict[str, Any]] = _family
    """Its defaults for an env id of a family (settings named as in ``setting_names``), from that
    family's (``EnvFamily.defaults``) or its own."""
    fit: Optional[Callable[[Config, set[str]], dict[str, Any]]] = None
    """Settings it derives from a new run's others (once the defaults and typed flags are in), where
    not typed; None: its defaults always fit together."""
    check: Callable[[Config], None] = _anything
    """Raises ``UsageError`` for what it cannot train, before anything is written."""
    fixed: tuple[str, ...] = ()
    """Settings of its own that a resumed run cannot change."""
    renamed: dict[str, str] = field(default_factory=dict)
    """Older names of its settings, as configs of its runs saved them: old -> new."""
    data_parallel: bool = False
    """Whether it trains under torchrun (its update averages gradients across ranks)."""

    @property
    def settings(self) -> tuple[str, ...]:
        """The settings only this algorithm reads (and any other that shares them)."""
        own = [f"{name}.{f.name}" for name, block in self.blocks.items() for f in dataclasses.fields(block)]
        return (*own, *self.shares)


ALGORITHMS: dict[str, Algorithm] = {}


def register(name: str, algorithm: Algorithm) -> None:
    """Make ``--algo name`` train with ``algorithm``; its blocks of settings join every config made from now on."""
    for block_name, settings in algorithm.blocks.items():
        add_algorithm_block(block_name, settings, algorithm.renamed, algo=name)
    ALGORITHMS[name] = algorithm


register("a2c", Algorithm(A2CAgent, data_parallel=True))
register(
    "ppo",
    Algorithm(
        ppo.PPOAgent,
        blocks={"clip": ppo.Clipped},
        defaults=ppo.defaults,
        fit=ppo.fit,
        check=ppo.check,
        renamed=ppo.RENAMED,
    ),
)
register(
    "grpo",
    Algorithm(
        grpo.GRPOAgent,
        grpo.GroupCollector,
        blocks={"group": grpo.Group},
        shares=grpo.SHARED,
        defaults=grpo.defaults,
        check=grpo.check,
        fixed=("group.size",),
        renamed=grpo.RENAMED,
    ),
)


def algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name``, or a one-line ``UsageError``."""
    if name not in ALGORITHMS:
        raise UsageError(f"unknown --algo {name!r} (one of {', '.join(ALGORITHMS)})")
    return ALGORITHMS[name]


def owners(setting: str) -> list[str]:
    """The algorithms that read ``setting`` (none: every algorithm reads it)."""
    return [name for name, other in ALGORITHMS.items() if setting in other.settings]


def check_algorithm_settings(config: Config, typed: set[str], flag_of: Callable[[str], str]) -> None:
    """The settings of one algorithm typed for a run of another are refused, not ignored."""
    mine = set(algorithm(config.algo).settings)
    for setting in sorted(typed - mine):
        readers = owners(setting)
        if readers:
            raise UsageError(f"{flag_of(setting)} is for --algo {' or '.join(readers)}")


def make_agent(
    config: Config,
    obs_shape: tuple[int, ...],
    num_actions: int,
    device: torch.device | str = "cpu",
    continuous: bool = False,
) -> Agent:
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
    agent = make_agent(
        config, tuple(spec["obs_shape"]), spec["num_actions"], device, continuous=spec.get("continuous", False)
    )
    agent.load(data, path)
    return agent


def fixed_on_resume(name: str) -> set[str]:
    """The settings of algorithm ``name`` that a resumed run of it cannot change."""
    return set(algorithm(name).fixed)
