"""model.ActorCritic: per-env resets, step/sequence equivalence, BPTT reach, detached rollouts, init."""

import math

import pytest
import torch
from torch.testing import assert_close

from model import build_model
from nets.encoders import ConvEncoder
from storage import RolloutStorage

pytestmark = pytest.mark.usefixtures("torch_single_thread")

OBS_SHAPE = (1, 24, 24)
NUM_ACTIONS = 3
HIDDEN = 16


def make_model(recurrent=True, seed=0, obs_shape=OBS_SHAPE, hidden=HIDDEN, actions=NUM_ACTIONS):
    torch.manual_seed(seed)
    return build_model(obs_shape, actions, recurrent=recurrent, hidden_size=hidden)


def rand_obs(*lead, seed=0, obs_shape=OBS_SHAPE):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*lead, *obs_shape), dtype=torch.uint8, generator=g)


def rand_state(n, seed=1, requires_grad=False, hidden=HIDDEN):
    g = torch.Generator().manual_seed(seed)
    h, c = torch.randn(n, hidden, generator=g), torch.randn(n, hidden, generator=g)
    return h.requires_grad_(requires_grad), c.requires_grad_(requires_grad)


# ----------------------------------------------------------------------------- per-env reset
def test_reset_touches_only_envs_whose_observation_starts_an_episode():
    """episode_starts=[0,1,0]: env 1 behaves as from a zero state, envs 0 and 2 as if no reset."""
    model = make_model()
    obs, state = rand_obs(3), rand_state(3)
    zero = model.initial_state(3)
    with torch.no_grad():
        logits, values, (h, c) = model(obs, state, torch.tensor([0.0, 1.0, 0.0]))
        logits_z, values_z, (h_z, c_z) = model(obs, zero, torch.zeros(3))
        logits_k, values_k, (h_k, c_k) = model(obs, state, torch.zeros(3))
    for got, zero_ref, kept_ref in [
        (logits, logits_z, logits_k),
        (values, values_z, values_k),
        (h, h_z, h_k),
        (c, c_z, c_k),
    ]:
        assert_close(got[1], zero_ref[1], rtol=0, atol=1e-6)
        assert_close(got[[0, 2]], kept_ref[[0, 2]], rtol=0, atol=1e-6)
    # and the reset did matter (the nonzero state really changes env 1's output otherwise)
    assert not torch.allclose(values_k[1], values_z[1], atol=1e-4)


def _state_grads(model, obs, state, starts, env):
    h, c = state
    logits, values, _ = model(obs, (h, c), starts)
    (logits[env].sum() + values[env]).backward()
    return h.grad, c.grad


def test_no_gradient_path_between_envs():
    """Env 0's output has zero grad w.r.t. env 1's incoming state and vice versa (no reset)."""
    model = make_model()
    obs = rand_obs(2)
    for env, other in [(0, 1), (1, 0)]:
        state = rand_state(2, requires_grad=True)
        gh, gc = _state_grads(model, obs, state, torch.zeros(2), env)
        assert torch.count_nonzero(gh[other]) == 0 and torch.count_nonzero(gc[other]) == 0
        assert gh[env].abs().sum() > 0 and gc[env].abs().sum() > 0


def test_reset_env_state_gets_exactly_zero_gradient():
    """An env whose observation starts an episode gets exactly zero grad into its old state."""
    model = make_model()
    obs = rand_obs(3)
    state = rand_state(3, requires_grad=True)
    gh, gc = _state_grads(model, obs, state, torch.tensor([1.0, 0.0, 0.0]), env=0)
    assert torch.count_nonzero(gh) == 0 and torch.count_nonzero(gc) == 0
    # the same env not reset does get a gradient
    state = rand_state(3, requires_grad=True)
    gh, gc = _state_grads(model, obs, state, torch.tensor([0.0, 1.0, 1.0]), env=0)
    assert gh[0].abs().sum() > 0 and gc[0].abs().sum() > 0
    assert torch.count_nonzero(gh[1:]) == 0 and torch.count_nonzero(gc[1:]) == 0


