"""bench/gpu.py on a machine without a GPU: the env piece, the refusals, the results file, the
throughput piece's trainers and ratios (its timed runs stood in for), the Pong bookkeeping, a tiny
pong piece trained and resumed on the CPU, and bad input. Nothing here times anything."""

from __future__ import annotations

import json
import os

import pytest
import torch

import main
import recipes
from bench import gpu, study
from bench import throughput as tp

ENV_KEYS = {
    "torch",
    "cuda",
    "cudnn",
    "gpu_name",
    "gpu_memory_gib",
    "bf16_supported",
    "cpu_count",
    "ale_py",
    "stable_baselines3",
    "gymnasium",
    "git_commit",
    "command",
}
GPU_FIELDS = ("cudnn", "gpu_name", "gpu_memory_gib", "bf16_supported")


@pytest.fixture
def no_cuda(monkeypatch):
    """As on a machine without CUDA, even where the tests run on one."""
    monkeypatch.setattr(gpu, "cuda_available", lambda: False)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_env_piece_runs_without_a_gpu(no_cuda, tmp_path):
    assert gpu.main(["env", "--out-dir", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "gpu.json").read_text())
    env = results["env"]
    assert set(env) == ENV_KEYS
    assert all(env[key] is None for key in GPU_FIELDS)
    assert env["cpu_count"] == os.cpu_count() and env["torch"]
    assert env["command"] == f"python -m bench.gpu env --out-dir {tmp_path}"
    assert f"| env | cpu_count | {os.cpu_count()} |" in (tmp_path / "gpu.md").read_text()


