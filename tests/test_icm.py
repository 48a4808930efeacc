"""The Intrinsic Curiosity Module and its plug-in slot in the agent."""

from __future__ import annotations

import copy
import dataclasses
import math
import os

import numpy as np
import pytest
import torch
import torch.nn as nn
from recording_writer import RecordingWriter

from agent import a2c_loss, load_model, make_optimizer
from algorithms import load_agent, make_agent
from config import Config, Curiosity
from icm import ICM, RunningStd
from model import ActorCritic
from runner import Runner
from storage import RolloutStorage, compute_returns

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def hand_icm(eta: float = 0.1, beta: float = 0.2) -> ICM:
    """An ICM whose parts are replaced by linear maps with known weights, on 2 features and 2 actions.

    phi(s) = s (observations are the features themselves); inverse logits = phi(s_t+1);
    forward prediction = phi(s_t) + onehot(a_t).
    """
    icm = ICM((1, 42, 42), 2, eta=eta, beta=beta)
    icm.phi = nn.Identity()
    icm.inverse = nn.Linear(4, 2, bias=False)
    icm.forward_model = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        icm.inverse.weight.copy_(torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]))
        icm.forward_model.weight.copy_(torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]]))
    return icm


# Two transitions (T=1, N=2): phi(s), phi(s'), action.
HAND_OBS = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
HAND_NEXT = torch.tensor([[[0.0, 1.0], [2.0, 1.0]]])
HAND_ACTIONS = torch.tensor([[1, 1]])
# inverse:  logits [0, 1], a=1 -> CE = log(1 + e^-1) ; logits [2, 1], a=1 -> CE = log(1 + e^1)
CE = [math.log(1 + math.exp(-1)), math.log(1 + math.exp(1))]
# forward:  pred [1,0]+[0,1] = [1,1] vs [0,1] -> 1/2 * 1 = 0.5 ; pred [0,1] vs [2,1] -> 1/2 * 4 = 2.0
FORWARD = [0.5, 2.0]


def test_loss_terms_match_hand_computation():
    icm = hand_icm(eta=0.1, beta=0.2)
    terms = {k: v.detach() for k, v in icm.losses(HAND_OBS, HAND_NEXT, HAND_ACTIONS, torch.ones(1, 2)).items()}
    inverse, forward = sum(CE) / 2, sum(FORWARD) / 2
    assert float(terms["inverse"]) == pytest.approx(inverse, rel=1e-6)
    assert float(terms["forward"]) == pytest.approx(forward, rel=1e-6)
    assert float(terms["total"]) == pytest.approx(0.8 * inverse + 0.2 * forward, rel=1e-6)
    assert float(terms["inverse_accuracy"]) == 0.5  # argmax [0,1] = 1 right; argmax [2,1] = 0 wrong


def test_intrinsic_reward_matches_hand_computation_and_masks_boundaries():
    icm = hand_icm(eta=0.1)
    # r_i = eta/2 * ||phi_hat - phi||^2 = 0.1 * [0.5, 2.0]
    rewards = icm.rewards(HAND_OBS, HAND_NEXT, HAND_ACTIONS, torch.ones(1, 2))
    assert rewards[0].tolist() == pytest.approx([0.05, 0.2])
    masked = icm.rewards(HAND_OBS, HAND_NEXT, HAND_ACTIONS, torch.tensor([[1.0, 0.0]]))
    assert masked[0].tolist() == pytest.approx([0.05, 0.0])
    # Losses skip invalid transitions too: only the first one counts.
    terms = {
        k: v.detach() for k, v in icm.losses(HAND_OBS, HAND_NEXT, HAND_ACTIONS, torch.tensor([[1.0, 0.0]])).items()
    }
    assert float(terms["inverse"]) == pytest.approx(CE[0], rel=1e-6)
    assert float(terms["forward"]) == pytest.approx(FORWARD[0], rel=1e-6)


