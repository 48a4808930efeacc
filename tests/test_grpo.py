"""GRPO (``--algo grpo``): group advantages worked by hand, the all-equal group, masking of finished
members, the reduction to REINFORCE with a group baseline, the clipped ratio and the k3 KL, groups
that start alike, and runs through ``main.py`` (checkpoints without a critic, resume, eval, bad input)."""

from __future__ import annotations

import glob
import math
import os

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import checkpoints
import main as cli
import seeds
from algorithms import make_agent
from callbacks import PhysicsHistograms
from config import Config, with_settings
from envs import action_size, make_vec_env
from grpo import GroupBatch, GroupCollector, GRPOAgent, episode_returns, group_advantages, grpo_loss, k3_kl
from model import build_model
from runner import Runner
from seeds import group_seeds

pytestmark = pytest.mark.usefixtures("torch_single_thread")


# ------------------------------------------------------------------------------------------------ formulas
def test_group_advantages_with_and_without_std_worked_by_hand():
    # Group 0: returns 1, 2, 6: mean 3, deviations -2, -1, 3, population std sqrt(14/3) = 2.1602.
    # Group 1: returns 4, 4, 4: all equal, no signal: advantages 0 and the group flagged, no 0/0.
    returns = torch.tensor([1.0, 2.0, 6.0, 4.0, 4.0, 4.0])
    scaled, informative = group_advantages(returns, 3)
    std = math.sqrt(14 / 3)
    assert_close(scaled, torch.tensor([-2 / std, -1 / std, 3 / std, 0.0, 0.0, 0.0]))
    assert informative.tolist() == [True, False]
    centred, informative = group_advantages(returns, 3, scale_by_std=False)  # Dr. GRPO
    assert_close(centred, torch.tensor([-2.0, -1.0, 3.0, 0.0, 0.0, 0.0]))
    assert informative.tolist() == [True, False]
    assert torch.isfinite(scaled).all() and torch.isfinite(centred).all()
    with pytest.raises(ValueError):
        group_advantages(torch.ones(5), 2)  # 5 members are no whole number of groups of 2


