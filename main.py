"""Command line: train a recurrent A2C agent on an Atari game, resume a run, or play a saved agent.

    python main.py --env-name PongNoFrameskip-v4 --cuda         train
    python main.py --resume runs/RUN/a2c_last                   continue a run
    python main.py --eval --load runs/RUN/a2c_best_reward       play saved agent, print scores
    python main.py --plot runs/RUN_A runs/RUN_B --out runs.png  compare runs' curves
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any, Optional, Sequence

from config import (ARCHS, OPTIMIZERS, RANDOMIZE_EVERY, SEED_LIMIT, Config, defaults_for, env_seed, field_doc,
                    get_setting, setting_names, with_settings)

# Settings that define a run and cannot change when it is resumed: the game, the network's shape,
# the number of envs (the recurrent state's shape), the seed, the optimizer (its saved state) and
# the algorithm (with the settings of its own that it fixes: algorithms.Algorithm.fixed).
# Every other typed flag (--num-updates, --lr, --entropy-coeff...) applies from the resumed update on.
RESUME_FIXED = {"env_name", "num_envs", "n_stack", "arch", "recurrent", "hidden_size", "mlp_width", "log_std_init", "sde",
                "feature_norm", "core_skip", "lstm_norm", "critic", "seed", "normalize_obs", "optimizer", "log_dir",
                "curiosity.enabled", "curiosity.normalize", "algo"}
FLAG_OF: dict[str, str] = {}  # setting name -> the flag that sets it (filled by build_parser)
# Flags of --eval only: given without --eval they are refused rather than silently ignored.
EVAL_ONLY = ("episodes", "deterministic", "protocol", "full_action_space", "eval_envs", "json", "video", "physics_grid")
# Flags that fix the network's shape: a checkpoint cannot be loaded into another.
ARCHITECTURE = ("arch", "recurrent", "hidden_size", "mlp_width", "sde", "feature_norm", "core_skip", "lstm_norm", "critic",
                "n_stack")


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line on stderr, exit code 2
        self.exit(2, f"error: {message} (see --help)\n" if shows_errors() else None)


def shows_errors() -> bool:
    """Whether this process prints bad input: under torchrun every rank checks the same input, and
    the first process of each machine (``LOCAL_RANK`` 0) says what is wrong, once."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def build_parser(with_defaults: bool = True) -> argparse.ArgumentParser:
    """The command line. ``with_defaults=False`` gives a parser whose result holds only the flags typed."""
    p = OneLineParser(description="Recurrent advantage actor-critic (A2C) for Atari games and gymnasium envs with vector observations.",
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter, argument_default=None)
    defaults = Config()

    def flag(*names: str, field: str, **kwargs: Any) -> None:
        default = get_setting(defaults, field) if with_defaults else argparse.SUPPRESS
        FLAG_OF[field] = names[0]
        p.add_argument(*names, dest=field, default=default, help=field_doc(field), **kwargs)

    def switch(name: str, field: str) -> None:
        flag(name, field=field, action=argparse.BooleanOptionalAction)

    positive_int, positive_float = _checked(int, "a positive integer"), _checked(float, "a positive number")
    non_negative, unit = _checked(float, "a number >= 0", allow_zero=True), _unit_interval
    flag("--env-name", field="env_name", metavar="ID")
    flag("--num-envs", field="num_envs", type=positive_int, metavar="N")
    flag("--n-stack", field="n_stack", type=positive_int, metavar="N")
    flag("--vec-env", field="vec_env", choices=["ale", "dummy", "subproc", "sync", "async"])
    flag("--max-episode-frames", field="max_episode_frames", type=positive_int, metavar="N")
    switch("--randomize-domain", "randomize_domain")
    flag("--randomize-every", field="randomize_every", choices=list(RANDOMIZE_EVERY))
    switch("--normalize-obs", "normalize_obs")
    switch("--normalize-reward", "normalize_reward")
    flag("--seed", field="seed", type=parse_seed)
    flag("--arch", field="arch", choices=list(ARCHS))
    switch("--recurrent", "recurrent")
    flag("--hidden-size", field="hidden_size", type=positive_int, metavar="N")
    flag("--mlp-width", field="mlp_width", type=positive_int, metavar="N")
    flag("--log-std-init", field="log_std_init", type=_finite, metavar="X")
    switch("--sde", "sde")
    switch("--feature-norm", "feature_norm")
    switch("--core-skip", "core_skip")
    switch("--lstm-norm", "lstm_norm")
    flag("--algo", field="algo", metavar="NAME")
    flag("--group-size", field="group.size", type=positive_int, metavar="G")
    flag("--horizon", field="group.horizon", type=_checked(int, "an integer >= 0", allow_zero=True), metavar="T")
    switch("--group-std", "group.scale_by_std")
    flag("--clip-eps", field="group.clip_eps", type=positive_float, metavar="EPS")
    flag("--update-epochs", field="group.update_epochs", type=positive_int, metavar="N")
    flag("--minibatches", field="group.minibatches", type=positive_int, metavar="N")
    flag("--kl-coeff", field="group.kl_coeff", type=non_negative, metavar="C")
    flag("--ref-interval", field="group.ref_interval", type=positive_int, metavar="N")
    flag("--ppo-epochs", field="ppo.epochs", type=positive_int, metavar="N")
    flag("--ppo-minibatches", field="ppo.minibatches", type=positive_int, metavar="N")
    flag("--ppo-clip-eps", field="ppo.clip_eps", type=positive_float, metavar="EPS")
    flag("--rollout-size", field="rollout_size", type=positive_int, metavar="T")
    flag("--num-updates", field="num_updates", type=positive_int, metavar="N")
    flag("--max-env-steps", field="max_env_steps", type=positive_int, metavar="N")
    flag("--gamma", field="gamma", type=unit)
    flag("--gae-lambda", field="gae_lambda", type=unit)
    switch("--normalize-advantages", "normalize_advantages")
    switch("--critic", "critic")
    flag("--value-coeff", field="value_coeff", type=non_negative)
    flag("--entropy-coeff", field="entropy_coeff", type=non_negative)
    flag("--max-grad-norm", "--max-grad_norm", field="max_grad_norm", type=positive_float)
    flag("--optimizer", field="optimizer", choices=list(OPTIMIZERS))
    flag("--lr", field="lr", type=positive_float)
    flag("--lr-schedule", field="lr_schedule", choices=["constant", "linear"])
    switch("--icm", "curiosity.enabled")
    flag("--curiosity-coeff", field="curiosity.eta", type=non_negative)
    flag("--icm-beta", field="curiosity.beta", type=unit)
    flag("--icm-lambda", field="curiosity.policy_weight", type=non_negative)
    flag("--extrinsic-coeff", field="curiosity.extrinsic_coeff", type=non_negative)
    switch("--icm-normalize", "curiosity.normalize")
    switch("--icm-forward-grad", "curiosity.forward_trains_encoder")
    flag("--max-skipped-updates", field="max_skipped_updates", type=positive_int, metavar="N")
    switch("--cuda", "cuda")
    switch("--channels-last", "speed.channels_last")
    switch("--keep-graph", "speed.keep_graph")
    flag("--encoder-chunk", field="speed.encoder_chunk", type=_checked(int, "an integer >= 0", allow_zero=True),
         metavar="N")
    switch("--keep-freed-memory", "speed.keep_freed_memory")
    switch("--bf16", "speed.bf16")
    switch("--tf32", "speed.tf32")
    switch("--reproducible", "reproducible")
    flag("--threads", field="threads", type=_checked(int, "an integer >= 0", allow_zero=True), metavar="N")
    flag("--log-dir", field="log_dir", metavar="DIR")
    switch("--tensorboard", "tensorboard")
    flag("--log-interval", field="log_interval", type=positive_int, metavar="N")
    flag("--histogram-interval", field="histogram_interval", type=positive_int, metavar="N")
    flag("--checkpoint-interval", field="checkpoint_interval", type=positive_int, metavar="N")
    flag("--eval-interval", field="eval_interval", type=_checked(int, "an integer >= 0", allow_zero=True), metavar="N")
    flag("--eval-episodes", field="eval_episodes", type=positive_int, metavar="N")
    switch("--progress", "progress")

    mode = p.add_argument_group("resume and evaluation")
    mode.add_argument("--resume", metavar="PATH", default=None if with_defaults else argparse.SUPPRESS,
                      help="continue training from an a2c_last checkpoint, in its run directory")
    mode.add_argument("--eval", action="store_true", default=False if with_defaults else argparse.SUPPRESS,
                      help="play a saved agent (--load) and print its raw scores instead of training")
    mode.add_argument("--load", metavar="PATH", default=None if with_defaults else argparse.SUPPRESS,
                      help="checkpoint to play with --eval (a2c_best_reward, a2c_best_eval, a2c_best_loss or "
                           "a2c_last)")
    mode.add_argument("--episodes", type=positive_int, default=10 if with_defaults else argparse.SUPPRESS,
                      metavar="N", help="episodes to play with --eval")
    policy = mode.add_mutually_exclusive_group()
    policy.add_argument("--deterministic", dest="deterministic", action="store_true",
                        default=False if with_defaults else argparse.SUPPRESS,
                        help="with --eval, take the most probable action (argmax) instead of sampling one")
    policy.add_argument("--stochastic", dest="deterministic", action="store_false", default=argparse.SUPPRESS,
                        help="with --eval, sample actions from the policy, as in training (the default)")
    mode.add_argument("--protocol", choices=["classic", "machado"],
                      default="classic" if with_defaults else argparse.SUPPRESS,
                      help="with --eval: 'classic' (NoFrameskip-v4: up to 30 no-op starts, no sticky actions) or "
                           "'machado' (Machado et al. 2018: sticky actions 0.25, no no-op starts, games capped at "
                           "108,000 frames)")
    mode.add_argument("--full-action-space", action=argparse.BooleanOptionalAction,
                      default=False if with_defaults else argparse.SUPPRESS,
                      help="with --eval --protocol machado, play with all 18 Atari actions (the network must have 18)")
    mode.add_argument("--eval-envs", type=positive_int, default=None if with_defaults else argparse.SUPPRESS,
                      metavar="N", help="envs played in parallel with --eval; none given: min(episodes, 8)")
    mode.add_argument("--json", metavar="PATH", default=None if with_defaults else argparse.SUPPRESS,
                      help="with --eval, write the scores and statistics to this JSON file")
    mode.add_argument("--video", metavar="DIR", default=None if with_defaults else argparse.SUPPRESS,
                      help="with --eval, record each game's screen as an .mp4 into this directory")
    mode.add_argument("--physics-grid", action="store_true", default=False if with_defaults else argparse.SUPPRESS,
                      help="with --eval, play --episodes episodes in every cell of a grid of physics (LunarLander: "
                           "gravity x wind power; CartPole: gravity x pole length) and write the mean returns as a "
                           "table (--json, default CHECKPOINT_physics_grid.json) and a heat map (--out, default "
                           "CHECKPOINT_physics_grid.png)")
    mode.add_argument("--plot", nargs="+", metavar="RUN_DIR", default=None if with_defaults else argparse.SUPPRESS,
                      help="instead of training, draw the curves of these runs (return, entropy, losses, explained "
                           "variance, gradient norm against env steps) into one image (--out)")
    mode.add_argument("--out", metavar="FILE.png", default="plot.png" if with_defaults else argparse.SUPPRESS,
                      help="image written by --plot (or by --eval --physics-grid)")
    return p


