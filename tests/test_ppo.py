"""PPO (``--algo ppo``): the clipped surrogate worked by hand, the reduction to A2C's gradient at
ratio 1, minibatches of samples and of whole envs, the epochs and steps of an update, and runs
through ``main.py`` (defaults, checkpoints, exact resume, eval, learning, bad input)."""

from __future__ import annotations

import glob
import math
import os

import numpy as np
import pytest
import torch
from torch.distributions import Categorical
from torch.testing import assert_close

import algorithms  # noqa: F401  (the registry: every config made from here on holds PPO's block)
import checkpoints
import main as cli
from agent import A2CAgent, a2c_loss
from config import Config
from model import build_model
from ppo import PPOAgent, clipped_surrogate, fit, ppo_loss
from recipes import defaults_for, with_env_defaults
from storage import RolloutStorage

pytestmark = pytest.mark.usefixtures("torch_single_thread")

PPO = [
    "--env-name",
    "CartPole-v1",
    "--algo",
    "ppo",
    "--num-envs",
    "4",
    "--rollout-size",
    "16",
    "--epochs",
    "2",
    "--minibatches",
    "4",
    "--no-progress",
    "--no-cuda",
    "--threads",
    "1",
]


# ------------------------------------------------------------------------------------------------ formulas
def test_clipped_surrogate_worked_by_hand():
    """Ratios 0.5, 1.0, 1.5 with advantages 1, -1, 1 and eps 0.2:
    min(0.5 * 1, 0.8 * 1) = 0.5; min(1 * -1, 1 * -1) = -1; min(1.5 * 1, 1.2 * 1) = 1.2.
    Loss -(0.5 - 1 + 1.2) / 3 = -0.7 / 3; two ratios of three lie outside [0.8, 1.2]."""
    logits = torch.tensor([[0.3, -0.2], [1.0, 0.0], [-0.5, 0.5]])
    dist = Categorical(logits=logits)
    actions = torch.tensor([0, 1, 1])
    ratios = torch.tensor([0.5, 1.0, 1.5])
    old = dist.log_prob(actions) - ratios.log()
    advantages = torch.tensor([1.0, -1.0, 1.0])
    policy, log_probs, stats = clipped_surrogate(dist, actions, old, advantages, torch.ones(3), 0.2)
    assert_close(policy, torch.tensor(-0.7 / 3))
    assert_close(log_probs, dist.log_prob(actions))
    assert_close(stats["clip_fraction"], torch.tensor(2 / 3))
    # k3 estimate of KL(pi_old || pi): mean(r - 1 - log r)
    expected_kl = sum(r - 1 - math.log(r) for r in (0.5, 1.0, 1.5)) / 3
    assert_close(stats["approx_kl"], torch.tensor(expected_kl))


def test_a_clipped_ratio_passes_no_gradient():
    """Ratio 1.5 with a positive advantage is clipped at 1.2: the surrogate is constant there, so
    that action's log-probability gets no gradient; ratio 1.1 inside the clip gets ratio * A."""
    logits = torch.zeros(2, 3, requires_grad=True)
    dist = Categorical(logits=logits)
    actions = torch.tensor([0, 2])
    old = (dist.log_prob(actions) - torch.tensor([1.5, 1.1]).log()).detach()
    policy, _, _ = clipped_surrogate(dist, actions, old, torch.tensor([2.0, 2.0]), torch.ones(2), 0.2)
    policy.backward()
    assert torch.count_nonzero(logits.grad[0]) == 0
    # d(-ratio * A / 2)/d logits = -(A / 2) * ratio * d log pi(a) / d logits, with d log pi(a) = onehot - 1/3
    assert_close(logits.grad[1], -(2.0 / 2) * 1.1 * (torch.tensor([0.0, 0.0, 1.0]) - 1 / 3))


