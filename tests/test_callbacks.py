"""callbacks.py: the points of the training loop where callbacks are called, a callback of one's
own plugged into a run, and the built-in ones' rules."""

from __future__ import annotations

import os

import pytest
from recording_writer import RecordingWriter

import algorithms
import seeds
from algorithms import make_agent
from callbacks import Callback, CoreHealth, default_callbacks, every
from config import Config, with_settings
from envs import make_vec_env
from runner import Runner


class Recorder(Callback):
    """Writes down each call: the point, the update and env step the run was at."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_reset(self, runner, infos):
        self.calls.append(("reset", len(infos)))

    def on_step(self, runner, infos, t):
        self.calls.append(("step", t, runner.state.update))

    def on_rollout_end(self, runner, batch):
        self.calls.append(("rollout_end", runner.state.update, tuple(batch.returns.shape)))

    def on_loss(self, runner, loss):
        self.calls.append(("loss", runner.state.update, isinstance(loss, float)))

    def on_update_end(self, runner, batch):
        self.calls.append(("update_end", runner.state.update, runner.state.step))


def small_runner(tmp_path, callbacks=None, **overrides) -> Runner:
    config = Config(
        **{
            **dict(
                num_envs=2,
                rollout_size=3,
                num_updates=2,
                seed=5,
                tensorboard=False,
                progress=False,
                max_episode_frames=120,
                checkpoint_interval=1000,
            ),
            **overrides,
        }
    )
    seeds.seed_everything(config.seed)
    envs = make_vec_env(
        config.env_name, config.num_envs, config.n_stack, config.seed, "dummy", config.max_episode_frames
    )
    agent = make_agent(config, envs.observation_space.shape, envs.action_space.n)
    os.makedirs(tmp_path, exist_ok=True)
    return Runner(agent, envs, config, str(tmp_path), callbacks=callbacks)


def test_the_loop_calls_each_point_in_order_with_the_counters_of_that_moment(tmp_path):
    recorder = Recorder()
    runner = small_runner(tmp_path, callbacks=[*default_callbacks(), recorder])
    runner.train()
    runner.envs.close()
    expected = [("reset", 2)]
    for u in range(2):  # the counters move on after the update, before on_update_end
        expected += [("step", t, u) for t in range(3)] + [
            ("rollout_end", u, (3, 2)),
            ("loss", u, True),
            ("update_end", u + 1, (u + 1) * 6),
        ]
    assert recorder.calls == expected


@pytest.mark.parametrize("algo", list(algorithms.ALGORITHMS))
def test_every_point_is_called_for_every_algorithm(tmp_path, algo):
    """Whatever collects an algorithm's batches, the callbacks see the same loop: resets, steps
    whose counters start at 0, then the batch's end, its loss and the update's end, in order."""
    config = with_settings(
        Config(
            env_name="CartPole-v1",
            algo=algo,
            recurrent=False,
            critic=algo != "grpo",
            num_envs=4,
            rollout_size=3,
            num_updates=2,
            seed=5,
            tensorboard=False,
            progress=False,
            checkpoint_interval=1000,
        ),
        {"group.size": 2},
    )
    seeds.seed_everything(config.seed)
    envs = make_vec_env(config.env_name, config.num_envs, seed=config.seed)
    agent = make_agent(config, envs.observation_space.shape, envs.action_space.n)
    recorder = Recorder()
    runner = Runner(
        agent, envs, config, str(tmp_path), callbacks=[recorder], collector=algorithms.algorithm(algo).collector
    )
    runner.train()
    envs.close()
    points = [call[0] for call in recorder.calls]
    assert points[0] == "reset"
    ends = [i for i, point in enumerate(points) if point == "rollout_end"]
    assert len(ends) == 2
    for u, end in enumerate(ends):
        begin = ends[u - 1] + 3 if u else 0  # after the last update's end
        steps = [call for call in recorder.calls[begin:end] if call[0] == "step"]
        assert steps and [call[1] for call in steps] == list(range(len(steps)))  # t counts the batch's steps
        assert points[end : end + 3] == ["rollout_end", "loss", "update_end"]


def test_a_run_without_callbacks_trains_the_same_and_writes_only_its_last_checkpoint(tmp_path):
    """Callbacks watch and save; none changes what is learned."""
    histories, files = [], []
    for i, callbacks in enumerate((None, [])):
        runner = small_runner(tmp_path / str(i), callbacks=callbacks, checkpoint_interval=1)
        runner.train()
        runner.envs.close()
        histories.append([(h["total"], h["grad_norm"]) for h in runner.history])
        files.append(sorted(os.listdir(runner.run_dir)))
    assert histories[0] == histories[1]
    assert {"a2c_last", "a2c_best_loss"} <= set(files[0]) and files[1] == ["a2c_last"]


def test_every_counts_intervals_of_updates_from_one():
    assert [u for u in range(1, 10) if every(3, u)] == [3, 6, 9]
    assert not any(every(0, u) for u in range(1, 10))  # 0: never


def test_a_dead_core_is_warned_about_once(tmp_path, monkeypatch, capsys):
    """An LSTM whose output no longer depends on the frames: one warning, however often it is seen."""
    import callbacks

    monkeypatch.setattr(callbacks, "core_health", lambda *a: {"gate_saturation": 0.9, "output_std": 1e-6})
    writer = RecordingWriter()
    runner = small_runner(tmp_path, callbacks=[CoreHealth()], log_interval=1, num_updates=3)
    runner.metrics.writer = writer
    runner.train()
    runner.envs.close()
    assert capsys.readouterr().err.count("the LSTM gives the same output for every env") == 1
    assert writer.values("core/output_std") == [1e-6] * 3
