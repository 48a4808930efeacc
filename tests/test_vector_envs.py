"""Vector-observation envs: gymnasium's vector envs behind the runner's interface (same-step
autoreset, no fake transition, time limits told from terminations, per-env seeds and kwargs,
continuous actions clipped only on their way to the env), the MLP encoder and the Gaussian
policy, short training runs through ``main.py``, and videos of their rendered frames."""

from __future__ import annotations

import glob
import json
import math
import os
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.testing import assert_close

import checkpoints
import main as cli
from envs import action_size, make_eval_envs, make_vec_env
from gym_vec_env import GymVecEnv
from model import build_model
from nets.encoders import MLPEncoder
from storage import RolloutStorage
from video import GameRecorder

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_same_step_autoreset_gives_the_next_episodes_first_obs_and_no_fake_transition():
    """CartPole pushed one way falls within a few steps: at the step that ends it, ``done`` comes
    with the next episode's first observation (the reset of env i's own stream) and the last one
    in ``terminal_observation``; the steps between two ends add up to the reported length and
    return, so no step belongs to no episode."""
    venv = GymVecEnv("CartPole-v1", 2, seed=7)
    try:
        obs = venv.reset()
        reference = [gym.make("CartPole-v1") for _ in range(2)]
        first = [env.reset(seed=7 + i)[0] for i, env in enumerate(reference)]
        assert_close(torch.as_tensor(obs), torch.as_tensor(np.stack(first)))  # env i seeded with seed + i
        lengths, ends = np.zeros(2, int), []
        for _ in range(60):
            obs, rewards, dones, infos = venv.step(np.array([0, 1]))
            assert rewards.dtype == np.float32 and (rewards == 1.0).all()
            lengths += 1
            for i in np.flatnonzero(dones):
                info = infos[i]
                assert info["TimeLimit.truncated"] is False  # the pole fell: a termination
                assert info["episode"] == {"r": float(lengths[i]), "l": int(lengths[i])}
                terminal = info["terminal_observation"]
                assert abs(terminal[2]) > 0.2 or abs(terminal[0]) > 2.4  # fallen (or off the track)
                assert np.abs(obs[i]).max() <= 0.05  # a fresh start: every state in [-0.05, 0.05]
                ends.append(int(lengths[i]))
                lengths[i] = 0
            for i in np.flatnonzero(~dones):
                assert "terminal_observation" not in infos[i] and "episode" not in infos[i]
        assert len(ends) >= 4
    finally:
        venv.close()


def test_time_limit_is_a_truncation_with_the_true_final_observation():
    venv = GymVecEnv("Pendulum-v1", 2, seed=3, max_episode_steps=5)
    try:
        venv.reset()
        for step in range(5):
            obs, _, dones, infos = venv.step(np.zeros((2, 1), np.float32))
            assert dones.all() == (step == 4)
        for i in range(2):
            assert infos[i]["TimeLimit.truncated"] is True
            assert infos[i]["episode"]["l"] == 5
            assert not np.allclose(infos[i]["terminal_observation"], obs[i])
    finally:
        venv.close()


def test_per_env_kwargs_and_continuous_actions_clipped_on_the_way_to_the_env():
    """Env i gets ``env_kwargs[i]``; an action beyond the bounds reaches Pendulum clipped (same
    reward as the bound itself, from the same seed)."""
    venv = GymVecEnv("Pendulum-v1", 2, seed=11, env_kwargs=[{"g": 10.0}, {"g": 2.0}])
    bounded = GymVecEnv("Pendulum-v1", 2, seed=11, env_kwargs=[{"g": 10.0}, {"g": 2.0}])
    try:
        assert venv.get_attr("g") == [10.0, 2.0]
        venv.reset(), bounded.reset()
        _, far, _, _ = venv.step(np.array([[10.0], [-7.0]], np.float32))
        _, edge, _, _ = bounded.step(np.array([[2.0], [-2.0]], np.float32))
        assert_close(torch.as_tensor(far), torch.as_tensor(edge))
    finally:
        venv.close(), bounded.close()


def test_factory_refuses_what_the_agent_cannot_play():
    from utils import UsageError

    with pytest.raises(UsageError, match="flat Box observations"):
        make_vec_env("FrozenLake-v1", 2)
    with pytest.raises(UsageError, match="non-Atari"):
        make_vec_env("PongNoFrameskip-v4", 2, env_kwargs=[{}, {}])
    assert action_size(gym.spaces.Discrete(3)) == (3, False)
    assert action_size(gym.spaces.Box(-1, 1, (2,))) == (2, True)
    with pytest.raises(UsageError, match="not supported"):
        action_size(gym.spaces.MultiDiscrete([2, 2]))


