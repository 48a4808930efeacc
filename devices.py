"""Where a run computes and with what arithmetic: the device, the float policy, and the copies of
the envs' arrays onto the device.

The device: Atari games train on the GPU when CUDA is there; envs with vector observations train
on the CPU, where their small MLPs run faster than a GPU can be handed work (stable-baselines3
gives the same advice for its MLP policies). ``--cuda`` asks for the GPU for any env, ``--no-cuda``
for the CPU; only a typed ``--cuda`` on a machine without CUDA prints the fallback line.

The float policy: float32 means float32. PyTorch lets cuDNN compute float32 convolutions in
TF32 (10 bits of mantissa) on Ampere and later GPUs by default; here TF32 is off unless
``--tf32`` asks for it, as ``--bf16`` asks for bfloat16. ``--reproducible`` picks deterministic
kernels where torch has them and names those it has not.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Optional

import numpy as np
import torch

from perf import keep_freed_memory

# cuBLAS needs a fixed workspace to be deterministic; read when its first handle is made.
CUBLAS_DETERMINISTIC_WORKSPACE = ":4096:8"


def choose_device(want_cuda: Optional[bool], cuda_by_default: bool, *, say: bool = True) -> torch.device:
    """The device of a run: ``want_cuda`` None (not typed) takes CUDA where it is available if
    ``cuda_by_default`` (its env family's ``cuda``: Atari games), else the CPU; True takes CUDA when it is available and
    otherwise says so (with ``say``) and takes the CPU; False takes the CPU."""
    if want_cuda is None:
        want_cuda = cuda_by_default
        if not torch.cuda.is_available():
            return torch.device("cpu")
    if want_cuda and torch.cuda.is_available():
        return torch.device("cuda")
    if want_cuda and say:
        print("CUDA is not available; running on the CPU", file=sys.stderr)
    return torch.device("cpu")


def pick_device(
    want_cuda: Optional[bool],
    threads: int = 0,
    keep_freed: bool = True,
    *,
    cuda_by_default: bool = True,
    tf32: bool = False,
    reproducible: bool = False,
    say: bool = True,
) -> torch.device:
    """The torch device to use (:func:`choose_device`: ``want_cuda`` None picks by the env
    family; ``say``: print the fallback line, which under torchrun one process a machine
    does), after setting the CPU thread count (0: torch's default), the float policy (``tf32``,
    ``reproducible``) and, with ``keep_freed``, letting malloc keep freed activations for reuse
    (`perf.keep_freed_memory`)."""
    if keep_freed:
        keep_freed_memory()
    if threads > 0:
        torch.set_num_threads(threads)
    set_float_policy(tf32)
    if reproducible:
        make_reproducible()
    return choose_device(want_cuda, cuda_by_default, say=say)


def describe(device: torch.device, *, tf32: bool = False, bf16: bool = False) -> str:
    """The line a run starts with: its device and its arithmetic."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        name = f"{device.type}:{index} ({torch.cuda.get_device_name(index)})"
        arithmetic = "float32 with TF32 convolutions and matmuls" if tf32 else "float32 (TF32 off)"
    else:
        threads = torch.get_num_threads()
        name = f"cpu ({threads} thread{'s' if threads != 1 else ''})"
        arithmetic = "float32"
    if bf16:
        arithmetic += ", the conv encoder in bfloat16"
    return f"device: {name}, {arithmetic}"


def set_float_policy(tf32: bool) -> None:
    """TF32 for cuDNN's convolutions and cuBLAS's matmuls only when asked (``--tf32``); otherwise a
    float32 run computes in float32 on every device. Harmless without CUDA."""
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32


def make_reproducible() -> None:
    """Deterministic kernels where torch has them (``--reproducible``): torch warns once for each
    op that has none, instead of failing; cuDNN neither autotunes nor picks nondeterministic
    algorithms, and cuBLAS gets the fixed workspace it needs. Call before the first CUDA op."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def nondeterministic_parts(device: torch.device, *, arch: str, image_obs: bool, world_size: int = 1) -> list[str]:
    """What ``--reproducible`` cannot make deterministic for a run on ``device``; empty on the CPU,
    where every op this project uses is deterministic for a fixed thread count."""
    if device.type != "cuda":
        return []
    parts = []
    if image_obs and arch == "universe":
        parts.append(
            "the backward pass of the universe encoder's AdaptiveMaxPool2d (torch has no deterministic "
            "CUDA kernel for it)"
        )
    if world_size > 1:
        parts.append("the order in which NCCL sums the ranks' gradients")
    return parts


def channels_last_for(setting: Optional[bool], device: torch.device, bf16: bool) -> bool:
    """Whether the conv encoders use channels-last memory: as typed, or by default on the CPU
    (measured faster there) and on a GPU only with bf16 (float32 on a GPU not measured yet)."""
    if setting is not None:
        return setting
    return device.type == "cpu" or bf16


class HostToDevice:
    """Copies the envs' numpy arrays onto the device without waiting for the GPU.

    On the CPU an array becomes a tensor that shares its memory: no copy. On a GPU each array is
    written into one of ``slots`` page-locked buffers, in turn, and copied from there
    asynchronously; an event recorded after each copy is waited on before its buffer is written
    again, so a copy still in flight never reads a half-written buffer (with two slots the wait
    is for the copy of two calls ago, long finished). The returned tensors are the device's own,
    never the buffers.

    ``pinned`` and ``make_event`` default to what the device needs; tests pass their own to check
    the order of writes, copies and waits on the CPU.
    """

    def __init__(
        self,
        device: torch.device | str,
        slots: int = 2,
        *,
        pinned: Optional[bool] = None,
        make_event: Optional[Callable[[], Any]] = None,
    ) -> None:
        self.device = torch.device(device)
        self.staged = self.device.type == "cuda" if pinned is None else True
        self.pinned = self.device.type == "cuda" if pinned is None else pinned
        self.make_event = make_event or (torch.cuda.Event if self.device.type == "cuda" else None)
        self.buffers: list[Optional[torch.Tensor]] = [None] * slots
        self.events: list[Any] = [None] * slots
        self.next = 0

    def __call__(self, array: np.ndarray) -> torch.Tensor:
        if not self.staged:
            return torch.as_tensor(array, device=self.device)
        source = torch.from_numpy(np.ascontiguousarray(array))
        slot = self.next
        self.next = (slot + 1) % len(self.buffers)
        if self.events[slot] is not None:
            self.events[slot].synchronize()  # that slot's last copy has finished reading it
        buffer = self.buffers[slot]
        if buffer is None or buffer.shape != source.shape or buffer.dtype != source.dtype:
            buffer = self.buffers[slot] = torch.empty(source.shape, dtype=source.dtype, pin_memory=self.pinned)
        buffer.copy_(source)
        out = buffer.to(self.device, non_blocking=True, copy=True)
        event = self.events[slot] = self.make_event()
        event.record()
        return out