# ----------------------------------------------------------------------------- step vs sequence
def test_stepping_forward_equals_forward_sequence_with_midsequence_reset():
    """T calls of forward() == one forward_sequence (logits, values, final state), including an
    episode start for env 1 at t=2 and for env 0 at t=0."""
    T, N = 5, 3
    model = make_model()
    obs = rand_obs(T, N)
    starts = torch.zeros(T, N)
    starts[0, 0] = 1.0
    starts[2, 1] = 1.0
    state0 = rand_state(N)
    with torch.no_grad():
        state = state0
        step_logits, step_values = [], []
        for t in range(T):
            lg, v, state = model(obs[t], state, starts[t])
            step_logits.append(lg)
            step_values.append(v)
        seq_logits, seq_values, seq_state = model.forward_sequence(obs, state0, starts)
    assert seq_logits.shape == (T, N, NUM_ACTIONS) and seq_values.shape == (T, N)
    assert_close(seq_logits, torch.stack(step_logits), rtol=0, atol=1e-5)
    assert_close(seq_values, torch.stack(step_values), rtol=0, atol=1e-5)
    for a, b in zip(seq_state, state):
        assert_close(a, b, rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- BPTT
class _FeatureGrab:
    """Forward hook keeping the encoder output (all T*N frames) with its gradient retained."""

    def __init__(self, model):
        self.out = None
        model.encoder.register_forward_hook(self._hook)

    def _hook(self, module, inputs, output):
        output.retain_grad()
        self.out = output


def test_forward_sequence_gradient_reaches_back_to_first_step():
    """d(value at last step) reaches the initial state and step-0 features when nothing resets."""
    T, N = 4, 2
    model = make_model()
    grab = _FeatureGrab(model)
    state = rand_state(N, requires_grad=True)
    _, values, _ = model.forward_sequence(rand_obs(T, N), state, torch.zeros(T, N))
    values[-1].sum().backward()
    feat_grad = grab.out.grad.view(T, N, -1)
    for env in range(N):
        assert state[0].grad[env].abs().sum() > 0 and state[1].grad[env].abs().sum() > 0
        assert feat_grad[0, env].abs().sum() > 0  # step 0 frame still influences step T-1


def test_forward_sequence_reset_blocks_gradient_to_earlier_steps():
    """Env 1 resets at t=2: its initial state and its frames at t<2 get exactly zero grad from the
    last output, while env 0 (never reset) still gets gradient at every step."""
    T, N = 4, 2
    model = make_model()
    grab = _FeatureGrab(model)
    state = rand_state(N, requires_grad=True)
    starts = torch.zeros(T, N)
    starts[2, 1] = 1.0
    logits, values, _ = model.forward_sequence(rand_obs(T, N), state, starts)
    (values[-1].sum() + logits[-1].sum()).backward()
    feat_grad = grab.out.grad.view(T, N, -1)
    assert torch.count_nonzero(state[0].grad[1]) == 0 and torch.count_nonzero(state[1].grad[1]) == 0
    assert torch.count_nonzero(feat_grad[:2, 1]) == 0
    assert feat_grad[2, 1].abs().sum() > 0 and feat_grad[3, 1].abs().sum() > 0
    assert state[0].grad[0].abs().sum() > 0
    assert all(feat_grad[t, 0].abs().sum() > 0 for t in range(T))


# ----------------------------------------------------------------------------- value()
@pytest.mark.parametrize("starts", [[0.0, 0.0], [1.0, 0.0]])
def test_value_leaves_callers_state_unchanged_and_returns_only_values(starts):
    model = make_model()
    state = rand_state(2)
    before = tuple(s.clone() for s in state)
    obs = rand_obs(2)
    out = model.value(obs, state, torch.tensor(starts))
    assert isinstance(out, torch.Tensor) and out.shape == (2,)
    for s, b in zip(state, before):
        assert torch.equal(s, b)
    # The forward pass's values, episode starts included (env 0 reads a zero state when it starts).
    assert torch.equal(out, model(obs, state, torch.tensor(starts))[1])
    if starts[0]:  # (one env alone computes in another order: equal to float rounding)
        with torch.no_grad():
            fresh = float(model.value(obs[:1], model.initial_state(1), torch.zeros(1)))
            carried = float(model.value(obs[:1], tuple(s[:1] for s in state), torch.zeros(1)))
            assert float(out[0]) == pytest.approx(fresh, abs=1e-6)
            assert float(out[0]) != pytest.approx(carried, abs=1e-4)


# ----------------------------------------------------------------------------- rollout boundary
def test_storage_start_cuts_graph_to_previous_rollout():
    """A state produced with grad and stored by start() has no grad_fn; a loss on the next rollout
    sends no gradient into the previous rollout's state tensors."""
    T, N = 3, 2
    model = make_model()
    h_prev, c_prev = rand_state(N, requires_grad=True)
    _, _, state = model(rand_obs(N, seed=5), (h_prev, c_prev), torch.zeros(N))
    assert state[0].grad_fn is not None  # precondition: the carried state is part of a graph

    storage = RolloutStorage(T, N, OBS_SHAPE)
    storage.start(state)
    assert all(s.grad_fn is None and not s.requires_grad for s in storage.initial_state)
    for t in range(T):
        storage.obs[t].copy_(rand_obs(N, seed=10 + t))
    logits, values, _ = model.forward_sequence(storage.obs, storage.initial_state, storage.episode_starts)
    (logits.sum() + values.sum()).backward()
    assert h_prev.grad is None and c_prev.grad is None


def test_backward_on_next_rollout_after_previous_graph_was_freed():
    """Rollout 1's graph is backpropagated (and freed); rollout 2, started from its final state via
    start(), can still backward without 'backward through the graph a second time'."""
    T, N = 2, 2
    model = make_model()
    logits, values, state = model.forward_sequence(rand_obs(T, N, seed=1), model.initial_state(N), torch.ones(T, N))
    (logits.sum() + values.sum()).backward()
    storage = RolloutStorage(T, N, OBS_SHAPE)
    storage.start(state)
    logits, values, _ = model.forward_sequence(rand_obs(T, N, seed=2), storage.initial_state, torch.zeros(T, N))
    (logits.sum() + values.sum()).backward()  # raises RuntimeError if the graph were still linked


# ----------------------------------------------------------------------------- feed-forward, encoder
def test_feedforward_model_has_empty_state_and_works():
    model = make_model(recurrent=False)
    assert model.initial_state(3) == ()
    assert not model.recurrent and not hasattr(model.core, "cell")
    logits, values, state = model(rand_obs(3), (), torch.zeros(3))
    assert logits.shape == (3, NUM_ACTIONS) and values.shape == (3,) and state == ()
    logits, values, state = model.forward_sequence(rand_obs(4, 3), (), torch.zeros(4, 3))
    assert logits.shape == (4, 3, NUM_ACTIONS) and values.shape == (4, 3) and state == ()


@pytest.mark.parametrize("size", [84, 42])
def test_conv_encoder_outputs_288_features(size):
    torch.manual_seed(0)
    enc = ConvEncoder(4)
    out = enc(torch.zeros(2, 4, size, size, dtype=torch.uint8))
    assert out.shape == (2, 288) and enc.out_features == 288
    # Fewer filters a layer: each of the 3x3 grid's cells holds one feature a filter.
    narrow = ConvEncoder(4, num_filters=16)
    assert narrow(torch.zeros(2, 4, size, size, dtype=torch.uint8)).shape == (2, 144) and narrow.out_features == 144
    assert [conv.weight.shape for conv in narrow.convs if isinstance(conv, torch.nn.Conv2d)] == [(16, 4, 3, 3)] + [
        (16, 16, 3, 3)
    ] * 3


def test_conv_encoder_scales_uint8_to_unit_range():
    """uint8 255 reads as 1.0 and 0 as 0.0 (the encoder divides by 255 itself)."""
    torch.manual_seed(0)
    enc = ConvEncoder(4)
    full = enc(torch.full((1, 4, 42, 42), 255, dtype=torch.uint8))
    empty = enc(torch.zeros(1, 4, 42, 42, dtype=torch.uint8))
    assert not torch.allclose(full, empty)
    with torch.no_grad():
        ones_ref = enc.pool(enc.convs(torch.ones(1, 4, 42, 42))).flatten(1)
        zeros_ref = enc.pool(enc.convs(torch.zeros(1, 4, 42, 42))).flatten(1)
    assert_close(full, ones_ref, rtol=0, atol=1e-6)
    assert_close(empty, zeros_ref, rtol=0, atol=1e-6)


def test_storage_keeps_observations_uint8():
    storage = RolloutStorage(2, 2, (4, 42, 42))
    storage.insert(
        0,
        torch.full((2, 4, 42, 42), 255, dtype=torch.uint8),
        torch.zeros(2),
        torch.zeros(2, dtype=torch.long),
        torch.zeros(2),
        torch.zeros(2),
        torch.zeros(2),
    )
    assert storage.obs.dtype == torch.uint8
    assert int(storage.obs[0].max()) == 255


# ----------------------------------------------------------------------------- init
def test_actor_head_init_small_so_initial_policy_near_uniform():
    """Actor weight orthogonal with gain 0.01 (each row norm 0.01), zero bias: entropy ~ log(A)."""
    A = 6
    model = make_model(hidden=32, actions=A)
    row_norms = model.policy.linear.weight.norm(dim=1)
    assert_close(row_norms, torch.full((A,), 0.01), rtol=1e-4, atol=0)
    assert torch.count_nonzero(model.policy.linear.bias) == 0
    assert_close(model.critic.linear.weight.norm(), torch.tensor(1.0), rtol=1e-4, atol=0)  # critic gain 1
    with torch.no_grad():
        logits, _, _ = model.forward_sequence(rand_obs(3, 4), model.initial_state(4), torch.ones(3, 4))
    entropy = torch.distributions.Categorical(logits=logits).entropy()
    assert entropy.min() > math.log(A) - 1e-3