def _rollout(recurrent: bool, T: int = 6, N: int = 4, seed: int = 0):
    """A model and a batch of T steps in N envs of made-up observations, with episode starts inside."""
    torch.manual_seed(seed)
    model = build_model((5,), 3, recurrent=recurrent, hidden_size=8, mlp_width=16, separate_critic=not recurrent)
    storage = RolloutStorage(T, N, (5,), obs_dtype=torch.float32)
    state = model.initial_state(N)
    storage.start(state)
    agent = A2CAgent(model, gamma=0.9, gae_lambda=0.95)
    starts = torch.zeros(N)
    for t in range(T):
        obs = torch.randn(N, 5)
        actions, log_probs, values, state = agent.act(obs, state, starts)
        dones = (torch.rand(N) < 0.2).float()
        storage.insert(t, obs, starts, actions, values, torch.randn(N), dones, log_probs=log_probs)
        starts = dones
    storage.finish(torch.randn(N, 5), agent.value(torch.randn(N, 5), state, starts))
    return model, agent.make_batch(storage)


@pytest.mark.parametrize("recurrent", [False, True])
def test_at_ratio_one_the_loss_and_its_gradient_are_a2cs(recurrent):
    """Before any step the policy is the one that acted (ratio 1): PPO's value and entropy terms
    equal A2C's, and the gradient of its total loss equals A2C's, for samples shuffled one by one
    (feed-forward) and for whole envs (recurrent)."""
    model, batch = _rollout(recurrent)
    ppo = PPOAgent(model, epochs=1, minibatches=1, clip_eps=0.2, value_coeff=0.5, entropy_coeff=0.01)
    terms = ppo.minibatch_loss(batch)
    logits, values, _ = model.forward_sequence(batch.obs, batch.initial_state, batch.episode_starts)
    reference = a2c_loss(model.distribution(logits), values, batch.actions, batch.returns, batch.advantages, 0.5, 0.01)
    for name in ("value", "entropy"):
        assert_close(terms[name], reference[name])
    assert_close(terms["ppo/clip_fraction"], torch.tensor(0.0))
    assert float(terms["ppo/approx_kl"]) == pytest.approx(0.0, abs=1e-6)
    grads = []
    for total in (terms["total"], reference["total"]):
        model.zero_grad()
        total.backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) > 0
    for mine, theirs in zip(*grads):
        assert_close(mine, theirs)


@pytest.mark.parametrize("recurrent", [False, True])
def test_minibatches_hold_samples_or_whole_envs(recurrent):
    """A minibatch's terms are those of its own samples: feed-forward, flat indices into the T x N
    samples; recurrent, env columns run from the state they began the rollout with."""
    model, batch = _rollout(recurrent)
    ppo = PPOAgent(model, epochs=1, minibatches=1, value_coeff=0.5, entropy_coeff=0.0)
    logits, values, _ = model.forward_sequence(batch.obs, batch.initial_state, batch.episode_starts)
    if recurrent:
        part = torch.tensor([3, 1])
        expected = (batch.returns[:, part] - values[:, part]).pow(2).mean()
    else:
        part = torch.tensor([0, 5, 13, 22])  # (t, i) = (0, 0), (1, 1), (3, 1), (5, 2)
        expected = (batch.returns.flatten()[part] - values.flatten()[part]).pow(2).mean()
    assert_close(ppo.minibatch_loss(batch, part)["value"], expected)


