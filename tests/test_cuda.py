"""Smoke tests on a GPU: training, resume across devices, evaluation, bf16, curiosity, PPO, GRPO and
gSDE with ``--cuda``, checkpoints that load anywhere, and the reads back from the GPU in a rollout.

Marked ``cuda``: skipped on a machine without CUDA (CI has none). ``python -m pytest -m cuda`` runs
them alone; ``python -m bench.gpu smoke`` runs them and records the result.
"""

import glob
import os
import warnings

import pytest
import torch

import main as cli

pytestmark = pytest.mark.cuda

ATARI = [
    "--env-name",
    "PongNoFrameskip-v4",
    "--num-envs",
    "4",
    "--rollout-size",
    "5",
    "--no-progress",
    "--max-episode-frames",
    "400",
    "--checkpoint-interval",
    "2",
]
CARTPOLE = ["--env-name", "CartPole-v1", "--num-envs", "4", "--no-progress"]


def only_run(log_dir) -> str:
    (run_dir,) = glob.glob(os.path.join(str(log_dir), "*_seed*"))
    return run_dir


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from tensors_in(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from tensors_in(inner)


def test_atari_trains_on_the_gpu_and_its_checkpoints_load_anywhere(tmp_path, capsys):
    assert cli.main([*ATARI, "--num-updates", "4", "--cuda", "--log-dir", str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("device: cuda:") and first.endswith("float32 (TF32 off)")
    for name in ("a2c_last", "a2c_best_loss"):
        data = torch.load(os.path.join(only_run(tmp_path), name), weights_only=True)  # no map_location
        assert all(t.device.type == "cpu" for t in tensors_in(data))


@pytest.mark.device_default
def test_atari_takes_the_gpu_by_default_and_control_envs_the_cpu(tmp_path, capsys):
    assert cli.main([*ATARI, "--num-updates", "2", "--log-dir", str(tmp_path / "atari")]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("device: cuda:")
    assert cli.main([*CARTPOLE, "--num-updates", "2", "--log-dir", str(tmp_path / "cartpole")]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("device: cpu (")


def test_a_run_resumes_across_devices(tmp_path, capsys):
    assert cli.main([*ATARI, "--num-updates", "2", "--cuda", "--log-dir", str(tmp_path)]) == 0
    last = os.path.join(only_run(tmp_path), "a2c_last")
    for device, updates in (("--no-cuda", 4), ("--cuda", 6)):
        assert cli.main(["--resume", last, "--num-updates", str(updates), device]) == 0
        assert torch.load(last, weights_only=True)["update"] == updates
    assert cli.main(["--eval", "--load", last, "--episodes", "2", "--max-episode-frames", "400", "--cuda"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("device: cuda:") and lines[-1].startswith("episodes: 2  mean: ")


@pytest.mark.parametrize(
    "flags",
    [
        ["--arch", "nature", "--no-recurrent", "--bf16"],
        ["--icm"],
        ["--tf32"],
        ["--preset", "fast-cpu", "--conv-filters", "16"],
        ["--compile"],
        ["--env-groups", "2"],
    ],
)
def test_atari_options_train_on_the_gpu(tmp_path, capsys, flags):
    assert cli.main([*ATARI, "--num-updates", "3", "--cuda", *flags, "--log-dir", str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("device: cuda:")
    assert ("bfloat16" in first) == ("--bf16" in flags) and ("TF32 convolutions" in first) == ("--tf32" in flags)


@pytest.mark.parametrize(
    "flags",
    [
        [*CARTPOLE, "--algo", "ppo", "--rollout-size", "16", "--minibatches", "4", "--num-updates", "2"],
        [*CARTPOLE, "--algo", "grpo", "--group-size", "2", "--horizon", "40", "--num-updates", "2"],
        ["--env-name", "Pendulum-v1", "--num-envs", "4", "--sde", "--no-progress", "--num-updates", "4"],
        [*CARTPOLE, "--recurrent", "--num-updates", "4"],
    ],
)
def test_control_algorithms_train_on_the_gpu(tmp_path, capsys, flags):
    assert cli.main([*flags, "--cuda", "--log-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("device: cuda:")
    assert (
        cli.main(
            [
                "--eval",
                "--load",
                os.path.join(only_run(tmp_path), "a2c_last"),
                "--episodes",
                "2",
                "--max-episode-frames",
                "50",
                "--cuda",
            ]
        )
        == 0
    )


def test_a_rollout_step_waits_for_the_gpu_only_for_the_actions(tmp_path):
    from algorithms import make_agent
    from config import Config
    from envs import action_size, make_vec_env
    from runner import Runner

    config = Config(num_envs=4, rollout_size=5, tensorboard=False, progress=False)
    envs = make_vec_env(config.env_name, config.num_envs, config.n_stack, config.seed)
    try:
        num_actions, _ = action_size(envs.action_space)
        agent = make_agent(config, envs.observation_space.shape, num_actions, "cuda")
        runner = Runner(agent, envs, config, str(tmp_path))
        runner.collector.storage.start(runner.recurrent_state)
        runner.collector.collect_steps(runner)  # warm: cuDNN picks its kernels, buffers are allocated
        runner.collector.storage.start(runner.recurrent_state)
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                runner.collector.collect_steps(runner)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        # torch also warns once that its sync debug mode is a prototype: only the syncs count
        syncs = [w for w in caught if "called a synchronizing CUDA operation" in str(w.message)]
        assert 1 <= len(syncs) <= config.rollout_size, [str(w.message) for w in caught]
    finally:
        envs.close()