@pytest.mark.parametrize("piece", ["smoke", "throughput", "pong", "all"])
def test_gpu_pieces_refuse_without_cuda(no_cuda, tmp_path, capsys, piece):
    assert gpu.main([piece, "--out-dir", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in one_error_line(capsys.readouterr().err)
    results = json.loads((tmp_path / "gpu.json").read_text()) if (tmp_path / "gpu.json").exists() else {}
    assert set(results) <= {"env"}  # `all` runs env first; nothing else is written


@pytest.mark.parametrize(
    "argv",
    [
        ["bogus"],
        [],
        ["throughput", "--repeats", "0"],
        ["throughput", "--repeats", "-1"],
        ["throughput", "--envs", "16", "0"],
        ["throughput", "--envs", "x"],
        ["pong", "--minutes", "0"],
        ["pong", "--minutes", "inf"],
        ["env", "--nonsense"],
    ],
)
def test_bad_input_gets_one_line_and_exit_2(tmp_path, capsys, argv):
    assert gpu.main([*argv, "--out-dir", str(tmp_path)]) == 2
    one_error_line(capsys.readouterr().err)


def test_an_unwritable_out_dir_gets_exit_2(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert gpu.main(["env", "--out-dir", str(blocker / "out")]) == 2
    assert "--out-dir" in one_error_line(capsys.readouterr().err)


def test_two_pieces_merge_in_the_json_and_the_markdown(tmp_path):
    gpu.save(str(tmp_path), "smoke", {"summary": "3 passed, 1 skipped in 2.50s", "exit_code": 0}, ["smoke"])
    cell = {
        "trainers": {"ours recurrent": {"steps_per_s": 3000.0, "rounds": [2900.0, 3100.0]}},
        "ratios": {"ours recurrent": {"sb3": 3.0}},
    }
    gpu.save(str(tmp_path), "throughput", {"16": {"trainers": {}}}, ["throughput", "--envs", "64"])
    gpu.save(str(tmp_path), "throughput", {"16": cell}, ["throughput", "--envs", "16"])  # each env count its own
    gpu.save(str(tmp_path), "throughput", {"64": {"ratios": {"ours recurrent": {"sb3": 3.5}}}}, ["throughput"])
    gpu.save(str(tmp_path), "pong", {"reached": {"18": {"env_steps": 2_000_000}, "20": None}}, ["pong"])
    results = json.loads((tmp_path / "gpu.json").read_text())
    assert set(results) == {"smoke", "throughput", "pong"}
    assert results["throughput"]["16"] == cell and results["throughput"]["command"] == "python -m bench.gpu throughput"
    rows = [line for line in (tmp_path / "gpu.md").read_text().splitlines() if line.startswith("| ")][1:]
    # Every figure once, by the keys that lead to it, the lists (each round's rate) left out.
    assert rows == [
        "| smoke | summary | 3 passed, 1 skipped in 2.50s |",
        "| smoke | exit_code | 0 |",
        "| throughput | 16 / trainers / ours recurrent / steps_per_s | 3,000.00 |",
        "| throughput | 16 / ratios / ours recurrent / sb3 | 3.00 |",
        "| throughput | 64 / ratios / ours recurrent / sb3 | 3.50 |",
        "| pong | reached / 18 / env_steps | 2,000,000 |",
        "| pong | reached / 20 | - |",
    ]
    # pong replaces its own entry; the others stay
    gpu.save(str(tmp_path), "pong", {"status": "done"}, ["pong"], replace=True)
    results = json.loads((tmp_path / "gpu.json").read_text())
    assert results["pong"] == {"status": "done", "command": "python -m bench.gpu pong"}
    assert results["smoke"]["exit_code"] == 0 and "16" in results["throughput"]


@pytest.mark.parametrize("bf16", [True, False])
def test_the_throughput_piece_times_each_of_ours_plain_compiled_and_grouped_against_sb3(tmp_path, monkeypatch, bf16):
    monkeypatch.setattr(gpu, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: bf16)
    rates = {tp.RECURRENT: 300.0, tp.FEEDFORWARD: 400.0, tp.FEEDFORWARD + tp.BF16: 500.0, tp.SB3: 100.0}
    rates |= {name + tp.COMPILED: 1.5 * rate for name, rate in rates.items()}
    rates |= {name + tp.GROUPED: 0.5 * rates[name] for name in (tp.RECURRENT, tp.FEEDFORWARD)}
    timed = []

    def run_alternating(trainers, steps, repeats, warmup_steps):  # each trainer at its rate, in place of timing
        timed.append((trainers, steps))
        return {name: tp.Trials(name, [steps], [steps / rates[name]]) for name in trainers}

    monkeypatch.setattr(tp, "run_alternating", run_alternating)
    assert gpu.main(["throughput", "--envs", "16", "64", "--repeats", "1", "--out-dir", str(tmp_path)]) == 0
    ours = [tp.RECURRENT, tp.FEEDFORWARD] + ([tp.FEEDFORWARD + tp.BF16] if bf16 else [])
    for (trainers, steps), num_envs in zip(timed, (16, 64)):
        grouped = [tp.RECURRENT + tp.GROUPED, tp.FEEDFORWARD + tp.GROUPED]  # the two configurations, overlapped
        compiled = [tp.RECURRENT + tp.COMPILED, tp.FEEDFORWARD + tp.COMPILED]
        assert list(trainers) == [*ours, *compiled, *grouped, tp.SB3]
        assert steps == 20_000 // (num_envs * 5) * num_envs * 5  # whole updates
        for name in ours:
            train, kwargs = trainers[name]
            assert train is tp.train_ours and kwargs == dict(
                env_name=gpu.PONG, num_envs=num_envs, device="cuda", flags=kwargs["flags"]
            )
            if name + tp.COMPILED in trainers:
                assert trainers[name + tp.COMPILED][1]["flags"] == [*kwargs["flags"], "--compile"]
            if name + tp.GROUPED in trainers:
                assert trainers[name + tp.GROUPED][1]["flags"] == [*kwargs["flags"], "--env-groups", "2"]
        assert trainers[tp.SB3] == (tp.train_sb3, dict(env_name=gpu.PONG, num_envs=num_envs, device="cuda"))
    cell = json.loads((tmp_path / "gpu.json").read_text())["throughput"]["64"]
    assert cell["trainers"][tp.SB3]["steps_per_s"] == 100.0
    ratios = cell["ratios"]
    assert ratios[tp.RECURRENT] == {tp.SB3: 3.0}
    assert ratios[tp.RECURRENT + tp.COMPILED] == {tp.SB3: 4.5, tp.RECURRENT: 1.5}  # the lever on against off
    assert ratios[tp.FEEDFORWARD + tp.GROUPED] == {tp.SB3: 2.0, tp.FEEDFORWARD: 0.5}
    if bf16:
        assert ratios[tp.FEEDFORWARD + tp.BF16] == {tp.SB3: 5.0, tp.FEEDFORWARD: 1.25}
    md = (tmp_path / "gpu.md").read_text()
    assert f"| throughput | 16 / ratios / {tp.FEEDFORWARD + tp.COMPILED} / {tp.FEEDFORWARD} | 1.50 |" in md


P = gpu.Point


def test_first_reach_is_the_first_point_at_or_above_the_target():
    points = [P(100, -20.0), P(200, 17.9), P(300, 18.0), P(400, 17.5), P(500, 19.9), P(600, 20.2), P(700, 21.0)]
    assert gpu.first_reach(points, 18.0) == P(300, 18.0)
    assert gpu.first_reach(points, 20.0) == P(600, 20.2)
    assert gpu.first_reach(points, 21.5) is None
    assert gpu.first_reach([], 18.0) is None
    assert gpu.first_reach(list(reversed(points)), 18.0).step == 300  # step order, not file order


def test_wall_seconds_add_up_across_pieces_without_the_pauses():
    segments = [{"start": 1000.0, "end": 1540.0}, {"start": 5000.0, "end": 5540.0}, {"start": 9000.0, "end": None}]
    assert gpu.wall_seconds_at(segments, 1100.0) == 100.0
    assert gpu.wall_seconds_at(segments, 3000.0) == 540.0  # between pieces: nothing added
    assert gpu.wall_seconds_at(segments, 5100.0) == 640.0
    assert gpu.wall_seconds_at(segments, 9060.0) == 1140.0  # the segment still running


def test_pong_summary_over_two_pieces():
    segments = [{"start": 0.0, "end": 540.0}, {"start": 10_000.0, "end": 10_540.0}]
    points = [
        P(1_000_000, 10.0, 300.0),
        P(2_000_000, 18.2, 530.0),
        P(3_000_000, 19.0, 10_100.0),
        P(3_500_000, 20.1, 10_400.0),
    ]
    state = gpu.pong_summary({"run_dir": "r", "segments": segments[:1]}, points[:2], 2_000_000, 10_000_000)
    assert state["reached"] == {"18": {"env_steps": 2_000_000, "wall_seconds": 530.0}, "20": None}
    assert not state["done"] and state["wall_seconds"] == 540.0 and state["last_mean100"] == 18.2
    state = gpu.pong_summary({**state, "segments": segments}, points, 3_600_000, 10_000_000)  # the next piece
    assert state["reached"]["20"] == {"env_steps": 3_500_000, "wall_seconds": 940.0}
    assert state["done"] and state["status"] == "done: reached 20" and state["wall_seconds"] == 1080.0
    assert state["run_dir"] == "r"


def test_pong_stops_at_the_budget_or_when_the_run_ends():
    segments = [{"start": 0.0, "end": 100.0}]
    points = [P(5_000, -20.0, 50.0)]
    assert gpu.pong_summary({"segments": segments}, points, 10_000_000, 10_000_000)["done"]
    assert gpu.pong_summary({"segments": segments}, points, 9_999_920, 10_000_000, ended=True)["done"]
    assert not gpu.pong_summary({"segments": segments}, points, 9_999_920, 10_000_000)["done"]


def test_the_pong_piece_trains_resumes_and_adds_up_its_segments(tmp_path, monkeypatch, capsys):
    """On the CPU, a 40-step budget: the first piece trains the run to its end; with the budget raised the
    next resumes the same run directory, and the wall time is the two segments'."""
    monkeypatch.setattr(gpu, "cuda_available", lambda: True)
    tiny = ["--num-envs", "2", "--no-cuda", "--log-interval", "1", "--threads", "1"]
    for budget in (40, 80):
        monkeypatch.setattr(gpu, "PONG_BUDGET", budget)
        monkeypatch.setattr(gpu, "PONG_FLAGS", [*tiny, "--max-env-steps", str(budget)])
        assert gpu.main(["pong", "--out-dir", str(tmp_path)]) == 0
        state = json.loads((tmp_path / "gpu.json").read_text())["pong"]
        assert state["done"] and state["env_steps"] == budget and state["status"].startswith("done: the run ended")
        if budget == 40:  # as if it had been stopped: not done, so the next piece carries on
            state["done"] = False
            (tmp_path / "gpu.json").write_text(json.dumps({"pong": state}))
            (tmp_path / "pong_runs" / "done").unlink()
    first, second = state["segments"]
    assert "--resume" not in first["command"] and "--resume" in second["command"]
    assert state["wall_seconds"] == pytest.approx(sum(s["end"] - s["start"] for s in (first, second)), abs=0.1)
    assert len(list((tmp_path / "pong_runs").glob("PongNoFrameskip-v4_*"))) == 1  # one run, resumed
    assert gpu.main(["pong", "--out-dir", str(tmp_path)]) == 0
    assert "this run is done" in capsys.readouterr().out


def test_the_pong_piece_trains_the_gpu_preset_over_the_steps_it_was_screened_for():
    config, _, typed = main.parse_args(["--env-name", gpu.PONG, *gpu.PONG_FLAGS])
    settings = recipes.with_env_defaults(config, typed)
    assert settings.preset == "fast-gpu" and settings.cuda
    assert study.budget(gpu.PONG_BUDGET, gpu.PONG_FLAGS, gpu.PONG)[0] == settings.num_updates  # its decays end there
    assert 0 <= settings.num_updates * settings.steps_per_update - gpu.PONG_BUDGET < settings.steps_per_update
