"""Domain randomization of an env's physics (``--randomize-domain``, ``--randomize-every``), drawn
from the ranges of ``physics.FAMILIES``. Two ways:

* ``--randomize-every never`` (the tutorial's way): :func:`initial_kwargs` draws each env's physics
  once from the run's seed, and :class:`FixedPhysics` puts them into the env at every reset
  (CartPole's constructor takes no physics, so ``gym.make`` keyword arguments would not do).
* ``--randomize-every episode``: :class:`RandomizedPhysics` draws new physics at every reset, so a
  few envs do not overfit a few fixed physics.

``--randomize-domain adr`` draws from ranges that move with the returns (``adr.py``). The grid of
physics an agent is evaluated on, and ``--physics``, are here too.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import gymnasium as gym
import numpy as np

from adr import ADR, ADRPhysics
from physics import Uniform, Value, WithPhysics, check_randomizable, family_of, physics_stream
from utils import UsageError


def draw(env_id: str, rng: np.random.Generator) -> dict[str, Value]:
    """One draw of `env_id`'s physics: name -> value (floats and bools), in ``physics.FAMILIES`` order."""
    return {name: spec.sample(rng) for name, spec in family_of(env_id).ranges.items()}


def apply(env: gym.Env, env_id: str, physics: dict[str, Value]) -> None:
    """Put `physics` into ``env.unwrapped``; they hold from the next reset on."""
    family_of(env_id).apply(env.unwrapped, dict(physics))


def initial_kwargs(env_id: str, num_envs: int, seed: int) -> list[dict[str, Value]]:
    """Each env's physics, drawn once and reproducibly from `seed` (env i's differ from env j's).

    Give them to :class:`FixedPhysics` (LunarLander's are also valid ``gym.make`` keyword arguments).
    """
    rng = physics_stream(seed)
    return [draw(env_id, rng) for _ in range(num_envs)]


class RandomizedPhysics(WithPhysics):
    """New physics at every reset, drawn from the wrapper's own stream (seeded from `seed`); a
    ``reset(seed=s)`` reseeds that stream from ``s`` first, so a seeded run draws the same physics."""

    def __init__(self, env: gym.Env, env_id: str, seed: int = 0) -> None:
        super().__init__(env, env_id)
        self.rng = physics_stream(seed)

    def next_physics(self, seed: Optional[int]) -> dict[str, Value]:
        if seed is not None:
            self.rng = physics_stream(seed)
        return draw(self.env_id, self.rng)


class FixedPhysics(WithPhysics):
    """The same `physics` at every reset (``--randomize-every never`` for envs whose constructor
    takes no physics, and a grid's cells)."""

    def __init__(self, env: gym.Env, env_id: str, physics: dict[str, Value]) -> None:
        super().__init__(env, env_id)
        self.fixed = dict(physics)

    def next_physics(self, seed: Optional[int]) -> dict[str, Value]:
        return dict(self.fixed)


def grid(env_id: str) -> tuple[tuple[str, ...], tuple[tuple[Value, ...], ...]]:
    """The evaluation grid: (axis names, each axis's values). Cells are the product of the axes;
    :func:`cell_kwargs` gives one cell's physics.

    LunarLander: gravity -11, -9, ..., -1 x wind_power 0, 5, ..., 20 (wind on, turbulence 0).
    CartPole: gravity 5, 7.5, ..., 15 x length (half-pole) 0.25, 0.5, 0.75, 1.0 (masspole 0.1).
    """
    axes = family_of(env_id).grid
    return tuple(axes), tuple(axes.values())


def cell_kwargs(env_id: str, **values: Value) -> dict[str, Value]:
    """One grid cell's full physics: the family's ``grid_fixed`` values overridden by `values`
    (any randomized names, normally the grid's axes), every randomized name with a value, for
    :class:`FixedPhysics` (LunarLander's are also valid ``gym.make`` keyword arguments)."""
    family = family_of(env_id)
    unknown = sorted(set(values) - set(family.ranges))
    if unknown:
        raise UsageError(f"{env_id} has no randomized physics {', '.join(unknown)} (it has {', '.join(family.ranges)})")
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
    family = family_of(env_id)
    unknown = sorted(set(values) - set(family.ranges))
    if unknown:
        raise UsageError(f"{env_id} has no randomized physics {', '.join(unknown)} (it has {', '.join(family.ranges)})")
    physics = {**family.nominal, **family.grid_fixed, **values}
    for name, value in values.items():
        spec = family.ranges[name]
        if isinstance(spec, Uniform) and not spec.low <= value <= spec.high:
            raise UsageError(f"--physics {name}={value:g} is outside {env_id}'s range {spec.low:g} to {spec.high:g}")
    return physics


Ranges = dict[str, tuple[float, float]]  # name -> (low, high), both included


def training_ranges(
    env_id: str, randomized: str = "", physics: str = "", adr_ranges: Optional[dict[str, list[float]]] = None
) -> Ranges:
    """The physics a run trained on, as a closed range for each float of ``physics.FAMILIES`` (the
    grid tells its cells inside them from those held out): the family's whole ranges with
    ``randomized="uniform"``, ADR's ranges as they stood (``adr_ranges``) with ``"adr"``, the one
    cell of ``physics`` (``--physics``), else the default physics (the family's ``nominal``)."""
    family = family_of(env_id)
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
    return all(
        ranges[name][0] - 1e-9 <= float(value) <= ranges[name][1] + 1e-9
        for name, value in values.items()
        if name in ranges
    )


def physics_wrapper(
    env_id: str,
    seed: int,
    every: str = "episode",
    fixed: Optional[dict[str, Value]] = None,
    outer: Optional[Callable[[int, gym.Env], gym.Env]] = None,
    adr: Optional[ADR] = None,
) -> Callable[[int, gym.Env], gym.Env]:
    """``wrap(i, env)`` for a vector env (``gym_vec_env.GymVecEnv``): env i with its physics.

    ``fixed``: every env plays those physics (a grid cell). ``adr``: every env draws from that
    ``adr.ADR`` (one process only). Otherwise ``every="episode"`` draws
    env i's physics at every reset (its stream seeded by the reset seed the vector env gives it,
    ``seed + i``), ``every="never"`` gives env i the i-th draw of :func:`initial_kwargs`, for good.
    ``outer(i, env)``, when given, wraps the result. Picklable (without ``adr``), for worker processes.
    """
    check_randomizable(env_id)
    return functools.partial(_with_physics, env_id=env_id, seed=seed, every=every, fixed=fixed, outer=outer, adr=adr)


def _with_physics(
    i: int,
    env: gym.Env,
    *,
    env_id: str,
    seed: int,
    every: str,
    fixed: Optional[dict[str, Value]],
    outer: Optional[Callable[[int, gym.Env], gym.Env]],
    adr: Optional[ADR] = None,
) -> gym.Env:
    if adr is not None:
        env = ADRPhysics(env, env_id, adr)
    elif fixed is not None:
        env = FixedPhysics(env, env_id, fixed)
    elif every == "never":
        env = FixedPhysics(env, env_id, initial_kwargs(env_id, i + 1, seed)[i])
    else:
        env = RandomizedPhysics(env, env_id, seed + i)
    return outer(i, env) if outer is not None else env
