"""Command line: train a recurrent A2C agent on an Atari game, resume a run, or play a saved agent.

    python main.py --env-name PongNoFrameskip-v4 --cuda         train
    python main.py --resume runs/RUN/a2c_last                   continue a run
    python main.py --eval --load runs/RUN/a2c_best_reward       play saved agent, print scores
    python main.py --plot runs/RUN_A runs/RUN_B --out runs.png  compare runs' curves

Every setting's flag is made from its declaration (``config.setting``: default, help, flag; an
algorithm's in its own file); this file adds the flags of the modes (resume, evaluation, plots)
and dispatches. ``docs/flags.md`` is :func:`flags_page`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional, Sequence

from config import (
    ALGORITHM_BLOCKS,
    Config,
    field_doc,
    flag_names,
    flag_of,
    get_setting,
    is_switch,
    parse_seed,  # noqa: F401  (the seed's parser, for scripts that read seeds as --seed does)
    positive_int,
    setting_field,
    setting_names,
    with_settings,
)

# Flags of --eval only: given without --eval they are refused rather than silently ignored.
EVAL_ONLY = (
    "episodes",
    "deterministic",
    "protocol",
    "full_action_space",
    "eval_envs",
    "json",
    "video",
    "physics_grid",
    "robustness",
)

# The flags of the modes, not settings (names, argparse's keywords): resume, evaluation and plots.
MODE_FLAGS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (
        ("--resume",),
        dict(metavar="PATH", default=None, help="continue training from an a2c_last checkpoint, in its run directory"),
    ),
    (
        ("--eval",),
        dict(
            action="store_true",
            default=False,
            help="play a saved agent (--load) and print its raw scores instead of training",
        ),
    ),
    (
        ("--load",),
        dict(
            metavar="PATH",
            default=None,
            help="checkpoint to play with --eval (a2c_best_reward, a2c_best_eval, a2c_best_loss or a2c_last)",
        ),
    ),
    (("--episodes",), dict(type=positive_int, default=10, metavar="N", help="episodes to play with --eval")),
    (
        ("--deterministic",),
        dict(
            dest="deterministic",
            action="store_true",
            default=False,
            help="with --eval, take the most probable action (argmax) instead of sampling one",
        ),
    ),
    (
        ("--stochastic",),
        dict(
            dest="deterministic",
            action="store_false",
            default=argparse.SUPPRESS,
            help="with --eval, sample actions from the policy, as in training (the default)",
        ),
    ),
    (
        ("--protocol",),
        dict(
            choices=["classic", "machado"],
            default="classic",
            help="with --eval: 'classic' (NoFrameskip-v4: up to 30 no-op starts, no sticky actions) "
            "or 'machado' (Machado et al. 2018: sticky actions 0.25, no no-op starts, games "
            "capped at 108,000 frames)",
        ),
    ),
    (
        ("--full-action-space",),
        dict(
            action=argparse.BooleanOptionalAction,
            default=False,
            help="with --eval --protocol machado, play with all 18 Atari actions (the network must have 18)",
        ),
    ),
    (
        ("--eval-envs",),
        dict(
            type=positive_int,
            default=None,
            metavar="N",
            help="envs played in parallel with --eval; none given: min(episodes, 8)",
        ),
    ),
    (
        ("--json",),
        dict(metavar="PATH", default=None, help="with --eval, write the scores and statistics to this JSON file"),
    ),
    (
        ("--video",),
        dict(metavar="DIR", default=None, help="with --eval, record each game's screen as an .mp4 into this directory"),
    ),
    (
        ("--physics-grid",),
        dict(
            action="store_true",
            default=False,
            help="with --eval, play --episodes episodes in every cell of a grid of physics "
            "(LunarLander: gravity x wind power; CartPole: gravity x pole length) and write "
            "the mean returns as a table (--json, default CHECKPOINT_physics_grid.json) and "
            "a heat map (--out, default CHECKPOINT_physics_grid.png)",
        ),
    ),
    (
        ("--robustness",),
        dict(
            action="store_true",
            default=False,
            help="with --eval, play --episodes games of an Atari agent in every cell of sticky "
            "actions (0, 0.05, 0.1, 0.25, 0.5) x no-op starts (none, up to 30), print the table "
            "and write it as JSON (--json, default CHECKPOINT_robustness.json) and a curve of "
            "score against stickiness (--out, default CHECKPOINT_robustness.png)",
        ),
    ),
    (
        ("--plot",),
        dict(
            nargs="+",
            metavar="RUN_DIR",
            default=None,
            help="instead of training, draw the curves of these runs (return, entropy, losses, explained "
            "variance, gradient norm against env steps) into one image (--out); given the JSON files "
            "of --eval --robustness, their agents' robustness curves; given those of --eval --json (one agent a "
            "seed), the mean over the agents with its 95 percent bootstrap interval and IQM, and their scores",
        ),
    ),
    (
        ("--out",),
        dict(metavar="FILE.png", default="plot.png", help="image written by --plot (or by --eval --physics-grid)"),
    ),
]


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line on stderr, exit code 2
        self.exit(2, f"error: {message} (see --help)\n" if shows_errors() else None)


def shows_errors() -> bool:
    """Whether this process prints bad input: under torchrun every rank checks the same input, and
    the first process of each machine (``LOCAL_RANK`` 0) says what is wrong, once."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def build_parser(with_defaults: bool = True) -> argparse.ArgumentParser:
    """The command line: a flag for every setting (each algorithm's block in a group of its own), and
    the mode flags. ``with_defaults=False`` gives a parser whose result holds only the flags typed."""
    import algorithms  # noqa: F401  (the registry: it adds each algorithm's block of settings)

    p = OneLineParser(
        description="Recurrent advantage actor-critic (A2C) for Atari games and gymnasium envs with "
        "vector observations; PPO and GRPO with --algo.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        argument_default=None,
    )
    defaults = Config()
    groups = {
        name: p.add_argument_group("with --algo " + " or ".join(block_readers(name))) for name in ALGORITHM_BLOCKS
    }
    for name in setting_names():
        _add_flag(
            groups.get(name.partition(".")[0], p),
            name,
            get_setting(defaults, name) if with_defaults else argparse.SUPPRESS,
        )

    mode = p.add_argument_group("resume and evaluation")
    policy = mode.add_mutually_exclusive_group()  # --deterministic or --stochastic
    for names, spec in MODE_FLAGS:
        spec = dict(spec)
        default = spec.pop("default")
        group = policy if spec.get("dest") == "deterministic" else mode
        group.add_argument(*names, default=default if with_defaults else argparse.SUPPRESS, **spec)
    return p


