"""The speed options change how the network is computed, not what it computes or learns.

* channels-last memory order: the same weights, outputs and training losses (to float rounding);
* the Nature-DQN encoder (``--arch nature``): its shape, and that its checkpoints play back;
* acting under ``torch.inference_mode``: the same actions and values as with gradients off;
* training through the forward pass kept from collecting the rollout: the same losses and
  gradients as running the rollout through the network again;
* the universe encoder taking a large batch in passes of a few frames on the CPU: the same
  features, gradients and training losses (to float rounding);
* malloc keeping freed memory (``perf.keep_freed_memory``): that a freed block stays with the
  process instead of going back to the OS;
* the bfloat16 encoder (``--bf16``), which does change the arithmetic: where it applies, that
  weights, gradients and checkpoints stay float32, and how near float32 its results stay; and
  that a rollout collected in ``casting_once`` casts each weight once and gives the same outputs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import platform
import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import checkpoints
from agent import load_model
from algorithms import make_agent
from config import Config, Speed
from model import ActorCritic, build_model
from nets.encoders import ConvEncoder, NatureEncoder

pytestmark = pytest.mark.usefixtures("torch_single_thread")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def short_run(make_runner, run_dir, **overrides) -> list[dict[str, float]]:
    """The stats of a 3-update run; ``overrides`` are settings of Config or of its Speed block."""
    speed = Speed(**{name: overrides.pop(name) for name in list(overrides) if name in Speed.__dataclass_fields__})
    config = Config(
        num_envs=2,
        num_updates=3,
        seed=3,
        tensorboard=False,
        progress=False,
        max_episode_frames=150,
        speed=speed,
        **overrides,
    )
    runner = make_runner(config, run_dir)
    runner.train()
    return runner.history


@pytest.mark.parametrize("arch,recurrent", [("universe", True), ("nature", False)])
def test_channels_last_gives_the_same_network_and_outputs(arch, recurrent):
    models = []
    for channels_last in (False, True):
        torch.manual_seed(0)
        models.append(build_model((4, 84, 84), 6, recurrent=recurrent, arch=arch, channels_last=channels_last))
    plain, fast = models
    conv = next(m for m in fast.encoder.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last) and not conv.weight.is_contiguous()
    for (name, a), (_, b) in zip(plain.state_dict().items(), fast.state_dict().items()):
        assert torch.equal(a, b), name  # same initial values, only the memory order differs
    obs = torch.randint(0, 256, (3, 5, 4, 84, 84), dtype=torch.uint8)
    starts = torch.zeros(3, 5)
    for a, b in zip(
        plain.forward_sequence(obs, plain.initial_state(5), starts)[:2],
        fast.forward_sequence(obs, fast.initial_state(5), starts)[:2],
    ):
        assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch,recurrent", [("universe", True), ("nature", False)])
def test_channels_last_training_gives_the_same_losses(make_runner, tmp_path, arch, recurrent):
    # Rounding differences (sums in another order) grow a little with each RMSprop step, so the
    # run is short: 3 updates agree to 1e-3 relative (the first one to about 1e-6).
    plain = short_run(make_runner, tmp_path / "plain", channels_last=False, arch=arch, recurrent=recurrent)
    fast = short_run(make_runner, tmp_path / "fast", channels_last=True, arch=arch, recurrent=recurrent)
    for key in ("total", "policy", "value", "entropy", "grad_norm"):
        assert_close(
            torch.tensor([h[key] for h in fast]), torch.tensor([h[key] for h in plain]), rtol=1e-3, atol=1e-6, msg=key
        )


def test_nature_encoder_is_the_dqn_network():
    enc = NatureEncoder((4, 84, 84))
    shapes = [tuple(p.shape) for p in enc.parameters()]
    assert shapes == [(32, 4, 8, 8), (32,), (64, 32, 4, 4), (64,), (64, 64, 3, 3), (64,), (512, 3136), (512,)]
    assert type(enc.fc[0]) is torch.nn.Linear
    assert list(enc.state_dict())[-2:] == ["fc.0.weight", "fc.0.bias"]  # the keys older checkpoints were saved with
    assert enc(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 512)
    lstm = build_model((4, 84, 84), 6, recurrent=True, arch="nature", hidden_size=64)
    assert lstm.core.cell.input_size == 512 and lstm.spec["arch"] == "nature"


def test_nature_checkpoint_plays_back(tmp_path):
    config = Config(arch="nature", recurrent=False)
    agent = make_agent(config, (4, 84, 84), 6)
    path = str(tmp_path / "a2c_last")
    checkpoints.atomic_save({"format": checkpoints.CHECKPOINT_FORMAT, **agent.state(full=False)}, path)
    model = load_model(path)
    assert isinstance(model.encoder, NatureEncoder) and not model.recurrent
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        assert_close(model(obs, (), torch.zeros(2))[0], agent.model(obs, (), torch.zeros(2))[0], rtol=1e-5, atol=1e-6)


def test_unknown_arch_is_refused():
    with pytest.raises(ValueError, match="unknown architecture"):
        build_model((4, 84, 84), 6, arch="resnet")


def test_acting_in_inference_mode_matches_no_grad():
    torch.manual_seed(1)
    agent = make_agent(Config(hidden_size=32), (4, 84, 84), 6)
    obs = torch.randint(0, 256, (4, 4, 84, 84), dtype=torch.uint8)
    state, starts = agent.model.initial_state(4), torch.zeros(4)
    torch.manual_seed(7)
    actions, log_probs, values, next_state = agent.act(obs, state, starts)
    with torch.no_grad():
        logits, ref_values, ref_state = agent.model(obs, state, starts)
    torch.manual_seed(7)
    ref_actions = torch.distributions.Categorical(logits=logits).sample()
    assert torch.equal(actions, ref_actions)
    assert torch.equal(log_probs, torch.distributions.Categorical(logits=logits).log_prob(actions))
    assert torch.equal(values, ref_values)
    assert all(torch.equal(a, b) for a, b in zip(next_state, ref_state))
    # Collecting with the graph samples the same actions from the same random stream.
    torch.manual_seed(7)
    graph_actions, graph_log_probs, graph_logits, graph_values, _ = agent.act_with_graph(obs, state, starts)
    assert torch.equal(graph_actions, actions) and torch.equal(graph_values.detach(), values)
    assert torch.equal(graph_log_probs, log_probs) and graph_log_probs.grad_fn is None
    assert graph_logits.grad_fn is not None and torch.equal(graph_logits.detach(), logits)
    # The state it returns starts the next rollout, which is trained through: it must be usable with autograd.
    agent.model.forward_sequence(obs.unsqueeze(0), tuple(s.clone() for s in next_state), starts.unsqueeze(0))[
        1
    ].sum().backward()


# Run in a fresh process: malloc's settings and heap are the whole process's, and what earlier
# tests left in the heap would decide where a block comes from.
KEPT_OR_RETURNED = """
import ctypes, ctypes.util
import perf
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

