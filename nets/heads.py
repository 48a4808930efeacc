"""Heads: what the core's output ``[..., F]`` becomes. A policy head gives what its action
distribution is made of (logits, or a Gaussian's mean) and the distribution itself; the value head
gives the critic's estimate of the return. gSDE's policy head is in ``sde.py``."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
from torch.distributions import Categorical, Distribution, Independent, Normal

# The distributions are made without argument checks: each check reads a tensor back from the
# device, a wait per step on a GPU; a non-finite output is caught where it matters, as a
# non-finite loss.


class CategoricalPolicy(nn.Module):
    """Discrete actions: logits ``[..., A]`` of a categorical distribution."""

    continuous = False
    sde = False

    def __init__(self, in_features: int, num_actions: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, num_actions)

    def forward(self, core: torch.Tensor) -> torch.Tensor:
        return self.linear(core)

    def distribution(self, logits: torch.Tensor) -> Distribution:
        return Categorical(logits=logits, validate_args=False)

    def mode(self, logits: torch.Tensor) -> torch.Tensor:
        """The most probable action: the largest logit."""
        return logits.argmax(dim=-1)


class GaussianPolicy(nn.Module):
    """Continuous actions: the mean ``[..., A]`` of a diagonal Gaussian whose log standard
    deviation is learned apart from the state, starting at ``log_std_init`` (0: std 1);
    ``log_prob`` and ``entropy`` sum over the action's dimensions."""

    continuous = True
    sde = False

    def __init__(self, in_features: int, action_dim: int, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, action_dim)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))

    def forward(self, core: torch.Tensor) -> torch.Tensor:
        return self.linear(core)

    def distribution(self, mean: torch.Tensor) -> Distribution:
        return Independent(
            Normal(mean, self.log_std.exp().expand_as(mean), validate_args=False), 1, validate_args=False
        )

    def mode(self, mean: torch.Tensor) -> torch.Tensor:
        """The most probable action: the mean."""
        return mean

    def sample_with(self, mean: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """An action from standard normal ``noise`` of the action's shape: mean + spread * noise."""
        return mean + self.log_std.exp() * noise


class ValueHead(nn.Module):
    """The critic: one linear unit over the core's output, or, with an ``encoder`` of its own,
    over the observation's features (as the separate actor and critic networks of SB3's and
    CleanRL's agents for control envs), so that its loss, on the scale of the returns, does not
    shape the actor's features."""

    def __init__(self, in_features: int, encoder: Optional[nn.Module] = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.linear = nn.Linear(encoder.out_features if encoder is not None else in_features, 1)

    def forward(self, core: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """Values ``[...]`` of the core's output ``[..., F]`` (or of the observations ``[..., D]``)."""
        if self.encoder is not None:
            core = self.encoder(obs)
        return self.linear(core).squeeze(-1)