def test_episode_returns_discount_each_members_own_steps():
    # gamma 0.5. Member 0 plays 3 steps of reward 1: 1 + .5 + .25 = 1.75. Member 1 plays 2 steps
    # (rewards 1, 2: 1 + .5 * 2 = 2); its third step is masked, so its reward of 7 counts nothing.
    rewards = torch.tensor([[1.0, 1.0], [1.0, 2.0], [1.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    assert_close(episode_returns(rewards, mask, 0.5), torch.tensor([1.75, 2.0]))


def test_k3_kl_worked_by_hand():
    # pi(a) = 0.5, pi_ref(a) = 0.25: delta = log(0.5); exp(delta) - delta - 1 = 0.5 + 0.6931 - 1 = 0.1931.
    value = k3_kl(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
    assert_close(value, torch.tensor([0.5 + math.log(2) - 1]))
    assert float(k3_kl(torch.tensor([-1.3]), torch.tensor([-1.3]))) == 0.0  # equal policies: no penalty


def test_the_clipped_ratio_stops_the_gradient_and_is_counted():
    """With A > 0, a step whose ratio already passed 1 + eps gets no gradient (the clipped term is the
    smaller), and a step inside the band gets A * d(ratio); clip_fraction counts the first."""
    logits = torch.zeros(1, 2, 2, requires_grad=True)  # pi(a) = 0.5 for both steps
    dist = torch.distributions.Categorical(logits=logits)
    actions = torch.tensor([[0, 0]])
    old = torch.log(torch.tensor([[0.5 / 1.5, 0.5]]))  # ratios 1.5 and 1.0
    advantages = torch.tensor([[1.0, 1.0]])
    terms = grpo_loss(dist, actions, old, advantages, torch.ones(1, 2), clip_eps=0.2, entropy_coeff=0.0)
    terms["policy"].backward()
    assert logits.grad[0, 0].abs().sum() == 0  # clipped: no gradient
    # Step 1: d(-ratio * A / 2) / d logit_0 = -(1/2) * ratio * (1 - pi) = -0.25.
    assert_close(logits.grad[0, 1], torch.tensor([-0.25, 0.25]))
    assert float(terms["grpo/clip_fraction"]) == 0.5
    # The k3 estimate of KL(pi_old || pi) over the steps: (1.5 - 1 - log 1.5 + 0) / 2.
    assert_close(terms["grpo/approx_kl"], torch.tensor((0.5 - math.log(1.5)) / 2))


# ------------------------------------------------------------------------------------------------ the agent
def tiny_agent(group_size: int = 2, **kwargs) -> GRPOAgent:
    torch.manual_seed(0)
    model = build_model((3,), 2, recurrent=False, critic=False)
    settings = dict(lr=1e-2, optimizer="adam", entropy_coeff=0.0, max_grad_norm=1e9, gamma=1.0)
    settings.update(kwargs)
    return GRPOAgent(model, group_size=group_size, **settings)


def tiny_batch(agent: GRPOAgent, rewards: torch.Tensor, mask: torch.Tensor, seed: int = 1) -> GroupBatch:
    """A round of T steps for N members with random observations and actions from the agent's policy."""
    T, N = rewards.shape
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, N, 3, generator=generator)
    starts = torch.zeros(T, N)
    starts[0] = 1.0
    with torch.no_grad():
        dist = agent.model.distribution(agent.model.forward_sequence(obs, (), starts)[0])
        actions = dist.sample()
        log_probs = dist.log_prob(actions)
    return agent.make_group_batch(obs, starts, actions, log_probs, rewards, mask)


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("clip_eps", [0.2, math.inf])
def test_one_epoch_without_kl_is_reinforce_with_the_group_mean_as_baseline(clip_eps):
    """The first pass over a round has ratio 1: the clipped surrogate's gradient is then the
    policy gradient of REINFORCE with the group's mean return as baseline, averaged over the valid
    steps, as the notebook's estimator computes it (undiscounted returns, no std division)."""
    agent = tiny_agent(group_size=2, clip_eps=clip_eps, scale_by_std=False)
    # 2 groups of 2 members, 4 steps; member 1 ends after 2 steps, member 2 after 3.
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 0, 1]], dtype=torch.float32)
    rewards = torch.tensor([[1, 2, 0, 1], [1, 1, 3, 1], [1, 5, 1, 1], [1, 5, 5, 1]], dtype=torch.float32)
    batch = tiny_batch(agent, rewards, mask)
    # Member returns 4, 3 | 4, 4 -> group 0: advantages +0.5, -0.5; group 1: equal, skipped.
    assert_close(batch.returns, torch.tensor([4.0, 3.0, 4.0, 4.0]))
    agent.model.zero_grad()
    agent.loss(batch)["total"].backward()
    ours = grads(agent.model)

    agent.model.zero_grad()
    logits, _, _ = agent.model.forward_sequence(batch.obs, (), batch.episode_starts)
    log_probs = agent.model.distribution(logits).log_prob(batch.actions)
    baseline = torch.tensor([[3.5, 3.5, 4.0, 4.0]])  # each member's group mean
    valid = mask * torch.tensor([[1.0, 1.0, 0.0, 0.0]])  # the skipped group's steps do not count
    reinforce = -((torch.tensor([[4.0, 3.0, 4.0, 4.0]]) - baseline) * log_probs * valid).sum() / valid.sum()
    reinforce.backward()
    for mine, reference in zip(ours, grads(agent.model)):
        assert_close(mine, reference)


def test_masked_steps_of_finished_members_never_reach_the_loss():
    """What a member's env did after its episode ended (observations, actions, rewards) changes
    neither its return nor the loss nor its gradient."""
    agent = tiny_agent(group_size=2)
    mask = torch.tensor([[1, 1], [1, 1], [0, 1], [0, 1]], dtype=torch.float32)
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    batch = tiny_batch(agent, rewards, mask)
    agent.model.zero_grad()
    loss = agent.loss(batch)["total"]
    loss.backward()
    before = grads(agent.model)

    junk = GroupBatch(**{**batch.__dict__})
    junk.obs = batch.obs.clone()
    junk.obs[2:, 0] = 1e3
    junk.actions = batch.actions.clone()
    junk.actions[2:, 0] = 1 - junk.actions[2:, 0]
    junk.log_probs = batch.log_probs.clone()
    junk.log_probs[2:, 0] = -50.0
    rewards_junk = rewards.clone()
    rewards_junk[2:, 0] = 100.0
    assert_close(episode_returns(rewards_junk, mask, agent.gamma), batch.returns)
    agent.model.zero_grad()
    assert_close(agent.loss(junk)["total"], loss)
    loss_junk = agent.loss(junk)["total"]
    loss_junk.backward()
    for a, b in zip(before, grads(agent.model)):
        assert_close(a, b)