def returned_mib(size=16 << 20):  # over glibc's default 128 KiB thresholds, under the 32 MiB kept
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)  # its pages are resident now
    touched = perf.resident_memory_mib()
    libc.free(block)
    return touched - perf.resident_memory_mib()

for keep in (False, True):
    print(perf.keep_freed_memory(keep), returned_mib(), returned_mib())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="keep_freed_memory sets glibc's malloc only")
def test_keeping_freed_memory_keeps_a_freed_block_instead_of_returning_it_to_the_os():
    out = subprocess.run(
        [sys.executable, "-c", KEPT_OR_RETURNED], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.splitlines()
    (default_applied, *default), (kept_applied, *kept) = (line.split() for line in out)
    assert default_applied == kept_applied == "True"  # glibc: both settings applied
    assert all(float(mib) > 12 for mib in default)  # glibc's thresholds: the 16 MiB go back to the OS when freed
    assert all(float(mib) < 4 for mib in kept)  # kept in the heap for reuse, every time


def test_encoder_in_passes_gives_the_same_features_and_gradients():
    torch.manual_seed(0)
    encoder = ConvEncoder(4, channels_last=True).to(memory_format=torch.channels_last)
    obs = torch.randint(0, 256, (21, 4, 84, 84), dtype=torch.uint8)  # 8 + 8 + 5: a short last pass
    grads = []
    for chunk in (0, 8):
        encoder.cpu_chunk = chunk
        encoder.zero_grad()
        features = encoder(obs)
        (features * torch.linspace(-1, 1, features.shape[1])).sum().backward()
        grads.append((features.detach(), [p.grad.clone() for p in encoder.parameters()]))
    (whole, whole_grads), (split, split_grads) = grads
    assert split.shape == (21, 288) and torch.equal(split, whole)  # each frame is computed alone either way
    for a, b in zip(split_grads, whole_grads):  # weight gradients sum over frames in another order
        assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_encoder_in_passes_trains_the_same(make_runner, tmp_path):
    whole = short_run(make_runner, tmp_path / "whole", encoder_chunk=0, keep_graph=False)
    # The rollout run again in the update: 2 envs x 5 steps = 10 frames, in passes of 3, 3, 3 and 1.
    split = short_run(make_runner, tmp_path / "split", encoder_chunk=3, keep_graph=False)
    for key in ("total", "policy", "value", "entropy", "grad_norm"):
        assert_close(
            torch.tensor([h[key] for h in split]), torch.tensor([h[key] for h in whole]), rtol=1e-3, atol=1e-6, msg=key
        )


@pytest.mark.parametrize("channels_last", [False, True])
def test_frames_are_scaled_in_one_pass_to_the_same_numbers(channels_last):
    from nets.encoders import _scaled

    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    scaled = _scaled(obs, channels_last)
    assert scaled.dtype == torch.float32 and torch.equal(scaled, obs.float() / 255.0)
    assert scaled.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def collected_rollout(make_runner, recurrent: bool, arch: str, tmp_path):
    """A runner on Pong whose rollout crosses an episode boundary (20-frame games), collected with its graph.

    On SB3's wrappers, whose 20-frame cap ends every env's game inside the second rollout."""
    config = Config(
        num_envs=3,
        seed=5,
        recurrent=recurrent,
        arch=arch,
        hidden_size=32,
        tensorboard=False,
        progress=False,
        max_episode_frames=20,
        vec_env="dummy",
    )
    runner = make_runner(config, tmp_path)
    runner.collect()  # the first rollout starts every episode; the second carries state and crosses a reset
    batch = runner.collect()
    agent = runner.agent
    assert batch.outputs is not None and batch.outputs[0].grad_fn is not None
    assert batch.episode_starts[1:].sum() > 0 and batch.episode_starts[0].sum() < config.num_envs
    if recurrent:
        assert batch.initial_state[0].abs().sum() > 0 and batch.initial_state[0].grad_fn is None
    return agent, batch


@pytest.mark.parametrize("arch,recurrent", [("universe", True), ("nature", False)])
def test_loss_through_the_collected_graph_equals_running_the_rollout_again(make_runner, tmp_path, arch, recurrent):
    agent, batch = collected_rollout(make_runner, recurrent, arch, tmp_path)
    again = dataclasses.replace(batch, outputs=None)
    results = []
    for b in (batch, again):
        agent.model.zero_grad()
        terms = agent.loss(b)
        terms["total"].backward()
        results.append((terms, [p.grad.clone() for p in agent.model.parameters()]))
    (kept, kept_grads), (rerun, rerun_grads) = results
    for key in ("total", "policy", "value", "entropy"):
        assert_close(kept[key], rerun[key], rtol=1e-5, atol=1e-7, msg=key)
    for a, b in zip(kept_grads, rerun_grads):
        assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("arch,recurrent", [("universe", True), ("nature", False)])
def test_training_through_the_collected_graph_gives_the_same_losses(make_runner, tmp_path, arch, recurrent):
    kept = short_run(make_runner, tmp_path / "kept", arch=arch, recurrent=recurrent)
    rerun = short_run(make_runner, tmp_path / "rerun", keep_graph=False, arch=arch, recurrent=recurrent)
    for key in ("total", "policy", "value", "entropy", "grad_norm"):
        assert_close(
            torch.tensor([h[key] for h in kept]), torch.tensor([h[key] for h in rerun]), rtol=1e-3, atol=1e-6, msg=key
        )


# ------------------------------------------------------------------------------------------------
# bfloat16 encoder (--bf16): another arithmetic, so the tests pin where it applies and how far
# its results stay from float32, not that they are equal.
# ------------------------------------------------------------------------------------------------
def twin_models(arch: str, recurrent: bool) -> tuple[ActorCritic, ActorCritic]:
    """A float32 model and a bf16 one with the same weights."""
    torch.manual_seed(0)
    plain = build_model((4, 84, 84), 6, recurrent=recurrent, arch=arch, channels_last=True)
    fast = build_model((4, 84, 84), 6, recurrent=recurrent, arch=arch, channels_last=True, bf16=True)
    fast.load_state_dict(plain.state_dict())
    return plain, fast


@pytest.mark.parametrize("arch,recurrent", [("universe", True), ("nature", False)])
def test_bf16_computes_the_encoder_in_bfloat16_and_the_rest_in_float32(arch, recurrent):
    _, fast = twin_models(arch, recurrent)
    dtypes: dict[str, torch.dtype] = {}

    def record(name: str, module: torch.nn.Module, output: bool) -> None:
        def hook(_module, inputs, out) -> None:
            dtypes.setdefault(name, out.dtype if output else inputs[0].dtype)

        module.register_forward_hook(hook)

    record("conv out", next(m for m in fast.encoder.modules() if isinstance(m, torch.nn.Conv2d)), output=True)
    record("actor in", fast.policy.linear, output=False)
    record("critic out", fast.critic, output=True)
    if recurrent:
        record("lstm in", fast.core.cell, output=False)
    obs = torch.randint(0, 256, (2, 3, 4, 84, 84), dtype=torch.uint8)
    logits, values, state = fast.forward_sequence(obs, fast.initial_state(3), torch.zeros(2, 3))
    assert dtypes.pop("conv out") == torch.bfloat16
    assert set(dtypes.values()) == {torch.float32}
    assert logits.dtype == values.dtype == torch.float32 and all(s.dtype == torch.float32 for s in state)
    (logits.logsumexp(-1).sum() + values.sum()).backward()
    assert all(
        p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32 for p in fast.parameters()
    )


@pytest.mark.parametrize("arch,recurrent", [("universe", True), ("nature", False)])
def test_bf16_outputs_and_gradients_stay_near_float32(arch, recurrent):
    # bfloat16 keeps 8 bits of mantissa (about 2-3 significant digits): the features move by
    # about 1%, the outputs and the gradient's direction far less than a training step does.
    plain, fast = twin_models(arch, recurrent)
    torch.manual_seed(1)
    obs = torch.randint(0, 256, (5, 4, 4, 84, 84), dtype=torch.uint8)
    starts = torch.zeros(5, 4)
    outputs, grads = [], []
    for model in (plain, fast):
        logits, values, _ = model.forward_sequence(obs, model.initial_state(4), starts)
        loss = -(logits.log_softmax(-1)[..., 0].mean()) + values.pow(2).mean()
        loss.backward()
        outputs.append((logits, values))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    features = [model.encode(obs[0]) for model in (plain, fast)]
    assert not torch.equal(*features)  # it does compute differently
    assert_close(features[1], features[0], rtol=0.05, atol=0.02)
    assert_close(outputs[1][0], outputs[0][0], rtol=0.02, atol=2e-3)  # logits: small at initialization
    assert_close(outputs[1][1], outputs[0][1], rtol=0.05, atol=0.02)
    assert torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0) > 0.99


