"""Rollout buffer and the discounted-return / advantage formula (the estimator the agent uses by default).

Signals, one name each, used the same way everywhere in the project:

* ``dones[t, i] = 1``: env i's episode ended with the action taken at step t
  (death, game over, life loss when that ends learning episodes, or a time limit).
* ``episode_starts[t, i] = 1``: the observation at step t is the first of a new episode, so
  the recurrent state must be zeroed before it is read. ``episode_starts[t] = dones[t - 1]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch


def compute_returns(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Discounted returns and advantages of a rollout of T steps in N envs.

    Shapes: ``rewards``, ``values``, ``dones`` are ``[T, N]``; ``last_values`` is ``[N]``, the
    value of the observation that follows step T-1 (the bootstrap). With ``V_T = last_values``
    and ``m_t = 1 - dones[t]`` (0 where the episode ended at step t)::

        delta_t = r_t + gamma * m_t * V_{t+1} - V_t
        A_t     = delta_t + gamma * gae_lambda * m_t * A_{t+1},     A_T = 0
        R_t     = A_t + V_t

    * ``gae_lambda = 1``: ``R_t = r_t + gamma * m_t * R_{t+1}`` with ``R_T = V_T``, the n-step
      discounted return bootstrapped from ``last_values`` and cut where an episode ended.
    * ``gae_lambda = 0``: ``R_t = r_t + gamma * m_t * V_{t+1}``, the one-step TD target.
    * in between: generalized advantage estimation (Schulman et al. 2016).

    A time-limit truncation is not a death: the caller adds ``gamma * V(terminal_obs)`` to that
    step's reward and marks the step done, so the return still counts the future it cut off.

    Returns ``(returns, advantages)``, both ``[T, N]``, with ``advantages = returns - values``.
    Computed without gradient: the targets are constants for the loss.
    """
    if rewards.dim() != 2 or values.shape != rewards.shape or dones.shape != rewards.shape:
        raise ValueError(
            f"rewards, values and dones must share a [T, N] shape, got "
            f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(dones.shape)}"
        )
    if last_values.shape != rewards.shape[1:]:
        raise ValueError(f"last_values must be [N]={tuple(rewards.shape[1:])}, got {tuple(last_values.shape)}")
    with torch.no_grad():
        rewards, values, last_values = rewards.float(), values.float(), last_values.float()
        not_done = 1.0 - dones.float()
        advantages = torch.zeros_like(rewards)
        next_value = last_values
        next_advantage = torch.zeros_like(last_values)
        for t in reversed(range(rewards.shape[0])):
            delta = rewards[t] + gamma * not_done[t] * next_value - values[t]
            next_advantage = delta + gamma * gae_lambda * not_done[t] * next_advantage
            advantages[t] = next_advantage
            next_value = values[t]
        return advantages + values, advantages


@dataclass
class Batch:
    """One rollout, ready for the loss. Time-major: every field starts with ``[T, N]``."""

    obs: torch.Tensor  # [T, N, ...] in the observation space's dtype (uint8 frames)
    episode_starts: torch.Tensor  # [T, N] float, 1 where obs[t] starts a new episode
    actions: torch.Tensor  # [T, N] long, or [T, N, A] float for continuous actions
    returns: torch.Tensor  # [T, N] float
    advantages: torch.Tensor  # [T, N] float
    values: torch.Tensor  # [T, N] float, the values seen while collecting
    log_probs: torch.Tensor  # [T, N] float, log pi(a_t | s_t) of the policy that acted
    initial_state: tuple[torch.Tensor, ...]  # recurrent state before obs[0] (detached)
    # The policy's logits [T, N, A] and values [T, N] computed while collecting, with their graph:
    # the loss trains through them. None: the loss runs the rollout through the network again.
    outputs: Optional[tuple[torch.Tensor, torch.Tensor]] = None
    # A curiosity provider's loss terms on this rollout, with their graph (None: computed in the loss).
    intrinsic_losses: Optional[dict[str, torch.Tensor]] = None
    next_obs: Optional[torch.Tensor] = None  # [T, N, ...], obs after step t (for curiosity)
    valid: Optional[torch.Tensor] = None  # [T, N] float, 1 where next_obs[t] is the true next obs
    reward_parts: dict[str, torch.Tensor] = field(default_factory=dict)  # e.g. {"intrinsic": [T, N]}


