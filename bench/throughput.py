"""Training throughput of this project's A2C against stable-baselines3's A2C, in one run.

Both trainers learn the same game with the same number of envs for the same number of env
steps, on the CPU, in this one process, so with the same torch thread count (torch's default,
the number of cores, unless ``--threads`` sets it). Only the training loop is timed:

* ours: ``Runner(...).train()`` after ``envs.make_vec_env`` and ``Runner(...)`` (which resets
  the envs) are built: collection, returns, gradient updates and the checkpoints the runner
  writes on its own (best loss, best reward, last), as in a real run without TensorBoard;
* SB3: ``model.learn(total_timesteps=...)`` after ``A2C(...)`` is built and its envs are reset.

Env construction and the first reset are excluded from both. The trainers are run in turn,
``--repeats`` times (ours, SB3, ours, SB3, ...), and the median of each is reported, so that the
drift of a shared, noisy machine hits both alike. Absolute numbers move from run to run; the
ratio measured within one run is what to compare.

    python bench/throughput.py                          # Pong, 16 envs, ours (LSTM and feed-forward) vs SB3
    python bench/throughput.py --steps 20000 --repeats 3 --vec-env subproc --threads 1
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.dirname(os.path.abspath(__file__))):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agent import agent_from_config  # noqa: E402
from config import Config  # noqa: E402
from envs import VEC_ENVS, check_env_id, make_vec_env  # noqa: E402
from runner import Runner  # noqa: E402
from utils import UsageError, seed_everything  # noqa: E402

OURS_RECURRENT, OURS_FEEDFORWARD, SB3 = "ours recurrent", "ours feed-forward", "sb3"


# ------------------------------------------------------------------------------------------------
# One timed training run of each kind. Each returns (env steps trained, seconds of the training loop).
# ------------------------------------------------------------------------------------------------
def steps_per_update(num_envs: int, rollout_size: int = Config.rollout_size) -> int:
    return num_envs * rollout_size


def train_ours(steps: int, env_name: str, num_envs: int, vec_env: str, recurrent: bool,
               seed: int = 0) -> tuple[int, float]:
    """Train this project's pipeline for ``steps // (num_envs * rollout_size)`` updates.

    Built as ``main.train`` builds it (Config -> make_vec_env -> agent_from_config -> Runner),
    on the CPU, without TensorBoard or progress bar, into a throw-away log directory.
    """
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as log_dir:
        config = Config(env_name=env_name, num_envs=num_envs, vec_env=vec_env, recurrent=recurrent, seed=seed,
                        num_updates=max(1, steps // steps_per_update(num_envs)), cuda=False,
                        tensorboard=False, progress=False, log_dir=log_dir)
        seed_everything(config.seed)
        envs = make_vec_env(config.env_name, config.num_envs, config.n_stack, config.seed, config.vec_env,
                            config.max_episode_frames)
        try:
            agent = agent_from_config(config, envs.observation_space.shape, int(envs.action_space.n), "cpu")
            runner = Runner(agent, envs, config, log_dir)  # resets the envs: not timed
            tic = time.perf_counter()
            state = runner.train()
            seconds = time.perf_counter() - tic
            note_worker_memory(envs)
        finally:
            envs.close()
    return state.step, seconds


def _sb3_env_kwargs(env_name: str) -> dict:
    """The same emulator settings as ``envs.make_vec_env``: frame skipping left to the Atari wrapper."""
    import gymnasium as gym

    return {"frameskip": 1} if gym.registry[env_name].kwargs.get("frameskip", 1) != 1 else {}


def train_sb3(steps: int, env_name: str, num_envs: int, vec_env: str, seed: int = 0) -> tuple[int, float]:
    """Train stable-baselines3's A2C with the RL Zoo's Atari settings for ``steps`` env steps.

    Settings from rl-baselines3-zoo ``hyperparams/a2c.yml``, entry ``atari``::

        env_wrapper: AtariWrapper, frame_stack: 4, policy: 'CnnPolicy', n_envs: 16,
        ent_coef: 0.01, vf_coef: 0.25,
        policy_kwargs: "dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5))"

    and SB3's defaults for the rest (learning_rate 7e-4, n_steps 5, gamma 0.99, gae_lambda 1.0,
    max_grad_norm 0.5). The vector env class is the one ours uses (``--vec-env``), so the two
    differ in the agent, not in how the envs are run.
    """
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
    from stable_baselines3.common.vec_env import VecFrameStack

    seed_everything(seed)
    env = VecFrameStack(make_atari_env(env_name, n_envs=num_envs, seed=seed, env_kwargs=_sb3_env_kwargs(env_name),
                                       vec_env_cls=VEC_ENVS[vec_env]), n_stack=4)
    try:
        model = A2C("CnnPolicy", env, learning_rate=7e-4, n_steps=5, ent_coef=0.01, vf_coef=0.25,
                    policy_kwargs=dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5)),
                    seed=seed, device="cpu", verbose=0)
        # Reset outside the timed part, as ours does in Runner(); learn() then keeps this first observation.
        model._last_obs = model.env.reset()
        model._last_episode_starts = np.ones((model.env.num_envs,), dtype=bool)
        tic = time.perf_counter()
        model.learn(total_timesteps=steps, reset_num_timesteps=False)
        seconds = time.perf_counter() - tic
        trained = model.num_timesteps
        note_worker_memory(env)
    finally:
        env.close()
    return trained, seconds


# ------------------------------------------------------------------------------------------------
@dataclass
class Trials:
    """The runs of one trainer: env steps and seconds of each."""

    name: str
    steps: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [s / t for s, t in zip(self.steps, self.seconds)]

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)


def run_alternating(trainers: dict[str, Callable[[int], tuple[int, float]]], steps: int, repeats: int,
                    warmup_steps: int) -> dict[str, Trials]:
    """Run every trainer in turn, ``repeats`` rounds, after one untimed warm-up round of ``warmup_steps``."""
    if warmup_steps > 0:
        for name, train in trainers.items():
            print(f"warm-up  {name:<18} {warmup_steps} steps", flush=True)
            train(warmup_steps)
    results = {name: Trials(name) for name in trainers}
    for round_ in range(1, repeats + 1):
        for name, train in trainers.items():
            trained, seconds = train(steps)
            results[name].steps.append(trained)
            results[name].seconds.append(seconds)
            print(f"round {round_}  {name:<18} {trained} steps in {seconds:6.2f} s: {trained / seconds:7.1f} steps/s",
                  flush=True)
    return results


def print_table(results: dict[str, Trials]) -> None:
    print()
    print(f"{'trainer':<18} {'steps':>7} {'median s':>9} {'steps/s (median)':>17}  steps/s of each round")
    for trials in results.values():
        rounds = " ".join(f"{r:.1f}" for r in trials.rates)
        print(f"{trials.name:<18} {trials.steps[0]:>7} {statistics.median(trials.seconds):>9.2f} "
              f"{trials.median_rate:>17.1f}  {rounds}")


# ------------------------------------------------------------------------------------------------
# Memory. ru_maxrss covers this process only: subproc env workers are children of the
# multiprocessing fork server, not of this process, so their memory is read from /proc instead.
# ------------------------------------------------------------------------------------------------
_workers = {"count": 0, "peak_rss_kib": 0, "pss_kib": 0}


def _proc_kib(path: str, key: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def note_worker_memory(venv) -> None:
    """Record the memory of a vector env's worker processes (none for dummy); call it before ``close()``.

    Keeps the largest peak RSS of one worker (``VmHWM``) and the largest total PSS of one set of
    workers (``smaps_rollup``: pages shared between processes, such as the torch libraries every
    worker imports, are split among them instead of counted in full by each).
    """
    processes = getattr(venv.unwrapped, "processes", None) or []
    peak = pss = 0
    for process in processes:
        try:
            peak = max(peak, _proc_kib(f"/proc/{process.pid}/status", "VmHWM"))
            pss += _proc_kib(f"/proc/{process.pid}/smaps_rollup", "Pss")
        except OSError:  # not Linux, or the worker is gone
            continue
    _workers["count"] = max(_workers["count"], len(processes))
    _workers["peak_rss_kib"] = max(_workers["peak_rss_kib"], peak)
    _workers["pss_kib"] = max(_workers["pss_kib"], pss)


def memory_lines() -> list[str]:
    """Peak RSS of this process (``ru_maxrss``, KiB on Linux) and what was recorded of env workers."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lines = [f"peak RSS of this process (ru_maxrss): {own} KiB ({own / 1024:.0f} MiB)"]
    if _workers["peak_rss_kib"]:
        lines.append(f"subproc env workers ({_workers['count']} processes): peak RSS of one worker "
                     f"{_workers['peak_rss_kib'] / 1024:.0f} MiB; PSS of all workers together "
                     f"{_workers['pss_kib'] / 1024:.0f} MiB (shared pages split among them)")
    return lines


