"""Observation and reward normalization for vector-observation envs (``--normalize-obs``,
``--normalize-reward``), as stable-baselines3's ``VecNormalize`` does it, which does the work here.

* Observations: each dimension minus its running mean, over its running standard deviation
  (``sqrt(var + 1e-8)``), clipped to +-10. The statistics are updated with every training
  observation and saved in every checkpoint; evaluation and a resumed run's start use the saved
  ones, evaluation without updating them (frozen).
* Rewards: divided by the running standard deviation of the discounted return (with the run's
  gamma), clipped to +-10; the logged episode returns stay raw (they are recorded below).

The terminal observation that a truncated episode bootstraps from is normalized alike.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv, VecNormalize


class Normalizer(VecNormalize):
    """SB3's ``VecNormalize``, passing on what the envs' reset reported (``reset_infos``)."""

    def reset(self):  # type: ignore[override]
        obs = super().reset()
        self.reset_infos = self.venv.reset_infos
        return obs


def normalized(envs: VecEnv, obs: bool, reward: bool, gamma: float = 0.99, training: bool = True) -> VecEnv:
    """``envs`` behind a normalizer of its observations and/or rewards; ``envs`` itself when neither.

    ``training=False`` freezes the statistics and leaves rewards raw (evaluation)."""
    if not (obs or reward):
        return envs
    return Normalizer(envs, training=training, norm_obs=obs, norm_reward=reward and training, gamma=gamma)


def normalizer_of(envs: VecEnv) -> Optional[VecNormalize]:
    return envs if isinstance(envs, VecNormalize) else None


def _stats_to_dict(rms: RunningMeanStd) -> dict[str, Any]:
    return {
        "mean": torch.as_tensor(rms.mean, dtype=torch.float64),
        "var": torch.as_tensor(rms.var, dtype=torch.float64),
        "count": float(rms.count),
    }


def _stats_from_dict(data: dict[str, Any]) -> RunningMeanStd:
    rms = RunningMeanStd(shape=tuple(data["mean"].shape))
    rms.mean, rms.var, rms.count = data["mean"].numpy().copy(), data["var"].numpy().copy(), float(data["count"])
    return rms


def state(envs: VecEnv) -> dict[str, Any]:
    """The statistics to keep in a checkpoint (tensors and floats: ``weights_only`` loads them);
    empty when nothing is normalized."""
    norm = normalizer_of(envs)
    if norm is None:
        return {}
    data: dict[str, Any] = {}
    if norm.norm_obs:
        data["obs_normalizer"] = _stats_to_dict(norm.obs_rms)
    if norm.norm_reward:
        data["reward_normalizer"] = _stats_to_dict(norm.ret_rms)
    return data


def load(envs: VecEnv, checkpoint: dict[str, Any]) -> None:
    """Put a checkpoint's statistics into ``envs``' normalizer (for what it normalizes)."""
    norm = normalizer_of(envs)
    if norm is None:
        return
    if norm.norm_obs and "obs_normalizer" in checkpoint:
        norm.obs_rms = _stats_from_dict(checkpoint["obs_normalizer"])
    if norm.norm_reward and "reward_normalizer" in checkpoint:
        norm.ret_rms = _stats_from_dict(checkpoint["reward_normalizer"])


def copy_obs_stats(source: VecEnv, target: VecEnv) -> None:
    """Give ``target``'s (frozen) normalizer the observation statistics ``source`` has now."""
    src, dst = normalizer_of(source), normalizer_of(target)
    if src is not None and dst is not None and src.norm_obs:
        dst.obs_rms = src.obs_rms.copy()
