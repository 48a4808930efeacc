"""storage.compute_returns and RolloutStorage: returns/advantages checked against hand arithmetic.

Convention: dones[t, i] = 1 means env i's episode ended with the action at step t, so nothing
from steps after t (nor last_values) may flow into R_t.
"""

import pytest
import torch
from torch.testing import assert_close

from storage import Batch, RolloutStorage, compute_returns

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def col(*xs):
    """A [T, 1] float tensor from a list of per-step numbers (one env)."""
    return torch.tensor(xs, dtype=torch.float32).unsqueeze(1)


def expect(returns, expected):
    assert_close(returns, torch.as_tensor(expected, dtype=torch.float32), rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- episode ends
def test_episode_end_mid_rollout_cuts_the_return_there():
    """A done at t=1 cuts R_1 to r_1 and R_0 only sees up to t=1; R_2 bootstraps from last_values."""
    rewards, dones = col(1, 2, 3), col(0, 1, 0)
    values, last = col(0.5, 0.5, 0.5), torch.tensor([10.0])
    returns, adv = compute_returns(rewards, values, dones, last, gamma=0.9, gae_lambda=1.0)
    # R2 = 3 + 0.9*10 = 12 ; R1 = 2 (done) ; R0 = 1 + 0.9*2 = 2.8
    expect(returns, [[2.8], [2.0], [12.0]])
    expect(adv, [[2.3], [1.5], [11.5]])


def test_episode_end_at_last_step_ignores_last_values():
    """A done at the final step means last_values (the next episode's first value) is never used."""
    rewards, dones, values = col(1, 1), col(0, 1), col(0, 0)
    r_a, _ = compute_returns(rewards, values, dones, torch.tensor([100.0]), 0.9, 1.0)
    r_b, _ = compute_returns(rewards, values, dones, torch.tensor([-7.0]), 0.9, 1.0)
    # R1 = 1 ; R0 = 1 + 0.9*1 = 1.9
    expect(r_a, [[1.9], [1.0]])
    expect(r_b, [[1.9], [1.0]])


def test_several_episode_ends_in_one_env():
    """dones at t=0, 2, 4: every segment is summed on its own and last_values is ignored."""
    rewards, dones = col(1, 2, 3, 4, 5), col(1, 0, 1, 0, 1)
    returns, _ = compute_returns(rewards, torch.zeros(5, 1), dones, torch.tensor([100.0]), 0.5, 1.0)
    # R4 = 5 ; R3 = 4 + .5*5 = 6.5 ; R2 = 3 ; R1 = 2 + .5*3 = 3.5 ; R0 = 1
    expect(returns, [[1.0], [3.5], [3.0], [6.5], [5.0]])


def test_two_envs_with_different_done_patterns_are_masked_independently():
    """Env 0 ends at t=0, env 1 at t=2: each env's mask is per step and per env (no mixing, and
    not the last step's done used for every step, which was the original bug)."""
    rewards = torch.ones(3, 2)
    dones = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    last = torch.tensor([10.0, 10.0])
    # nonzero values: with lambda=1 they cancel out of R_t, but only if every mask is right
    values = torch.tensor([[0.5, -1.0], [2.0, 3.0], [-0.5, 1.0]])
    returns, _ = compute_returns(rewards, values, dones, last, gamma=0.5, gae_lambda=1.0)
    # env 0: R2 = 1 + .5*10 = 6 ; R1 = 1 + .5*6 = 4 ; R0 = 1 (done)
    # env 1: R2 = 1 (done)      ; R1 = 1 + .5*1 = 1.5 ; R0 = 1 + .5*1.5 = 1.75
    expect(returns, [[1.0, 1.75], [4.0, 1.5], [6.0, 1.0]])


def test_truncation_bootstrap_added_to_reward_gives_r_plus_gamma_v_terminal():
    """Time-limit truncation: the caller adds gamma*V(terminal_obs) to the reward and marks done;
    the return of that step is exactly r + gamma*V_term and nothing from the next episode."""
    gamma, r, v_term = 0.9, 1.0, 4.0
    rewards = col(r + gamma * v_term, 2.0)  # 1 + 0.9*4 = 4.6 at the truncated step
    dones = col(1, 0)
    returns, _ = compute_returns(rewards, col(0.3, 0.7), dones, torch.tensor([5.0]), gamma, 1.0)
    # R0 = 4.6 (= 1 + 0.9*4) ; R1 = 2 + 0.9*5 = 6.5
    expect(returns, [[4.6], [6.5]])


# ----------------------------------------------------------------------------- lambda
def test_lambda_one_is_n_step_discounted_return_independent_of_values():
    """gae_lambda=1: R_t = r_t + gamma*R_{t+1}, R_T = last_values; the values only shift advantages."""
    rewards, dones, last = col(1, 0, 2), col(0, 0, 0), torch.tensor([5.0])
    values = col(0.3, -0.2, 0.7)
    r1, a1 = compute_returns(rewards, values, dones, last, 0.9, 1.0)
    r2, _ = compute_returns(rewards, col(9.0, 9.0, 9.0), dones, last, 0.9, 1.0)
    # R2 = 2 + .9*5 = 6.5 ; R1 = 0 + .9*6.5 = 5.85 ; R0 = 1 + .9*5.85 = 6.265
    expect(r1, [[6.265], [5.85], [6.5]])
    expect(r2, [[6.265], [5.85], [6.5]])
    expect(a1, [[5.965], [6.05], [5.8]])


def test_lambda_zero_is_one_step_td_target():
    """gae_lambda=0: R_t = r_t + gamma*(1-d_t)*V_{t+1}, with V_T = last_values."""
    rewards, values, dones = col(1, 0, 2), col(0.5, 1.0, 2.0), col(0, 1, 0)
    returns, adv = compute_returns(rewards, values, dones, torch.tensor([3.0]), 0.9, 0.0)
    # R0 = 1 + .9*V1 = 1 + .9*1 = 1.9 ; R1 = 0 (done) ; R2 = 2 + .9*3 = 4.7
    expect(returns, [[1.9], [0.0], [4.7]])
    expect(adv, [[1.4], [-1.0], [2.7]])


def test_intermediate_lambda_two_steps_by_hand():
    """gae_lambda=0.5 on 2 steps equals the lambda-return (1-l)*G^(1) + l*G^(2)."""
    returns, adv = compute_returns(col(1, 2), col(0.5, 1.0), col(0, 0), torch.tensor([2.0]), 0.9, 0.5)
    # delta1 = 2 + .9*2 - 1 = 2.8           A1 = 2.8             R1 = 3.8
    # delta0 = 1 + .9*1 - .5 = 1.4          A0 = 1.4 + .45*2.8 = 2.66  R0 = 3.16
    # cross-check: G0^(1) = 1 + .9*1 = 1.9 ; G0^(2) = 1 + .9*2 + .81*2 = 4.42 ; .5*1.9 + .5*4.42 = 3.16
    expect(returns, [[3.16], [3.8]])
    expect(adv, [[2.66], [2.8]])


def test_intermediate_lambda_three_steps_with_episode_end():
    """gae_lambda=0.5 with a done at the last step: the recursion stops there, last_values unused."""
    returns, adv = compute_returns(col(1, 2, 3), col(0.5, 1.0, 1.5), col(0, 0, 1), torch.tensor([10.0]), 0.9, 0.5)
    # delta2 = 3 - 1.5 = 1.5                    A2 = 1.5
    # delta1 = 2 + .9*1.5 - 1 = 2.35            A1 = 2.35 + .45*1.5 = 3.025
    # delta0 = 1 + .9*1 - .5 = 1.4              A0 = 1.4 + .45*3.025 = 2.76125
    expect(adv, [[2.76125], [3.025], [1.5]])
    expect(returns, [[3.26125], [4.025], [3.0]])


# ----------------------------------------------------------------------------- contract
def test_advantages_equal_returns_minus_values():
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g)
    dones = (torch.rand(6, 3, generator=g) < 0.3).float()
    returns, adv = compute_returns(rewards, values, dones, torch.randn(3, generator=g), 0.99, 0.95)
    assert returns.shape == adv.shape == (6, 3)
    assert_close(adv, returns - values, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "rewards, values, dones, last",
    [
        (torch.zeros(4), torch.zeros(4), torch.zeros(4), torch.zeros(())),  # 1-D, not [T, N]
        (torch.zeros(4, 2), torch.zeros(4, 3), torch.zeros(4, 2), torch.zeros(2)),  # values mismatched
        (torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(3, 2), torch.zeros(2)),  # dones mismatched
        (torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(3)),  # last_values not [N]
        (torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(2, 1)),
    ],
    ids=["1d", "values", "dones", "last_len", "last_2d"],
)
def test_shape_errors_raise_value_error(rewards, values, dones, last):
    with pytest.raises(ValueError):
        compute_returns(rewards, values, dones, last, 0.99, 1.0)


