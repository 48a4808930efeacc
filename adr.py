"""Automatic domain randomization (ADR; OpenAI et al. 2019, "Solving Rubik's Cube with a Robot
Hand", section 5): ``--randomize-domain adr``.

Uniform randomization draws every episode's physics from the whole ranges of ``physics.FAMILIES``
from the first update on, when the agent cannot yet land even on the default physics. ADR starts
each float of the family (LunarLander: gravity, wind power, turbulence; CartPole: gravity, pole
mass, half-length) at its default value (``Family.nominal``) and moves each range's two edges on
its own, by how well the agent plays there:

* every episode draws its physics uniformly from the current ranges. With probability
  ``boundary_prob`` one range, picked at random with one of its movable edges, is instead set at
  that edge for the episode;
* the raw return of each such episode goes into that edge's buffer. When the buffer holds
  ``episodes`` returns, their mean decides, and the buffer empties:

      mean >= high: the edge moves out by ``step`` (a share of the family's whole range);
      mean <  low:  the edge moves back in by ``step``, never past the default value;
      otherwise:    it stays;

* an edge never moves past the family's bounds; an edge that starts at a bound (LunarLander's
  wind power and turbulence start at 0) never moves. Switches (LunarLander's ``enable_wind``) stay
  at their default value, which for LunarLander is wind on: the wind then blows as hard as the
  wind-power range says, from calm air up.

One :class:`ADR` holds the ranges of a run; every env of the run's vector env (in this process:
``--vec-env sync``) draws from it and reports to it through its :class:`ADRPhysics` wrapper. Its
:meth:`ADR.state_dict` (ranges, buffers, random stream) goes into every checkpoint, so a resumed
run carries the ranges on; the ranges are logged as ``adr/<name>_low`` and ``adr/<name>_high``.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import gymnasium as gym

from physics import FAMILIES, Uniform, WithPhysics, physics_stream
from utils import UsageError

Edge = tuple[str, int]  # (a physics name, 0 for its low edge or 1 for its high one)


class ADR:
    """The ranges of one ADR run, and the rule that moves them (the module's docstring)."""

    def __init__(
        self,
        env_id: str,
        low: Optional[float] = None,
        high: Optional[float] = None,
        step: float = 0.05,
        episodes: int = 10,
        boundary_prob: float = 0.5,
        seed: int = 0,
    ) -> None:
        family = FAMILIES[env_id]
        default_low, default_high = family.adr_thresholds
        self.low = default_low if low is None else float(low)
        self.high = default_high if high is None else float(high)
        check_thresholds(self.low, self.high)
        self.episodes, self.boundary_prob = int(episodes), float(boundary_prob)
        self.nominal = dict(family.nominal)
        self.bounds = {name: (spec.low, spec.high) for name, spec in family.ranges.items() if isinstance(spec, Uniform)}
        self.steps = {name: step * (high - low) for name, (low, high) in self.bounds.items()}
        self.ranges = {name: [float(self.nominal[name])] * 2 for name in self.bounds}
        # The edges that can move: not one that starts at its bound.
        self.edges: list[Edge] = [
            (name, side) for name in self.bounds for side in (0, 1) if self.nominal[name] != self.bounds[name][side]
        ]
        self.buffers: dict[Edge, list[float]] = {edge: [] for edge in self.edges}
        self.rng = physics_stream(seed, 0xAD2)

    def sample(self) -> tuple[dict[str, Any], Optional[Edge]]:
        """One episode's physics (every name of the family), and the edge it plays at, if any."""
        physics = {name: self.nominal[name] for name in self.nominal}
        for name, (low, high) in self.ranges.items():
            physics[name] = float(self.rng.uniform(low, high)) if high > low else low
        edge = None
        if self.edges and self.rng.random() < self.boundary_prob:
            edge = self.edges[int(self.rng.integers(len(self.edges)))]
            physics[edge[0]] = self.ranges[edge[0]][edge[1]]
        return physics, edge

    def record(self, edge: Edge, episode_return: float) -> None:
        """An episode played at ``edge`` ended with ``episode_return``; moves the edge when its buffer is full."""
        buffer = self.buffers[edge]
        buffer.append(float(episode_return))
        if len(buffer) < self.episodes:
            return
        mean = sum(buffer) / len(buffer)
        buffer.clear()
        name, side = edge
        outward = -1.0 if side == 0 else 1.0
        if mean >= self.high:
            moved = self.ranges[name][side] + outward * self.steps[name]
            bound = self.bounds[name][side]
            self.ranges[name][side] = max(moved, bound) if side == 0 else min(moved, bound)
        elif mean < self.low:
            moved = self.ranges[name][side] - outward * self.steps[name]
            nominal = self.nominal[name]
            self.ranges[name][side] = min(moved, nominal) if side == 0 else max(moved, nominal)

    def scalars(self) -> dict[str, float]:
        """``{"<name>_low": ..., "<name>_high": ...}`` of every range, for the logs."""
        return {
            f"{name}_{side}": value
            for name, (low, high) in self.ranges.items()
            for side, value in (("low", low), ("high", high))
        }

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: ranges, the edges' buffers, the random stream (``weights_only`` loads it)."""
        bit_generator = self.rng.bit_generator.state
        return {
            "ranges": {name: list(edges) for name, edges in self.ranges.items()},
            "buffers": {f"{name}/{side}": list(values) for (name, side), values in self.buffers.items()},
            "rng": {
                "state": str(bit_generator["state"]["state"]),
                "inc": str(bit_generator["state"]["inc"]),
                "has_uint32": int(bit_generator["has_uint32"]),
                "uinteger": int(bit_generator["uinteger"]),
            },
        }

    def load_state_dict(self, data: dict[str, Any]) -> None:
        self.ranges = {name: [float(low), float(high)] for name, (low, high) in data["ranges"].items()}
        for key, values in data["buffers"].items():
            name, side = key.rsplit("/", 1)
            self.buffers[(name, int(side))] = [float(v) for v in values]
        state = self.rng.bit_generator.state
        state["state"] = {"state": int(data["rng"]["state"]), "inc": int(data["rng"]["inc"])}
        state["has_uint32"], state["uinteger"] = data["rng"]["has_uint32"], data["rng"]["uinteger"]
        self.rng.bit_generator.state = state


def check_thresholds(low: float, high: float) -> None:
    """One-line `UsageError` unless both thresholds are finite and ``low <= high``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise UsageError(f"--adr-low and --adr-high must be finite numbers, got {low:g} and {high:g}")
    if low > high:
        raise UsageError(f"--adr-low {low:g} is above --adr-high {high:g}: a range would widen and narrow at once")


def from_config(config: Any) -> Optional[ADR]:
    """The ADR of a run's settings (``config.adr``), or None unless ``--randomize-domain adr``."""
    if config.randomize_domain != "adr":
        return None
    settings = config.adr
    return ADR(
        config.env_name,
        settings.low,
        settings.high,
        settings.step,
        settings.episodes,
        settings.boundary_prob,
        seed=config.seed,
    )


class ADRPhysics(WithPhysics):
    """Env physics drawn from a shared :class:`ADR` at every reset, and the episode's raw return
    reported to it when the episode was played at an edge."""

    def __init__(self, env: gym.Env, env_id: str, adr: ADR) -> None:
        super().__init__(env, env_id)
        self.adr = adr
        self.edge: Optional[Edge] = None
        self.episode_return = 0.0

    def next_physics(self, seed: Optional[int]) -> dict[str, Any]:
        physics, self.edge = self.adr.sample()
        self.episode_return = 0.0
        return physics

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return += float(reward)
        if (terminated or truncated) and self.edge is not None:
            self.adr.record(self.edge, self.episode_return)
            self.edge = None
        return obs, reward, terminated, truncated, info