def _int_at_least(low: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'")
        return value
    parse.__name__ = what  # argparse names the type in its message
    return parse


positive_int = _int_at_least(1, "a positive integer")
non_negative_int = _int_at_least(0, "an integer >= 0")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the help, and the module docstring as written."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--steps", type=positive_int, default=4000,
                   help="env steps each timed run trains (rounded down to whole updates of num_envs x 5 steps)")
    p.add_argument("--env-name", default="PongNoFrameskip-v4", help="Atari game, gymnasium id")
    p.add_argument("--num-envs", type=positive_int, default=16, help="envs stepped in parallel (both trainers)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="rounds of alternating runs; the median of each trainer is reported")
    p.add_argument("--warmup-steps", type=non_negative_int, default=160,
                   help="env steps of one untimed run of each trainer before the timed rounds (0: none)")
    p.add_argument("--ours", choices=["both", "recurrent", "feedforward"], default="both",
                   help="which configuration(s) of ours to measure")
    p.add_argument("--no-recurrent", dest="ours", action="store_const", const="feedforward",
                   default=argparse.SUPPRESS, help="shorthand for --ours feedforward")
    p.add_argument("--no-sb3", action="store_true", help="measure ours only")
    p.add_argument("--vec-env", choices=sorted(VEC_ENVS), default=Config.vec_env,
                   help="vector env of ours (and of SB3, so that only the agents differ)")
    p.add_argument("--seed", type=int, default=0, help="seed of every run")
    p.add_argument("--threads", type=non_negative_int, default=0,
                   help="torch intra-op threads for both trainers (0: torch's default, the number of cores)")
    return p


def parse_bench_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse, refuse an unknown game with the parser's own error, and set torch's thread count."""
    args = parser.parse_args(argv)
    try:
        check_env_id(args.env_name)
    except UsageError as exc:
        parser.error(str(exc))
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_bench_args(build_parser(), argv)
    per_update = steps_per_update(args.num_envs)
    steps = max(per_update, args.steps // per_update * per_update)  # the same count for both trainers
    warmup = args.warmup_steps and max(per_update, args.warmup_steps // per_update * per_update)

    trainers: dict[str, Callable[[int], tuple[int, float]]] = {}
    if args.ours in ("both", "recurrent"):
        trainers[OURS_RECURRENT] = lambda n: train_ours(n, args.env_name, args.num_envs, args.vec_env, True, args.seed)
    if args.ours in ("both", "feedforward"):
        trainers[OURS_FEEDFORWARD] = lambda n: train_ours(n, args.env_name, args.num_envs, args.vec_env, False,
                                                          args.seed)
    if not args.no_sb3:
        trainers[SB3] = lambda n: train_sb3(n, args.env_name, args.num_envs, args.vec_env, args.seed)

    print(f"{args.env_name}, {args.num_envs} envs ({args.vec_env}), {steps} env steps a run, "
          f"{args.repeats} rounds, torch {torch.__version__} with {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs", flush=True)
    results = run_alternating(trainers, steps, args.repeats, warmup)
    print_table(results)
    if SB3 in results:
        for name in (OURS_RECURRENT, OURS_FEEDFORWARD):
            if name in results:
                print(f"ratio ({name} / sb3): {results[name].median_rate / results[SB3].median_rate:.2f}x")
    for line in memory_lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
