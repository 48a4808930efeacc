"""bench/arithmetic.py: the FLOPs it counts for the fast-cpu preset's network, worked by hand, and a
tiny run of its command line."""
from __future__ import annotations

import re

import pytest
import torch

from bench import arithmetic

pytestmark = pytest.mark.usefixtures("torch_single_thread")

# The preset's encoder on a 4x64x64 frame, in multiply-adds (output pixels x filters x inputs a filter):
# 32x32x32 x (4x3x3) + 16x16x32 x (32x3x3) + 8x8x32 x 288 + 4x4x32 x 288; the max-pool of the last 4x4
# maps to 3x3 compares, it does not multiply.
CONV1, CONVS = 32 * 32 * 32 * 36, 32 * 32 * 32 * 36 + 16 * 16 * 32 * 288 + 8 * 8 * 32 * 288 + 4 * 4 * 32 * 288
LSTM_IH, LSTM_HH = 288 * 1024, 256 * 1024      # the layer-normalized LSTM's two products (4 gates of 256)
HEADS = (288 + 256) * (6 + 1)                  # actor (6 actions) and critic read features and h side by side


def test_encoder_forward_counts_two_flops_a_multiply_add():
    config = arithmetic.cli_config(arithmetic.preset_argv(""))
    encoder, frames = arithmetic.preset_encoder(config), arithmetic.preset_frames(config)
    assert frames.shape == (16, 4, 64, 64) and frames.dtype == torch.uint8
    with torch.no_grad():
        flops = arithmetic.counted_flops(lambda: encoder(frames))
    assert CONVS == 4_276_224
    assert flops == 16 * 2 * CONVS


def test_an_env_step_costs_its_share_of_one_update_forward_and_backward():
    # One update of 16 envs x 5 steps: 96 frames forward (80 acting with gradients, 16 for the last
    # observation's value), 80 backward. Backward computes each product's two gradients, weights and
    # inputs, but for the first convolution's input (the frames) and the LSTM's state at the
    # rollout's first step (detached from the last update): 16 of its 80.
    forward = 2 * (CONVS + LSTM_IH + LSTM_HH + HEADS)
    backward = 2 * (2 * (CONVS + LSTM_IH + LSTM_HH + HEADS) - CONV1) - 2 * LSTM_HH * 16 / 80
    assert arithmetic.flops_per_env_step(arithmetic.preset_argv("")) == pytest.approx(
        (96 * forward + 80 * backward) / 80, rel=1e-12)


def test_flags_beside_the_preset_change_what_is_counted():
    smaller = arithmetic.flops_per_env_step(arithmetic.preset_argv("--hidden-size 128"))
    assert smaller < arithmetic.flops_per_env_step(arithmetic.preset_argv(""))


def test_the_command_prints_each_rate_against_matmul(capsys):
    assert arithmetic.main(["--steps", "160", "--repeats", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "--preset fast-cpu: 16 envs, frames of 64, torch threads: 1" in out
    for name in ("matmul", "encoder forward", "encoder forward+backward", "network alone"):
        assert re.search(rf"^{re.escape(name)} +[\d.]+ GFLOP/s  \(\d+% of matmul\)$", out, re.M), name
    assert re.search(r"^network alone: [\d,]+ env steps/s at 28\.49 MFLOP an env step; at matmul's rate [\d,]+ "
                     r"env steps/s \([\d.]+x\)$", out, re.M)


def test_flags_main_py_refuses_exit_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        arithmetic.main(["--flags=--num-envs 0"])
    assert exc.value.code == 2
    assert "--flags '--num-envs 0'" in capsys.readouterr().err