def test_real_icm_shapes_non_negative_no_gradient():
    torch.manual_seed(0)
    icm = ICM((4, 42, 42), 3, eta=0.5)
    obs = torch.randint(0, 256, (3, 2, 4, 42, 42), dtype=torch.uint8)
    next_obs = torch.randint(0, 256, (3, 2, 4, 42, 42), dtype=torch.uint8)
    actions = torch.randint(0, 3, (3, 2))
    valid = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    rewards = icm.rewards(obs, next_obs, actions, valid)
    assert rewards.shape == (3, 2) and rewards.grad_fn is None and not rewards.requires_grad
    assert (rewards >= 0).all() and rewards[1, 0] == 0 and rewards[2, 1] == 0
    assert (rewards[valid > 0] > 0).all()
    terms = icm.losses(obs, next_obs, actions, valid)
    assert all(v.dim() == 0 for v in terms.values())
    assert sum(p.numel() for p in icm.phi.parameters()) > 0 and icm.phi.out_features == 288


def test_both_losses_train_the_features():
    """As in the paper: phi gets gradient from the inverse loss and from the forward loss."""
    torch.manual_seed(0)
    icm = ICM((1, 42, 42), 3)
    obs = torch.randint(0, 256, (2, 2, 1, 42, 42), dtype=torch.uint8)
    next_obs = torch.randint(0, 256, (2, 2, 1, 42, 42), dtype=torch.uint8)
    actions = torch.randint(0, 3, (2, 2))
    icm.losses(obs, next_obs, actions, torch.ones(2, 2))["forward"].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in icm.phi.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in icm.forward_model.parameters())
    assert all(p.grad is None for p in icm.inverse.parameters())
    icm.zero_grad()
    icm.losses(obs, next_obs, actions, torch.ones(2, 2))["inverse"].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in icm.phi.parameters())
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in icm.forward_model.parameters())


def test_without_forward_grad_only_the_inverse_loss_trains_the_features():
    """--no-icm-forward-grad: the forward loss trains the forward model and leaves phi alone."""
    torch.manual_seed(0)
    icm = ICM((1, 42, 42), 3, forward_trains_phi=False)
    obs = torch.randint(0, 256, (2, 2, 1, 42, 42), dtype=torch.uint8)
    next_obs = torch.randint(0, 256, (2, 2, 1, 42, 42), dtype=torch.uint8)
    actions = torch.randint(0, 3, (2, 2))
    terms = icm.losses(obs, next_obs, actions, torch.ones(2, 2))
    terms["forward"].backward(retain_graph=True)
    assert all(p.grad is None for p in icm.phi.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in icm.forward_model.parameters())
    terms["inverse"].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in icm.phi.parameters())
    # The loss values themselves do not depend on where the gradient goes.
    torch.manual_seed(0)
    same = ICM((1, 42, 42), 3, forward_trains_phi=True).losses(obs, next_obs, actions, torch.ones(2, 2))
    assert torch.equal(same["forward"], terms["forward"]) and torch.equal(same["inverse"], terms["inverse"])


def test_forward_grad_flag_reaches_the_module():
    from algorithms import make_agent

    for on in (True, False):
        agent = make_agent(
            Config(curiosity=Curiosity(enabled=True, forward_trains_encoder=on), cuda=False), (4, 42, 42), 3
        )
        assert agent.intrinsic.forward_trains_phi is on


# ------------------------------------------------------------------------------ learning on a toy world
def corridor_frame(position: int, cells: int = 8) -> torch.Tensor:
    """A 1x42x42 frame with a bright 5-pixel block at ``position`` along a corridor."""
    frame = torch.zeros(1, 42, 42, dtype=torch.uint8)
    frame[0, 18:24, 5 * position : 5 * position + 5] = 255
    return frame


def corridor_transitions(positions: list[int], cells: int = 8):
    """Deterministic moves: action 0 steps left, action 1 steps right (walls at both ends)."""
    obs, next_obs, actions = [], [], []
    for p in positions:
        for a in (0, 1):
            q = max(0, p - 1) if a == 0 else min(cells - 1, p + 1)
            obs.append(corridor_frame(p)), next_obs.append(corridor_frame(q)), actions.append(a)
    return torch.stack(obs)[None], torch.stack(next_obs)[None], torch.tensor(actions)[None]


