"""How many frames the universe encoder should take per pass on the CPU.

The update runs the conv encoder over a whole rollout (16 envs x 5 steps = 80 frames) with
gradients. Its first feature maps are 32 x 42 x 42 floats, 225 KB a frame, so 80 frames in one
pass stream about 18 MB per layer through memory, forward and again backward. Passes of a few
frames keep them near the core's cache. This script times the forward and backward pass of the
encoder (channels-last, as trained) over one rollout for several pass sizes, in turn, for
``--repeats`` rounds, and prints each median with its speed-up over the whole batch in one pass;
``Speed.encoder_chunk`` (``--encoder-chunk``) is the size chosen from it. The Nature CNN is timed alongside
for contrast (its first maps are 20x20, and it is not split).

With ``--bf16``, each encoder is timed instead in float32 and under bfloat16 autocast, as
training runs it: the rollout is collected with gradients, one pass per step over the frames of
16 envs, and the update's backward pass goes through those passes (``--step-frames``). bfloat16
is timed twice: with each pass in an autocast region of its own, which casts every weight to
bfloat16 at every pass and each pass's weight gradients back, and with all passes in one region
(``ActorCritic.casting_once``, as the runner collects a rollout), which casts each weight once.

    python bench/encoder_batch.py
    python bench/encoder_batch.py --frames 160 --threads 1
    python bench/encoder_batch.py --bf16
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import torch  # noqa: E402

from model import ConvEncoder, NatureEncoder  # noqa: E402


def time_pass(encoder: torch.nn.Module, frames: torch.Tensor, chunk: int | None, iterations: int,
              bf16: bool = False, cast_once: bool = True) -> float:
    """Mean milliseconds of one forward + backward pass over ``frames`` in passes of ``chunk``
    (split here, as ``ConvEncoder.forward`` splits them, with the encoder's own splitting off),
    under bfloat16 autocast with ``bf16`` (as ``ActorCritic.encode`` runs it): all passes in one
    autocast region with ``cast_once``, each in its own otherwise."""
    encoder.cpu_chunk = 0
    tic = time.perf_counter()
    for _ in range(iterations):
        parts = [frames] if chunk is None else list(frames.split(chunk))
        regions = [parts] if cast_once else [[part] for part in parts]  # the passes of each autocast region
        features = []
        for region in regions:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                features += [encoder(part).float() for part in region]
        torch.cat(features).sum().backward()
    return (time.perf_counter() - tic) / iterations * 1000


def compare_bf16(encoders: dict[str, torch.nn.Module], frames: torch.Tensor, step_frames: int, repeats: int,
                 iterations: int) -> None:
    """Each encoder in float32, in bfloat16 casting its weights at every pass, and in bfloat16
    casting them once, in passes of ``step_frames``, alternating; medians and speed-ups over float32."""
    for name, encoder in encoders.items():
        variants = {"float32": (False, True), "bf16 cast a pass": (True, False), "bf16 cast once": (True, True)}
        for bf16, once in variants.values():  # warm-up
            time_pass(encoder, frames, step_frames, 1, bf16, once)
        times: dict[str, list[float]] = {variant: [] for variant in variants}
        for _ in range(repeats):
            for variant, (bf16, once) in variants.items():
                times[variant].append(time_pass(encoder, frames, step_frames, iterations, bf16, once))
        plain = statistics.median(times["float32"])
        cells = [f"{variant} {statistics.median(ms):6.1f} ms ({plain / statistics.median(ms):4.2f}x)"
                 for variant, ms in times.items()]
        print(f"{name:<9} passes of {step_frames:<4} " + "  ".join(cells))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=80, help="frames per update (num_envs x rollout_size)")
    p.add_argument("--chunks", type=int, nargs="+", default=[4, 8, 16, 32], help="pass sizes to time")
    p.add_argument("--repeats", type=int, default=7, help="rounds; the median is reported")
    p.add_argument("--iterations", type=int, default=5, help="passes timed in each round")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--bf16", action="store_true", help="time float32 against bfloat16 autocast instead")
    p.add_argument("--step-frames", type=int, default=16, help="with --bf16: frames per pass (envs per step)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    frames = torch.randint(0, 256, (args.frames, 4, 84, 84), dtype=torch.uint8)
    print(f"{args.frames} frames of 4x84x84, forward + backward, torch {torch.__version__} "
          f"with {torch.get_num_threads()} threads, median of {args.repeats} rounds")
    encoders = {"universe": ConvEncoder(4, channels_last=True), "nature": NatureEncoder((4, 84, 84), channels_last=True)}
    for encoder in encoders.values():
        encoder.to(memory_format=torch.channels_last)
    if args.bf16:
        compare_bf16(encoders, frames, args.step_frames, args.repeats, args.iterations)
        return 0
    for name, encoder in encoders.items():
        sizes: list[int | None] = [None] + [c for c in args.chunks if c < args.frames]
        for size in sizes:  # warm-up: oneDNN picks and caches its kernels per shape
            time_pass(encoder, frames, size, 1)
        times: dict[int | None, list[float]] = {size: [] for size in sizes}
        for _ in range(args.repeats):
            for size in sizes:
                times[size].append(time_pass(encoder, frames, size, args.iterations))
        whole = statistics.median(times[None])
        for size in sizes:
            ms = statistics.median(times[size])
            label = "whole batch" if size is None else f"passes of {size}"
            print(f"{name:<9} {label:<13} {ms:7.1f} ms  {whole / ms:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
