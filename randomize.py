"""Domain randomization of an env's physics (``--randomize-domain``, ``--randomize-every``).

One table, :data:`FAMILIES`, says for each env id which physics values are drawn, from which
range, and how they are put into an env. Two ways to use it:

* ``--randomize-every never`` (the tutorial's way): :func:`initial_kwargs` draws each env's physics
  once from the run's seed, and :class:`FixedPhysics` puts them into the env at every reset
  (CartPole's constructor takes no physics, so ``gym.make`` keyword arguments would not do).
* ``--randomize-every episode``: :class:`RandomizedPhysics` draws new physics at every reset, so a
  few envs do not overfit a few fixed physics.

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
  ``polemass_length = masspole * length``, which the constructor computes once, so
  :func:`apply` recomputes them.

Physics are applied to ``env.unwrapped`` *just before* a reset (switching LunarLander's wind on in
mid-episode would step without wind phases).

To add an env: one :class:`Family` entry in :data:`FAMILIES` (ranges, an apply function, an
evaluation grid).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import gymnasium as gym
import numpy as np

from utils import UsageError

Value = Union[float, bool]

# Mixed into every seed, so the physics stream is not the env's own stream (gymnasium seeds its
# ``np_random`` from the same integer the same way).
_SALT = 0x5EED_0F_D0


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
    env.total_mass = env.masspole + env.masscart            # derived once in CartPoleEnv.__init__
    env.polemass_length = env.masspole * env.length


# LunarLander: the tutorial's ranges, which are the bounds gymnasium's constructor checks. Gravity
# keeps 0.01 inside its strict (-12, 0), so every draw is also a valid ``gym.make`` argument.
# Grid cells: wind on, no turbulence, so the wind_power 0 column is calm air. The default physics
# (gravity -10, wind off) are, in these names, wind on at power 0 with no turbulence: the same air.
# ADR widens a range while the agent lands at its edge (200: "solved") and narrows it below 100.
_LUNAR_LANDER = Family(
    ranges={"gravity": Uniform(-11.99, -0.01), "enable_wind": Coin(),
            "wind_power": Uniform(0.0, 20.0), "turbulence_power": Uniform(0.0, 2.0)},
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


def _family(env_id: str) -> Family:
    check_randomizable(env_id)
    return FAMILIES[env_id]


def _generator(seed: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), _SALT])


def draw(env_id: str, rng: np.random.Generator) -> dict[str, Value]:
    """One draw of `env_id`'s physics: name -> value (floats and bools), in :data:`FAMILIES` order."""
    return {name: spec.sample(rng) for name, spec in _family(env_id).ranges.items()}


def apply(env: gym.Env, env_id: str, physics: dict[str, Value]) -> None:
    """Put `physics` into ``env.unwrapped``; they hold from the next reset on."""
    _family(env_id).apply(env.unwrapped, dict(physics))


def initial_kwargs(env_id: str, num_envs: int, seed: int) -> list[dict[str, Value]]:
    """Each env's physics, drawn once and reproducibly from `seed` (env i's differ from env j's).

    Give them to :class:`FixedPhysics` (LunarLander's are also valid ``gym.make`` keyword arguments).
    """
    rng = _generator(seed)
    return [draw(env_id, rng) for _ in range(num_envs)]


class RandomizedPhysics(gym.Wrapper):
    """New physics at every reset, drawn from the wrapper's own generator (seeded from `seed`).

    A ``reset(seed=s)`` reseeds that generator from ``s`` first, so a seeded run draws the same
    physics sequence. The values are applied to ``env.unwrapped`` before the env's own reset and
    returned in ``info["physics"]``; ``self.physics`` holds the current episode's.
    """

    def __init__(self, env: gym.Env, env_id: str, seed: int = 0) -> None:
        super().__init__(env)
        self.env_id = env_id
        self.family = _family(env_id)
        self.rng = _generator(seed)
        self.physics: dict[str, Value] = {}

    def next_physics(self) -> dict[str, Value]:
        return draw(self.env_id, self.rng)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None):
        if seed is not None:
            self.rng = _generator(seed)
        self.physics = self.next_physics()
        self.family.apply(self.env.unwrapped, dict(self.physics))
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "physics": dict(self.physics)}


class FixedPhysics(RandomizedPhysics):
    """The same `physics` at every reset (``--randomize-every never`` for envs whose constructor
    takes no physics), also reported in ``info["physics"]``."""

    def __init__(self, env: gym.Env, env_id: str, physics: dict[str, Value]) -> None:
        super().__init__(env, env_id)
        self.fixed = dict(physics)

    def next_physics(self) -> dict[str, Value]:
        return dict(self.fixed)


def grid(env_id: str) -> tuple[tuple[str, ...], tuple[tuple[Value, ...], ...]]:
    """The evaluation grid: (axis names, each axis's values). Cells are the product of the axes;
    :func:`cell_kwargs` gives one cell's physics.

    LunarLander: gravity -11, -9, ..., -1 x wind_power 0, 5, ..., 20 (wind on, turbulence 0).
    CartPole: gravity 5, 7.5, ..., 15 x length (half-pole) 0.25, 0.5, 0.75, 1.0 (masspole 0.1).
    """
    axes = _family(env_id).grid
    return tuple(axes), tuple(axes.values())


