"""Fewer kernel launches a step (``--compile``): the network compiled with ``torch.compile``.

A step of the recurrent default is dozens of small kernels one after another (convs, the
layer-normalized LSTM's gates and norms, the heads): on a GPU at 16 envs, launching them costs
more than computing them. Compiling the network fuses its elementwise work into a few kernels,
for the acting step and for the update, which trains through the outputs the acting step kept
(``--keep-graph``) and through their compiled backward. What it computes is the network's own
function: ``tests/test_capture.py`` checks losses and gradients against the eager network.

Compiled is the network's call, ``model(obs, state, episode_starts)``: the acting step, for the
whole batch of envs and the run's frames, so a run compiles it once (and once more for the
periodic evaluation's batch) and never again; the values bootstrapped at a time limit or at a
rollout's end go through ``model.value``, uncompiled, whatever their batch size. The first steps
pay the compilation (``docs/speed.md`` says how long). CUDA graphs (compile's ``reduce-overhead``
mode) are not used: the rollout keeps every step's outputs for the update, which a graph's next
replay would overwrite. The module stays an ``nn.Module`` with its own parameter names, so
checkpoints are the same with or without it.
"""

from __future__ import annotations

from typing import Optional

from model import ActorCritic


def compile_network(model: ActorCritic, backend: Optional[str] = None) -> ActorCritic:
    """Compile ``model``'s forward pass in place (``nn.Module.compile``), and return it.
    ``backend``: torch.compile's (None: its default, inductor)."""
    model.compile(**({"backend": backend} if backend is not None else {}))
    return model
