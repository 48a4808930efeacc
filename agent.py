"""The agents: what every algorithm's agent is (:class:`Agent`: the network, its optimizer, acting,
a clipped gradient step, checkpoints), an agent that learns from rollouts with a critic
(:class:`RolloutAgent`), and A2C's (:class:`A2CAgent`: one gradient update per rollout). PPO's and
GRPO's agents are in their own files."""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn as nn
from torch.distributions import Categorical, Distribution

from checkpoints import load_checkpoint
from config import OPTIMIZERS, Config, optimizer_name
from devices import channels_last_for
from icm import ICM, RunningStd
from metrics import explained_variance, read_back
from model import ActorCritic, State, build_model, older_parameter_order
from storage import Batch, RolloutStorage, compute_returns, shuffled_minibatches
from utils import UsageError

# (rewards, values, dones, last_values) -> (returns, advantages): see storage.compute_returns
Estimator = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def a2c_loss(
    logits: torch.Tensor,
    values: Optional[torch.Tensor],
    actions: torch.Tensor,
    returns: torch.Tensor,
    advantages: torch.Tensor,
    value_coeff: float,
    entropy_coeff: float,
) -> dict[str, torch.Tensor]:
    """The A2C loss and its named terms; every term is a mean over all T x N samples.

    ``logits`` are a categorical policy's, or the policy's distribution itself (``ActorCritic.distribution``).

    ``policy = -mean(log pi(a|s) * A)`` with the advantage A held constant,
    ``value = mean((R - V(s))^2)``, ``entropy = mean(H(pi(.|s)))`` and
    ``total = policy + value_coeff * value - entropy_coeff * entropy``. Without a critic
    (``values`` None) there is no value term.
    """
    dist = logits if isinstance(logits, Distribution) else Categorical(logits=logits)
    policy = -(dist.log_prob(actions) * advantages.detach()).mean()
    entropy = dist.entropy().mean()
    terms = {"total": policy - entropy_coeff * entropy, "policy": policy, "entropy": entropy}
    if values is not None:
        terms["value"] = (returns.detach() - values).pow(2).mean()
        terms["total"] = terms["total"] + value_coeff * terms["value"]
    return terms


def standardized(
    advantages: torch.Tensor, eps: float = 1e-8, sum_over_ranks: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
) -> torch.Tensor:
    """``(A - mean(A)) / (std(A) + eps)`` over the whole rollout (``--normalize-advantages``). In a
    data-parallel run ``sum_over_ranks`` adds up the count, sum and sum of squares of every rank's
    advantages, so the mean and std are those of the whole batch, as in one process."""
    if sum_over_ranks is None:
        return (advantages - advantages.mean()) / (advantages.std() + eps)
    a = advantages.detach().double().flatten()
    moments = torch.stack([a.new_tensor(float(a.numel())), a.sum(), a.pow(2).sum()])
    count, total, squares = sum_over_ranks(moments).tolist()
    mean = total / count
    std = math.sqrt(max(squares - count * mean * mean, 0.0) / max(count - 1.0, 1.0))  # unbiased, as torch's std
    return (advantages - mean) / (std + eps)


class RMSpropTF(torch.optim.Optimizer):
    """RMSprop as TensorFlow computes it: the form the A2C settings (lr 7e-4, alpha 0.99, eps 1e-5) come from.

    ``v <- alpha * v + (1 - alpha) * g**2`` with ``v`` starting at 1, then ``w <- w - lr * g / sqrt(v + eps)``.

    ``torch.optim.RMSprop`` starts ``v`` at 0, so its first step moves every weight by
    ``lr / sqrt(1 - alpha)`` (10 x lr) in the direction of its gradient's sign, however small the
    gradient; on Pong those first updates blow up the conv features and saturate the LSTM's gates
    for good (docs/recurrent.md). Starting at 1, the first steps are plain gradient steps of size lr.
    """

    def __init__(self, params: Any, lr: float = 7e-4, alpha: float = 0.99, eps: float = 1e-5) -> None:
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps})

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        loss = None
        if closure is not None:  # torch's optimizers' contract: the closure recomputes the loss
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["square_avg"] = torch.ones_like(param, memory_format=torch.preserve_format)
                square_avg = state["square_avg"]
                square_avg.mul_(group["alpha"]).addcmul_(param.grad, param.grad, value=1 - group["alpha"])
                param.addcdiv_(param.grad, (square_avg + group["eps"]).sqrt_(), value=-group["lr"])
        return loss


