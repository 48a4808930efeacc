"""The physics of the env families that can be randomized: which values, from which range, how
they are put into an env, and the one wrapper that puts them in before every reset.

One table, :data:`FAMILIES`, says it for each env id. Uniform randomization (``randomize.py``) and
automatic domain randomization (``adr.py``) both draw from it, and both hand their draws to
:class:`WithPhysics`.

When the values take effect (read from gymnasium 1.x's source):

* ``LunarLander``: ``reset`` builds a new ``Box2D.b2World(gravity=(0, self.gravity))`` (the
  constructor's world is thrown away), so a gravity set before a reset is the gravity of that
  episode. ``reset`` reads ``enable_wind`` (it then draws the wind and torque phases
  ``wind_idx``/``torque_idx``), and ``step`` reads ``enable_wind``, ``wind_power`` and
  ``turbulence_power`` on every step. The constructor asserts ``-12 < gravity < 0`` (strictly) and
  only warns outside ``0 <= wind_power <= 20`` and ``0 <= turbulence_power <= 2``; setting the
  attributes checks nothing, so the ranges below stay inside those bounds.
* ``CartPole``: ``reset`` reads no physics; ``step`` reads ``gravity``, ``masspole``, ``length``
  (half the pole's length) and the derived ``total_mass = masspole + masscart`` and
  ``polemass_length = masspole * length``, which the constructor computes once, so its apply
  function recomputes them.

Physics are applied to ``env.unwrapped`` *just before* a reset (switching LunarLander's wind on in
mid-episode would step without wind phases).

To add an env: one :class:`Family` entry in :data:`FAMILIES` (ranges, an apply function, an
evaluation grid).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import gymnasium as gym
import numpy as np

from utils import UsageError

Value = Union[float, bool]

# Mixed into every seed, so the physics stream is not the env's own stream (gymnasium seeds its
# ``np_random`` from the same integer the same way).
_SALT = 0x5EED_0F_D0


def physics_stream(seed: int, *stream: int) -> np.random.Generator:
    """The random stream physics are drawn from, for ``seed`` (``stream`` tells apart the streams
    of several users of one seed, e.g. ADR's): never the env's own stream of that seed."""
    return np.random.default_rng([int(seed), _SALT, *stream])


@dataclass(frozen=True)
class Uniform:
    """A float drawn uniformly from ``[low, high)``."""

    low: float
    high: float

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.low, self.high))

    def contains(self, value: Any) -> bool:
        return self.low <= value < self.high


@dataclass(frozen=True)
class Coin:
    """``True`` or ``False``, each with probability 1/2."""

    def sample(self, rng: np.random.Generator) -> bool:
        return bool(rng.random() < 0.5)

    def contains(self, value: Any) -> bool:
        return isinstance(value, bool)


@dataclass(frozen=True)
class Family:
    """How one env family's physics are randomized.

    ``ranges``: name -> distribution (the names are attributes of ``env.unwrapped``).
    ``apply(unwrapped_env, physics)``: puts the values into the env (before a reset).
    ``grid``: evaluation axes (name -> values); ``grid_fixed``: every other value in each cell.
    ``nominal``: the env's default physics in these names (where ADR's ranges start, and the one
    point a run on the default physics trains on). ``adr_thresholds``: ADR's default (low, high)
    mean returns at a boundary, below which its range narrows and at or above which it widens.
    """

    ranges: dict[str, Union[Uniform, Coin]]
    apply: Callable[[gym.Env, dict[str, Value]], None]
    grid: dict[str, tuple[Value, ...]]
    nominal: dict[str, Value]
    adr_thresholds: tuple[float, float]
    grid_fixed: dict[str, Value] = field(default_factory=dict)


def _set_attributes(env: gym.Env, physics: dict[str, Value]) -> None:
    for name, value in physics.items():
        setattr(env, name, value)


def _apply_cartpole(env: gym.Env, physics: dict[str, Value]) -> None:
    _set_attributes(env, physics)
    env.total_mass = env.masspole + env.masscart  # derived once in CartPoleEnv.__init__
    env.polemass_length = env.masspole * env.length


# LunarLander: the tutorial's ranges, which are the bounds gymnasium's constructor checks. Gravity
# keeps 0.01 inside its strict (-12, 0), so every draw is also a valid ``gym.make`` argument.
# Grid cells: wind on, no turbulence, so the wind_power 0 column is calm air. The default physics
# (gravity -10, wind off) are, in these names, wind on at power 0 with no turbulence: the same air.
# ADR widens a range while the agent lands at its edge (200: "solved") and narrows it below 100.
_LUNAR_LANDER = Family(
    ranges={
        "gravity": Uniform(-11.99, -0.01),
        "enable_wind": Coin(),
        "wind_power": Uniform(0.0, 20.0),
        "turbulence_power": Uniform(0.0, 2.0),
    },
    apply=_set_attributes,
    grid={"gravity": (-11.0, -9.0, -7.0, -5.0, -3.0, -1.0), "wind_power": (0.0, 5.0, 10.0, 15.0, 20.0)},
    nominal={"gravity": -10.0, "enable_wind": True, "wind_power": 0.0, "turbulence_power": 0.0},
    adr_thresholds=(100.0, 200.0),
    grid_fixed={"enable_wind": True, "turbulence_power": 0.0},
)

# CartPole (defaults: gravity 9.8, masspole 0.1, length 0.5 = half the pole, masscart 1.0):
# gravity about 0.5x-1.5x of Earth's; pole 0.5x-5x as heavy (up to half the cart); pole half-length
# 0.5x-2x (the cart's mass, 1.0, the push, 10 N, and the 0.02 s step stay as they are).
# Grid cells: gravity x half-length, pole mass at its default. ADR widens a range while the pole
# stays up at its edge (475 of the 500 steps) and narrows it below 300.
_CARTPOLE = Family(
    ranges={"gravity": Uniform(5.0, 15.0), "masspole": Uniform(0.05, 0.5), "length": Uniform(0.25, 1.0)},
    apply=_apply_cartpole,
    grid={"gravity": (5.0, 7.5, 10.0, 12.5, 15.0), "length": (0.25, 0.5, 0.75, 1.0)},
    nominal={"gravity": 9.8, "masspole": 0.1, "length": 0.5},
    adr_thresholds=(300.0, 475.0),
    grid_fixed={"masspole": 0.1},
)

FAMILIES: dict[str, Family] = {
    "LunarLander-v3": _LUNAR_LANDER,
    "LunarLanderContinuous-v3": _LUNAR_LANDER,
    "CartPole-v1": _CARTPOLE,
}


def check_randomizable(env_id: str, flag: str = "--randomize-domain") -> None:
    """Raise `UsageError` (one line, naming the envs it knows) unless `env_id` is in :data:`FAMILIES`."""
    if env_id not in FAMILIES:
        raise UsageError(f"{flag} knows {', '.join(FAMILIES)}; not {env_id}")


def family_of(env_id: str) -> Family:
    """The physics family of ``env_id``, or a one-line `UsageError`."""
    check_randomizable(env_id)
    return FAMILIES[env_id]


class WithPhysics(gym.Wrapper):
    """An env whose physics are put in before every reset: those of :meth:`next_physics`, which
    each way of choosing them defines; returned in ``info["physics"]`` and kept in ``self.physics``."""

    def __init__(self, env: gym.Env, env_id: str) -> None:
        super().__init__(env)
        self.env_id = env_id
        self.family = family_of(env_id)
        self.physics: dict[str, Value] = {}

    def next_physics(self, seed: Optional[int]) -> dict[str, Value]:
        """The physics of the episode about to start (``seed``: the reset's, if any)."""
        raise NotImplementedError

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None):
        self.physics = self.next_physics(seed)
        self.family.apply(self.env.unwrapped, dict(self.physics))
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "physics": dict(self.physics)}
