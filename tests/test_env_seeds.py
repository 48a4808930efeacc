"""Seeding of an Atari vector env: env i of a vector seeded s plays the game that env 0 of a vector
seeded s + i plays, on both env paths. (The same for gymnasium's vector envs: tests/test_vector_envs.py;
the seeds a run makes: tests/test_cli.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from envs import make_vec_env


@pytest.mark.parametrize("vec_env", ["ale", "dummy"])
def test_each_env_of_a_vector_plays_its_own_seed(vec_env):
    """Env i of a vector seeded s plays the game of env 0 of a vector seeded s + i: under the same
    actions the envs of one vector play different games, each the one its own seed gives."""

    def play(seed: int, num_envs: int) -> np.ndarray:
        envs = make_vec_env("PongNoFrameskip-v4", num_envs, seed=seed, vec_env=vec_env)
        try:
            frames = [envs.reset()]
            rng = np.random.default_rng(0)
            for _ in range(40):
                frames.append(envs.step(np.full(num_envs, rng.integers(envs.action_space.n)))[0])
        finally:
            envs.close()
        return np.stack(frames)

    both, second = play(7, 2), play(8, 1)
    assert not np.array_equal(both[:, 0], both[:, 1])  # the same actions, different games
    np.testing.assert_array_equal(both[:, 1], second[:, 0])