def test_results_carry_no_grad_even_if_inputs_require_grad():
    """The targets are constants for the loss: no autograd graph back into values/rewards."""
    rewards = torch.ones(3, 2, requires_grad=True)
    values = torch.full((3, 2), 0.5, requires_grad=True)
    last = torch.ones(2, requires_grad=True)
    returns, adv = compute_returns(rewards, values, torch.zeros(3, 2), last, 0.9, 0.9)
    for x in (returns, adv):
        assert not x.requires_grad and x.grad_fn is None


# ----------------------------------------------------------------------------- RolloutStorage
def test_storage_insert_then_batch_round_trip():
    """Inserted step data come back in Batch, obs stay uint8, and returns match the formula."""
    T, N, obs_shape = 3, 2, (1, 4, 4)
    storage = RolloutStorage(T, N, obs_shape)
    g = torch.Generator().manual_seed(1)
    obs = torch.randint(0, 256, (T, N, *obs_shape), dtype=torch.uint8, generator=g)
    starts = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 1.0]])
    actions = torch.tensor([[0, 3], [1, 2], [2, 1]])
    values = torch.tensor([[0.5, 0.0], [1.0, 0.0], [2.0, 0.0]])
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [2.0, 1.0]])
    dones = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # env 1 ends at t=1 -> starts[2,1]=1
    for t in range(T):
        storage.insert(t, obs[t], starts[t], actions[t], values[t], rewards[t], dones[t])
    storage.finish(obs[-1], torch.tensor([3.0, 10.0]))
    batch = storage.batch(
        *compute_returns(storage.rewards, storage.values, storage.dones, storage.last_values, gamma=0.5, gae_lambda=1.0)
    )
    assert isinstance(batch, Batch)
    assert batch.obs.dtype == torch.uint8
    assert torch.equal(batch.obs, obs)
    assert torch.equal(batch.episode_starts, starts)
    assert torch.equal(batch.actions, actions)
    assert torch.equal(batch.values, values)
    # env 0: R2 = 2 + .5*3 = 3.5 ; R1 = 0 + .5*3.5 = 1.75 ; R0 = 1 + .5*1.75 = 1.875
    # env 1: R2 = 1 + .5*10 = 6  ; R1 = 1 (done)          ; R0 = 1 + .5*1 = 1.5
    expect(batch.returns, [[1.875, 1.5], [1.75, 1.0], [3.5, 6.0]])
    ref_returns, ref_adv = compute_returns(rewards, values, dones, torch.tensor([3.0, 10.0]), 0.5, 1.0)
    assert_close(batch.returns, ref_returns)
    assert_close(batch.advantages, ref_adv)


