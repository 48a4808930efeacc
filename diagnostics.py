"""What training watches of the network without training it: the health of the encoder and of the
recurrent core (``core/*`` in TensorBoard; docs/recurrent.md). Read every ``log_interval``
updates by the runner, outside the network's own code."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from model import ActorCritic, State
from nets.cores import LayerNormLSTMCell


def gate_preactivations(model: ActorCritic, features: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The LSTM gates' pre-activations ``[N, 4H]`` for features ``[N, F]`` and state ``h``, in
    either cell: where they pass +-3 their gradient nearly vanishes."""
    cell = model.core.cell
    if isinstance(cell, LayerNormLSTMCell):
        return cell.gates(features, h)
    return F.linear(features, cell.weight_ih, cell.bias_ih) + F.linear(h, cell.weight_hh, cell.bias_hh)


@torch.inference_mode()
def core_health(model: ActorCritic, obs: torch.Tensor, state: State, episode_starts: torch.Tensor) -> dict[str, float]:
    """How alive the encoder and the recurrent core are on one step of N envs (N >= 2).

    ``feature_mean_abs``: mean |feature| of the encoder (after the layer norm with
    ``feature_norm``, where it stays near 0.8 and cannot show a blow-up); ``gate_saturation``: share of the LSTM's
    gate pre-activations beyond +-3 (sigmoid 0.95, tanh 0.995), where their gradient nearly
    vanishes; ``output_std`` and ``value_std``: spread across envs of the core's output (mean
    over units) and of the value. A dead core gives the same output for every frame: its
    output and value spreads fall to ~0 while its gates saturate.
    """
    features = model.encode(obs)
    health = {"feature_mean_abs": float(features.abs().mean())}
    out, _ = model.core(features, state, episode_starts)
    if model.recurrent:
        keep = (1.0 - episode_starts).unsqueeze(1)
        gates = gate_preactivations(model, features, state[0] * keep)
        health["gate_saturation"] = float((gates.abs() > 3).float().mean())
    core = model.core.lstm_output(out)
    health["output_std"] = float(core.std(0).mean())
    if model.critic is not None:
        health["value_std"] = float(model.values(out, obs).std())
    return health