def make_optimizer(name: str, params: Any, lr: float) -> torch.optim.Optimizer:
    """``rmsprop-tf`` (or its older name ``rmsprop``): :class:`RMSpropTF` (alpha 0.99, eps 1e-5); ``adam``: Adam (eps 1e-5);
    ``torch-rmsprop``: ``torch.optim.RMSprop`` (alpha 0.99, eps 1e-5), what checkpoints before
    :class:`RMSpropTF` were trained with; ``rmsprop-debiased``: torch's RMSprop with a
    bias-corrected square average (Adam with betas (0, 0.99), eps 1e-5)."""
    name = optimizer_name(name)
    if name == "rmsprop-tf":
        return RMSpropTF(params, lr=lr, alpha=0.99, eps=1e-5)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, eps=1e-5)
    if name == "torch-rmsprop":
        return torch.optim.RMSprop(params, lr=lr, alpha=0.99, eps=1e-5)
    if name == "rmsprop-debiased":
        # torch's RMSprop (eps outside the root) with its square average bias-corrected as Adam's,
        # which is what Adam without momentum computes: the first step is lr * sign(g), not 10 x that.
        return torch.optim.Adam(params, lr=lr, betas=(0.0, 0.99), eps=1e-5)
    raise ValueError(f"unknown optimizer {name!r} (one of {', '.join(OPTIMIZERS)})")


def agent_settings(config: Config) -> dict[str, Any]:
    """The settings every agent takes from a run's config: its optimizer, clipping, discount and entropy bonus."""
    return dict(
        lr=config.lr,
        optimizer=config.optimizer,
        entropy_coeff=config.entropy_coeff,
        max_grad_norm=config.max_grad_norm,
        gamma=config.gamma,
    )