def test_bf16_training_stays_near_float32_and_saves_float32_weights(make_runner, tmp_path):
    # On SB3's wrappers: the rollout the tolerances below were set on.
    plain = short_run(make_runner, tmp_path / "plain", arch="nature", recurrent=False, vec_env="dummy")
    config = Config(
        num_envs=2,
        num_updates=3,
        seed=3,
        tensorboard=False,
        progress=False,
        max_episode_frames=150,
        arch="nature",
        recurrent=False,
        speed=Speed(bf16=True),
        vec_env="dummy",
    )
    runner = make_runner(config, tmp_path / "fast")
    assert runner.agent.model.bf16
    runner.train()
    fast = runner.history
    # The first update sees the same weights and the same rollout, so only the arithmetic differs.
    # (The policy loss is a mean of terms that nearly cancel, so its error is absolute, not relative.
    # Later updates start from weights that have moved apart, and a run's losses diverge, as
    # any two runs' do.)
    first, reference = fast[0], plain[0]
    assert first["policy"] != reference["policy"]
    assert abs(first["policy"] - reference["policy"]) < 5e-3
    for key, rtol in (("value", 0.02), ("entropy", 1e-3), ("grad_norm", 0.05)):
        assert first[key] == pytest.approx(reference[key], rel=rtol), key
    assert all(math.isfinite(h[key]) for h in fast for key in ("total", "grad_norm"))
    saved = load_model(str(tmp_path / "fast" / "a2c_last"), bf16=True)
    assert saved.bf16 and all(p.dtype == torch.float32 for p in saved.parameters())
    assert not load_model(str(tmp_path / "fast" / "a2c_last")).bf16  # float32 unless asked


