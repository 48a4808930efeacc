"""Checkpoints: the whole format in one module, written atomically and read with ``weights_only=True``.

A checkpoint is a dict of tensors and plain values::

    format                         CHECKPOINT_FORMAT (older formats are upgraded when read)
    model_spec, model              what rebuilds the network, and its weights
    env_name, config               the game and every setting of the run (config.Config.to_dict)
    update, step                   gradient updates and env steps done
    best_loss, best_reward, best_eval, mean_return
    optimizer, optimizer_name      } full checkpoints only (a2c_last): what a resume needs to
    intrinsic, intrinsic_std       } continue exactly where the run stopped; intrinsic* only
    episode_returns, episode_count } with curiosity
    rng
    obs_normalizer, reward_normalizer   running mean, var and count, with --normalize-obs / --normalize-reward
    world_size                     processes of the data-parallel run that wrote it (1: a plain run)

A run writes ``a2c_last`` (full) every ``checkpoint_interval`` updates and on the way out, and
keeps three weights-only files by their rules (see :class:`Checkpoints`).
"""

from __future__ import annotations

import math
import os
import pickle
from typing import Any, Callable, Optional, Sequence

import torch

from config import Config, get_setting, optimizer_name, with_settings
from envs import game_of, owner_of
from metrics import EpisodeStats
from seeds import rng_state, set_rng_state
from utils import UsageError, atomic_write

CHECKPOINT_FORMAT = "recurrent-a2c/2"
OLDER_FORMATS = ("recurrent-a2c/1",)
BEST_CHECKPOINTS = ("a2c_best_loss", "a2c_best_reward", "a2c_best_eval")


# Settings that define a run and cannot change when it is resumed: the game, the network's shape,
# the number of envs (the recurrent state's shape), the seed, the optimizer (its saved state) and
# the algorithm (with the settings of its own that it fixes: algorithms.Algorithm.fixed).
# Every other typed flag (--num-updates, --lr, --entropy-coeff...) applies from the resumed update on.
RESUME_FIXED = {
    "preset",
    "env_name",
    "num_envs",
    "n_stack",
    "frame_size",
    "arch",
    "recurrent",
    "hidden_size",
    "mlp_width",
    "log_std_init",
    "sde",
    "conv_filters",
    "feature_norm",
    "core_skip",
    "lstm_norm",
    "critic",
    "seed",
    "normalize_obs",
    "optimizer",
    "log_dir",
    "curiosity.enabled",
    "curiosity.normalize",
    "algo",
    "randomize_domain",
    "physics",
    "obs_history",
    "prev_action_reward",
    "sticky_actions",
}
# Flags that fix the network's shape: a checkpoint cannot be loaded into another.
ARCHITECTURE = (
    "arch",
    "recurrent",
    "hidden_size",
    "mlp_width",
    "conv_filters",
    "sde",
    "feature_norm",
    "core_skip",
    "lstm_norm",
    "critic",
    "n_stack",
    "frame_size",
    "obs_history",
    "prev_action_reward",
)


def settings_from_checkpoint(
    checkpoint: dict[str, Any],
    path: str,
    config: Config,
    typed: set[str],
    allowed: set[str],
    flag: Callable[[str], str],
) -> Config:
    """The checkpoint's settings, with the typed flags in ``allowed`` applied on top.

    A typed flag outside ``allowed`` must agree with the checkpoint, or it is an error that names
    it by ``flag(setting name)``.
    """
    saved = Config.from_dict(checkpoint["config"])
    changes = {}
    for name in sorted(typed):
        mine, theirs = get_setting(config, name), get_setting(saved, name)
        if name in allowed:
            changes[name] = mine
        elif mine != theirs:
            what = "another architecture" if name in ARCHITECTURE else "other settings"
            raise UsageError(
                f"checkpoint {path} was saved with {flag(name)} {_show(theirs)} ({what}); cannot use {_show(mine)}"
            )
    return with_settings(saved, changes)


def _show(value: Any) -> str:
    if value == "":
        return "none"  # --preset's default
    return str(value).lower() if isinstance(value, bool) else str(value)


def atomic_save(obj: Any, path: str) -> None:
    """Write ``obj`` with ``torch.save`` so that a kill at any moment leaves the old file intact,
    every tensor on the CPU: a checkpoint of a GPU run loads on any machine with a plain
    ``torch.load(path, weights_only=True)``."""
    atomic_write(path, lambda f: torch.save(on_cpu(obj), f))


