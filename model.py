"""Networks: a conv encoder, an optional LSTMCell core, and linear actor and critic heads.

Recurrent state lives in one place: the caller passes it in and gets the next one back; the
model never keeps it. The model is also the only place that resets it: before each cell step
the state of every env whose observation starts a new episode is multiplied by zero, so an
episode never sees another episode's memory, and no other env is touched.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, Distribution, Independent, Normal


State = tuple[torch.Tensor, ...]  # (h, c) for the LSTM, () for the feed-forward variant


class ConvEncoder(nn.Module):
    """4 conv layers (32 filters, 3x3, stride 2, padding 1, ELU), max-pooled to a 3x3 grid: 288 features.

    An 84x84 frame becomes 42, 21, 11, 6 pixels a side, pooled to 3x3; a 42x42 frame (the size of
    the curiosity paper) reaches 3x3 without pooling. Input is ``uint8`` in [0, 255]; the encoder
    scales it to [0, 1] so observations stay one byte a pixel everywhere else.
    """

    num_filters = 32
    grid = 3
    out_features = num_filters * grid * grid  # 288

    def __init__(self, in_channels: int, channels_last: bool = False, cpu_chunk: int = 0) -> None:
        super().__init__()
        self.channels_last = channels_last
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
            nn.Conv2d(obs_shape[0], 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())
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


def build_encoder(obs_shape: Sequence[int], arch: str = "universe", channels_last: bool = False,
                  cpu_chunk: int = 0, mlp_width: int = 64) -> nn.Module:
    """The encoder for an observation space: images ``[C, H, W]`` get a conv encoder, flat vectors
    ``[D]`` the :class:`MLPEncoder` of ``mlp_width`` units a layer (``arch`` names the conv encoder
    and only applies to images).

    ``universe``: :class:`ConvEncoder` (the universe-starter-agent and curiosity-paper network);
    ``nature``: :class:`NatureEncoder`.
    """
    if arch not in CONV_ENCODERS:
        raise ValueError(f"unknown architecture {arch!r} (one of {', '.join(CONV_ENCODERS)})")
    if len(obs_shape) == 1:
        return MLPEncoder(int(obs_shape[0]), mlp_width)
    if len(obs_shape) != 3:
        raise ValueError(f"observations of shape {tuple(obs_shape)} are not supported "
                         "(images [C, H, W] and flat vectors [D] are)")
    if arch == "universe":
        return ConvEncoder(obs_shape[0], channels_last, cpu_chunk)
    return NatureEncoder(obs_shape, channels_last)


CONV_ENCODERS = ("universe", "nature")  # the names --arch takes


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


SDE_EPSILON = 1e-6  # added to a state-dependent variance, which is 0 where the features are


class ActorCritic(nn.Module):
    """Encoder -> LSTMCell (or nothing, with ``recurrent=False``) -> actor and state value.

    The encoder follows the observations (conv for images, MLP for flat vectors), the actor the
    actions (logits for discrete actions, a Gaussian's mean for continuous ones: ``distribution``).

    ``channels_last`` stores the conv weights and activations in NHWC order: the same function,
    computed faster by oneDNN on the CPU (the sums run in another order, so results agree to
    float rounding, not bit for bit).

    ``bf16`` runs the encoder under bfloat16 autocast: its convolutions and linear layers compute
    in bfloat16 (8 bits of mantissa) and hand float32 features on. The weights, the LSTM, the
    heads, the losses and the optimizer stay float32. This changes the arithmetic, unlike
    channels-last. ``encoder_chunk`` is the universe encoder's passes on the CPU (see
    :class:`ConvEncoder`). None of these is part of ``spec``: a checkpoint holds float32 weights
    either way.
    """

    def __init__(self, obs_shape: Sequence[int], num_actions: int, recurrent: bool = True,
                 hidden_size: int = 256, arch: str = "universe", channels_last: bool = False,
                 bf16: bool = False, feature_norm: bool = False, core_skip: bool = False,
                 continuous: bool = False, lstm_norm: bool = False, critic: bool = True,
                 separate_critic: bool = False, mlp_width: int = 64, log_std_init: float = 0.0,
                 sde: bool = False, encoder_chunk: int = 0) -> None:
        super().__init__()
        # What rebuilds this network from a checkpoint (memory layout is not part of it).
        self.spec = {"obs_shape": list(obs_shape), "num_actions": int(num_actions),
                     "recurrent": bool(recurrent), "hidden_size": int(hidden_size), "arch": arch,
                     "feature_norm": bool(feature_norm), "core_skip": bool(core_skip and recurrent),
                     "continuous": bool(continuous), "lstm_norm": bool(lstm_norm and recurrent),
                     "critic": bool(critic), "separate_critic": bool(separate_critic and critic),
                     "mlp_width": int(mlp_width), "sde": bool(sde and continuous)}
        self.continuous = bool(continuous)
        self.sde = bool(sde and continuous)
        self.recurrent = recurrent
        self.hidden_size = hidden_size
        self.bf16 = bf16
        self.encoder = build_encoder(obs_shape, arch, channels_last, encoder_chunk, mlp_width)
        features = self.encoder.out_features
        # Each frame's features to zero mean and unit spread (learned scale and shift) before the core.
        self.feature_norm = nn.LayerNorm(features) if feature_norm else None
        # With core_skip the heads read the features beside the LSTM's output: the recurrent network
        # then contains the feed-forward one, and the core adds what memory brings.
        self.core_skip = bool(core_skip and recurrent)
        if recurrent:
            # lstm_norm: the layer-normalized cell, whose gates cannot saturate all together.
            self.lstm = LayerNormLSTMCell(features, hidden_size) if lstm_norm else nn.LSTMCell(features, hidden_size)
            features = features + hidden_size if self.core_skip else hidden_size
        # The actor gives the logits of a categorical policy (discrete actions) or the mean of a
        # diagonal Gaussian (continuous actions, num_actions dimensions) whose log standard
        # deviation is learned apart from the state, starting at log_std_init (0: std 1). With sde
        # (state-dependent exploration, gSDE's noise model) the spread of action j in a state is
        # sqrt(sum_i features_i^2 * exp(log_std[i, j])^2): the features are the actor's (detached).
        self.actor = nn.Linear(features, num_actions)
        std_shape = (features, num_actions) if self.sde else (num_actions,)
        self.log_std = nn.Parameter(torch.full(std_shape, float(log_std_init))) if self.continuous else None
        # Without a critic there is no value head: every value is 0 (see values()). With
        # separate_critic the critic reads the observation through an encoder of its own (as the
        # actor and critic of SB3's and CleanRL's agents for control envs), so that its loss, on the
        # scale of the returns, does not shape the actor's features.
        self.critic_encoder = build_encoder(obs_shape, arch, channels_last, encoder_chunk, mlp_width) \
            if critic and separate_critic else None
        critic_features = self.critic_encoder.out_features if self.critic_encoder is not None else features
        self.critic = nn.Linear(critic_features, 1) if critic else None
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.orthogonal_(module.weight, gain=math.sqrt(2))
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LSTMCell):
                nn.init.orthogonal_(module.weight_ih)
                nn.init.orthogonal_(module.weight_hh)
                nn.init.zeros_(module.bias_ih)
                nn.init.zeros_(module.bias_hh)
            elif isinstance(module, LayerNormLSTMCell):  # its layer norms start at scale 1, shift 0
                nn.init.orthogonal_(module.weight_ih)
                nn.init.orthogonal_(module.weight_hh)
        # A near-uniform first policy explores; a unit-gain critic starts on the scale of the returns.
        nn.init.orthogonal_(self.actor.weight, gain=0.01)
        if self.critic is not None:
            nn.init.orthogonal_(self.critic.weight, gain=1.0)
        if self.encoder.channels_last:
            self.encoder.to(memory_format=torch.channels_last)

    def policy_out(self, core: torch.Tensor) -> torch.Tensor:
        """What the policy's distribution is made of, from the core's output ``[..., F]``: the
        actor's output ``[..., A]``, followed with sde by the (detached) features its spread
        reads, ``[..., A + F]``."""
        out = self.actor(core)
        return torch.cat([out, core.detach()], -1) if self.sde else out

    def distribution(self, actor_out: torch.Tensor) -> Distribution:
        """The policy at ``policy_out``'s output: categorical over the logits, or a diagonal
        Gaussian around the mean whose ``log_prob`` and ``entropy`` sum over action dimensions."""
        # Without argument checks: each check reads a tensor back from the device, a wait per step
        # on a GPU; a non-finite output is caught where it matters, as a non-finite loss.
        if not self.continuous:
            return Categorical(logits=actor_out, validate_args=False)
        mean = self.mode(actor_out)
        if self.sde:
            variance = self.sde_features(actor_out).pow(2) @ self.log_std.exp().pow(2)
            return Independent(Normal(mean, (variance + SDE_EPSILON).sqrt(), validate_args=False), 1,
                               validate_args=False)
        return Independent(Normal(mean, self.log_std.exp().expand_as(mean), validate_args=False), 1,
                           validate_args=False)

    def mode(self, actor_out: torch.Tensor) -> torch.Tensor:
        """The most probable action: the largest logit, or the Gaussian's mean."""
        if not self.continuous:
            return actor_out.argmax(dim=-1)
        return actor_out[..., :self.actor.out_features]

    def sde_features(self, actor_out: torch.Tensor) -> torch.Tensor:
        """With sde, the (detached) features ``[..., F]`` that ``policy_out`` appended to the mean."""
        return actor_out[..., self.actor.out_features:]

    def sample_sde(self, actor_out: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """With sde, env i's action from its exploration weights ``weights[i] [F, A]``: its mean plus
        ``features_i @ weights[i]``, so the noise follows the state, not a fresh draw every step."""
        return self.mode(actor_out) + torch.einsum("nf,nfa->na", self.sde_features(actor_out), weights)

    def sample_with(self, actor_out: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """A continuous action from standard normal ``noise`` of the action's shape: mean + spread * noise."""
        return self.mode(actor_out) + self.distribution(actor_out).base_dist.scale * noise

    def values(self, out: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """The critic's values ``[...]`` of the core's output ``[..., F]`` (or, with a critic of its
        own, of the observations ``[..., D]``). A network without a critic values every state at
        0: the return is then its own advantage (no baseline)."""
        if self.critic is None:
            return out.new_zeros(out.shape[:-1])
        if self.critic_encoder is not None:
            out = self.critic_encoder(obs)
        return self.critic(out).squeeze(-1)

    def initial_state(self, num_envs: int, device: torch.device | str = "cpu") -> State:
        if not self.recurrent:
            return ()
        zeros = torch.zeros(num_envs, self.hidden_size, device=device)
        return (zeros, zeros.clone())

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """Float32 features ``[N, F]`` of the observations ``[N, ...]``: the encoder (in bfloat16
        with ``bf16``), then the layer norm with ``feature_norm``."""
        if not self.bf16:
            features = self.encoder(obs)
        else:
            with torch.autocast(obs.device.type, dtype=torch.bfloat16):
                features = self.encoder(obs).float()
        return features if self.feature_norm is None else self.feature_norm(features)

    @contextlib.contextmanager
    def casting_once(self) -> Iterator[None]:
        """A block in which the bfloat16 encoder casts each weight to bfloat16 once, not at every pass.

        Autocast casts a float32 weight afresh at every pass, and backward converts each pass's
        gradient back; within one autocast region it keeps the cast and reuses it until the region
        closes. This block is such a region, with autocast switched off again inside it, so only
        the encoder computes in bfloat16, as outside. The runner collects a rollout in one: its T
        passes give the same outputs as without it, and their gradients of each weight are summed
        in bfloat16 before one conversion (not converted one by one and summed in float32). The
        weights must not change inside it. Without ``bf16`` it does nothing.
        """
        if not self.bf16:
            yield
            return
        device = next(self.parameters()).device.type
        with torch.autocast(device, dtype=torch.bfloat16), torch.autocast(device, enabled=False):
            yield

    def step_core(self, features: torch.Tensor, state: State, episode_starts: torch.Tensor) -> tuple[torch.Tensor, State]:
        """One recurrent step. Envs whose observation starts an episode begin from a zero state."""
        if not self.recurrent:
            return features, ()
        keep = (1.0 - episode_starts).unsqueeze(1)
        h, c = self.lstm(features, (state[0] * keep, state[1] * keep))
        return (torch.cat([features, h], 1) if self.core_skip else h), (h, c)

    def forward(self, obs: torch.Tensor, state: State, episode_starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, State]:
        """One step for N envs: ``obs [N, ...]``, ``episode_starts [N]`` -> logits ``[N, A]``, values ``[N]``, next state."""
        out, state = self.step_core(self.encode(obs), state, episode_starts)
        return self.policy_out(out), self.values(out, obs), state

    def value(self, obs: torch.Tensor, state: State, episode_starts: torch.Tensor) -> torch.Tensor:
        """State value ``[N]`` of ``obs``; the caller's state is left as it was (used for bootstrapping)."""
        return self.forward(obs, state, episode_starts)[1]

    def forward_sequence(self, obs: torch.Tensor, state: State, episode_starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, State]:
        """T steps for N envs at once: ``obs [T, N, ...]``, ``episode_starts [T, N]``.

        The conv encoder runs once over all T*N frames; only the LSTM is unrolled in time, so the
        gradient of step t reaches back to the first step of the sequence (truncated BPTT).
        Returns logits ``[T, N, A]``, values ``[T, N]`` and the state after the last step.
        """
        T, N = obs.shape[:2]
        features = self.encode(obs.reshape(T * N, *obs.shape[2:])).view(T, N, -1)
        if self.recurrent:
            outputs = []
            for t in range(T):
                out, state = self.step_core(features[t], state, episode_starts[t])
                outputs.append(out)
            core = torch.stack(outputs)
        else:
            core = features
        return self.policy_out(core), self.values(core, obs), state