def _agent(**kwargs):
    from agent import A2CAgent
    from model import build_model

    torch.manual_seed(0)
    return A2CAgent(build_model((1, 8, 8), 2, hidden_size=4), **kwargs)


def test_agent_adds_the_time_limit_bootstrap_to_the_env_reward():
    """A truncated step's return is r + bootstrap (gamma * V(terminal obs)), and nothing flows past the done."""
    storage = RolloutStorage(2, 1, (1, 8, 8))
    zeros_obs = torch.zeros(1, 1, 8, 8, dtype=torch.uint8)
    storage.insert(
        0,
        zeros_obs,
        torch.ones(1),
        torch.zeros(1, dtype=torch.long),
        torch.zeros(1),
        torch.tensor([1.0]),
        torch.tensor([1.0]),
        bootstrap=torch.tensor([0.9 * 4.0]),
    )
    storage.insert(
        1,
        zeros_obs,
        torch.ones(1),
        torch.zeros(1, dtype=torch.long),
        torch.zeros(1),
        torch.tensor([2.0]),
        torch.tensor([0.0]),
    )
    storage.finish(zeros_obs[0], torch.tensor([10.0]))
    batch = _agent(gamma=0.9, gae_lambda=1.0).make_batch(storage)
    # R1 = 2 + .9*10 = 11 ; R0 = 1 + 3.6 = 4.6 (cut by the done, so R1 is not added)
    expect(batch.returns, [[4.6], [11.0]])
    assert float(storage.rewards[0, 0]) == 1.0  # the env's reward itself is kept apart


