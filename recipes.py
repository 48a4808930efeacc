"""A new run's defaults: its env family's (``families.EnvFamily.defaults`` and ``presets``; the
vector family's are ``envs.VECTOR_DEFAULTS`` and ``envs.ENV_DEFAULTS``), which each algorithm takes
as they are or replaces with its own (``algorithms.Algorithm.defaults``: PPO's, GRPO's). ``main.py``
applies them to the settings not typed (:func:`with_env_defaults`); a setting is named as in
``config.setting_names`` (``"clip.epochs"``)."""

from __future__ import annotations

from typing import Any, Optional

from config import PRESETS, Config, get_setting, with_settings
from envs import ENV_DEFAULTS, VECTOR_DEFAULTS, family_of
from families import EnvFamily, with_preset
from utils import UsageError

__all__ = ["DECAY_SHAPES", "ENV_DEFAULTS", "PRESETS", "VECTOR_DEFAULTS", "defaults_for", "with_env_defaults"]

# The settings that shape a linear schedule's decay, by the schedule's setting: a schedule typed as
# constant beside a preset drops them, as they would be refused beside it.
DECAY_SHAPES = {"lr_schedule": ("lr_decay_start", "lr_decay_from"), "entropy_schedule": ("entropy_decay_start",)}


def defaults_for(env_name: str, algo: str = "a2c", family: Optional[EnvFamily] = None) -> dict[str, Any]:
    """The settings in which a run of ``algo`` on ``env_name`` departs from ``config.Config``'s (none for
    A2C on Atari games): its env family's (``EnvFamily.defaults``; ``family``: that family's, for an id
    of none), as the algorithm takes them."""
    from algorithms import algorithm

    family = family or family_of(env_name)
    return algorithm(algo).defaults(env_name, family)


def with_env_defaults(config: Config, typed: set[str]) -> Config:
    """``config`` with the defaults of its env's family and algorithm (:func:`defaults_for`), then of
    its preset (the family's ``presets``), for every setting not typed; then the settings its algorithm
    fits to those (``algorithms.Algorithm.fit``: a recurrent PPO's sequences), where not typed."""
    from algorithms import algorithm

    family = family_of(config.env_name)
    values = defaults_for(config.env_name, config.algo, family)
    if config.preset:
        if config.preset not in family.presets:
            owners = " or ".join(f.label for f in with_preset(config.preset))
            raise UsageError(f"--preset {config.preset} is for {owners}, not {config.env_name}")
        preset = dict(family.presets[config.preset])
        for schedule, shape in DECAY_SHAPES.items():
            if schedule in typed and get_setting(config, schedule) != "linear":  # typed constant: no decay to shape
                preset = {name: value for name, value in preset.items() if name not in shape}
        values.update(preset)
    config = with_settings(config, {name: value for name, value in values.items() if name not in typed})
    fit = algorithm(config.algo).fit
    fitted = fit(config, typed) if fit is not None else {}
    return with_settings(config, {name: value for name, value in fitted.items() if name not in typed})
