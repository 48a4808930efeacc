"""Data-parallel training under torchrun on the CPU (Gloo): real ``torchrun`` jobs of two ranks on
Pong, the averaged gradient against one process of all the envs, stopping, resuming, refusing bad
input, and a rendezvous of two launchers as two machines would make it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Iterator, Optional

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import distributed
import main as cli
from algorithms import make_agent
from config import Config, Curiosity, Speed
from control import RunContext
from storage import Batch
from utils import UsageError

pytestmark = pytest.mark.usefixtures("torch_single_thread")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(REPO, "tests", "torchrun_worker.py")
# 2 envs a rank x 5 steps: 20 env steps an update over 2 ranks; 120-frame games end within a few updates.
TINY = [
    "--env-name",
    "PongNoFrameskip-v4",
    "--num-envs",
    "2",
    "--rollout-size",
    "5",
    "--no-progress",
    "--no-cuda",
    "--threads",
    "1",
    "--seed",
    "5",
    "--max-episode-frames",
    "120",
    "--eval-interval",
    "0",
]
STEPS_PER_UPDATE = 2 * 2 * 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(
    out_dir, *flags: str, launcher: tuple[str, ...] = ("--standalone", "--nproc-per-node", "2"), **popen
) -> subprocess.Popen:
    """A torchrun job of tests/torchrun_worker.py (which runs ``main.main``), recording into ``out_dir``; the
    worker runs as a script from tests/, and finds the project through PYTHONPATH."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", *launcher, WORKER, str(out_dir), *flags],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path},
        **popen,
    )


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        proc.kill()


def ranks(out_dir, world_size: int = 2) -> list[dict]:
    """What each rank recorded (tests/torchrun_worker.py): its json, and its final weights if it trained."""
    recorded = []
    for rank in range(world_size):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
            record = json.load(f)
        pt = os.path.join(out_dir, f"rank{rank}.pt")
        record["final"] = torch.load(pt, weights_only=True) if os.path.exists(pt) else None
        recorded.append(record)
    return recorded


def only_run_dir(log_dir) -> str:
    (run,) = os.listdir(log_dir)
    return os.path.join(log_dir, run)


def assert_same_bits(a, b) -> None:
    """Nested state dicts equal bit for bit."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_bits(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_bits(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


# ------------------------------------------------------------------------------------------------ one real job
@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """``torchrun --standalone --nproc-per-node 2``: 6 updates of Pong, 2 envs a rank, TensorBoard on."""
    base = tmp_path_factory.mktemp("job")
    proc = torchrun(
        base / "ranks",
        *TINY,
        "--num-updates",
        "6",
        "--log-dir",
        str(base / "runs"),
        "--checkpoint-interval",
        "3",
        "--log-interval",
        "2",
    )
    out, err = finish(proc)
    assert proc.returncode == 0, err
    return {"out": out, "err": err, "run_dir": only_run_dir(base / "runs"), "ranks": ranks(base / "ranks")}


def test_job_trains_one_agent_and_says_what_is_per_rank(job):
    assert all(rank["exit_code"] == 0 for rank in job["ranks"])
    lines = job["out"].strip().splitlines()  # rank 0 alone prints
    assert lines[0].startswith("device: cpu (") and lines[0].endswith("float32")
    assert lines[1] == f"run directory: {job['run_dir']}"
    assert lines[2].startswith("protocol: no sticky actions")  # an Atari game: the emulator it trains in
    assert lines[3] == (
        "data-parallel: 2 processes (Gloo, cpu) x 2 envs (--num-envs is per process) = 4 envs; "
        "batch per update 4 x 5 = 20 env steps"
    )
    assert lines[4].startswith(f"{6 * STEPS_PER_UPDATE} env steps, 6 updates, ") and len(lines) == 5
    last = torch.load(os.path.join(job["run_dir"], "a2c_last"), weights_only=True)
    assert (last["update"], last["step"], last["world_size"]) == (6, 6 * STEPS_PER_UPDATE, 2)
    assert {"a2c_last", "a2c_best_loss", "config.json"} <= set(os.listdir(job["run_dir"]))


def test_weights_and_optimizer_state_are_identical_on_every_rank(job):
    first, second = (rank["final"] for rank in job["ranks"])
    assert (first["update"], second["update"]) == (6, 6)
    assert_same_bits(first["model"], second["model"])
    assert_same_bits(first["optimizer"]["state"], second["optimizer"]["state"])
    last = torch.load(os.path.join(job["run_dir"], "a2c_last"), weights_only=True)
    assert_same_bits(last["model"], first["model"])  # what rank 0 saved is what every rank trains
    steps = {int(param["step"]) for param in first["optimizer"]["state"].values()}
    assert steps == {6}  # every weight took six optimizer steps


def test_losses_and_statistics_are_averaged_over_ranks(job):
    """Each rank's loss is its own shard's, yet both keep (and rank 0 logs) the same numbers: the mean of the ranks'."""
    first, second = (rank["final"]["history"] for rank in job["ranks"])
    assert len(first) == 6 and first == second
    own = [rank["own_losses"] for rank in job["ranks"]]
    assert all(a != b for a, b in zip(*own))  # the shards differ ...
    for stats, a, b in zip(first, *own):  # ... and what both keep is their mean
        assert stats["total"] == pytest.approx((a + b) / 2, rel=1e-12)


