"""The recurrent default stays alive on Pong: the optimizer whose first steps collapsed it, and the
health signals that show a collapse (see docs/recurrent.md)."""

from __future__ import annotations

import math

import pytest
import torch
from recording_writer import RecordingWriter
from torch.testing import assert_close

import checkpoints
from agent import RMSpropTF, make_optimizer
from algorithms import load_agent, make_agent
from config import Config
from diagnostics import core_health
from model import build_model

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_rmsprop_tf_on_a_case_worked_by_hand():
    """v starts at 1: v = alpha + (1 - alpha) g^2, step = lr * g / sqrt(v + eps)."""
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = RMSpropTF([w], lr=0.1, alpha=0.9, eps=1e-5)
    w.grad = torch.tensor([0.5, -0.001])
    opt.step()
    # w0: v = .9 + .1 * .25 = .925;        step = .1 * .5 / sqrt(.92501) = .0519872
    # w1: v = .9 + .1 * 1e-6 = .9000001;   step = .1 * -.001 / sqrt(.9000101) = -1.05409e-4
    assert w.detach().tolist() == pytest.approx([1 - 0.0519872, -2 + 1.05409e-4], abs=1e-7)
    w.grad = torch.tensor([0.5, -0.001])
    opt.step()
    # w0: v = .9 * .925 + .025 = .8575;    step = .05 / sqrt(.85751) = .0539946
    assert float(w[0].detach()) == pytest.approx(1 - 0.0519872 - 0.0539946, abs=1e-6)
    assert opt.state[w]["square_avg"].tolist() == pytest.approx([0.8575, 0.9 * 0.9000001 + 1e-7], abs=1e-6)


def test_first_steps_follow_the_gradient_not_its_sign():
    """torch.optim.RMSprop's first step moves a weight with a gradient of 0.02 almost as far as one with 0.5
    (lr / sqrt(1 - alpha) each): the sign step that blew up the encoder. RMSpropTF's moves are
    proportional to the gradient."""
    moves = {}
    for name in ("rmsprop", "torch-rmsprop"):
        w = torch.nn.Parameter(torch.zeros(2))
        opt = make_optimizer(name, [w], lr=7e-4)
        w.grad = torch.tensor([0.5, 0.02])
        opt.step()
        moves[name] = (-w.detach()).tolist()
    assert moves["torch-rmsprop"] == pytest.approx([7e-3, 7e-3], rel=1e-2)  # 10 x lr, whatever the gradient
    assert moves["rmsprop"] == pytest.approx(
        [7e-4 * 0.5 / math.sqrt(0.99 + 0.01 * 0.25 + 1e-5), 7e-4 * 0.02 / math.sqrt(0.99 + 0.01 * 4e-4 + 1e-5)],
        rel=1e-4,
    )


def _train_on_pong(make_runner, tmp_path, name: str, **settings):
    """40 updates of a recurrent agent on Pong (8 envs), core health logged every 10."""
    config = Config(
        num_envs=8,
        num_updates=40,
        progress=False,
        log_interval=10,
        checkpoint_interval=10**6,
        tensorboard=False,
        **settings,
    )
    writer = RecordingWriter()
    runner = make_runner(config, tmp_path / name, writer=writer)
    runner.train()
    return runner, writer


PLAIN = {"lstm_norm": False, "core_skip": False}  # torch's LSTMCell, heads on its output only


def test_plain_lstm_stays_alive_with_tensorflows_rmsprop_and_collapses_with_torchs(make_runner, tmp_path, capsys):
    """After 40 updates on real Pong frames the plain LSTM trained with TensorFlow's RMSprop still
    gives outputs and values that differ across envs, its gates not saturated. With
    torch.optim.RMSprop the same run collapses: features grow ~5x, most gates saturate, every env
    gets the same output, and the runner says so once."""
    runner, scalars = _train_on_pong(make_runner, tmp_path, "tf", optimizer="rmsprop", **PLAIN)
    health = core_health(runner.agent.model, runner.obs, runner.recurrent_state, runner.episode_starts)
    assert health["gate_saturation"] < 0.05
    assert health["output_std"] > 1e-3 and health["value_std"] > 1e-3
    assert len(scalars.values("core/gate_saturation")) == 4 and max(scalars.values("core/gate_saturation")) < 0.05
    assert "warning: the LSTM gives the same output" not in capsys.readouterr().err

    runner, scalars = _train_on_pong(make_runner, tmp_path, "torch", optimizer="torch-rmsprop", **PLAIN)
    health = core_health(runner.agent.model, runner.obs, runner.recurrent_state, runner.episode_starts)
    assert health["gate_saturation"] > 0.3
    assert health["output_std"] < 3e-4 and health["value_std"] < 3e-4
    assert scalars.values("core/feature_mean_abs")[-1] > 3 * 0.66  # 0.66 with TensorFlow's RMSprop
    assert capsys.readouterr().err.count("warning: the LSTM gives the same output for every env") == 1


