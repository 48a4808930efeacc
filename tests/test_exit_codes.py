"""Exit codes of ``main.py`` the README promises beyond bad input's 2 (tests/test_cli.py): 1 after
``--max-skipped-updates`` non-finite losses in a row, with a2c_last holding the last good weights;
2, in one line and before anything starts, for a flag given without its mode."""

from __future__ import annotations

import os

import pytest
import torch
from tiny_run import TINY

import main as cli

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_repeated_non_finite_losses_exit_with_code_1(tmp_path, monkeypatch, capsys):
    import agent as agent_module

    real_loss = agent_module.A2CAgent.loss

    def nan_loss(self, batch):
        return {k: v * float("nan") for k, v in real_loss(self, batch).items()}

    monkeypatch.setattr(agent_module.A2CAgent, "loss", nan_loss)
    code = cli.main(
        [
            *TINY,
            "--num-updates",
            "50",
            "--max-skipped-updates",
            "2",
            "--max-episode-frames",
            "120",
            "--log-dir",
            str(tmp_path),
        ]
    )
    captured = capsys.readouterr()
    assert code == 1  # README: --max-skipped-updates in a row stop training (exit code 1)
    assert "error: 2 non-finite losses in a row" in captured.err
    assert "2 non-finite losses in a row; stopped with the last good weights; 20 env steps, 2 updates" in captured.out
    (run,) = os.listdir(tmp_path)
    last = torch.load(tmp_path / run / "a2c_last", weights_only=True)
    assert last["update"] == 2 and all(torch.isfinite(v).all() for v in last["model"].values())


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--load", "runs/x/a2c_best_reward"], "error: --load is for --eval; to continue training use --resume PATH"),
        (
            ["--out", "curves.png"],
            "error: --out is for --plot RUN_DIR [RUN_DIR ...], --eval --physics-grid and --eval --robustness",
        ),
    ],
)
def test_mode_flag_without_its_mode_is_refused(argv, message, one_line_error, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a run that started anyway would leave runs/ here
    # (a tiny one: a regression fails fast instead of training for hours)
    assert one_line_error([*argv, *TINY, "--num-updates", "1", "--max-episode-frames", "120"]) == message
    assert os.listdir(tmp_path) == []
