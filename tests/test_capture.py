"""The compiled network (``--compile``, ``capture.py``) computes what the eager one computes: a
rollout's losses and gradients agree to float tolerance, and nothing recompiles once a run's
shapes have been seen. The CPU test compiles with AOT autograd's eager backend (the graphs the
run captures, forward and backward, without generating kernels, which would take minutes on a
small CPU); the ``cuda`` smoke tests run the default backend on a GPU."""

from __future__ import annotations

import pytest
import torch

from capture import compile_network
from model import build_model

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def twin_networks(backend="aot_eager", device="cpu"):
    networks = []
    for _ in range(2):
        torch.manual_seed(0)
        networks.append(
            build_model(
                (4, 42, 42), 6, recurrent=True, hidden_size=32, conv_filters=8, lstm_norm=True, core_skip=True
            ).to(device)
        )
    eager, compiled = networks
    return eager, compile_network(compiled, backend=backend)


def rollout_loss(model, obs, starts, bootstrap_sizes=(), steps=5):
    """A rollout through the network as the runner acts (resets included), a loss that trains
    through every step's outputs, and values bootstrapped for a few envs at a time; the loss and
    the gradients."""
    state = model.initial_state(obs.shape[1], obs.device)
    loss = 0.0
    for t in range(steps):
        logits, values, state = model(obs[t], state, starts[t])
        loss = loss + torch.log_softmax(logits, -1)[:, 0].sum() + values.pow(2).sum()
    for size in bootstrap_sizes:  # the values of a time limit's terminal observations
        part = tuple(s[:size] for s in state)
        loss = loss + model.value(obs[-1, :size], part, torch.zeros(size)).sum()
    model.zero_grad()
    loss.backward()
    return loss.item(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("backend, device", [("aot_eager", "cpu"), pytest.param(None, "cuda", marks=pytest.mark.cuda)])
def test_the_compiled_network_gives_the_eager_losses_and_gradients(backend, device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    eager, compiled = twin_networks(backend, device)  # on a GPU the default backend generates the kernels
    obs = torch.randint(0, 256, (5, 4, 4, 42, 42), dtype=torch.uint8, device=device)
    starts = torch.zeros(5, 4, device=device)
    starts[0], starts[3, 1] = 1, 1
    loss, grads = rollout_loss(eager, obs, starts, bootstrap_sizes=(3,))
    compiled_loss, compiled_grads = rollout_loss(compiled, obs, starts, bootstrap_sizes=(3,))
    # Inductor's fused kernels sum in another order than the eager ones: float tolerance, a GPU's looser.
    rtol, atol = (1e-6, 1e-6) if device == "cpu" else (1e-4, 1e-5)
    assert compiled_loss == pytest.approx(loss, rel=rtol)
    assert compiled_grads.keys() == grads.keys()  # the same parameter names: checkpoints do not change
    for name, grad in grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=max(rtol, 1e-5), atol=atol, msg=name)


def test_nothing_recompiles_once_a_runs_shapes_were_seen():
    _, compiled = twin_networks()
    obs = torch.randint(0, 256, (5, 4, 4, 42, 42), dtype=torch.uint8)
    starts = torch.zeros(5, 4)
    starts[0] = 1
    rollout_loss(compiled, obs, starts)  # warm-up: the one shape of a run's acting step
    torch.compiler.set_stance("fail_on_recompile")
    try:
        for update in range(3):  # new frames, other resets, bootstrap batches of any size: the same graph
            obs = torch.randint(0, 256, (5, 4, 4, 42, 42), dtype=torch.uint8)
            starts = (torch.rand(5, 4) < 0.2).float()
            rollout_loss(compiled, obs, starts, bootstrap_sizes=(1, 2 + update % 2, 4))
    finally:
        torch.compiler.set_stance("default")


def test_a_run_with_compile_learns_what_the_eager_run_learns(tmp_path, monkeypatch):
    from tiny_run import train

    import training

    compiled = []
    monkeypatch.setattr(
        training, "compile_network", lambda model: compiled.append(model) or compile_network(model, backend="aot_eager")
    )
    flags = ("--env-name", "CartPole-v1", "--num-updates", "4")
    eager_run = train(tmp_path / "eager", *flags)
    compiled_run = train(tmp_path / "compiled", *flags, "--compile")
    assert len(compiled) == 1  # --compile reached the run, and only that one
    eager, other = (torch.load(f"{run}/a2c_last", weights_only=True)["model"] for run in (eager_run, compiled_run))
    assert eager.keys() == other.keys()  # the checkpoint's names do not change
    for name, weight in eager.items():
        torch.testing.assert_close(other[name], weight, rtol=1e-5, atol=1e-6, msg=name)
