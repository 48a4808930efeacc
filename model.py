r"""The actor-critic network, composed of parts (``nets/``)::

    observation -> encoder -> [feature norm] -> core -> policy head -> action distribution
                                                    \-> value head  -> value

The encoder follows the observations (conv for images, MLP for flat vectors), the core is an
LSTM or nothing (feed-forward), the policy head follows the actions (categorical logits, a
Gaussian's mean, or gSDE's state-dependent Gaussian). :func:`build_model` makes the network a
checkpoint's ``spec`` describes; ``ActorCritic`` only wires the parts.

Recurrent state lives with the caller: it passes the state in and gets the next one back; the
core is the only place that resets it (``nets/cores.py``).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Optional, Sequence

import torch
import torch.nn as nn
from torch.distributions import Distribution

from nets.cores import LayerNormLSTMCell, LSTMCore, NoCore, State
from nets.encoders import CONV_ENCODERS, build_encoder
from nets.heads import CategoricalPolicy, GaussianPolicy, ValueHead
from nets.sde import StateDependentPolicy

__all__ = ["ActorCritic", "build_model", "State", "CONV_ENCODERS"]


class ActorCritic(nn.Module):
    """Encoder -> core -> policy and value heads, for N envs a step or T steps at once.

    ``feature_norm``: a layer norm of each frame's features before the core (learned scale and
    shift). ``critic``: None for a network without a critic, which values every state at 0 (the
    return is then its own advantage). ``bf16`` runs the encoder under bfloat16 autocast: its
    convolutions and linear layers compute in bfloat16 (8 bits of mantissa) and hand float32
    features on; the weights, the core, the heads, the losses and the optimizer stay float32.
    """

    def __init__(
        self,
        encoder: nn.Module,
        core: nn.Module,
        policy: nn.Module,
        critic: Optional[ValueHead],
        feature_norm: Optional[nn.LayerNorm] = None,
        bf16: bool = False,
        spec: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.feature_norm = feature_norm
        self.core = core
        self.policy = policy
        self.critic = critic
        self.bf16 = bf16
        self.spec = spec or {}  # what rebuilds this network from a checkpoint (build_model(**spec))
        # The one observation shape it was built for: a conv encoder with adaptive pooling would
        # take frames of any size and play them badly without a word.
        self.obs_shape = tuple(self.spec["obs_shape"]) if "obs_shape" in self.spec else None
        self._register_load_state_dict_pre_hook(_rename_older_keys)

    @property
    def recurrent(self) -> bool:
        return self.core.recurrent

    @property
    def continuous(self) -> bool:
        return self.policy.continuous

    def distribution(self, policy_out: torch.Tensor) -> Distribution:
        """The policy at the policy head's output (see ``nets/heads.py``, ``nets/sde.py``)."""
        return self.policy.distribution(policy_out)

    def mode(self, policy_out: torch.Tensor) -> torch.Tensor:
        """The most probable action: the largest logit, or the Gaussian's mean."""
        return self.policy.mode(policy_out)

    def values(self, out: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """The critic's values ``[...]`` of the core's output (0 without a critic)."""
        if self.critic is None:
            return out.new_zeros(out.shape[:-1])
        return self.critic(out, obs)

    def initial_state(self, num_envs: int, device: torch.device | str = "cpu") -> State:
        return self.core.initial_state(num_envs, device)

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """Float32 features ``[N, F]`` of the observations ``[N, ...]``: the encoder (in bfloat16
        with ``bf16``), then the layer norm with ``feature_norm``. Observations of another shape
        than the network was built for raise ``ValueError``."""
        if self.obs_shape is not None and tuple(obs.shape[1:]) != self.obs_shape:
            raise ValueError(
                f"this network was built for observations of shape {self.obs_shape}, got {tuple(obs.shape[1:])}"
            )
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

    def forward(
        self, obs: torch.Tensor, state: State, episode_starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, State]:
        """One step for N envs: ``obs [N, ...]``, ``episode_starts [N]`` -> logits ``[N, A]``, values ``[N]``, next state."""
        out, state = self.core(self.encode(obs), state, episode_starts)
        return self.policy(out), self.values(out, obs), state

    def value(self, obs: torch.Tensor, state: State, episode_starts: torch.Tensor) -> torch.Tensor:
        """State value ``[N]`` of ``obs``; the caller's state is left as it was (used for bootstrapping)."""
        return self.forward(obs, state, episode_starts)[1]

    def forward_sequence(
        self, obs: torch.Tensor, state: State, episode_starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, State]:
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
                out, state = self.core(features[t], state, episode_starts[t])
                outputs.append(out)
            core = torch.stack(outputs)
        else:
            core = features
        return self.policy(core), self.values(core, obs), state


def build_model(
    obs_shape: Sequence[int],
    num_actions: int,
    recurrent: bool = True,
    hidden_size: int = 256,
    arch: str = "universe",
    feature_norm: bool = False,
    core_skip: bool = False,
    continuous: bool = False,
    lstm_norm: bool = False,
    critic: bool = True,
    separate_critic: bool = False,
    mlp_width: int = 64,
    log_std_init: float = 0.0,
    sde: bool = False,
    conv_filters: int = 32,
    channels_last: bool = False,
    bf16: bool = False,
    encoder_chunk: int = 0,
) -> ActorCritic:
    """The network of a ``spec`` (the arguments up to ``conv_filters``, saved in every checkpoint),
    with its starting weights.

    ``num_actions`` is the number of discrete actions, or the dimension of a continuous action.
    ``core_skip``: the heads read the encoder's features beside the LSTM's output.
    ``lstm_norm``: the layer-normalized cell. ``separate_critic``: the critic reads the
    observation through an encoder of its own. ``sde``: gSDE's policy head (continuous actions).
    ``conv_filters``: the universe encoder's filters a layer (a spec saved without it had 32).
    The speed settings ``channels_last`` (conv weights and activations in NHWC order: the same
    function, computed faster by oneDNN on the CPU, equal to float rounding), ``bf16`` and
    ``encoder_chunk`` (the universe encoder's passes on the CPU) are not part of the spec: a
    checkpoint holds float32 weights either way.
    """
    core_skip, lstm_norm = bool(core_skip and recurrent), bool(lstm_norm and recurrent)
    sde, separate_critic = bool(sde and continuous), bool(separate_critic and critic)
    spec = {
        "obs_shape": list(obs_shape),
        "num_actions": int(num_actions),
        "recurrent": bool(recurrent),
        "hidden_size": int(hidden_size),
        "arch": arch,
        "feature_norm": bool(feature_norm),
        "core_skip": core_skip,
        "continuous": bool(continuous),
        "lstm_norm": lstm_norm,
        "critic": bool(critic),
        "separate_critic": separate_critic,
        "mlp_width": int(mlp_width),
        "sde": sde,
        "conv_filters": int(conv_filters),
    }
    # The parts are made in this order (each draws its default weights from the random stream),
    # and init_weights then redraws them in the same order: a fixed seed gives fixed weights.
    encoder = build_encoder(obs_shape, arch, channels_last, encoder_chunk, mlp_width, conv_filters)
    features = encoder.out_features
    norm = nn.LayerNorm(features) if feature_norm else None
    core = LSTMCore(features, hidden_size, lstm_norm, core_skip) if recurrent else NoCore(features)
    if not continuous:
        policy: nn.Module = CategoricalPolicy(core.out_features, num_actions)
    elif sde:
        policy = StateDependentPolicy(core.out_features, num_actions, log_std_init)
    else:
        policy = GaussianPolicy(core.out_features, num_actions, log_std_init)
    value = None
    if critic:
        critic_encoder = (
            build_encoder(obs_shape, arch, channels_last, encoder_chunk, mlp_width, conv_filters)
            if separate_critic
            else None
        )
        value = ValueHead(core.out_features, critic_encoder)
    model = ActorCritic(encoder, core, policy, value, norm, bf16=bf16, spec=spec)
    init_weights(model)
    return model


def init_weights(model: ActorCritic) -> None:
    """Orthogonal weights and zero biases (gain sqrt 2 for the ReLU/ELU layers); a near-uniform
    first policy, which explores, and a unit-gain critic, on the scale of the returns."""
    for module in model.modules():
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
    nn.init.orthogonal_(model.policy.linear.weight, gain=0.01)
    if model.critic is not None:
        nn.init.orthogonal_(model.critic.linear.weight, gain=1.0)
    if model.encoder.channels_last:
        model.encoder.to(memory_format=torch.channels_last)


# The names of checkpoints saved before the network was composed of parts, and their parts' names
# now (the parameters keep their order, so saved optimizer states still match).
OLDER_KEYS = (
    ("lstm.", "core.cell."),
    ("actor.", "policy.linear."),
    ("log_std", "policy.log_std"),
    ("critic_encoder.", "critic.encoder."),
    ("critic.weight", "critic.linear.weight"),
    ("critic.bias", "critic.linear.bias"),
)


def _rename_older_keys(state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """Load hook: an older checkpoint's weights under today's names."""
    for key in [key for key in state_dict if key.startswith(prefix)]:
        name = key[len(prefix) :]
        if _renamed(name) != name:
            state_dict[prefix + _renamed(name)] = state_dict.pop(key)


def older_parameter_order(saved_keys: Sequence[str], model: ActorCritic) -> Optional[list[int]]:
    """For weights saved under older names (``saved_keys``, in their order): the index each of
    ``model``'s parameters had among the saved ones, so that a saved optimizer state, which
    follows the parameters' order, can be put in today's order. None when the names are today's.

    Only a continuous policy's ``log_std`` moved: it was the network's first parameter, and is
    now its policy head's.
    """
    if not any(_renamed(key) != key for key in saved_keys):
        return None
    names = [name for name, _ in model.named_parameters()]
    renamed = [_renamed(key) for key in saved_keys]
    parameters = set(names)
    saved = [key for key in renamed if key in parameters]  # parameters only, in their saved order
    return [saved.index(name) for name in names]


def _renamed(key: str) -> str:
    """An older checkpoint's key under today's name (see ``OLDER_KEYS``)."""
    for old, new in OLDER_KEYS:
        if key == old or (old.endswith(".") and key.startswith(old)):
            return new + key[len(old) :]
    return key
