"""Training throughput of this project against stable-baselines3's A2C, in one run.

Every trainer learns the same env with the same number of envs for the same env steps and torch
thread count; each timed run happens in a fresh process, the trainers take turns for ``--repeats``
rounds after one untimed warm-up round, and the median of each is reported with the peak RSS of
its process. Only the training loop is timed (``Runner.train()``, SB3's ``model.learn``). Ratios
measured within one run are what to compare; absolute numbers move with the machine.

On an Atari game (default Pong): ``ours recurrent`` (the default configuration of a real run) and
``ours feed-forward (nature)`` (``--arch nature --no-recurrent``) on the env path ``--ours-vec-env``,
against ``sb3``, SB3's A2C with the RL Zoo's Atari settings on its own env pipeline
(``sb3_reference.train``). ``--bf16`` adds each of ours with its encoder in bfloat16; ``--ablation``
the recurrent default with each speed switch taken away in turn, then all of them (what each
bought); ``--preset NAME`` (repeatable; ``"NAME FLAGS"`` types main.py's FLAGS beside it) what
``python main.py --preset NAME`` trains. On a vector-observation env (``--env-name LunarLander-v3``):
``ours (env defaults)``, what ``main.py`` trains there, against SB3's ``MlpPolicy``.

``--env-only`` adds ``envs only``: ours' envs stepped with uniformly random actions and no network
(a preset's with its own env count and frame size), and gives each trainer of ours as a share of
that rate.

    python bench/throughput.py                                  # Pong, 16 envs: ours vs SB3
    python bench/throughput.py --ablation --ours recurrent      # what each speed switch buys
    python bench/throughput.py --bf16 --steps 6000 --repeats 5  # and each of ours in bfloat16
    python bench/throughput.py --ours feedforward --preset fast-cpu --env-only --steps 8000
    python bench/throughput.py --env-name LunarLander-v3 --steps 50000 --repeats 3 --threads 1
    python bench/throughput.py --env-only --no-sb3 --ours recurrent --ours-vec-env dummy   # an env path
    python bench/throughput.py --cuda --num-envs 64             # networks on the GPU, envs on the CPU
"""
from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.dirname(os.path.abspath(__file__))):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import sb3_reference  # noqa: E402
from algorithms import make_agent  # noqa: E402
from config import Config, Speed, with_settings  # noqa: E402
from envs import VEC_ENV_CHOICES, VEC_ENVS, action_size, check_env_id, is_atari, make_vec_env  # noqa: E402
from perf import keep_freed_memory  # noqa: E402
from recipes import PRESETS  # noqa: E402
from runner import Runner  # noqa: E402
from seeds import seed_everything  # noqa: E402
from utils import UsageError  # noqa: E402

OURS_RECURRENT, OURS_FEEDFORWARD, SB3 = "ours recurrent", "ours feed-forward (nature)", "sb3"
OURS_DEFAULTS = "ours (env defaults)"  # a vector env: what main.py trains on it by default
ENV_ONLY = "envs only"  # --env-only: ours' envs stepped with random actions, no network
PRESET = "ours --preset "  # --preset NAME: the trainer "ours --preset NAME"
BF16 = " bf16"  # the suffix of a trainer of ours with its encoder in bfloat16 (--bf16)

# The speed switches of the recurrent default, each as the train_ours arguments that take it away (--ablation).
OPTIMIZATIONS = {"dummy envs": {"vec_env": "dummy"},
                 "no channels-last": {"channels_last": False},
                 "default malloc": {"keep_freed": False},
                 "rollout run again": {"keep_graph": False}}
# Taken away only with all the others: once the update trains through the collected forward pass,
# the encoder never sees more than the frames of one step, and its passes change nothing there.
BEFORE_SPEED_WORK = {"encoder_passes": False}


# ------------------------------------------------------------------------------------------------
# One timed training run of each kind. Each returns (env steps trained, seconds of the training loop).
# ------------------------------------------------------------------------------------------------
def steps_per_update(num_envs: int, rollout_size: int = Config.rollout_size) -> int:
    return num_envs * rollout_size


