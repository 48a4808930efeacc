"""One name for each thing: a flag is named for the setting it sets, and the names users may have
typed before still work, meaning what they meant."""

from __future__ import annotations

import pytest

import main as cli
from checkpoints import upgraded


@pytest.mark.parametrize(
    "new, old, setting, value",
    [
        (["--icm-eta", "2"], ["--curiosity-coeff", "2"], "curiosity.eta", 2.0),
        (["--icm-policy-weight", "0.5"], ["--icm-lambda", "0.5"], "curiosity.policy_weight", 0.5),
        (["--no-group-scale-by-std"], ["--no-group-std"], "group.scale_by_std", False),
        (["--optimizer", "rmsprop-tf"], ["--optimizer", "rmsprop"], "optimizer", "rmsprop-tf"),
    ],
)
def test_a_flags_older_name_sets_the_same_setting(new, old, setting, value):
    for argv in (new, old):
        config, _, typed = cli.parse_args(argv)
        assert typed == {setting} and cli.get_setting(config, setting) == value


def test_a_checkpoint_names_its_optimizer_as_it_meant_it():
    # Format 1's "rmsprop" was torch.optim.RMSprop; format 2's was TensorFlow's form.
    first = upgraded({"format": "recurrent-a2c/1", "config": {"optimizer": "rmsprop"}, "optimizer_name": "rmsprop"})
    second = upgraded({"format": "recurrent-a2c/2", "config": {"optimizer": "rmsprop"}, "optimizer_name": "rmsprop"})
    assert (first["config"]["optimizer"], first["optimizer_name"]) == ("torch-rmsprop", "torch-rmsprop")
    assert (second["config"]["optimizer"], second["optimizer_name"]) == ("rmsprop-tf", "rmsprop-tf")


def test_an_agent_built_with_the_older_name_keeps_its_optimizer_state_on_load():
    import torch

    from agent import RMSpropTF, RolloutAgent
    from model import build_model

    model = build_model((4,), 2, recurrent=False)
    older = RolloutAgent(model, optimizer="rmsprop")
    assert isinstance(older.optimizer, RMSpropTF) and older.optimizer_name == "rmsprop-tf"
    model(torch.zeros(3, 4), None, torch.ones(3))[0].sum().backward()
    older.optimizer.step()
    saved = upgraded({"format": "recurrent-a2c/2", **older.state(), "optimizer_name": "rmsprop"})
    fresh = RolloutAgent(build_model((4,), 2, recurrent=False), optimizer="rmsprop-tf")
    fresh.load(saved)
    assert fresh.optimizer.state_dict()["state"].keys() == older.optimizer.state_dict()["state"].keys() != set()
