"""Group-relative policy optimization (GRPO; Shao et al. 2024): policy gradients without a critic.

The baseline of an action is not a learned value but the other members of its group. A group is
``group_size`` envs reset with one seed, so that its members start from the same state; each then
plays the current policy until its episode ends or ``horizon`` steps pass. One update reads::

    reset every group with a fresh seed -> play until every member is done -> group advantages
    -> ``update_epochs`` passes of clipped policy-gradient steps over minibatches of members

Signals, as everywhere in the project (storage.py): ``episode_starts[t, i] = 1`` where the
observation at step t starts env i's episode; ``mask[t, i] = 1`` where step t belongs to member i's
episode (a member that has finished is masked out of every later step, which never reaches a loss).

Advantage of member i of group g, with ``G_i`` its discounted return over its episode::

    A_i = (G_i - mean_g(G)) / std_g(G)      (or without the division: --no-group-scale-by-std, Dr. GRPO)

the same for every step of the member's episode. A group whose returns are all equal carries no
signal: its members are left out of the loss (and counted), never divided by a zero spread.

Objective, averaged over every valid step ``(t, i)`` of a minibatch (each step weighs the same,
so a long episode is not diluted), with ``ratio = pi(a|s) / pi_old(a|s)``::

    policy  = -mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))
    kl      = mean(exp(ref - logp) - (ref - logp) - 1)       (k3 estimator of KL(pi || pi_ref))
    total   = policy - entropy_coeff * mean(H(pi)) + kl_coeff * kl

With one epoch of one minibatch the ratio is 1 and its gradient is that of ``log pi``, so the
update is REINFORCE with the group mean as baseline (the estimator GRPO grew from).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

import gymnasium as gym
import numpy as np
import torch

from agent import Agent, agent_settings
from config import Config, non_negative, non_negative_int, positive_int, setting
from envs import family_of
from families import EnvFamily
from icm import masked_mean
from model import ActorCritic
from ppo import clipped_surrogate
from seeds import group_seeds
from utils import UsageError

if TYPE_CHECKING:
    from runner import Runner

# Returns of a group closer together than this count as equal: the group is skipped.
EQUAL_RETURNS = 1e-6


@dataclass
class Group:
    """GRPO's own settings (``config.group``); its clipped objective's are PPO's (``ppo.Clipped``)."""

    size: int = setting(
        8,
        "Envs in a group: they reset with one seed (the same start state) and each member's "
        "advantage is its return against the group's (must divide --num-envs).",
        flag="--group-size",
        parse=positive_int,
        metavar="G",
    )
    horizon: int = setting(
        0,
        "Steps a member plays at most in a round (0: until its episode ends, within the env's own time limit).",
        parse=non_negative_int,
        metavar="T",
    )
    scale_by_std: bool = setting(
        True,
        "Divide each advantage by its group's standard deviation; "
        "--no-group-scale-by-std: the return minus the group's mean only, as Dr. GRPO.",
        flag="--group-scale-by-std",
        aliases=("--group-std",),
    )
    kl_coeff: float = setting(
        0.0, "Weight of the KL penalty to a reference policy (k3 estimator); 0: none.", parse=non_negative, metavar="C"
    )
    ref_interval: int = setting(
        10,
        "Updates between refreshes of the KL reference to the current policy (with --kl-coeff).",
        parse=positive_int,
        metavar="N",
    )


# The settings of the clipped objective (PPO's block) that GRPO reads too.
SHARED = ("clip.epochs", "clip.minibatches", "clip.eps")
# The names these settings had in configs saved before PPO and GRPO shared one block.
RENAMED = {"group.update_epochs": "clip.epochs", "group.minibatches": "clip.minibatches", "group.clip_eps": "clip.eps"}


