"""Smaller Atari frames (``--frame-size``) and the presets that use them (``--preset``).

A frame size reaches every place frames are made or read: both env paths resize the same screen
alike, the network takes the frames it is given, and a run's evaluation, resume and ``--eval``
play at the size it trained at.
"""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest
import torch
from test_cli import SMALL, run_cli

import main as cli
import recipes
import training
from config import Config
from envs import make_eval_envs, make_vec_env


def first_frames(vec_env: str, frame_size: int) -> np.ndarray:
    envs = make_vec_env("PongNoFrameskip-v4", 2, seed=0, vec_env=vec_env, frame_size=frame_size)
    try:
        obs = envs.reset()
        assert envs.observation_space.shape == (4, frame_size, frame_size)
        return obs
    finally:
        envs.close()


def test_both_env_paths_resize_the_same_screen_alike():
    ale, sb3 = first_frames("ale", 42), first_frames("dummy", 42)
    assert ale.shape == sb3.shape == (2, 4, 42, 42) and ale.dtype == sb3.dtype == np.uint8
    # The same Pong screen after reset on both paths (only the ball, drawn after random no-ops, differs).
    assert np.abs(ale.astype(int) - sb3.astype(int)).mean() < 0.5
    # A resize of the whole screen, not a crop: the 84x84 frame shrunk to 42x42 by area matches it.
    big = first_frames("ale", 84)[:, -1]
    shrunk = np.stack([cv2.resize(frame, (42, 42), interpolation=cv2.INTER_AREA) for frame in big])
    assert np.abs(shrunk.astype(int) - ale[:, -1].astype(int)).mean() < 0.5
    assert np.abs(shrunk.astype(int) - np.roll(ale[:, -1], 3, axis=1).astype(int)).mean() > 2


@pytest.mark.parametrize("vec_env", ["ale", "dummy"])
@pytest.mark.parametrize("protocol", ["classic", "machado"])
def test_evaluation_envs_take_the_frame_size(vec_env, protocol):
    envs = make_eval_envs("PongNoFrameskip-v4", 2, 0, protocol, vec_env=vec_env, frame_size=42)
    try:
        assert envs.reset().shape == (2, 4, 42, 42)
    finally:
        envs.close()


