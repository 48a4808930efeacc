"""Proximal policy optimization (PPO; Schulman et al. 2017): A2C's rollouts, reused.

The rollout, its returns and its advantages are A2C's (``storage.py``: n-step or GAE, with the
time-limit bootstrap); what changes is the update. Instead of one gradient step on the rollout,
the agent takes ``epochs`` passes over it, each in ``minibatches`` shuffled minibatches, one
clipped gradient step each. With ``ratio = pi(a|s) / pi_old(a|s)`` (``pi_old``: the policy that
acted) and every term a mean over the minibatch's samples::

    policy  = -mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))
    value   = mean((R - V(s))^2)
    total   = policy + value_coeff * value - entropy_coeff * mean(H(pi))

With ``normalize_advantages`` each minibatch's advantages are standardized first (as SB3's PPO
does). With one epoch of one minibatch the ratio is 1 and the gradient of ``policy`` is A2C's
(``-mean(A * grad log pi)``): A2C is the special case this update starts from.

A feed-forward network's samples are shuffled one by one; a recurrent one's by sequence, so that
its core sees its frames in order. A sequence is an env's whole column of the rollout, run again
from the state it started with; or, with ``sequence_length`` L, one of the column's T / L stretches
of L steps, run from the state the network reached there, computed before the update's first step
(``sequence_starts``: the rollout run once without gradients). The first epoch's losses are then
those of whole columns; the gradient stops at each stretch's first step (truncated
backpropagation through time), and each gradient step unrolls L steps, not T.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from agent import RolloutAgent, rollout_settings, rollout_stats, standardized
from config import Config, positive_float, positive_int, setting
from families import EnvFamily
from icm import masked_mean
from metrics import read_back
from model import ActorCritic
from storage import Batch
from utils import UsageError


@dataclass
class Clipped:
    """The clipped objective's settings (``config.clip``), which ``--algo grpo`` shares."""

    epochs: int = setting(10, "Passes over each batch, a PPO rollout or a GRPO round.", parse=positive_int, metavar="N")
    minibatches: int = setting(
        32,
        "Minibatches per pass, one clipped gradient step each: of samples, of sequences "
        "with --recurrent (PPO), of group members (GRPO).",
        parse=positive_int,
        metavar="N",
    )
    eps: float = setting(
        0.2,
        "The probability ratio is clipped to [1 - eps, 1 + eps] in the surrogate.",
        flag="--clip-eps",
        parse=positive_float,
        metavar="EPS",
    )
    sequence_length: int = setting(
        0,
        "With --recurrent: a rollout's env columns are cut into sequences of this many "
        "steps, each run from the state the network reached there, and minibatches "
        "hold sequences (0: whole columns; picked to fit the rollout unless typed).",
        parse=positive_int,
        metavar="L",
    )


# The names these settings had in configs saved before PPO and GRPO shared one block.
RENAMED = {"ppo.epochs": "clip.epochs", "ppo.minibatches": "clip.minibatches", "ppo.clip_eps": "clip.eps"}