def _checked(kind: type, what: str, allow_zero: bool = False):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'")
        return value
    parse.__name__ = what  # argparse names the type in its message
    return parse


def _finite(text: str) -> float:
    """A finite number of either sign (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got '{text}'")
    return value


def parse_seed(text: str) -> int:
    """A seed from the command line: an integer from 0 to SEED_LIMIT - 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {SEED_LIMIT - 1}, got '{text}'")
    return value


def _unit_interval(text: str) -> float:
    value = _checked(float, "a number in [0, 1]", allow_zero=True)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got '{text}'")
    return value


def parse_args(argv: Optional[Sequence[str]] = None) -> tuple[Config, argparse.Namespace, set[str]]:
    """Settings, the mode flags, and the names of the settings typed on the command line.

    ``args.typed`` holds the names of every flag typed, settings and mode flags alike.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    typed = set(vars(build_parser(with_defaults=False).parse_args(argv)))
    args.typed = typed
    names = set(setting_names())
    config = with_settings(Config(), {k: v for k, v in vars(args).items() if k in names})
    return config, args, typed & names


# ------------------------------------------------------------------------------------------------
def pick_device(want_cuda: Optional[bool], threads: int = 0, keep_freed: bool = True, *, vector_obs: bool = False,
                tf32: bool = False, reproducible: bool = False):
    """The torch device to use (``devices.choose_device``: ``want_cuda`` None picks by the kind of
    observation), after setting the CPU thread count (0: torch's default), the float policy
    (``tf32``, ``reproducible``) and, with ``keep_freed``, letting malloc keep freed activations
    for reuse (`perf.keep_freed_memory`)."""
    import torch

    import devices
    from perf import keep_freed_memory

    if keep_freed:
        keep_freed_memory()
    if threads > 0:
        torch.set_num_threads(threads)
    devices.set_float_policy(tf32)
    if reproducible:
        devices.make_reproducible()
    # Under torchrun the fallback line is said once a machine.
    return devices.choose_device(want_cuda, vector_obs, say=shows_errors())


def make_run_dir(config: Config) -> str:
    """A new directory under ``log_dir`` named from env, time and seed; checks it can be written."""
    from utils import UsageError, probe_writable

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


def check_checkpoint_fits(checkpoint: dict[str, Any], path: str, obs_shape: Sequence[int], num_actions: int,
                          env_name: str) -> None:
    """A checkpoint plays only the game (in any of its ids), action set and observations it was trained on."""
    from envs import game_of
    from utils import UsageError

    spec = checkpoint["model_spec"]
    if spec["num_actions"] != num_actions:
        raise UsageError(f"checkpoint {path} was trained on {checkpoint['env_name']} with {spec['num_actions']} "
                         f"actions; {env_name} has {num_actions}")
    if game_of(env_name) != game_of(checkpoint["env_name"]):
        raise UsageError(f"checkpoint {path} was trained on {checkpoint['env_name']}; {env_name} is another game")
    if list(spec["obs_shape"]) != list(obs_shape):
        raise UsageError(f"checkpoint {path} expects observations of shape {tuple(spec['obs_shape'])}, "
                         f"the env gives {tuple(obs_shape)}")


def settings_from_checkpoint(checkpoint: dict[str, Any], path: str, config: Config, typed: set[str],
                             allowed: set[str]) -> Config:
    """The checkpoint's settings, with the typed flags in ``allowed`` applied on top.

    A typed flag outside ``allowed`` must agree with the checkpoint, or it is an error.
    """
    from utils import UsageError

    saved = Config.from_dict(checkpoint["config"])
    changes = {}
    for name in sorted(typed):
        mine, theirs = get_setting(config, name), get_setting(saved, name)
        if name in allowed:
            changes[name] = mine
        elif mine != theirs:
            what = "another architecture" if name in ARCHITECTURE else "other settings"
            raise UsageError(f"checkpoint {path} was saved with {_flag(name)} {_show(theirs)} ({what}); "
                             f"cannot use {_show(mine)}")
    return with_settings(saved, changes)


def with_env_defaults(config: Config, typed: set[str]) -> Config:
    """``config`` with the defaults of its env's family (``config.defaults_for``) for every setting not typed."""
    from envs import check_env_id, is_atari

    check_env_id(config.env_name)
    family = defaults_for(config.env_name, vector=not is_atari(config.env_name), algo=config.algo)
    return with_settings(config, {name: value for name, value in family.items() if name not in typed})


def _flag(name: str) -> str:
    """The flag that sets setting ``name``."""
    if not FLAG_OF:
        build_parser()
    return FLAG_OF[name]


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# ------------------------------------------------------------------------------------------------
def train(config: Config, resume: Optional[str] = None, checkpoint: Optional[dict[str, Any]] = None) -> int:
    """Train from scratch, or continue the run whose a2c_last ``checkpoint`` was read from ``resume``.

    Launched by torchrun, this process is one rank of a data-parallel run (``distributed.py``):
    every rank checks the input alike and refuses bad input before the process group starts; rank
    0 alone makes the run directory and writes into it.
    """
    from torch.utils.tensorboard import SummaryWriter

    import distributed

    from algorithms import algorithm, make_agent
    from envs import action_size, check_env, is_atari, make_vec_env
    from evaluate import PeriodicEvaluator
    from checkpoints import TrainingState, catch_up_bests, restore
    from runner import save_settings
    from normalize import load as load_normalizer, normalized
    from perf import has_fast_bf16
    from randomize import check_randomizable
    from devices import describe
    from utils import UsageError, probe_writable, seed_everything

    context = distributed.context_from_environment()
    algo = algorithm(config.algo)
    if context.world_size > 1 and not algo.data_parallel:
        raise UsageError(f"--algo {config.algo} trains in one process for now: start it with python, not torchrun")
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
        continuous = check_env(config.env_name)
        if not continuous and (config.log_std_init != Config.log_std_init or config.sde):
            flag = "--sde" if config.sde else "--log-std-init"
            raise UsageError(f"{flag} is for continuous actions; {config.env_name}'s are discrete")
        algo.check(config)
        if not is_atari(config.env_name):
            if config.curiosity.enabled:
                raise UsageError(f"--icm works on Atari games only for now, not on {config.env_name}")
        elif config.normalize_obs or config.normalize_reward:
            raise UsageError(f"--normalize-obs and --normalize-reward are for vector observations, not the frames "
                             f"of {config.env_name}")
        elif config.mlp_width != Config.mlp_width:
            raise UsageError(f"--mlp-width is the width of the MLP for vector observations; {config.env_name}'s "
                             f"frames go through the conv encoder (--arch)")
        if config.randomize_domain:
            check_randomizable(config.env_name)
        run_dir = make_run_dir(config) if context.is_main else ""  # the others learn it from rank 0
    device = distributed.place(pick_device(config.cuda, config.threads, config.speed.keep_freed_memory,
                                           vector_obs=not is_atari(config.env_name), tf32=config.speed.tf32,
                                           reproducible=config.reproducible), context)
    if config.speed.bf16 and not has_fast_bf16(device):
        print(f"warning: this {'GPU' if device.type == 'cuda' else 'CPU'} has no bfloat16 arithmetic; --bf16 will "
              f"be slower, not faster", file=sys.stderr)
    seed_everything(config.seed)

    # A resumed run reseeds its envs past the ones it already used, so it does not replay them.
    first_seed = env_seed(config.seed, update=checkpoint["update"] if checkpoint else 0)
    first_seed = distributed.env_seed_of_rank(first_seed, config.num_envs, context)
    envs = make_vec_env(config.env_name, config.num_envs, config.n_stack, first_seed, config.vec_env,
                        config.max_episode_frames, randomize=config.randomize_every if config.randomize_domain else None)
    envs = normalized(envs, config.normalize_obs, config.normalize_reward, config.gamma)
    evaluator = None
    try:
        obs_shape, (num_actions, continuous) = envs.observation_space.shape, action_size(envs.action_space)
        agent = make_agent(config, obs_shape, num_actions, device, continuous=continuous)
        state = TrainingState()
        if checkpoint is not None:
            check_checkpoint_fits(checkpoint, resume, obs_shape, num_actions, config.env_name)
            state = restore(checkpoint, agent, resume)
            load_normalizer(envs, checkpoint)
            catch_up_bests(state, run_dir)
            if state.update >= config.num_updates:
                raise UsageError(f"checkpoint {resume} already ran {state.update} of {config.num_updates} "
                                 f"updates; pass a larger --num-updates to train further")
        # Every input is checked: the ranks meet. The same weights on every rank, and action
        # sampling from a random stream of each rank's own.
        if context.rank > 0:
            seed_everything(distributed.sampling_seed(config.seed, context.rank, state.update))
        distributed.start(context, device)
        distributed.check_same_run(config, state.update, context)
        distributed.broadcast_parameters([agent.model, *([agent.intrinsic] if agent.intrinsic else [])], context)
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
            world = describe_world(config, context, device, checkpoint)
            if world:
                print(world, flush=True)
        if config.eval_interval and context.is_main:  # envs of its own, seeded apart from training, as --eval does
            evaluator = PeriodicEvaluator(config.env_name, config.eval_episodes,
                                          env_seed(config.seed, evaluation=True),
                                          config.n_stack, max_episode_frames=config.max_episode_frames,
                                          vec_env=config.vec_env, obs_stats_from=envs if config.normalize_obs else None)
        runner = algo.runner(agent, envs, config, run_dir, state, writer, evaluator, context=context)
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
    returns = (f"mean return of the last {len(episodes.returns)} episodes: {episodes.mean:.2f}"
               if episodes.returns else "no episode finished yet")
    print(f"{runner.stop_reason + '; ' if runner.stop_reason else ''}{final.step} env steps, "
          f"{final.update} updates, {returns}; checkpoints in {run_dir}", flush=True)
    return 1 if "non-finite" in runner.stop_reason else 0


def describe_world(config: Config, context: Any, device: Any, checkpoint: Optional[dict[str, Any]]) -> str:
    """The line a data-parallel run starts with: processes, envs per rank and in all, the batch of an
    update (and a resume's change of world size). Empty for a plain run of a plain run."""
    trained_by = checkpoint.get("world_size", 1) if checkpoint is not None else context.world_size
    if context.world_size == 1 and trained_by == 1:
        return ""
    total_envs = config.num_envs * context.world_size
    processes = (f"data-parallel: {context.world_size} processes ({'NCCL' if device.type == 'cuda' else 'Gloo'}, "
                 f"{device.type}) x {config.num_envs} envs (--num-envs is per process) = {total_envs} envs"
                 if context.world_size > 1 else f"one process, {total_envs} envs")
    line = (f"{processes}; batch per update {total_envs} x {config.rollout_size} = "
            f"{total_envs * config.rollout_size} env steps")
    if trained_by != context.world_size:
        line += (f"; the run was trained by {trained_by} process(es) with {config.num_envs * trained_by} envs "
                 f"and goes on with {total_envs}")
    return line


def reproducible_line(device: Any, config: Config, world_size: int = 1) -> str:
    """What ``--reproducible`` says it could not make deterministic on ``device``."""
    from devices import nondeterministic_parts
    from envs import is_atari

    parts = nondeterministic_parts(device, arch=config.arch, image_obs=is_atari(config.env_name), world_size=world_size)
    if not parts:
        return f"reproducible: deterministic kernels; every op of this run on the {device.type} has one"
    return "reproducible: deterministic kernels, except " + "; ".join(parts)


def check_algo_flags(config: Config, typed: set[str]) -> None:
    """The flags of one algorithm (GRPO's, PPO's) typed for a run of another are refused, not ignored."""
    from algorithms import check_algorithm_settings

    check_algorithm_settings(config, typed, _flag)


def play(config: Config, typed: set[str], load: str, episodes: int, *, deterministic: bool = False,
         protocol: str = "classic", full_action_space: bool = False, eval_envs: Optional[int] = None,
         json_path: Optional[str] = None, video_dir: Optional[str] = None) -> int:
    """Play ``episodes`` whole games with the agent saved at ``load``; print (and optionally save) raw scores.

    The envs follow the evaluation ``protocol`` (see ``evaluate.make_eval_envs``); a typed
    ``--max-episode-frames`` replaces its cap on a game's length (the training run's cap is not
    inherited). ``eval_envs`` envs (default min(episodes, 8), never more than ``episodes``) play
    in parallel, seeded apart from any training envs.
    """
    from agent import load_model
    from devices import describe
    from envs import action_size, is_atari
    from evaluate import effective_frame_cap, episode_shares, evaluate, make_eval_envs, summarize, write_json
    from checkpoints import load_checkpoint
    from normalize import load as load_normalizer, normalized
    from utils import UsageError, probe_writable, seed_everything

    checkpoint = load_checkpoint(load)
    env_name = config.env_name if "env_name" in typed else checkpoint["env_name"]
    settings = settings_from_checkpoint(checkpoint, load, config, typed - {"env_name"},
                                        allowed=set(typed) - set(ARCHITECTURE))
    if json_path is not None:  # find out before playing, not after
        if not json_path or json_path.endswith(("/", os.sep)) or os.path.isdir(json_path):
            raise UsageError(f"--json needs the path of a file to write, got '{json_path}'")
        try:
            probe_writable(os.path.dirname(os.path.abspath(json_path)))
        except OSError as exc:
            raise UsageError(f"cannot write --json file '{json_path}': {exc.strerror or exc}") from None
    max_frames = config.max_episode_frames if "max_episode_frames" in typed else None
    num_envs = min(eval_envs or 8, episodes)
    seed = env_seed(config.seed, evaluation=True)
    device = pick_device(config.cuda, config.threads, settings.speed.keep_freed_memory, vector_obs=not is_atari(env_name),
                         tf32=settings.speed.tf32, reproducible=config.reproducible)
    print(describe(device, tf32=settings.speed.tf32, bf16=settings.speed.bf16), flush=True)
    seed_everything(config.seed)
    # The env path the agent was trained on (its preprocessing), unless --vec-env is typed.
    envs = make_eval_envs(env_name, num_envs, seed, protocol, settings.n_stack, full_action_space, video_dir,
                          episode_shares(episodes, num_envs), max_frames, vec_env=settings.vec_env)
    # The observation statistics the agent was saved with, frozen.
    envs = normalized(envs, settings.normalize_obs, False, training=False)
    load_normalizer(envs, checkpoint)
    try:
        num_actions, _ = action_size(envs.action_space)
        if full_action_space and checkpoint["model_spec"]["num_actions"] != num_actions:
            raise UsageError(f"checkpoint {load} has {checkpoint['model_spec']['num_actions']} actions (the action set "
                             f"it was trained on); {env_name} with --full-action-space has {num_actions}")
        check_checkpoint_fits(checkpoint, load, envs.observation_space.shape, num_actions, env_name)
        # The run's precision and encoder passes, unless --(no-)bf16 or --encoder-chunk is typed.
        model = load_model(load, device, bf16=settings.speed.bf16, encoder_chunk=settings.speed.encoder_chunk)
        result = evaluate(model, envs, episodes, deterministic)
    finally:
        envs.close()
    print("scores: " + " ".join(f"{s:g}" for s in result.scores))
    print(summarize(result))
    if json_path is not None:
        write_json({"checkpoint": os.path.abspath(load), "checkpoint_step": checkpoint.get("step"),
                    "env_name": env_name, "protocol": protocol, "deterministic": bool(deterministic),
                    "full_action_space": bool(full_action_space),
                    "max_episode_frames": effective_frame_cap(env_name, protocol, max_frames),
                    "eval_envs": num_envs, "seed": seed,
                    "vec_env": ("dummy" if is_atari(env_name) else "sync") if video_dir else settings.vec_env,
                    "video_dir": os.path.abspath(video_dir) if video_dir else None, **result.to_dict()}, json_path)
    return 0


def play_grid(config: Config, typed: set[str], load: str, episodes: int, *, deterministic: bool = False,
              json_path: Optional[str] = None, out: Optional[str] = None, eval_envs: Optional[int] = None) -> int:
    """Play the agent saved at ``load`` over its env's grid of physics (``physics_grid.py``); write
    the table (JSON) and the heat map (PNG), by default beside the checkpoint."""
    from agent import load_model
    from checkpoints import load_checkpoint
    from evaluate import write_json
    from devices import describe
    from physics_grid import draw_heatmaps, evaluate_grid
    from randomize import check_randomizable
    from utils import UsageError, probe_writable, seed_everything

    checkpoint = load_checkpoint(load)
    env_name = checkpoint["env_name"]
    check_randomizable(env_name, "--physics-grid")
    settings = settings_from_checkpoint(checkpoint, load, config, typed, allowed=set(typed) - set(ARCHITECTURE))
    json_path = json_path or f"{load}_physics_grid.json"
    out = out or f"{load}_physics_grid.png"
    for path in (json_path, out):
        try:
            probe_writable(os.path.dirname(os.path.abspath(path)))
        except OSError as exc:
            raise UsageError(f"cannot write '{path}': {exc.strerror or exc}") from None
    device = pick_device(config.cuda, config.threads, settings.speed.keep_freed_memory, vector_obs=True,
                         tf32=settings.speed.tf32, reproducible=config.reproducible)
    print(describe(device, tf32=settings.speed.tf32), flush=True)
    seed_everything(config.seed)
    model = load_model(load, device)
    max_steps = config.max_episode_frames if "max_episode_frames" in typed else None
    grid = evaluate_grid(model, env_name, episodes, env_seed(config.seed, evaluation=True), checkpoint=checkpoint,
                         normalize_obs=settings.normalize_obs, deterministic=deterministic, num_envs=eval_envs,
                         max_episode_steps=max_steps)
    grid["checkpoint"] = os.path.abspath(load)
    write_json(grid, json_path)
    draw_heatmaps([grid], [f"{env_name}: {os.path.basename(load)}, {episodes} episodes a cell"], out)
    worst = min(grid["cells"], key=lambda cell: cell["mean"])
    best = max(grid["cells"], key=lambda cell: cell["mean"])
    print(f"{len(grid['cells'])} cells: mean return {sum(c['mean'] for c in grid['cells']) / len(grid['cells']):.2f}; "
          f"worst {worst['mean']:.2f}, best {best['mean']:.2f}; wrote {json_path}, {out}")
    return 0


def plot(run_dirs: list[str], out: str) -> int:
    """Draw the runs' TensorBoard curves side by side into ``out``."""
    from plots import plot_runs
    from utils import UsageError

    try:
        panels = plot_runs(run_dirs, out)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}: {', '.join(panels)} of {len(run_dirs)} run(s)")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    config, args, typed = parse_args(argv)
    from utils import UsageError

    try:
        if (args.plot or args.eval) and "WORLD_SIZE" in os.environ and os.environ["WORLD_SIZE"] != "1":
            raise UsageError(f"--{'plot' if args.plot else 'eval'} runs in one process: start it with python, "
                             f"not torchrun")
        if args.plot:
            return plot(args.plot, args.out)
        if "out" in args.typed and not (args.eval and args.physics_grid):
            raise UsageError("--out is for --plot RUN_DIR [RUN_DIR ...] and --eval --physics-grid")
        if args.eval:
            if args.load is None:
                raise UsageError("--eval needs --load PATH (a checkpoint to play)")
            if args.physics_grid:
                return play_grid(config, typed, args.load, args.episodes, deterministic=args.deterministic,
                                 json_path=args.json, out=args.out if "out" in args.typed else None,
                                 eval_envs=args.eval_envs)
            return play(config, typed, args.load, args.episodes, deterministic=args.deterministic,
                        protocol=args.protocol, full_action_space=args.full_action_space, eval_envs=args.eval_envs,
                        json_path=args.json, video_dir=args.video)
        if args.load is not None:
            raise UsageError("--load is for --eval; to continue training use --resume PATH")
        typed_eval = [name for name in EVAL_ONLY if name in args.typed]
        if typed_eval:
            flag = "--deterministic/--stochastic" if typed_eval[0] == "deterministic" else \
                f"--{typed_eval[0].replace('_', '-')}"
            raise UsageError(f"{flag} is for --eval (with --load PATH)")
        if args.resume is not None:
            from checkpoints import load_checkpoint

            checkpoint = load_checkpoint(args.resume)
            from algorithms import fixed_on_resume

            saved_algo = Config.from_dict(checkpoint["config"]).algo
            fixed = RESUME_FIXED | fixed_on_resume(saved_algo)
            config = settings_from_checkpoint(checkpoint, args.resume, config, typed, typed - fixed)
            # The device is this process's choice, not the run's: what is typed now, else the default.
            config = with_settings(config, {"cuda": get_setting(config, "cuda") if "cuda" in typed else None})
            check_algo_flags(config, typed)
            return train(config, args.resume, checkpoint)
        check_algo_flags(config, typed)
        return train(with_env_defaults(config, typed))
    except UsageError as exc:
        # Under torchrun every rank checks the same input: one line a machine, unless only this rank saw it.
        if shows_errors() or getattr(exc, "every_rank", False):
            print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before training started (once it has, Ctrl+C stops it cleanly)
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