class RolloutStorage:
    """Preallocated ``[T, N]`` buffers for one rollout of ``rollout_size`` steps in ``num_envs`` envs.

    It stores; it does not estimate. The runner fills step t with :meth:`insert` and ends the
    rollout with :meth:`finish`; the agent computes returns and advantages from the stored
    rewards, values and dones with its estimator (e.g. :func:`compute_returns`) and packs them
    with :meth:`batch`. The env rewards and the time-limit bootstraps are kept apart, so an
    intrinsic reward (curiosity) can be mixed in without scaling a value estimate as if it were a reward.

    Observations keep the dtype of the observation space (``obs_dtype``: ``uint8`` frames stay one
    byte a pixel until the model scales them; vector observations stay float). Actions are
    indices, or vectors of ``action_shape`` for continuous actions (stored as sampled, before any
    clipping to the env's bounds).
    """

    def __init__(
        self,
        rollout_size: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        device: torch.device | str = "cpu",
        obs_dtype: torch.dtype = torch.uint8,
        action_shape: tuple[int, ...] = (),
    ) -> None:
        self.rollout_size, self.num_envs = rollout_size, num_envs
        T, N = rollout_size, num_envs
        self.obs = torch.zeros((T, N, *obs_shape), dtype=obs_dtype, device=device)
        self.episode_starts = torch.zeros((T, N), device=device)
        # Discrete actions: [T, N] long; continuous ones (action_shape (A,)): [T, N, A] float, as sampled.
        self.actions = torch.zeros(
            (T, N, *action_shape), dtype=torch.float32 if action_shape else torch.long, device=device
        )
        self.log_probs = torch.zeros((T, N), device=device)  # log pi(a_t | s_t) of the acting policy
        self.values = torch.zeros((T, N), device=device)
        self.rewards = torch.zeros((T, N), device=device)
        self.dones = torch.zeros((T, N), device=device)
        self.bootstrap = torch.zeros((T, N), device=device)  # gamma * V(terminal obs) at truncated steps
        self.last_obs = torch.zeros((N, *obs_shape), dtype=obs_dtype, device=device)
        self.last_values = torch.zeros(N, device=device)
        self.initial_state: tuple[torch.Tensor, ...] = ()
        self.output_logits: list[torch.Tensor] = []
        self.output_values: list[torch.Tensor] = []

    def start(self, state: tuple[torch.Tensor, ...]) -> None:
        """Begin a rollout from the recurrent ``state``; gradients never flow into an earlier rollout."""
        self.initial_state = tuple(s.detach().clone() for s in state)
        self.output_logits, self.output_values = [], []

    def keep_outputs(self, logits: torch.Tensor, values: torch.Tensor) -> None:
        """The next step's policy logits ``[N, A]`` and values ``[N]`` with their graph, for the loss."""
        self.output_logits.append(logits)
        self.output_values.append(values)

    def insert(
        self,
        step: int,
        obs: torch.Tensor,
        episode_starts: torch.Tensor,
        actions: torch.Tensor,
        values: torch.Tensor,
        rewards: torch.Tensor,
        dones: torch.Tensor,
        bootstrap: Optional[torch.Tensor] = None,
        log_probs: Optional[torch.Tensor] = None,
    ) -> None:
        """Step ``step``: what was seen and done, the env reward and done flag it produced,
        ``bootstrap = gamma * V(terminal obs)`` where a time limit cut the episode (else 0), and the
        log-probabilities of the actions under the policy that chose them (else 0)."""
        self.obs[step].copy_(obs)
        self.episode_starts[step].copy_(episode_starts)
        self.actions[step].copy_(actions)
        self.values[step].copy_(values)
        self.rewards[step].copy_(rewards)
        self.dones[step].copy_(dones)
        for buffer, value in ((self.bootstrap, bootstrap), (self.log_probs, log_probs)):
            if value is None:
                buffer[step].zero_()
            else:
                buffer[step].copy_(value)

    def finish(self, last_obs: torch.Tensor, last_values: torch.Tensor) -> None:
        """The observation after the last step and its value (the bootstrap of the returns)."""
        self.last_obs.copy_(last_obs)
        self.last_values.copy_(last_values)

    def frames(self) -> torch.Tensor:
        """``[T+1, N, ...]``: each step's observation, then the one after the last step."""
        return torch.cat([self.obs, self.last_obs.unsqueeze(0)])

    def next_obs(self) -> torch.Tensor:
        """``[T, N, ...]``: the observation that followed each step (after a done: the reset one)."""
        return self.frames()[1:]

    def batch(self, returns: torch.Tensor, advantages: torch.Tensor, **extra) -> Batch:
        """The rollout with the ``returns`` and ``advantages`` the agent estimated for it; ``extra``
        fills the optional fields of :class:`Batch`."""
        outputs = None
        if len(self.output_logits) == self.rollout_size:
            outputs = torch.stack(self.output_logits), torch.stack(self.output_values)
        return Batch(
            obs=self.obs,
            episode_starts=self.episode_starts,
            actions=self.actions,
            returns=returns,
            advantages=advantages,
            values=self.values,
            log_probs=self.log_probs,
            initial_state=self.initial_state,
            outputs=outputs,
            **extra,
        )


def shuffled_minibatches(
    units: torch.Tensor, minibatches: int, generator: Optional[torch.Generator] = None
) -> Iterator[torch.Tensor]:
    """One pass over ``units`` (indices into a batch: PPO's samples or envs, GRPO's members) in a
    random order drawn from ``generator``, in ``minibatches`` parts as equal as they split."""
    order = torch.randperm(len(units), generator=generator).to(units.device)
    yield from torch.tensor_split(units[order], minibatches)
