"""A network refuses observations of another shape than it was built for, in one line, rather than
playing them badly: the universe encoder's adaptive pooling would take frames of any size."""

from __future__ import annotations

import pytest
import torch

from model import build_model

pytestmark = pytest.mark.usefixtures("torch_single_thread")


@pytest.mark.parametrize("recurrent", [True, False])
def test_frames_of_another_size_are_refused(recurrent):
    model = build_model((4, 64, 64), 6, recurrent=recurrent)
    state, starts = model.initial_state(2), torch.ones(2)
    logits, _, _ = model(torch.zeros(2, 4, 64, 64, dtype=torch.uint8), state, starts)
    assert logits.shape == (2, 6)
    with pytest.raises(ValueError, match=r"built for observations of shape \(4, 64, 64\), got \(4, 84, 84\)") as info:
        model(torch.zeros(2, 4, 84, 84, dtype=torch.uint8), state, starts)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="got \\(3, 64, 64\\)"):  # a stack of another depth
        model.forward_sequence(torch.zeros(5, 2, 3, 64, 64, dtype=torch.uint8), state, torch.ones(5, 2))


def test_a_loaded_agent_refuses_them_too(tmp_path):
    from tiny_run import train

    from algorithms import load_agent

    run = train(tmp_path, "--env-name", "PongNoFrameskip-v4", "--frame-size", "64", "--num-updates", "1")
    model = load_agent(f"{run}/a2c_last").model
    with pytest.raises(ValueError, match=r"built for observations of shape \(4, 64, 64\)"):
        model(torch.zeros(1, 4, 84, 84, dtype=torch.uint8), model.initial_state(1), torch.ones(1))
    with pytest.raises(ValueError, match=r"built for observations of shape \(8,\)"):  # vectors, too
        build_model((8,), 2, recurrent=False)(torch.zeros(1, 9), None, torch.ones(1))