class Agent:
    """What every algorithm's agent is: the network and its optimizer. It acts for the collector,
    takes clipped gradient steps, and saves and loads itself; an algorithm adds its update
    (:meth:`update`, the one method the training loop calls) and what that needs.

    ``trained``: modules the optimizer trains beside the network (A2C's curiosity module).
    """

    # Averages the gradients across the ranks of a data-parallel run (``distributed.gradient_reducer``);
    # None: one process.
    gradient_reducer: Optional[Callable[[list[torch.nn.Parameter]], None]] = None
    # Sums a small tensor over the ranks (``distributed.sum_over_ranks``), for statistics of the whole
    # batch; None: one process.
    sum_over_ranks: Optional[Callable[[torch.Tensor], torch.Tensor]] = None

    def __init__(
        self,
        model: ActorCritic,
        *,
        lr: float = 7e-4,
        optimizer: str = "rmsprop-tf",
        entropy_coeff: float = 0.01,
        max_grad_norm: float = 0.5,
        gamma: float = 0.99,
        trained: Sequence[nn.Module] = (),
    ) -> None:
        self.model = model
        self.networks = [model, *trained]  # what the optimizer trains, in its order
        self.params = [param for network in self.networks for param in network.parameters()]
        self.optimizer_name = optimizer_name(optimizer)  # older names read as today's
        self.optimizer = make_optimizer(optimizer, self.params, lr)
        self.entropy_coeff, self.max_grad_norm, self.gamma = entropy_coeff, max_grad_norm, gamma
        # State-dependent exploration's weights for the current rollout (see draw_exploration).
        self.exploration: Optional[torch.Tensor] = None

    @classmethod
    def from_config(cls, model: ActorCritic, config: Config) -> "Agent":
        """The agent that ``config`` describes around ``model``; an algorithm adds its own settings."""
        return cls(model, **agent_settings(config))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ acting
    @torch.inference_mode()
    def act(
        self, obs: torch.Tensor, state: State, episode_starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State]:
        """Sample one action per env: returns actions ``[N]``, their log-probabilities ``[N]``,
        values ``[N]`` (None without a critic) and the next state."""
        logits, values, state = self.model(obs, state, episode_starts)
        dist = self.model.distribution(logits)
        actions = self.sample(dist, logits)
        return actions, dist.log_prob(actions), values, state

    def act_with_graph(
        self, obs: torch.Tensor, state: State, episode_starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, State]:
        """:meth:`act` with gradients: returns actions ``[N]``, their log-probabilities ``[N]``
        (detached), logits ``[N, A]`` and values ``[N]`` with their graph, and the next state (its
        graph reaches back to the rollout's start).

        The weights do not change while a rollout is collected, so this forward pass is exactly
        the one the update needs: the loss trains through it (``Batch.outputs``) instead of
        running the rollout through the network a second time. The actions are sampled as
        :meth:`act` samples them, from the same random stream.
        """
        logits, values, state = self.model(obs, state, episode_starts)
        with torch.no_grad():
            dist = self.model.distribution(logits)
            actions = self.sample(dist, logits)
            log_probs = dist.log_prob(actions)
        return actions, log_probs, logits, values, state

    def sample(self, dist: Distribution, logits: torch.Tensor) -> torch.Tensor:
        """An action per env from the policy ``dist``. With state-dependent exploration and noise
        drawn for the rollout (:meth:`draw_exploration`), env i's action is its mean plus
        ``features_i @ W_i``: the same weights ``W_i`` through the rollout, so the noise changes
        with the state, smoothly, rather than at random every step (gSDE, Raffin et al. 2022)."""
        if self.exploration is None or self.exploration.shape[0] != logits.shape[0]:
            return dist.sample()
        return self.model.policy.sample(logits, self.exploration)

    @torch.no_grad()
    def draw_exploration(self, num_envs: int) -> None:
        """New exploration weights ``W [N, F, A] ~ N(0, exp(log_std)^2)`` for a rollout of
        ``num_envs`` envs; nothing without state-dependent exploration."""
        if self.model.policy.sde:
            self.exploration = self.model.policy.draw_weights(num_envs)

    # ------------------------------------------------------------------ learning
    def update(self, batch: Any, index: int = 0, on_loss: Optional[Callable[[float], None]] = None) -> dict[str, float]:
        """The update every algorithm implements: learn from one collected batch (update ``index`` of
        the run, counted from 0). ``on_loss`` sees the batch's total loss before the weights change
        (the best-loss checkpoint). Returns the statistics to log, ``skipped`` among them."""
        raise NotImplementedError(f"{type(self).__name__} has no update")

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def step(
        self,
        terms: dict[str, torch.Tensor],
        extra: Optional[dict[str, torch.Tensor]] = None,
        before_step: Optional[Callable[[dict[str, float]], None]] = None,
    ) -> dict[str, float]:
        """Backpropagate ``terms["total"]``, clip, step. Returns the loss terms, the 0-d tensors of
        ``extra`` and ``grad_norm`` (before clipping) as floats, read from the device in one
        transfer; ``before_step`` sees them before the weights change.

        A non-finite loss or gradient leaves the weights and optimizer untouched and returns
        ``skipped = 1``: one bad batch must not poison the run.
        """
        self.optimizer.zero_grad(set_to_none=True)
        total = terms["total"]
        if self.gradient_reducer is not None and not math.isfinite(float(total.detach())):
            # A data-parallel run: every rank joins the reduction, and this rank's non-finite gradient
            # makes the average non-finite on all, so all skip the update.
            total = total * float("nan")
        total.backward()
        self.reduce_gradients()
        grad_norm = nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        stats = read_back({**terms, **(extra or {}), "grad_norm": grad_norm})
        finite = math.isfinite(stats["total"]) and math.isfinite(stats["grad_norm"])
        if not math.isfinite(stats["total"]):
            stats["grad_norm"] = float("nan")
        stats["skipped"] = 0.0 if finite else 1.0
        if before_step is not None:
            before_step(stats)
        if not finite:
            self.optimizer.zero_grad(set_to_none=True)
            return stats
        self.optimizer.step()
        return stats

    def minibatch_epochs(
        self,
        units: torch.Tensor,
        epochs: int,
        minibatches: int,
        loss_of: Callable[[torch.Tensor], dict[str, torch.Tensor]],
        generator: Optional[torch.Generator] = None,
    ) -> tuple[dict[str, float], int, int]:
        """``epochs`` shuffled passes over ``units`` in ``minibatches`` minibatches (at most one a
        unit), one :meth:`step` on ``loss_of(minibatch)`` each (PPO's and GRPO's updates). Returns
        the mean of each statistic over the steps taken, the steps taken, and the steps a
        non-finite loss skipped."""
        sums: dict[str, float] = {}
        steps = skipped = 0
        for _ in range(epochs):
            for part in shuffled_minibatches(units, min(minibatches, len(units)), generator):
                result = self.step(loss_of(part))
                if result["skipped"]:
                    skipped += 1
                    continue
                steps += 1
                for name, value in result.items():
                    sums[name] = sums.get(name, 0.0) + value
        return {name: value / max(steps, 1) for name, value in sums.items()}, steps, skipped

    def reduce_gradients(self) -> None:
        """Hook between backward and clipping: a data-parallel run averages the gradients of every
        parameter here (``self.params``, the policy's and the curiosity module's) across its ranks
        with ``gradient_reducer`` (``distributed.average_gradients``)."""
        if self.gradient_reducer is not None:
            self.gradient_reducer(self.params)

    # ------------------------------------------------------------------ checkpoints
    def state(self, full: bool = True) -> dict[str, Any]:
        """The agent's part of a checkpoint: the network, and with ``full`` the optimizer (so
        a2c_last resumes exactly; the best-* files play without it)."""
        data: dict[str, Any] = {"model_spec": self.model.spec, "model": self.model.state_dict()}
        if full:
            data["optimizer"] = self.optimizer.state_dict()
            data["optimizer_name"] = self.optimizer_name
        return data

    def load(self, checkpoint: dict[str, Any], path: str = "checkpoint") -> None:
        """Weights, and the optimizer state when the checkpoint has it for this optimizer."""
        _load_weights(self.model, checkpoint["model"], path)
        if "optimizer" in checkpoint and checkpoint.get("optimizer_name") == self.optimizer_name:
            self.optimizer.load_state_dict(_in_todays_order(checkpoint["optimizer"], checkpoint["model"], self.model))