def test_a_round_of_equal_groups_changes_nothing_and_is_counted():
    agent = tiny_agent(group_size=2)
    weights = [p.detach().clone() for p in agent.model.parameters()]
    batch = tiny_batch(agent, torch.ones(3, 4), torch.ones(3, 4))  # every member returns 3
    stats = agent.update(batch, 0)
    assert stats["grpo/skipped_groups"] == 1.0 and stats["skipped"] == 0.0
    assert "policy" not in stats  # no step was taken
    for before, after in zip(weights, agent.model.parameters()):
        assert torch.equal(before, after)


def test_learning_raises_the_better_members_actions_and_the_reference_follows():
    """Several epochs make the actions of the member with the higher return more likely; with a KL
    penalty the reference is a frozen copy, refreshed after ref_interval updates."""
    agent = tiny_agent(group_size=2, update_epochs=4, minibatches=1, kl_coeff=0.1, ref_interval=2)
    batch = tiny_batch(agent, torch.tensor([[1.0, 0.0]] * 3), torch.ones(3, 2))  # member 0 wins

    def log_prob_of(member: int) -> float:
        with torch.no_grad():
            dist = agent.sequence_policy(batch, torch.tensor([member]))
            return float(dist.log_prob(batch.actions[:, [member]]).sum())

    winner, loser = log_prob_of(0), log_prob_of(1)
    reference = [p.clone() for p in agent.reference.parameters()]
    stats = agent.update(batch, 0)
    assert log_prob_of(0) > winner and log_prob_of(1) < loser
    assert stats["kl"] >= 0 and stats["grpo/skipped_groups"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(reference, agent.reference.parameters()))  # 1 update: frozen
    agent.update(batch, 1)  # the second update refreshes it
    assert all(torch.equal(a, b) for a, b in zip(agent.model.parameters(), agent.reference.parameters()))


# ------------------------------------------------------------------------------------------------ the runner
def group_runner(tmp_path, **settings) -> Runner:
    config = with_settings(
        Config(
            env_name="CartPole-v1",
            algo="grpo",
            critic=False,
            recurrent=False,
            num_envs=6,
            seed=5,
            tensorboard=False,
            progress=False,
            **settings,
        ),
        {"group.size": 3},
    )
    seeds.seed_everything(config.seed)
    envs = make_vec_env(
        config.env_name,
        config.num_envs,
        seed=config.seed,
        randomize=config.randomize_every if config.randomize_domain == "uniform" else None,
    )
    num_actions, continuous = action_size(envs.action_space)
    agent = make_agent(config, envs.observation_space.shape, num_actions, continuous=continuous)
    # CartPole's time limit: rounds of 500 steps at most
    return Runner(agent, envs, config, str(tmp_path), collector=GroupCollector)


def test_groups_start_alike_rounds_and_groups_apart_and_members_are_masked_after_their_end(tmp_path):
    runner = group_runner(tmp_path, randomize_domain="uniform")
    try:
        first = runner.collect()
        obs = first.obs[0]
        for group in (obs[:3], obs[3:]):
            assert all(torch.equal(group[0], member) for member in group)  # one seed, one start
        assert not torch.equal(obs[0], obs[3])  # another group, another start
        drawn = next(c for c in runner.callbacks if isinstance(c, PhysicsHistograms)).drawn
        # The envs' first reset and the round's: not the episodes the members' envs began after theirs.
        assert len(drawn) == 2 * 6
        physics = drawn[-6:]  # randomized physics are drawn from the reset seed too
        assert physics[0] == physics[1] == physics[2] and physics[3] == physics[4] == physics[5]
        assert physics[0] != physics[3]
        # Each member's mask covers exactly its episode: 1 up to its end, 0 after, never again 1.
        lengths = first.mask.sum(0)
        for i, length in enumerate(lengths.long().tolist()):
            assert first.mask[:length, i].all() and not first.mask[length:, i].any()
        # CartPole gives 1 a step: a member's return is sum_k 0.99^k over its own steps.
        assert_close(first.returns, (1 - 0.99**lengths) / (1 - 0.99))
        runner.state.update += 1
        second = runner.collect()
        assert not torch.equal(second.obs[0, 0], obs[0])  # a new round, new seeds
        assert group_seeds(5, 1, 2, 3) == [group_seeds(5, 0, 2, 3)[-1] + 1] * 3 + [group_seeds(5, 0, 2, 3)[-1] + 2] * 3
    finally:
        runner.envs.close()


