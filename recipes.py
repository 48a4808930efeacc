"""The defaults of each env family and algorithm, where they depart from ``config.Config``'s (Atari's
A2C): the RL Zoo's A2C settings for vector-observation envs and its recipes for single ids, SB3's PPO,
and GRPO's. ``main.py`` applies them to a new run's untyped settings (:func:`defaults_for`); a setting
is named as in ``config.setting_names`` (``"clip.epochs"``)."""
from __future__ import annotations

from typing import Any

from config import Config, get_setting, with_settings
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
    "LunarLander-v3": {"num_envs": 192, "num_updates": 1_042, "gamma": 0.999, "gae_lambda": 0.98, "lr": 2.5e-3,
                       "lr_schedule": "linear", "entropy_coeff": 1e-5},
    # The Zoo's LunarLanderContinuous-v2 with its state-dependent exploration (--sde): 4 envs x 8
    # steps, GAE 0.9, no entropy bonus, log-std -2, observations and rewards normalized, lr 7e-4
    # decayed linearly, 5M env steps.
    "LunarLanderContinuous-v3": {"num_envs": 4, "rollout_size": 8, "num_updates": 156_250, "gae_lambda": 0.9,
                                 "entropy_coeff": 0.0, "log_std_init": -2.0, "sde": True, "normalize_obs": True,
                                 "normalize_reward": True, "lr_schedule": "linear"},
    # The Zoo's Pendulum-v1, with its state-dependent exploration (--sde): 8 envs x 8 steps, gamma
    # 0.9, GAE 0.9, no entropy bonus, log-std -2, normalized, lr 7e-4 decayed linearly, 1M env steps.
    "Pendulum-v1": {"num_envs": 8, "rollout_size": 8, "num_updates": 15_625, "gamma": 0.9, "gae_lambda": 0.9,
                    "entropy_coeff": 0.0, "log_std_init": -2.0, "sde": True, "normalize_obs": True,
                    "normalize_reward": True, "lr_schedule": "linear"},
    # The Zoo's BipedalWalker-v3, with --sde: 16 envs x 8 steps, GAE 0.9, no entropy bonus, value
    # coefficient 0.4, log-std -2, normalized, 9.6e-4 decayed linearly, 39,063 updates (5M env steps).
    "BipedalWalker-v3": {"num_envs": 16, "rollout_size": 8, "num_updates": 39_063, "gae_lambda": 0.9,
                         "entropy_coeff": 0.0, "value_coeff": 0.4, "lr": 9.6e-4, "log_std_init": -2.0, "sde": True,
                         "normalize_obs": True, "normalize_reward": True, "lr_schedule": "linear"},
}


# --algo grpo on top of its env's defaults: no critic (nor reward normalization, which scales the
# critic's targets and which an env's A2C recipe may turn on), Adam at PPO's 3e-4 (several epochs of
# minibatch steps per update, as PPO, whose settings GRPO's clipped objective shares), 32 envs
# (4 groups of 8), and a budget of env steps rather than updates, since rounds vary in length. A
# round holds thousands of env steps (LunarLander: about 13,000), so it logs and saves more often.
GRPO_DEFAULTS: dict[str, Any] = {"critic": False, "normalize_reward": False, "num_envs": 32, "optimizer": "adam",
                                 "lr": 3e-4, "lr_schedule": "constant", "num_updates": 1_000_000,
                                 "max_env_steps": 1_000_000, "clip.epochs": 8, "clip.minibatches": 16,
                                 "log_interval": 1, "histogram_interval": 10, "checkpoint_interval": 10}