def test_default_layer_norm_lstm_stays_alive_under_torchs_rmsprop(make_runner, tmp_path, capsys):
    """The default (layer-normalized LSTM, skip connection, torch's RMSprop): the same 40 updates
    leave its gates unsaturated (a layer norm keeps about 5% beyond +-3), so gradients still reach
    the cell, and its value varying across envs, where the plain LSTM collapsed under the same
    optimizer. (Its output's spread across frames dips in these first updates, to about 4e-4, and
    grows back as it learns: 0.03 after 277k env steps and 0.1 after 647k on Pong, docs/recurrent.md.)"""
    runner, scalars = _train_on_pong(make_runner, tmp_path, "default")
    assert runner.config.optimizer == "torch-rmsprop" and runner.agent.model.spec["lstm_norm"]
    health = core_health(runner.agent.model, runner.obs, runner.recurrent_state, runner.episode_starts)
    assert health["gate_saturation"] < 0.15
    assert health["value_std"] > 1e-3, health
    assert max(scalars.values("core/gate_saturation")) < 0.15
    assert "warning: the LSTM gives the same output" not in capsys.readouterr().err


def test_core_health_of_a_feed_forward_network_has_no_gates():
    torch.manual_seed(0)
    model = build_model((4, 84, 84), 6, recurrent=False)
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    health = core_health(model, obs, (), torch.zeros(3))
    assert set(health) == {"feature_mean_abs", "output_std", "value_std"}
    assert health["output_std"] > 0 and health["value_std"] > 0


def test_format_1_checkpoint_resumes_with_the_optimizer_it_was_trained_with(tmp_path):
    """Format 1 called torch.optim.RMSprop "rmsprop": such a run resumes on it, with its state."""
    config = Config(optimizer="torch-rmsprop")
    agent = make_agent(config, (4, 84, 84), 6)
    loss = agent.model(torch.zeros(2, 4, 84, 84, dtype=torch.uint8), agent.model.initial_state(2), torch.ones(2))[
        1
    ].sum()
    loss.backward()
    agent.optimizer.step()
    old = {
        "format": "recurrent-a2c/1",
        **agent.state(),
        "config": {**config.to_dict(), "optimizer": "rmsprop"},
        "env_name": config.env_name,
    }
    old["optimizer_name"] = "rmsprop"
    checkpoints.atomic_save(old, str(tmp_path / "a2c_last"))

    data = checkpoints.load_checkpoint(str(tmp_path / "a2c_last"))
    assert data["format"] == checkpoints.CHECKPOINT_FORMAT
    assert data["config"]["optimizer"] == data["optimizer_name"] == "torch-rmsprop"
    resumed = load_agent(str(tmp_path / "a2c_last"))
    assert type(resumed.optimizer) is torch.optim.RMSprop
    saved = agent.optimizer.state_dict()["state"]
    assert all(
        torch.equal(resumed.optimizer.state_dict()["state"][i]["square_avg"], s["square_avg"]) for i, s in saved.items()
    )


def test_feature_norm_normalizes_each_frames_features_and_old_specs_still_build(tmp_path):
    """--feature-norm: each frame's features reach the core with zero mean and unit spread; a
    checkpoint's spec without the key (older runs) builds the network without the norm."""
    torch.manual_seed(0)
    model = build_model((4, 84, 84), 6, feature_norm=True)
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        features = model.encode(obs)
        raw = model.encoder(obs)
    assert_close(features.mean(1), torch.zeros(3), atol=1e-5, rtol=0)
    assert_close(features.std(1, unbiased=False), torch.ones(3), atol=1e-3, rtol=0)
    assert not torch.allclose(raw.mean(1), torch.zeros(3), atol=1e-2)  # the encoder's own are not
    assert model.spec["feature_norm"] is True
    old_spec = {k: v for k, v in build_model((4, 84, 84), 6).spec.items() if k != "feature_norm"}
    assert build_model(**old_spec).feature_norm is None