def test_envs_of_all_ranks_play_disjoint_seeds(job):
    seeds = [rank["env_seeds"] for rank in job["ranks"]]
    assert seeds == [[5, 6], [7, 8]]


def test_rank_0_logs_every_ranks_games_at_global_env_steps(job):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(job["run_dir"])
    events.Reload()
    steps = [e.step for e in events.Scalars("loss/total")]
    assert steps == [2 * STEPS_PER_UPDATE, 4 * STEPS_PER_UPDATE, 6 * STEPS_PER_UPDATE]  # the global step axis
    own = [rank["own_games"] for rank in job["ranks"]]
    assert all(n >= 1 for n in own)  # every env's 120-frame game ended within the run
    returns = events.Scalars("episode/return")
    assert (
        len(returns)
        == sum(own)
        == job["ranks"][0]["final"]["episode_count"]
        == job["ranks"][1]["final"]["episode_count"]
    )
    # Each game at an env step of its own on the global axis (rank by rank, env by env, within a rollout step).
    steps = [e.step for e in returns]
    assert len(set(steps)) == len(steps) and all(0 < step <= 6 * STEPS_PER_UPDATE for step in steps)
    last = torch.load(os.path.join(job["run_dir"], "a2c_last"), weights_only=True)
    assert len(last["episode_returns"]) == sum(own)
    assert events.Scalars("episode/return_mean100")[-1].value == pytest.approx(last["mean_return"])


# ------------------------------------------------------------------------------------------------ the gradient
T, N = 3, 4  # a rollout of 4 envs: one process of 4, or 2 ranks of 2


def synthetic_batch(envs: slice) -> Batch:
    """The same rollout on every call (a fixed generator), cut to ``envs``: frames, actions, returns,
    episode starts mid-rollout, a recurrent state to start from, and next frames for the ICM."""
    g = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 256, (T + 1, N, 4, 84, 84), generator=g, dtype=torch.uint8)
    starts = (torch.rand(T, N, generator=g) < 0.3).float()
    actions = torch.randint(0, 6, (T, N), generator=g)
    returns, advantages = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g)
    state = (torch.randn(N, 256, generator=g), torch.randn(N, 256, generator=g))
    return Batch(
        obs=obs[:-1, envs],
        episode_starts=starts[:, envs],
        actions=actions[:, envs],
        returns=returns[:, envs],
        advantages=advantages[:, envs],
        values=returns[:, envs] - advantages[:, envs],
        log_probs=torch.zeros(T, N)[:, envs],
        initial_state=tuple(s[envs] for s in state),
        next_obs=obs[1:, envs],
        valid=torch.ones(T, N)[:, envs],
    )


VARIANTS = {
    "float32": {},
    "bf16-encoder": {"speed": Speed(bf16=True)},
    "normalized-advantages": {"normalize_advantages": True},
}


