"""Ship a trained agent: a checkpoint cut down to its weights, in float16 where every score of ``--episodes`` games
(played in float16 and float32, the same seed) stays the same, else float32, with the record of those scores and of
``--check-episodes`` games that ``tests/test_agents.py`` replays exactly. The games are played under each evaluation
protocol of the agent's env family: ``classic`` gives the record's ``scores``, another (Atari's ``machado``) an entry
of its own. Play it with ``python main.py --eval --load agents/NAME``.

    python -m bench.ship_agent RUN/a2c_last agents/pong --command "python main.py --env-name ALE/Pong-v5 --seed 1"
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
from statistics import fmean, pstdev
from typing import Any

import torch

import main as cli
from bench import positive
from checkpoints import agent_file, atomic_save, load_checkpoint
from envs import family_of
from utils import UsageError


def play(path: str, episodes: int, seed: int, protocol: str = "classic") -> list[float]:
    """The raw scores of ``episodes`` games of the agent at ``path``, as ``main.py --eval`` plays them
    (under ``protocol``, sampled actions)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "scores.json")
        argv = ["--eval", "--load", path, "--episodes", str(episodes), "--seed", str(seed), "--json", out]
        if cli.main([*argv, "--protocol", protocol, "--no-cuda", "--threads", "1"]) != 0:
            raise UsageError(f"could not play {path}")
        return [float(s) for s in json.loads(pathlib.Path(out).read_text())["scores"]]


def ship(source: str, target: str, episodes: int, check_episodes: int, seed: int, command: str) -> dict[str, Any]:
    """Write the agent file ``target`` from checkpoint ``source``; its record."""
    checkpoint = load_checkpoint(source)
    protocols = family_of(checkpoint["config"]["env_name"]).protocols  # classic first
    scores: dict[tuple[torch.dtype, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in (torch.float32, torch.float16):
            path = os.path.join(tmp, str(dtype).removeprefix("torch."))
            atomic_save(agent_file(checkpoint, dtype), path)
            for protocol in protocols:
                scores[dtype, protocol] = play(path, episodes, seed, protocol)
    same = all(scores[torch.float16, p] == scores[torch.float32, p] for p in protocols)
    dtype = torch.float16 if same else torch.float32

    def summary(protocol: str) -> dict[str, Any]:
        kept, float32 = scores[dtype, protocol], scores[torch.float32, protocol]
        return {"scores": kept, "mean": fmean(kept), "std": pstdev(kept), "float32_mean": fmean(float32)}

    record = {
        "episodes": episodes,
        "seed": seed,
        "protocol": "classic",  # how tests/test_agents.py replays it
        "deterministic": False,
        "protocols": list(protocols),
        **summary("classic"),
        **{protocol: summary(protocol) for protocol in protocols[1:]},
        "dtype": str(dtype).removeprefix("torch."),
        "env_steps": int(checkpoint["step"]),
        "source": os.path.basename(source),
        "command": command,
    }
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    atomic_save(agent_file(checkpoint, dtype, record), target)
    record["check"] = {"episodes": check_episodes, "scores": play(target, check_episodes, seed)}
    atomic_save(agent_file(checkpoint, dtype, record), target)
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a checkpoint of this project (a2c_best_reward, a2c_last, ...)")
    p.add_argument("target", help="the agent file to write, e.g. agents/pong")
    p.add_argument("--episodes", type=positive, default=30, help="games the record is scored over")
    p.add_argument("--check-episodes", type=positive, default=2, help="games the test replays")
    p.add_argument("--seed", type=int, default=42, help="evaluation seed (main.py --eval --seed)")
    p.add_argument("--command", default="", help="the command that trained it, for the record")
    args = p.parse_args(argv)
    try:
        record = ship(args.checkpoint, args.target, args.episodes, args.check_episodes, args.seed, args.command)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    others = "".join(f", {p} {record[p]['mean']:.2f} +- {record[p]['std']:.2f}" for p in record["protocols"][1:])
    print(
        f"{args.target}: {record['dtype']}, {os.path.getsize(args.target) / 1024:.0f} KiB, {record['env_steps']} "
        f"env steps; mean {record['mean']:.2f} +- {record['std']:.2f} over {record['episodes']} games "
        f"(float32: {record['float32_mean']:.2f}){others}; check {record['check']['scores']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