def test_agent_uses_the_estimator_it_is_configured_with():
    """The estimator is a pure function handed to the agent; the storage only stores."""
    seen = {}

    def constant(rewards, values, dones, last_values):
        seen.update(rewards=rewards.clone(), last_values=last_values.clone())
        return torch.full_like(rewards, 7.0), torch.full_like(rewards, -1.0)

    storage = RolloutStorage(2, 1, (1, 8, 8))
    for t in range(2):
        storage.insert(
            t,
            torch.zeros(1, 1, 8, 8, dtype=torch.uint8),
            torch.zeros(1),
            torch.zeros(1, dtype=torch.long),
            torch.zeros(1),
            torch.tensor([float(t + 1)]),
            torch.zeros(1),
            log_probs=torch.tensor([-0.5]),
        )
    storage.finish(torch.zeros(1, 1, 8, 8, dtype=torch.uint8), torch.tensor([3.0]))
    batch = _agent(estimator=constant).make_batch(storage)
    expect(batch.returns, [[7.0], [7.0]])
    expect(batch.advantages, [[-1.0], [-1.0]])
    expect(seen["rewards"], [[1.0], [2.0]])
    expect(batch.log_probs, [[-0.5], [-0.5]])


def test_storage_keeps_the_observation_dtype():
    """Float observations stay float (a uint8 buffer would truncate them); frames stay one byte a pixel."""
    storage = RolloutStorage(2, 2, (3,), obs_dtype=torch.float32)
    storage.insert(
        0,
        torch.tensor([[0.25, -1.5, 3.0], [1e-3, 0.0, 2.0]]),
        torch.zeros(2),
        torch.zeros(2, dtype=torch.long),
        torch.zeros(2),
        torch.zeros(2),
        torch.zeros(2),
    )
    assert storage.obs.dtype == torch.float32
    expect(storage.obs[0], [[0.25, -1.5, 3.0], [1e-3, 0.0, 2.0]])
    assert RolloutStorage(2, 2, (1, 4, 4)).obs.dtype == torch.uint8


def test_storage_start_detaches_and_clones_initial_state():
    """start(state) stores a copy with no graph: later edits of the source don't leak into it."""
    w = torch.ones(2, 4, requires_grad=True)
    h, c = w * 2.0, w * 3.0  # carry a grad_fn, like a state that came out of forward()
    storage = RolloutStorage(2, 2, (1, 4, 4))
    storage.start((h, c))
    h_stored, c_stored = storage.initial_state
    assert not h_stored.requires_grad and h_stored.grad_fn is None
    assert not c_stored.requires_grad and c_stored.grad_fn is None
    with torch.no_grad():
        h.add_(100.0)
        c.zero_()
    assert torch.equal(h_stored, torch.full((2, 4), 2.0))
    assert torch.equal(c_stored, torch.full((2, 4), 3.0))
