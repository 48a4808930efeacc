"""The robustness curve (``--eval --robustness``): every cell of sticky actions x no-op starts is
played with those emulator settings, summarized as worked by hand, written as JSON and drawn; a
plain ``--eval`` takes a typed ``--sticky-actions`` in place of its protocol's; bad input is refused."""

from __future__ import annotations

import json
import math
import os

import ale_py.vector_env as ale_vector
import pytest
from tiny_run import train as train_tiny

import main as cli
import robustness

pytestmark = pytest.mark.usefixtures("torch_single_thread")


@pytest.fixture(scope="module")
def tiny_pong(tmp_path_factory) -> str:
    run = train_tiny(tmp_path_factory.mktemp("runs"), "--env-name", "PongNoFrameskip-v4", "--num-updates", "2")
    return os.path.join(run, "a2c_last")


@pytest.fixture
def built(monkeypatch) -> list[tuple[float, int]]:
    """(sticky actions, no-op starts) of every C++ vector env built while the test runs."""
    seen = []
    original = ale_vector.AtariVectorEnv

    def spy(*args, **kwargs):
        seen.append((kwargs["repeat_action_probability"], kwargs["noop_max"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(ale_vector, "AtariVectorEnv", spy)
    return seen


def test_the_grid_crosses_every_stickiness_with_every_noop_start():
    cells = robustness.cell_protocols((0.0, 0.25), (0, 30))
    assert [(c.repeat_action_probability, c.noop_max) for c in cells] == [(0.0, 0), (0.25, 0), (0.0, 30), (0.25, 30)]
    assert {c.max_episode_frames for c in cells} == {108_000}


def test_a_cells_summary_worked_by_hand():
    protocol = robustness.cell_protocols((0.1,), (30,))[0]
    # scores 1, 3, 5: mean 3; population std sqrt((4 + 0 + 4) / 3) = 1.633; stderr 1.633 / sqrt(2) = 1.155
    cell = robustness.cell_summary(protocol, [1, 3, 5], [100, 200, 300])
    assert (cell["sticky_actions"], cell["noop_max"], cell["episodes"]) == (0.1, 30, 3)
    assert cell["mean"] == 3
    assert cell["std"] == pytest.approx(math.sqrt(8 / 3))
    assert cell["stderr"] == pytest.approx(math.sqrt(8 / 3) / math.sqrt(2))
    assert math.isnan(robustness.cell_summary(protocol, [4], [10])["stderr"])


def test_the_table_puts_each_cell_in_its_row_and_column():
    cells = [
        robustness.cell_summary(p, [p.repeat_action_probability * 10 + p.noop_max, 0], [1, 1])
        for p in robustness.cell_protocols((0.0, 0.5), (0, 30))
    ]
    rows = robustness.table({"cells": cells}).splitlines()
    assert len(rows) == 3 and "no no-op starts" in rows[0] and "up to 30" in rows[0]
    # row 0.5: means (5 + 0) / 2 = 2.5 without no-ops and (35 + 0) / 2 = 17.5 with up to 30
    assert rows[2].split()[0] == "0.5" and "2.50 ±" in rows[2] and "17.50 ±" in rows[2]


def test_every_cell_plays_with_its_own_emulator_settings(tiny_pong, tmp_path, built):
    out, path = tmp_path / "curve.png", tmp_path / "curve.json"
    assert (
        cli.main(
            [
                "--eval",
                "--load",
                tiny_pong,
                "--robustness",
                "--episodes",
                "1",
                "--max-episode-frames",
                "120",
                "--no-cuda",
                "--threads",
                "1",
                "--json",
                str(path),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    expected = [(p, n) for n in robustness.NOOP_MAXES for p in robustness.STICKINESS]
    assert built == expected
    with open(path) as f:
        result = json.load(f)
    assert [(c["sticky_actions"], c["noop_max"]) for c in result["cells"]] == expected
    assert all(c["episodes"] == 1 and len(c["scores"]) == 1 for c in result["cells"])
    assert result["trained_sticky_actions"] == 0.0 and result["max_episode_frames"] == 120
    assert out.stat().st_size > 0

    # Several agents' JSON files drawn into one image.
    both = tmp_path / "both.png"
    assert cli.main(["--plot", str(path), str(path), "--out", str(both)]) == 0
    assert both.stat().st_size > 0


def test_a_typed_stickiness_replaces_the_protocols(tiny_pong, tmp_path, built):
    path = tmp_path / "eval.json"
    assert (
        cli.main(
            [
                "--eval",
                "--load",
                tiny_pong,
                "--protocol",
                "classic",
                "--sticky-actions",
                "0.1",
                "--episodes",
                "1",
                "--max-episode-frames",
                "120",
                "--no-cuda",
                "--threads",
                "1",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    assert built == [(0.1, 30)]  # the classic protocol's no-op starts, the typed stickiness
    with open(path) as f:
        assert json.load(f)["sticky_actions"] == 0.1


def test_bad_input_is_refused_in_one_line(tiny_pong, tmp_path, capsys):
    with open(tmp_path / "other.json", "w") as f:
        json.dump({"games": [1]}, f)  # neither --eval --robustness's JSON nor --eval --json's
    cases = [
        ["--eval", "--load", tiny_pong, "--robustness", "--physics-grid"],
        ["--plot", str(tmp_path / "other.json"), "--out", str(tmp_path / "x.png")],
        ["--robustness"],
    ]
    for argv in cases:
        assert cli.main([*argv, "--no-cuda"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
