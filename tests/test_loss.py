"""agent.a2c_loss and A2CAgent.update: hand-computed loss terms, constant targets, clipping,
loss then step, skipping non-finite batches, and determinism."""

import copy
import math

import pytest
import torch
from torch.testing import assert_close

from agent import A2CAgent, a2c_loss
from model import build_model
from storage import Batch

pytestmark = pytest.mark.usefixtures("torch_single_thread")

OBS_SHAPE = (1, 24, 24)
NUM_ACTIONS = 3
HIDDEN = 16
T, N = 3, 2


def make_model(seed=0):
    torch.manual_seed(seed)
    return build_model(OBS_SHAPE, NUM_ACTIONS, recurrent=True, hidden_size=HIDDEN)


def make_batch(model, seed=0, returns_scale=1.0):
    """A hand-built rollout: env 1 starts a new episode at t=1; initial state is nonzero for env 0."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.zeros(T, N)
    starts[0, 1] = 1.0
    starts[1, 1] = 1.0
    values = torch.randn(T, N, generator=g)
    returns = returns_scale * torch.randn(T, N, generator=g)
    h = 0.5 * torch.randn(N, HIDDEN, generator=g)
    return Batch(
        obs=torch.randint(0, 256, (T, N, *OBS_SHAPE), dtype=torch.uint8, generator=g),
        episode_starts=starts,
        actions=torch.randint(0, NUM_ACTIONS, (T, N), generator=g),
        returns=returns,
        advantages=returns - values,
        values=values,
        log_probs=torch.zeros(T, N),
        initial_state=(h, torch.zeros(N, HIDDEN)),
    )


def params_copy(model):
    return [p.detach().clone() for p in model.parameters()]


# ----------------------------------------------------------------------------- a2c_loss by hand
# T=2, N=1, two actions.
#   step 0: logits [0, 0]      -> p = [.5, .5],  action 0: log p = log .5,  H0 = log 2
#   step 1: logits [log 3, 0]  -> p = [.75, .25], action 1: log p = log .25,
#           H1 = -(.75 log .75 + .25 log .25)
#   advantages [1, .5]; values [.5, -1]; returns [1.5, 1]
HAND = dict(
    logits=torch.tensor([[[0.0, 0.0]], [[math.log(3.0), 0.0]]]),
    values=torch.tensor([[0.5], [-1.0]]),
    actions=torch.tensor([[0], [1]]),
    returns=torch.tensor([[1.5], [1.0]]),
    advantages=torch.tensor([[1.0], [0.5]]),
)
H0 = math.log(2.0)
H1 = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
HAND_POLICY = -(math.log(0.5) * 1.0 + math.log(0.25) * 0.5) / 2  # = log 2 = 0.6931...
HAND_VALUE = ((1.5 - 0.5) ** 2 + (1.0 - (-1.0)) ** 2) / 2  # = (1 + 4) / 2 = 2.5
HAND_ENTROPY = (H0 + H1) / 2


def test_a2c_loss_terms_match_hand_computation():
    vc, ec = 0.5, 0.01
    terms = a2c_loss(**HAND, value_coeff=vc, entropy_coeff=ec)
    assert terms["policy"].item() == pytest.approx(HAND_POLICY, abs=1e-6)
    assert terms["policy"].item() == pytest.approx(math.log(2.0), abs=1e-6)
    assert terms["value"].item() == pytest.approx(2.5, abs=1e-6)
    assert terms["entropy"].item() == pytest.approx(HAND_ENTROPY, abs=1e-6)
    expected_total = HAND_POLICY + vc * HAND_VALUE - ec * HAND_ENTROPY
    assert terms["total"].item() == pytest.approx(expected_total, abs=1e-6)


def test_loss_terms_are_means_not_sums_over_steps():
    """Repeating the same samples (T doubled, or spread over N envs) leaves every term unchanged:
    entropy in particular is a mean of per-sample entropies, not a sum over steps."""
    doubled = {k: torch.cat([v, v], dim=0) for k, v in HAND.items()}  # T = 4
    widened = {k: torch.cat([v, v], dim=1) for k, v in HAND.items()}  # N = 2
    for inputs in (doubled, widened):
        terms = a2c_loss(**inputs, value_coeff=0.5, entropy_coeff=0.01)
        assert terms["entropy"].item() == pytest.approx(HAND_ENTROPY, abs=1e-6)
        assert terms["policy"].item() == pytest.approx(HAND_POLICY, abs=1e-6)
        assert terms["value"].item() == pytest.approx(HAND_VALUE, abs=1e-6)


def test_advantages_and_returns_are_constants():
    """Even if advantages/returns are still attached to the value graph, the only gradient into the
    values is the value-loss one: d/dV [vc * mean((R-V)^2)] = vc * 2 (V - R) / n."""
    vc = 0.5
    logits = HAND["logits"].clone().requires_grad_(True)
    values = HAND["values"].clone().requires_grad_(True)
    returns_leaf = HAND["returns"].clone().requires_grad_(True)
    advantages = returns_leaf - values  # a graph-attached advantage, as a buggy caller would pass
    terms = a2c_loss(logits, values, HAND["actions"], returns_leaf, advantages, vc, 0.01)
    terms["total"].backward()
    # V - R = [.5 - 1.5, -1 - 1] = [-1, -2]; vc*2/n = .5*2/2 = .5  ->  [-0.5, -1.0]
    assert_close(values.grad, torch.tensor([[-0.5], [-1.0]]), rtol=0, atol=1e-6)
    assert returns_leaf.grad is None
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_gradients_reach_both_heads_lstm_and_encoder():
    model = make_model()
    batch = make_batch(model)
    logits, values, _ = model.forward_sequence(batch.obs, batch.initial_state, batch.episode_starts)
    terms = a2c_loss(logits, values, batch.actions, batch.returns, batch.advantages, 0.5, 0.01)
    terms["total"].backward()
    for name in [
        "policy.linear.weight",
        "critic.linear.weight",
        "core.cell.weight_ih",
        "core.cell.weight_hh",
        "encoder.convs.0.weight",
        "encoder.convs.6.weight",
    ]:
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


# ----------------------------------------------------------------------------- update()
def test_update_reports_preclip_grad_norm_and_clips_the_step():
    """grad_norm is the global norm before clipping; with SGD(lr=1) the step is -g * c/||g||, so
    its norm is max_grad_norm (not more)."""
    max_norm = 0.05
    model = make_model()
    reference = copy.deepcopy(model)
    agent = A2CAgent(model, max_grad_norm=max_norm, value_coeff=0.5, entropy_coeff=0.01)
    agent.optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    batch = make_batch(model, returns_scale=100.0)

    # manual gradient on an identical copy
    logits, values, _ = reference.forward_sequence(batch.obs, batch.initial_state, batch.episode_starts)
    ref_terms = a2c_loss(logits, values, batch.actions, batch.returns, batch.advantages, 0.5, 0.01)
    ref_terms["total"].backward()
    grads = [p.grad.clone() for p in reference.parameters()]
    ref_norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    assert ref_norm > 20 * max_norm  # precondition: clipping really happens

    before = params_copy(model)
    stats = agent.update(batch)
    assert stats["skipped"] == 0
    assert stats["total"] == pytest.approx(ref_terms["total"].item(), rel=1e-5)
    assert stats["grad_norm"] == pytest.approx(ref_norm, rel=1e-4)
    deltas = [p.detach() - b for p, b in zip(model.parameters(), before)]
    step_norm = math.sqrt(sum(float(d.pow(2).sum()) for d in deltas))
    assert step_norm <= max_norm + 1e-6
    assert step_norm == pytest.approx(max_norm, rel=1e-3)
    # direction: the step is the gradient scaled down by max_norm / ||g|| (float32 rounding of
    # params ~0.1-1 in size allows ~1e-7 per element)
    flat_d = torch.cat([d.flatten() for d in deltas])
    flat_g = torch.cat([g.flatten() for g in grads])
    assert_close(flat_d, -flat_g * (max_norm / ref_norm), rtol=0, atol=2e-7)
    assert float(torch.nn.functional.cosine_similarity(flat_d, -flat_g, dim=0)) > 0.9999


def test_loss_leaves_the_weights_and_step_applies_that_loss():
    """update = loss then step: between them the weights are those that produced the loss (what
    a2c_best_loss keeps), and step applies exactly that loss."""
    model = make_model()
    agent = A2CAgent(model, lr=1e-2)
    batch = make_batch(model)
    before = params_copy(model)
    terms = agent.loss(batch)
    assert all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))
    stats = agent.step(terms)
    assert stats["total"] == float(terms["total"].detach())
    assert not all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))
    # update() is the same two calls, and adds the rollout's statistics
    again = A2CAgent(make_model(), lr=1e-2)
    updated = again.update(make_batch(again.model))
    assert {name: value for name, value in updated.items() if name in stats} == stats
    assert set(updated) - set(stats) == {
        "explained_variance",
        "rollout/value_mean",
        "rollout/return_mean",
        "rollout/advantage_mean",
        "rollout/advantage_std",
    }
    assert all(torch.equal(a.detach(), b.detach()) for a, b in zip(again.model.parameters(), model.parameters()))


@pytest.mark.parametrize("how", ["nan_returns", "inf_gradient"])
def test_non_finite_loss_or_gradient_skips_update(how):
    """A nan loss (returns with nan) or a non-finite gradient leaves weights and optimizer state alone."""
    model = make_model()
    agent = A2CAgent(model, lr=1e-2)
    batch = make_batch(model)
    if how == "nan_returns":
        batch.returns[1, 0] = float("nan")
    else:
        first = next(model.parameters())
        agent.reduce_gradients = lambda: first.grad.fill_(float("inf"))  # instance-level patch
    before = params_copy(model)
    stats = agent.update(batch)
    agent.__dict__.pop("reduce_gradients", None)  # back to the real (no-op) hook
    assert stats["skipped"] == 1
    assert math.isnan(stats["grad_norm"]) or math.isinf(stats["grad_norm"])
    assert all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))
    assert len(agent.optimizer.state) == 0
    # a following good batch still trains normally
    stats = agent.update(make_batch(model, seed=1))
    assert stats["skipped"] == 0
    assert not all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
def test_same_seed_same_batch_gives_bit_identical_parameters(optimizer):
    results = []
    for _ in range(2):
        model = make_model(seed=3)
        agent = A2CAgent(model, lr=1e-3, optimizer=optimizer)
        for s in range(2):
            agent.update(make_batch(model, seed=s))
        results.append(params_copy(model))
    assert all(torch.equal(a, b) for a, b in zip(*results))


# ----------------------------------------------------------------------------- without a critic
def test_without_a_critic_the_loss_has_no_value_term():
    terms = a2c_loss(**{**HAND, "values": None}, value_coeff=0.5, entropy_coeff=0.01)
    assert "value" not in terms
    assert terms["total"].item() == pytest.approx(HAND_POLICY - 0.01 * HAND_ENTROPY, abs=1e-6)


def test_a_network_without_a_critic_has_no_value_head_and_values_every_state_at_zero():
    from storage import compute_returns

    torch.manual_seed(0)
    model = build_model(OBS_SHAPE, NUM_ACTIONS, recurrent=True, hidden_size=HIDDEN, critic=False)
    assert model.spec["critic"] is False and not any(k.startswith("critic") for k in model.state_dict())
    agent = A2CAgent(model)
    assert {id(p) for p in agent.params} == {id(p) for p in model.parameters()}  # nothing else to optimize
    batch = make_batch(model)
    _, values, _ = model.forward_sequence(batch.obs, batch.initial_state, batch.episode_starts)
    assert values.shape == (T, N) and not values.any()
    # With values of 0 the advantage is the discounted reward to the rollout's end (no bootstrap):
    # rewards [1, 2, 3], gamma 0.5 -> [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3] = [2.75, 3.5, 3].
    rewards, zeros = torch.tensor([[1.0], [2.0], [3.0]]), torch.zeros(3, 1)
    returns, advantages = compute_returns(rewards, zeros, zeros, torch.zeros(1), gamma=0.5, gae_lambda=1.0)
    assert_close(advantages, torch.tensor([[2.75], [3.5], [3.0]]))
    assert_close(returns, advantages)
    before = params_copy(model)
    stats = agent.update(batch)
    assert "value" not in stats and stats["skipped"] == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_run_without_a_critic_trains_saves_plays_and_keeps_its_choice(tmp_path, one_line_error):
    import glob

    import main
    from checkpoints import load_checkpoint

    argv = [
        "--env-name",
        "CartPole-v1",
        "--num-envs",
        "2",
        "--num-updates",
        "4",
        "--no-critic",
        "--no-progress",
        "--log-dir",
        str(tmp_path),
        "--no-cuda",
        "--threads",
        "1",
    ]
    assert main.main(argv) == 0
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1_*"))
    last = load_checkpoint(f"{run_dir}/a2c_last")
    assert last["model_spec"]["critic"] is False and "critic.linear.weight" not in last["model"]
    assert main.main(["--no-cuda", "--eval", "--load", f"{run_dir}/a2c_last", "--episodes", "1", "--no-cuda"]) == 0
    message = one_line_error(["--resume", f"{run_dir}/a2c_last", "--num-updates", "6", "--critic"])
    assert "was saved with --critic false (another architecture); cannot use true" in message


def test_normalized_advantages_worked_by_hand():
    """``--normalize-advantages``: advantages 1 and 0.5 have mean 0.75 and (sample) std 0.3536, so
    they become +-0.7071 and the policy term is -(log .5 * .7071 - log .25 * .7071) / 2 = -0.2451;
    the value term still uses the returns and is unchanged."""
    from agent import standardized

    normalized = standardized(HAND["advantages"])
    assert_close(normalized, torch.tensor([[1.0], [-1.0]]) / math.sqrt(2), rtol=0, atol=1e-6)
    terms = a2c_loss(**{**HAND, "advantages": normalized}, value_coeff=0.5, entropy_coeff=0.01)
    policy = -(math.log(0.5) - math.log(0.25)) / math.sqrt(2) / 2
    assert terms["policy"].item() == pytest.approx(policy, abs=1e-6)
    assert terms["value"].item() == pytest.approx(HAND_VALUE, abs=1e-6)


def test_the_agent_normalizes_advantages_only_when_asked():
    torch.manual_seed(0)
    model = build_model((3,), 2, recurrent=False)
    batch = Batch(
        obs=torch.randn(2, 1, 3),
        episode_starts=torch.zeros(2, 1),
        actions=HAND["actions"],
        returns=HAND["returns"],
        advantages=HAND["advantages"],
        values=torch.zeros(2, 1),
        log_probs=torch.zeros(2, 1),
        initial_state=(),
    )
    plain, normalized = (A2CAgent(model, normalize_advantages=flag).loss(batch) for flag in (False, True))
    logits = model.forward_sequence(batch.obs, (), batch.episode_starts)[0]
    log_probs = torch.distributions.Categorical(logits=logits).log_prob(batch.actions)
    assert_close(plain["policy"], -(log_probs * HAND["advantages"]).mean())
    assert_close(normalized["policy"], -(log_probs * torch.tensor([[1.0], [-1.0]]) / math.sqrt(2)).mean())