def cell_kwargs(env_id: str, **values: Value) -> dict[str, Value]:
    """One grid cell's full physics: the family's ``grid_fixed`` values overridden by `values`
    (any randomized names, normally the grid's axes), every randomized name with a value, for
    :class:`FixedPhysics` (LunarLander's are also valid ``gym.make`` keyword arguments)."""
    family = _family(env_id)
    unknown = sorted(set(values) - set(family.ranges))
    if unknown:
        raise UsageError(f"{env_id} has no randomized physics {', '.join(unknown)} "
                         f"(it has {', '.join(family.ranges)})")
    physics = {**family.grid_fixed, **values}
    missing = [name for name in family.ranges if name not in physics]
    if missing:
        raise UsageError(f"a {env_id} grid cell needs {', '.join(missing)}")
    return {name: physics[name] for name in family.ranges}


def parse_physics(env_id: str, text: str) -> dict[str, Value]:
    """``--physics`` (``"gravity=-3,wind_power=15"``): the full physics of every env of a run, the
    values named over the grid's fixed ones over the default physics (``nominal``), so that a grid
    cell's axes name one of its cells; one-line `UsageError` for anything else."""
    values: dict[str, Value] = {}
    for part in text.split(","):
        name, equals, number = part.partition("=")
        try:
            value = float(number)
        except ValueError:
            value = float("nan")
        if not equals or not np.isfinite(value):
            raise UsageError(f"--physics takes NAME=NUMBER[,NAME=NUMBER...], got {text!r}")
        values[name.strip()] = value
    family = _family(env_id)
    unknown = sorted(set(values) - set(family.ranges))
    if unknown:
        raise UsageError(f"{env_id} has no randomized physics {', '.join(unknown)} "
                         f"(it has {', '.join(family.ranges)})")
    physics = {**family.nominal, **family.grid_fixed, **values}
    for name, value in values.items():
        spec = family.ranges[name]
        if isinstance(spec, Uniform) and not spec.low <= value <= spec.high:
            raise UsageError(f"--physics {name}={value:g} is outside {env_id}'s range {spec.low:g} to {spec.high:g}")
    return physics


Ranges = dict[str, tuple[float, float]]  # name -> (low, high), both included


def training_ranges(env_id: str, randomized: str = "", physics: str = "",
                    adr_ranges: Optional[dict[str, Any]] = None) -> Ranges:
    """The physics a run trained on, as a closed range for each float of :data:`FAMILIES` (the
    grid tells its cells inside them from those held out): the family's whole ranges with
    ``randomized="uniform"``, ADR's ranges as they stood (``adr_ranges``) with ``"adr"``, the one
    cell of ``physics`` (``--physics``), else the default physics (the family's ``nominal``)."""
    family = _family(env_id)
    floats = [name for name, spec in family.ranges.items() if isinstance(spec, Uniform)]
    if randomized == "adr":
        if adr_ranges is None:
            raise ValueError("an ADR run's ranges are in its checkpoint")
        return {name: (float(adr_ranges[name][0]), float(adr_ranges[name][1])) for name in floats}
    if randomized:
        return {name: (family.ranges[name].low, family.ranges[name].high) for name in floats}
    point = parse_physics(env_id, physics) if physics else family.nominal
    return {name: (float(point[name]), float(point[name])) for name in floats}


def inside(values: dict[str, Value], ranges: Ranges) -> bool:
    """Whether every value that ``ranges`` names lies in its range (a grid cell in a run's training physics)."""
    return all(ranges[name][0] - 1e-9 <= float(value) <= ranges[name][1] + 1e-9
               for name, value in values.items() if name in ranges)


def physics_wrapper(env_id: str, seed: int, every: str = "episode", fixed: Optional[dict[str, Value]] = None,
                    outer: Optional[Callable[[int, gym.Env], gym.Env]] = None,
                    adr: Any = None) -> Callable[[int, gym.Env], gym.Env]:
    """``wrap(i, env)`` for a vector env (``gym_vec_env.GymVecEnv``): env i with its physics.

    ``fixed``: every env plays those physics (a grid cell). ``adr``: every env draws from that
    ``adr.ADR`` (one process only). Otherwise ``every="episode"`` draws
    env i's physics at every reset (its stream seeded by the reset seed the vector env gives it,
    ``seed + i``), ``every="never"`` gives env i the i-th draw of :func:`initial_kwargs`, for good.
    ``outer(i, env)``, when given, wraps the result. Picklable (without ``adr``), for worker processes.
    """
    check_randomizable(env_id)
    return functools.partial(_with_physics, env_id=env_id, seed=seed, every=every, fixed=fixed, outer=outer, adr=adr)


def _with_physics(i: int, env: gym.Env, *, env_id: str, seed: int, every: str,
                  fixed: Optional[dict[str, Value]], outer: Optional[Callable[[int, gym.Env], gym.Env]],
                  adr: Any = None) -> gym.Env:
    if adr is not None:
        from adr import ADRPhysics

        env = ADRPhysics(env, env_id, adr)
    elif fixed is not None:
        env = FixedPhysics(env, env_id, fixed)
    elif every == "never":
        env = FixedPhysics(env, env_id, initial_kwargs(env_id, i + 1, seed)[i])
    else:
        env = RandomizedPhysics(env, env_id, seed + i)
    return outer(i, env) if outer is not None else env