def test_inverse_model_learns_and_curiosity_fades_for_familiar_transitions():
    torch.manual_seed(0)
    icm = ICM((1, 42, 42), 2, eta=1.0)
    familiar = corridor_transitions([1, 2, 3])  # seen over and over
    novel = corridor_transitions([5, 6])  # never seen in training
    valid = torch.ones(familiar[2].shape)
    before = icm.losses(*familiar, valid)["inverse_accuracy"]
    optimizer = torch.optim.Adam(icm.parameters(), lr=1e-3)
    for _ in range(150):
        terms = icm.losses(*familiar, valid)
        optimizer.zero_grad()
        terms["total"].backward()
        optimizer.step()
    after = icm.losses(*familiar, valid)
    assert float(after["inverse_accuracy"]) == 1.0 and float(after["inverse_accuracy"]) > float(before)
    r_familiar = icm.rewards(*familiar, valid).mean()
    r_novel = icm.rewards(*novel, torch.ones(novel[2].shape)).mean()
    assert r_familiar < 0.5 * r_novel


# ------------------------------------------------------------------------------ the plug-in slot
def filled_storage(T=3, N=2, obs_shape=(1, 42, 42), seed=0) -> RolloutStorage:
    g = torch.Generator().manual_seed(seed)
    storage = RolloutStorage(T, N, obs_shape)
    dones = torch.zeros(T, N)
    dones[1, 0] = 1.0
    for t in range(T):
        storage.insert(
            t,
            torch.randint(0, 256, (N, *obs_shape), dtype=torch.uint8, generator=g),
            dones[t - 1] if t else torch.ones(N),
            torch.randint(0, 2, (N,), generator=g),
            torch.randn(N, generator=g),
            torch.randn(N, generator=g),
            dones[t],
        )
    storage.start((torch.zeros(N, 16), torch.zeros(N, 16)))
    storage.finish(torch.randint(0, 256, (N, *obs_shape), dtype=torch.uint8, generator=g), torch.randn(N, generator=g))
    return storage


def small_config(**kw) -> Config:
    return Config(**{**dict(num_envs=2, rollout_size=3, hidden_size=16, tensorboard=False, progress=False), **kw})


def test_icm_rewards_join_returns_and_vanish_at_episode_ends():
    torch.manual_seed(0)
    agent = make_agent(small_config(curiosity=Curiosity(enabled=True, eta=1.0, extrinsic_coeff=0.0)), (1, 42, 42), 2)
    storage = filled_storage()
    batch = agent.make_batch(storage)
    intrinsic = batch.reward_parts["intrinsic"]
    assert intrinsic[1, 0] == 0 and (intrinsic >= 0).all() and intrinsic.sum() > 0
    # extrinsic_coeff 0: the returns are those of the intrinsic rewards alone.
    expected, _ = compute_returns(
        intrinsic + storage.bootstrap, storage.values, storage.dones, storage.last_values, agent.gamma, agent.gae_lambda
    )
    assert torch.equal(batch.returns, expected)
    assert torch.equal(batch.next_obs[0], storage.obs[1]) and torch.equal(batch.next_obs[-1], storage.last_obs)
    terms = {k: v.detach() for k, v in agent.loss(batch).items()}
    assert float(terms["total"]) == pytest.approx(
        0.1 * float(terms["a2c_total"]) + 0.8 * float(terms["icm/inverse"]) + 0.2 * float(terms["icm/forward"]),
        rel=1e-5,
    )


