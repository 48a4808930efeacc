"""Several seeds' agents as one figure (seed_summary.py): the IQM and the two-level bootstrap interval
on cases worked by hand, and the report through ``main.py --plot`` of ``--eval --json`` files."""

from __future__ import annotations

import json

import numpy as np
import pytest

import main as cli
from seed_summary import bootstrap_interval, iqm, summary


def test_iqm_cuts_a_quarter_from_each_end():
    assert iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5  # 2 cut from each end: (3 + 4 + 5 + 6) / 4
    assert iqm([0, 0, 100, 0]) == 0.0  # one cut from each end: one outlier does not move it
    assert iqm([1, 2, 3]) == 2.0  # fewer than four: nothing cut


def test_the_interval_of_agents_that_agree_has_no_width():
    assert bootstrap_interval([[5.0, 5.0], [5.0, 5.0, 5.0]], resamples=200) == (5.0, 5.0)


def test_the_interval_holds_the_spread_between_seeds():
    # Two agents that always score 0 and 10: a resample draws (0, 0), (0, 10) or (10, 10) with
    # chances 1/4, 1/2, 1/4, so the means 0, 5 and 10 all lie inside the 95% interval.
    low, high = bootstrap_interval([[0.0] * 30, [10.0] * 30], resamples=4000)
    assert (low, high) == (0.0, 10.0)


def test_the_interval_holds_the_spread_between_games_and_narrows_with_more():
    rng = np.random.default_rng(1)
    few = [list(rng.normal(0, 10, 10)) for _ in range(3)]
    many = [list(rng.normal(0, 10, 1000)) for _ in range(3)]
    width = [high - low for low, high in (bootstrap_interval(g, resamples=2000) for g in (few, many))]
    assert 0 < width[1] < width[0] / 3  # one game's spread over 10 vs 1000 games an agent
    low, high = bootstrap_interval(few, resamples=2000)
    assert low < summary(few)["mean"] < high
    assert bootstrap_interval(few, resamples=2000) == (low, high)  # seeded: the same interval


def test_plot_of_eval_jsons_prints_the_summary_and_draws_it(tmp_path, capsys):
    paths = []
    for seed, scores in ((1, [18.0, 20.0]), (2, [16.0, 19.0, 21.0]), (3, [20.0])):
        path = tmp_path / f"seed{seed}.json"
        with open(path, "w") as f:
            json.dump({"env_name": "ALE/Pong-v5", "protocol": "machado", "sticky_actions": 0.25, "scores": scores}, f)
        paths.append(str(path))
    out = tmp_path / "seeds.png"
    assert cli.main(["--plot", *paths, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "seed2      18.67 over 3 games" in printed
    expected = summary([[18.0, 20.0], [16.0, 19.0, 21.0], [20.0]])
    assert expected["mean"] == pytest.approx((19 + 56 / 3 + 20) / 3)
    assert f"over 3 agents (6 games): mean {expected['mean']:.2f}" in printed and out.stat().st_size > 0
    assert "IQM 19.25" in printed  # 16 18 19 20 20 21, one cut from each end


def test_agents_played_under_different_protocols_are_refused(tmp_path, capsys):
    paths = []
    for protocol in ("classic", "machado"):
        path = tmp_path / f"{protocol}.json"
        with open(path, "w") as f:
            json.dump({"env_name": "ALE/Pong-v5", "protocol": protocol, "scores": [1.0]}, f)
        paths.append(str(path))
    assert cli.main(["--plot", *paths, "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the agents were played under different envs or protocols") and err.count("\n") == 1
