"""Speed code that is not part of any network or loop: the process's memory allocator
(:func:`keep_freed_memory`), the hardware check for bfloat16 (:func:`has_fast_bf16`), and the
process's resident memory (:func:`resident_memory_mib`, logged as ``train/resident_memory_mib``).

Every speed trick is switched by one setting of ``config.Speed`` (flags ``--channels-last``,
``--keep-graph``, ``--encoder-chunk``, ``--keep-freed-memory``, ``--bf16``), and
docs/speed.md measures what each buys with the command that measures it; the C++ env path is
``--vec-env ale``. The code of the others stays where it acts: ``ConvEncoder`` (passes of a few
frames), ``ActorCritic`` (channels-last, ``casting_once`` for bfloat16) and ``Runner``
(training through the collected forward pass).
"""

from __future__ import annotations

import os

import torch

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc malloc.h)


def keep_freed_memory(enable: bool = True) -> bool:
    """Let glibc's malloc reuse freed large blocks instead of returning them to the OS.

    By default glibc serves each block over a threshold (128 KiB to 32 MiB, adjusting itself)
    with a fresh ``mmap`` and unmaps it when freed, so every activation of a training step is
    new memory whose pages fault in on first touch: on a small CPU that cost is a large share
    of an update. Raising the mmap threshold to its 32 MiB maximum and the trim threshold far
    above it keeps those blocks in the heap. Peak memory is unchanged (it is reused, not
    grown). ``enable=False`` sets glibc's default thresholds back (fixed, without glibc's own
    adjustment). Returns False where glibc is not the allocator (nothing is changed then).
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mmap, trim = (32 * 1024 * 1024, 1024 * 1024 * 1024) if enable else (128 * 1024, 128 * 1024)
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap)) and bool(mallopt(_M_TRIM_THRESHOLD, trim))


def has_fast_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bfloat16 in hardware: a GPU that supports it, or a CPU with
    AVX-512 BF16 or AMX. Elsewhere bfloat16 is emulated and slower than float32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


# ---------------------------------------------------------------------------------------------
# Process memory
# ---------------------------------------------------------------------------------------------
def resident_memory_mib() -> float:
    """This process's resident set size now (Linux ``/proc``; NaN elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