def test_vectors_get_the_mlp_and_box_actions_a_gaussian_worked_by_hand():
    """log N(a; mu, sigma) summed over dimensions: -sum((a - mu)^2 / (2 sigma^2) + log sigma + log(2 pi) / 2)."""
    torch.manual_seed(0)
    model = build_model((3,), 2, recurrent=False, continuous=True)
    assert isinstance(model.encoder, MLPEncoder) and model.policy.linear.out_features == 2
    with torch.no_grad():
        model.policy.log_std.copy_(torch.tensor([0.0, math.log(2.0)]))
    mean = torch.tensor([[0.5, -1.0]])
    with torch.no_grad():
        dist = model.distribution(mean)
    action = torch.tensor([[1.5, 1.0]])
    # dim 0: (1)^2/2 + 0 + .918939 = 1.418939; dim 1: (2)^2/8 + .693147 + .918939 = 2.112086
    assert float(dist.log_prob(action)) == pytest.approx(-(1.418939 + 2.112086), abs=1e-5)
    # entropy of a Gaussian: log sigma + (1 + log 2 pi) / 2 per dimension
    assert float(dist.entropy()) == pytest.approx(2 * 1.418939 + math.log(2.0), abs=1e-5)
    assert_close(model.mode(mean), mean)
    logits = torch.tensor([[0.1, 2.0, -1.0]])
    discrete = build_model((3,), 3, recurrent=False)
    assert discrete.mode(logits).tolist() == [1]
    assert_close(discrete.distribution(logits).log_prob(torch.tensor([1])), torch.log_softmax(logits, -1)[:, 1])
    storage = RolloutStorage(4, 2, (3,), obs_dtype=torch.float32, action_shape=(2,))
    assert storage.actions.shape == (4, 2, 2) and storage.actions.dtype == torch.float32