def test_no_icm_update_is_bit_for_bit_plain_a2c():
    """With curiosity off the agent's update equals a by-hand A2C step: same loss, clip and optimizer step."""
    torch.manual_seed(0)
    config = small_config()
    agent = make_agent(config, (1, 42, 42), 2)
    assert agent.intrinsic is None and len(agent.params) == len(list(agent.model.parameters()))
    reference = copy.deepcopy(agent.model)
    optimizer = make_optimizer(config.optimizer, reference.parameters(), config.lr)
    storage = filled_storage()
    batch = agent.make_batch(storage)
    assert batch.reward_parts == {} and batch.next_obs is None
    agent.update(batch)
    # by hand
    returns, advantages = compute_returns(
        storage.rewards, storage.values, storage.dones, storage.last_values, config.gamma, config.gae_lambda
    )
    logits, values, _ = reference.forward_sequence(storage.obs, storage.initial_state, storage.episode_starts)
    loss = a2c_loss(logits, values, storage.actions, returns, advantages, config.value_coeff, config.entropy_coeff)
    loss["total"].backward()
    nn.utils.clip_grad_norm_(reference.parameters(), config.max_grad_norm)
    optimizer.step()
    for mine, theirs in zip(agent.model.parameters(), reference.parameters()):
        assert torch.equal(mine, theirs)


def test_switching_icm_on_leaves_the_policy_initialization_unchanged():
    torch.manual_seed(3)
    off = make_agent(small_config(), (1, 42, 42), 2)
    torch.manual_seed(3)
    on = make_agent(small_config(curiosity=Curiosity(enabled=True)), (1, 42, 42), 2)
    assert all(torch.equal(a, b) for a, b in zip(off.model.state_dict().values(), on.model.state_dict().values()))
    n_model = len(list(on.model.parameters()))
    assert len(on.params) == n_model + len(list(on.intrinsic.parameters()))
    assert len(on.optimizer.param_groups[0]["params"]) == len(on.params)


def test_running_std_matches_numpy():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(3.0, 2.0, size=n) for n in (5, 17, 1, 40)]
    running = RunningStd()
    for chunk in chunks:
        running.update(torch.tensor(chunk))
    assert running.std == pytest.approx(np.concatenate(chunks).std(), rel=1e-9)
    restored = RunningStd()
    restored.load_state_dict(running.state_dict())
    assert restored.std == running.std


def test_normalized_intrinsic_rewards_are_divided_by_running_std():
    torch.manual_seed(0)
    agent = make_agent(small_config(curiosity=Curiosity(enabled=True, normalize=True)), (1, 42, 42), 2)
    storage = filled_storage()
    raw = agent.intrinsic.rewards(storage.obs, storage.next_obs(), storage.actions, 1 - storage.dones)
    batch = agent.make_batch(storage)
    std = float(raw[(1 - storage.dones) > 0].std(unbiased=False))
    assert torch.allclose(batch.reward_parts["intrinsic"], raw / std, rtol=1e-4)


def test_checkpoints_carry_icm_and_optimizer_and_play_without_it(tmp_path):
    """a2c_last holds the ICM and its optimizer state and resumes into them; the best-* files play without it."""
    from memory_env import make_memory_vec_env

    torch.manual_seed(0)
    config = small_config(curiosity=Curiosity(enabled=True), num_envs=2, rollout_size=4, num_updates=3, n_stack=1)
    envs = make_memory_vec_env(config.num_envs, seed=0, length=4, n_stack=1)
    agent = make_agent(config, envs.observation_space.shape, envs.action_space.n)
    runner = Runner(agent, envs, config, str(tmp_path))
    runner.train()
    envs.close()
    assert {"icm/inverse", "icm/forward", "icm/inverse_accuracy", "a2c_total"} <= set(runner.history[0])
    last = torch.load(os.path.join(tmp_path, "a2c_last"), weights_only=True)
    assert set(last["intrinsic"]) == set(agent.intrinsic.state_dict())
    assert len(last["optimizer"]["state"]) == len(agent.params)  # every ICM weight has its RMSprop state
    resumed = load_agent(os.path.join(tmp_path, "a2c_last"))
    assert resumed.intrinsic is not None
    for a, b in zip(resumed.intrinsic.state_dict().values(), agent.intrinsic.state_dict().values()):
        assert torch.equal(a, b)
    saved_state, resumed_state = agent.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert resumed_state.keys() == saved_state.keys()  # the ICM's RMSprop state too, loaded back
    for index, state in saved_state.items():
        assert all(torch.equal(resumed_state[index][k], v) for k, v in state.items())
    best = torch.load(os.path.join(tmp_path, "a2c_best_loss"), weights_only=True)
    assert "intrinsic" not in best
    model = load_model(os.path.join(tmp_path, "a2c_best_loss"))
    assert isinstance(model, ActorCritic)


