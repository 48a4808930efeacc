"""Domain randomization (randomize.py) on the real gymnasium envs: the draws, their seeding, and
that the drawn physics are the physics the env then runs."""

import math

import gymnasium as gym
import numpy as np
import pytest

import randomize
from utils import UsageError

LUNAR_IDS = ("LunarLander-v3", "LunarLanderContinuous-v3")
ALL_IDS = (*LUNAR_IDS, "CartPole-v1")

# The documented ranges, written out here so a change to the table has to change the docs too.
DOCUMENTED = {
    "LunarLander-v3": {"gravity": (-12.0, 0.0), "wind_power": (0.0, 20.0), "turbulence_power": (0.0, 2.0)},
    "CartPole-v1": {"gravity": (5.0, 15.0), "masspole": (0.05, 0.5), "length": (0.25, 1.0)},
}
DOCUMENTED["LunarLanderContinuous-v3"] = DOCUMENTED["LunarLander-v3"]


def draws(env_id, seed, n):
    rng = np.random.default_rng(seed)
    return [randomize.draw(env_id, rng) for _ in range(n)]


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_draws_are_in_the_documented_ranges_and_reproducible(env_id):
    sample = draws(env_id, seed=7, n=300)
    for name, (low, high) in DOCUMENTED[env_id].items():
        values = np.array([physics[name] for physics in sample])
        assert values.min() >= low and values.max() <= high, name
        if name == "gravity" and env_id in LUNAR_IDS:
            assert values.max() < 0.0 and values.min() > -12.0  # gymnasium's strict assertion
        # Spread over the range, not stuck in a corner of it.
        assert values.max() - values.min() > 0.8 * (high - low), name
    assert set(sample[0]) == set(DOCUMENTED[env_id]) | ({"enable_wind"} if env_id in LUNAR_IDS else set())
    if env_id in LUNAR_IDS:
        winds = [physics["enable_wind"] for physics in sample]
        assert all(isinstance(w, bool) for w in winds)
        assert 100 < sum(winds) < 200  # a fair coin over 300 flips
    assert draws(env_id, seed=7, n=300) == sample
    assert draws(env_id, seed=8, n=300) != sample


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_initial_kwargs_differ_between_envs_and_repeat_with_the_seed(env_id):
    kwargs = randomize.initial_kwargs(env_id, num_envs=6, seed=3)
    assert len(kwargs) == 6
    gravities = [k["gravity"] for k in kwargs]
    assert len(set(gravities)) == 6
    assert randomize.initial_kwargs(env_id, num_envs=6, seed=3) == kwargs
    assert randomize.initial_kwargs(env_id, num_envs=6, seed=4) != kwargs
    # The first envs of a larger run draw the same physics as a smaller run's.
    assert randomize.initial_kwargs(env_id, num_envs=8, seed=3)[:6] == kwargs


@pytest.mark.parametrize("env_id", LUNAR_IDS)
def test_lunar_lander_initial_kwargs_are_gym_make_kwargs(env_id):
    for physics in randomize.initial_kwargs(env_id, num_envs=3, seed=11):
        env = gym.make(env_id, **physics)
        env.reset(seed=0)
        lander = env.unwrapped
        assert lander.world.gravity.y == pytest.approx(physics["gravity"], rel=1e-6)
        assert lander.world.gravity.x == 0.0
        for name in ("enable_wind", "wind_power", "turbulence_power"):
            assert getattr(lander, name) == physics[name]
        env.close()


def test_cartpole_constructor_takes_no_physics_so_fixed_physics_applies_them():
    physics = randomize.initial_kwargs("CartPole-v1", num_envs=1, seed=0)[0]
    with pytest.raises(TypeError):
        gym.make("CartPole-v1", **physics)
    env = randomize.FixedPhysics(gym.make("CartPole-v1"), "CartPole-v1", physics)
    for seed in (0, None, None):
        _, info = env.reset(seed=seed)
        assert info["physics"] == physics
        pole = env.unwrapped
        assert (pole.gravity, pole.masspole, pole.length) == (
            physics["gravity"],
            physics["masspole"],
            physics["length"],
        )
        assert pole.total_mass == pytest.approx(physics["masspole"] + 1.0)