def episode_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Each member's discounted return ``G_i = sum_t gamma^k(t) r[t, i]`` over its own steps ``[N]``.

    ``rewards`` and ``mask`` are ``[T, N]``; ``k(t)`` counts the member's valid steps before t, so
    the discount starts at 1 on the member's first step. Masked steps add nothing.
    """
    with torch.no_grad():
        mask = mask.float()
        k = torch.cumsum(mask, 0) - mask  # valid steps before t
        return (rewards.float() * mask * gamma**k).sum(0)


def group_advantages(
    returns: torch.Tensor, group_size: int, scale_by_std: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages ``[N]`` of ``N = groups x group_size`` members and which groups carry a signal.

    Member ``i`` belongs to group ``i // group_size``. ``A_i = G_i - mean`` of its group, over the
    group's standard deviation (population, as over the whole group) with ``scale_by_std``.
    Returns ``(advantages, informative)``: ``informative[g]`` is False where group g's returns are
    all equal; its members' advantages are 0 (no division by zero) and they should not train.
    """
    if returns.dim() != 1 or returns.numel() % group_size:
        raise ValueError(f"returns must be [groups * {group_size}], got {tuple(returns.shape)}")
    with torch.no_grad():
        grouped = returns.float().view(-1, group_size)
        centred = grouped - grouped.mean(1, keepdim=True)
        std = grouped.std(1, unbiased=False, keepdim=True)
        informative = (grouped.max(1).values - grouped.min(1).values) > EQUAL_RETURNS
        if scale_by_std:
            centred = centred / torch.where(informative.unsqueeze(1), std, torch.ones_like(std))
        centred = centred * informative.unsqueeze(1)
        return centred.reshape(-1), informative


