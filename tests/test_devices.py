"""The device path, checked on the CPU: which device a run takes, the first line that names it, the
float policy, the copies onto the device, the reads back from it (one per rollout step, one per
update), checkpoints with their tensors on the CPU, and torchrun with one visible GPU per rank.
What only a GPU can show is in test_cuda.py (marked ``cuda``)."""

import glob
import os

import numpy as np
import pytest
import torch

import devices
import distributed
import main as cli
from checkpoints import on_cpu
from config import Config
from control import RunContext

CPU = torch.device("cpu")
CARTPOLE = [
    "--env-name",
    "CartPole-v1",
    "--num-envs",
    "2",
    "--rollout-size",
    "5",
    "--num-updates",
    "2",
    "--no-progress",
    "--threads",
    "1",
]


# ------------------------------------------------------------------------------------------------ the device
@pytest.mark.device_default
@pytest.mark.parametrize("available", [False, True])
def test_the_device_follows_the_env_family_unless_typed(monkeypatch, capsys, available):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    gpu = torch.device("cuda") if available else CPU
    assert devices.choose_device(None, cuda_by_default=True) == gpu  # Atari: the GPU when there is one
    assert devices.choose_device(None, cuda_by_default=False) == CPU  # small MLPs: the CPU
    assert capsys.readouterr().err == ""  # nothing typed, nothing to say
    assert devices.choose_device(True, cuda_by_default=False) == gpu  # --cuda: the GPU for any env
    assert devices.choose_device(False, cuda_by_default=True) == CPU  # --no-cuda
    assert capsys.readouterr().err == ("" if available else "CUDA is not available; running on the CPU\n")


