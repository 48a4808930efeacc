"""The runner on real Atari envs, in-process: reproducibility, reload, truncation bootstrap, failure handling."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from recording_writer import RecordingWriter

import checkpoints
import metrics
import seeds
import utils
from agent import load_model
from algorithms import make_agent
from config import Config
from envs import make_vec_env
from metrics import Metrics
from runner import Runner


def small_config(**overrides) -> Config:
    settings = dict(
        num_envs=2,
        rollout_size=5,
        num_updates=4,
        seed=11,
        tensorboard=False,
        progress=False,
        max_episode_frames=120,
        checkpoint_interval=1000,
    )
    settings.update(overrides)
    return Config(**settings)


def build_runner(config: Config, run_dir) -> Runner:
    seeds.seed_everything(config.seed)
    envs = make_vec_env(
        config.env_name, config.num_envs, config.n_stack, config.seed, "dummy", config.max_episode_frames
    )
    agent = make_agent(config, envs.observation_space.shape, envs.action_space.n)
    return Runner(agent, envs, config, str(run_dir))


def test_same_seed_gives_identical_losses(tmp_path):
    histories = []
    for i in range(2):
        runner = build_runner(small_config(), tmp_path / str(i))
        os.makedirs(runner.run_dir)
        runner.train()
        runner.envs.close()
        histories.append([(h["total"], h["policy"], h["value"], h["entropy"], h["grad_norm"]) for h in runner.history])
    assert len(histories[0]) == 4
    assert histories[0] == histories[1]  # bit for bit
    other = build_runner(small_config(seed=12), tmp_path / "other")
    os.makedirs(other.run_dir)
    other.train()
    other.envs.close()
    assert [h["total"] for h in other.history] != [h[0] for h in histories[0]]


def test_reloaded_checkpoints_give_identical_action_probabilities(tmp_path):
    runner = build_runner(small_config(num_updates=3), tmp_path)
    runner.train()
    model = runner.agent.model
    with torch.no_grad():
        expected, _, _ = model(runner.obs, runner.recurrent_state, runner.episode_starts)
        for name in ("a2c_last", "a2c_best_loss"):
            reloaded = load_model(os.path.join(tmp_path, name))
            if name == "a2c_last":  # a2c_best_loss may hold earlier weights
                got, _, _ = reloaded(runner.obs, runner.recurrent_state, runner.episode_starts)
                assert torch.equal(torch.softmax(got, -1), torch.softmax(expected, -1))
            assert reloaded.spec == model.spec
    runner.envs.close()


def test_best_loss_checkpoint_holds_the_weights_that_produced_that_loss(tmp_path):
    runner = build_runner(small_config(num_updates=3), tmp_path)
    snapshots = []
    loss = runner.agent.loss

    def spy(batch):  # the weights as each loss is computed from them
        terms = loss(batch)
        snapshots.append(
            (float(terms["total"].detach()), {k: v.clone() for k, v in runner.agent.model.state_dict().items()})
        )
        return terms

    runner.agent.loss = spy
    runner.train()
    runner.envs.close()
    saved = torch.load(os.path.join(tmp_path, "a2c_best_loss"), weights_only=True)
    best, weights = min(snapshots, key=lambda s: s[0])
    assert saved["best_loss"] == best
    assert all(torch.equal(saved["model"][k], weights[k]) for k in weights)


def test_best_reward_checkpoint_holds_the_weights_that_played_the_rollout_where_the_mean_peaked(tmp_path):
    runner = build_runner(small_config(num_updates=12, recurrent=False), tmp_path)
    rollouts = []  # (the mean of the last 100 games after the rollout, the weights that collected it)
    collect = runner.collect

    def spy():
        weights = {k: v.clone() for k, v in runner.agent.model.state_dict().items()}
        batch = collect()
        rollouts.append((runner.state.episodes.mean, weights))
        return batch

    runner.collect = spy
    runner.train()
    runner.envs.close()
    saved = torch.load(os.path.join(tmp_path, "a2c_best_reward"), weights_only=True)
    means = [mean for mean, _ in rollouts]
    played = [i for i, mean in enumerate(means) if not math.isnan(mean)]  # nan: no game over yet
    peak = max(played, key=lambda i: (means[i], -i))  # the first rollout to reach the best mean
    assert 0 < peak < len(rollouts) - 1  # (for this seed) the weights after it are others
    assert saved["best_reward"] == means[peak] and saved["update"] == peak
    assert all(torch.equal(saved["model"][k], v) for k, v in rollouts[peak][1].items())
    assert not all(torch.equal(saved["model"][k], v) for k, v in rollouts[peak + 1][1].items())


@pytest.mark.parametrize("recurrent", [False, True])
def test_time_limit_bootstraps_from_terminal_observation_and_starts_follow_dones(tmp_path, recurrent):
    """At a truncated step the return's reward is the env reward + gamma * V(terminal obs); other dones add nothing.

    The terminal observation continues its episode: a recurrent agent values it from the state
    that the truncated step produced (not a fresh one, not another env's)."""
    config = small_config(recurrent=recurrent, max_episode_frames=60)
    runner = build_runner(config, tmp_path)
    raw, states = [], []  # each step's env outputs, and the recurrent state the step produced
    step = runner.envs.step
    act = runner.agent.act_with_graph

    def recording_act(obs, state, starts):
        out = act(obs, state, starts)
        states.append(tuple(s.detach().clone() for s in out[-1]))
        return out

    def recording_step(actions):
        out = step(actions)
        raw.append(out)
        return out

    runner.agent.act_with_graph = recording_act
    runner.envs.step = recording_step
    seen_truncation = False
    for _ in range(6):
        raw.clear()
        states.clear()
        batch = runner.collect()
        storage = runner.collector.storage
        for t, (_, rewards, dones, infos) in enumerate(raw):
            for i in range(config.num_envs):
                expected = float(rewards[i])
                if dones[i] and infos[i].get("TimeLimit.truncated"):
                    seen_truncation = True
                    terminal = torch.as_tensor(infos[i]["terminal_observation"][None])
                    state = tuple(s[i : i + 1] for s in states[t])
                    with torch.no_grad():
                        value = float(runner.agent.model.value(terminal, state, torch.zeros(1)))
                        if recurrent:  # the state matters: a fresh one gives another value
                            fresh = runner.agent.model.value(
                                terminal, runner.agent.model.initial_state(1), torch.zeros(1)
                            )
                            assert float(fresh) != pytest.approx(value, abs=1e-6)
                    expected += config.gamma * value
                assert float(storage.rewards[t, i]) == float(rewards[i])  # the env's reward, untouched
                assert float(storage.rewards[t, i] + storage.bootstrap[t, i]) == pytest.approx(expected, abs=1e-6)
                assert float(storage.dones[t, i]) == float(dones[i])
        assert torch.equal(storage.episode_starts[1:], storage.dones[:-1])
        assert batch.returns.shape == (config.rollout_size, config.num_envs)
    assert seen_truncation
    runner.envs.close()


def test_non_finite_losses_skip_then_stop_with_last_good_weights(tmp_path, capsys):
    runner = build_runner(small_config(num_updates=50, max_skipped_updates=3), tmp_path)
    agent = runner.agent
    good_updates = 2
    real_loss = agent.loss

    def loss_turning_nan(batch):
        terms = real_loss(batch)
        if runner.state.update >= good_updates:
            terms = {k: v * float("nan") for k, v in terms.items()}
        return terms

    agent.loss = loss_turning_nan
    runner.train()
    runner.envs.close()
    weights_after_good = {k: v.clone() for k, v in agent.model.state_dict().items()}
    last = torch.load(os.path.join(tmp_path, "a2c_last"), weights_only=True)
    assert last["update"] == good_updates + 3  # two good updates, three skipped, then stop
    assert all(torch.equal(last["model"][k], weights_after_good[k]) for k in weights_after_good)
    assert all(torch.isfinite(v).all() for v in last["model"].values())
    assert [h["skipped"] for h in runner.history] == [0, 0, 1, 1, 1]
    err = capsys.readouterr().err
    assert err.count("warning: non-finite loss") == 3 and "3 non-finite losses in a row" in err


def test_atomic_save_keeps_old_file_when_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "a2c_last"
    checkpoints.atomic_save({"format": checkpoints.CHECKPOINT_FORMAT, "v": torch.tensor(1)}, str(path))

    def broken_save(obj, f):
        f.write(b"partial bytes")
        raise KeyboardInterrupt  # a kill in the middle of the write

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.atomic_save({"format": checkpoints.CHECKPOINT_FORMAT, "v": torch.tensor(2)}, str(path))
    monkeypatch.undo()
    assert int(checkpoints.load_checkpoint(str(path))["v"]) == 1
    assert os.listdir(tmp_path) == ["a2c_last"]


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_checkpoint_that_would_run_code_is_refused(tmp_path):
    path = tmp_path / "evil"
    torch.save({"format": checkpoints.CHECKPOINT_FORMAT, "x": _Payload()}, path)
    with pytest.raises(utils.UsageError, match="refused"):
        checkpoints.load_checkpoint(str(path))


def test_rng_state_round_trips_through_a_checkpoint(tmp_path):
    seeds.seed_everything(5)
    checkpoints.atomic_save({"rng": seeds.rng_state()}, str(tmp_path / "s"))
    expected = (np.random.rand(), torch.rand(1).item(), __import__("random").random())
    seeds.seed_everything(99)
    seeds.set_rng_state(torch.load(tmp_path / "s", weights_only=True)["rng"])
    assert (np.random.rand(), torch.rand(1).item(), __import__("random").random()) == expected


def test_rng_state_of_more_gpus_than_this_machine_has_restores_those_it_has(monkeypatch):
    saved = {**seeds.rng_state(), "cuda": [torch.full((16,), i, dtype=torch.uint8) for i in range(4)]}
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.append((int(state[0]), device)))
    seeds.set_rng_state(saved)
    assert restored == [(0, 0), (1, 1)]


