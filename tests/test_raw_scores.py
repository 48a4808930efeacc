"""Raw game scores where clipping changes them: Space Invaders, whose aliens are worth 5 to 30 points
while the learner sees each reward clipped to its sign. The runner logs the emulator's raw sums
game for game, and ``--eval`` prints them, on the default ale path and on SB3's wrappers.
(That the env paths report raw scores at all: tests/test_envs.py.)"""

from __future__ import annotations

import os

import numpy as np
import pytest
from recording_writer import RecordingWriter
from stable_baselines3.common.monitor import Monitor

import main as cli
import seeds
from algorithms import make_agent
from config import Config
from envs import make_vec_env
from metrics import Metrics
from runner import Runner

pytestmark = pytest.mark.usefixtures("torch_single_thread")

SPACE_INVADERS = "SpaceInvadersNoFrameskip-v4"  # aliens are worth 5 to 30 points: clipping changes scores


@pytest.fixture(scope="module")
def space_invaders_run(tmp_path_factory, torch_single_thread):
    """A short training run on Space Invaders (default ``ale`` path, 500-frame games), with the raw
    rewards the emulator gave each step (read under the clipping), and what the runner logged."""
    run_dir = str(tmp_path_factory.mktemp("space_invaders"))
    config = Config(
        env_name=SPACE_INVADERS,
        num_envs=4,
        rollout_size=10,
        num_updates=20,
        seed=3,
        max_episode_frames=500,
        tensorboard=False,
        progress=False,
        checkpoint_interval=10**6,
    )
    seeds.seed_everything(config.seed)
    envs = make_vec_env(
        config.env_name, config.num_envs, config.n_stack, config.seed, config.vec_env, config.max_episode_frames
    )
    try:
        agent = make_agent(config, envs.observation_space.shape, envs.action_space.n)
        runner = Runner(agent, envs, config, run_dir)
        writer = RecordingWriter()
        runner.metrics = Metrics(writer)
        raw_steps, games = [], []  # each step's raw rewards; (raw sum, clipped sum) of each finished game
        receive, step = envs.ale.recv, envs.step

        def recording_receive():  # the C++ vector env's own output: raw, unclipped rewards
            out = receive()
            raw_steps.append(np.asarray(out[1], dtype=np.float64).copy())
            return out

        raw_sum, clipped_sum = np.zeros(config.num_envs), np.zeros(config.num_envs)

        def recording_step(actions):
            obs, rewards, dones, infos = step(actions)
            raw_sum[:] += raw_steps[-1]
            clipped_sum[:] += rewards
            for i, info in enumerate(infos):
                if "episode" in info:
                    games.append((float(raw_sum[i]), float(clipped_sum[i])))
                    raw_sum[i] = clipped_sum[i] = 0.0
            return obs, rewards, dones, infos

        envs.ale.recv = recording_receive
        runner.envs.step = recording_step
        runner.train()
    finally:
        envs.close()
    logged = [value for tag, value, _ in writer.scalars if tag == "episode/return"]
    return {"run_dir": run_dir, "games": games, "logged": logged, "runner": runner}


def test_training_logs_raw_space_invaders_scores_not_clipped_ones(space_invaders_run):
    games, logged = space_invaders_run["games"], space_invaders_run["logged"]
    assert len(games) >= 3, "500-frame games end within the run"
    # What the learner saw was clipped; the scores differ from it in at least one game (for this seed).
    assert any(raw != clipped for raw, clipped in games)
    assert all(raw % 5 == 0 and raw >= 5 * clipped for raw, clipped in games)
    # The logged episode returns are the emulator's raw sums, game for game.
    assert logged == [raw for raw, _ in games]
    assert list(space_invaders_run["runner"].state.episodes.returns) == logged
    rewards = space_invaders_run["runner"].collector.storage.rewards
    assert set(rewards.unique().tolist()) <= {-1.0, 0.0, 1.0}  # while the learner trains on clipped ones


@pytest.mark.parametrize("vec_env", ["ale", "dummy"])
def test_eval_prints_raw_space_invaders_scores(space_invaders_run, monkeypatch, capsys, vec_env):
    """On the env path the agent trained on (ale) and on SB3's (typed --vec-env dummy)."""
    import play
    from ale_vec_env import AleVecEnv

    games: list[list[float]] = []  # each eval env's finished games' raw sums, read from the emulator
    real_make = play.make_eval_envs

    def record_ale(envs):  # the C++ vector env's own rewards, raw, summed per env until its game ends
        receive, step = envs.ale.recv, envs.step
        games.extend([] for _ in range(envs.num_envs))
        raw, totals = [], np.zeros(envs.num_envs)

        def recording_receive():
            out = receive()
            raw.append(np.asarray(out[1], dtype=np.float64).copy())
            return out

        def recording_step(actions):
            out = step(actions)
            totals[:] += raw[-1]
            for i, info in enumerate(out[3]):
                if "episode" in info:
                    games[i].append(float(totals[i]))
                    totals[i] = 0.0
            return out

        envs.ale.recv, envs.step = recording_receive, recording_step

    def record_sb3(envs):
        for env in envs.venv.venv.envs:
            while not isinstance(env, Monitor):
                env = env.env
            emulator = env.env  # under the Monitor and the Atari wrappers' clipping
            games.append([])
            total = [0.0]

            def step(action, emulator_step=emulator.step, mine=games[-1], total=total):
                obs, reward, terminated, truncated, info = emulator_step(action)
                total[0] += float(reward)
                if terminated or truncated:
                    mine.append(total[0])
                    total[0] = 0.0
                return obs, reward, terminated, truncated, info

            emulator.step = step

    def make_recorded(*args, **kwargs):
        envs = real_make(*args, **kwargs)
        assert isinstance(envs, AleVecEnv) == (vec_env == "ale")
        (record_ale if vec_env == "ale" else record_sb3)(envs)
        return envs

    monkeypatch.setattr(play, "make_eval_envs", make_recorded)
    checkpoint = os.path.join(space_invaders_run["run_dir"], "a2c_last")
    typed = [] if vec_env == "ale" else ["--vec-env", vec_env]
    assert (
        cli.main(
            [
                "--no-cuda",
                "--eval",
                "--load",
                checkpoint,
                "--episodes",
                "2",
                "--max-episode-frames",
                "600",
                "--no-cuda",
                "--threads",
                "1",
                "--seed",
                "3",
                *typed,
            ]
        )
        == 0
    )
    scores = [float(s) for s in capsys.readouterr().out.strip().splitlines()[-2].removeprefix("scores: ").split()]
    assert len(scores) == 2 and len(games) == 2
    assert sorted(scores) == sorted(mine[0] for mine in games)  # each env's first game: its share
    assert max(scores) >= 5 and all(s % 5 == 0 for s in scores)  # points, not clipped counts (for this seed)
