"""Levers for training Atari on a CPU, measured before anything is built: is any worth it?

    python bench/cpu_levers.py                          # 42x42 frames (--frame-size 42), 16 envs
    python bench/cpu_levers.py --levers sequential halves --steps 8000 --repeats 3
    python bench/cpu_levers.py --levers sequential halves --threads 1 --ale-threads 1   # one core each
    python bench/cpu_levers.py --levers sequential lagged --frame-size 64 --steps 8000 --repeats 3

Each lever is timed on the same training-shaped loop: the recurrent default's network (the
universe encoder, layer-normalized LSTM, heads beside it) acts on ale-py's C++ vector env for 5
steps with gradients kept, then one backward pass and one RMSprop step, as ``Runner`` trains. The
loss is a stand-in (the log-probabilities of the actions taken and the squared values): the work
is the real one, the learning is not.

* ``sequential``: the runner's order. The network acts for all envs, then the envs step while it
  waits (``step``: ``send`` then ``recv``).
* ``halves``: the envs split into two vector envs of half as many, pipelined as EnvPool's
  asynchronous mode does. While one half steps in its C++ threads, the network acts for the other.
  Whether the two cores then do more work, or only wait in other places, is what this measures.
* ``compiled``: ``sequential`` with the encoder under ``torch.compile`` (its compilation is left out
  of the timing: every trial first runs 5 untimed updates).
* ``lagged``: the update of one rollout (its backward pass and RMSprop step) runs in a second thread
  while the network collects the next rollout, as a learner lagging its actors does (A3C, IMPALA).
  Two copies of the network take turns acting: the next rollout acts with the weights from before
  the update that runs beside it, one update old, and its gradient, computed at those weights, is
  applied to the newer ones. The two threads share the cores: each runs torch on half of
  ``--threads`` (at least one). Whether they then keep the cores busier than the runner's order
  does is what this measures; it says nothing of how such a learner learns.

Every trial runs in a fresh process, the levers in turn, ``--repeats`` rounds (bench/throughput.py's
``run_alternating``); the summary gives each lever's median env steps/s as a ratio to
``sequential`` measured in the same run, against the 1.10x a speed option must earn. Measure on a
quiet machine.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.throughput import cli_config, print_table, run_alternating  # noqa: E402

LEVERS = ("sequential", "halves", "compiled", "lagged")
ROLLOUT = 5      # the default --rollout-size
EARNS = 1.10     # what a speed option must buy end to end (docs/speed.md)


def make_envs(num_envs: int, frame_size: int, seed: int, threads: int = 0):
    from ale_py.vector_env import AtariVectorEnv

    envs = AtariVectorEnv("pong", num_envs, num_threads=threads, stack_num=4, img_height=frame_size, img_width=frame_size,
                          frameskip=4, autoreset_mode="SameStep")
    return envs, torch.from_numpy(envs.reset(seed=seed)[0])


def make_model(frame_size: int, num_actions: int, compiled: bool):
    """The network ``python main.py --env-name PongNoFrameskip-v4 --frame-size N`` trains."""
    from agent import build_networks

    torch.manual_seed(0)
    config = cli_config(["--env-name", "PongNoFrameskip-v4", "--frame-size", str(frame_size)])
    model, _ = build_networks(config, (config.n_stack, frame_size, frame_size), num_actions)
    if compiled:
        model.encoder = torch.compile(model.encoder, dynamic=False)
    return model


def act(model, obs, state):
    """Sampled actions, their log-probabilities and the values (with gradients), and the next state."""
    logits, values, state = model(obs, state, torch.zeros(obs.shape[0]))
    actions = torch.distributions.Categorical(logits=logits).sample()
    return actions, logits.log_softmax(-1).gather(1, actions[:, None]).squeeze(1), values, state


def stand_in_loss(log_probs: list, values: list) -> torch.Tensor:
    """The work of a real loss over the rollout, not its learning: log-probabilities and squared values."""
    return -torch.cat(log_probs).mean() + torch.cat(values).pow(2).mean()


def learn(optimizer, log_probs: list, values: list) -> None:
    loss = stand_in_loss(log_probs, values)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def learn_lagged(master, optimizer, actor, log_probs: list, values: list) -> None:
    """The stand-in loss's gradient at ``actor``'s weights (those that acted) applied to ``master``'s
    by ``optimizer``; then ``actor`` takes ``master``'s new weights for the rollout after next."""
    grads = torch.autograd.grad(stand_in_loss(log_probs, values), list(actor.parameters()), allow_unused=True)
    for weight, grad in zip(master.parameters(), grads):
        weight.grad = grad
    optimizer.step()
    with torch.no_grad():
        for acting, weight in zip(actor.parameters(), master.parameters()):
            acting.copy_(weight)


