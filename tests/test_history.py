"""What the policy sees of a vector-observation env besides its observation (``gym_vec_env.ObservationWindow``,
``--obs-history``, ``--prev-action-reward``): the layout worked by hand, the reset, the vector env's
same-step autoreset, and a run that trains, plays, resumes and refuses what it cannot take."""

from __future__ import annotations

import glob

import gymnasium as gym
import numpy as np
import pytest

import main
from gym_vec_env import GymVecEnv, ObservationWindow


def test_the_layout_newest_first_with_the_last_action_and_reward():
    env = ObservationWindow(gym.make("CartPole-v1"), length=3, actions_rewards=True)
    assert env.observation_space.shape == (3 * 4 + 2 + 1,)
    obs0, _ = env.reset(seed=0)
    first = obs0[:4]
    assert np.array_equal(obs0, np.concatenate([first, np.zeros(8), [0, 0], [0]]).astype(np.float32))
    obs1, reward, *_ = env.step(1)
    assert np.array_equal(obs1[4:8], first) and np.array_equal(obs1[8:12], np.zeros(4))
    assert list(obs1[12:]) == [0.0, 1.0, reward]  # pushed right, one-hot; CartPole pays 1 a step
    obs2, *_ = env.step(0)
    assert np.array_equal(obs2[4:8], obs1[:4]) and np.array_equal(obs2[8:12], first)
    assert list(obs2[12:14]) == [1.0, 0.0]
    assert env.observation_space.contains(obs2)
    again, _ = env.reset(seed=1)  # a new episode forgets the last one
    assert np.array_equal(again[4:], np.zeros(11))


def test_a_continuous_action_is_seen_as_sent():
    env = ObservationWindow(gym.make("Pendulum-v1"), length=1, actions_rewards=True)
    assert env.observation_space.shape == (3 + 1 + 1,)
    env.reset(seed=0)
    obs, reward, *_ = env.step(np.array([0.5], np.float32))
    assert obs[3] == 0.5 and obs[4] == pytest.approx(reward)


def test_the_vector_env_ends_an_episode_with_its_own_history_and_starts_the_next_clean():
    envs = GymVecEnv("CartPole-v1", 1, seed=0, observation_window=(2, True))
    obs = envs.reset()
    assert obs.shape == (1, 2 * 4 + 3)
    previous = obs[0, :4]
    while True:
        obs, rewards, dones, infos = envs.step(np.array([0]))
        if dones[0]:
            break
        previous = obs[0, :4]
    final = infos[0]["terminal_observation"]
    assert np.array_equal(final[4:8], previous) and list(final[8:]) == [1.0, 0.0, 1.0]
    assert np.array_equal(obs[0, 4:], np.zeros(7))  # the next episode's first observation
    envs.close()


def test_a_run_with_a_history_trains_plays_and_keeps_it(tmp_path, capsys):
    flags = ["--num-updates", "1", "--num-envs", "2", "--threads", "1", "--no-cuda", "--no-progress"]
    assert (
        main.main(
            [
                "--env-name",
                "CartPole-v1",
                "--obs-history",
                "2",
                "--prev-action-reward",
                "--log-dir",
                str(tmp_path),
                *flags,
            ]
        )
        == 0
    )
    run_dir = glob.glob(f"{tmp_path}/CartPole-v1_*")[0]
    assert main.main(["--eval", "--load", f"{run_dir}/a2c_last", "--episodes", "2", "--no-cuda"]) == 0
    assert "episodes: 2" in capsys.readouterr().out
    assert main.main(["--resume", f"{run_dir}/a2c_last", "--obs-history", "3", "--num-updates", "2", "--no-cuda"]) == 2
    assert "--obs-history" in capsys.readouterr().err
    assert (
        main.main(["--env-name", "PongNoFrameskip-v4", "--obs-history", "2", "--log-dir", str(tmp_path), "--no-cuda"])
        == 2
    )
    assert "are for vector observations" in capsys.readouterr().err
