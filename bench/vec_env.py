"""Env steps per second of ``envs.make_vec_env`` with each ``vec_env``: dummy, subproc and ale.

* dummy: SB3's Atari wrappers, every env stepped in this process, one after the other;
* subproc: the same wrappers, one worker process per env (``SubprocVecEnv``), stepped in parallel;
* ale: ale-py's C++ vector env (``ale_vec_env.AleVecEnv``), stepped in C++ threads.

The plain measurement steps the envs with uniformly random actions: it is the speed of the
emulators, the Atari wrappers, the frame stack and the transport of observations, with no network.
With ``--with-agent`` the same comparison is also made for a short training run of ours
(``Runner(...).train()``, as ``bench/throughput.py`` builds it), because on a machine with few
cores the forward and backward passes compete for the same cores as the env workers, so the
faster vec env alone may not make the faster training.

Env construction (worker start-up included) and the first reset are not timed. The kinds run in
turn, ``--repeats`` times (dummy, subproc, ale, dummy, ...), and the median of each is reported;
the ratios to dummy measured within one run are what to compare.

    python bench/vec_env.py                              # envs only
    python bench/vec_env.py --with-agent --agent-steps 4000
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.dirname(os.path.abspath(__file__))
for _path in (ROOT, BENCH):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from envs import VEC_ENV_CHOICES, make_vec_env  # noqa: E402
from throughput import (HelpFormatter, memory_lines, non_negative_int, note_worker_memory,  # noqa: E402
                        parse_bench_args, positive_int, steps_per_update, train_ours)

KINDS = VEC_ENV_CHOICES


def step_randomly(kind: str, env_name: str, num_envs: int, steps: int, seed: int = 0) -> tuple[int, float]:
    """Step ``num_envs`` envs with random actions for ``steps`` env steps (rounded up to whole vector steps).

    Returns (env steps, seconds of the stepping loop).
    """
    envs = make_vec_env(env_name, num_envs, seed=seed, vec_env=kind)
    try:
        rng = np.random.default_rng(seed)
        vector_steps = -(-steps // num_envs)
        actions = rng.integers(0, int(envs.action_space.n), size=(vector_steps, num_envs))
        envs.reset()
        tic = time.perf_counter()
        for a in actions:
            envs.step(a)
        seconds = time.perf_counter() - tic
        note_worker_memory(envs)
    finally:
        envs.close()
    return vector_steps * num_envs, seconds


def measure(name: str, run: Callable[[str], tuple[int, float]], repeats: int) -> dict[str, list[float]]:
    """Alternate the kinds ``repeats`` rounds; ``run(kind)`` returns (env steps, seconds). Rates per kind."""
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for round_ in range(1, repeats + 1):
        for kind in KINDS:
            steps, seconds = run(kind)
            rates[kind].append(steps / seconds)
            print(f"round {round_}  {name:<9} {kind:<8} {steps} steps in {seconds:6.2f} s: "
                  f"{steps / seconds:7.1f} steps/s", flush=True)
    return rates


def report(title: str, rates: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    print(f"  {'vec env':<8} {'steps/s (median)':>17}  steps/s of each round")
    for kind in KINDS:
        print(f"  {kind:<8} {statistics.median(rates[kind]):>17.1f}  " + " ".join(f"{r:.1f}" for r in rates[kind]))
    for kind in KINDS[1:]:
        ratio = statistics.median(rates[kind]) / statistics.median(rates["dummy"])
        print(f"  ratio ({kind} / dummy): {ratio:.2f}x")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--steps", type=positive_int, default=4000,
                   help="env steps of each random-action measurement (rounded up to whole vector steps)")
    p.add_argument("--env-name", default="PongNoFrameskip-v4", help="Atari game, gymnasium id")
    p.add_argument("--num-envs", type=positive_int, default=16, help="envs stepped in parallel")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="rounds of alternating measurements; the median of each kind is reported")
    p.add_argument("--with-agent", action="store_true",
                   help="also time a short training run of ours with each vec env")
    p.add_argument("--agent-steps", type=positive_int, default=2000,
                   help="env steps of each --with-agent training run (rounded down to whole updates)")
    p.add_argument("--no-recurrent", dest="recurrent", action="store_false",
                   help="with --with-agent, train the feed-forward configuration instead of the recurrent one")
    p.add_argument("--seed", type=int, default=0, help="seed of every run")
    p.add_argument("--threads", type=non_negative_int, default=0,
                   help="torch intra-op threads for --with-agent (0: torch's default, the number of cores)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(build_parser(), argv)
    print(f"{args.env_name}, {args.num_envs} envs, {args.repeats} rounds, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__} with {torch.get_num_threads()} threads", flush=True)

    envs_only = measure("envs", lambda kind: step_randomly(kind, args.env_name, args.num_envs, args.steps, args.seed),
                        args.repeats)
    with_agent = None
    if args.with_agent:
        per_update = steps_per_update(args.num_envs)
        agent_steps = max(per_update, args.agent_steps // per_update * per_update)
        with_agent = measure("training", lambda kind: train_ours(agent_steps, args.env_name, args.num_envs, kind,
                                                                 args.recurrent, args.seed), args.repeats)

    report(f"random actions, no network ({args.steps} env steps a measurement)", envs_only)
    if with_agent is not None:
        configuration = "recurrent" if args.recurrent else "feed-forward"
        report(f"training ours, {configuration} ({agent_steps} env steps a run)", with_agent)
    for line in memory_lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