def detached(state):
    return tuple(s.detach() for s in state)


def train_lever(steps: int, lever: str, num_envs: int = 16, frame_size: int = 42, seed: int = 0,
                warmup_updates: int = 5, ale_threads: int = 0) -> tuple[int, float]:
    """Env steps and seconds of ``lever``'s loop for about ``steps`` env steps (whole updates);
    ``ale_threads``: ale-py's threads for each vector env (0: one a core)."""
    updates = max(1, steps // (num_envs * ROLLOUT))
    halves = lever == "halves"
    parts = [make_envs(num_envs // 2, frame_size, seed + i, ale_threads) for i in range(2)] if halves \
        else [make_envs(num_envs, frame_size, seed, ale_threads)]
    envs, obs = [p[0] for p in parts], [p[1] for p in parts]
    model = make_model(frame_size, envs[0].single_action_space.n, lever == "compiled")
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-4)
    states = [model.initial_state(e.num_envs) for e in envs]
    pending = [False, False]  # halves: whether a half's step is in flight
    lagged = lever == "lagged"
    if lagged:  # two threads of torch work share the cores
        torch.set_num_threads(max(1, torch.get_num_threads() // 2))
    actors = [copy.deepcopy(model) for _ in range(2)] if lagged else [model]  # lagged: they take turns acting
    learner = ThreadPoolExecutor(max_workers=1) if lagged else None
    learning = []  # lagged: the update running beside the rollout being collected

    def update() -> None:
        actor = actors[0]
        log_probs, values = [], []
        for _ in range(ROLLOUT):
            if not halves:
                actions, lp, v, states[0] = act(actor, obs[0], states[0])
                obs[0] = torch.from_numpy(envs[0].step(actions.numpy())[0])
                log_probs.append(lp)
                values.append(v)
                continue
            # Half 0 is sent off to step; the network acts for half 1 meanwhile, and the other way round.
            for i in (0, 1):
                actions, lp, v, states[i] = act(actor, obs[i], states[i])
                envs[i].send(actions.numpy())
                log_probs.append(lp)
                values.append(v)
                other = 1 - i
                if pending[other]:
                    obs[other] = torch.from_numpy(envs[other].recv()[0])
                    pending[other] = False
                pending[i] = True
        if lagged:  # the last update is done (the other actor has its weights): this rollout's starts
            if learning:
                learning.pop().result()
            learning.append(learner.submit(learn_lagged, model, optimizer, actor, log_probs, values))
            actors.reverse()
        else:
            learn(optimizer, log_probs, values)
        for i, state in enumerate(states):
            states[i] = detached(state)

    for _ in range(warmup_updates):
        update()
    start = time.perf_counter()
    for _ in range(updates):
        update()
    if learning:
        learning.pop().result()
    seconds = time.perf_counter() - start
    if learner:
        learner.shutdown()
    for i, e in enumerate(envs):
        if pending[i]:
            e.recv()
        e.close()
    return updates * num_envs * ROLLOUT, seconds


def summary_lines(results) -> list[str]:
    base = results.get("sequential")
    if base is None:
        return []
    lines = []
    for name, trials in results.items():
        if name == "sequential":
            continue
        ratio = trials.median_rate / base.median_rate
        verdict = "earns its place" if ratio >= EARNS else f"does not earn its place (under {EARNS:.2f}x)"
        lines.append(f"{name} / sequential: {ratio:.2f}x: {verdict}")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levers", nargs="+", choices=LEVERS, default=list(LEVERS))
    parser.add_argument("--steps", type=int, default=24_000, help="env steps a timed trial (default 24000)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of every lever (default 2)")
    parser.add_argument("--num-envs", type=int, default=16, help="envs (even; default 16)")
    parser.add_argument("--frame-size", type=int, default=42, help="frame side in pixels (default 42)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's, the cores)")
    parser.add_argument("--ale-threads", type=int, default=0,
                        help="ale-py threads of each vector env (default 0: one a core)")
    args = parser.parse_args(argv)
    if args.num_envs < 2 or args.num_envs % 2:
        parser.error("--num-envs must be even and at least 2: the halves split them")
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be positive")
    if args.threads < 0 or args.ale_threads < 0:
        parser.error("--threads and --ale-threads must be 0 or more")
    trainers = {name: (train_lever, {"lever": name, "num_envs": args.num_envs, "frame_size": args.frame_size,
                                     "ale_threads": args.ale_threads})
                for name in dict.fromkeys(args.levers)}
    results = run_alternating(trainers, args.steps, args.repeats, warmup_steps=0, threads=args.threads)
    print_table(results)
    for line in summary_lines(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