@pytest.mark.device_default
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_the_first_line_names_the_device_and_the_fallback_line_needs_a_typed_cuda(tmp_path, capsys):
    for typed, fallback in (([], False), (["--cuda"], True), (["--no-cuda"], False)):
        assert cli.main([*CARTPOLE, "--log-dir", str(tmp_path / str(len(typed) and typed[0])), *typed]) == 0
        captured = capsys.readouterr()
        assert captured.out.splitlines()[0] == "device: cpu (1 thread), float32"
        assert ("CUDA is not available; running on the CPU" in captured.err) == fallback
    (run_dir,) = glob.glob(str(tmp_path / "0" / "CartPole-v1_*"))
    # Evaluation names its device first too, and a resume takes what is typed now, not the run's.
    assert cli.main(["--eval", "--load", f"{run_dir}/a2c_last", "--episodes", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "device: cpu (1 thread), float32"
    assert cli.main(["--resume", f"{run_dir}/a2c_last", "--num-updates", "3", "--cuda"]) == 0
    assert "CUDA is not available; running on the CPU" in capsys.readouterr().err


def test_describe_names_the_arithmetic():
    torch.set_num_threads(2)
    assert devices.describe(CPU) == "device: cpu (2 threads), float32"
    assert devices.describe(CPU, bf16=True) == "device: cpu (2 threads), float32, the conv encoder in bfloat16"


def test_channels_last_is_on_for_the_cpu_and_on_a_gpu_only_with_bf16_unless_typed():
    gpu = torch.device("cuda", 0)
    assert devices.channels_last_for(None, CPU, bf16=False)
    assert not devices.channels_last_for(None, gpu, bf16=False)
    assert devices.channels_last_for(None, gpu, bf16=True)
    assert devices.channels_last_for(True, gpu, bf16=False) and not devices.channels_last_for(False, CPU, bf16=False)


# ------------------------------------------------------------------------------------------------ float policy
@pytest.fixture
def float_policy_restored():
    saved = (
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved[:2]
    torch.use_deterministic_algorithms(saved[2], warn_only=saved[3])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[4:]


def test_float32_means_float32_unless_tf32_is_asked_for(float_policy_restored):
    # PyTorch's own default lets cuDNN convolutions run in TF32; a run turns that off.
    devices.pick_device(False, 0, keep_freed=False)
    assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
    devices.pick_device(False, 0, keep_freed=False, tf32=True)
    assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    config, _, typed = cli.parse_args(["--tf32"])
    assert config.speed.tf32 and typed == {"speed.tf32"} and not Config().speed.tf32


def test_reproducible_picks_deterministic_kernels_and_names_what_has_none(tmp_path, capsys, float_policy_restored):
    assert cli.main([*CARTPOLE, "--no-cuda", "--reproducible", "--log-dir", str(tmp_path)]) == 0
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] in (":4096:8", ":16:8")
    assert capsys.readouterr().out.splitlines()[1] == (
        "reproducible: deterministic kernels; every op of this run on the cpu has one"
    )
    gpu = torch.device("cuda", 0)
    (pool,) = devices.nondeterministic_parts(gpu, arch="universe", image_obs=True)
    assert "AdaptiveMaxPool2d" in pool
    assert devices.nondeterministic_parts(gpu, arch="nature", image_obs=True) == []
    assert "NCCL" in devices.nondeterministic_parts(gpu, arch="nature", image_obs=True, world_size=2)[0]
    assert devices.nondeterministic_parts(CPU, arch="universe", image_obs=True, world_size=2) == []


# ------------------------------------------------------------------------------------------------ copies onto the device
class Event:
    """A stand-in for ``torch.cuda.Event`` that writes what happens to it into a shared log."""

    def __init__(self, log: list[str]) -> None:
        self.log, self.name = log, f"e{sum(entry.startswith('record') for entry in log)}"

    def record(self) -> None:
        self.log.append(f"record {self.name}")

    def synchronize(self) -> None:
        self.log.append(f"wait {self.name}")


def test_a_staging_buffer_is_rewritten_only_after_its_last_copy_finished():
    log: list[str] = []
    to_device = devices.HostToDevice(CPU, slots=2, pinned=False, make_event=lambda: Event(log))
    arrays = [np.full(3, i, dtype=np.float32) for i in range(4)]
    outs = [to_device(a) for a in arrays]
    # Call 3 reuses call 1's buffer: it waits for call 1's copy (e0) before writing; call 4 for e1.
    assert log == ["record e0", "record e1", "wait e0", "record e2", "wait e1", "record e3"]
    # What came back is the device's own copy, not the buffer the next calls overwrote.
    assert [out.tolist() for out in outs] == [[i] * 3 for i in range(4)]
    assert all(not np.shares_memory(out.numpy(), buffer.numpy()) for out in outs for buffer in to_device.buffers)


def test_on_the_cpu_an_array_becomes_a_tensor_without_a_copy():
    array = np.arange(6, dtype=np.uint8).reshape(2, 3)
    tensor = devices.HostToDevice(CPU)(array)
    assert np.shares_memory(tensor.numpy(), array) and tensor.dtype == torch.uint8


# ------------------------------------------------------------------------------------------------ reads from the device
READS = ("item", "tolist", "cpu", "numpy", "__float__", "__bool__", "__int__")


@pytest.fixture
def device_reads(monkeypatch):
    """Counts, by name, the calls that read a tensor's values back to the host (each a wait for the
    GPU on a GPU), made from Python while the fixture is active."""
    counts: dict[str, int] = {}
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


@pytest.mark.parametrize(
    "env_name, extra",
    [("PongNoFrameskip-v4", {}), ("Pendulum-v1", {"sde": True}), ("CartPole-v1", {"normalize_advantages": True})],
)
def test_a_rollout_step_reads_the_device_once_and_an_update_once(make_runner, tmp_path, device_reads, env_name, extra):
    config = Config(
        env_name=env_name,
        num_envs=2,
        rollout_size=5,
        cuda=False,
        tensorboard=False,
        progress=False,
        recurrent=True,
        **extra,
    )
    runner = make_runner(config, tmp_path)
    runner.collector.storage.start(runner.recurrent_state)
    runner.agent.draw_exploration(config.num_envs)
    counts = device_reads
    counts.clear()
    runner.collector.collect_steps(runner)
    # The actions, which the envs need: one read a step, and nothing else.
    assert counts == {"cpu": config.rollout_size, "numpy": config.rollout_size}
    batch = runner.agent.make_batch(runner.collector.storage)
    assert counts == {"cpu": config.rollout_size, "numpy": config.rollout_size}
    counts.clear()
    runner.state.best_loss = -float("inf")  # no a2c_best_loss to write (a file's tensors are read back)
    stats = runner.learn(batch)
    # The losses, the gradient norm and the rollout's statistics come back together.
    assert counts == {"tolist": 1}
    assert {"total", "policy", "value", "entropy", "grad_norm", "explained_variance", "rollout/advantage_std"} <= set(
        stats
    ) and stats["skipped"] == 0.0


def test_a_non_finite_loss_still_skips_the_step(make_runner, tmp_path):
    config = Config(
        env_name="CartPole-v1",
        num_envs=2,
        rollout_size=5,
        cuda=False,
        tensorboard=False,
        progress=False,
        recurrent=False,
    )
    runner = make_runner(config, tmp_path)
    batch = runner.collect()
    before = [p.detach().clone() for p in runner.agent.params]
    terms = runner.agent.loss(batch)
    terms["total"] = terms["total"] * float("nan")
    seen = []
    stats = runner.agent.step(terms, before_step=seen.append)
    assert stats["skipped"] == 1.0 and np.isnan(stats["grad_norm"]) and seen == [stats]
    assert all(torch.equal(a, b) for a, b in zip(before, runner.agent.params))
    assert all(p.grad is None for p in runner.agent.params)


# ------------------------------------------------------------------------------------------------ checkpoints
class Marked(torch.Tensor):
    """A tensor that notes when it is asked for its CPU copy."""

    moved: list[int] = []

    def cpu(self, *args, **kwargs):
        Marked.moved.append(self.numel())
        return torch.Tensor(self.as_subclass(torch.Tensor)).clone()


def test_a_checkpoint_holds_its_tensors_on_the_cpu():
    Marked.moved = []
    data = {
        "model": {"w": torch.ones(2).as_subclass(Marked)},
        "optimizer": {"state": {0: {"square_avg": torch.ones(3).as_subclass(Marked), "step": 4}}},
        "rng": [torch.ones(5).as_subclass(Marked), ("x", torch.ones(7).as_subclass(Marked))],
        "name": "a",
    }
    moved = on_cpu(data)
    assert sorted(Marked.moved) == [2, 3, 5, 7]  # every tensor, at any depth
    assert moved["name"] == "a" and moved["optimizer"]["state"][0]["step"] == 4
    assert isinstance(moved["rng"], list) and isinstance(moved["rng"][1], tuple)
    plain = torch.zeros(3)
    assert on_cpu({"t": plain})["t"] is plain  # a CPU tensor is not copied


# ------------------------------------------------------------------------------------------------ torchrun
def test_a_rank_that_sees_one_gpu_takes_it(monkeypatch):
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setenv("LOCAL_RANK", "3")
    context = RunContext(rank=3, world_size=4)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # CUDA_VISIBLE_DEVICES=<its own GPU>
    assert distributed.place(torch.device("cuda"), context) == torch.device("cuda", 0) and chosen == [0]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)  # every GPU of the machine
    assert distributed.place(torch.device("cuda"), context) == torch.device("cuda", 3) and chosen == [0, 3]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(distributed.RankError, match="LOCAL_RANK 3 has no GPU: this process sees 2"):
        distributed.place(torch.device("cuda"), context)
    assert distributed.place(CPU, context) == CPU