def test_v5_ids_skip_frames_once():
    envs = make_vec_env("ALE/Pong-v5", 1, 4, seed=0, vec_env="dummy")
    assert envs.observation_space.shape == (4, 84, 84)
    assert envs.venv.venv.envs[0].unwrapped._frameskip == 1  # the Atari wrapper does the skipping
    obs = envs.reset()
    assert obs.dtype == np.uint8 and obs.shape == (1, 4, 84, 84)
    envs.close()


def test_explained_variance():
    targets = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert metrics.explained_variance(targets, targets) == 1.0
    assert metrics.explained_variance(torch.full((4,), 2.5), targets) == pytest.approx(0.0)
    assert math.isnan(metrics.explained_variance(targets, torch.ones(4)))


def test_learning_rate_schedule_follows_the_update_count():
    from runner import scheduled_lr

    linear = Config(lr=1.0, num_updates=4, lr_schedule="linear")
    assert [scheduled_lr(linear, u) for u in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    constant = Config(lr=3e-4, num_updates=4)
    assert {scheduled_lr(constant, u) for u in range(5)} == {3e-4}
    # Held at the full rate for the first three quarters, then down to 0 over the last quarter.
    late = Config(lr=1.0, num_updates=8, lr_schedule="linear", lr_decay_start=0.75)
    assert [scheduled_lr(late, u) for u in range(9)] == pytest.approx([1.0] * 7 + [0.5, 0.0])
    # The share counts env steps where a budget of them ends the run first: 350 of 400 steps.
    budget = Config(lr=1.0, num_updates=100, max_env_steps=400, lr_schedule="linear", lr_decay_start=0.5)
    assert scheduled_lr(budget, 1, step=350) == pytest.approx(0.25)
    # Held for the first half, halved where the decay begins, then down to 0: 1, 1, 0.5, 0.25, 0.
    halved = Config(lr=1.0, num_updates=4, lr_schedule="linear", lr_decay_start=0.5, lr_decay_from=0.5)
    assert [scheduled_lr(halved, u) for u in range(5)] == pytest.approx([1.0, 1.0, 0.5, 0.25, 0.0])
    # At its default (1) the decay begins at the full rate: the rates are those of the decay alone, exactly.
    assert [
        scheduled_lr(Config(lr=7e-4, num_updates=8, lr_schedule="linear", lr_decay_start=0.75), u) for u in range(9)
    ] == [7e-4 * max(0.0, 1.0 - max(0.0, u / 8 - 0.75) / 0.25) for u in range(9)]


def test_runner_sets_the_scheduled_rate_before_each_update(tmp_path):
    """A resumed run (update 2 of 4) continues the linear decay rather than restarting it."""
    from checkpoints import TrainingState

    config = small_config(num_updates=4, lr=1e-3, lr_schedule="linear")
    runner = build_runner(config, tmp_path)
    runner.state = TrainingState(update=2, step=20)
    runner.agent.set_lr(123.0)  # as if a stale rate came back with an optimizer state
    runner.train()
    runner.envs.close()
    assert [h["lr"] for h in runner.history] == pytest.approx([5e-4, 2.5e-4])


def test_entropy_schedule_follows_the_update_count_or_the_env_steps():
    from runner import scheduled_entropy_coeff

    linear = Config(entropy_coeff=0.01, num_updates=4, entropy_schedule="linear")
    assert [scheduled_entropy_coeff(linear, u) for u in range(5)] == pytest.approx([0.01, 0.0075, 0.005, 0.0025, 0.0])
    # A budget of env steps that ends first sets the pace: 300 of 400 steps is three quarters of the run.
    budget = Config(entropy_coeff=0.01, num_updates=100, max_env_steps=400, entropy_schedule="linear")
    assert scheduled_entropy_coeff(budget, 1, step=300) == pytest.approx(0.0025)
    constant = Config(entropy_coeff=0.01, num_updates=4)
    assert {scheduled_entropy_coeff(constant, u) for u in range(5)} == {0.01}
    # Held for the first half of 8 updates, then from the full weight to 0 at the last: 0.01 at
    # updates 0 to 4, then 0.01 * (1 - (u/8 - 0.5) / 0.5): 0.0075, 0.005, 0.0025, 0.
    late = Config(entropy_coeff=0.01, num_updates=8, entropy_schedule="linear", entropy_decay_start=0.5)
    assert [scheduled_entropy_coeff(late, u) for u in range(9)] == pytest.approx(
        [0.01, 0.01, 0.01, 0.01, 0.01, 0.0075, 0.005, 0.0025, 0.0]
    )


def test_runner_weighs_each_update_s_entropy_by_the_scheduled_coefficient(tmp_path):
    """A resumed run (update 2 of 4) continues the decay; each loss holds that update's weight."""
    from checkpoints import TrainingState

    config = small_config(num_updates=4, entropy_coeff=0.02, entropy_schedule="linear")
    runner = build_runner(config, tmp_path)
    runner.state = TrainingState(update=2, step=20)
    runner.train()
    runner.envs.close()
    assert [h["entropy_coeff"] for h in runner.history] == pytest.approx([0.01, 0.005])
    for h, coeff in zip(runner.history, (0.01, 0.005)):
        assert h["total"] == pytest.approx(
            h["policy"] + config.value_coeff * h["value"] - coeff * h["entropy"], rel=1e-5, abs=1e-6
        )
    (tmp_path / "constant").mkdir()
    constant = build_runner(small_config(num_updates=1), tmp_path / "constant")
    constant.train()
    constant.envs.close()
    assert "entropy_coeff" not in constant.history[0] and constant.agent.entropy_coeff == 0.01


def test_periodic_evaluation_leaves_training_unchanged(tmp_path):
    """Evaluation plays on envs and a random generator of its own: the training run is the same."""
    from evaluate import PeriodicEvaluator

    histories = []
    for i, evaluate_every in enumerate((0, 2)):
        config = small_config(eval_interval=evaluate_every, eval_episodes=2)
        runner = build_runner(config, tmp_path / str(i))
        os.makedirs(runner.run_dir)
        evaluator = PeriodicEvaluator(config.env_name, 2, seed=99, max_episode_frames=120) if evaluate_every else None
        runner.evaluator = evaluator
        runner.train()
        runner.envs.close()
        if evaluator is not None:
            evaluator.close()
            assert os.path.exists(os.path.join(runner.run_dir, "a2c_best_eval"))
            assert runner.state.best_eval > -math.inf
        histories.append([(h["total"], h["grad_norm"]) for h in runner.history])
    assert histories[0] == histories[1]


def test_undefined_explained_variance_does_not_poison_the_logged_mean(tmp_path):
    """Constant returns make explained variance NaN for that update; the interval mean skips it."""
    writer = RecordingWriter()
    runner = build_runner(small_config(log_interval=4, num_updates=4), tmp_path)
    runner.metrics = Metrics(writer)
    real_collect = runner.collect

    def collect_with_one_constant_rollout():
        batch = real_collect()
        if runner.state.update == 1:
            batch.returns.fill_(0.5)  # explained variance undefined
        return batch

    runner.collect = collect_with_one_constant_rollout
    runner.train()
    runner.envs.close()
    history = [h["explained_variance"] for h in runner.history]
    assert math.isnan(history[1]) and all(math.isfinite(v) for i, v in enumerate(history) if i != 1)
    assert writer.values("train/explained_variance") == [pytest.approx((history[0] + history[2] + history[3]) / 3)]
    assert writer.values("loss/total") == [pytest.approx(sum(h["total"] for h in runner.history) / 4)]