def _add_flag(group: Any, name: str, default: Any) -> None:
    """Setting ``name``'s flag, as its field declares it (``config.setting``)."""
    spec = setting_field(name).metadata
    names = flag_names(name)
    kwargs: dict[str, Any] = {"dest": name, "default": default, "help": help_of(name)}
    if is_switch(name):
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs.update({key: spec[key] for key in ("metavar", "choices") if spec.get(key) is not None})
        if spec.get("parse") is not None:
            kwargs["type"] = spec["parse"]
        if spec.get("const") is not None:
            kwargs.update(nargs="?", const=spec["const"])
    group.add_argument(*names, **kwargs)
    if spec.get("off"):
        group.add_argument(
            "--no-" + names[0][2:],
            dest=name,
            action="store_const",
            const=setting_field(name).default,
            default=argparse.SUPPRESS,
            help=spec["off"],
        )


def help_of(name: str) -> str:
    """Setting ``name``'s help text, saying which algorithms read it where only some do."""
    from algorithms import owners

    readers = owners(name)
    return field_doc(name) + (f" (with --algo {' or '.join(readers)})" if readers else "")


def block_readers(block: str) -> list[str]:
    """The algorithms that read any setting of an algorithm's ``block``."""
    from algorithms import ALGORITHMS

    return [
        name
        for name, algorithm in ALGORITHMS.items()
        if any(setting.partition(".")[0] == block for setting in algorithm.settings)
    ]


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
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Read the flags, then train (training.py), play a saved agent (play.py) or draw runs (plots.py)."""
    config, args, typed = parse_args(argv)
    from utils import UsageError

    try:
        if (args.plot or args.eval) and "WORLD_SIZE" in os.environ and os.environ["WORLD_SIZE"] != "1":
            raise UsageError(
                f"--{'plot' if args.plot else 'eval'} runs in one process: start it with python, not torchrun"
            )
        if args.plot and any(path.endswith(".json") for path in args.plot):
            from robustness import is_robustness_json, plot_robustness
            from seed_summary import summarize_command

            if is_robustness_json(args.plot[0]):
                return plot_robustness(args.plot, args.out)
            return summarize_command(args.plot, args.out)
        if args.plot:
            from plots import plot_command

            return plot_command(args.plot, args.out)
        if "out" in args.typed and not (args.eval and (args.physics_grid or args.robustness)):
            raise UsageError("--out is for --plot RUN_DIR [RUN_DIR ...], --eval --physics-grid and --eval --robustness")
        if args.eval and args.physics_grid and args.robustness:
            raise UsageError("--physics-grid (control envs) and --robustness (Atari games) are two grids: pick one")
        if args.eval:
            from play import play_command

            return play_command(config, args, typed, flag_of)
        if args.load is not None:
            raise UsageError("--load is for --eval; to continue training use --resume PATH")
        typed_eval = [name for name in EVAL_ONLY if name in args.typed]
        if typed_eval:
            flag = (
                "--deterministic/--stochastic"
                if typed_eval[0] == "deterministic"
                else f"--{typed_eval[0].replace('_', '-')}"
            )
            raise UsageError(f"{flag} is for --eval (with --load PATH)")
        from algorithms import check_algorithm_settings, fixed_on_resume
        from training import train

        if args.resume is not None:
            from checkpoints import RESUME_FIXED, load_checkpoint, settings_from_checkpoint

            checkpoint = load_checkpoint(args.resume)
            fixed = RESUME_FIXED | fixed_on_resume(Config.from_dict(checkpoint["config"]).algo)
            config = settings_from_checkpoint(checkpoint, args.resume, config, typed, typed - fixed, flag_of)
            # The device is this process's choice, not the run's: what is typed now, else the default.
            config = with_settings(config, {"cuda": get_setting(config, "cuda") if "cuda" in typed else None})
            check_algorithm_settings(config, typed, flag_of)
            return train(config, args.resume, checkpoint)
        check_algorithm_settings(config, typed, flag_of)
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


# ------------------------------------------------------------------------------------------------
def flags_page() -> str:
    """``docs/flags.md``: every flag, its default and its help, made from the settings' declarations,
    the parser and the defaults of each env family and algorithm; a test compares the file with it.
    Written by ``python -c "import main; print(main.flags_page(), end='')" > docs/flags.md``."""
    from algorithms import ALGORITHMS
    from checkpoints import RESUME_FIXED

    fixed = RESUME_FIXED | {name for algorithm in ALGORITHMS.values() for name in algorithm.fixed}
    lines = [
        "# Every flag",
        "",
        "`python main.py --help` lists them with their defaults; this page is made from the same declarations "
        "(`main.flags_page`). A setting marked *fixed for a run* keeps, when the run is resumed, the value it "
        "was trained with; the defaults of env families and algorithms other than A2C on Atari games are in "
        "[Default settings](#default-settings).",
        "",
    ]
    for title, block in (("Settings", ""), *((f"Settings {_readers(name)}", name) for name in ALGORITHM_BLOCKS)):
        lines += [f"## {title}", "", "| flag | default | meaning |", "|---|---|---|"]
        for name in setting_names():
            if name.partition(".")[0] == block or (not block and name.partition(".")[0] not in ALGORITHM_BLOCKS):
                meaning = _cell(help_of(name) + (" (fixed for a run)" if name in fixed else ""))
                lines.append(f"| {_flag_cell(name)} | {_value(setting_field(name).default)} | {meaning} |")
        lines.append("")
    lines += ["## Resume, evaluation and plots", "", "| flag | default | meaning |", "|---|---|---|"]
    for names, spec in MODE_FLAGS:
        typed = " / ".join(f"`{name}{_argument(spec)}`" for name in names)
        if spec.get("action") is argparse.BooleanOptionalAction:
            typed += f" / `--no-{names[0][2:]}`"
        lines.append(f"| {typed} | {_value(spec['default'])} | {_cell(spec['help'])} |")
    return "\n".join(lines + [""] + _default_settings()) + "\n"


def _default_settings() -> list[str]:
    """The section of ``flags_page`` that lists each env family's and algorithm's defaults, as flags."""
    from algorithms import ALGORITHMS
    from envs import ENV_DEFAULTS, FAMILIES
    from recipes import defaults_for
    from utils import UsageError

    lines = [
        "## Default settings",
        "",
        "The defaults above are those of A2C on Atari games. A new run of another env or algorithm starts "
        "from these flags instead (a vector-observation env's id has its family's, then its own), and every "
        "typed flag wins; a run's `config.json` holds what it ran with.",
        "",
        "| `--algo` | env | its defaults |",
        "|---|---|---|",
    ]
    for algo, algorithm in ALGORITHMS.items():
        atari = defaults_for(Config.env_name, algo)
        try:
            algorithm.check(with_settings(Config(algo=algo), atari))
            lines.append(f"| {algo} | Atari games | {_as_flags(atari, {}) or 'the defaults above'} |")
        except UsageError:  # it trains on vector-observation envs only
            pass
        family = defaults_for("", algo, FAMILIES["vector"])
        lines.append(f"| {algo} | vector envs | {_as_flags(family, {})} |")
        for env_name in ENV_DEFAULTS:
            own = _as_flags(defaults_for(env_name, algo), family)
            if own:
                lines.append(f"| {algo} | {env_name} | {own} |")
    for algo, algorithm in ALGORITHMS.items():
        if algorithm.fit is not None:
            lines += [
                "",
                f"`--algo {algo}` fits settings to the others where they are not typed: "
                + " ".join((algorithm.fit.__doc__ or "").split()),
            ]
    return lines


def _as_flags(values: dict[str, Any], under: dict[str, Any]) -> str:
    """``values`` (by setting name) as the flags that type them, those that ``under`` gives alike left out."""
    defaults = Config()
    flags = []
    for name in setting_names():
        if name in values and values[name] != under.get(name, get_setting(defaults, name)):
            value = values[name]
            flag = flag_of(name)
            flags.append(f"`{flag if value else '--no-' + flag[2:]}`" if is_switch(name) else f"`{flag} {value}`")
    return " ".join(flags)


def _readers(block: str) -> str:
    return "of `--algo " + "` or `".join(block_readers(block)) + "`"


def _flag_cell(name: str) -> str:
    """The flag of setting ``name`` as typed: with what it takes, its ``--no-`` form and its aliases."""
    names, spec = flag_names(name), dict(setting_field(name).metadata)
    if is_switch(name):
        spec["action"] = argparse.BooleanOptionalAction
    elif spec.get("const") is not None:
        spec["nargs"] = "?"
    if not spec.get("metavar") and not spec.get("choices"):
        spec["metavar"] = name.rpartition(".")[2].upper()
    cells = [f"`{names[0]}{_argument(spec)}`"]
    if is_switch(name) or spec.get("off"):
        cells.append(f"`--no-{names[0][2:]}`")
    return " / ".join(cells) + "".join(f" (also `{alias}`)" for alias in names[1:])


def _argument(spec: dict[str, Any]) -> str:
    """What a flag of argparse keywords ``spec`` takes after it, as ``--help`` writes it (`` N``,
    `` {a,b}``, `` [{a,b}]``), or nothing."""
    if spec.get("action") in ("store_true", "store_false", argparse.BooleanOptionalAction):
        return ""
    text = spec.get("metavar") or "{" + ",".join(spec["choices"]) + "}"
    return {"?": f" [{text}]", "+": f" {text} [{text} ...]"}.get(spec.get("nargs"), f" {text}")


def _value(value: Any) -> str:
    if value == argparse.SUPPRESS:
        return ""
    if value is None or value == "":
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return _cell(str(value))


def _cell(text: str) -> str:
    """``text`` as a markdown table cell: its pipes and asterisks kept as they are."""
    return text.replace("|", "\\|").replace("*", "\\*")


if __name__ == "__main__":
    sys.exit(main())
