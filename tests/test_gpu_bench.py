"""bench/gpu.py on a machine without a GPU: the env piece, the refusals, the results file, the
Pong bookkeeping and bad input. Runs in-process, in a few seconds; nothing here times anything."""
from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import gpu  # noqa: E402

ENV_KEYS = {"torch", "cuda", "cudnn", "gpu_name", "gpu_memory_gib", "bf16_supported", "cpu_count", "ale_py",
            "stable_baselines3", "gymnasium", "git_commit", "command"}
GPU_FIELDS = ("cudnn", "gpu_name", "gpu_memory_gib", "bf16_supported")


@pytest.fixture
def no_cuda(monkeypatch):
    """As on a machine without CUDA, even where the tests run on one."""
    monkeypatch.setattr(gpu, "cuda_available", lambda: False)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_env_piece_runs_without_a_gpu(no_cuda, tmp_path, capsys):
    assert gpu.main(["env", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no CUDA device: only the env piece runs" in out
    results = json.loads((tmp_path / "gpu.json").read_text())
    env = results["env"]
    assert set(env) == ENV_KEYS
    assert all(env[key] is None for key in GPU_FIELDS)
    assert env["cpu_count"] == os.cpu_count() and env["torch"]
    assert env["command"] == f"python bench/gpu.py env --out-dir {tmp_path}"
    markdown = (tmp_path / "gpu.md").read_text()
    assert "| env | cpu_count |" in markdown and "cores |" in markdown and "python bench/gpu.py env" in markdown


@pytest.mark.parametrize("piece", ["smoke", "throughput", "pong", "all"])
def test_gpu_pieces_refuse_without_cuda(no_cuda, tmp_path, capsys, piece):
    assert gpu.main([piece, "--out-dir", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in one_error_line(capsys.readouterr().err)
    results = json.loads((tmp_path / "gpu.json").read_text()) if (tmp_path / "gpu.json").exists() else {}
    assert set(results) <= {"env"}  # `all` runs env first; nothing else is written


@pytest.mark.parametrize("argv", [["bogus"], [], ["throughput", "--steps", "0"], ["throughput", "--repeats", "-1"],
                                  ["throughput", "--envs", "16", "0"], ["throughput", "--envs", "x"],
                                  ["pong", "--minutes", "0"], ["pong", "--minutes", "inf"],
                                  ["pong", "--max-env-steps", "-5"], ["pong", "--flags=--lr 'x"],
                                  ["env", "--nonsense"]])
def test_bad_input_gets_one_line_and_exit_2(tmp_path, capsys, argv):
    assert gpu.main([*argv, "--out-dir", str(tmp_path)]) == 2
    one_error_line(capsys.readouterr().err)


def test_an_unwritable_out_dir_gets_exit_2(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert gpu.main(["env", "--out-dir", str(blocker / "out")]) == 2
    assert "--out-dir" in one_error_line(capsys.readouterr().err)


def test_merge_keeps_every_piece_and_every_env_count():
    old = {"env": {"torch": "2.13", "command": "a"},
           "throughput": {"16": {"trainers": {"sb3": {"steps_per_s": 1.0}}}, "command": "b"}}
    new = {"throughput": {"64": {"trainers": {"sb3": {"steps_per_s": 2.0}}}, "command": "c"}}
    merged = gpu.merge(old, new)
    assert merged["env"] == old["env"]
    assert set(merged["throughput"]) == {"16", "64", "command"} and merged["throughput"]["command"] == "c"
    assert gpu.merge(merged, {"throughput": {"16": {"trainers": {"sb3": {"steps_per_s": 3.0}}}}}) \
        ["throughput"]["16"]["trainers"]["sb3"]["steps_per_s"] == 3.0
    assert old["throughput"].keys() == {"16", "command"}  # the inputs are left as they were


def test_two_pieces_merge_in_the_json_and_the_markdown(tmp_path):
    gpu.save(str(tmp_path), "smoke", {"passed": 3, "failed": 0, "skipped": 1, "errors": 0, "exit_code": 0}, ["smoke"])
    cell = {"trainers": {"ours recurrent": {"steps_per_s": 3000.0, "peak_gpu_mib": 120.5},
                         "sb3": {"steps_per_s": 1000.0, "peak_gpu_mib": 0.0}},
            "ratios_over_sb3": {"ours recurrent": 3.0}}
    gpu.save(str(tmp_path), "throughput", {"16": cell}, ["throughput", "--envs", "16"])
    gpu.save(str(tmp_path), "pong", {"reached": {"18": {"env_steps": 2_000_000, "wall_seconds": 600.0}, "20": None},
                                     "env_steps": 2_500_000, "wall_seconds": 800.0, "status": "running"}, ["pong"])
    results = json.loads((tmp_path / "gpu.json").read_text())
    assert set(results) == {"smoke", "throughput", "pong"}
    assert results["smoke"]["command"] == "python bench/gpu.py smoke"
    assert results["throughput"]["command"] == "python bench/gpu.py throughput --envs 16"
    markdown = (tmp_path / "gpu.md").read_text()
    for row in ["| smoke | passed | 3 | tests |", "| throughput | ours recurrent, 16 envs | 3,000.00 | env steps/s |",
                "| throughput | ours recurrent, 16 envs, peak GPU memory | 120.50 | MiB |",
                "| throughput | ours recurrent / sb3, 16 envs | 3.00 | x |",
                "| pong | mean-100 first >= 18: env steps | 2,000,000 | env steps |",
                "| pong | mean-100 first >= 18: wall clock | 600.00 | s |",
                "| pong | mean-100 first >= 20: env steps | - | env steps |",
                "- pong: `python bench/gpu.py pong`"]:
        assert row in markdown, row
    assert "sb3, 16 envs, peak GPU memory" not in markdown  # 0 MiB: not measured on the GPU
    # pong replaces its own entry; the others stay
    gpu.save(str(tmp_path), "pong", {"status": "done"}, ["pong"], replace=True)
    results = json.loads((tmp_path / "gpu.json").read_text())
    assert results["pong"] == {"status": "done", "command": "python bench/gpu.py pong"}
    assert results["smoke"]["passed"] == 3 and "16" in results["throughput"]


def test_pytest_summary_counts():
    output = "....s\nSKIPPED [1] tests/a.py:3: no GPU\n4 passed, 1 skipped, 2 deselected, 3 warnings in 2.50s\n"
    assert gpu.parse_pytest_summary(output) == {"passed": 4, "failed": 0, "skipped": 1, "errors": 0,
                                                "deselected": 2}
    assert gpu.parse_pytest_summary("F\n= 1 failed, 2 errors in 0.1s =")["errors"] == 2
    assert gpu.parse_pytest_summary("no tests ran in 0.01s")["passed"] == 0


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
    points = [P(1_000_000, 10.0, 300.0), P(2_000_000, 18.2, 530.0), P(3_000_000, 19.0, 10_100.0),
              P(3_500_000, 20.1, 10_400.0)]
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