def on_cpu(obj: Any) -> Any:
    """``obj`` with every tensor in it (in dicts, lists and tuples, at any depth) on the CPU; CPU
    tensors are kept as they are, not copied."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {key: on_cpu(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(on_cpu(value) for value in obj)
    return obj


def load_checkpoint(path: str) -> dict[str, Any]:
    """Load a checkpoint written by this project; never runs code (``weights_only=True``).

    Raises ``UsageError`` with a one-line reason for a missing, truncated or foreign file.
    """
    if not os.path.isfile(path):
        raise UsageError(f"checkpoint not found: {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated archive, random bytes, empty file, pickled code...
        if isinstance(exc, pickle.UnpicklingError) and "GLOBAL" in str(exc):
            raise UsageError(
                f"cannot read checkpoint {path}: it holds objects other than tensors and plain "
                f"values; refused (weights_only)"
            ) from None
        raise UsageError(f"cannot read checkpoint {path}: truncated or corrupt file") from None
    if not isinstance(data, dict) or data.get("format") not in (CHECKPOINT_FORMAT, *OLDER_FORMATS):
        raise UsageError(f"cannot read checkpoint {path}: not a checkpoint of this project")
    return upgraded(data)


def upgraded(data: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of an older format in the current one, meaning what it meant when it was written.

    Format 1 named ``torch.optim.RMSprop`` "rmsprop", format 2 the TensorFlow form, now "rmsprop-tf":
    either resumes with the optimizer (and the optimizer state) it was trained with.
    """
    config = data.get("config", {})
    family = owner_of(data.get("env_name", ""))
    if config.get("sticky_actions") is None and family is not None:  # older runs trained under the id's own
        config["sticky_actions"] = family.sticky_actions(data["env_name"])
    # Format 1's "rmsprop" was torch's; format 2's is TensorFlow's form, now named "rmsprop-tf".
    renamed = "torch-rmsprop" if data["format"] == "recurrent-a2c/1" else optimizer_name("rmsprop")
    for holder, key in ((config, "optimizer"), (data, "optimizer_name")):
        if holder.get(key) == "rmsprop":
            holder[key] = renamed
    data["format"] = CHECKPOINT_FORMAT
    return data


def check_checkpoint_fits(
    checkpoint: dict[str, Any], path: str, obs_shape: Sequence[int], num_actions: int, env_name: str
) -> None:
    """A checkpoint plays only the game (in any of its ids), action set and observations it was trained on."""

    spec = checkpoint["model_spec"]
    if spec["num_actions"] != num_actions:
        raise UsageError(
            f"checkpoint {path} was trained on {checkpoint['env_name']} with {spec['num_actions']} "
            f"actions; {env_name} has {num_actions}"
        )
    if game_of(env_name) != game_of(checkpoint["env_name"]):
        raise UsageError(f"checkpoint {path} was trained on {checkpoint['env_name']}; {env_name} is another game")
    if list(spec["obs_shape"]) != list(obs_shape):
        raise UsageError(
            f"checkpoint {path} expects observations of shape {tuple(spec['obs_shape'])}, "
            f"the env gives {tuple(obs_shape)}"
        )


# What a shipped agent keeps of a checkpoint: enough to rebuild, play and describe it.
AGENT_KEYS = (
    "format",
    "model_spec",
    "model",
    "env_name",
    "config",
    "update",
    "step",
    "mean_return",
    "obs_normalizer",
    "world_size",
)


def agent_file(
    checkpoint: dict[str, Any], dtype: torch.dtype = torch.float16, record: Optional[dict[str, Any]] = None
) -> dict[str, Any]:
    """A checkpoint cut down to a playable agent: weights only (no optimizer, random streams or
    curiosity module), its floating-point weights stored as ``dtype`` (they load back into the
    float32 network), the observation statistics it plays with, and ``record`` (how it scored)."""
    data = {key: checkpoint[key] for key in AGENT_KEYS if key in checkpoint}
    data["model"] = {
        name: value.to(dtype) if value.is_floating_point() else value for name, value in checkpoint["model"].items()
    }
    if record is not None:
        data["record"] = record
    return data