def test_core_skip_heads_read_the_features_beside_the_lstm_output():
    """--core-skip: the heads are linear in [features, h]; with the weights on h zeroed the network
    is the feed-forward one on the same features (memory cannot reach the heads), and with them
    the state does; a spec without the key (older runs) builds the plain core."""
    torch.manual_seed(0)
    model = build_model((4, 84, 84), 6, core_skip=True)
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    starts = torch.zeros(3)
    other = (torch.randn(3, 256), torch.randn(3, 256))
    with torch.no_grad():
        features = model.encode(obs)
        h, _ = model.core.cell(features, other)
        logits, values, (h_next, _) = model(obs, other, starts)
        assert_close(h_next, h)
        assert_close(logits, model.policy.linear(torch.cat([features, h], 1)))
        assert_close(values, model.critic.linear(torch.cat([features, h], 1)).squeeze(-1))
        assert model.policy.linear.in_features == model.encoder.out_features + 256
        for head in (model.policy.linear, model.critic.linear):
            head.weight[:, -256:] = 0.0
        zero_state = model.initial_state(3)
        a = model(obs, zero_state, starts)
        b = model(obs, other, starts)
    assert_close(a[0], b[0])
    assert_close(a[1], b[1])
    with torch.no_grad():
        assert_close(
            a[0], torch.nn.functional.linear(features, model.policy.linear.weight[:, :-256], model.policy.linear.bias)
        )
    assert not torch.allclose(logits, b[0])  # before zeroing, the state changed the policy
    assert model.spec["core_skip"] is True
    old_spec = {k: v for k, v in build_model((4, 84, 84), 6).spec.items() if k != "core_skip"}
    assert build_model(**old_spec).spec["core_skip"] is False
    assert build_model((4, 84, 84), 6, recurrent=False, core_skip=True).spec["core_skip"] is False


def test_debiased_rmsprop_on_a_case_worked_by_hand():
    """rmsprop-debiased: v <- .99 v + .01 g^2, v_hat = v / (1 - .99^t), step = lr * g / (sqrt(v_hat) + eps):
    with a constant gradient v_hat = g^2 from the first step on, so each step is lr * g / (|g| + eps)
    (torch's RMSprop would step lr * g / (.1 |g| + eps) first: 10 x as far)."""
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = make_optimizer("rmsprop-debiased", [w], lr=0.1)
    for t in (1, 2):
        w.grad = torch.tensor([0.5, -0.001])
        opt.step()
        # w0: .1 * .5 / (.5 + 1e-5) = .0999980;  w1: .1 * .001 / (.001 + 1e-5) = .0990099
        assert w.detach().tolist() == pytest.approx([1 - t * 0.0999980, -2 + t * 0.0990099], abs=1e-6)


def test_layer_norm_lstm_cell_by_its_formula_and_it_survives_weights_grown_100x():
    """--lstm-norm: gates = LN(W_x x) + LN(W_h h), c' = s(f) c + s(i) tanh(g), h' = s(o) tanh(LN(c')),
    with LN computed here from its definition; and where the weights grow 100-fold (what a too
    large step does), the plain LSTM's gates saturate and its output stops depending on the frame,
    while the normalized cell's do not."""
    from nets.cores import LayerNormLSTMCell

    torch.manual_seed(0)
    cell = LayerNormLSTMCell(5, 3)
    torch.nn.init.normal_(cell.weight_ih)
    torch.nn.init.normal_(cell.weight_hh)
    x, h, c = torch.randn(2, 5), torch.randn(2, 3), torch.randn(2, 3)

    def ln(v):  # scale 1, shift 0, eps 1e-5
        return (v - v.mean(1, keepdim=True)) / torch.sqrt(v.var(1, unbiased=False, keepdim=True) + 1e-5)

    gates = ln(x @ cell.weight_ih.T) + ln(h @ cell.weight_hh.T)
    i, f, g, o = gates.split(3, dim=1)
    c_ref = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h_ref = torch.sigmoid(o) * torch.tanh(ln(c_ref))
    with torch.no_grad():
        h_new, c_new = cell(x, (h, c))
    assert_close(c_new, c_ref)
    assert_close(h_new, h_ref)

    obs = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    health = {}
    for norm in (False, True):
        torch.manual_seed(1)
        model = build_model((4, 84, 84), 6, lstm_norm=norm)
        with torch.no_grad():
            model.core.cell.weight_ih.mul_(100.0)
        health[norm] = core_health(
            model, obs, (torch.randn(16, 256) * 0.1, torch.randn(16, 256) * 0.1), torch.zeros(16)
        )
    assert health[False]["gate_saturation"] > 0.8
    assert health[True]["gate_saturation"] < 0.05 and health[True]["output_std"] > 0.05
