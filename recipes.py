"""The defaults of each env family, where they depart from ``config.Config``'s (Atari's): the RL Zoo's
A2C settings for vector-observation envs and its recipes for single ids. Each algorithm takes them
as they are or declares its own in its file (``algorithms.Algorithm.defaults``: PPO's, GRPO's), and
``main.py`` applies the result to a new run's untyped settings (:func:`with_env_defaults`); a
setting is named as in ``config.setting_names`` (``"clip.epochs"``)."""

from __future__ import annotations

from typing import Any

from config import PRESETS, Config, get_setting, with_settings
from utils import UsageError

# Settings that differ from the defaults (Atari's) for other envs, as the RL Zoo's hyperparameter
# table for A2C: any env with a vector observation gets VECTOR_DEFAULTS, and an id listed in
# ENV_DEFAULTS its own on top. A typed flag always wins; a run's config.json holds what it ran with.
VECTOR_DEFAULTS: dict[str, Any] = {"recurrent": False, "num_envs": 8, "num_updates": 25_000}
ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    # The RL Zoo's A2C on CartPole-v1 (n_envs 8, ent_coef 0), 1M env steps. LunarLander-v3 starts
    # from the Zoo's LunarLander-v2 (a learning rate decayed linearly to 0, ent_coef 1e-5) with a
    # batch 24 times its size at 3 times its rate, 1M env steps: its agents played better than
    # those of 32 envs on every seed tried (docs/control.md#defaults).
    "CartPole-v1": {"entropy_coeff": 0.0},
    "LunarLander-v3": {
        "num_envs": 192,
        "num_updates": 1_042,
        "gamma": 0.999,
        "gae_lambda": 0.98,
        "lr": 2.5e-3,
        "lr_schedule": "linear",
        "entropy_coeff": 1e-5,
    },
    # The Zoo's LunarLanderContinuous-v2 with its state-dependent exploration (--sde): 4 envs x 8
    # steps, GAE 0.9, no entropy bonus, log-std -2, observations and rewards normalized, lr 7e-4
    # decayed linearly, 5M env steps.
    "LunarLanderContinuous-v3": {
        "num_envs": 4,
        "rollout_size": 8,
        "num_updates": 156_250,
        "gae_lambda": 0.9,
        "entropy_coeff": 0.0,
        "log_std_init": -2.0,
        "sde": True,
        "normalize_obs": True,
        "normalize_reward": True,
        "lr_schedule": "linear",
    },
    # The Zoo's Pendulum-v1, with its state-dependent exploration (--sde): 8 envs x 8 steps, gamma
    # 0.9, GAE 0.9, no entropy bonus, log-std -2, normalized, lr 7e-4 decayed linearly, 1M env steps.
    "Pendulum-v1": {
        "num_envs": 8,
        "rollout_size": 8,
        "num_updates": 15_625,
        "gamma": 0.9,
        "gae_lambda": 0.9,
        "entropy_coeff": 0.0,
        "log_std_init": -2.0,
        "sde": True,
        "normalize_obs": True,
        "normalize_reward": True,
        "lr_schedule": "linear",
    },
    # The Zoo's BipedalWalker-v3, with --sde: 16 envs x 8 steps, GAE 0.9, no entropy bonus, value
    # coefficient 0.4, log-std -2, normalized, 9.6e-4 decayed linearly, 39,063 updates (5M env steps).
    "BipedalWalker-v3": {
        "num_envs": 16,
        "rollout_size": 8,
        "num_updates": 39_063,
        "gae_lambda": 0.9,
        "entropy_coeff": 0.0,
        "value_coeff": 0.4,
        "lr": 9.6e-4,
        "log_std_init": -2.0,
        "sde": True,
        "normalize_obs": True,
        "normalize_reward": True,
        "lr_schedule": "linear",
    },
}


# The settings that shape a linear schedule's decay, by the schedule's setting: a schedule typed as
# constant beside a preset drops them, as they would be refused beside it.
DECAY_SHAPES = {"lr_schedule": ("lr_decay_start", "lr_decay_from"), "entropy_schedule": ("entropy_decay_start",)}


def family_defaults(env_name: str, vector: bool) -> dict[str, Any]:
    """The settings in which ``env_name``'s family departs from the Atari defaults (none for Atari games)."""
    return {**VECTOR_DEFAULTS, **ENV_DEFAULTS.get(env_name, {})} if vector else {}


def defaults_for(env_name: str, vector: bool, algo: str = "a2c") -> dict[str, Any]:
    """The settings in which a run of ``algo`` on ``env_name`` departs from the Atari defaults (empty
    for A2C on Atari games): the env family's, as the algorithm takes them."""
    from algorithms import algorithm

    return algorithm(algo).defaults(env_name, family_defaults(env_name, vector))


def with_env_defaults(config: Config, typed: set[str]) -> Config:
    """``config`` with the defaults of its env's family and algorithm (:func:`defaults_for`), then of
    its preset (``config.PRESETS``), for every setting not typed; then the settings its algorithm
    fits to those (``algorithms.Algorithm.fit``: a recurrent PPO's sequences), where not typed."""
    from algorithms import algorithm
    from envs import check_env_id, is_atari

    check_env_id(config.env_name)
    atari = is_atari(config.env_name)
    values = defaults_for(config.env_name, vector=not atari, algo=config.algo)
    if config.preset:
        if not atari:
            raise UsageError(f"--preset {config.preset} is for Atari games, not {config.env_name}")
        preset = PRESETS[config.preset]
        for schedule, shape in DECAY_SHAPES.items():
            if schedule in typed and get_setting(config, schedule) != "linear":  # typed constant: no decay to shape
                preset = {name: value for name, value in preset.items() if name not in shape}
        values.update(preset)
    config = with_settings(config, {name: value for name, value in values.items() if name not in typed})
    fit = algorithm(config.algo).fit
    fitted = fit(config, typed) if fit is not None else {}
    return with_settings(config, {name: value for name, value in fitted.items() if name not in typed})
