"""Playing a saved agent (``python main.py --eval --load CHECKPOINT``): whole games under an
evaluation protocol, or every cell of a grid of physics; main.py has read the flags and the
checkpoint's settings."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Optional, Union

import robustness
from agent import load_model
from checkpoints import ARCHITECTURE, check_checkpoint_fits, load_checkpoint, settings_from_checkpoint
from config import Config
from devices import describe, pick_device
from envs import (
    PROTOCOL_SETTINGS,
    Protocol,
    action_size,
    check_sticky_actions,
    effective_frame_cap,
    family_of,
    make_eval_envs,
)
from evaluate import episode_shares, evaluate, summarize, write_json
from normalize import load as load_normalizer
from normalize import normalized
from physics_grid import draw_heatmaps, evaluate_grid, region_means
from randomize import check_randomizable
from seeds import env_seed, seed_everything
from utils import UsageError, probe_writable


def play_command(config: Config, args: Any, typed: set[str], flag: Callable[[str], str]) -> int:
    """``--eval``: the checkpoint's settings with the typed flags that do not change the network on
    top (``flag`` names a setting's flag), then its games, or its physics grid."""
    if args.load is None:
        raise UsageError("--eval needs --load PATH (a checkpoint to play)")
    checkpoint = load_checkpoint(args.load)
    allowed = typed - set(ARCHITECTURE)
    max_frames = config.max_episode_frames if "max_episode_frames" in typed else None
    if args.robustness or args.physics_grid:
        settings = settings_from_checkpoint(checkpoint, args.load, config, typed, allowed, flag)
        play_cells = play_robustness if args.robustness else play_grid
        return play_cells(
            config,
            settings,
            checkpoint,
            args.load,
            args.episodes,
            max_frames=max_frames,
            deterministic=args.deterministic,
            json_path=args.json,
            out=args.out if "out" in args.typed else None,
            eval_envs=args.eval_envs,
        )
    # Another id of the same game may be typed: the checkpoint says which game, check_checkpoint_fits checks.
    settings = settings_from_checkpoint(checkpoint, args.load, config, typed - {"env_name"}, allowed, flag)
    return play(
        config,
        settings,
        checkpoint,
        args.load,
        args.episodes,
        env_name=config.env_name if "env_name" in typed else None,
        max_frames=max_frames,
        deterministic=args.deterministic,
        protocol=args.protocol,
        sticky_actions=config.sticky_actions if "sticky_actions" in typed else None,
        full_action_space=args.full_action_space,
        eval_envs=args.eval_envs,
        json_path=args.json,
        video_dir=args.video,
    )


def play(
    config: Config,
    settings: Config,
    checkpoint: dict[str, Any],
    load: str,
    episodes: int,
    *,
    env_name: Optional[str] = None,
    max_frames: Optional[int] = None,
    deterministic: bool = False,
    protocol: str = "classic",
    sticky_actions: Optional[float] = None,
    full_action_space: bool = False,
    eval_envs: Optional[int] = None,
    json_path: Optional[str] = None,
    video_dir: Optional[str] = None,
) -> int:
    """Play ``episodes`` whole games with the agent saved at ``load``; print (and optionally save) raw scores.

    ``config`` holds the flags of this command, ``settings`` the run's own with the flags allowed on
    top (``checkpoints.settings_from_checkpoint``), ``checkpoint`` the file read from ``load``. ``env_name``
    plays another id of the same game. The envs follow the evaluation ``protocol`` (see
    ``envs.make_eval_envs``), with its sticky actions replaced by ``sticky_actions`` when given; ``max_frames`` (a typed ``--max-episode-frames``) replaces its cap
    on a game's length (the training run's cap is not inherited). ``eval_envs`` envs (default min(episodes, 8), never more than ``episodes``) play
    in parallel, seeded apart from any training envs.
    """

    env_name = env_name or checkpoint["env_name"]
    played: Union[str, Protocol] = protocol
    if sticky_actions is not None:
        check_sticky_actions(sticky_actions, env_name)
        played = dataclasses.replace(PROTOCOL_SETTINGS[protocol], repeat_action_probability=sticky_actions)
    if json_path is not None:  # find out before playing, not after
        if not json_path or json_path.endswith(("/", os.sep)) or os.path.isdir(json_path):
            raise UsageError(f"--json needs the path of a file to write, got '{json_path}'")
        try:
            probe_writable(os.path.dirname(os.path.abspath(json_path)))
        except OSError as exc:
            raise UsageError(f"cannot write --json file '{json_path}': {exc.strerror or exc}") from None
    num_envs = min(eval_envs or 8, episodes)
    seed = env_seed(config.seed, evaluation=True)
    family = family_of(env_name)
    device = pick_device(
        config.cuda,
        config.threads,
        settings.speed.keep_freed_memory,
        cuda_by_default=family.cuda,
        tf32=settings.speed.tf32,
        reproducible=config.reproducible,
    )
    print(describe(device, tf32=settings.speed.tf32, bf16=settings.speed.bf16), flush=True)
    seed_everything(config.seed)
    # The env path the agent was trained on (its preprocessing), unless --vec-env is typed.
    envs = make_eval_envs(
        env_name,
        num_envs,
        seed,
        played,
        settings.n_stack,
        full_action_space,
        video_dir,
        episode_shares(episodes, num_envs),
        max_frames,
        vec_env=settings.vec_env,
        frame_size=settings.frame_size,
        observation_window=settings.observation_window,
    )
    # The observation statistics the agent was saved with, frozen.
    envs = normalized(envs, settings.normalize_obs, False, training=False)
    load_normalizer(envs, checkpoint)
    try:
        num_actions, _ = action_size(envs.action_space)
        if full_action_space and checkpoint["model_spec"]["num_actions"] != num_actions:
            raise UsageError(
                f"checkpoint {load} has {checkpoint['model_spec']['num_actions']} actions (the action set "
                f"it was trained on); {env_name} with --full-action-space has {num_actions}"
            )
        check_checkpoint_fits(checkpoint, load, envs.observation_space.shape, num_actions, env_name)
        # The run's precision and encoder passes, unless --(no-)bf16 or --encoder-chunk is typed.
        model = load_model(load, device, bf16=settings.speed.bf16, encoder_chunk=settings.speed.encoder_chunk)
        result = evaluate(model, envs, episodes, deterministic)
    finally:
        envs.close()
    print("scores: " + " ".join(f"{s:g}" for s in result.scores))
    print(summarize(result))
    if json_path is not None:
        write_json(
            {
                "checkpoint": os.path.abspath(load),
                "checkpoint_step": checkpoint.get("step"),
                "env_name": env_name,
                "protocol": protocol,
                "deterministic": bool(deterministic),
                "sticky_actions": (
                    played.repeat_action_probability
                    if isinstance(played, Protocol)
                    else PROTOCOL_SETTINGS[protocol].repeat_action_probability
                )
                if family.sticky_actions(env_name) is not None
                else None,
                "full_action_space": bool(full_action_space),
                "max_episode_frames": effective_frame_cap(env_name, protocol, max_frames),
                "eval_envs": num_envs,
                "seed": seed,
                "vec_env": family.in_process if video_dir else settings.vec_env,
                "video_dir": os.path.abspath(video_dir) if video_dir else None,
                **result.to_dict(),
            },
            json_path,
        )
    return 0


def grid_outputs(load: str, kind: str, json_path: Optional[str], out: Optional[str]) -> tuple[str, str]:
    """Where a grid's table (JSON) and image (PNG) go: as typed, else beside the checkpoint as
    ``CHECKPOINT_<kind>.json`` and ``.png``; checked writable before anything is played."""
    json_path, out = json_path or f"{load}_{kind}.json", out or f"{load}_{kind}.png"
    for path in (json_path, out):
        try:
            probe_writable(os.path.dirname(os.path.abspath(path)))
        except OSError as exc:
            raise UsageError(f"cannot write '{path}': {exc.strerror or exc}") from None
    return json_path, out


def play_robustness(
    config: Config,
    settings: Config,
    checkpoint: dict[str, Any],
    load: str,
    episodes: int,
    *,
    max_frames: Optional[int] = None,
    deterministic: bool = False,
    json_path: Optional[str] = None,
    out: Optional[str] = None,
    eval_envs: Optional[int] = None,
) -> int:
    """Play ``episodes`` games of the Atari agent saved at ``load`` in every cell of sticky actions x
    no-op starts (``robustness.py``); print the table, write it as JSON and draw score against
    stickiness (PNG), by default beside the checkpoint. Every cell plays from the same seeds;
    ``max_frames`` (a typed ``--max-episode-frames``) replaces the cells' cap on a game's length."""
    env_name = checkpoint["env_name"]
    family = family_of(env_name)
    if family.sticky_actions(env_name) is None:
        raise UsageError(
            f"--robustness plays Atari games under sticky actions; {env_name} has no emulator "
            f"(--physics-grid varies a control env's physics)"
        )
    json_path, out = grid_outputs(load, "robustness", json_path, out)
    num_envs = min(eval_envs or 8, episodes)
    seed = env_seed(config.seed, evaluation=True)
    device = pick_device(
        config.cuda,
        config.threads,
        settings.speed.keep_freed_memory,
        cuda_by_default=family.cuda,
        tf32=settings.speed.tf32,
        reproducible=config.reproducible,
    )
    print(describe(device, tf32=settings.speed.tf32, bf16=settings.speed.bf16), flush=True)
    model = load_model(load, device, bf16=settings.speed.bf16, encoder_chunk=settings.speed.encoder_chunk)
    cells = []
    protocols = robustness.cell_protocols()
    if max_frames is not None:
        protocols = [dataclasses.replace(protocol, max_episode_frames=max_frames) for protocol in protocols]
    for protocol in protocols:
        seed_everything(config.seed)  # the same sampling stream in every cell
        envs = make_eval_envs(
            env_name,
            num_envs,
            seed,
            protocol,
            settings.n_stack,
            vec_env=settings.vec_env,
            frame_size=settings.frame_size,
            max_episodes_per_env=episode_shares(episodes, num_envs),
        )
        try:
            check_checkpoint_fits(
                checkpoint, load, envs.observation_space.shape, action_size(envs.action_space)[0], env_name
            )
            result = evaluate(model, envs, episodes, deterministic)
        finally:
            envs.close()
        cells.append(robustness.cell_summary(protocol, result.scores, result.lengths))
        print(
            f"sticky actions {protocol.repeat_action_probability:g}, {robustness.noop_label(protocol.noop_max)}: "
            f"{summarize(result)}",
            flush=True,
        )
    grid = {
        "checkpoint": os.path.abspath(load),
        "checkpoint_step": checkpoint.get("step"),
        "env_name": env_name,
        "trained_sticky_actions": checkpoint.get("config", {}).get("sticky_actions"),
        "episodes": episodes,
        "deterministic": bool(deterministic),
        "eval_envs": num_envs,
        "seed": seed,
        "vec_env": settings.vec_env,
        "max_episode_frames": effective_frame_cap(env_name, protocols[0]),
        "cells": cells,
    }
    write_json(grid, json_path)
    robustness.draw([grid], [os.path.basename(os.path.normpath(load))], out)
    print(robustness.table(grid))
    print(f"wrote {json_path}, {out}")
    return 0


def play_grid(
    config: Config,
    settings: Config,
    checkpoint: dict[str, Any],
    load: str,
    episodes: int,
    *,
    max_frames: Optional[int] = None,
    deterministic: bool = False,
    json_path: Optional[str] = None,
    out: Optional[str] = None,
    eval_envs: Optional[int] = None,
) -> int:
    """Play the agent saved at ``load`` over its env's grid of physics (``physics_grid.py``); write
    the table (JSON) and the heat map (PNG), by default beside the checkpoint. The summary printed
    gives the mean over the held-out cells and over those inside the training physics apart,
    where the grid has both. ``max_frames`` (a typed ``--max-episode-frames``) caps an episode's steps."""

    env_name = checkpoint["env_name"]
    check_randomizable(env_name, "--physics-grid")
    json_path, out = grid_outputs(load, "physics_grid", json_path, out)
    device = pick_device(
        config.cuda,
        config.threads,
        settings.speed.keep_freed_memory,
        cuda_by_default=family_of(env_name).cuda,
        tf32=settings.speed.tf32,
        reproducible=config.reproducible,
    )
    print(describe(device, tf32=settings.speed.tf32), flush=True)
    seed_everything(config.seed)
    model = load_model(load, device)
    grid = evaluate_grid(
        model,
        env_name,
        episodes,
        env_seed(config.seed, evaluation=True),
        checkpoint=checkpoint,
        normalize_obs=settings.normalize_obs,
        deterministic=deterministic,
        num_envs=eval_envs,
        max_episode_steps=max_frames,
    )
    grid["checkpoint"] = os.path.abspath(load)
    write_json(grid, json_path)
    draw_heatmaps([grid], [f"{env_name}: {os.path.basename(load)}, {episodes} episodes a cell"], out)
    worst = min(grid["cells"], key=lambda cell: cell["mean"])
    best = max(grid["cells"], key=lambda cell: cell["mean"])
    regions = region_means(grid)
    apart = ""
    if regions["held_out"] is not None and regions["inside"] is not None:
        inside = sum(cell["inside"] for cell in grid["cells"])
        apart = (
            f"; held out ({_cells(len(grid['cells']) - inside)}) {regions['held_out']:.2f}, inside the "
            f"training physics ({_cells(inside)}) {regions['inside']:.2f}"
        )
    print(
        f"{len(grid['cells'])} cells: mean return {sum(c['mean'] for c in grid['cells']) / len(grid['cells']):.2f}"
        f"{apart}; worst {worst['mean']:.2f}, best {best['mean']:.2f}; wrote {json_path}, {out}"
    )
    return 0


def _cells(count: int) -> str:
    return f"{count} cell{'' if count == 1 else 's'}"
