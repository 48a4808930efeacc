"""Training, from scratch or resumed: the run directory, the envs, the agent and its algorithm's
loop, wired together as one run (``python main.py ...`` after main.py has read the flags).

Launched by torchrun, this process is one rank of a data-parallel run (``distributed.py``): every
rank checks the input alike and refuses bad input before the process group starts; rank 0 alone
makes the run directory and writes into it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Optional

from torch.utils.tensorboard import SummaryWriter

import adr
import distributed
from algorithms import algorithm, make_agent
from capture import compile_network
from checkpoints import TrainingState, catch_up_bests, check_checkpoint_fits, restore
from config import Config, with_settings
from devices import describe, nondeterministic_parts, pick_device
from envs import action_size, check_env, check_sticky_actions, family_of, make_vec_env
from evaluate import PeriodicEvaluator
from model import CONV_ENCODERS
from normalize import load as load_normalizer
from normalize import normalized
from overlap import OverlappedRolloutCollector
from perf import has_fast_bf16
from randomize import check_randomizable, parse_physics
from runner import RolloutCollector, Runner, save_settings
from seeds import env_seed, sampling_seed, seed_everything
from utils import UsageError, probe_writable


def train(config: Config, resume: Optional[str] = None, checkpoint: Optional[dict[str, Any]] = None) -> int:
    """Train from scratch, or continue the run whose a2c_last ``checkpoint`` was read from ``resume``.

    Launched by torchrun, this process is one rank of a data-parallel run (``distributed.py``):
    every rank checks the input alike and refuses bad input before the process group starts; rank
    0 alone makes the run directory and writes into it.
    """
    context = distributed.context_from_environment()
    algo = algorithm(config.algo)
    collector = collector_for(config)
    if context.world_size > 1 and not algo.data_parallel:
        raise UsageError(f"--algo {config.algo} trains in one process for now: start it with python, not torchrun")
    if context.world_size > 1 and config.randomize_domain == "adr":
        raise UsageError(
            "--randomize-domain adr moves one set of ranges in one process: start it with python, not torchrun"
        )
    # A resumed run's settings (its checkpoint's, with the flags typed now on top) are checked as a new run's are.
    check_settings(config)
    family = family_of(config.env_name)
    own_sticky_actions = family.sticky_actions(config.env_name)
    if (
        own_sticky_actions is not None and config.sticky_actions is None
    ):  # the run's settings say which it trained under
        config = with_settings(config, {"sticky_actions": own_sticky_actions})
    if checkpoint is not None:
        if "optimizer" not in checkpoint:
            raise UsageError(f"checkpoint {resume} holds weights only; resume from an a2c_last checkpoint")
        run_dir = os.path.dirname(os.path.abspath(resume))
        try:  # found out now, not at the first checkpoint after hours of training
            if context.is_main:
                probe_writable(run_dir)
        except OSError as exc:
            raise UsageError(f"cannot write to the run directory '{run_dir}': {exc.strerror or exc}") from None
    else:
        run_dir = make_run_dir(config) if context.is_main else ""  # the others learn it from rank 0
    device = distributed.place(
        pick_device(
            config.cuda,
            config.threads,
            config.speed.keep_freed_memory,
            cuda_by_default=family.cuda,
            tf32=config.speed.tf32,
            reproducible=config.reproducible,
            say=distributed.local_rank() == 0,
        ),
        context,
    )
    if config.speed.bf16 and not has_fast_bf16(device):
        print(
            f"warning: this {'GPU' if device.type == 'cuda' else 'CPU'} has no bfloat16 arithmetic; --bf16 will "
            f"be slower, not faster",
            file=sys.stderr,
        )
    seed_everything(config.seed)

    # A resumed run reseeds its envs past the ones it already used, so it does not replay them.
    # Each rank's envs take seeds of their own.
    first_seed = env_seed(
        config.seed, update=checkpoint["update"] if checkpoint else 0, rank=context.rank, num_envs=config.num_envs
    )
    curriculum = adr.from_config(config)
    envs = make_vec_env(
        config.env_name,
        config.num_envs,
        config.n_stack,
        first_seed,
        config.vec_env,
        config.max_episode_frames,
        randomize=config.randomize_every if config.randomize_domain == "uniform" else None,
        physics=parse_physics(config.env_name, config.physics) if config.physics else None,
        frame_size=config.frame_size,
        adr=curriculum,
        observation_window=config.observation_window,
        sticky_actions=config.sticky_actions,
        groups=config.speed.env_groups,
    )
    envs = normalized(envs, config.normalize_obs, config.normalize_reward, config.gamma)
    evaluator = None
    try:
        obs_shape, (num_actions, continuous) = envs.observation_space.shape, action_size(envs.action_space)
        agent = make_agent(config, obs_shape, num_actions, device, continuous=continuous)
        if config.speed.compile:  # a speed setting: the same network, fewer kernel launches a step
            compile_network(agent.model)
        state = TrainingState()
        if checkpoint is not None:
            check_checkpoint_fits(checkpoint, resume, obs_shape, num_actions, config.env_name)
            state = restore(checkpoint, agent, resume)
            load_normalizer(envs, checkpoint)
            if curriculum is not None and "adr" in checkpoint:
                curriculum.load_state_dict(checkpoint["adr"])
            catch_up_bests(state, run_dir)
            if state.update >= config.num_updates:
                raise UsageError(
                    f"checkpoint {resume} already ran {state.update} of {config.num_updates} "
                    f"updates; pass a larger --num-updates to train further"
                )
        # Every input is checked: the ranks meet. The same weights on every rank, and action
        # sampling from a random stream of each rank's own.
        if context.rank > 0:
            seed_everything(sampling_seed(config.seed, context.rank, state.update))
        distributed.start(context, device)
        distributed.check_same_run(config, state.update, context)
        distributed.broadcast_parameters(agent.networks, context)
        agent.gradient_reducer = distributed.gradient_reducer(context)
        agent.sum_over_ranks = distributed.sum_over_ranks(context)
        run_dir = distributed.broadcast_object(run_dir, context)
        # Events logged after the checkpoint was written (step > its step) are dropped: curves carry on.
        purge = state.step + 1 if checkpoint else None
        writer = SummaryWriter(run_dir, purge_step=purge) if config.tensorboard and context.is_main else None
        if context.is_main:
            save_settings(config, run_dir, writer)
            print(describe(device, tf32=config.speed.tf32, bf16=config.speed.bf16), flush=True)
            if config.reproducible:
                print(reproducible_line(device, config, context.world_size), flush=True)
            print(f"run directory: {run_dir}", flush=True)
            if config.sticky_actions is not None:
                print(protocol_line(config.sticky_actions), flush=True)
            world = describe_world(config, context, device, checkpoint)
            if world:
                print(world, flush=True)
        if config.eval_interval and context.is_main:  # envs of its own, seeded apart from training, as --eval does
            evaluator = PeriodicEvaluator(
                config.env_name,
                config.eval_episodes,
                env_seed(config.seed, evaluation=True),
                config.n_stack,
                config.frame_size,
                max_episode_frames=config.max_episode_frames,
                vec_env=config.vec_env,
                observation_window=config.observation_window,
                obs_stats_from=envs if config.normalize_obs else None,
            )
        runner = Runner(
            agent,
            envs,
            config,
            run_dir,
            state,
            writer,
            evaluator,
            context=context,
            adr=curriculum,
            collector=collector,
        )
        final = runner.train()
        if writer is not None:
            writer.close()
    finally:
        envs.close()
        if evaluator is not None:
            evaluator.close()
        distributed.stop(context)
    if not context.is_main:
        return 1 if "non-finite" in runner.stop_reason else 0
    episodes = final.episodes
    returns = (
        f"mean return of the last {len(episodes.returns)} episodes: {episodes.mean:.2f}"
        if episodes.returns
        else "no episode finished yet"
    )
    print(
        f"{runner.stop_reason + '; ' if runner.stop_reason else ''}{final.step} env steps, "
        f"{final.update} updates, {returns}; checkpoints in {run_dir}",
        flush=True,
    )
    return 1 if "non-finite" in runner.stop_reason else 0


FRAME_SIZES = (36, 210)  # the frame sizes an Atari run may ask for


def protocol_line(sticky_actions: float) -> str:
    """The line that says which emulator an Atari run trains in."""
    if sticky_actions == 0:
        return "protocol: no sticky actions (a deterministic emulator, as NoFrameskip-v4 ids and --protocol classic)"
    machado = " (as ALE/...-v5 ids and --protocol machado)" if sticky_actions == 0.25 else ""
    return f"protocol: sticky actions {sticky_actions:g}: each frame repeats the previous action with that probability{machado}"


def check_settings(config: Config) -> None:
    """Refuse, in one line, settings a run cannot train with: an unknown network or env, and
    settings that do not fit the env or the algorithm (``algorithms.Algorithm.check``)."""
    if config.arch not in CONV_ENCODERS:
        raise UsageError(f"unknown --arch {config.arch!r} (one of {', '.join(CONV_ENCODERS)})")
    continuous = check_env(config.env_name)
    check_sticky_actions(config.sticky_actions, config.env_name)
    check_decay_start("--lr-decay-start", config.lr_decay_start, "--lr-schedule", config.lr_schedule, "rate")
    check_decay_start(
        "--entropy-decay-start", config.entropy_decay_start, "--entropy-schedule", config.entropy_schedule, "weight"
    )
    if config.lr_decay_from != 1 and config.lr_schedule != "linear":
        raise UsageError(
            f"--lr-decay-from is the rate the decay of --lr-schedule linear begins at; the rate is {config.lr_schedule}"
        )
    if not config.lr_decay_from:
        raise UsageError("--lr-decay-from is a share of --lr above 0 (0 would stop learning where the decay begins)")
    if not continuous and (config.log_std_init != Config.log_std_init or config.sde):
        flag = "--sde" if config.sde else "--log-std-init"
        raise UsageError(f"{flag} is for continuous actions; {config.env_name}'s are discrete")
    algorithm(config.algo).check(config)
    if family_of(config.env_name).observes == "vectors":
        if config.curiosity.enabled:
            raise UsageError(f"--icm works on Atari games only for now, not on {config.env_name}")
        if config.frame_size != Config.frame_size:
            raise UsageError(f"--frame-size is the size of an Atari frame; {config.env_name} observes vectors")
        if config.conv_filters != Config.conv_filters:
            raise UsageError(
                f"--conv-filters shapes the conv encoder of Atari frames; {config.env_name} observes "
                f"vectors (--mlp-width)"
            )
    elif not FRAME_SIZES[0] <= config.frame_size <= FRAME_SIZES[1]:
        raise UsageError(
            f"--frame-size must be from {FRAME_SIZES[0]} (the smallest frame the Nature CNN takes) to "
            f"{FRAME_SIZES[1]} (the screen's height), got {config.frame_size}"
        )
    elif config.obs_history != 1 or config.prev_action_reward:
        raise UsageError(
            f"--obs-history and --prev-action-reward are for vector observations; {config.env_name} "
            f"stacks its frames (--n-stack)"
        )
    elif config.normalize_obs or config.normalize_reward:
        raise UsageError(
            f"--normalize-obs and --normalize-reward are for vector observations, not the frames of {config.env_name}"
        )
    elif config.conv_filters != Config.conv_filters and config.arch != "universe":
        raise UsageError(
            f"--conv-filters is the width of the universe encoder; --arch {config.arch} has layers of its own"
        )
    elif config.mlp_width != Config.mlp_width:
        raise UsageError(
            f"--mlp-width is the width of the MLP for vector observations; {config.env_name}'s "
            f"frames go through the conv encoder (--arch)"
        )
    check_physics(config)


def check_decay_start(flag: str, start: float, schedule_flag: str, schedule: str, what: str) -> None:
    """Refuse, in one line, where a linear decay begins (``flag``, a share of the run) that its
    schedule (``schedule_flag``, of the ``what``) cannot use."""
    if start and schedule != "linear":
        raise UsageError(f"{flag} is where the linear decay of {schedule_flag} linear begins; the {what} is {schedule}")
    if start >= 1:
        raise UsageError(f"{flag} is a share of the run below 1 (the decay ends at the last update), got {start:g}")


def check_physics(config: Config) -> None:
    """Refuse, in one line, physics settings the env or the run cannot take: randomization or
    ``--physics`` on an env ``randomize.py`` does not know, both at once, a cell outside the ranges,
    and ADR's settings without ADR or out of bounds."""
    if config.randomize_domain:
        check_randomizable(config.env_name)
    if config.physics:
        check_randomizable(config.env_name, "--physics")
        if config.randomize_domain:
            raise UsageError("--physics gives every env the same physics and --randomize-domain draws them: give one")
        parse_physics(config.env_name, config.physics)
    if config.randomize_domain != "adr":
        if config.adr != Config().adr:
            raise UsageError(
                "--adr-low, --adr-high, --adr-step, --adr-episodes and --adr-boundary-prob are for "
                "--randomize-domain adr"
            )
        return
    if config.randomize_every != "episode":
        raise UsageError(
            "--randomize-domain adr draws every episode's physics from its ranges: --randomize-every "
            "is for --randomize-domain uniform"
        )
    if config.vec_env in ("subproc", "async"):
        raise UsageError(
            "--randomize-domain adr moves one set of ranges that every env draws from: it needs the "
            "envs in this process (--vec-env sync), not --vec-env async"
        )
    if config.adr.step <= 0 or config.adr.boundary_prob <= 0:
        raise UsageError("--adr-step and --adr-boundary-prob must be above 0, or no range would ever move")
    adr.from_config(config)  # the thresholds (the env's defaults, or typed)