# ------------------------------------------------------------------------------------------------ main.py
GRPO = [
    "--env-name",
    "CartPole-v1",
    "--algo",
    "grpo",
    "--num-envs",
    "4",
    "--group-size",
    "2",
    "--no-progress",
    "--no-cuda",
    "--threads",
    "1",
    "--horizon",
    "60",
    "--log-interval",
    "1",
]


def test_a_grpo_run_through_main_checkpoints_resumes_exactly_and_plays(tmp_path):
    """A run has no critic anywhere (network, checkpoint); a run stopped and resumed ends with the
    same weights as one run straight through (every round's seeds come from the update count, and
    the random streams from the checkpoint); its a2c_last plays --eval."""
    straight, split = tmp_path / "straight", tmp_path / "split"
    flags = [*GRPO, "--kl-coeff", "0.05", "--ref-interval", "2"]
    assert cli.main([*flags, "--num-updates", "6", "--log-dir", str(straight)]) == 0
    assert cli.main([*flags, "--num-updates", "3", "--log-dir", str(split)]) == 0
    (run_dir,) = glob.glob(str(split / "CartPole-v1_*"))
    last = os.path.join(run_dir, "a2c_last")
    assert cli.main(["--no-cuda", "--resume", last, "--num-updates", "6"]) == 0
    (straight_dir,) = glob.glob(str(straight / "CartPole-v1_*"))
    a, b = (checkpoints.load_checkpoint(os.path.join(d, "a2c_last")) for d in (straight_dir, run_dir))
    assert a["update"] == b["update"] == 6 and a["step"] == b["step"]
    assert 6 * 4 <= a["step"] <= 6 * 4 * 60  # the steps members played, between 1 and the horizon each
    assert a["model_spec"]["critic"] is False and not any(k.startswith("critic") for k in a["model"])
    assert "reference" in a and a["config"]["algo"] == "grpo" and a["config"]["group"]["size"] == 2
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for name in ("a2c_best_loss", "a2c_best_reward"):
        assert os.path.exists(os.path.join(straight_dir, name))
    assert cli.main(["--no-cuda", "--eval", "--load", last, "--episodes", "2", "--max-episode-frames", "30"]) == 0


