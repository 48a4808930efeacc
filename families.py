"""Env families: what the agent knows of one kind of env, in one record.

An env id belongs to a family, and the family says everything that differs between kinds of env:

* which ids it owns (``owns``), and how to check one before anything is written (``check``);
* its envs, for training (``make_envs``, as ``envs.make_vec_env`` takes them) and for evaluation
  (``make_eval_envs``, as ``envs.make_eval_envs``), and the in-process path videos are recorded on;
* what the policy sees (``observes``): ``"images"`` ``[C, H, W]`` for the conv encoders (``--arch``,
  ``--frame-size``, ``--conv-filters``, ``--icm``) or ``"vectors"`` ``[D]`` for the MLP encoder
  (``--obs-history``, ``--prev-action-reward``); a setting of the other kind is refused;
* its defaults, where they depart from ``config.Config``'s, and its presets (``recipes.py``);
* the device a run takes when neither ``--cuda`` nor ``--no-cuda`` is typed;
* its evaluation protocols, and the sticky actions an id sets itself (None: no emulator to repeat actions).

``envs.py`` registers the two built-in families, ``atari`` and ``vector``; ``register_family`` adds
one from anywhere (``tests/test_families.py`` registers a small one and trains it through
``main.py``). A family registered later is asked first, so it can take ids from a built-in one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

OBSERVATIONS = ("images", "vectors")


def _none(env_name: str) -> Optional[float]:
    return None


def _no_defaults(env_name: str) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class EnvFamily:
    name: str
    label: str
    """What its envs are, in a message ("Atari games")."""
    owns: Callable[[str], bool]
    """Whether a registered gymnasium id belongs to it."""
    observes: str
    """``"images"`` or ``"vectors"`` (see the module's docstring)."""
    make_envs: Callable[..., Any]
    """Training envs: ``(env_name, num_envs, n_stack, seed, vec_env, max_episode_frames, ...)`` as
    ``envs.make_vec_env`` takes them; a ``VecEnv``."""
    make_eval_envs: Callable[..., Any]
    """Evaluation envs under a protocol, as ``envs.make_eval_envs`` takes them; a ``VecEnv``."""
    check: Callable[[str], bool]
    """Raises ``UsageError`` in one line if the agent cannot play the id; whether its actions are continuous."""
    defaults: Callable[[str], dict[str, Any]] = _no_defaults
    """The settings in which a run on the id departs from ``config.Config``'s (named as in ``setting_names``)."""
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """``--preset`` name -> its settings."""
    cuda: bool = False
    """Whether a run takes the GPU (where there is one) when neither --cuda nor --no-cuda is typed."""
    protocols: tuple[str, ...] = ("classic",)
    """The evaluation protocols it plays (``--protocol``)."""
    sticky_actions: Callable[[str], Optional[float]] = _none
    """The probability of sticky actions the id sets itself; None: no emulator (``--sticky-actions`` refused)."""
    in_process: str = "sync"
    """The ``--vec-env`` of its envs stepped in this process (where videos are recorded)."""

    def __post_init__(self) -> None:
        if self.observes not in OBSERVATIONS:
            raise ValueError(f"a family observes one of {', '.join(OBSERVATIONS)}, not {self.observes!r}")


FAMILIES: dict[str, EnvFamily] = {}


def register_family(family: EnvFamily) -> None:
    """Add ``family`` (or replace the one of its name); it is asked before those registered earlier."""
    FAMILIES.pop(family.name, None)
    FAMILIES[family.name] = family


def unregister_family(name: str) -> None:
    FAMILIES.pop(name, None)


def owner(env_name: str) -> Optional[EnvFamily]:
    """The family that owns the registered id ``env_name``, the latest registered first; None: none does."""
    return next((family for family in reversed(FAMILIES.values()) if family.owns(env_name)), None)


def with_preset(name: str) -> list[EnvFamily]:
    """The families that have a preset ``name``."""
    return [family for family in FAMILIES.values() if name in family.presets]