def k3_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-sample estimate of ``KL(pi || pi_ref)`` from actions sampled by pi (Schulman's k3):
    ``exp(ref - logp) - (ref - logp) - 1``, never negative, 0 where the policies agree."""
    delta = ref_log_probs - log_probs
    return torch.exp(delta) - delta - 1.0


def grpo_loss(
    dist: torch.distributions.Distribution,
    actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    clip_eps: float,
    entropy_coeff: float,
    kl_coeff: float = 0.0,
    ref_log_probs: Optional[torch.Tensor] = None,
) -> dict[str, torch.Tensor]:
    """The clipped surrogate, entropy and KL terms over the steps where ``weights`` is 1.

    ``advantages`` are per step (the member's advantage broadcast over its steps); all tensors are
    ``[T, N]`` but ``actions`` (``[T, N]`` or ``[T, N, A]``). ``clip_eps = inf`` leaves the ratio
    unclipped. Besides the loss terms, ``clip_fraction`` (share of steps whose ratio was clipped)
    and ``approx_kl`` (k3 estimate of KL(pi_old || pi)) come detached.
    """
    policy, log_probs, stats = clipped_surrogate(dist, actions, old_log_probs, advantages, weights, clip_eps)
    entropy = masked_mean(dist.entropy(), weights)
    terms = {"policy": policy, "entropy": entropy, "total": policy - entropy_coeff * entropy}
    if kl_coeff > 0 and ref_log_probs is not None:
        terms["kl"] = masked_mean(k3_kl(log_probs, ref_log_probs), weights)
        terms["total"] = terms["total"] + kl_coeff * terms["kl"]
    terms.update({f"grpo/{name}": value for name, value in stats.items()})
    return terms


@dataclass
class GroupBatch:
    """One round of groups, ready for the loss. Time-major ``[T, N]``; T is the longest episode."""

    obs: torch.Tensor  # [T, N, ...]
    episode_starts: torch.Tensor  # [T, N] float, 1 at each member's first step (t = 0)
    actions: torch.Tensor  # [T, N] long, or [T, N, A] float
    log_probs: torch.Tensor  # [T, N] log pi_old(a_t | s_t) of the policy that acted
    rewards: torch.Tensor  # [T, N] env rewards (0 on masked steps)
    mask: torch.Tensor  # [T, N] float, 1 where step t belongs to member i's episode
    returns: torch.Tensor  # [N] discounted return of each member
    advantages: torch.Tensor  # [N] group-relative advantage of each member
    informative: torch.Tensor  # [groups] bool, False where a group's returns were all equal

    @property
    def weights(self) -> torch.Tensor:
        """``[T, N]``: 1 on the valid steps of members of informative groups, the steps that train."""
        group_size = self.mask.shape[1] // self.informative.numel()
        return self.mask * self.informative.repeat_interleave(group_size).float().unsqueeze(0)

    @property
    def env_steps(self) -> int:
        """Transitions the members played in their episodes (the steps of finished members' idle
        envs after their episode ended are not counted)."""
        return int(self.mask.sum())


class GRPOAgent(Agent):
    """An agent without a critic, trained on whole groups of episodes (see the module's doc).

    Acting, the optimizer, gradient clipping and checkpoints are :class:`agent.Agent`'s; the
    update is :meth:`update`. With ``kl_coeff > 0`` a frozen copy of the policy is the KL
    penalty's reference, refreshed every ``ref_interval`` updates and saved in full checkpoints.
    """

    def __init__(
        self,
        model: ActorCritic,
        *,
        group_size: int,
        clip_eps: float = 0.2,
        update_epochs: int = 8,
        minibatches: int = 16,
        kl_coeff: float = 0.0,
        ref_interval: int = 10,
        scale_by_std: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.group_size, self.clip_eps = group_size, clip_eps
        self.update_epochs, self.minibatches = update_epochs, minibatches
        self.kl_coeff, self.ref_interval, self.scale_by_std = kl_coeff, ref_interval, scale_by_std
        self.reference: Optional[ActorCritic] = None
        if kl_coeff > 0:
            self.reference = copy.deepcopy(model).requires_grad_(False)

    def make_group_batch(
        self,
        obs: torch.Tensor,
        episode_starts: torch.Tensor,
        actions: torch.Tensor,
        log_probs: torch.Tensor,
        rewards: torch.Tensor,
        mask: torch.Tensor,
    ) -> GroupBatch:
        """A round's tensors with each member's return and its group-relative advantage."""
        returns = episode_returns(rewards, mask, self.gamma)
        advantages, informative = group_advantages(returns, self.group_size, self.scale_by_std)
        return GroupBatch(
            obs, episode_starts, actions, log_probs, rewards * mask, mask, returns, advantages, informative
        )

    def sequence_policy(self, batch: GroupBatch, members: torch.Tensor) -> torch.distributions.Distribution:
        """The current policy at every step of ``members`` (their episodes run from their start,
        so a recurrent core starts from zeros)."""
        state = self.model.initial_state(len(members), self.device)
        logits, _, _ = self.model.forward_sequence(batch.obs[:, members], state, batch.episode_starts[:, members])
        return self.model.distribution(logits)

    def loss(
        self, batch: GroupBatch, members: Optional[torch.Tensor] = None, ref_log_probs: Optional[torch.Tensor] = None
    ) -> dict[str, torch.Tensor]:
        """The GRPO loss terms on ``members`` (all by default) of a round."""
        if members is None:
            members = torch.arange(batch.mask.shape[1], device=batch.mask.device)
        dist = self.sequence_policy(batch, members)
        advantages = batch.advantages[members].unsqueeze(0).expand_as(batch.mask[:, members])
        return grpo_loss(
            dist,
            batch.actions[:, members],
            batch.log_probs[:, members],
            advantages,
            batch.weights[:, members],
            self.clip_eps,
            self.entropy_coeff,
            self.kl_coeff,
            None if ref_log_probs is None else ref_log_probs[:, members],
        )

    @torch.no_grad()
    def reference_log_probs(self, batch: GroupBatch) -> Optional[torch.Tensor]:
        """``log pi_ref(a_t | s_t)`` ``[T, N]`` of the round's actions, or None without a KL penalty."""
        if self.reference is None:
            return None
        state = self.reference.initial_state(batch.mask.shape[1], self.device)
        logits, _, _ = self.reference.forward_sequence(batch.obs, state, batch.episode_starts)
        return self.reference.distribution(logits).log_prob(batch.actions)

    @classmethod
    def from_config(cls, model: ActorCritic, config: Config) -> "GRPOAgent":
        group, clip = config.group, config.clip
        return cls(
            model,
            **agent_settings(config),
            group_size=group.size,
            clip_eps=clip.eps,
            update_epochs=clip.epochs,
            minibatches=clip.minibatches,
            kl_coeff=group.kl_coeff,
            ref_interval=group.ref_interval,
            scale_by_std=group.scale_by_std,
        )

    def update(
        self,
        batch: GroupBatch,
        index: int = 0,
        on_loss: Optional[Callable[[float], None]] = None,
        generator: Optional[torch.Generator] = None,
    ) -> dict[str, float]:
        """Update ``index`` (counted from 0): ``update_epochs`` passes over the round's members in
        ``minibatches`` shuffled minibatches, one clipped gradient step each; then the KL reference
        is refreshed if ``ref_interval`` updates have passed. ``on_loss`` first sees the round's
        loss before any step. Returns the mean of each term over the steps taken, and ``grpo/*``
        statistics of the round. Without an informative group no step is taken."""
        ref_log_probs = None
        if bool(batch.informative.any()):
            ref_log_probs = self.reference_log_probs(batch)  # computed once, for both
            if on_loss is not None:
                with torch.no_grad():
                    on_loss(float(self.loss(batch, ref_log_probs=ref_log_probs)["total"]))
        stats: dict[str, float] = {"skipped": 0.0}
        groups = batch.informative.numel()
        grouped = batch.returns.view(groups, -1)
        stats["grpo/group_return_mean"] = float(grouped.mean())
        stats["grpo/group_return_std"] = float(grouped.std(1, unbiased=False).mean())
        stats["grpo/skipped_groups"] = float((~batch.informative).float().mean())
        stats["grpo/episode_length"] = float(batch.mask.sum(0).mean())
        if not bool(batch.informative.any()):
            self._refresh_reference(index)
            return stats
        # Only members that train are split into minibatches (the others weigh 0 in every loss).
        members = torch.nonzero(batch.informative.repeat_interleave(self.group_size)).squeeze(1).to(self.device)
        means, _, skipped = self.minibatch_epochs(
            members, self.update_epochs, self.minibatches, lambda part: self.loss(batch, part, ref_log_probs), generator
        )
        stats.update({name: value for name, value in means.items() if name != "skipped"})
        stats["skipped"] = float(skipped > 0)
        self._refresh_reference(index)
        return stats

    def _refresh_reference(self, index: int) -> None:
        if self.reference is not None and (index + 1) % self.ref_interval == 0:
            self.reference.load_state_dict(self.model.state_dict())

    def state(self, full: bool = True) -> dict[str, Any]:
        """The agent's checkpoint part, plus (full) the KL reference's weights."""
        data = super().state(full)
        if full and self.reference is not None:
            data["reference"] = self.reference.state_dict()
        return data

    def load(self, checkpoint: dict[str, Any], path: str = "checkpoint") -> None:
        super().load(checkpoint, path)
        if self.reference is not None:
            self.reference.load_state_dict(checkpoint.get("reference", self.model.state_dict()))


class GroupCollector:
    """GRPO's batches, rounds: every update resets each group with a fresh seed of its own, plays
    until every member's episode has ended (or ``horizon`` steps), and hands the agent the whole
    round. A member whose episode has ended plays on outside the round (its env steps on with
    the others), so its later steps neither count as env steps nor reach the log or the loss.
    """

    histograms = ("advantages", "returns")

    def __init__(self, runner: "Runner") -> None:
        self.horizon = horizon(runner.config)
        self.groups = runner.config.num_envs // runner.config.group.size

    def collect(self, runner: "Runner") -> GroupBatch:
        """One round: the groups reset with this update's seeds, each member's episode played to its end."""
        config, agent = runner.config, runner.agent
        runner.reset(group_seeds(config.seed, runner.state.update, self.groups, config.group.size))
        # Which members are still in their episode, kept on the host (the loop reads it every step).
        playing = np.ones(config.num_envs, dtype=bool)
        steps: dict[str, list[torch.Tensor]] = {
            k: [] for k in ("obs", "starts", "actions", "log_probs", "rewards", "mask")
        }
        for t in range(self.horizon):
            obs, starts = runner.obs, runner.episode_starts
            actions, log_probs, _, next_state = agent.act(obs, runner.recurrent_state, starts)
            step = runner.step(actions, next_state, t, playing)
            for name, value in (
                ("obs", obs),
                ("starts", starts),
                ("actions", actions),
                ("log_probs", log_probs),
                ("rewards", step.rewards),
                ("mask", step.playing),
            ):
                steps[name].append(value)
            playing = playing & ~step.ended
            if not playing.any():
                break
        stacked = {name: torch.stack(values) for name, values in steps.items()}
        return agent.make_group_batch(
            stacked["obs"],
            stacked["starts"],
            stacked["actions"],
            stacked["log_probs"],
            stacked["rewards"],
            stacked["mask"],
        )


# --algo grpo on top of its env's defaults: no critic (nor reward normalization, which scales the
# critic's targets and which an env's A2C recipe may turn on), Adam at PPO's 3e-4 (several epochs of
# minibatch steps per update, as PPO, whose settings GRPO's clipped objective shares), 32 envs
# (4 groups of 8), and a budget of env steps rather than updates, since rounds vary in length. A
# round holds thousands of env steps (LunarLander: about 13,000), so it logs and saves more often.
DEFAULTS: dict[str, Any] = {
    "critic": False,
    "normalize_reward": False,
    "num_envs": 32,
    "optimizer": "adam",
    "lr": 3e-4,
    "lr_schedule": "constant",
    "num_updates": 1_000_000,
    "max_env_steps": 1_000_000,
    "clip.epochs": 8,
    "clip.minibatches": 16,
    "log_interval": 1,
    "histogram_interval": 10,
    "checkpoint_interval": 10,
}


def defaults(env_name: str, family: EnvFamily) -> dict[str, Any]:
    """GRPO's defaults for ``env_name``: its env family's, with GRPO's on top."""
    return {**family.defaults(env_name), **DEFAULTS}


def check(config: Config) -> None:
    """Refuse, in one line, the settings that --algo grpo cannot train with."""
    if family_of(config.env_name).observes == "images":
        raise UsageError(
            f"--algo grpo works on vector-observation envs (CartPole-v1, LunarLander-v3, ...), not on {config.env_name}"
        )
    for enabled, flag in (
        (config.curiosity.enabled, "--icm"),
        (config.critic, "--critic"),
        (config.normalize_reward, "--normalize-reward"),
    ):
        if enabled:
            raise UsageError(
                f"--algo grpo trains without a critic and with group-relative returns; {flag} is for --algo a2c"
            )
    if config.randomize_domain == "adr":
        raise UsageError("--randomize-domain adr is for --algo a2c and ppo (a GRPO group plays one physics)")
    size = config.group.size
    if size < 2:
        raise UsageError(f"--group-size must be at least 2 (a member's baseline is the rest of its group), got {size}")
    if config.num_envs % size:
        raise UsageError(f"--group-size {size} must divide --num-envs {config.num_envs} (each env in one group)")
    horizon(config)


def horizon(config: Config) -> int:
    """Steps a GRPO member plays at most in a round: ``--horizon``, or the env's own time limit."""
    if config.group.horizon:
        return config.group.horizon
    limit = config.max_episode_frames or gym.spec(config.env_name).max_episode_steps
    if not limit:
        raise UsageError(f"{config.env_name} has no time limit: give --algo grpo a --horizon")
    return int(limit)