class WeightCasts(TorchDispatchMode):
    """Counts the casts of the given parameters to another dtype (autocast's weight casts)."""

    def __init__(self, params) -> None:
        super().__init__()
        self.addresses = {p.data_ptr() for p in params}
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and args[0].data_ptr() in self.addresses:
            self.count += 1
        return func(*args, **(kwargs or {}))


def rollout_passes(model: ActorCritic, obs: torch.Tensor, once: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One pass per step over ``obs [T, N, ...]`` as the runner collects them, then a backward
    pass through all of them: (outputs, weight gradient, number of weight casts)."""
    model.zero_grad()
    state, starts = model.initial_state(obs.shape[1]), torch.zeros(obs.shape[1])
    casts = WeightCasts(model.encoder.parameters())
    with casts, model.casting_once() if once else contextlib.nullcontext():
        outputs = []
        for frames in obs:
            logits, values, state = model(frames, state, starts)
            outputs.append(torch.cat([logits, values.unsqueeze(1)], 1))
    outputs = torch.stack(outputs)
    (outputs.logsumexp(-1).sum() + outputs[..., -1].pow(2).sum()).backward()
    return outputs.detach(), torch.cat([p.grad.flatten() for p in model.parameters()]), casts.count


@pytest.mark.parametrize("arch,recurrent", [("universe", True), ("nature", False)])
def test_casting_once_casts_each_weight_once_per_rollout_with_the_same_outputs(arch, recurrent):
    _, fast = twin_models(arch, recurrent)
    obs = torch.randint(0, 256, (5, 3, 4, 84, 84), dtype=torch.uint8)
    weights = len(list(fast.encoder.parameters()))
    each, each_grad, each_casts = rollout_passes(fast, obs, once=False)
    once, once_grad, once_casts = rollout_passes(fast, obs, once=True)
    assert (each_casts, once_casts) == (5 * weights, weights)
    assert torch.equal(once, each)  # the same bfloat16 weights, so the same numbers
    # The five passes' gradients of a weight are summed in bfloat16 instead of float32: each
    # addition rounds to 8 bits of mantissa, so the gradient moves by well under 1% of its norm.
    assert not torch.equal(once_grad, each_grad)
    assert (once_grad - each_grad).norm() < 0.01 * each_grad.norm()


def test_bf16_trains_alike_through_the_collected_graph_and_by_running_the_rollout_again(make_runner, tmp_path):
    # Collecting without gradients fills casting_once's casts in inference mode; the update then
    # runs outside it. The first update sees the same weights and rollout both ways: the same
    # bfloat16 weights give the same losses, and the gradient differs only by the order of its
    # bfloat16 sums (one cast for the rollout's five passes against one for one pass of 80 frames).
    runs = [
        short_run(
            make_runner,
            tmp_path / str(keep),
            keep_graph=keep,
            arch="nature",
            recurrent=False,
            bf16=True,
            vec_env="dummy",
        )
        for keep in (True, False)
    ]
    kept, rerun = (history[0] for history in runs)
    for key in ("policy", "value", "entropy"):
        assert kept[key] == pytest.approx(rerun[key], rel=1e-5), key
    assert kept["grad_norm"] == pytest.approx(rerun["grad_norm"], rel=1e-3)


def test_casting_once_forgets_its_casts_when_the_block_ends():
    _, fast = twin_models("nature", False)
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    starts = torch.zeros(2)
    with fast.casting_once():
        before = fast(obs, (), starts)[0]
        assert not torch.is_autocast_enabled("cpu")  # only the encoder computes in bfloat16
    with torch.no_grad():
        for p in fast.parameters():
            p.mul_(1.5)  # an optimizer step between two rollouts
    with fast.casting_once():
        after = fast(obs, (), starts)[0]
    assert not torch.equal(after, before) and torch.equal(after, fast(obs, (), starts)[0])


def test_casting_once_does_nothing_without_bf16():
    plain, _ = twin_models("nature", False)
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    with WeightCasts(plain.parameters()) as casts, plain.casting_once():
        plain(obs, (), torch.zeros(2))
    assert casts.count == 0
