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
# seed=5, max_episode_frames=400) on the default ale path with one torch thread, default optimizer.
RECORDED = {
    ("universe", True): [[-0.18228641, -0.17302273, 0.01730781, 1.79175913, 0.36960936],
                         [-0.00876487, 0.00912235, 6.074e-05, 1.79175878, 0.0347568],
                         [-0.00163087, 0.01621339, 0.00014666, 1.79175878, 0.06096847],
                         [0.00686118, 0.02467323, 0.00021109, 1.79175878, 0.0941853]],
    ("nature", False): [[0.00289413, 0.01658506, 0.00845321, 1.79175448, 0.49378681],
                        [-0.03047606, -0.01263305, 0.000149, 1.79175186, 0.16662508],
                        [-0.04247101, -0.02470525, 0.00030351, 1.7917515, 0.32181141],
                        [-0.04079999, -0.02305866, 0.00035236, 1.79175127, 0.30623597]],
}


@pytest.mark.parametrize("arch,recurrent", list(RECORDED))
def test_short_run_gives_the_recorded_losses(make_runner, tmp_path, arch, recurrent):
    config = Config(num_envs=2, num_updates=4, seed=5, tensorboard=False, progress=False, arch=arch,
                    recurrent=recurrent, max_episode_frames=400, checkpoint_interval=10**6)
    runner = make_runner(config, tmp_path)
    runner.train()
    got = torch.tensor([[h[k] for k in TERMS] for h in runner.history], dtype=torch.float64)
    assert_close(got, torch.tensor(RECORDED[(arch, recurrent)], dtype=torch.float64), rtol=1e-4, atol=1e-6)
