"""What the network and the emulators cost each other when they take turns on the same cores.

After each of torch's parallel ops its idle OpenMP thread spins for ``GOMP_SPINCOUNT`` rounds
before it sleeps. When the network's last op of a step is done, the emulators are stepped next,
on the same cores. This script acts as training does, one step at a time: the feed-forward
Nature network's forward pass over the frames of 16 envs (torch with 2 threads), then one step
of 16 games in ale-py's C++ vector env. It times the env step's two halves, ``send`` (handing
the actions to the env's threads) and ``recv`` (waiting for the frames), and the forward pass
that follows each env step (``fwd after step``); and, before that, each of the two alone:
``steps`` forward passes back to back (``fwd alone``) and ``steps`` env steps back to back
(``step alone``). Each setting runs in a fresh process of its own, since libgomp reads the
variable once when torch loads it; the settings take turns for ``--repeats`` rounds and the
median of each is printed.

``default`` leaves the variable unset (libgomp's own 300,000 rounds). The project does not set
it (its end-to-end gain was below the 10% bar: docs/speed.md, "Built and removed"); a user may
set it in the environment of a run, ``GOMP_SPINCOUNT=30000 python main.py ...``.

    python bench/openmp_spin.py
    python bench/openmp_spin.py --spins default 30000 3000 0 --repeats 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPIN = "GOMP_SPINCOUNT"
COLUMNS = ("fwd alone", "fwd after step", "step alone", "send", "recv")


def measure(steps: int, num_envs: int, threads: int) -> tuple[float, ...]:
    """Median milliseconds of each of ``COLUMNS``: a forward pass and an env step each alone, then taking
    turns: the forward pass after an env step, and ``send`` and ``recv`` of the env step after a forward pass."""
    sys.path.insert(0, ROOT)
    import torch

    from envs import make_vec_env
    from model import ActorCritic

    torch.set_num_threads(threads)
    envs = make_vec_env("PongNoFrameskip-v4", num_envs, seed=0, vec_env="ale")
    model = ActorCritic(envs.observation_space.shape, int(envs.action_space.n), recurrent=False, arch="nature",
                        channels_last=True)
    obs = envs.reset()
    timings: dict[str, list[float]] = {name: [] for name in COLUMNS}

    def act(obs: np.ndarray) -> tuple[np.ndarray, float]:
        tic = time.perf_counter()
        with torch.inference_mode():
            logits, _, _ = model(torch.from_numpy(obs), (), torch.zeros(num_envs))
            actions = torch.distributions.Categorical(logits=logits).sample().numpy()
        return actions, time.perf_counter() - tic

    def step(actions: np.ndarray) -> tuple[np.ndarray, float, float]:
        tic = time.perf_counter()
        envs.step_async(actions)
        sent = time.perf_counter()
        obs, _, _, _ = envs.step_wait()
        return obs, sent - tic, time.perf_counter() - sent

    actions, _ = act(obs)
    for _ in range(steps):  # the network alone, on the same frames
        timings["fwd alone"].append(act(obs)[1])
    for _ in range(steps):  # the emulators alone, with the same actions
        obs, send, recv = step(actions)
        timings["step alone"].append(send + recv)
    for _ in range(steps):  # taking turns, as in training
        actions, forward = act(obs)
        obs, send, recv = step(actions)
        timings["fwd after step"].append(forward)
        timings["send"].append(send)
        timings["recv"].append(recv)
    envs.close()
    skip = steps // 10  # the first steps of each phase warm up
    return tuple(statistics.median(timings[name][skip:]) * 1e3 for name in COLUMNS)


def run_setting(spin: str, args: argparse.Namespace) -> tuple[float, ...]:
    """:func:`measure` in a fresh process started with ``GOMP_SPINCOUNT=spin`` (``default``: unset)."""
    env = {k: v for k, v in os.environ.items() if k != SPIN}
    if spin != "default":
        env[SPIN] = spin
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--steps", str(args.steps),
                          "--num-envs", str(args.num_envs), "--threads", str(args.threads)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return tuple(float(x) for x in out.split()[-len(COLUMNS):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spins", nargs="+", default=["default", "30000", "0"],
                   help="GOMP_SPINCOUNT values to compare ('default': unset)")
    p.add_argument("--steps", type=int, default=300, help="env steps of each run")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--repeats", type=int, default=3, help="rounds; the median of each setting is printed")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(*measure(args.steps, args.num_envs, args.threads))
        return
    results: dict[str, list[tuple[float, ...]]] = {spin: [] for spin in args.spins}
    for _ in range(args.repeats):
        for spin in args.spins:
            results[spin].append(run_setting(spin, args))
    print(f"{args.num_envs} games of Pong on ale-py and the Nature network's forward pass over their frames "
          f"(torch {args.threads} threads), each alone and taking turns; medians of {args.repeats} runs "
          f"of {args.steps} steps, in ms")
    header = [*COLUMNS, "step after fwd"]
    print(f"{SPIN:>14} " + " ".join(f"{name:>14}" for name in header))
    for spin, runs in results.items():
        medians = [statistics.median(run[i] for run in runs) for i in range(len(COLUMNS))]
        medians.append(medians[COLUMNS.index("send")] + medians[COLUMNS.index("recv")])
        print(f"{spin:>14} " + " ".join(f"{value:14.2f}" for value in medians))


if __name__ == "__main__":
    main()
