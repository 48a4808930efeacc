"""A fixed-seed short Pong run gives the losses recorded from the code as it stood before the
redesign: a refactor that leaves the math alone must leave these numbers alone (to float rounding)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from config import Config

pytestmark = pytest.mark.usefixtures("torch_single_thread")

TERMS = ("total", "policy", "value", "entropy", "grad_norm")
# Each update's (total, policy, value, entropy, grad_norm): Config(num_envs=2, num_updates=4,
# seed=5, max_episode_frames=400) on the default ale path with one torch thread, and RECORDED_WITH.
RECORDED = {
    ("universe", True, "plain LSTM"): [
        [-0.18228641, -0.17302273, 0.01730781, 1.79175913, 0.36960936],
        [-0.00876487, 0.00912235, 6.074e-05, 1.79175878, 0.0347568],
        [-0.00163087, 0.01621339, 0.00014666, 1.79175878, 0.06096847],
        [0.00686118, 0.02467323, 0.00021109, 1.79175878, 0.0941853],
    ],
    ("nature", False, "fast"): [
        [0.00289413, 0.01658506, 0.00845321, 1.79175448, 0.49378681],
        [-0.03047606, -0.01263305, 0.000149, 1.79175186, 0.16662508],
        [-0.04247101, -0.02470525, 0.00030351, 1.7917515, 0.32181141],
        [-0.04079999, -0.02305866, 0.00035236, 1.79175127, 0.30623597],
    ],
    # The recurrent default since the layer-normalized LSTM, the skip connection and torch's RMSprop.
    ("universe", True, "default"): [
        [0.59964061, 0.54470885, 0.14569849, 1.79175115, 5.33720064],
        [-0.32217327, -0.34743246, 0.07783007, 1.36558342, 7.41781998],
        [-0.6052829, -0.70701522, 0.23923667, 1.78860223, 7.57822847],
        [0.37365103, 0.32187641, 0.1250037, 1.07272267, 14.42822456],
    ],
}

# The settings each was recorded with, where they are not today's defaults.
RECORDED_WITH = {
    ("universe", True, "plain LSTM"): {"optimizer": "rmsprop", "lstm_norm": False, "core_skip": False},
    ("nature", False, "fast"): {"optimizer": "rmsprop"},
    ("universe", True, "default"): {},
}


@pytest.mark.parametrize("arch,recurrent,label", list(RECORDED))
def test_short_run_gives_the_recorded_losses(make_runner, tmp_path, arch, recurrent, label):
    config = Config(
        num_envs=2,
        num_updates=4,
        seed=5,
        tensorboard=False,
        progress=False,
        arch=arch,
        recurrent=recurrent,
        max_episode_frames=400,
        checkpoint_interval=10**6,
        **RECORDED_WITH[(arch, recurrent, label)],
    )
    runner = make_runner(config, tmp_path)
    runner.train()
    got = torch.tensor([[h[k] for k in TERMS] for h in runner.history], dtype=torch.float64)
    assert_close(got, torch.tensor(RECORDED[(arch, recurrent, label)], dtype=torch.float64), rtol=1e-4, atol=1e-6)