# --algo ppo (vector-observation envs) starts from SB3's PPO rather than from its env's A2C recipe:
# Adam at 3e-4, 8 envs x 256 steps (SB3's 2048 steps a rollout), GAE 0.95, no entropy bonus, each
# minibatch's advantages standardized, 10 epochs of 32 minibatches (64 samples), 1M env steps. The
# rollout is not kept with its graph (every minibatch runs its samples through the network again).
# An update holds thousands of env steps, so it logs, draws histograms and saves more often.
PPO_DEFAULTS: dict[str, Any] = {"num_envs": 8, "rollout_size": 256, "num_updates": 488, "optimizer": "adam",
                                "lr": 3e-4, "lr_schedule": "constant", "gae_lambda": 0.95, "entropy_coeff": 0.0,
                                "normalize_advantages": True, "clip.epochs": 10, "clip.minibatches": 32,
                                "speed.keep_graph": False, "log_interval": 1, "histogram_interval": 10,
                                "checkpoint_interval": 10}
PPO_ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    # The RL Zoo's PPO on LunarLander-v2: 16 envs x 1024 steps, 4 epochs of minibatches of 64 (256),
    # gamma 0.999, GAE 0.98; 61 updates (999,424 env steps). Its entropy coefficient is a tenth of the
    # Zoo's 0.01, whose agents play well only with --deterministic, and above 0, which left a seed
    # short of landing (docs/control.md#ppo-reusing-each-rollout).
    "LunarLander-v3": {"num_envs": 16, "rollout_size": 1024, "num_updates": 61, "clip.epochs": 4,
                       "clip.minibatches": 256, "gamma": 0.999, "gae_lambda": 0.98, "entropy_coeff": 1e-3},
}


# Named presets (--preset NAME, Atari games only): settings over the defaults, under the typed flags.
# fast-cpu trains the recurrent default on a CPU without a GPU: 64x64 frames (smaller ones began to
# learn late on most seeds), 2M env steps, the learning rate and entropy bonus decayed to 0 over the
# last quarter (at a constant rate their noise kept the late games below what the policy plays).
# Its speed and scores: docs/speed.md#the-fast-cpu-preset.
PRESETS: dict[str, dict[str, Any]] = {
    "fast-cpu": {"frame_size": 64, "num_updates": 25_000, "lr_schedule": "linear", "lr_decay_start": 0.75,
                 "entropy_schedule": "linear", "entropy_decay_start": 0.75},
}
# The settings that shape a linear schedule's decay, by the schedule's setting: a schedule typed as
# constant beside a preset drops them, as they would be refused beside it.
DECAY_SHAPES = {"lr_schedule": ("lr_decay_start", "lr_decay_from"), "entropy_schedule": ("entropy_decay_start",)}


def defaults_for(env_name: str, vector: bool, algo: str = "a2c") -> dict[str, Any]:
    """The settings in which ``env_name`` (and ``algo``) depart from the Atari defaults (empty for
    A2C on Atari games)."""
    if algo == "ppo":
        return {**VECTOR_DEFAULTS, **PPO_DEFAULTS, **PPO_ENV_DEFAULTS.get(env_name, {})}
    family = {**VECTOR_DEFAULTS, **ENV_DEFAULTS.get(env_name, {})} if vector else {}
    return {**family, **GRPO_DEFAULTS} if algo == "grpo" else family


def with_env_defaults(config: Config, typed: set[str]) -> Config:
    """``config`` with the defaults of its env's family (``recipes.defaults_for``), and then of its
    preset (``PRESETS``), for every setting not typed."""
    from envs import check_env_id, is_atari

    check_env_id(config.env_name)
    atari = is_atari(config.env_name)
    family = defaults_for(config.env_name, vector=not atari, algo=config.algo)
    if config.preset:
        if not atari:
            raise UsageError(f"--preset {config.preset} is for Atari games, not {config.env_name}")
        preset = PRESETS[config.preset]
        for schedule, shape in DECAY_SHAPES.items():
            if schedule in typed and get_setting(config, schedule) != "linear":  # typed constant: no decay to shape
                preset = {name: value for name, value in preset.items() if name not in shape}
        family.update(preset)
    return with_settings(config, {name: value for name, value in family.items() if name not in typed})
