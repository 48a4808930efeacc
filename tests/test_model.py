"""model.py: the network composed of parts (nets/), and the checkpoints saved before it was."""

from __future__ import annotations

import pytest
import torch

from agent import A2CAgent
from model import OLDER_KEYS, build_model
from nets.cores import LayerNormLSTMCell, LSTMCore, NoCore
from nets.encoders import ConvEncoder, MLPEncoder
from nets.heads import CategoricalPolicy, GaussianPolicy
from nets.sde import StateDependentPolicy

SDE_SPEC = dict(
    obs_shape=(3,), num_actions=2, recurrent=False, continuous=True, sde=True, separate_critic=True, mlp_width=4
)
# What a checkpoint of that network held before the parts, in its order (written out by hand):
# log_std was the network's own parameter, so it came first.
SDE_OLDER_KEYS = [
    "log_std",
    "encoder.layers.0.weight",
    "encoder.layers.0.bias",
    "encoder.layers.2.weight",
    "encoder.layers.2.bias",
    "actor.weight",
    "actor.bias",
    "critic_encoder.layers.0.weight",
    "critic_encoder.layers.0.bias",
    "critic_encoder.layers.2.weight",
    "critic_encoder.layers.2.bias",
    "critic.weight",
    "critic.bias",
]


def older_name(key: str) -> str:
    for old, new in OLDER_KEYS:
        if key == new or (new.endswith(".") and key.startswith(new)):
            return old + key[len(new) :]
    return key


def as_older(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Today's weights under the names and in the order an older checkpoint had them."""
    older = {older_name(key): value for key, value in weights.items()}
    return {"log_std": older.pop("log_std"), **older} if "log_std" in older else older


def test_each_spec_gets_its_parts():
    atari = build_model((4, 84, 84), 6, lstm_norm=True, core_skip=True)
    assert isinstance(atari.encoder, ConvEncoder) and isinstance(atari.core, LSTMCore)
    assert isinstance(atari.core.cell, LayerNormLSTMCell) and atari.core.out_features == 288 + 256
    assert isinstance(atari.policy, CategoricalPolicy) and atari.policy.linear.in_features == 288 + 256
    assert atari.critic is not None and atari.critic.encoder is None
    flat = build_model((3,), 2, recurrent=False, continuous=True, critic=False)
    assert isinstance(flat.encoder, MLPEncoder) and isinstance(flat.core, NoCore) and flat.initial_state(4) == ()
    assert isinstance(flat.policy, GaussianPolicy) and flat.critic is None
    assert flat.values(torch.ones(5, 64), torch.ones(5, 3)).tolist() == [0.0] * 5
    sde = build_model(**SDE_SPEC)
    assert isinstance(sde.policy, StateDependentPolicy) and sde.policy.log_std.shape == (4, 2)
    assert isinstance(sde.critic.encoder, MLPEncoder)


def test_conv_filters_shape_the_universe_encoder_and_the_spec_keeps_them():
    narrow = build_model((4, 42, 42), 6, lstm_norm=True, core_skip=True, conv_filters=16)
    assert narrow.spec["conv_filters"] == 16 and narrow.encoder.out_features == 16 * 9
    # The LSTM and the heads read the 144 features (beside the LSTM's 256 with the skip).
    assert narrow.core.cell.weight_ih.shape == (4 * 256, 144) and narrow.policy.linear.in_features == 144 + 256
    assert build_model(**narrow.spec).state_dict().keys() == narrow.state_dict().keys()
    # A spec saved before the setting existed rebuilds the 32-filter network it was.
    older = {key: value for key, value in build_model((4, 42, 42), 6).spec.items() if key != "conv_filters"}
    assert build_model(**older).encoder.out_features == 288


def test_the_weights_of_older_checkpoints_load_under_todays_names():
    torch.manual_seed(0)
    saved = build_model(**SDE_SPEC)
    older = as_older(saved.state_dict())
    assert list(older) == SDE_OLDER_KEYS
    torch.manual_seed(1)
    loaded = build_model(**SDE_SPEC)
    loaded.load_state_dict(older)
    for (name, a), (_, b) in zip(saved.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    recurrent = build_model((4, 84, 84), 6, lstm_norm=True)
    older = as_older(recurrent.state_dict())
    assert "lstm.norm_c.weight" in older and "actor.weight" in older and "critic.weight" in older
    build_model((4, 84, 84), 6, lstm_norm=True).load_state_dict(older)  # strict: every name found


@pytest.mark.parametrize("optimizer", ["adam", "torch-rmsprop"])
def test_an_older_optimizer_state_goes_back_to_its_own_parameters(optimizer):
    """An optimizer's state follows the parameters' order, which moved log_std from first to the
    policy head's place: each parameter must get its own running averages back on resume."""
    torch.manual_seed(0)
    agent = A2CAgent(build_model(**SDE_SPEC), optimizer=optimizer)
    for p in agent.params:
        p.grad = torch.randn_like(p)
    agent.optimizer.step()
    today_index = {older_name(name): i for i, (name, _) in enumerate(agent.model.named_parameters())}
    # The saved state as older code wrote it: entry i belongs to the i-th parameter in the older order.
    state = agent.optimizer.state_dict()
    older_state = {**state, "state": {i: state["state"][today_index[old]] for i, old in enumerate(SDE_OLDER_KEYS)}}
    torch.manual_seed(5)
    resumed = A2CAgent(build_model(**SDE_SPEC), optimizer=optimizer)
    resumed.load({"model": as_older(agent.model.state_dict()), "optimizer": older_state, "optimizer_name": optimizer})
    for mine, theirs in zip(agent.params, resumed.params):
        assert torch.equal(mine, theirs)
        for key, value in agent.optimizer.state[mine].items():
            assert torch.equal(value, resumed.optimizer.state[theirs][key]), key