class RolloutAgent(Agent):
    """An agent that learns from rollouts with a critic (A2C's, PPO's): it gives the values that
    bootstrap a rollout and turns the rollout into returns and advantages with its ``estimator``
    (by default n-step returns or GAE: :func:`storage.compute_returns` with ``gamma`` and
    ``gae_lambda``)."""

    def __init__(
        self,
        model: ActorCritic,
        *,
        value_coeff: float = 0.5,
        gae_lambda: float = 1.0,
        estimator: Optional[Estimator] = None,
        normalize_advantages: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.value_coeff, self.gae_lambda = value_coeff, gae_lambda
        self.estimator = estimator or functools.partial(compute_returns, gamma=self.gamma, gae_lambda=gae_lambda)
        self.normalize_advantages = normalize_advantages

    @classmethod
    def from_config(cls, model: ActorCritic, config: Config) -> "RolloutAgent":
        return cls(model, **rollout_settings(config))

    @torch.inference_mode()
    def value(self, obs: torch.Tensor, state: State, episode_starts: torch.Tensor) -> torch.Tensor:
        """Values ``[N]`` for bootstrapping; ``state`` is not advanced."""
        return self.model.value(obs, state, episode_starts)

    def make_batch(self, storage: RolloutStorage) -> Batch:
        """The rollout with its returns and advantages, from the env rewards."""
        return self.estimate(storage, storage.rewards)

    def estimate(self, storage: RolloutStorage, rewards: torch.Tensor, **extra: Any) -> Batch:
        """The rollout with the returns and advantages the estimator gives for ``rewards`` plus the
        bootstrap (``gamma * V(terminal obs)`` where a time limit cut the episode); ``extra`` fills
        the optional fields of the batch."""
        returns, advantages = self.estimator(
            rewards + storage.bootstrap, storage.values, storage.dones, storage.last_values
        )
        return storage.batch(returns, advantages, **extra)


def rollout_settings(config: Config) -> dict[str, Any]:
    """The settings of an agent that learns from rollouts with a critic (:class:`RolloutAgent`)."""
    return dict(
        agent_settings(config),
        value_coeff=config.value_coeff,
        gae_lambda=config.gae_lambda,
        normalize_advantages=config.normalize_advantages,
    )


class A2CAgent(RolloutAgent):
    """Advantage actor-critic: one gradient step on each rollout (:meth:`update`).

    ``intrinsic`` is an optional intrinsic-reward provider (see ``icm.py``): when given, its
    reward is mixed into each rollout before returns are computed, its losses join the objective
    as ``icm_lambda * A2C + provider total``, and its weights join the optimizer and checkpoints.
    When ``None`` (the default) none of this exists and the update is the plain A2C update.
    """

    def __init__(
        self,
        model: ActorCritic,
        *,
        intrinsic: Optional[ICM] = None,
        icm_lambda: float = 0.1,
        extrinsic_coeff: float = 1.0,
        normalize_intrinsic: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, trained=[intrinsic] if intrinsic is not None else [], **kwargs)
        self.intrinsic = intrinsic
        self.icm_lambda, self.extrinsic_coeff = icm_lambda, extrinsic_coeff
        self.intrinsic_std = RunningStd() if (intrinsic is not None and normalize_intrinsic) else None

    @classmethod
    def from_config(cls, model: ActorCritic, config: Config) -> "A2CAgent":
        """The agent that ``config`` describes around ``model``, with its curiosity module (``--icm``)."""
        curiosity = config.curiosity
        return cls(
            model,
            **rollout_settings(config),
            intrinsic=build_curiosity(config, model),
            icm_lambda=curiosity.policy_weight,
            extrinsic_coeff=curiosity.extrinsic_coeff,
            normalize_intrinsic=curiosity.normalize,
        )

    def make_batch(self, storage: RolloutStorage) -> Batch:
        """The rollout with its returns and advantages: the one place rewards are put together.

        ``reward = env reward + bootstrap`` (``gamma * V(terminal obs)`` where a time limit cut the
        episode), and with a curiosity provider ``reward = extrinsic_coeff * env reward + r_i +
        bootstrap``, where ``r_i`` is zero for transitions that end an episode, since the
        observation after them is a reset, not their consequence. The agent's estimator turns
        them into returns and advantages.
        """
        if self.intrinsic is None:
            return self.estimate(storage, storage.rewards)
        frames, valid = storage.frames(), 1.0 - storage.dones
        intrinsic, losses = self.intrinsic.rewards_and_losses(frames, storage.actions, valid)
        if self.intrinsic_std is not None:
            self.intrinsic_std.update(intrinsic[valid > 0])
            intrinsic = intrinsic / (self.intrinsic_std.std + 1e-8)
        rewards = self.extrinsic_coeff * storage.rewards + intrinsic
        return self.estimate(
            storage,
            rewards,
            next_obs=frames[1:],
            valid=valid,
            reward_parts={"intrinsic": intrinsic},
            intrinsic_losses=losses,
        )

    def loss(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The loss terms of a rollout: trained through the outputs kept from collecting it
        (``batch.outputs``), or, without them, through the rollout run again from its detached
        initial state (the same numbers: the same weights see the same frames and states).

        Names without a slash are A2C terms; a provider's terms come as ``icm/<name>``, and with
        a provider ``total = icm_lambda * a2c_total + provider total`` (``a2c_total`` keeps the A2C part).
        """
        if batch.outputs is not None:
            logits, values = batch.outputs
        else:
            logits, values, _ = self.model.forward_sequence(batch.obs, batch.initial_state, batch.episode_starts)
        if self.model.critic is None:
            values = None
        advantages = (
            standardized(batch.advantages, sum_over_ranks=self.sum_over_ranks)
            if self.normalize_advantages
            else batch.advantages
        )
        terms = a2c_loss(
            self.model.distribution(logits),
            values,
            batch.actions,
            batch.returns,
            advantages,
            self.value_coeff,
            self.entropy_coeff,
        )
        if self.intrinsic is None:
            return terms
        curiosity = batch.intrinsic_losses
        if curiosity is None:
            curiosity = self.intrinsic.losses(batch.obs, batch.next_obs, batch.actions, batch.valid)
        terms["a2c_total"] = terms["total"]
        terms["total"] = self.icm_lambda * terms["total"] + curiosity["total"]
        terms.update({f"icm/{name}": value for name, value in curiosity.items() if name != "total"})
        return terms

    def update(
        self, batch: Batch, index: int = 0, on_loss: Optional[Callable[[float], None]] = None
    ) -> dict[str, float]:
        """A2C's update: one gradient step, :meth:`loss` then :meth:`step` (see :meth:`Agent.update`)."""
        before_step = None if on_loss is None else (lambda stats: on_loss(stats["total"]))
        return self.step(self.loss(batch), extra=rollout_stats(batch), before_step=before_step)

    def state(self, full: bool = True) -> dict[str, Any]:
        """The agent's checkpoint part, and with ``full`` the curiosity module and its reward scale."""
        data = super().state(full)
        if full and self.intrinsic is not None:
            data["intrinsic"] = self.intrinsic.state_dict()
            if self.intrinsic_std is not None:
                data["intrinsic_std"] = self.intrinsic_std.state_dict()
        return data

    def load(self, checkpoint: dict[str, Any], path: str = "checkpoint") -> None:
        """Weights, optimizer and curiosity state, each when the checkpoint has it for this setup."""
        super().load(checkpoint, path)
        if self.intrinsic is not None and "intrinsic" in checkpoint:
            _load_weights(self.intrinsic, checkpoint["intrinsic"], path)
        if self.intrinsic_std is not None and "intrinsic_std" in checkpoint:
            self.intrinsic_std.load_state_dict(checkpoint["intrinsic_std"])


def _load_weights(module: nn.Module, weights: dict[str, Any], path: str) -> None:
    """``weights`` into ``module``, or a one-line error naming the checkpoint."""
    try:
        module.load_state_dict(weights)
    except RuntimeError:
        raise UsageError(f"checkpoint {path} was saved by another architecture") from None


def _in_todays_order(
    optimizer_state: dict[str, Any], saved_weights: dict[str, Any], model: ActorCritic
) -> dict[str, Any]:
    """A saved optimizer state, its per-parameter entries put in the order of ``model``'s
    parameters today (see ``model.older_parameter_order``); the network's parameters come first
    in the optimizer, curiosity's after them, unmoved."""
    order = older_parameter_order(list(saved_weights), model)
    if order is None:
        return optimizer_state
    state = dict(optimizer_state["state"])
    moved = {new: state.pop(old) for new, old in enumerate(order) if old in state}
    state = {i: v for i, v in state.items() if i >= len(order)}
    return {**optimizer_state, "state": {**moved, **state}}


def rollout_stats(batch: Batch) -> dict[str, torch.Tensor]:
    """What a practitioner checks of the critic each update, as 0-d tensors still on the device:
    explained variance of the returns by the values (1: perfect, 0: no better than their mean,
    below 0: worse), and the means of value predictions, value targets (returns) and advantages,
    with the advantages' spread."""
    return {
        "explained_variance": explained_variance(batch.values, batch.returns),
        "rollout/value_mean": batch.values.mean(),
        "rollout/return_mean": batch.returns.mean(),
        "rollout/advantage_mean": batch.advantages.mean(),
        "rollout/advantage_std": batch.advantages.std(),
    }


def build_network(
    config: Config,
    obs_shape: tuple[int, ...],
    num_actions: int,
    device: torch.device | str = "cpu",
    continuous: bool = False,
) -> ActorCritic:
    """The policy network that ``config`` describes; ``continuous``: ``num_actions`` is the
    dimension of a continuous action (a Gaussian policy)."""
    speed = config.speed
    return build_model(
        obs_shape,
        num_actions,
        recurrent=config.recurrent,
        hidden_size=config.hidden_size,
        feature_norm=config.feature_norm,
        core_skip=config.core_skip,
        continuous=continuous,
        lstm_norm=config.lstm_norm,
        critic=config.critic,
        arch=config.arch,
        mlp_width=config.mlp_width,
        log_std_init=config.log_std_init,
        sde=config.sde,
        conv_filters=config.conv_filters,
        # Vector observations without memory: actor and critic each with an MLP of its own.
        separate_critic=len(obs_shape) == 1 and not config.recurrent,
        channels_last=channels_last_for(speed.channels_last, torch.device(device), speed.bf16),
        bf16=speed.bf16,
        encoder_chunk=speed.encoder_chunk,
    ).to(device)


def build_curiosity(config: Config, model: ActorCritic) -> Optional[ICM]:
    """The curiosity module of ``--icm`` for ``model``'s observations and actions, on its device; None without."""
    speed, curiosity = config.speed, config.curiosity
    if not curiosity.enabled:
        return None
    device = next(model.parameters()).device
    return ICM(
        tuple(model.spec["obs_shape"]),
        model.spec["num_actions"],
        eta=curiosity.eta,
        beta=curiosity.beta,
        channels_last=channels_last_for(speed.channels_last, device, speed.bf16),
        encoder_chunk=speed.encoder_chunk,
        forward_trains_phi=curiosity.forward_trains_encoder,
    ).to(device)


def load_model(
    path: str, device: torch.device | str = "cpu", bf16: bool = False, encoder_chunk: int = 0
) -> ActorCritic:
    """The network saved in any checkpoint of this project (a2c_best_loss, a2c_best_reward, a2c_last);
    ``bf16`` and ``encoder_chunk`` are speed settings (see ``ActorCritic``)."""
    data = load_checkpoint(path)
    model = build_model(**data["model_spec"], bf16=bf16, encoder_chunk=encoder_chunk)
    try:
        model.load_state_dict(data["model"])
    except RuntimeError:
        raise UsageError(f"checkpoint {path} does not match its own architecture description") from None
    return model.to(device)