def train_ours(steps: int, env_name: str, num_envs: int, vec_env: str, recurrent: bool, seed: int = 0, *,
               arch: str = Config.arch, channels_last: bool = Speed.channels_last, keep_freed: bool = True,
               encoder_passes: bool = True, keep_graph: bool = True, bf16: bool = Speed.bf16,
               device: str = "cpu") -> tuple[int, float]:
    """Train this project's Atari pipeline for ``steps // (num_envs * rollout_size)`` updates, built as a
    real run builds it, without TensorBoard or progress bar. ``keep_freed=False`` leaves malloc as the
    process found it; ``encoder_passes=False`` has the encoder take every batch in one pass;
    ``keep_graph=False`` runs the rollout through the network again in the update."""
    if keep_freed:
        keep_freed_memory()
    speed = Speed(channels_last=channels_last, keep_graph=keep_graph, bf16=bf16, keep_freed_memory=keep_freed,
                  encoder_chunk=Speed.encoder_chunk if encoder_passes else 0)
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as log_dir:
        config = Config(env_name=env_name, num_envs=num_envs, vec_env=vec_env, arch=arch, recurrent=recurrent,
                        speed=speed, seed=seed, num_updates=max(1, steps // steps_per_update(num_envs)),
                        cuda=device == "cuda", tensorboard=False, progress=False, log_dir=log_dir)
        return train_config(config, log_dir, device)


def cli_config(argv: list[str], seed: int = 0, steps: int = 0, log_dir: str = "runs", device: str = "cpu") -> Config:
    """What ``python main.py ARGV --seed S`` trains (the env's and the preset's defaults under the
    flags), without TensorBoard or progress bar, for ``steps // (num_envs * rollout_size)`` updates."""
    import main as train_cli
    import recipes

    config, _, typed = train_cli.parse_args([*argv, "--seed", str(seed), "--no-tensorboard", "--no-progress",
                                             "--log-dir", log_dir, "--cuda" if device == "cuda" else "--no-cuda"])
    config = recipes.with_env_defaults(config, typed)
    return with_settings(config, {"num_updates": max(1, steps // config.steps_per_update)})


def vector_config(env_name: str, num_envs: int, seed: int = 0, steps: int = 0, log_dir: str = "runs",
                  device: str = "cpu") -> Config:
    """What ``python main.py --env-name ENV --num-envs N`` trains on a vector env (its own defaults)."""
    return cli_config(["--env-name", env_name, "--num-envs", str(num_envs)], seed, steps, log_dir, device)


def preset_config(env_name: str, preset: str, num_envs: int, seed: int = 0, steps: int = 0, log_dir: str = "runs",
                  device: str = "cpu") -> Config:
    """What ``python main.py --env-name ENV --preset NAME`` trains, with ``--num-envs N`` unless the
    preset names its own env count; ``preset`` may be ``"NAME FLAGS"``, main.py's FLAGS typed beside it."""
    name, *flags = shlex.split(preset)
    argv = ["--env-name", env_name, "--preset", name]
    if "num_envs" not in PRESETS[name]:
        argv += ["--num-envs", str(num_envs)]
    return cli_config([*argv, *flags], seed, steps, log_dir, device)  # a flag typed twice: the last wins


def train_config(config: Config, log_dir: str, device: str, vec_env: Optional[str] = None) -> tuple[int, float]:
    """Train ``config`` as ``main.py`` would (its envs stepped as ``vec_env`` says, else as the config
    does) into ``log_dir``. Only ``train()`` is timed: the Runner's reset of the envs is not."""
    if config.speed.keep_freed_memory:
        keep_freed_memory()  # as main.py does
    seed_everything(config.seed)
    envs = make_vec_env(config.env_name, config.num_envs, config.n_stack, config.seed, vec_env or config.vec_env,
                        config.max_episode_frames, frame_size=config.frame_size)
    try:
        size, continuous = action_size(envs.action_space)
        agent = make_agent(config, envs.observation_space.shape, size, device, continuous=continuous)
        runner = Runner(agent, envs, config, log_dir)
        tic = time.perf_counter()
        state = runner.train()
        return state.step, time.perf_counter() - tic
    finally:
        envs.close()


def train_ours_vector(steps: int, env_name: str, num_envs: int, vec_env: str = "sync", seed: int = 0,
                      device: str = "cpu") -> tuple[int, float]:
    """Train this project on a vector-observation env with the env's own defaults (``vector_config``)."""
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as log_dir:
        return train_config(vector_config(env_name, num_envs, seed, steps, log_dir, device), log_dir, device, vec_env)


def train_ours_preset(steps: int, env_name: str, num_envs: int, preset: str, seed: int = 0,
                      device: str = "cpu", bf16: bool = False) -> tuple[int, float]:
    """Train what ``--preset`` trains (``preset_config``); ``bf16``: with ``--bf16`` typed beside it."""
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as log_dir:
        config = preset_config(env_name, preset, num_envs, seed, steps, log_dir, device)
        return train_config(with_settings(config, {"speed.bf16": True}) if bf16 else config, log_dir, device)


def train_sb3(steps: int, env_name: str, num_envs: int, vec_env: str, seed: int = 0,
              device: str = "cpu") -> tuple[int, float]:
    """Train SB3's A2C with the RL Zoo's settings (``sb3_reference.train``) on its own env pipeline with
    the vector env class ``vec_env``; malloc is left as the process found it, as SB3's users run it."""
    run = sb3_reference.train(env_name, num_envs, steps, seed, vec_env=vec_env, device=device)
    return run.steps, run.seconds


def step_randomly(steps: int, env_name: str, num_envs: int, vec_env: str, seed: int = 0,
                  device: str = "cpu", frame_size: int = Config.frame_size) -> tuple[int, float]:
    """Step ``num_envs`` envs with uniformly random actions, drawn beforehand, for ``steps`` env steps
    (rounded up to whole vector steps), no network: the rate the envs alone allow. ``device`` is
    accepted for a trainer's signature; nothing runs there."""
    envs = make_vec_env(env_name, num_envs, seed=seed, vec_env=vec_env, frame_size=frame_size)
    try:
        rng = np.random.default_rng(seed)
        vector_steps = -(-steps // num_envs)
        space = envs.action_space
        if isinstance(space, gym.spaces.Discrete):
            actions = rng.integers(0, int(space.n), size=(vector_steps, num_envs))
        else:
            actions = rng.uniform(space.low, space.high, size=(vector_steps, num_envs, *space.shape)).astype(space.dtype)
        envs.reset()
        tic = time.perf_counter()
        for action in actions:
            envs.step(action)
        return vector_steps * num_envs, time.perf_counter() - tic
    finally:
        envs.close()


def default_setup(vec_env: str) -> dict[str, Any]:
    """Keyword arguments of ``train_ours`` (after steps, env name and env count) for the recurrent default."""
    return dict(vec_env=vec_env, recurrent=Config.recurrent, arch=Config.arch, channels_last=Speed.channels_last,
                keep_freed=True, encoder_passes=True, keep_graph=True, bf16=Speed.bf16)


def ours_setups(ours: str, vec_env: str, bf16: bool = False) -> dict[str, dict[str, Any]]:
    """Trainer name -> ``train_ours`` keyword arguments; ``ours`` is ``both``, ``recurrent``,
    ``feedforward`` or ``none``; ``bf16`` adds a bfloat16 twin of each."""
    setups: dict[str, dict[str, Any]] = {}
    if ours in ("both", "recurrent"):
        setups[OURS_RECURRENT] = default_setup(vec_env)
    if ours in ("both", "feedforward"):
        setups[OURS_FEEDFORWARD] = {**default_setup(vec_env), "arch": "nature", "recurrent": False}
    if bf16:
        setups.update({name + BF16: {**setup, "bf16": True} for name, setup in list(setups.items())})
    return setups


def ablation_setups(vec_env: str) -> dict[str, dict[str, Any]]:
    """The recurrent default without each of ``OPTIMIZATIONS``, then without all of them (and the
    encoder's passes); a row that would be the default itself (``dummy envs`` on ``dummy``) is left out."""
    default = default_setup(vec_env)
    every = {key: value for change in OPTIMIZATIONS.values() for key, value in change.items()}
    removals = {**OPTIMIZATIONS, "none of them": {**every, **BEFORE_SPEED_WORK}}
    setups = {f"recurrent, {what}": {**default, **change} for what, change in removals.items()}
    return {name: setup for name, setup in setups.items() if setup != default}


# ------------------------------------------------------------------------------------------------
@dataclass
class Trials:
    """The runs of one trainer: env steps, seconds and peak RSS (KiB) and GPU memory (MiB) of each."""

    name: str
    steps: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    peak_rss_kib: list[int] = field(default_factory=list)
    peak_gpu_mib: list[float] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [s / t for s, t in zip(self.steps, self.seconds)]

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)


Trainer = tuple[Callable[..., tuple[int, float]], dict[str, Any]]  # a train_* function and its arguments


def run_trial(train: Callable[..., tuple[int, float]], steps: int, kwargs: dict[str, Any],
              threads: int) -> tuple[int, float, int, float]:
    """One timed run, in the fresh process it is sent to: env steps, seconds, this process's peak RSS
    (KiB) and the peak GPU memory torch held (MiB; 0 on the CPU)."""
    if threads:
        torch.set_num_threads(threads)
    trained, seconds = train(steps, **kwargs)
    gpu_mib = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_initialized() else 0.0
    return trained, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, gpu_mib


def run_alternating(trainers: dict[str, Trainer], steps: int, repeats: int, warmup_steps: int,
                    threads: int = 0) -> dict[str, Trials]:
    """Run every trainer in turn, ``repeats`` rounds, after one untimed warm-up round of
    ``warmup_steps``; each run in a new process (spawned, so nothing is inherited)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    width = max(map(len, trainers))
    results = {name: Trials(name) for name in trainers}
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        def run(name: str, n: int) -> tuple[int, float, int, float]:
            train, kwargs = trainers[name]
            return pool.submit(run_trial, train, n, kwargs, threads).result()

        for name in trainers if warmup_steps > 0 else ():
            print(f"warm-up  {name:<{width}} {warmup_steps} steps", flush=True)
            run(name, warmup_steps)
        for round_ in range(1, repeats + 1):
            for name in trainers:
                trained, seconds, peak_kib, gpu_mib = run(name, steps)
                trials = results[name]
                trials.steps.append(trained)
                trials.seconds.append(seconds)
                trials.peak_rss_kib.append(peak_kib)
                trials.peak_gpu_mib.append(gpu_mib)
                print(f"round {round_}  {name:<{width}} {trained} steps in {seconds:6.2f} s: "
                      f"{trained / seconds:7.1f} steps/s", flush=True)
    return results


def print_table(results: dict[str, Trials]) -> None:
    width = max(len("trainer"), *map(len, results))
    gpu = any(max(trials.peak_gpu_mib, default=0.0) > 0 for trials in results.values())
    print(f"\n{'trainer':<{width}} {'steps':>7} {'median s':>9} {'steps/s (median)':>17} {'peak RSS':>9}  "
          + (f"{'peak GPU':>9}  " if gpu else "") + "steps/s of each round")
    for trials in results.values():
        rounds = " ".join(f"{r:.1f}" for r in trials.rates)
        gpu_peak = f"{max(trials.peak_gpu_mib):>5.0f} MiB  " if gpu else ""
        print(f"{trials.name:<{width}} {trials.steps[0]:>7} {statistics.median(trials.seconds):>9.2f} "
              f"{trials.median_rate:>17.1f} {max(trials.peak_rss_kib) / 1024:>5.0f} MiB  {gpu_peak}{rounds}")


def preset_envs(trainer: str) -> str:
    """The env-only row of a preset's envs, the same for the preset in bfloat16."""
    return f"{ENV_ONLY} (--preset {trainer.removeprefix(PRESET).removesuffix(BF16)})"


def comparisons(results: dict[str, Trials], ablations: list[str]) -> dict[tuple[str, str], float]:
    """Every comparison the summary prints, ``(trainer, other) -> trainer's median rate / other's``:
    each of ours against SB3 and, in bfloat16, against its float32 twin; the recurrent default
    against each ``ablations`` row (what the switches that row lacks bought); a preset against the
    fast configuration; each trainer of ours against the rate of its envs alone (a share, below 1)."""
    rate = {name: trials.median_rate for name, trials in results.items()}
    ours = [name for name in results if name.startswith("ours")]
    pairs = [(name, SB3) for name in ours] + [(name, name.removesuffix(BF16)) for name in ours]
    pairs += [(OURS_RECURRENT, row) for row in ablations]
    pairs += [(name, OURS_FEEDFORWARD) for name in ours if name.startswith(PRESET)]
    pairs += [(name, preset_envs(name) if name.startswith(PRESET) else ENV_ONLY) for name in ours]
    return {(a, b): rate[a] / rate[b] for a, b in pairs if a != b and a in rate and b in rate}


def summary_lines(results: dict[str, Trials], ablations: list[str]) -> list[str]:
    lines = []
    for (name, other), value in comparisons(results, ablations).items():
        if other.startswith(ENV_ONLY):
            lines.append(f"{name}: {value:.0%} of the rate of {other} ({results[other].median_rate:,.0f} env steps/s)")
        else:
            lines.append(f"{name} / {other}: {value:.2f}x")
    return lines


# ------------------------------------------------------------------------------------------------
def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return int(text)


def non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got '{text}'")
    return int(text)


def preset_spec(text: str) -> str:
    """``--preset``: a preset's name, then main.py's flags to type beside it, if any, as one string."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if not words or words[0] not in PRESETS:
        raise argparse.ArgumentTypeError(f"{text!r}: the name of a preset first ({', '.join(PRESETS)}), then "
                                         f"main.py's flags, if any")
    return shlex.join(words)


ATARI_STEPS, VECTOR_STEPS = 4000, 50_000  # the default --steps of an Atari game and of a vector env
ATARI_ONLY = ("ablation", "bf16", "preset")  # with --ours: what a vector env, trained on its defaults, has not


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=positive_int, default=None,
                   help=f"env steps each timed run trains, rounded down to whole updates (default: {ATARI_STEPS} "
                        f"for an Atari game, {VECTOR_STEPS} for a vector env)")
    p.add_argument("--env-name", default="PongNoFrameskip-v4", help="an Atari game or a vector-observation env")
    p.add_argument("--num-envs", type=positive_int, default=16, help="envs stepped in parallel (default: 16)")
    p.add_argument("--repeats", type=positive_int, default=3, help="rounds of alternating runs (default: 3)")
    p.add_argument("--warmup-steps", type=non_negative_int, default=160,
                   help="env steps of one untimed run of each trainer first (0: none; default: 160)")
    p.add_argument("--ours", choices=["both", "recurrent", "feedforward", "none"], default="both",
                   help="which configurations of ours to measure (Atari; none: only --preset's)")
    p.add_argument("--no-sb3", action="store_true", help="measure ours only")
    p.add_argument("--env-only", action="store_true", help="also step ours' envs alone with random actions")
    p.add_argument("--preset", type=preset_spec, action="append", default=[], metavar="'NAME [FLAGS]'",
                   help=f"also what python main.py --preset NAME [FLAGS] trains (Atari; {', '.join(PRESETS)})")
    p.add_argument("--bf16", action="store_true", help="also each of ours with its encoder in bfloat16 (Atari)")
    p.add_argument("--ablation", action="store_true",
                   help="also the recurrent default without each speed switch, then without all (Atari)")
    p.add_argument("--ours-vec-env", choices=VEC_ENV_CHOICES, default=None,
                   help="env path of ours (default: ale for Atari, sync for a vector env)")
    p.add_argument("--sb3-vec-env", choices=sorted(VEC_ENVS), default="dummy", help="SB3's vector env class")
    p.add_argument("--cuda", action="store_true", help="train every trainer on the GPU (envs on the CPU)")
    p.add_argument("--seed", type=int, default=0, help="seed of every run")
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (0: torch's default)")
    return p


def env_path(vec_env: str, atari: bool, sb3: bool = False) -> str:
    """How a trainer's envs are stepped, for the header."""
    if sb3 or (atari and vec_env != "ale"):
        return f"{vec_env} ({'SB3 Atari wrappers, ' if atari and not sb3 else 'SB3 '}{VEC_ENVS[vec_env].__name__})"
    if atari:
        import ale_py

        return f"ale (ale-py {ale_py.__version__} C++ vector env)"
    return "async (gymnasium AsyncVectorEnv)" if vec_env in ("subproc", "async") else "sync (gymnasium SyncVectorEnv)"


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_env_id(args.env_name)
    except UsageError as exc:
        parser.error(str(exc))
    if args.cuda and not torch.cuda.is_available():
        parser.error("--cuda: CUDA is not available on this machine")
    atari = is_atari(args.env_name)
    typed = [f"--{name}" for name in ATARI_ONLY if getattr(args, name)] + (["--ours"] if args.ours != "both" else [])
    if not atari and typed:
        parser.error(f"{', '.join(typed)}: for Atari games; {args.env_name} trains with its own defaults")
    if args.threads:
        torch.set_num_threads(args.threads)
    vec_env = args.ours_vec_env or ("ale" if atari else "sync")
    common = dict(env_name=args.env_name, num_envs=args.num_envs, seed=args.seed, device="cuda" if args.cuda else "cpu")
    rollout_size = Config.rollout_size if atari else vector_config(args.env_name, args.num_envs).rollout_size
    per_update = steps_per_update(args.num_envs, rollout_size)
    steps = max(per_update, (args.steps or (ATARI_STEPS if atari else VECTOR_STEPS)) // per_update * per_update)
    warmup = args.warmup_steps and max(per_update, args.warmup_steps // per_update * per_update)

    setups = ours_setups(args.ours, vec_env, args.bf16) if atari else {}
    trainers: dict[str, Trainer] = {name: (train_ours, {**common, **setup}) for name, setup in setups.items()}
    if not atari:
        trainers[OURS_DEFAULTS] = train_ours_vector, {**common, "vec_env": vec_env}
    if not args.no_sb3:
        trainers[SB3] = train_sb3, {**common, "vec_env": args.sb3_vec_env}
    ablations = ablation_setups(vec_env) if args.ablation and OURS_RECURRENT in setups else {}
    trainers.update((name, (train_ours, {**common, **setup})) for name, setup in ablations.items())
    if args.env_only and trainers.keys() - {SB3}:
        trainers[ENV_ONLY] = step_randomly, {**common, "vec_env": vec_env}
    for preset in args.preset:
        try:
            config = preset_config(args.env_name, preset, args.num_envs)
        except (UsageError, SystemExit) as exc:  # main.py's parser has said what is wrong with its flags
            parser.error(f"--preset {preset!r}: {exc if isinstance(exc, UsageError) else 'not flags main.py takes'}")
        for bf16 in (False, True) if args.bf16 else (False,):
            trainers[PRESET + preset + (BF16 if bf16 else "")] = train_ours_preset, {**common, "preset": preset,
                                                                                     "bf16": bf16}
        if args.env_only:
            trainers[preset_envs(PRESET + preset)] = step_randomly, {**common, "num_envs": config.num_envs,
                                                                     "vec_env": config.vec_env,
                                                                     "frame_size": config.frame_size}

    sb3 = "" if args.no_sb3 else f", sb3 {env_path(args.sb3_vec_env, atari, sb3=True)}"
    print(f"{args.env_name}, {args.num_envs} envs, {steps} env steps a run, {args.repeats} rounds; "
          f"envs: ours {env_path(vec_env, atari)}{sb3}; torch {torch.__version__} with {torch.get_num_threads()} "
          f"threads, {os.cpu_count()} CPUs" + (f", {torch.cuda.get_device_name()}" if args.cuda else ""), flush=True)
    results = run_alternating(trainers, steps, args.repeats, warmup, args.threads)
    print_table(results)
    for line in summary_lines(results, list(ablations)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
