"""Recurrent cores: what carries memory from one step to the next, between the encoder and the heads.

A core steps ``features [N, F]`` with a state and gives the heads' input ``[N, out_features]``
and the next state. The state lives with the caller; the core is the only place that resets it:
before each step the state of every env whose observation starts a new episode is multiplied by
zero, so an episode never sees another episode's memory, and no other env is touched.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

State = tuple[torch.Tensor, ...]  # (h, c) for the LSTM, () for the feed-forward variant


class LayerNormLSTMCell(nn.Module):
    """An LSTM cell with layer normalization (Ba et al. 2016), as OpenAI baselines' ``lnlstm``.

    The input's and the state's contributions to the four gates are each layer-normalized
    before they are added, and so is the cell before its ``tanh``::

        i, f, g, o = LN(W_x x) + LN(W_h h)
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g),   h' = sigmoid(o) * tanh(LN(c'))

    However large the weights or features grow, the gates' pre-activations keep a fixed spread,
    so they cannot all saturate and leave the cell's output the same for every input.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.norm_ih, self.norm_hh = nn.LayerNorm(4 * hidden_size), nn.LayerNorm(4 * hidden_size)
        self.norm_c = nn.LayerNorm(hidden_size)

    def gates(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """The gates' pre-activations ``[N, 4H]`` (input, forget, cell, output)."""
        return self.norm_ih(F.linear(x, self.weight_ih)) + self.norm_hh(F.linear(h, self.weight_hh))

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = state
        i, f, g, o = self.gates(x, h).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(self.norm_c(c))
        return h, c


class LSTMCore(nn.Module):
    """An LSTM cell (``layer_norm``: :class:`LayerNormLSTMCell`, else torch's ``LSTMCell``) over the
    encoder's features. With ``skip`` the heads read the features beside the LSTM's output, so the
    recurrent network contains the feed-forward one and the core adds what memory brings."""

    recurrent = True

    def __init__(self, in_features: int, hidden_size: int, layer_norm: bool = False, skip: bool = False) -> None:
        super().__init__()
        self.hidden_size, self.skip = hidden_size, skip
        self.cell = LayerNormLSTMCell(in_features, hidden_size) if layer_norm else nn.LSTMCell(in_features, hidden_size)
        self.out_features = in_features + hidden_size if skip else hidden_size

    def initial_state(self, num_envs: int, device: torch.device | str = "cpu") -> State:
        zeros = torch.zeros(num_envs, self.hidden_size, device=device)
        return (zeros, zeros.clone())

    def forward(self, features: torch.Tensor, state: State, episode_starts: torch.Tensor) -> tuple[torch.Tensor, State]:
        """One step. Envs whose observation starts an episode begin from a zero state."""
        keep = (1.0 - episode_starts).unsqueeze(1)
        h, c = self.cell(features, (state[0] * keep, state[1] * keep))
        return (torch.cat([features, h], 1) if self.skip else h), (h, c)

    def lstm_output(self, out: torch.Tensor) -> torch.Tensor:
        """The LSTM's own output ``h`` within the heads' input ``out``."""
        return out[:, -self.hidden_size :] if self.skip else out


class NoCore(nn.Module):
    """No memory (the feed-forward network): the heads read the encoder's features, the state is ``()``."""

    recurrent = False
    hidden_size = 0

    def __init__(self, in_features: int) -> None:
        super().__init__()
        self.out_features = in_features

    def initial_state(self, num_envs: int, device: torch.device | str = "cpu") -> State:
        return ()

    def forward(self, features: torch.Tensor, state: State, episode_starts: torch.Tensor) -> tuple[torch.Tensor, State]:
        return features, ()

    def lstm_output(self, out: torch.Tensor) -> torch.Tensor:
        return out
