"""Intrinsic Curiosity Module (Pathak et al. 2017, "Curiosity-driven Exploration by Self-supervised Prediction").

An intrinsic-reward provider: the agent hands it each rollout's frames and actions, the
transitions ``(s_t, a_t, s_t+1)``, and gets back a curiosity reward per transition and the
module's own losses, from one pass of the frames through the module. The runner never sees it.
Any other provider (random network distillation, say) fits the same slot by offering the same
method, ``rewards_and_losses``.

Transitions whose ``s_t+1`` is not the true next observation (the env reset after a done) carry
``valid = 0``: their reward is zero and they are left out of every loss.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from nets.encoders import ConvEncoder


class IntrinsicRewardProvider(Protocol):
    """What the agent asks of a curiosity-style module; ``nn.Module`` so it can be optimized and saved."""

    def rewards_and_losses(
        self, frames: torch.Tensor, actions: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``frames [T+1, N, ...]``: the rollout's observations, then the one after its last step,
        so transition t goes from ``frames[t]`` to ``frames[t+1]`` by ``actions[t]``.

        Returns the intrinsic reward ``[T, N]`` of each transition, without gradient and 0 where
        ``valid`` is 0, and the named loss terms with their graph (the weights are the ones the
        update will change); ``total`` is what the agent adds to its objective."""


def masked_mean(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the samples where ``valid`` is 1 (0 when there are none)."""
    return (values * valid).sum() / valid.sum().clamp(min=1.0)


class ICM(nn.Module):
    """Feature encoder phi, inverse model and forward model.

    * phi: the policy's conv shape (4 conv layers, 32 filters, 3x3, stride 2) -> 288 features;
    * inverse model: ``[phi(s_t), phi(s_t+1)] -> 256 -> action logits``, cross-entropy ``L_I``;
    * forward model: ``[phi(s_t), onehot(a_t)] -> 256 -> phi_hat(s_t+1)``,
      ``L_F = 1/2 ||phi_hat(s_t+1) - phi(s_t+1)||^2`` (a sum over features, a mean over transitions);
    * intrinsic reward ``r_i = eta/2 ||phi_hat(s_t+1) - phi(s_t+1)||^2``, without gradient.

    By default both losses train phi, as in the paper's objective and the authors' code: the
    inverse loss makes the features keep what the agent's actions affect, and the forward loss
    keeps them small. With ``forward_trains_phi=False`` the forward loss sees phi's features
    detached and trains the forward model only; phi then learns from the inverse loss alone, so it
    cannot shrink its features to make prediction (and curiosity) easy. Its features may grow
    instead (cross-entropy on separable data rewards ever larger logits), which normalizing the
    intrinsic reward by its running std takes out.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        eta: float = 0.01,
        beta: float = 0.2,
        hidden_size: int = 256,
        channels_last: bool = False,
        forward_trains_phi: bool = True,
        encoder_chunk: int = 0,
    ) -> None:
        super().__init__()
        self.forward_trains_phi = forward_trains_phi
        self.spec = {"obs_shape": list(obs_shape), "num_actions": int(num_actions), "hidden_size": int(hidden_size)}
        self.num_actions, self.eta, self.beta = num_actions, eta, beta
        self.phi = ConvEncoder(obs_shape[0], channels_last, encoder_chunk)
        if channels_last:
            self.phi.to(memory_format=torch.channels_last)
        features = self.phi.out_features
        self.inverse = nn.Sequential(
            nn.Linear(2 * features, hidden_size), nn.ELU(), nn.Linear(hidden_size, num_actions)
        )
        self.forward_model = nn.Sequential(
            nn.Linear(features + num_actions, hidden_size), nn.ELU(), nn.Linear(hidden_size, features)
        )

    def _flat(self, obs: torch.Tensor, next_obs: torch.Tensor, actions: torch.Tensor):
        lead = actions.shape
        obs = obs.reshape(-1, *obs.shape[len(lead) :])
        next_obs = next_obs.reshape(-1, *next_obs.shape[len(lead) :])
        return obs, next_obs, actions.reshape(-1), lead

    def prediction_error(self, phi: torch.Tensor, phi_next: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``1/2 ||phi_hat(s_t+1) - phi(s_t+1)||^2`` per transition."""
        onehot = F.one_hot(actions, self.num_actions).float()
        predicted = self.forward_model(torch.cat([phi, onehot], dim=1))
        return 0.5 * (predicted - phi_next).pow(2).sum(dim=1)

    @torch.no_grad()
    def rewards(
        self, obs: torch.Tensor, next_obs: torch.Tensor, actions: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Intrinsic reward of transitions ``obs -> next_obs`` (shaped as ``actions``), 0 where ``valid`` is 0."""
        obs, next_obs, flat_actions, lead = self._flat(obs, next_obs, actions)
        error = self.prediction_error(self.phi(obs), self.phi(next_obs), flat_actions)
        return self.eta * error.view(lead) * valid

    def losses(
        self, obs: torch.Tensor, next_obs: torch.Tensor, actions: torch.Tensor, valid: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The loss terms of transitions ``obs -> next_obs`` (any leading shape, as ``actions``)."""
        obs, next_obs, flat_actions, _ = self._flat(obs, next_obs, actions)
        return self._losses(self.phi(obs), self.phi(next_obs), flat_actions, valid.reshape(-1).float())[0]

    def rewards_and_losses(
        self, frames: torch.Tensor, actions: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`rewards` and :meth:`losses` of the transitions ``frames[t] -> frames[t+1]``, from
        one pass of the T+1 frames through phi (the separate calls take four passes of T frames)."""
        T, N = actions.shape
        features = self.phi(frames.reshape(-1, *frames.shape[2:])).view(T + 1, N, -1)
        mask = valid.reshape(-1).float()
        terms, error = self._losses(
            features[:-1].reshape(T * N, -1), features[1:].reshape(T * N, -1), actions.reshape(-1), mask
        )
        return self.eta * error.detach().view(T, N) * valid, terms

    def _losses(
        self, phi: torch.Tensor, phi_next: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The loss terms from features of ``[B]`` transitions, and each one's forward-model error."""
        logits = self.inverse(torch.cat([phi, phi_next], dim=1))
        inverse = masked_mean(F.cross_entropy(logits, actions, reduction="none"), mask)
        if not self.forward_trains_phi:
            phi, phi_next = phi.detach(), phi_next.detach()
        error = self.prediction_error(phi, phi_next, actions)
        forward = masked_mean(error, mask)
        with torch.no_grad():
            accuracy = masked_mean((logits.argmax(dim=1) == actions).float(), mask)
        total = (1.0 - self.beta) * inverse + self.beta * forward
        return {"total": total, "inverse": inverse, "forward": forward, "inverse_accuracy": accuracy}, error


class RunningStd:
    """Running standard deviation (parallel Welford) of every value seen, for scaling rewards."""

    def __init__(self) -> None:
        self.count, self.mean, self.m2 = 0.0, 0.0, 0.0

    def update(self, values: torch.Tensor) -> None:
        values = values.detach().double().flatten()
        n = float(values.numel())
        if n == 0:
            return
        mean, var = float(values.mean()), float(values.var(unbiased=False))
        delta, total = mean - self.mean, self.count + n
        self.m2 += var * n + delta * delta * self.count * n / total
        self.mean += delta * n / total
        self.count = total

    @property
    def std(self) -> float:
        return (self.m2 / self.count) ** 0.5 if self.count > 1 else 1.0

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.count, self.mean, self.m2 = state["count"], state["mean"], state["m2"]