def describe_world(config: Config, context: Any, device: Any, checkpoint: Optional[dict[str, Any]]) -> str:
    """The line a data-parallel run starts with: processes, envs per rank and in all, the batch of an
    update (and a resume's change of world size). Empty for a plain run of a plain run."""
    trained_by = checkpoint.get("world_size", 1) if checkpoint is not None else context.world_size
    if context.world_size == 1 and trained_by == 1:
        return ""
    total_envs = config.num_envs * context.world_size
    processes = (
        f"data-parallel: {context.world_size} processes ({'NCCL' if device.type == 'cuda' else 'Gloo'}, "
        f"{device.type}) x {config.num_envs} envs (--num-envs is per process) = {total_envs} envs"
        if context.world_size > 1
        else f"one process, {total_envs} envs"
    )
    line = (
        f"{processes}; batch per update {total_envs} x {config.rollout_size} = "
        f"{total_envs * config.rollout_size} env steps"
    )
    if trained_by != context.world_size:
        line += (
            f"; the run was trained by {trained_by} process(es) with {config.num_envs * trained_by} envs "
            f"and goes on with {total_envs}"
        )
    return line


def collector_for(config: Config) -> type:
    """What gathers the batches of a run of ``config``: its algorithm's collector, or with ``--env-groups``
    (a speed setting) the rollouts collected with the envs' steps overlapped (overlap.py)."""
    collector = algorithm(config.algo).collector
    if config.speed.env_groups > 1:
        if collector is not RolloutCollector:
            raise UsageError(f"--env-groups overlaps the steps of rollouts; --algo {config.algo} collects otherwise")
        return OverlappedRolloutCollector
    return collector


def reproducible_line(device: Any, config: Config, world_size: int = 1) -> str:
    """What ``--reproducible`` says it could not make deterministic on ``device``."""

    parts = nondeterministic_parts(
        device, arch=config.arch, image_obs=family_of(config.env_name).observes == "images", world_size=world_size
    )
    if not parts:
        return f"reproducible: deterministic kernels; every op of this run on the {device.type} has one"
    return "reproducible: deterministic kernels, except " + "; ".join(parts)


def make_run_dir(config: Config) -> str:
    """A new directory under ``log_dir`` named from env, time and seed; checks it can be written."""

    name = f"{config.env_name.replace('/', '-')}_{time.strftime('%Y%m%d-%H%M%S')}_seed{config.seed}"
    try:
        os.makedirs(config.log_dir, exist_ok=True)
        path = os.path.join(config.log_dir, name)
        suffix = 1
        while os.path.exists(path):
            suffix += 1
            path = os.path.join(config.log_dir, f"{name}-{suffix}")
        os.makedirs(path)
        probe_writable(path)
    except OSError as exc:
        raise UsageError(f"cannot write to log dir '{config.log_dir}': {exc.strerror or exc}") from None
    return path