def test_grpo_logs_its_statistics_on_the_env_step_axis(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert cli.main([*GRPO, "--num-updates", "3", "--log-dir", str(tmp_path)]) == 0
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1_*"))
    acc = EventAccumulator(run_dir)
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in (
        "grpo/skipped_groups",
        "grpo/clip_fraction",
        "grpo/approx_kl",
        "grpo/group_return_mean",
        "grpo/group_return_std",
        "loss/entropy",
        "loss/policy",
        "episode/return",
        "train/grad_norm",
    ):
        assert tag in tags, tag
    assert "loss/value" not in tags and "train/explained_variance" not in tags
    last = checkpoints.load_checkpoint(os.path.join(run_dir, "a2c_last"))
    assert acc.Scalars("grpo/skipped_groups")[-1].step == last["step"]  # env steps, not updates
    assert cli.main(["--plot", run_dir, "--out", str(tmp_path / "grpo.png")]) == 0  # --plot draws a GRPO run
    assert (tmp_path / "grpo.png").stat().st_size > 0
    # Members ending at the same step of a round are logged at steps of their own: no episode is lost.
    ends = [event.step for event in acc.Scalars("episode/return")]
    assert len(set(ends)) == len(ends) == last["episode_count"] and max(ends) <= last["step"]


def test_grpo_learns_cartpole(tmp_path):
    """A broken sign or baseline would stay near random play (about 22): the defaults (4 groups of
    8) lift CartPole's mean return far above it within 30,000 env steps."""
    argv = [
        "--env-name",
        "CartPole-v1",
        "--algo",
        "grpo",
        "--max-env-steps",
        "30000",
        "--no-progress",
        "--no-cuda",
        "--threads",
        "1",
        "--log-dir",
        str(tmp_path),
    ]
    assert cli.main(argv) == 0
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1_*"))
    returns = checkpoints.load_checkpoint(os.path.join(run_dir, "a2c_last"))["episode_returns"]
    assert np.mean(returns[-32:]) > 80, returns[-32:]


@pytest.mark.parametrize(
    "argv, message",
    [
        ([*GRPO[:6], "--group-size", "1"], "--group-size must be at least 2"),
        ([*GRPO[:6], "--group-size", "3"], "--group-size 3 must divide --num-envs 4"),
        ([*GRPO, "--icm"], "--icm is for --algo a2c"),
        ([*GRPO, "--critic"], "--critic is for --algo a2c"),
        ([*GRPO, "--normalize-reward"], "--normalize-reward is for --algo a2c"),
        (["--env-name", "PongNoFrameskip-v4", "--algo", "grpo"], "works on vector-observation envs"),
        (["--env-name", "CartPole-v1", "--group-size", "4"], "--group-size is for --algo grpo"),
        (["--env-name", "CartPole-v1", "--no-group-std"], "--group-scale-by-std is for --algo grpo"),
    ],
)
def test_bad_grpo_input_is_one_line(one_line_error, tmp_path, argv, message):
    assert message in one_line_error([*argv, "--log-dir", str(tmp_path)])
    assert not os.listdir(tmp_path)  # refused before a run directory was made


@pytest.mark.parametrize(
    "env_name, flags",
    [
        ("Pendulum-v1", ["--vec-env", "async"]),  # Gaussian policy
        ("CartPole-v1", ["--recurrent", "--randomize-domain"]),
    ],
)
def test_grpo_trains_continuous_and_recurrent_policies(tmp_path, env_name, flags):
    """Continuous actions (a Gaussian's log-probs of whole episodes), a recurrent policy (run over
    each minibatch's episodes from their zero state) and randomized physics all train and save."""
    argv = [
        "--env-name",
        env_name,
        "--algo",
        "grpo",
        "--num-envs",
        "4",
        "--group-size",
        "2",
        "--horizon",
        "40",
        "--num-updates",
        "2",
        "--no-progress",
        "--no-cuda",
        "--threads",
        "1",
        "--log-dir",
        str(tmp_path),
        *flags,
    ]
    assert cli.main(argv) == 0
    (run_dir,) = glob.glob(str(tmp_path / f"{env_name}_*"))
    last = checkpoints.load_checkpoint(os.path.join(run_dir, "a2c_last"))
    assert last["update"] == 2 and 2 * 4 <= last["step"] <= 2 * 4 * 40
    if env_name == "Pendulum-v1":  # its episodes never end before 200 steps: every member plays the horizon
        assert last["step"] == 2 * 4 * 40
    assert last["model_spec"]["continuous"] is (env_name == "Pendulum-v1")
    assert last["model_spec"]["recurrent"] is ("--recurrent" in flags)


def test_sigterm_stops_a_grpo_run_after_its_round_and_it_resumes(tmp_path):
    """SIGTERM mid-run: the round in progress finishes, a2c_last is written where the run stopped,
    the exit code is 0, and the run resumes from there."""
    import signal

    from tiny_run import stop_after_first_last

    proc, last_path, out, err = stop_after_first_last(
        [*GRPO, "--num-updates", "100000", "--checkpoint-interval", "1", "--log-dir", str(tmp_path)], signal.SIGTERM
    )
    assert proc.returncode == 0, err
    final = out.strip().splitlines()[-1]
    last = checkpoints.load_checkpoint(last_path)
    assert final.startswith("stopped by SIGTERM; ") and f"{last['step']} env steps, {last['update']} updates" in final
    assert cli.main(["--no-cuda", "--resume", last_path, "--num-updates", str(last["update"] + 1)]) == 0
    assert checkpoints.load_checkpoint(last_path)["update"] == last["update"] + 1