class TrainingState:
    """Counters and records that a resumed run carries on from."""

    def __init__(
        self,
        update: int = 0,
        step: int = 0,
        best_loss: float = math.inf,
        best_reward: float = -math.inf,
        episode_returns: tuple[float, ...] = (),
        best_eval: float = -math.inf,
        episode_count: Optional[int] = None,
    ) -> None:
        self.update, self.step = update, step
        self.best_loss, self.best_reward, self.best_eval = best_loss, best_reward, best_eval
        self.episodes = EpisodeStats(100, episode_returns, episode_count)

    def to_dict(self, full: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "update": self.update,
            "step": self.step,
            "best_loss": self.best_loss,
            "best_reward": self.best_reward,
            "best_eval": self.best_eval,
            "mean_return": self.episodes.mean,
        }
        if full:
            data["episode_returns"] = list(self.episodes.returns)
            data["episode_count"] = self.episodes.count
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainingState":
        """The state saved in a full checkpoint (``best_eval`` and ``episode_count`` may be missing in old ones)."""
        return cls(
            data["update"],
            data["step"],
            data["best_loss"],
            data["best_reward"],
            tuple(data["episode_returns"]),
            data.get("best_eval", -math.inf),
            data.get("episode_count"),
        )


class Checkpoints:
    """Writes one run's checkpoints into ``run_dir`` and keeps its best-checkpoint rules.

    * ``a2c_best_loss``: the weights that produced the lowest loss, saved before the step changes them;
    * ``a2c_best_reward``: the weights that played the rollout after which the mean of the last 100
      games peaked, saved before the update changes them;
    * ``a2c_best_eval``: the weights with the best mean score at a periodic evaluation.

    ``agent`` is anything with ``state(full)`` (see ``agent.A2CAgent.state``). With ``enabled=False``
    (every process of a data-parallel run but the main one) nothing is written; the bests are then
    judged on the main process's own numbers.
    """

    def __init__(
        self,
        run_dir: str,
        agent: Any,
        config: Any,
        enabled: bool = True,
        normalizer: Callable[[], dict[str, Any]] = dict,
        world_size: int = 1,
    ) -> None:
        self.run_dir, self.agent, self.config, self.enabled = run_dir, agent, config, enabled
        self.normalizer = normalizer  # the observation and reward statistics (normalize.state), if any
        self.world_size = world_size

    def to_dict(self, state: TrainingState, full: bool = True) -> dict[str, Any]:
        """What a checkpoint holds. ``full`` adds the optimizer and RNG states needed to resume."""
        data = {
            "format": CHECKPOINT_FORMAT,
            **self.agent.state(full),
            "env_name": self.config.env_name,
            "config": self.config.to_dict(),
            **state.to_dict(full),
            **self.normalizer(),
            "world_size": self.world_size,
        }
        if full:
            data["rng"] = rng_state()
        return data

    def save(self, name: str, state: TrainingState, full: bool = True) -> str:
        path = os.path.join(self.run_dir, name)
        if self.enabled:
            atomic_save(self.to_dict(state, full), path)
        return path

    def loss_computed(self, state: TrainingState, total: float) -> None:
        """Before the step: keep these weights if they produced the lowest loss so far."""
        if math.isfinite(total) and total < state.best_loss:
            state.best_loss = total
            self.save("a2c_best_loss", state, full=False)

    def rollout_played(self, state: TrainingState, games_ended: bool) -> None:
        """Before the update: keep the weights that played this rollout if the mean of the last 100 games peaked."""
        if games_ended and state.episodes.mean > state.best_reward:
            state.best_reward = state.episodes.mean
            self.save("a2c_best_reward", state, full=False)

    def evaluated(self, state: TrainingState, mean: float) -> None:
        """Keep the weights whose periodic evaluation scored best."""
        if mean > state.best_eval:
            state.best_eval = mean
            self.save("a2c_best_eval", state, full=False)


def restore(checkpoint: dict[str, Any], agent: Any, path: str) -> TrainingState:
    """Put a full checkpoint back: the agent's weights and optimizer, every random stream, the counters."""
    agent.load(checkpoint, path)
    set_rng_state(checkpoint["rng"])
    return TrainingState.from_dict(checkpoint)


def catch_up_bests(state: TrainingState, run_dir: str) -> None:
    """Raise ``state``'s bests to the best any of the run's best checkpoints recorded.

    A run killed hard (SIGKILL, out of memory) leaves an ``a2c_last`` up to
    ``checkpoint_interval`` updates older than a best checkpoint written after it. Resumed with
    that ``a2c_last``'s bests alone, the first lesser improvement would overwrite the better
    checkpoint. A best checkpoint that cannot be read is left to be replaced by the next best.
    """
    for name in BEST_CHECKPOINTS:
        path = os.path.join(run_dir, name)
        if not os.path.isfile(path):
            continue
        try:
            saved = load_checkpoint(path)
        except UsageError:
            continue
        state.best_loss = min(state.best_loss, saved.get("best_loss", math.inf))
        state.best_reward = max(state.best_reward, saved.get("best_reward", -math.inf))
        state.best_eval = max(state.best_eval, saved.get("best_eval", -math.inf))
