"""Training throughput of this project against stable-baselines3's A2C, in one run.

Every trainer trains the same env with the same env count for the same env steps; each timed run
is a fresh process, the trainers take turns for ``--repeats`` rounds after an untimed warm-up, and
only the training loop is timed. Only ratios measured in one run compare.

    python -m bench.throughput                                  # Pong, 16 envs: ours against SB3
    python -m bench.throughput --ablation --ours recurrent      # what each speed switch buys
    python -m bench.throughput --ours feedforward --preset fast-cpu --env-only --steps 8000
    python -m bench.throughput --env-name LunarLander-v3 --steps 50000 --repeats 3 --threads 1
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

import main as train_cli
import recipes
from algorithms import make_agent
from bench import positive
from bench.random_agent import random_actions
from callbacks import Callback
from capture import compile_network
from config import Config, with_settings
from envs import VEC_ENV_CHOICES, action_size, check_env_id, is_atari, make_vec_env, wrapper_skips_frames
from perf import keep_freed_memory
from runner import Runner
from seeds import seed_everything
from training import collector_for
from utils import UsageError

RECURRENT, FEEDFORWARD, SB3 = "ours recurrent", "ours feed-forward (nature)", "sb3"
DEFAULTS = "ours (env defaults)"  # a vector env: what main.py trains on it
ENV_ONLY = "envs only"  # --env-only: ours' envs stepped with random actions, no network
PRESET = "ours --preset "  # trainer "ours --preset NAME"
# A trainer's twin: its flags and one more (a lever turned on), named by a suffix of its name.
BF16, COMPILED, GROUPED = " bf16", " compiled", " 2 env groups"
TWINS = {BF16: ["--bf16"], COMPILED: ["--compile"], GROUPED: ["--env-groups", "2"]}
# Each configuration of ours: the --ours choice that names it, and its main.py flags.
OURS = {RECURRENT: ("recurrent", []), FEEDFORWARD: ("feedforward", ["--arch", "nature", "--no-recurrent"])}
# The speed switches of the recurrent default, each as the flags that take it away (--ablation). With
# all of them gone the encoder takes whole batches again, so its passes are taken away too.
ABLATION = {
    "dummy envs": ["--vec-env", "dummy"],
    "no channels-last": ["--no-channels-last"],
    "default malloc": ["--no-keep-freed-memory"],
    "rollout run again": ["--no-keep-graph"],
}
ABLATION["none of them"] = [flag for flags in ABLATION.values() for flag in flags] + ["--encoder-chunk", "0"]
ATARI_STEPS, VECTOR_STEPS, WARMUP_STEPS, SEED = 4000, 50_000, 160, 0


def cli_config(flags: Sequence[str], env_name: str, num_envs: int, steps: int = 0, device: str = "cpu") -> Config:
    """What ``python main.py --env-name ENV --num-envs N FLAGS`` trains (a flag given twice: the last
    wins), without TensorBoard or progress bar, for ``steps // (num_envs * rollout_size)`` updates."""
    quiet = ["--seed", str(SEED), "--no-tensorboard", "--no-progress", "--cuda" if device == "cuda" else "--no-cuda"]
    config, _, typed = train_cli.parse_args(["--env-name", env_name, "--num-envs", str(num_envs), *flags, *quiet])
    config = recipes.with_env_defaults(config, typed)
    return with_settings(config, {"num_updates": max(1, steps // config.steps_per_update)})


def whole_updates(steps: int, env_name: str, num_envs: int, flags: Sequence[str] = ()) -> int:
    """``steps`` rounded down to whole updates of what ``flags`` train, at least one update."""
    per_update = cli_config(flags, env_name, num_envs).steps_per_update
    return max(per_update, steps // per_update * per_update)


def train_ours(
    steps: int, env_name: str, num_envs: int, flags: Sequence[str] = (), device: str = "cpu", envs_only: bool = False
) -> tuple[int, float]:
    """Train what ``cli_config`` reads from ``flags``, built as ``main.py`` builds it; or, ``envs_only``,
    step its envs with uniformly random actions drawn beforehand for ``steps`` env steps rounded up to
    whole vector steps: the rate the envs alone allow. Only the loop is timed."""
    config = cli_config(flags, env_name, num_envs, steps, device)
    if config.speed.keep_freed_memory and not envs_only:
        keep_freed_memory()
    seed_everything(config.seed)
    frames = dict(max_episode_frames=config.max_episode_frames, frame_size=config.frame_size)
    groups = 1 if envs_only else config.speed.env_groups
    envs = make_vec_env(env_name, config.num_envs, config.n_stack, config.seed, config.vec_env, **frames, groups=groups)
    try:
        if envs_only:
            vector_steps = -(-steps // config.num_envs)
            actions = random_actions(envs.action_space, np.random.default_rng(SEED), (vector_steps, config.num_envs))
            envs.reset()
            tic = time.perf_counter()
            for action in actions:
                envs.step(action)
            return vector_steps * config.num_envs, time.perf_counter() - tic
        size, continuous = action_size(envs.action_space)
        agent = make_agent(config, envs.observation_space.shape, size, device, continuous=continuous)
        if config.speed.compile:
            compile_network(agent.model)
        with tempfile.TemporaryDirectory(prefix="bench-ours-") as run_dir:
            runner, start = Runner(agent, envs, config, run_dir, collector=collector_for(config)), Start()
            if config.speed.compile and config.num_updates > 1:  # timed after the first update, which compiles
                runner.callbacks.append(start)
            steps = runner.train().step
            return steps - start.step, time.perf_counter() - start.tic
    finally:
        envs.close()


class Start(Callback):
    """Where a timed run starts, its clock and env steps; as a callback, at the end of its first update."""

    def __init__(self) -> None:
        self.step, self.tic = 0, time.perf_counter()

    def on_update_end(self, runner: Runner, batch: Any) -> None:
        if runner.state.update == 1:
            self.step, self.tic = runner.state.step, time.perf_counter()


def zoo_settings(env_name: str) -> dict[str, Any]:
    """The RL Zoo's A2C settings (``hyperparams/a2c.yml``): its ``atari`` entry, or ``LunarLander-v2``'s."""
    if is_atari(env_name):
        from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

        rms = dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5))
        return dict(policy="CnnPolicy", n_steps=5, learning_rate=7e-4, ent_coef=0.01, vf_coef=0.25, policy_kwargs=rms)
    from stable_baselines3.common.utils import LinearSchedule

    decayed = LinearSchedule(8.3e-4, 0.0, 1.0)
    return dict(policy="MlpPolicy", n_steps=5, gamma=0.995, learning_rate=decayed, ent_coef=1e-5)


def train_sb3(steps: int, env_name: str, num_envs: int, device: str = "cpu") -> tuple[int, float]:
    """SB3's A2C with ``zoo_settings`` on SB3's own env pipeline (a ``DummyVecEnv``, a 4-frame stack for a
    game); only ``model.learn`` is timed, and SB3 writes no log folder."""
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.env_util import make_vec_env as make_sb3_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecFrameStack

    seed_everything(SEED)
    if is_atari(env_name):
        envs = VecFrameStack(make_atari_env(env_name, num_envs, SEED, env_kwargs=wrapper_skips_frames(env_name)), 4)
    else:
        envs = make_sb3_env(env_name, num_envs, SEED)
    try:
        model = A2C(env=envs, seed=SEED, device=device, verbose=0, **zoo_settings(env_name))
        model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's own makes a folder in /tmp every run
        model._last_obs = model.env.reset()  # reset outside the timed part, as our runner does
        model._last_episode_starts = np.ones((model.env.num_envs,), dtype=bool)
        tic = time.perf_counter()
        model.learn(total_timesteps=steps, reset_num_timesteps=False)
        return model.num_timesteps, time.perf_counter() - tic
    finally:
        envs.close()


def twins(trainers: dict[str, list[str]], *suffixes: str) -> dict[str, list[str]]:
    """``trainers`` (name -> main.py flags), then for each of ``suffixes`` (``TWINS``) each one's twin."""
    for suffix in suffixes:
        trainers = {**trainers, **{name + suffix: [*flags, *TWINS[suffix]] for name, flags in trainers.items()}}
    return trainers


def ours(which: str = "both", *suffixes: str) -> dict[str, list[str]]:
    """Trainer name -> main.py flags: the recurrent default and the fast configuration (``which``: both,
    recurrent, feedforward or none), then their ``twins`` of ``suffixes``."""
    return twins({name: flags for name, (choice, flags) in OURS.items() if which in ("both", choice)}, *suffixes)


def ablations(env_name: str, num_envs: int, path: Sequence[str] = ()) -> dict[str, list[str]]:
    """The recurrent default without each switch of ``ABLATION``, then without all: row name -> flags
    (after ``path``, the env path's); a row that trains the default itself (dummy envs on dummy) is left out."""
    default = cli_config(path, env_name, num_envs)
    rows = {f"recurrent, {what}": [*path, *flags] for what, flags in ABLATION.items()}
    return {name: flags for name, flags in rows.items() if cli_config(flags, env_name, num_envs) != default}


@dataclass
class Trials:
    """The timed runs of one trainer: env steps and seconds of each."""

    name: str
    steps: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [s / t for s, t in zip(self.steps, self.seconds)]


def timed(train: Callable[..., tuple[int, float]], common: dict[str, Any], flags: dict[str, list[str]]) -> dict:
    """Trainer name -> (``train``, its arguments: the ``common`` ones and that trainer's ``flags``)."""
    return {name: (train, {**common, "flags": f}) for name, f in flags.items()}


def run_alternating(
    trainers: dict[str, tuple[Callable, dict]], steps: int, repeats: int, warmup_steps: int, threads: int = 0
) -> dict[str, Trials]:
    """Every trainer in turn for ``repeats`` rounds after an untimed one of ``warmup_steps``, each run spawned anew."""
    width, results = max(map(len, trainers)), {name: Trials(name) for name in trainers}
    fresh = dict(mp_context=multiprocessing.get_context("spawn"), max_tasks_per_child=1)  # a process a run
    threads_set = dict(initializer=torch.set_num_threads, initargs=(threads,)) if threads else {}
    with ProcessPoolExecutor(max_workers=1, **fresh, **threads_set) as pool:

        def run(name: str, n: int) -> tuple[int, float]:
            train, kwargs = trainers[name]
            return pool.submit(train, n, **kwargs).result()

        for name in trainers if warmup_steps > 0 else ():
            run(name, warmup_steps)
        for round_ in range(1, repeats + 1):
            for name, trials in results.items():
                trained, seconds = run(name, steps)
                trials.steps.append(trained)
                trials.seconds.append(seconds)
                rate = f"{trained} steps in {seconds:6.2f} s: {trained / seconds:7.1f} steps/s"
                print(f"round {round_}  {name:<{width}} {rate}", flush=True)
    return results


def preset_envs(trainer: str) -> str:
    """The env-only row of a preset's envs, the same for the preset's twins."""
    name = trainer.removeprefix(PRESET).removesuffix(GROUPED).removesuffix(COMPILED).removesuffix(BF16)
    return f"{ENV_ONLY} (--preset {name})"


def comparisons(results: dict[str, Trials], ablated: Sequence[str] = ()) -> dict[tuple[str, str], float]:
    """``(trainer, other) -> trainer's median rate / other's``: each of ours against SB3 and against itself
    without the lever of its twin; the recurrent default against each ``ablated`` row; a preset against
    the fast configuration; each of ours against its envs alone (a share, below 1)."""
    rate = {name: statistics.median(trials.rates) for name, trials in results.items()}
    mine = [name for name in results if name.startswith("ours")]
    pairs = [(name, SB3) for name in mine] + [(name, name.removesuffix(suffix)) for name in mine for suffix in TWINS]
    pairs += [(RECURRENT, row) for row in ablated] + [(name, FEEDFORWARD) for name in mine if name.startswith(PRESET)]
    pairs += [(name, preset_envs(name) if name.startswith(PRESET) else ENV_ONLY) for name in mine]
    return {(a, b): rate[a] / rate[b] for a, b in pairs if a != b and a in rate and b in rate}


def print_report(results: dict[str, Trials], ablated: Sequence[str] = ()) -> None:
    """The table of the rates, then the ``comparisons``, a share of the envs' rate as a percentage."""
    width = max(len("trainer"), *map(len, results))
    rate = {name: statistics.median(t.rates) for name, t in results.items()}
    print(f"\n{'trainer':<{width}} {'steps':>7} {'steps/s (median)':>17}  steps/s of each round")
    for t in results.values():
        print(f"{t.name:<{width}} {t.steps[0]:>7} {rate[t.name]:>17.1f}  " + " ".join(f"{r:.1f}" for r in t.rates))
    for (a, b), value in comparisons(results, ablated).items():
        share = f"{a}: {value:.0%} of the rate of {b} ({rate[b]:,.0f} env steps/s)"
        print(share if b.startswith(ENV_ONLY) else f"{a} / {b}: {value:.2f}x", flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = f"env steps a timed run, in whole updates (default: {ATARI_STEPS}; a vector env: {VECTOR_STEPS})"
    p.add_argument("--steps", type=positive, help=steps)
    p.add_argument("--env-name", default="PongNoFrameskip-v4", help="an Atari game or a vector-observation env")
    p.add_argument("--num-envs", type=positive, default=16, help="envs stepped in parallel (default: 16)")
    p.add_argument("--repeats", type=positive, default=3, help="rounds of alternating runs (default: 3)")
    which = "which configurations of ours to time (a game; none: only --preset's)"
    p.add_argument("--ours", choices=["both", "recurrent", "feedforward", "none"], default="both", help=which)
    p.add_argument("--no-sb3", action="store_true", help="time ours only")
    p.add_argument("--env-only", action="store_true", help="also step ours' envs alone with random actions")
    preset = "also what python main.py --preset NAME [FLAGS] trains (a game)"
    p.add_argument("--preset", action="append", default=[], metavar="'NAME [FLAGS]'", help=preset)
    p.add_argument("--bf16", action="store_true", help="also each of ours with its encoder in bfloat16 (a game)")
    compiled = "also each of ours with main.py's --compile, timed after its first update (a game)"
    p.add_argument("--compile", action="store_true", help=compiled)
    groups = "also each of ours with main.py's --env-groups 2, its steps overlapped with the network (a game)"
    p.add_argument("--env-groups", action="store_true", help=groups)
    ablation = "also the recurrent default without each speed switch, then without all (a game)"
    p.add_argument("--ablation", action="store_true", help=ablation)
    p.add_argument("--ours-vec-env", choices=VEC_ENV_CHOICES, help="env path of ours (default: main.py's)")
    p.add_argument("--cuda", action="store_true", help="train every trainer on the GPU (envs on the CPU)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        check_env_id(args.env_name)
    except UsageError as exc:
        p.error(str(exc))
    if args.cuda and not torch.cuda.is_available():
        p.error("--cuda: CUDA is not available on this machine")
    atari = is_atari(args.env_name)
    options = ("ablation", "bf16", "compile", "env_groups", "preset", "ours")
    typed = [f"--{name.replace('_', '-')}" for name in options if getattr(args, name) not in (False, [], "both")]
    if typed and not atari:
        p.error(f"{', '.join(typed)}: for Atari games; {args.env_name} trains with its own defaults")
    if args.threads:
        torch.set_num_threads(args.threads)
    common = dict(env_name=args.env_name, num_envs=args.num_envs, device="cuda" if args.cuda else "cpu")
    path = ["--vec-env", args.ours_vec_env] if args.ours_vec_env else []
    wanted = ((BF16, args.bf16), (COMPILED, args.compile), (GROUPED, args.env_groups))
    suffixes = [suffix for suffix, on in wanted if on]
    flags = ours(args.ours, *suffixes) if atari else {DEFAULTS: []}
    presets = {}
    for preset in args.preset:
        try:
            presets[PRESET + preset] = ["--preset", *shlex.split(preset)]
            cli_config(presets[PRESET + preset], args.env_name, args.num_envs)
        except (ValueError, UsageError, SystemExit):  # main.py's parser has said what is wrong with its flags
            p.error(f"--preset {preset!r}: the name of a preset ({', '.join(recipes.PRESETS)}), then main.py's flags")
    presets = twins(presets, *suffixes)
    trainers = timed(train_ours, common, {name: [*path, *f] for name, f in {**flags, **presets}.items()})
    if not args.no_sb3:
        trainers[SB3] = train_sb3, common
    ablated = ablations(args.env_name, args.num_envs, path) if args.ablation and RECURRENT in flags else {}
    trainers |= timed(train_ours, common, ablated)
    if args.env_only:  # the envs of ours, and of each preset
        envs = {ENV_ONLY: path} if flags else {}
        envs |= {preset_envs(name): [*path, *f] for name, f in presets.items()}
        trainers |= timed(train_ours, {**common, "envs_only": True}, envs)

    steps = whole_updates(args.steps or (ATARI_STEPS if atari else VECTOR_STEPS), args.env_name, args.num_envs, path)
    warmup = WARMUP_STEPS and whole_updates(WARMUP_STEPS, args.env_name, args.num_envs, path)
    machine = f"torch {torch.__version__} with {torch.get_num_threads()} threads, {os.cpu_count()} CPUs"
    machine += f", {torch.cuda.get_device_name()}" if args.cuda else ""
    setup = f"{args.env_name}, {args.num_envs} envs, {steps} env steps a run, {args.repeats} rounds"
    print(f"{setup}; {machine}", flush=True)
    print_report(run_alternating(trainers, steps, args.repeats, warmup, args.threads), list(ablated))
    return 0


if __name__ == "__main__":
    sys.exit(main())