def test_sequences_are_stretches_of_the_columns_run_from_the_states_reached_there():
    """With sequence_length L, sequence c of env i (unit c * N + i) holds steps c*L .. c*L+L-1 of
    env i, run from the state the whole column reaches at step c*L: the first epoch's losses are
    the whole columns'. The gradient stops at each sequence's first step: it equals the gradient of
    the columns run with their state detached every L steps."""
    T, N, L = 6, 4, 2
    model, batch = _rollout(True, T=T, N=N)
    whole = PPOAgent(model, epochs=1, minibatches=1, value_coeff=0.5, entropy_coeff=0.01)
    cut = PPOAgent(model, epochs=1, minibatches=1, value_coeff=0.5, entropy_coeff=0.01, sequence_length=L)
    assert (whole.samples(batch), cut.samples(batch)) == (N, T // L * N)

    # the states at the sequences' first steps: the column's state after c * L steps
    starts = cut.sequence_starts(batch)
    state = batch.initial_state
    for c in range(T // L):
        for s, start in zip(state, starts):
            assert_close(start[c * N : (c + 1) * N], s)
        _, _, state = model.forward_sequence(
            batch.obs[c * L : (c + 1) * L], state, batch.episode_starts[c * L : (c + 1) * L]
        )

    # one sequence alone: sequence 1 * N + 2 is env 2's steps 2 and 3
    _, values, _ = model.forward_sequence(batch.obs, batch.initial_state, batch.episode_starts)
    expected = (batch.returns[L : 2 * L, 2] - values[L : 2 * L, 2]).pow(2).mean()
    assert_close(cut.minibatch_loss(batch, torch.tensor([1 * N + 2]))["value"], expected)

    # all of them: the whole columns' losses; the gradient, that of columns detached every L steps
    terms, reference = cut.minibatch_loss(batch), whole.minibatch_loss(batch)
    for name in ("total", "policy", "value", "entropy"):
        assert_close(terms[name], reference[name])
    state, logits, values = batch.initial_state, [], []
    for c in range(T // L):
        state = tuple(s.detach() for s in state)
        part_logits, part_values, state = model.forward_sequence(
            batch.obs[c * L : (c + 1) * L], state, batch.episode_starts[c * L : (c + 1) * L]
        )
        logits.append(part_logits)
        values.append(part_values)
    truncated = ppo_loss(
        model.distribution(torch.cat(logits)),
        torch.cat(values),
        batch.actions,
        batch.log_probs,
        batch.returns,
        batch.advantages,
        0.2,
        0.5,
        0.01,
    )
    grads = []
    for total in (terms["total"], truncated["total"], reference["total"]):
        model.zero_grad()
        total.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert_close(grads[0], grads[1])
    assert not torch.allclose(grads[0], grads[2])  # the whole columns' gradient reaches further back


def test_a_sequence_of_the_whole_rollout_is_the_whole_column():
    """sequence_length T is the default's update, step for step."""
    results = []
    for length in (0, 6):
        model, batch = _rollout(True)
        ppo = PPOAgent(model, epochs=2, minibatches=2, value_coeff=0.5, sequence_length=length)
        stats = ppo.update(batch, generator=torch.Generator().manual_seed(0))
        results.append((stats, [p.detach().clone() for p in model.parameters()]))
    assert results[0][0] == results[1][0]
    for mine, theirs in zip(results[0][1], results[1][1]):
        assert torch.equal(mine, theirs)


def test_standardized_advantages_are_per_minibatch():
    """With normalize_advantages, each minibatch's advantages have mean 0: at ratio 1 the
    surrogate is the negated mean of the minibatch's standardized advantages, 0."""
    model, batch = _rollout(False)
    ppo = PPOAgent(model, epochs=1, minibatches=1, normalize_advantages=True)
    policy = ppo.minibatch_loss(batch, torch.tensor([2, 7, 9, 20, 21]))["policy"]
    assert float(policy.detach()) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("recurrent", [False, True])
def test_an_update_takes_epochs_times_minibatches_steps_and_moves_the_policy(recurrent):
    model, batch = _rollout(recurrent)
    ppo = PPOAgent(model, epochs=3, minibatches=2, lr=1e-2, optimizer="adam")
    before = [p.detach().clone() for p in model.parameters()]
    calls = []
    step = ppo.step
    ppo.step = lambda terms: calls.append(1) or step(terms)  # type: ignore[method-assign]
    stats = ppo.update(batch, generator=torch.Generator().manual_seed(0))
    assert len(calls) == 3 * 2 and stats["skipped"] == 0.0 and stats["ppo/skipped_steps"] == 0.0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert float(ppo.minibatch_loss(batch)["ppo/approx_kl"]) > 0  # the policy left the one that acted


def test_defaults_start_from_sb3s_ppo_and_the_zoos_lunarlander():
    generic = defaults_for("CartPole-v1", algo="ppo")
    assert generic["optimizer"] == "adam" and generic["lr"] == 3e-4 and generic["clip.epochs"] == 10
    assert generic["num_envs"] * generic["rollout_size"] == 2048 and generic["clip.minibatches"] == 2048 // 64
    lander = defaults_for("LunarLander-v3", algo="ppo")
    assert lander["num_envs"] * lander["rollout_size"] * lander["num_updates"] <= 1_000_000
    assert lander["num_envs"] * lander["rollout_size"] // lander["clip.minibatches"] == 64
    assert lander["entropy_coeff"] == 1e-3 and lander["gamma"] == 0.999 and not lander["speed.keep_graph"]


def test_atari_defaults_are_the_ppo_paper_s():
    """Schulman et al. 2017's Atari settings (table 5, as CleanRL runs them), not A2C's recipe."""
    atari = defaults_for("ALE/Pong-v5", algo="ppo")
    assert (atari["num_envs"], atari["rollout_size"], atari["clip.epochs"], atari["clip.minibatches"]) == (8, 128, 4, 4)
    assert atari["num_envs"] * atari["rollout_size"] // atari["clip.minibatches"] == 256  # samples a minibatch
    assert atari["optimizer"] == "adam" and atari["lr"] == 2.5e-4 and atari["clip.eps"] == 0.1
    assert atari["lr_schedule"] == "linear" and atari["lr_decay_start"] == 0.0  # annealed from the first update
    assert atari["gae_lambda"] == 0.95 and atari["entropy_coeff"] == 0.01 and atari["normalize_advantages"]
    assert atari["arch"] == "nature" and not atari["recurrent"] and not atari["speed.keep_graph"]
    assert 10_000_000 <= atari["num_updates"] * 8 * 128 < 10_000_000 + 8 * 128  # 10M env steps, as A2C's default
    assert defaults_for("PongNoFrameskip-v4", algo="ppo") == atari


def test_a_recurrent_run_s_sequences_are_fitted_to_its_rollout_unless_typed():
    """Minibatches of whole sequences: a rollout's columns are cut so that every minibatch gets one
    (the longest such sequences, at least 16 steps), and typed settings stay as typed."""

    def settings(*flags):
        config, _, typed = cli.parse_args(["--env-name", "LunarLander-v3", "--algo", "ppo", *flags])
        config = with_env_defaults(config, typed)
        return config.num_envs, config.rollout_size, config.clip.sequence_length, config.clip.minibatches

    # 16 envs x 1024 steps in 256 minibatches: 256 sequences of 64 steps, a minibatch of 64 samples as without memory.
    assert settings("--recurrent") == (16, 1024, 64, 256)
    assert settings() == (16, 1024, 0, 256)  # feed-forward: single samples, nothing to fit
    assert settings("--recurrent", "--minibatches", "8") == (16, 1024, 0, 8)  # whole columns suffice
    assert settings("--recurrent", "--num-envs", "2", "--rollout-size", "32") == (
        2,
        32,
        16,
        4,
    )  # too few: 4 minibatches
    assert settings("--recurrent", "--sequence-length", "512") == (16, 1024, 512, 32)  # typed: as many as there are
    # Typed minibatches that no sequence of 16 steps or more can serve are left to the check to refuse.
    config = Config(algo="ppo", recurrent=True, num_envs=2, rollout_size=16)
    assert fit(config, {"clip.minibatches"}) == {"clip.sequence_length": 0, "clip.minibatches": 2}


# ------------------------------------------------------------------------------------------------ runs
def test_a_ppo_run_through_main_checkpoints_resumes_and_plays(tmp_path):
    """A run saves its PPO settings and Adam's state; resumed, it goes on from them (Adam has taken
    one step per minibatch of every epoch of every update, before and after the resume); its
    a2c_last plays --eval."""
    assert cli.main([*PPO, "--num-updates", "2", "--log-dir", str(tmp_path)]) == 0
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1_*"))
    last = os.path.join(run_dir, "a2c_last")
    first = checkpoints.load_checkpoint(last)
    assert first["config"]["algo"] == "ppo" and first["config"]["clip"] == {
        "epochs": 2,
        "minibatches": 4,
        "eps": 0.2,
        "sequence_length": 0,
    }
    assert first["optimizer_name"] == "adam" and not first["config"]["speed"]["keep_graph"]
    steps = lambda data: {float(s["step"]) for s in data["optimizer"]["state"].values()}  # noqa: E731
    assert steps(first) == {2 * 2 * 4}
    assert cli.main(["--no-cuda", "--resume", last, "--num-updates", "4"]) == 0
    again = checkpoints.load_checkpoint(last)
    assert again["update"] == 4 and again["step"] == 4 * 4 * 16 and steps(again) == {4 * 2 * 4}
    for name in ("a2c_best_loss", "a2c_best_reward"):
        assert os.path.exists(os.path.join(run_dir, name))
    assert cli.main(["--no-cuda", "--eval", "--load", last, "--episodes", "2", "--max-episode-frames", "30"]) == 0


def test_ppo_logs_its_statistics(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert cli.main([*PPO, "--num-updates", "3", "--log-dir", str(tmp_path)]) == 0
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1_*"))
    acc = EventAccumulator(run_dir)
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in (
        "ppo/clip_fraction",
        "ppo/approx_kl",
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "train/explained_variance",
        "train/grad_norm",
    ):
        assert tag in tags, tag
    assert acc.Scalars("ppo/approx_kl")[-1].step == 3 * 4 * 16  # env steps, not updates


def test_ppo_learns_cartpole(tmp_path):
    """A broken sign or ratio would stay near random play (about 22): the defaults lift CartPole's
    mean return far above it within 30,000 env steps."""
    argv = [
        "--env-name",
        "CartPole-v1",
        "--algo",
        "ppo",
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
    assert np.mean(returns[-20:]) > 150, returns[-20:]


@pytest.mark.parametrize(
    "env_name, flags",
    [("Pendulum-v1", []), ("CartPole-v1", ["--recurrent"]), ("CartPole-v1", ["--recurrent", "--sequence-length", "4"])],
)
def test_ppo_trains_continuous_and_recurrent_policies(tmp_path, env_name, flags):
    argv = [
        "--env-name",
        env_name,
        "--algo",
        "ppo",
        "--num-envs",
        "4",
        "--rollout-size",
        "8",
        "--epochs",
        "2",
        "--minibatches",
        "2",
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
    assert last["update"] == 2 and last["step"] == 2 * 4 * 8
    assert last["model_spec"]["continuous"] is (env_name == "Pendulum-v1")
    assert last["model_spec"]["recurrent"] is ("--recurrent" in flags)


@pytest.mark.parametrize("flags", [[], ["--recurrent", "--arch", "universe"]])
def test_ppo_trains_on_atari_frames_and_its_agent_plays(tmp_path, flags):
    """On a game, PPO trains the Nature CNN without memory by default (or a recurrent network on
    sequences), from uint8 frames stored in the rollout and run through the network again."""
    argv = ["--env-name", "PongNoFrameskip-v4", "--algo", "ppo", "--num-envs", "2", "--rollout-size", "16"]
    argv += ["--frame-size", "42", "--num-updates", "2", "--no-progress", "--no-cuda", "--threads", "1"]
    assert cli.main([*argv, "--log-dir", str(tmp_path), *flags]) == 0
    (run_dir,) = glob.glob(str(tmp_path / "PongNoFrameskip-v4_*"))
    last = checkpoints.load_checkpoint(os.path.join(run_dir, "a2c_last"))
    assert last["config"]["arch"] == ("universe" if flags else "nature")
    assert last["model_spec"]["recurrent"] is bool(flags) and last["model_spec"]["obs_shape"] == [4, 42, 42]
    assert last["step"] == 2 * 2 * 16
    # 2 updates of 4 epochs; 4 minibatches of samples, or of the 2 envs' whole columns (fitted to 2).
    minibatches = 2 if flags else 4
    assert {float(s["step"]) for s in last["optimizer"]["state"].values()} == {2 * 4 * minibatches}
    argv = ["--no-cuda", "--eval", "--load", os.path.join(run_dir, "a2c_last"), "--episodes", "1"]
    assert cli.main([*argv, "--max-episode-frames", "200"]) == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--env-name", "PongNoFrameskip-v4", "--algo", "ppo", "--preset", "fast-cpu"],
            "--preset fast-cpu is a recipe of A2C's; --algo ppo starts from the PPO paper's settings",
        ),
        (["--env-name", "PongNoFrameskip-v4", "--algo", "ppo", "--icm"], "--icm is A2C's curiosity module"),
        ([*PPO, "--recurrent", "--minibatches", "8"], "--minibatches 8 is more than the 4 sequences of a rollout"),
        (
            [*PPO, "--recurrent", "--sequence-length", "4", "--minibatches", "17"],
            "--minibatches 17 is more than the 16 sequences of a rollout",
        ),
        ([*PPO, "--recurrent", "--sequence-length", "5"], "--sequence-length 5 does not divide --rollout-size 16"),
        ([*PPO, "--sequence-length", "4"], "--sequence-length is for --recurrent"),
        (["--env-name", "CartPole-v1", "--recurrent", "--sequence-length", "5"], "--sequence-length is for --algo ppo"),
        (["--env-name", "CartPole-v1", "--epochs", "3"], "--epochs is for --algo ppo or grpo"),
        ([*PPO, "--kl-coeff", "0.1"], "--kl-coeff is for --algo grpo"),
        ([*PPO, "--clip-eps", "0"], "--clip-eps"),
    ],
)
def test_bad_ppo_input_is_one_line(one_line_error, tmp_path, argv, message):
    assert message in one_line_error([*argv, "--log-dir", str(tmp_path)])
    assert not os.listdir(tmp_path)  # refused before a run directory was made


def test_the_config_round_trips_the_clipped_objective_and_reads_each_algorithm_s_older_block():
    config = Config(algo="ppo")
    config.clip.epochs, config.clip.eps = 7, 0.1
    again = Config.from_dict(config.to_dict())
    assert again.algo == "ppo" and again.clip.epochs == 7 and again.clip.eps == 0.1
    # Saved before PPO and GRPO shared one block: each algorithm's own block is the one it trained with.
    older = {
        "ppo": {"epochs": 4, "minibatches": 256, "clip_eps": 0.2},
        "group": {"size": 8, "clip_eps": 0.3, "update_epochs": 8, "minibatches": 16},
    }
    ppo_run = Config.from_dict({"algo": "ppo", **older}).clip
    grpo_run = Config.from_dict({"algo": "grpo", **older})
    assert (ppo_run.epochs, ppo_run.minibatches, ppo_run.eps) == (4, 256, 0.2)
    assert (grpo_run.clip.epochs, grpo_run.clip.minibatches, grpo_run.clip.eps, grpo_run.group.size) == (8, 16, 0.3, 8)


def test_sigint_stops_a_ppo_run_after_its_update_and_it_resumes(tmp_path):
    """Ctrl+C mid-run: the update in progress (all its epochs) finishes, a2c_last is written where the
    run stopped, the exit code is 0, and the run resumes from there."""
    import signal

    from tiny_run import stop_after_first_last

    proc, last_path, out, err = stop_after_first_last(
        [*PPO, "--num-updates", "100000", "--checkpoint-interval", "1", "--log-dir", str(tmp_path)], signal.SIGINT
    )
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    final = out.strip().splitlines()[-1]
    last = checkpoints.load_checkpoint(last_path)
    assert final.startswith("stopped by SIGINT; ") and f"{last['step']} env steps, {last['update']} updates" in final
    assert last["step"] == last["update"] * 4 * 16
    assert {float(s["step"]) for s in last["optimizer"]["state"].values()} == {last["update"] * 2 * 4}
    assert cli.main(["--no-cuda", "--resume", last_path, "--num-updates", str(last["update"] + 1)]) == 0
    assert checkpoints.load_checkpoint(last_path)["update"] == last["update"] + 1
