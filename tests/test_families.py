"""An env family plugs in as one record (families.py): a small family registered here, with a factory,
defaults and device of its own, trains, evaluates and refuses what it does not have through main.py."""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest

import main as cli
from envs import family_of, make_vec_env
from families import EnvFamily, register_family, unregister_family
from gym_vec_env import GymVecEnv

ENV_ID = "tests/Corridor-v0"
LENGTH = 6


class Corridor(gym.Env):
    """Walk right (action 1) to the end of a corridor of ``LENGTH`` cells: reward 1 there; each step costs 0.01."""

    observation_space = gym.spaces.Box(0.0, 1.0, (LENGTH,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = 0
        return self._obs(), {}

    def step(self, action):
        self.cell = max(0, self.cell + (1 if action == 1 else -1))
        done = self.cell == LENGTH - 1
        return self._obs(), (1.0 if done else -0.01), done, False, {}

    def _obs(self):
        obs = np.zeros(LENGTH, np.float32)
        obs[self.cell] = 1.0
        return obs


class Calls:
    def __init__(self):
        self.train, self.eval = [], []


@pytest.fixture
def corridor():
    """The corridor family, registered for one test: it records the envs its factories make."""
    calls = Calls()

    def make_envs(env_name, num_envs, n_stack, seed, vec_env, max_episode_frames, env_kwargs=None, **_):
        calls.train.append(num_envs)
        return GymVecEnv(env_name, num_envs, seed, "sync", env_kwargs, max_episode_frames)

    def make_eval_envs(env_name, num_envs, seed, protocol, *, max_episode_frames, **_):
        calls.eval.append(protocol)
        return GymVecEnv(env_name, num_envs, seed, "sync", None, max_episode_frames)

    gym.register(ENV_ID, entry_point=Corridor, max_episode_steps=50)
    register_family(
        EnvFamily(
            name="corridor",
            label="corridors",
            owns=lambda env_name: env_name.startswith("tests/Corridor"),
            observes="vectors",
            make_envs=make_envs,
            make_eval_envs=make_eval_envs,
            check=lambda env_name: False,
            defaults=lambda env_name: {"num_envs": 3, "rollout_size": 4, "num_updates": 5, "recurrent": False},
        )
    )
    try:
        yield calls
    finally:
        unregister_family("corridor")
        del gym.registry[ENV_ID]


def test_the_family_that_owns_an_id_is_found_and_the_built_in_ones_keep_theirs(corridor):
    assert family_of(ENV_ID).name == "corridor"
    assert family_of("CartPole-v1").name == "vector"  # asked first, the new family takes only its own ids
    assert family_of("PongNoFrameskip-v4").name == "atari"
    envs = make_vec_env(ENV_ID, 2, seed=1)
    try:
        assert envs.observation_space.shape == (LENGTH,) and corridor.train == [2]
    finally:
        envs.close()


def test_a_registered_family_trains_and_evaluates_with_its_own_factory_and_defaults(corridor, tmp_path, capsys):
    flags = ["--no-cuda", "--no-progress", "--no-tensorboard", "--threads", "1", "--eval-interval", "0"]
    assert cli.main(["--env-name", ENV_ID, "--seed", "2", "--log-dir", str(tmp_path), *flags]) == 0
    (run,) = os.listdir(tmp_path)
    with open(tmp_path / run / "config.json") as f:
        config = json.load(f)
    assert (config["num_envs"], config["rollout_size"], config["num_updates"]) == (3, 4, 5)  # the family's defaults
    assert config["sticky_actions"] is None  # no emulator: nothing to resolve
    assert corridor.train == [3]
    assert "protocol:" not in capsys.readouterr().out  # no sticky actions to name

    last = str(tmp_path / run / "a2c_last")
    assert cli.main(["--eval", "--load", last, "--episodes", "2", "--no-cuda", "--threads", "1"]) == 0
    assert [protocol.repeat_action_probability for protocol in corridor.eval] == [0.0]  # the classic protocol
    assert "mean" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--sticky-actions", "0.1"], f"--sticky-actions is for Atari games; {ENV_ID} has no emulator"),
        (["--frame-size", "64"], f"--frame-size is the size of an Atari frame; {ENV_ID} observes vectors"),
        (["--preset", "fast-cpu"], f"--preset fast-cpu is for Atari games, not {ENV_ID}"),
    ],
)
def test_what_the_family_does_not_have_is_refused_in_one_line(corridor, tmp_path, capsys, flags, message):
    code = cli.main(["--env-name", ENV_ID, "--no-cuda", "--log-dir", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == [] and corridor.train == []  # refused before anything was made


def test_a_protocol_the_family_does_not_play_is_refused(corridor):
    from envs import make_eval_envs
    from utils import UsageError

    with pytest.raises(UsageError, match=f"--protocol machado is for Atari games, not {ENV_ID}"):
        make_eval_envs(ENV_ID, 1, 0, "machado")