def test_intrinsic_episode_returns_sum_the_episode_rewards(tmp_path):
    """Episodes of 4 steps and rollouts of 4 steps line up: each logged intrinsic return is one rollout's column sum."""
    from memory_env import make_memory_vec_env

    torch.manual_seed(0)
    config = small_config(
        curiosity=Curiosity(enabled=True), num_envs=2, rollout_size=4, num_updates=3, n_stack=1, log_interval=1
    )
    envs = make_memory_vec_env(config.num_envs, seed=0, length=4, n_stack=1)
    agent = make_agent(config, envs.observation_space.shape, envs.action_space.n)
    batches = []
    make_batch = agent.make_batch
    agent.make_batch = lambda storage: batches.append(make_batch(storage)) or batches[-1]
    writer = RecordingWriter()
    Runner(agent, envs, config, str(tmp_path), writer=writer).train()
    envs.close()
    logged = [(v, step) for tag, v, step in writer.scalars if tag == "episode/return_intrinsic"]
    # Env i's episode ends at the rollout's last step (t = 3): the (2 * 3 + i + 1)-th env step of update u's 8.
    expected = [
        (float(b.reward_parts["intrinsic"][:, i].sum()), 8 * u + 2 * 3 + i + 1)
        for u, b in enumerate(batches)
        for i in range(2)
    ]
    assert len(logged) == 6
    assert [step for _, step in logged] == [step for _, step in expected]
    assert [v for v, _ in logged] == pytest.approx([v for v, _ in expected], rel=1e-5)
    # The last step of each episode ends it: its intrinsic reward is 0 (the next frame is a reset).
    assert all((b.reward_parts["intrinsic"][-1] == 0).all() for b in batches)


@pytest.mark.parametrize("forward_trains_phi", [True, False])
def test_one_pass_gives_the_rewards_and_losses_of_the_separate_calls(forward_trains_phi):
    """``rewards_and_losses`` runs phi once over T+1 frames: the same numbers and gradients as
    ``rewards`` and ``losses`` on the transitions ``frames[t] -> frames[t+1]``."""
    torch.manual_seed(0)
    icm = ICM((4, 42, 42), 3, eta=0.5, forward_trains_phi=forward_trains_phi)
    frames = torch.randint(0, 256, (4, 2, 4, 42, 42), dtype=torch.uint8)
    actions = torch.randint(0, 3, (3, 2))
    valid = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0]])
    rewards, terms = icm.rewards_and_losses(frames, actions, valid)
    assert rewards.shape == (3, 2) and not rewards.requires_grad and rewards[1, 0] == 0
    torch.testing.assert_close(rewards, icm.rewards(frames[:-1], frames[1:], actions, valid), rtol=1e-5, atol=1e-7)
    reference = icm.losses(frames[:-1], frames[1:], actions, valid)
    grads = []
    for total in (terms["total"], reference["total"]):
        icm.zero_grad()
        total.backward()
        grads.append([p.grad.clone() for p in icm.parameters()])
    for name in ("total", "inverse", "forward", "inverse_accuracy"):
        torch.testing.assert_close(terms[name], reference[name], rtol=1e-5, atol=1e-7, msg=name)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_agent_trains_through_the_losses_of_the_rollout_pass():
    torch.manual_seed(0)
    agent = make_agent(small_config(curiosity=Curiosity(enabled=True)), (1, 42, 42), 2)
    batch = agent.make_batch(filled_storage())
    assert batch.intrinsic_losses is not None and batch.intrinsic_losses["total"].grad_fn is not None
    kept = agent.loss(batch)
    again = agent.loss(dataclasses.replace(batch, intrinsic_losses=None))
    for name in ("total", "icm/inverse", "icm/forward"):
        torch.testing.assert_close(kept[name], again[name], rtol=1e-5, atol=1e-7, msg=name)
