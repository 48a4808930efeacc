"""The trained agents shipped in agents/: each loads with a plain ``torch.load(..., weights_only=True)``,
plays through ``main.py --eval``, and scores on its recorded check games exactly what its record
says (bench/ship_agent.py wrote both)."""

import glob
import json
import os

import pytest
import torch
from tiny_run import train as train_tiny

import main as cli
from agent import load_model
from checkpoints import agent_file, atomic_save, load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENTS = sorted(path for path in glob.glob(os.path.join(ROOT, "agents", "*")) if not path.endswith(".md"))


def test_agents_are_shipped():
    assert AGENTS, "agents/ holds no agent"


@pytest.mark.parametrize("path", AGENTS, ids=[os.path.basename(p) for p in AGENTS])
def test_a_shipped_agent_loads_anywhere_and_plays_its_recorded_scores(path, tmp_path, capsys):
    data = torch.load(path, weights_only=True)  # no map_location: its tensors are the CPU's
    record = data["record"]
    assert not {"optimizer", "rng", "intrinsic", "episode_returns"} & set(data)  # weights only
    assert {str(w.dtype) for w in data["model"].values() if w.is_floating_point()} == {f"torch.{record['dtype']}"}
    assert len(record["scores"]) == record["episodes"] and record["mean"] == pytest.approx(
        sum(record["scores"]) / record["episodes"]
    )
    check = record["check"]
    out = tmp_path / "scores.json"
    argv = [
        "--eval",
        "--load",
        path,
        "--episodes",
        str(check["episodes"]),
        "--seed",
        str(record["seed"]),
        "--protocol",
        record["protocol"],
        "--json",
        str(out),
        "--no-cuda",
        "--threads",
        "1",
        *(["--deterministic"] if record["deterministic"] else []),
    ]
    assert cli.main(argv) == 0
    assert json.loads(out.read_text())["scores"] == check["scores"]


def test_an_agent_file_keeps_the_weights_and_plays_as_the_checkpoint(tmp_path):
    from bench import ship_agent

    assert (
        cli.main(
            [
                "--env-name",
                "CartPole-v1",
                "--num-envs",
                "2",
                "--num-updates",
                "3",
                "--no-progress",
                "--no-cuda",
                "--threads",
                "1",
                "--log-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    (last,) = glob.glob(str(tmp_path / "CartPole-v1_*" / "a2c_last"))
    full = load_checkpoint(last)
    small = agent_file(full, torch.float16, {"note": 1})
    assert set(small) <= set(full) | {"record"} and "optimizer" not in small and small["record"] == {"note": 1}
    assert all(small["model"][k].dtype == torch.float16 for k, v in full["model"].items() if v.is_floating_point())
    atomic_save(small, str(tmp_path / "agent"))
    model, original = load_model(str(tmp_path / "agent")), load_model(last)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # float16 on disk, float32 to play
    for p, q in zip(model.parameters(), original.parameters()):
        assert torch.allclose(p, q, atol=1e-3, rtol=1e-3)
    # The shipping tool writes a file whose check games replay alike, and refuses bad input in one line.
    assert ship_agent.main([last, str(tmp_path / "shipped"), "--episodes", "2", "--check-episodes", "1"]) == 0
    record = torch.load(tmp_path / "shipped", weights_only=True)["record"]
    assert record["dtype"] in ("float16", "float32") and len(record["check"]["scores"]) == 1
    assert record["protocols"] == ["classic"] and "machado" not in record  # a control env has one protocol
    assert ship_agent.main([str(tmp_path / "missing"), str(tmp_path / "x")]) == 2


def test_an_atari_agent_is_shipped_with_its_scores_under_both_protocols(tmp_path):
    from bench import ship_agent

    # 1,200 emulator frames a game: a few points lost, so that the scores tell the games apart.
    run = train_tiny(
        tmp_path / "runs", "--env-name", "PongNoFrameskip-v4", "--num-updates", "2", "--max-episode-frames", "1200"
    )
    target = tmp_path / "pong"
    assert (
        ship_agent.main([os.path.join(run, "a2c_last"), str(target), "--episodes", "2", "--check-episodes", "1"]) == 0
    )
    record = torch.load(target, weights_only=True)["record"]
    assert record["protocols"] == ["classic", "machado"] and record["protocol"] == "classic"
    for protocol, entry in (("classic", record), ("machado", record["machado"])):
        out = tmp_path / f"{protocol}.json"
        argv = ["--eval", "--load", str(target), "--episodes", "2", "--seed", str(record["seed"])]
        assert cli.main([*argv, "--protocol", protocol, "--json", str(out), "--no-cuda", "--threads", "1"]) == 0
        assert json.loads(out.read_text())["scores"] == entry["scores"]  # what --eval plays under it
        assert entry["mean"] == pytest.approx(sum(entry["scores"]) / 2) and len(entry["scores"]) == 2
    assert min(record["scores"] + record["machado"]["scores"]) < 0  # real games, not empty ones