@pytest.mark.parametrize("env_id", LUNAR_IDS)
def test_wrapper_gravity_and_wind_are_in_effect_after_each_reset(env_id):
    env = randomize.RandomizedPhysics(gym.make(env_id), env_id, seed=0)
    seen = []
    for seed in (5, None, None, None):
        _, info = env.reset(seed=seed)
        physics = info["physics"]
        assert physics == env.physics
        lander = env.unwrapped
        assert tuple(lander.world.gravity) == pytest.approx((0.0, physics["gravity"]), rel=1e-6)
        for name in ("enable_wind", "wind_power", "turbulence_power"):
            assert getattr(lander, name) == physics[name]
        env.step(env.action_space.sample() * 0)  # a step runs with the new physics
        seen.append(physics["gravity"])
    assert len(set(seen)) == len(seen)  # each episode its own physics
    env.close()


def _lunar_velocity_after(physics, steps=20, seed=0):
    """The lander's (vx, vy) after `steps` steps with the engines off, with `physics` set before reset."""
    env = randomize.FixedPhysics(gym.make("LunarLander-v3"), "LunarLander-v3", physics)
    env.reset(seed=seed)
    for _ in range(steps):
        env.step(0)
    velocity = tuple(env.unwrapped.lander.linearVelocity)
    env.close()
    return velocity


def test_lunar_lander_physics_change_the_flight_in_the_expected_direction():
    calm = {"enable_wind": False, "wind_power": 0.0, "turbulence_power": 0.0}
    _, vy_weak = _lunar_velocity_after({"gravity": -2.0, **calm})
    _, vy_strong = _lunar_velocity_after({"gravity": -11.0, **calm})
    assert vy_strong < vy_weak < 0.0  # falls faster under stronger gravity
    # Same terrain and push (same reset seed); wind on with wind_power 20 moves the lander sideways.
    vx_calm, _ = _lunar_velocity_after({"gravity": -10.0, **calm})
    vx_windy, _ = _lunar_velocity_after(
        {"gravity": -10.0, "enable_wind": True, "wind_power": 20.0, "turbulence_power": 0.0}
    )
    assert abs(vx_windy - vx_calm) > 0.5


def _cartpole_step_by_hand(state, action, gravity, masspole, length, masscart=1.0, force_mag=10.0, tau=0.02):
    """CartPole's equations (Florian 2005, as gymnasium writes them), one Euler step."""
    x, x_dot, theta, theta_dot = state
    force = force_mag if action == 1 else -force_mag
    total_mass = masspole + masscart
    polemass_length = masspole * length
    temp = (force + polemass_length * theta_dot**2 * math.sin(theta)) / total_mass
    thetaacc = (gravity * math.sin(theta) - math.cos(theta) * temp) / (
        length * (4.0 / 3.0 - masspole * math.cos(theta) ** 2 / total_mass)
    )
    xacc = temp - polemass_length * thetaacc * math.cos(theta) / total_mass
    return np.array([x + tau * x_dot, x_dot + tau * xacc, theta + tau * theta_dot, theta_dot + tau * thetaacc])


def test_cartpole_wrapper_recomputes_derived_quantities_and_steps_by_the_drawn_physics():
    env = randomize.RandomizedPhysics(gym.make("CartPole-v1"), "CartPole-v1", seed=0)
    for seed in (1, None, None):
        obs, info = env.reset(seed=seed)
        p = info["physics"]
        pole = env.unwrapped
        assert pole.total_mass == pytest.approx(p["masspole"] + pole.masscart)
        assert pole.polemass_length == pytest.approx(p["masspole"] * p["length"])
        state = np.array(pole.state, dtype=np.float64)
        for action in (1, 0, 1):
            expected = _cartpole_step_by_hand(state, action, p["gravity"], p["masspole"], p["length"])
            default = _cartpole_step_by_hand(state, action, 9.8, 0.1, 0.5)
            obs, *_ = env.step(action)
            assert obs == pytest.approx(expected, rel=1e-5, abs=1e-6)
            assert not np.allclose(obs, default, rtol=1e-5, atol=1e-6)
            state = np.array(pole.state, dtype=np.float64)
    env.close()


