"""``--resume`` of a run: settings fixed for the run (``--icm``, ``--seed``, ``--optimizer``,
``--icm-normalize``) refused with the checkpoint left untouched, a run that did all its updates
refused until given more, and the curiosity reward's running std carried across the resume.
(Resuming step counts, curves, optimizer and random streams: tests/test_cli.py.)"""

from __future__ import annotations

import os

import pytest
import torch
from tiny_run import train as train_tiny

import main as cli
from algorithms import load_agent

pytestmark = pytest.mark.usefixtures("torch_single_thread")


# ------------------------------------------------------------------------------------------------ refusals
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, torch_single_thread) -> str:
    """A plain Pong run that did all its 2 updates."""
    return train_tiny(tmp_path_factory.mktemp("finished"), "--num-updates", "2", "--max-episode-frames", "120")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--icm"], "was saved with --icm false (other settings); cannot use true"),
        (["--seed", "4"], "was saved with --seed 3 (other settings); cannot use 4"),
        (["--optimizer", "adam"], "was saved with --optimizer torch-rmsprop (other settings); cannot use adam"),
        (["--icm-normalize"], "was saved with --icm-normalize false"),
    ],
)
def test_resume_refuses_to_change_a_fixed_setting(finished_run, one_line_error, flags, message):
    last = os.path.join(finished_run, "a2c_last")
    before = open(last, "rb").read()
    assert message in one_line_error(["--resume", last, "--num-updates", "4", *flags])
    assert open(last, "rb").read() == before


@pytest.mark.parametrize("more", [[], ["--num-updates", "2"], ["--num-updates", "1"]])
def test_resume_of_a_run_that_did_all_its_updates_is_refused(finished_run, one_line_error, more):
    last = os.path.join(finished_run, "a2c_last")
    before = sorted(os.listdir(finished_run)), open(last, "rb").read()
    wanted = more[1] if more else "2"
    message = one_line_error(["--resume", last, *more])
    assert message == (
        f"error: checkpoint {last} already ran 2 of {wanted} updates; pass a larger --num-updates to train further"
    )
    assert (sorted(os.listdir(finished_run)), open(last, "rb").read()) == before


# ------------------------------------------------------------------------------------------------ icm running std
def test_icm_normalize_running_std_is_saved_and_restored(tmp_path, monkeypatch):
    import runner as runner_module

    # Pong in 400-frame games: no episode ends in 2 updates, so all 2 x 10 transitions are counted.
    run_dir = train_tiny(
        tmp_path / "runs", "--icm", "--icm-normalize", "--num-updates", "2", "--max-episode-frames", "400"
    )
    last = os.path.join(run_dir, "a2c_last")
    saved = torch.load(last, weights_only=True)["intrinsic_std"]
    assert saved["count"] == 20 and saved["m2"] > 0 and saved["mean"] > 0
    agent = load_agent(last)
    assert agent.intrinsic_std is not None and agent.intrinsic_std.state_dict() == saved
    # A resume starts training from those numbers ...
    seen = {}

    def train(self):
        seen["std"] = self.agent.intrinsic_std.state_dict()
        return self.state

    with monkeypatch.context() as patch:
        patch.setattr(runner_module.Runner, "train", train)
        assert cli.main(["--no-cuda", "--resume", last, "--num-updates", "3"]) == 0
    assert seen["std"] == saved
    # ... and counts on from them.
    assert cli.main(["--no-cuda", "--resume", last, "--num-updates", "3"]) == 0
    resumed = torch.load(last, weights_only=True)
    assert resumed["update"] == 3 and resumed["intrinsic_std"]["count"] == 30
    assert resumed["intrinsic_std"]["m2"] >= saved["m2"]
