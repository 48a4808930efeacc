"""Encoders: what turns an observation into a vector of features. Conv encoders for stacked Atari
frames (``uint8 [C, H, W]``), an MLP for flat vector observations (``[D]``)."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn


class ConvEncoder(nn.Module):
    """4 conv layers (32 filters, 3x3, stride 2, padding 1, ELU), max-pooled to a 3x3 grid: 288 features
    (``num_filters`` a layer give ``9 * num_filters``).

    An 84x84 frame becomes 42, 21, 11, 6 pixels a side, pooled to 3x3; a 42x42 frame (the size of
    the curiosity paper) reaches 3x3 without pooling. Input is ``uint8`` in [0, 255]; the encoder
    scales it to [0, 1] so observations stay one byte a pixel everywhere else.
    """

    grid = 3

    def __init__(
        self, in_channels: int, channels_last: bool = False, cpu_chunk: int = 0, num_filters: int = 32
    ) -> None:
        super().__init__()
        self.channels_last = channels_last
        self.num_filters = num_filters
        self.out_features = num_filters * self.grid * self.grid  # 288 with 32 filters
        # A speed setting (Speed.encoder_chunk): on the CPU, batches go through in passes of this
        # many frames (0: at once), so that the first feature maps (225 KB a frame) stay nearer
        # the core's cache. Each frame is computed alone either way. On a GPU a batch goes at once.
        self.cpu_chunk = cpu_chunk
        layers: list[nn.Module] = []
        channels = in_channels
        for _ in range(4):
            layers += [nn.Conv2d(channels, self.num_filters, 3, stride=2, padding=1), nn.ELU()]
            channels = self.num_filters
        self.convs = nn.Sequential(*layers)
        self.pool = nn.AdaptiveMaxPool2d(self.grid)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        chunk = self.cpu_chunk
        if chunk and obs.device.type == "cpu" and obs.shape[0] > chunk:
            return torch.cat([self._encode(part) for part in obs.split(chunk)])
        return self._encode(obs)

    def _encode(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pool(self.convs(_scaled(obs, self.channels_last))).flatten(1)


class NatureEncoder(nn.Module):
    """The Nature-DQN CNN (Mnih et al. 2015): 32 8x8/4, 64 4x4/2, 64 3x3/1 convs, then 512 units, all ReLU.

    The classic Atari network of DQN and of the A2C baselines (SB3's ``CnnPolicy``); on the CPU
    its forward and backward pass over an update take about a fifth less time than
    :class:`ConvEncoder`'s, which has more and larger feature maps (30.5 against 38.8 ms in
    float32; docs/speed.md).
    """

    def __init__(self, obs_shape: Sequence[int], channels_last: bool = False) -> None:
        super().__init__()
        self.channels_last = channels_last
        self.convs = nn.Sequential(
            nn.Conv2d(obs_shape[0], 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *obs_shape)).shape[1]  # 3136 for 84x84
        self.out_features = 512
        self.fc = nn.Sequential(nn.Linear(flat, self.out_features), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.fc(self.convs(_scaled(obs, self.channels_last)))


def _scaled(obs: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """uint8 pixels to floats in [0, 1] (float images are taken as already scaled); in channels-last
    memory order when asked (faster convolutions on CPU).

    The bytes are reordered before they become four times larger, and dividing the bytes by 255.0
    writes the float result in one pass (the same numbers as converting first, then dividing).
    """
    if channels_last:
        obs = obs.contiguous(memory_format=torch.channels_last)
    return obs.div(255.0) if obs.dtype == torch.uint8 else obs.to(torch.float32)


class MLPEncoder(nn.Module):
    """Two fully connected layers of 64 tanh units: the network of the classic-control and Box2D
    baselines (SB3's and CleanRL's ``MlpPolicy``), for flat vector observations."""

    channels_last = False  # no images, no memory layout

    def __init__(self, obs_size: int, hidden: int = 64) -> None:
        super().__init__()
        self.out_features = hidden
        self.layers = nn.Sequential(nn.Linear(obs_size, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.layers(obs.to(torch.float32))


CONV_ENCODERS = ("universe", "nature")  # the names --arch takes


def build_encoder(
    obs_shape: Sequence[int],
    arch: str = "universe",
    channels_last: bool = False,
    cpu_chunk: int = 0,
    mlp_width: int = 64,
    conv_filters: int = 32,
) -> nn.Module:
    """The encoder for an observation space: images ``[C, H, W]`` get a conv encoder, flat vectors
    ``[D]`` the :class:`MLPEncoder` of ``mlp_width`` units a layer (``arch`` names the conv encoder
    and only applies to images).

    ``universe``: :class:`ConvEncoder` (the universe-starter-agent and curiosity-paper network),
    with ``conv_filters`` filters a layer; ``nature``: :class:`NatureEncoder`.
    """
    if arch not in CONV_ENCODERS:
        raise ValueError(f"unknown architecture {arch!r} (one of {', '.join(CONV_ENCODERS)})")
    if len(obs_shape) == 1:
        return MLPEncoder(int(obs_shape[0]), mlp_width)
    if len(obs_shape) != 3:
        raise ValueError(
            f"observations of shape {tuple(obs_shape)} are not supported (images [C, H, W] and flat vectors [D] are)"
        )
    if arch == "universe":
        return ConvEncoder(obs_shape[0], channels_last, cpu_chunk, conv_filters)
    return NatureEncoder(obs_shape, channels_last)
