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
from typing import Any, Optional, Sequence

from config import OPTIMIZERS, RANDOMIZE_DOMAIN, RANDOMIZE_EVERY, Config, field_doc, get_setting, setting_names, with_settings
from recipes import PRESETS
from seeds import SEED_LIMIT

FLAG_OF: dict[str, str] = {}  # setting name -> the flag that sets it (filled by build_parser)
# Flags of --eval only: given without --eval they are refused rather than silently ignored.
EVAL_ONLY = ("episodes", "deterministic", "protocol", "full_action_space", "eval_envs", "json", "video", "physics_grid",
             "robustness")


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
    flag("--preset", field="preset", choices=list(PRESETS))
    flag("--num-envs", field="num_envs", type=positive_int, metavar="N")
    flag("--n-stack", field="n_stack", type=positive_int, metavar="N")
    flag("--frame-size", field="frame_size", type=positive_int, metavar="PIXELS")
    flag("--vec-env", field="vec_env", choices=["ale", "dummy", "subproc", "sync", "async"])
    flag("--max-episode-frames", field="max_episode_frames", type=positive_int, metavar="N")
    flag("--sticky-actions", field="sticky_actions", type=_probability_below_one, metavar="P")
    flag("--randomize-domain", field="randomize_domain", nargs="?", const="uniform", choices=list(RANDOMIZE_DOMAIN))
    p.add_argument("--no-randomize-domain", dest="randomize_domain", action="store_const", const="",
                   default=argparse.SUPPRESS, help="the default physics (undoes --randomize-domain)")
    flag("--randomize-every", field="randomize_every", choices=list(RANDOMIZE_EVERY))
    flag("--physics", field="physics", metavar="NAME=X[,NAME=X]")
    flag("--adr-low", field="adr.low", type=_finite, metavar="RETURN")
    flag("--adr-high", field="adr.high", type=_finite, metavar="RETURN")
    flag("--adr-step", field="adr.step", type=_unit_interval, metavar="SHARE")
    flag("--adr-episodes", field="adr.episodes", type=positive_int, metavar="N")
    flag("--adr-boundary-prob", field="adr.boundary_prob", type=_unit_interval, metavar="P")
    flag("--obs-history", field="obs_history", type=positive_int, metavar="K")
    switch("--prev-action-reward", "prev_action_reward")
    switch("--normalize-obs", "normalize_obs")
    switch("--normalize-reward", "normalize_reward")
    flag("--seed", field="seed", type=parse_seed)
    flag("--arch", field="arch", metavar="NAME")
    switch("--recurrent", "recurrent")
    flag("--hidden-size", field="hidden_size", type=positive_int, metavar="N")
    flag("--conv-filters", field="conv_filters", type=positive_int, metavar="N")
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
    flag("--kl-coeff", field="group.kl_coeff", type=non_negative, metavar="C")
    flag("--ref-interval", field="group.ref_interval", type=positive_int, metavar="N")
    flag("--epochs", field="clip.epochs", type=positive_int, metavar="N")
    flag("--minibatches", field="clip.minibatches", type=positive_int, metavar="N")
    flag("--clip-eps", field="clip.eps", type=positive_float, metavar="EPS")
    flag("--sequence-length", field="clip.sequence_length", type=positive_int, metavar="L")
    flag("--rollout-size", field="rollout_size", type=positive_int, metavar="T")
    flag("--num-updates", field="num_updates", type=positive_int, metavar="N")
    flag("--max-env-steps", field="max_env_steps", type=positive_int, metavar="N")
    flag("--gamma", field="gamma", type=unit)
    flag("--gae-lambda", field="gae_lambda", type=unit)
    switch("--normalize-advantages", "normalize_advantages")
    switch("--critic", "critic")
    flag("--value-coeff", field="value_coeff", type=non_negative)
    flag("--entropy-coeff", field="entropy_coeff", type=non_negative)
    flag("--entropy-schedule", field="entropy_schedule", choices=["constant", "linear"])
    flag("--entropy-decay-start", field="entropy_decay_start", type=unit, metavar="SHARE")
    flag("--max-grad-norm", "--max-grad_norm", field="max_grad_norm", type=positive_float)
    flag("--optimizer", field="optimizer", choices=list(OPTIMIZERS))
    flag("--lr", field="lr", type=positive_float)
    flag("--lr-schedule", field="lr_schedule", choices=["constant", "linear"])
    flag("--lr-decay-start", field="lr_decay_start", type=unit, metavar="SHARE")
    flag("--lr-decay-from", field="lr_decay_from", type=unit, metavar="SHARE")
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

    def in_group(group: Any) -> Any:
        def add(*names: str, default: Any, **kwargs: Any) -> None:  # a mode flag, not a setting
            group.add_argument(*names, default=default if with_defaults else argparse.SUPPRESS, **kwargs)
        return add

    mode = p.add_argument_group("resume and evaluation")
    mode_flag = in_group(mode)
    mode_flag("--resume", metavar="PATH", default=None,
              help="continue training from an a2c_last checkpoint, in its run directory")
    mode_flag("--eval", action="store_true", default=False,
              help="play a saved agent (--load) and print its raw scores instead of training")
    mode_flag("--load", metavar="PATH", default=None,
              help="checkpoint to play with --eval (a2c_best_reward, a2c_best_eval, a2c_best_loss or a2c_last)")
    mode_flag("--episodes", type=positive_int, default=10, metavar="N", help="episodes to play with --eval")
    policy = in_group(mode.add_mutually_exclusive_group())
    policy("--deterministic", dest="deterministic", action="store_true", default=False,
           help="with --eval, take the most probable action (argmax) instead of sampling one")
    policy("--stochastic", dest="deterministic", action="store_false", default=argparse.SUPPRESS,
           help="with --eval, sample actions from the policy, as in training (the default)")
    mode_flag("--protocol", choices=["classic", "machado"], default="classic",
              help="with --eval: 'classic' (NoFrameskip-v4: up to 30 no-op starts, no sticky actions) or "
                   "'machado' (Machado et al. 2018: sticky actions 0.25, no no-op starts, games capped at "
                   "108,000 frames)")
    mode_flag("--full-action-space", action=argparse.BooleanOptionalAction, default=False,
              help="with --eval --protocol machado, play with all 18 Atari actions (the network must have 18)")
    mode_flag("--eval-envs", type=positive_int, default=None, metavar="N",
              help="envs played in parallel with --eval; none given: min(episodes, 8)")
    mode_flag("--json", metavar="PATH", default=None,
              help="with --eval, write the scores and statistics to this JSON file")
    mode_flag("--video", metavar="DIR", default=None,
              help="with --eval, record each game's screen as an .mp4 into this directory")
    mode_flag("--physics-grid", action="store_true", default=False,
              help="with --eval, play --episodes episodes in every cell of a grid of physics (LunarLander: "
                   "gravity x wind power; CartPole: gravity x pole length) and write the mean returns as a "
                   "table (--json, default CHECKPOINT_physics_grid.json) and a heat map (--out, default "
                   "CHECKPOINT_physics_grid.png)")
    mode_flag("--robustness", action="store_true", default=False,
              help="with --eval, play --episodes games of an Atari agent in every cell of sticky actions (0, "
                   "0.05, 0.1, 0.25, 0.5) x no-op starts (none, up to 30), print the table and write it as JSON "
                   "(--json, default CHECKPOINT_robustness.json) and a curve of score against stickiness (--out, "
                   "default CHECKPOINT_robustness.png)")
    mode_flag("--plot", nargs="+", metavar="RUN_DIR", default=None,
              help="instead of training, draw the curves of these runs (return, entropy, losses, explained "
                   "variance, gradient norm against env steps) into one image (--out); given the JSON files of "
                   "--eval --robustness, their agents' robustness curves")
    mode_flag("--out", metavar="FILE.png", default="plot.png",
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


def _probability_below_one(text: str) -> float:
    """A probability in [0, 1) (argparse type): at 1 the emulator would repeat its first action for ever."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got '{text}'")
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
def _flag(name: str) -> str:
    """The flag that sets setting ``name``."""
    if not FLAG_OF:
        build_parser()
    return FLAG_OF[name]


# ------------------------------------------------------------------------------------------------
def check_algo_flags(config: Config, typed: set[str]) -> None:
    """The flags of one algorithm (GRPO's, PPO's) typed for a run of another are refused, not ignored."""
    from algorithms import check_algorithm_settings

    check_algorithm_settings(config, typed, _flag)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Read the flags, then train (training.py), play a saved agent (play.py) or draw runs (plots.py)."""
    config, args, typed = parse_args(argv)
    from utils import UsageError

    try:
        if (args.plot or args.eval) and "WORLD_SIZE" in os.environ and os.environ["WORLD_SIZE"] != "1":
            raise UsageError(f"--{'plot' if args.plot else 'eval'} runs in one process: start it with python, "
                             f"not torchrun")
        if args.plot and any(path.endswith(".json") for path in args.plot):
            from robustness import plot_robustness

            return plot_robustness(args.plot, args.out)
        if args.plot:
            from plots import plot_command

            return plot_command(args.plot, args.out)
        if "out" in args.typed and not (args.eval and (args.physics_grid or args.robustness)):
            raise UsageError("--out is for --plot RUN_DIR [RUN_DIR ...], --eval --physics-grid and --eval --robustness")
        if args.eval and args.physics_grid and args.robustness:
            raise UsageError("--physics-grid (control envs) and --robustness (Atari games) are two grids: pick one")
        if args.eval:
            from play import play_command

            return play_command(config, args, typed, _flag)
        if args.load is not None:
            raise UsageError("--load is for --eval; to continue training use --resume PATH")
        typed_eval = [name for name in EVAL_ONLY if name in args.typed]
        if typed_eval:
            flag = "--deterministic/--stochastic" if typed_eval[0] == "deterministic" else \
                f"--{typed_eval[0].replace('_', '-')}"
            raise UsageError(f"{flag} is for --eval (with --load PATH)")
        from training import train

        if args.resume is not None:
            from algorithms import fixed_on_resume
            from checkpoints import RESUME_FIXED, load_checkpoint, settings_from_checkpoint

            checkpoint = load_checkpoint(args.resume)
            fixed = RESUME_FIXED | fixed_on_resume(Config.from_dict(checkpoint["config"]).algo)
            config = settings_from_checkpoint(checkpoint, args.resume, config, typed, typed - fixed, _flag)
            # The device is this process's choice, not the run's: what is typed now, else the default.
            config = with_settings(config, {"cuda": get_setting(config, "cuda") if "cuda" in typed else None})
            check_algo_flags(config, typed)
            return train(config, args.resume, checkpoint)
        check_algo_flags(config, typed)
        from recipes import with_env_defaults

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
