"""The two env paths agree: SB3's Atari wrappers (dummy) and ale-py's C++ vector env (ale).

Random play on real games: same spaces and dtypes; rewards clipped for learning while the
logged returns are raw full-game scores; a life loss ends the learning episode but not the
logged game; time limits are truncations with a terminal observation; seeds reproduce.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from config import Config
from envs import make_vec_env

PATHS = ["dummy", "ale"]


def play_games(
    env_name: str,
    vec_env: str,
    games: int,
    num_envs: int = 2,
    seed: int = 0,
    max_episode_frames=None,
    max_steps: int = 20_000,
):
    """Random play until ``games`` full games end; per game: raw score, frames, learning dones, clipped reward sum."""
    envs = make_vec_env(env_name, num_envs, seed=seed, vec_env=vec_env, max_episode_frames=max_episode_frames)
    rng = np.random.default_rng(seed)
    envs.reset()
    dones_in_game = np.zeros(num_envs, dtype=int)
    clipped_in_game = np.zeros(num_envs)
    rewards_seen: set[float] = set()
    results, truncations = [], []
    try:
        for _ in range(max_steps):
            _, rewards, dones, infos = envs.step(rng.integers(envs.action_space.n, size=num_envs))
            rewards_seen |= set(rewards.tolist())
            clipped_in_game += rewards
            dones_in_game += dones
            for i, info in enumerate(infos):
                if info.get("TimeLimit.truncated"):
                    truncations.append(info)
                if "episode" in info:
                    results.append(
                        dict(
                            score=info["episode"]["r"],
                            frames=info["episode"]["l"],
                            dones=int(dones_in_game[i]),
                            clipped=float(clipped_in_game[i]),
                            truncated=bool(info.get("TimeLimit.truncated")),
                        )
                    )
                    dones_in_game[i], clipped_in_game[i] = 0, 0.0
            if len(results) >= games:
                break
    finally:
        envs.close()
    return results, rewards_seen, truncations


@pytest.mark.parametrize("env_name", ["PongNoFrameskip-v4", "ALE/Breakout-v5"])
def test_paths_have_the_same_spaces(env_name):
    spaces = []
    for vec_env in PATHS:
        envs = make_vec_env(env_name, 2, seed=0, vec_env=vec_env)
        obs = envs.reset()
        spaces.append(
            (
                obs.shape,
                obs.dtype,
                envs.observation_space.shape,
                envs.observation_space.dtype,
                envs.action_space.n,
                envs.num_envs,
            )
        )
        envs.close()
    assert spaces[0] == spaces[1]
    assert spaces[0][:2] == ((2, 4, 84, 84), np.uint8)


@pytest.mark.parametrize("vec_env", PATHS)
def test_logged_returns_are_raw_full_game_scores(vec_env):
    # Space Invaders: 3 lives; each alien is worth 5 to 30 points (the mothership 200), clipped to 1.
    results, rewards_seen, _ = play_games("SpaceInvadersNoFrameskip-v4", vec_env, games=2)
    assert len(results) >= 2
    assert rewards_seen <= {-1.0, 0.0, 1.0}
    for game in results:
        assert game["dones"] == 3, "each of the 3 lives ends a learning episode; only the last ends the game"
        assert game["score"] % 5 == 0
        assert game["score"] >= 5 * game["clipped"] > 0, "the logged score is the raw sum, not the clipped one"
        assert game["score"] > game["clipped"]
        # Frame skip 4: a game of n agent steps lasts about 4n emulator frames (plus no-op starts).
        assert game["frames"] >= 4 * 100


@pytest.mark.parametrize("vec_env", PATHS)
def test_breakout_game_spans_five_lives(vec_env):
    results, _, _ = play_games("BreakoutNoFrameskip-v4", vec_env, games=2)
    assert len(results) >= 2 and [g["dones"] for g in results] == [5] * len(results)


@pytest.mark.parametrize("vec_env", PATHS)
def test_time_limit_is_a_truncation_with_terminal_observation(vec_env):
    results, _, truncations = play_games("PongNoFrameskip-v4", vec_env, games=2, max_episode_frames=200)
    assert truncations and len(results) >= 2, "the 200-frame cap must truncate Pong games"
    for info in truncations:
        assert info["terminal_observation"].shape == (4, 84, 84)
        assert info["terminal_observation"].dtype == np.uint8
    for game in results:
        assert game["truncated"] and game["dones"] == 1
        assert 200 <= game["frames"] < 200 + 4 + 30 * 4, "cut at the cap, give or take one frame-skip and no-op starts"


@pytest.mark.parametrize("vec_env", PATHS)
def test_a_time_limit_beyond_the_games_own_cap_leaves_that_cap(vec_env):
    # An id whose own cap is 240 frames (Pong's is 108,000, too long to play out in a test).
    env_id = "PongCappedNoFrameskip-v0"
    if env_id not in gym.registry:
        gym.register(
            env_id,
            entry_point="ale_py.env:AtariEnv",
            kwargs={**gym.registry["PongNoFrameskip-v4"].kwargs, "max_num_frames_per_episode": 240},
        )
    results, _, _ = play_games(env_id, vec_env, games=2, max_episode_frames=1_000)
    assert len(results) >= 2
    for game in results:
        assert game["truncated"] and 240 <= game["frames"] < 240 + 4 + 30 * 4, (
            "the id's cap, not 1,000 (plus no-op starts)"
        )


def test_ale_path_same_seed_same_games_other_seed_other_games():
    def observations(seed):
        envs = make_vec_env("BreakoutNoFrameskip-v4", 2, seed=seed, vec_env="ale")
        frames = [envs.reset()]
        rng = np.random.default_rng(0)
        for _ in range(30):
            frames.append(envs.step(rng.integers(4, size=2))[0])
        envs.close()
        return np.stack(frames)

    a, b, c = observations(3), observations(3), observations(4)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_runner_trains_on_the_ale_path(make_runner, tmp_path):
    config = Config(
        num_envs=2, num_updates=30, vec_env="ale", max_episode_frames=200, tensorboard=False, progress=False, seed=5
    )
    runner = make_runner(config, tmp_path)
    state = runner.train()
    assert state.step == 30 * config.steps_per_update
    assert state.episodes.count > 0, "200-frame games end within the run and are logged"
    assert all(np.isfinite(h["total"]) for h in runner.history)


def test_subproc_path_plays_the_same_games_as_dummy():
    # The same SB3 wrappers, one process per env: the same seeds give the same frames and rewards.
    def play(vec_env):
        envs = make_vec_env("BreakoutNoFrameskip-v4", 2, seed=5, vec_env=vec_env, max_episode_frames=400)
        try:
            frames, rewards, dones = [envs.reset()], [], []
            rng = np.random.default_rng(0)
            for _ in range(120):
                obs, reward, done, _ = envs.step(rng.integers(4, size=2))
                frames.append(obs)
                rewards.append(reward)
                dones.append(done)
        finally:
            envs.close()
        return np.stack(frames), np.stack(rewards), np.stack(dones)

    dummy, subproc = play("dummy"), play("subproc")
    assert dummy[2].any()  # an episode ended within the 120 steps, so resets are compared too
    for a, b in zip(dummy, subproc):
        np.testing.assert_array_equal(a, b)