def test_wrapper_is_reproducible_from_the_reset_seed():
    def physics_sequence(construct_seed, reset_seed):
        env = randomize.RandomizedPhysics(gym.make("CartPole-v1"), "CartPole-v1", seed=construct_seed)
        sequence = [env.reset(seed=reset_seed)[1]["physics"]] + [env.reset()[1]["physics"] for _ in range(4)]
        env.close()
        return sequence

    first = physics_sequence(0, 42)
    assert physics_sequence(99, 42) == first  # the reset's seed decides
    assert physics_sequence(0, 43) != first
    assert len({p["gravity"] for p in first}) == 5
    # Without a seeded reset, the constructor's seed decides.
    assert physics_sequence(1, None) == physics_sequence(1, None) != physics_sequence(2, None)


def test_physics_stream_is_not_the_envs_own_stream():
    env = randomize.RandomizedPhysics(gym.make("CartPole-v1"), "CartPole-v1")
    env.reset(seed=0)
    env_draw = np.random.default_rng(0).uniform(5.0, 15.0)  # what the env's own np_random would give
    assert env.physics["gravity"] != pytest.approx(env_draw)


def test_vector_env_reports_each_envs_physics():
    envs = gym.vector.SyncVectorEnv(
        [
            lambda i=i: randomize.RandomizedPhysics(gym.make("LunarLander-v3"), "LunarLander-v3", seed=i)
            for i in range(3)
        ]
    )
    _, infos = envs.reset(seed=[10, 11, 12])
    gravities = infos["physics"]["gravity"]
    assert len(set(gravities.tolist())) == 3
    for i, sub in enumerate(envs.envs):
        assert sub.unwrapped.world.gravity.y == pytest.approx(gravities[i], rel=1e-6)
    envs.close()


def test_check_randomizable_names_the_known_envs_in_one_line():
    for env_id in ALL_IDS:
        randomize.check_randomizable(env_id)
    with pytest.raises(UsageError) as caught:
        randomize.check_randomizable("Pendulum-v1")
    message = str(caught.value)
    assert message == (
        "--randomize-domain knows LunarLander-v3, LunarLanderContinuous-v3, CartPole-v1; not Pendulum-v1"
    )
    assert "\n" not in message
    with pytest.raises(UsageError):
        randomize.draw("Pendulum-v1", np.random.default_rng(0))
    with pytest.raises(UsageError):
        randomize.RandomizedPhysics(gym.make("Pendulum-v1"), "Pendulum-v1")


def test_grid_and_cell_kwargs_for_lunar_lander():
    names, values = randomize.grid("LunarLander-v3")
    assert names == ("gravity", "wind_power")
    assert values == ((-11.0, -9.0, -7.0, -5.0, -3.0, -1.0), (0.0, 5.0, 10.0, 15.0, 20.0))
    cell = randomize.cell_kwargs("LunarLander-v3", gravity=-7.0, wind_power=15.0)
    assert cell == {"gravity": -7.0, "enable_wind": True, "wind_power": 15.0, "turbulence_power": 0.0}
    env = gym.make("LunarLander-v3", **cell)  # a cell is valid gym.make kwargs
    env.reset(seed=0)
    assert env.unwrapped.world.gravity.y == pytest.approx(-7.0)
    env.close()
    with pytest.raises(UsageError, match="no randomized physics masspole"):
        randomize.cell_kwargs("LunarLander-v3", gravity=-7.0, masspole=0.2)


def test_grid_and_cell_kwargs_for_cartpole():
    names, values = randomize.grid("CartPole-v1")
    assert names == ("gravity", "length")
    assert values == ((5.0, 7.5, 10.0, 12.5, 15.0), (0.25, 0.5, 0.75, 1.0))
    cell = randomize.cell_kwargs("CartPole-v1", gravity=12.5, length=0.75)
    assert cell == {"gravity": 12.5, "masspole": 0.1, "length": 0.75}
    env = randomize.FixedPhysics(gym.make("CartPole-v1"), "CartPole-v1", cell)
    env.reset(seed=0)
    assert env.unwrapped.polemass_length == pytest.approx(0.075)
    env.close()