def test_a_run_at_42_pixels_trains_resumes_and_plays(tmp_path):
    result = run_cli(*SMALL, "--frame-size", "42", "--num-updates", "4", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (name,) = os.listdir(tmp_path)
    run_dir = tmp_path / name
    last = torch.load(run_dir / "a2c_last", weights_only=True)
    assert last["config"]["frame_size"] == 42
    assert list(last["model_spec"]["obs_shape"]) == [4, 42, 42]
    # Resumed and played with no flag naming the size: the checkpoint's is used.
    resumed = run_cli("--resume", str(run_dir / "a2c_last"), "--num-updates", "6", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert torch.load(run_dir / "a2c_last", weights_only=True)["update"] == 6
    played = run_cli(
        "--eval", "--load", str(run_dir / "a2c_last"), "--episodes", "2", "--max-episode-frames", "120", "--no-cuda"
    )
    assert played.returncode == 0, played.stderr
    assert "episodes: 2" in played.stdout
    # The size is the network's: a resume cannot change it.
    other = run_cli("--resume", str(run_dir / "a2c_last"), "--frame-size", "84", "--num-updates", "8")
    assert other.returncode == 2 and "--frame-size 42 (another architecture); cannot use 84" in other.stderr
    # Nor can a preset be laid over a run that started without one.
    preset = run_cli("--resume", str(run_dir / "a2c_last"), "--preset", "fast-cpu", "--num-updates", "8")
    assert preset.returncode == 2 and "--preset none (other settings); cannot use fast-cpu" in preset.stderr


def test_an_older_config_without_a_frame_size_played_84x84_frames():
    saved = Config().to_dict()
    del saved["frame_size"]
    assert Config.from_dict(saved).frame_size == 84


def preset_config(*argv: str) -> Config:
    config, _, typed = cli.parse_args(list(argv))
    return recipes.with_env_defaults(config, typed)


@pytest.mark.parametrize("preset_name", ["fast-cpu", "fast-gpu"])
def test_a_preset_sets_its_settings_under_the_typed_flags(preset_name):
    plain = preset_config("--env-name", "PongNoFrameskip-v4")
    fast = preset_config("--env-name", "PongNoFrameskip-v4", "--preset", preset_name)
    preset = recipes.PRESETS[preset_name]
    assert fast.preset == preset_name and plain.preset == ""
    for name, value in preset.items():
        assert cli.get_setting(fast, name) == value
    # Every setting the preset leaves alone is the default's.
    changed = {name for name in cli.setting_names() if cli.get_setting(fast, name) != cli.get_setting(plain, name)}
    assert changed == {"preset", *preset}
    # A typed flag wins over the preset.
    assert preset_config("--preset", preset_name, "--frame-size", "84").frame_size == 84
    # Both presets plan 2M env steps (to within one update), the budget their screens measured.
    assert 0 <= fast.num_updates * fast.steps_per_update - 2_000_000 < fast.steps_per_update


def test_the_gpu_preset_is_the_cpu_presets_schedule_at_64_envs():
    cpu, gpu = recipes.PRESETS["fast-cpu"], recipes.PRESETS["fast-gpu"]
    changed = {name for name in gpu if gpu[name] != cpu.get(name)}
    assert changed == {"num_envs", "lr", "optimizer", "num_updates", "lr_decay_start", "entropy_decay_start"}
    config = preset_config("--preset", "fast-gpu")
    assert (config.num_envs, config.rollout_size, config.optimizer) == (64, 5, "rmsprop-debiased")
    # A quarter of the updates over the same 2M env steps, at the rate scaled with the batch (7e-4 at 16 envs).
    assert config.num_updates == recipes.PRESETS["fast-cpu"]["num_updates"] // 4
    assert config.lr == pytest.approx(4 * Config.lr)
    assert config.lr_decay_start == config.entropy_decay_start < recipes.PRESETS["fast-cpu"]["lr_decay_start"]


def test_a_typed_constant_rate_drops_the_presets_decay_shape():
    constant = preset_config("--preset", "fast-cpu", "--lr-schedule", "constant")
    assert constant.lr_schedule == "constant" and constant.frame_size == recipes.PRESETS["fast-cpu"]["frame_size"]
    assert (constant.lr_decay_start, constant.lr_decay_from) == (Config.lr_decay_start, Config.lr_decay_from)
    assert (constant.entropy_schedule, constant.entropy_decay_start) == ("linear", 0.75)  # the bonus's decay stays
    training.check_settings(constant)  # trains, where the preset's decay shape would be refused beside it
    # Typed beside a linear schedule, or typed themselves, the decay's settings stay.
    assert preset_config("--preset", "fast-cpu", "--lr-decay-start", "0.5").lr_decay_start == 0.5
    linear = preset_config("--preset", "fast-cpu", "--lr-schedule", "linear")
    assert (linear.lr_decay_start, linear.lr_decay_from) == (0.75, 1.0)


def test_a_typed_constant_entropy_bonus_drops_the_presets_decay_of_it():
    constant = preset_config("--preset", "fast-cpu", "--entropy-schedule", "constant")
    assert (constant.entropy_schedule, constant.entropy_decay_start) == ("constant", Config.entropy_decay_start)
    assert (constant.lr_schedule, constant.lr_decay_start) == ("linear", 0.75)  # the rate's decay stays
    training.check_settings(constant)
    assert preset_config("--preset", "fast-cpu", "--entropy-decay-start", "0.5").entropy_decay_start == 0.5
    both = preset_config("--preset", "fast-cpu", "--lr-schedule", "constant", "--entropy-schedule", "constant")
    assert all(
        cli.get_setting(both, name) == cli.get_setting(Config(), name)
        for shape in recipes.DECAY_SHAPES.values()
        for name in shape
    )
    training.check_settings(both)


def test_conv_filters_train_resume_and_play_at_the_checkpoints_width(tmp_path):
    argv = [*SMALL, "--frame-size", "42", "--conv-filters", "8", "--num-updates", "2", "--log-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    (name,) = os.listdir(tmp_path)
    last = str(tmp_path / name / "a2c_last")
    data = torch.load(last, weights_only=True)
    assert data["config"]["conv_filters"] == 8 and data["model_spec"]["conv_filters"] == 8
    assert data["model"]["encoder.convs.0.weight"].shape == (8, 4, 3, 3)
    # Played and resumed with no flag naming the width; a resume cannot change it.
    assert cli.main(["--eval", "--load", last, "--episodes", "1", "--max-episode-frames", "60", "--no-cuda"]) == 0
    assert cli.main(["--resume", last, "--num-updates", "3", "--no-progress", "--no-cuda"]) == 0
    assert torch.load(last, weights_only=True)["update"] == 3
    assert cli.main(["--resume", last, "--conv-filters", "16", "--num-updates", "4", "--no-cuda"]) == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--conv-filters", "16", "--arch", "nature"], "--conv-filters is the width of the universe encoder"),
        (
            ["--conv-filters", "16", "--env-name", "CartPole-v1"],
            "--conv-filters shapes the conv encoder of Atari frames",
        ),
        (
            ["--preset", "fast-cpu", "--env-name", "CartPole-v1"],
            "--preset fast-cpu is for Atari games, not CartPole-v1",
        ),
        (["--preset", "fast"], "--preset: invalid choice: 'fast' (choose from 'fast-cpu', 'fast-gpu')"),
        (["--frame-size", "20"], "--frame-size must be from 36 (the smallest frame the Nature CNN takes) to 210"),
        (["--frame-size", "0"], "--frame-size: expected a positive integer, got '0'"),
        (["--frame-size", "42", "--env-name", "LunarLander-v3"], "--frame-size is the size of an Atari frame"),
    ],
)
def test_bad_frame_sizes_and_presets_one_line_exit_2(argv, message, one_line_error):
    assert message in one_line_error(argv)
