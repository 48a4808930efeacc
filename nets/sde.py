"""State-dependent exploration (gSDE, Raffin et al. 2022): a Gaussian policy head whose spread is
a learned function of the state, and whose noise, drawn once a rollout, follows the state.

The spread of action ``j`` in a state with (detached) actor features ``f`` is
``sqrt(sum_i f_i^2 * exp(log_std[i, j])^2)``. In training each env draws exploration weights
``W ~ N(0, exp(log_std)^2)`` ``[F, A]`` at the start of a rollout and acts ``mean + f @ W``:
the same weights through the rollout, so the noise changes with the state, smoothly, not at
random every step. Evaluation and GRPO draw from the distribution every step instead.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributions import Distribution, Independent, Normal

SDE_EPSILON = 1e-6  # added to a state-dependent variance, which is 0 where the features are


class StateDependentPolicy(nn.Module):
    """The policy head of gSDE. Its output ``[..., A + F]`` is the mean followed by the features
    its spread reads (detached: the spread does not train the features)."""

    continuous = True
    sde = True

    def __init__(self, in_features: int, action_dim: int, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, action_dim)
        self.log_std = nn.Parameter(torch.full((in_features, action_dim), float(log_std_init)))

    def forward(self, core: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.linear(core), core.detach()], -1)

    def mode(self, out: torch.Tensor) -> torch.Tensor:
        """The most probable action: the mean."""
        return out[..., : self.linear.out_features]

    def features(self, out: torch.Tensor) -> torch.Tensor:
        """The (detached) features ``[..., F]`` that ``forward`` appended to the mean."""
        return out[..., self.linear.out_features :]

    def distribution(self, out: torch.Tensor) -> Distribution:
        variance = self.features(out).pow(2) @ self.log_std.exp().pow(2)
        return Independent(
            Normal(self.mode(out), (variance + SDE_EPSILON).sqrt(), validate_args=False), 1, validate_args=False
        )

    def sample_with(self, out: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """An action from standard normal ``noise`` of the action's shape: mean + spread * noise."""
        return self.mode(out) + self.distribution(out).base_dist.scale * noise

    def draw_weights(self, num_envs: int) -> torch.Tensor:
        """Exploration weights ``[N, F, A] ~ N(0, exp(log_std)^2)``, one set per env for a rollout."""
        std = self.log_std.exp()
        return torch.randn(num_envs, *std.shape, device=std.device) * std

    def sample(self, out: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Env i's action from its exploration weights ``weights[i] [F, A]``: ``mean + f_i @ W_i``."""
        return self.mode(out) + torch.einsum("nf,nfa->na", self.features(out), weights)