def clipped_surrogate(
    dist: torch.distributions.Distribution,
    actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    clip_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's policy loss ``-mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))`` over the entries
    where ``weights`` is 1, with the new ``log pi(a|s)``, and (detached) the share of entries whose
    ratio left ``[1 - eps, 1 + eps]`` (``clip_fraction``) and the k3 estimate of KL(pi_old || pi)
    (``approx_kl``). ``clip_eps = inf`` leaves the ratio unclipped."""
    log_probs = dist.log_prob(actions)
    log_ratio = log_probs - old_log_probs
    ratio = torch.exp(log_ratio)
    surrogate = torch.min(ratio * advantages, torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages)
    with torch.no_grad():
        stats = {
            "clip_fraction": masked_mean(((ratio - 1.0).abs() > clip_eps).float(), weights),
            "approx_kl": masked_mean(ratio - 1.0 - log_ratio, weights),
        }
    return -masked_mean(surrogate, weights), log_probs, stats


def ppo_loss(
    dist: torch.distributions.Distribution,
    values: Optional[torch.Tensor],
    actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    returns: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps: float,
    value_coeff: float,
    entropy_coeff: float,
) -> dict[str, torch.Tensor]:
    """PPO's loss terms on one minibatch (every tensor ``[T, N]`` but ``actions``, ``[T, N]`` or
    ``[T, N, A]``); the formulas are in the module's doc. Without a critic (``values`` None) there is
    no value term. ``ppo/clip_fraction`` and ``ppo/approx_kl`` come detached."""
    weights = torch.ones_like(advantages)
    policy, _, stats = clipped_surrogate(dist, actions, old_log_probs, advantages.detach(), weights, clip_eps)
    entropy = dist.entropy().mean()
    terms = {"policy": policy, "entropy": entropy, "total": policy - entropy_coeff * entropy}
    if values is not None:
        terms["value"] = (returns.detach() - values).pow(2).mean()
        terms["total"] = terms["total"] + value_coeff * terms["value"]
    terms.update({f"ppo/{name}": value for name, value in stats.items()})
    return terms


class PPOAgent(RolloutAgent):
    """A2C's rollouts, returns and critic (:class:`agent.RolloutAgent`) with PPO's update, :meth:`update`."""

    def __init__(
        self,
        model: ActorCritic,
        *,
        epochs: int = 4,
        minibatches: int = 4,
        clip_eps: float = 0.2,
        sequence_length: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.epochs, self.minibatches, self.clip_eps = epochs, minibatches, clip_eps
        self.sequence_length = sequence_length  # 0: whole columns

    def length(self, batch: Batch) -> int:
        """The steps of a recurrent network's sequence: ``sequence_length``, or the whole rollout (0)."""
        return self.sequence_length or batch.advantages.shape[0]

    def samples(self, batch: Batch) -> int:
        """How many units a minibatch is drawn from: the rollout's ``T x N`` samples for a
        feed-forward network, its ``T / L x N`` sequences for a recurrent one."""
        T, N = batch.advantages.shape
        return T // self.length(batch) * N if self.model.recurrent else T * N

    @torch.no_grad()
    def sequence_starts(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        """The recurrent state at the first step of every sequence, ``[T / L x N, ...]``, sequence
        ``c`` of env ``n`` at row ``c * N + n``: the rollout's initial state for ``c = 0``, then the
        state the network reaches after each L steps, run without gradients (with the weights
        that acted, the states it acted from)."""
        L, state = self.length(batch), batch.initial_state
        starts = [state]
        for begin in range(L, batch.advantages.shape[0], L):
            _, _, state = self.model.forward_sequence(
                batch.obs[begin - L : begin], state, batch.episode_starts[begin - L : begin]
            )
            starts.append(state)
        return tuple(torch.cat(parts) for parts in zip(*starts))

    def minibatch_loss(
        self, batch: Batch, samples: Optional[torch.Tensor] = None, starts: Optional[tuple[torch.Tensor, ...]] = None
    ) -> dict[str, torch.Tensor]:
        """The loss terms on ``samples`` of the rollout (all by default): flat indices into its
        ``T x N`` samples for a feed-forward network, sequence indices for a recurrent one, whose
        ``starts`` (:meth:`sequence_starts`, computed here if not given) are their first states."""
        if samples is None:
            samples = torch.arange(self.samples(batch), device=batch.advantages.device)

        def pick(x: torch.Tensor) -> torch.Tensor:
            """``x [T, N, ...]`` at ``samples``: as ``[L, n, ...]`` sequences (the T / L stretches of
            each column side by side, stretch c of env i at c * N + i), or ``[1, n, ...]`` single steps."""
            if self.model.recurrent:
                T, N = x.shape[:2]
                L = self.length(batch)
                return x.reshape(T // L, L, N, *x.shape[2:]).transpose(0, 1).reshape(L, -1, *x.shape[2:])[:, samples]
            return x.reshape(1, -1, *x.shape[2:])[:, samples]

        # A recurrent network runs its sequences from their first states; a feed-forward one sees
        # the samples as one step of len(samples) envs (it keeps no state).
        if self.model.recurrent:
            starts = self.sequence_starts(batch) if starts is None else starts
            state = tuple(s[samples] for s in starts)
        else:
            state = batch.initial_state
        logits, values, _ = self.model.forward_sequence(pick(batch.obs), state, pick(batch.episode_starts))
        advantages = pick(batch.advantages)
        if self.normalize_advantages:
            advantages = standardized(advantages)
        return ppo_loss(
            self.model.distribution(logits),
            values if self.model.critic is not None else None,
            pick(batch.actions),
            pick(batch.log_probs),
            pick(batch.returns),
            advantages,
            self.clip_eps,
            self.value_coeff,
            self.entropy_coeff,
        )

    @classmethod
    def from_config(cls, model: ActorCritic, config: Config) -> "PPOAgent":
        clip = config.clip
        return cls(
            model,
            **rollout_settings(config),
            epochs=clip.epochs,
            minibatches=clip.minibatches,
            clip_eps=clip.eps,
            sequence_length=clip.sequence_length,
        )

    def update(
        self,
        batch: Batch,
        index: int = 0,
        on_loss: Optional[Callable[[float], None]] = None,
        generator: Optional[torch.Generator] = None,
    ) -> dict[str, float]:
        """``epochs`` passes over the rollout in ``minibatches`` shuffled minibatches, one clipped
        gradient step each; ``on_loss`` first sees the rollout's loss before any step (at ratio 1).
        Returns the mean of each term over the steps taken, how many steps a non-finite loss
        skipped (``ppo/skipped_steps``; ``skipped`` is 1 when no step was taken), and the rollout's
        statistics."""
        starts = self.sequence_starts(batch) if self.model.recurrent else None
        if on_loss is not None:
            with torch.no_grad():
                on_loss(float(self.minibatch_loss(batch, starts=starts)["total"]))
        samples = torch.arange(self.samples(batch), device=self.device)
        stats, steps, skipped = self.minibatch_epochs(
            samples, self.epochs, self.minibatches, lambda part: self.minibatch_loss(batch, part, starts), generator
        )
        stats["skipped"], stats["ppo/skipped_steps"] = float(steps == 0), float(skipped)
        stats.update(read_back(rollout_stats(batch)))
        return stats


# --algo ppo on vector-observation envs starts from SB3's PPO rather than from its env's A2C recipe:
# feed-forward, Adam at 3e-4, 8 envs x 256 steps (SB3's 2048 steps a rollout), GAE 0.95, no entropy
# bonus, each minibatch's advantages standardized, 10 epochs of 32 minibatches (64 samples), 1M env
# steps. The rollout is not kept with its graph (every minibatch runs its samples through the network
# again). An update holds thousands of env steps, so it logs, draws histograms and saves more often.
DEFAULTS: dict[str, Any] = {
    "recurrent": False,
    "num_envs": 8,
    "rollout_size": 256,
    "num_updates": 488,
    "optimizer": "adam",
    "lr": 3e-4,
    "lr_schedule": "constant",
    "gae_lambda": 0.95,
    "entropy_coeff": 0.0,
    "normalize_advantages": True,
    "clip.epochs": 10,
    "clip.minibatches": 32,
    "speed.keep_graph": False,
    "log_interval": 1,
    "histogram_interval": 10,
    "checkpoint_interval": 10,
}
ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    # The RL Zoo's PPO on LunarLander-v2: 16 envs x 1024 steps, 4 epochs of minibatches of 64 (256),
    # gamma 0.999, GAE 0.98; 61 updates (999,424 env steps). Its entropy coefficient is a tenth of the
    # Zoo's 0.01, whose agents play well only with --deterministic, and above 0, which left a seed
    # short of landing (docs/control.md#ppo-reusing-each-rollout).
    "LunarLander-v3": {
        "num_envs": 16,
        "rollout_size": 1024,
        "num_updates": 61,
        "clip.epochs": 4,
        "clip.minibatches": 256,
        "gamma": 0.999,
        "gae_lambda": 0.98,
        "entropy_coeff": 1e-3,
    },
}
# The shortest sequence a recurrent network is cut into by default (or the whole rollout, if shorter):
# shorter ones would leave the core little to remember.
SHORTEST_SEQUENCE = 16


# --algo ppo on Atari games starts from the PPO paper's Atari settings (Schulman et al. 2017, table 5)
# as CleanRL's ppo_atari runs them: the Nature CNN without memory, 8 envs x 128 steps, 4 epochs of 4
# minibatches (256 samples), Adam at 2.5e-4 decayed linearly to 0 from the first update, clip 0.1,
# GAE 0.95, value coefficient 0.5, entropy bonus 0.01, each minibatch's advantages standardized;
# 10M env steps, as the A2C default.
ATARI_DEFAULTS: dict[str, Any] = {
    "recurrent": False,
    "arch": "nature",
    "num_envs": 8,
    "rollout_size": 128,
    "num_updates": 9_766,  # 9,766 x 8 x 128 = 10,000,384 env steps
    "optimizer": "adam",
    "lr": 2.5e-4,
    "lr_schedule": "linear",
    "lr_decay_start": 0.0,
    "gae_lambda": 0.95,
    "entropy_coeff": 0.01,
    "normalize_advantages": True,
    "clip.epochs": 4,
    "clip.minibatches": 4,
    "clip.eps": 0.1,
    "speed.keep_graph": False,
    "log_interval": 1,
    "histogram_interval": 50,
    "checkpoint_interval": 50,
}


def defaults(env_name: str, family: EnvFamily) -> dict[str, Any]:
    """PPO's defaults for ``env_name``, not the env family's A2C ones: the PPO paper's for Atari
    games; SB3's PPO and the Zoo's recipes for vector-observation envs."""
    if family.observes == "images":
        return dict(ATARI_DEFAULTS)
    return {**DEFAULTS, **ENV_DEFAULTS.get(env_name, {})}


def fit(config: Config, typed: set[str]) -> dict[str, Any]:
    """A recurrent network's minibatches hold whole sequences: where a rollout's env columns are
    fewer than its minibatches, they are cut into the longest sequences (dividing the rollout, of
    at least ``SHORTEST_SEQUENCE`` steps) that give every minibatch one; where even those are too
    few, the minibatches are as many as the sequences. Typed settings are kept."""
    if not config.recurrent:
        return {}
    steps, envs, clip = config.rollout_size, config.num_envs, config.clip
    length = clip.sequence_length or steps
    if "clip.sequence_length" not in typed:
        lengths = [n for n in range(min(steps, SHORTEST_SEQUENCE), steps + 1) if steps % n == 0]
        fitting = [n for n in lengths if envs * (steps // n) >= clip.minibatches]
        length = max(fitting) if fitting else min(lengths)
    sequences = envs * (steps // length)
    fitted: dict[str, Any] = {"clip.sequence_length": 0 if length == steps else length}
    if clip.minibatches > sequences:
        fitted["clip.minibatches"] = sequences
    return fitted


def check(config: Config) -> None:
    """Refuse, in one line, the settings that --algo ppo cannot train with."""
    if config.preset:
        raise UsageError(
            f"--preset {config.preset} is a recipe of A2C's; --algo ppo starts from the PPO paper's settings"
        )
    if config.curiosity.enabled:
        raise UsageError("--icm is A2C's curiosity module; --algo ppo trains without it")
    length = config.clip.sequence_length
    if length and not config.recurrent:
        raise UsageError(
            "--sequence-length is for --recurrent: a feed-forward network's samples are shuffled one by one"
        )
    if length and config.rollout_size % length:
        raise UsageError(f"--sequence-length {length} does not divide --rollout-size {config.rollout_size}")
    sequences = config.num_envs * (config.rollout_size // length if length else 1)
    if config.recurrent and config.clip.minibatches > sequences:
        raise UsageError(
            f"--minibatches {config.clip.minibatches} is more than the {sequences} sequences of a rollout: "
            f"with --recurrent a minibatch holds whole sequences (--num-envs {config.num_envs} "
            f"x --rollout-size / --sequence-length)"
        )