@pytest.mark.parametrize(
    "env_name, flags",
    [
        ("CartPole-v1", ["--recurrent", "--eval-interval", "30", "--eval-episodes", "2"]),
        ("Pendulum-v1", ["--no-recurrent", "--vec-env", "async"]),
    ],
)
def test_training_a_vector_env_through_main(tmp_path, env_name, flags):
    """A short run writes its checkpoints and logs its episodes; a2c_last resumes and plays --eval."""
    argv = [
        "--env-name",
        env_name,
        "--num-envs",
        "4",
        "--num-updates",
        "60",
        "--no-progress",
        "--no-cuda",
        "--threads",
        "1",
        "--max-episode-frames",
        "50",
        "--log-dir",
        str(tmp_path),
        *flags,
    ]
    assert cli.main(argv) == 0
    (run_dir,) = glob.glob(str(tmp_path / f"{env_name}_*"))
    last = checkpoints.load_checkpoint(os.path.join(run_dir, "a2c_last"))
    assert last["update"] == 60
    assert last["model_spec"]["obs_shape"] == list(gym.make(env_name).observation_space.shape)
    assert last["model_spec"]["continuous"] is (env_name == "Pendulum-v1")
    assert last["episode_returns"], "episodes of 50 steps must have ended within 240 steps an env"
    assert os.path.exists(os.path.join(run_dir, "a2c_best_loss"))
    assert os.path.exists(os.path.join(run_dir, "a2c_best_eval")) == ("--eval-interval" in flags)
    assert cli.main(["--no-cuda", "--resume", os.path.join(run_dir, "a2c_last"), "--num-updates", "70"]) == 0
    assert checkpoints.load_checkpoint(os.path.join(run_dir, "a2c_last"))["update"] == 70
    out = tmp_path / "eval.json"
    assert (
        cli.main(
            [
                "--no-cuda",
                "--eval",
                "--load",
                os.path.join(run_dir, "a2c_last"),
                "--episodes",
                "3",
                "--deterministic",
                "--max-episode-frames",
                "40",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert len(result["scores"]) == 3 and all(1 <= n <= 40 for n in result["lengths"])
    assert result["max_episode_frames"] == 40 and result["env_name"] == env_name
    assert cli.main(["--no-cuda", "--eval", "--load", os.path.join(run_dir, "a2c_last"), "--protocol", "machado"]) == 2


def test_mlp_width_and_log_std_init_shape_the_network_and_checkpoints_keep_them(tmp_path):
    """--mlp-width sets both MLPs' layers (actor's and critic's), --log-std-init the Gaussian's
    starting std; a checkpoint rebuilds the same widths, and one saved without a width (before
    the flag) still loads as the 64-unit network it was."""
    argv = [
        "--env-name",
        "Pendulum-v1",
        "--num-envs",
        "2",
        "--num-updates",
        "1",
        "--no-progress",
        "--no-cuda",
        "--threads",
        "1",
        "--mlp-width",
        "32",
        "--log-std-init",
        "-2",
        "--no-sde",
        "--log-dir",
        str(tmp_path),
    ]
    assert cli.main(argv) == 0
    (run_dir,) = glob.glob(str(tmp_path / "Pendulum-v1_*"))
    data = checkpoints.load_checkpoint(os.path.join(run_dir, "a2c_last"))
    assert data["model_spec"]["mlp_width"] == 32
    weights = data["model"]
    assert weights["encoder.layers.0.weight"].shape == (32, 3) and weights["encoder.layers.2.weight"].shape == (32, 32)
    assert weights["critic.encoder.layers.2.weight"].shape == (32, 32) and weights["policy.linear.weight"].shape == (
        1,
        32,
    )
    # One update of RMSprop moves the log-std by about lr at most from where it started.
    assert float(weights["policy.log_std"]) == pytest.approx(-2.0, abs=0.01)
    assert build_model((3,), 1, recurrent=False, continuous=True).policy.log_std.tolist() == [0.0]
    old_spec = {k: v for k, v in data["model_spec"].items() if k != "mlp_width"}
    assert build_model(**old_spec).encoder.out_features == 64
    # Both shape the network a run starts with: a resumed run keeps its own.
    assert cli.main(["--no-cuda", "--resume", os.path.join(run_dir, "a2c_last"), "--mlp-width", "64"]) == 2
    assert cli.main(["--no-cuda", "--resume", os.path.join(run_dir, "a2c_last"), "--log-std-init", "0"]) == 2


def test_state_dependent_exploration_by_hand():
    """--sde: action j's spread in a state is sqrt(sum_i f_i^2 exp(log_std[i, j])^2 + 1e-6), f the
    actor's features; over a rollout env i acts mean + f @ W_i with W_i drawn once, so the same
    features give the same noise, and every action's log-prob is under that spread."""
    from agent import A2CAgent

    torch.manual_seed(0)
    model = build_model((3,), 2, recurrent=False, continuous=True, sde=True, mlp_width=2)
    assert model.spec["sde"] and model.policy.log_std.shape == (2, 2)
    with torch.no_grad():
        model.policy.log_std.copy_(torch.log(torch.tensor([[1.0, 2.0], [3.0, 0.5]])))
    out = torch.tensor([[0.5, -1.0, 0.6, 0.8]])  # mean (0.5, -1.0), features (0.6, 0.8)
    dist = model.distribution(out)
    # spreads: sqrt(.36 * 1 + .64 * 9) = sqrt(6.12), sqrt(.36 * 4 + .64 * .25) = sqrt(1.6)
    assert_close(dist.base_dist.scale, torch.tensor([[6.12, 1.6]]).add(1e-6).sqrt())
    action = torch.tensor([[1.5, 1.0]])
    by_hand = sum(
        -((a - m) ** 2) / (2 * v) - 0.5 * math.log(2 * math.pi * v)
        for a, m, v in [(1.5, 0.5, 6.120001), (1.0, -1.0, 1.600001)]
    )
    assert float(dist.log_prob(action).detach()) == pytest.approx(by_hand, abs=1e-5)
    assert_close(model.mode(out), out[:, :2])
    agent = A2CAgent(model)
    agent.draw_exploration(1)
    assert agent.exploration.shape == (1, 2, 2)
    first, again = agent.sample(dist, out), agent.sample(dist, out)
    assert_close(first, again)  # the rollout's weights: same state, same action
    assert_close(first, out[:, :2] + out[:, 2:] @ agent.exploration[0])
    agent.draw_exploration(1)
    assert not torch.allclose(agent.sample(dist, out), first)
    # The features are detached: the spread trains log_std only, not the encoder through it.
    obs = torch.randn(4, 3)
    logits, _, _ = model(obs, (), torch.zeros(4))
    model.distribution(logits).entropy().sum().backward()
    assert model.policy.log_std.grad.abs().sum() > 0 and model.encoder.layers[0].weight.grad.abs().sum() == 0


def test_cartpole_learns(tmp_path):
    """The vector path learns, not only runs: a feed-forward agent lifts CartPole's mean return
    well above random play (about 22) within 32,000 env steps."""
    argv = [
        "--env-name",
        "CartPole-v1",
        "--num-envs",
        "8",
        "--num-updates",
        "800",
        "--no-recurrent",
        "--optimizer",
        "adam",
        "--lr",
        "1e-3",
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
    assert np.mean(returns[-50:]) > 45, returns[-50:]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env-name", "CartPole-v1", "--icm"], "--icm works on Atari games only"),
        (["--env-name", "FrozenLake-v1"], "flat Box observations"),
        (["--env-name", "CartPole-v1", "--log-std-init", "-1"], "--log-std-init is for continuous actions"),
        (["--env-name", "CartPole-v1", "--sde"], "--sde is for continuous actions"),
        (["--env-name", "PongNoFrameskip-v4", "--mlp-width", "128"], "--mlp-width is the width of the MLP"),
    ],
)
def test_bad_vector_env_input_is_one_line(one_line_error, tmp_path, argv, message):
    assert message in one_line_error([*argv, "--log-dir", str(tmp_path)])


# ------------------------------------------------------------------------------------------------ video
def decoded(path: str) -> tuple[int, tuple[int, int], float, str, list[np.ndarray]]:
    """(frames, (width, height), fps, codec, the first frame) of a video, as ffmpeg decodes it."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(path)
    meta = next(reader)
    width, height = meta["size"]
    first = np.frombuffer(next(reader), np.uint8).reshape(height, width, 3)
    reader.close()
    frames, _ = imageio_ffmpeg.count_frames_and_secs(path)
    return frames, (width, height), meta["fps"], meta["codec"], first


def test_eval_of_a_saved_cartpole_agent_records_its_rendered_games(tmp_path):
    """``--video`` plays a non-Atari env in one process with its rendered frames: one H.264 file a
    game, numbered across envs, holding the frame after the reset and after each step (l + 1),
    at the render's size (CartPole: 600 x 400) and rate (50 fps)."""
    argv = [
        "--env-name",
        "CartPole-v1",
        "--num-envs",
        "2",
        "--rollout-size",
        "5",
        "--num-updates",
        "3",
        "--no-progress",
        "--no-cuda",
        "--threads",
        "1",
        "--no-tensorboard",
        "--log-dir",
        str(tmp_path / "runs"),
    ]
    assert cli.main(argv) == 0
    (run_dir,) = glob.glob(str(tmp_path / "runs" / "CartPole-v1_*"))
    videos, out = tmp_path / "videos" / "new", tmp_path / "eval.json"  # a missing folder is made
    assert (
        cli.main(
            [
                "--no-cuda",
                "--eval",
                "--load",
                os.path.join(run_dir, "a2c_last"),
                "--episodes",
                "2",
                "--max-episode-frames",
                "40",
                "--video",
                str(videos),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    files = sorted(os.listdir(videos))
    names = [re.fullmatch(r"env(\d\d)_episode(\d{3})_score(\d+)\.mp4", name) for name in files]
    assert all(names) and [(m[1], m[2]) for m in names] == [("00", "001"), ("01", "002")], files  # shares 1, 1
    found = []
    for name, match in zip(files, names):
        frames, size, fps, codec, _ = decoded(str(videos / name))
        assert (size, fps, codec) == ((600, 400), 50.0, "h264")
        found.append((float(match[3]), frames))
    # CartPole scores a point a step: a game of l steps scores l and gives l + 1 frames.
    assert sorted(found) == sorted((score, length + 1) for score, length in zip(result["scores"], result["lengths"]))
    assert result["video_dir"] == os.path.abspath(videos)


def test_an_odd_sized_render_encodes_padded_to_even_and_machado_is_refused(tmp_path):
    """A 5 x 7 render is written 6 x 8 (its last row and column repeated, not rescaled), at 30 fps
    when the env names no rate; a game cut short leaves no file."""

    class Tiny(gym.Env):
        metadata = {"render_modes": ["rgb_array"]}
        observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)
        render_mode = "rgb_array"

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros(1, np.float32), {}

        def step(self, action):
            self.t += 1
            return np.zeros(1, np.float32), 2.0, self.t == 3, False, {}

        def render(self):
            return np.full((5, 7, 3), (200, 60, 30), np.uint8)

    env = GameRecorder(Tiny(), str(tmp_path), "env00")
    for steps in (3, 1):  # a whole game of 3 steps, then one cut short by close
        env.reset()
        for _ in range(steps):
            env.step(0)
    env.close()
    assert os.listdir(tmp_path) == ["env00_episode001_score6.mp4"]
    frames, size, fps, codec, first = decoded(str(tmp_path / "env00_episode001_score6.mp4"))
    assert (frames, size, fps, codec) == (4, (8, 6), 30.0, "h264")
    assert np.abs(first.astype(int) - (200, 60, 30)).max() < 12  # the padding repeats the edge: no black border

    from utils import UsageError

    with pytest.raises(UsageError, match="--protocol machado is for Atari games, not CartPole-v1"):
        make_eval_envs("CartPole-v1", 1, 0, "machado", video_dir=str(tmp_path / "never"))
    assert not os.path.exists(tmp_path / "never")