def gradients(batch: Batch, variant: str, context: Optional[RunContext] = None) -> list[torch.Tensor]:
    """The gradient of an update on ``batch`` of the recurrent default with curiosity and the
    settings of ``variant``, made from seed 0 (the same weights everywhere), after the agent's
    reduce_gradients hook (``context``: one rank of a data-parallel run). The loss is built inside
    ``casting_once``, as a rollout is collected: with the bfloat16 encoder its weights get their
    gradient only at the end of the backward call."""
    torch.manual_seed(0)
    agent = make_agent(Config(curiosity=Curiosity(enabled=True), **VARIANTS[variant]), (4, 84, 84), 6)
    if context is not None:
        agent.gradient_reducer = distributed.gradient_reducer(context)
        agent.sum_over_ranks = distributed.sum_over_ranks(context)
    with agent.model.casting_once():
        total = agent.loss(batch)["total"]
    total.backward()
    agent.reduce_gradients()
    return [p.grad.clone() for p in agent.params]


def _shard_gradients(rank: int, port: int, out_dir: str, variant: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        shard = synthetic_batch(slice(2 * rank, 2 * rank + 2))
        torch.save(gradients(shard, variant, RunContext(rank, 2)), os.path.join(out_dir, f"grads{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_two_ranks_of_two_envs_average_the_gradient_of_one_process_of_four(tmp_path, variant):
    """Mean-reduced losses over equal shards: the mean of the ranks' gradients is the gradient of the
    whole batch, for every parameter of the policy (encoder, LSTM, heads) and of the curiosity module;
    with the bfloat16 encoder to bfloat16's precision; with --normalize-advantages standardized by
    the whole batch's mean and std, not each rank's."""
    mp.spawn(_shard_gradients, args=(free_port(), str(tmp_path), variant), nprocs=2, join=True)
    first, second = (torch.load(tmp_path / f"grads{r}.pt", weights_only=True) for r in range(2))
    whole = gradients(synthetic_batch(slice(0, N)), variant)
    assert len(first) == len(whole) > 20  # the ICM's parameters are among them
    for a, b, expected in zip(first, second, whole):
        assert torch.equal(a, b)  # every rank applies the same update
        if variant == "bf16-encoder":  # sums of bfloat16 products over other samples: near, not equal
            assert (a - expected).norm() <= 0.02 * expected.norm() + 1e-6
        else:
            torch.testing.assert_close(a, expected, rtol=1e-4, atol=1e-6)
    # ... and a rank's own gradient is not that average: the reduction did the work.
    alone = gradients(synthetic_batch(slice(0, 2)), variant)
    assert any((a - b).norm() > 0.1 * b.norm() for a, b in zip(alone, whole))


# ------------------------------------------------------------------------------------------------ shared statistics
def _samples(rank: int, part: int) -> np.ndarray:
    """Rank ``rank``'s CartPole observations in rollout ``part``: a different count and scale on each rank."""
    return np.random.default_rng([rank, part]).normal(rank * 5.0, 1.0 + rank, size=(7 + 4 * rank + part, 4))


def _merge_statistics(rank: int, port: int, out_dir: str) -> None:
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv

    from icm import RunningStd
    from normalize import normalized

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        envs = normalized(DummyVecEnv([lambda: gym.make("CartPole-v1")]), obs=True, reward=False)

        class Agent:
            intrinsic_std = RunningStd()

        shared = distributed.shared_statistics(envs, Agent, RunContext(rank, 2))
        for part in range(2):  # two rollouts, each adding samples of its own on each rank
            envs.obs_rms.update(_samples(rank, part))
            Agent.intrinsic_std.update(torch.from_numpy(_samples(rank, part)[:, 0]))
            shared.merge()
        torch.save(
            {
                "count": envs.obs_rms.count,
                "mean": torch.from_numpy(envs.obs_rms.mean),
                "var": torch.from_numpy(envs.obs_rms.var),
                "std": Agent.intrinsic_std.state_dict(),
            },
            os.path.join(out_dir, f"stats{rank}.pt"),
        )
        # A rank started with other settings than rank 0 is refused, on every rank alike.
        try:
            distributed.check_same_run(Config(lr=7e-4 * (1 + rank)), 0, RunContext(rank, 2))
        except UsageError as exc:
            open(os.path.join(out_dir, f"refused{rank}"), "w").write(str(exc))
    finally:
        dist.destroy_process_group()


def test_ranks_pool_their_normalizer_and_curiosity_statistics_and_refuse_other_settings(tmp_path):
    """After every rollout each rank's running statistics are those of all ranks' samples, as if
    one process had seen them all (--normalize-obs/--normalize-reward and --icm-normalize)."""
    from stable_baselines3.common.running_mean_std import RunningMeanStd

    from icm import RunningStd

    mp.spawn(_merge_statistics, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    first, second = (torch.load(tmp_path / f"stats{r}.pt", weights_only=True) for r in range(2))
    assert_same_bits(first, second)
    alone, std = RunningMeanStd(shape=(4,)), RunningStd()
    for part in range(2):
        for rank in range(2):
            alone.update(_samples(rank, part))
            std.update(torch.from_numpy(_samples(rank, part)[:, 0]))
    assert first["count"] == pytest.approx(alone.count)
    np.testing.assert_allclose(first["mean"].numpy(), alone.mean, rtol=1e-12)
    np.testing.assert_allclose(first["var"].numpy(), alone.var, rtol=1e-9)
    assert first["std"]["count"] == std.count and first["std"]["mean"] == pytest.approx(std.mean, rel=1e-12)
    assert first["std"]["m2"] == pytest.approx(std.m2, rel=1e-9)
    for rank in range(2):
        assert (tmp_path / f"refused{rank}").read_text() == (
            "rank 1 was started with other settings than rank 0 (lr); start every machine with the same command"
        )


def test_eval_plot_and_grpo_under_torchrun_are_refused(one_line_error, monkeypatch, tmp_path):
    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }.items():
        monkeypatch.setenv(name, value)
    assert one_line_error(["--eval", "--load", "a2c_last"]) == (
        "error: --eval runs in one process: start it with python, not torchrun"
    )
    assert one_line_error(["--env-name", "CartPole-v1", "--algo", "grpo", "--log-dir", str(tmp_path)]) == (
        "error: --algo grpo trains in one process for now: start it with python, not torchrun"
    )
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------------ stop, resume
@contextlib.contextmanager
def endless_job(tmp_path) -> Iterator[tuple[subprocess.Popen, str]]:
    """A torchrun job of two ranks with updates to spare and a2c_last at every update, handed over
    once its first a2c_last is written (it is training); killed at the end if it still runs."""
    log_dir = str(tmp_path / "runs")
    proc = torchrun(
        tmp_path / "ranks",
        *TINY,
        "--num-updates",
        "100000",
        "--checkpoint-interval",
        "1",
        "--no-tensorboard",
        "--log-dir",
        log_dir,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while (
            time.monotonic() < deadline
            and proc.poll() is None
            and not (
                os.path.isdir(log_dir)
                and os.listdir(log_dir)
                and os.path.exists(os.path.join(only_run_dir(log_dir), "a2c_last"))
            )
        ):
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1]
        yield proc, log_dir
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def gone(pid: int) -> bool:
    """The process has exited (or is a zombie waiting for its parent to read its exit code)."""
    return not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_sigterm_to_torchrun_stops_every_rank_at_one_update_then_the_run_resumes(tmp_path, capsys):
    with endless_job(tmp_path) as (proc, log_dir):
        proc.send_signal(signal.SIGTERM)  # to the launcher alone; it passes it on to its workers
        out, err = finish(proc, timeout=60)
    recorded = ranks(tmp_path / "ranks")
    assert [rank["exit_code"] for rank in recorded] == [0, 0], err
    stopped = recorded[0]["final"]["update"]
    assert stopped >= 1 and recorded[1]["final"]["update"] == stopped  # both ranks at the same update
    assert (
        out.strip()
        .splitlines()[-1]
        .startswith(f"stopped by SIGTERM; {stopped * STEPS_PER_UPDATE} env steps, {stopped} updates")
    )
    last_path = os.path.join(only_run_dir(log_dir), "a2c_last")
    last = torch.load(last_path, weights_only=True)
    assert (last["update"], last["step"]) == (stopped, stopped * STEPS_PER_UPDATE)
    assert_same_bits(last["model"], recorded[1]["final"]["model"])
    assert all(gone(rank["pid"]) for rank in recorded)  # no worker outlives the job

    # The same world size resumes it where it stopped ...
    resumed = torchrun(
        tmp_path / "resumed",
        "--resume",
        last_path,
        "--num-updates",
        str(stopped + 2),
        "--no-progress",
        "--threads",
        "1",
    )
    out, err = finish(resumed)
    assert resumed.returncode == 0, err
    last = torch.load(last_path, weights_only=True)
    assert (last["update"], last["step"]) == (stopped + 2, (stopped + 2) * STEPS_PER_UPDATE)
    # ... and so does one process: the weights and optimizer state do not depend on the world size.
    capsys.readouterr()
    assert (
        cli.main(
            ["--no-cuda", "--resume", last_path, "--num-updates", str(stopped + 3), "--no-progress", "--threads", "1"]
        )
        == 0
    )
    assert (
        "one process, 2 envs; batch per update 2 x 5 = 10 env steps; the run was trained by 2 process(es) with "
        "4 envs and goes on with 2"
    ) in capsys.readouterr().out
    last = torch.load(last_path, weights_only=True)
    assert (last["update"], last["step"], last["world_size"]) == (stopped + 3, (stopped + 2) * STEPS_PER_UPDATE + 10, 1)


def test_a_rank_killed_hard_ends_the_job_and_the_run_resumes_from_a2c_last(tmp_path):
    with endless_job(tmp_path) as (proc, log_dir):
        os.kill(ranks(tmp_path / "ranks")[1]["pid"], signal.SIGKILL)
        finish(proc, timeout=90)
    assert proc.returncode not in (0, None)  # torchrun ended the job as failed
    assert gone(ranks(tmp_path / "ranks")[0]["pid"])
    last_path = os.path.join(only_run_dir(log_dir), "a2c_last")
    last = torch.load(last_path, weights_only=True)
    assert last["update"] >= 1 and last["step"] == last["update"] * STEPS_PER_UPDATE
    more = last["update"] + 1
    assert (
        cli.main(["--no-cuda", "--resume", last_path, "--num-updates", str(more), "--no-progress", "--threads", "1"])
        == 0
    )
    assert torch.load(last_path, weights_only=True)["update"] == more


def test_bad_input_is_refused_by_every_rank_before_the_group_starts(tmp_path):
    started = time.monotonic()
    proc = torchrun(tmp_path / "ranks", *TINY, "--num-updates", "0", "--log-dir", str(tmp_path / "runs"))
    out, err = finish(proc, timeout=60)
    assert proc.returncode != 0 and time.monotonic() - started < 60
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        "error: argument --num-updates: expected a positive integer, got '0' (see --help)"
    ]  # one line a machine
    assert "[rank" not in err  # no worker's traceback
    assert "exitcode  : 2" in err  # torchrun's report of the workers' exit code
    assert not os.path.exists(tmp_path / "runs")


# ------------------------------------------------------------------------------------------------ two machines
def test_two_launchers_meet_as_two_nodes_and_train_one_agent(tmp_path):
    """Two ``torchrun --nnodes 2`` launchers with a c10d rendezvous on 127.0.0.1, as two machines
    would start one job: one rank each, one run directory, the global step of both."""
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [
        torchrun(
            tmp_path / f"node{node}",
            *TINY,
            "--num-updates",
            "2",
            "--no-tensorboard",
            "--log-dir",
            str(tmp_path / "runs"),
            launcher=(
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--node-rank",
                str(node),
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                endpoint,
                "--rdzv-id",
                "two-nodes",
            ),
        )
        for node in range(2)
    ]
    outputs = [finish(proc) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in outputs]
    last = torch.load(os.path.join(only_run_dir(tmp_path / "runs"), "a2c_last"), weights_only=True)
    assert (last["update"], last["step"], last["world_size"]) == (2, 2 * STEPS_PER_UPDATE, 2)
    finals = [
        json.load(open(os.path.join(tmp_path / f"node{node}", name)))
        for node in range(2)
        for name in os.listdir(tmp_path / f"node{node}")
        if name.endswith(".json")
    ]
    assert sorted(seed for final in finals for seed in final["env_seeds"]) == [5, 6, 7, 8]
