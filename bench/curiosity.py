"""Curiosity on a sparse-reward task: A2C with the ICM reaches a far-away reward that plain A2C never finds.

The task is ``sparse_env.SparseCorridorEnv``: a textured, side-scrolling corridor in 42x42 images,
actions forward/back, where "back" drops the agent to the start, and ``+1`` only on reaching the
far end within a time limit. A random policy's chance is printed (exact, and measured).

Both settings train through the real pipeline (``Config -> agent_from_config -> Runner.train``)
with the SAME hyper-parameters; only ``Config.curiosity.enabled`` differs. For every run the script reports:

* ``eval``: success rate of the final policy over ``--eval-episodes`` fresh episodes (actions
  sampled from the policy, as in training), played by ``evaluate.evaluate`` on envs seeded apart
  from the training envs;
* ``last100``: success rate over the last 100 training episodes;
* ``first success``: env steps (all envs together) trained when the goal was first reached;
* ``furthest``: the furthest cell any training episode reached (the goal is ``length - 1``);
* with the ICM: the mean intrinsic reward per step and the ICM's loss terms over the run.

ICM setting: the paper's ``icm_beta = 0.2`` and ``icm_lambda = 0.1``, with ``eta = 0.5`` (the
intrinsic reward must be comparable to the +1 at the goal for the short runs here).

    python bench/curiosity.py                       # 3 seeds x (ICM, plain), about 5 minutes
    python bench/curiosity.py --seeds 0,1,2,3,4 --settings icm --eta 0.05
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _path in (ROOT, HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agent import agent_from_config  # noqa: E402
from config import Config, Curiosity  # noqa: E402
from evaluate import evaluate  # noqa: E402
from runner import Runner  # noqa: E402
from sparse_env import SparseCorridorEnv, make_corridor_vec_env, random_success_probability  # noqa: E402
from storage import Batch  # noqa: E402
from utils import seed_everything  # noqa: E402

SETTINGS = {"icm": True, "plain": False}
EVAL_SEED_OFFSET = 10_000  # evaluation envs: seed + 10_000 + i, apart from the training envs' seed + i
SUCCEEDED = 0.5            # a run "succeeded" when its final policy reaches the goal in at least half the episodes


class RecordingRunner(Runner):
    """The project's Runner, plus a record of every training episode and of the intrinsic rewards.

    It only observes: ``_record_episodes`` (called once per env step with the Monitor infos) and
    ``collect`` (which returns the batch, intrinsic rewards included) are extended, not changed.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.episode_log: list[tuple[int, bool, int]] = []  # (env steps at its end, success, furthest cell)
        self.furthest = np.zeros(self.config.num_envs, dtype=np.int64)
        self.intrinsic_means: list[float] = []  # mean intrinsic reward per step, one per update

    def _record_episodes(self, infos: list[dict], t: int) -> None:
        super()._record_episodes(infos, t)
        step = self.state.step + (t + 1) * self.config.num_envs
        for i, info in enumerate(infos):
            self.furthest[i] = max(self.furthest[i], info.get("position", 0))
            if "episode" in info:
                self.episode_log.append((step, bool(info["episode"]["r"] > 0), int(self.furthest[i])))
                self.furthest[i] = 0

    def collect(self) -> Batch:
        batch = super().collect()
        intrinsic = batch.reward_parts.get("intrinsic")
        if intrinsic is not None:
            self.intrinsic_means.append(float(intrinsic.mean()))
        return batch


@dataclass
class Result:
    setting: str
    seed: int
    eval_success: float
    last100: float
    first_success: Optional[int]
    furthest: int
    episodes: int
    steps: int
    seconds: float
    trends: dict[str, list[float]] = field(default_factory=dict)  # per quarter of the run


def make_config(args: argparse.Namespace, icm: bool, seed: int) -> Config:
    """One config for both settings: only whether curiosity is on differs."""
    return Config(
        env_name="SparseCorridor", num_envs=args.num_envs, n_stack=args.n_stack, seed=seed,
        recurrent=args.recurrent, hidden_size=args.hidden_size,
        rollout_size=args.rollout, num_updates=args.updates, gamma=args.gamma,
        optimizer=args.optimizer, lr=args.lr, entropy_coeff=args.entropy,
        curiosity=Curiosity(enabled=icm, eta=args.eta, beta=args.icm_beta, policy_weight=args.icm_lambda,
                            extrinsic_coeff=1.0, normalize=args.normalize),
        cuda=False, tensorboard=False, progress=False, checkpoint_interval=10**9,
    )


def quarters(values: list[float]) -> list[float]:
    """Means of the four quarters of a per-update series."""
    if not values:
        return []
    return [float(np.mean(part)) for part in np.array_split(np.asarray(values, dtype=np.float64), 4) if len(part)]


def run_one(args: argparse.Namespace, setting: str, seed: int) -> Result:
    config = make_config(args, SETTINGS[setting], seed)
    seed_everything(config.seed)  # as main.py does before building the agent
    envs = make_corridor_vec_env(config.num_envs, seed, args.length, args.max_steps, config.n_stack, args.back_to_start)
    scratch = "/dev/shm" if os.path.isdir("/dev/shm") else None  # the runner's checkpoints: keep fsync cheap
    tic = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="curiosity-", dir=scratch) as run_dir:
        try:
            agent = agent_from_config(config, envs.observation_space.shape, int(envs.action_space.n))
            runner = RecordingRunner(agent, envs, config, run_dir=run_dir)
            runner.train()
        finally:
            envs.close()
    seconds = time.perf_counter() - tic
    eval_envs = make_corridor_vec_env(config.num_envs, seed + EVAL_SEED_OFFSET, args.length, args.max_steps,
                                      config.n_stack, args.back_to_start)
    try:
        scores = evaluate(agent.model, eval_envs, args.eval_episodes).scores
    finally:
        eval_envs.close()

    log, history = runner.episode_log, runner.history
    first = next((step for step, success, _ in log if success), None)
    last = log[-100:]
    trends = {"success": quarters([float(s) for _, s, _ in log]), "entropy": quarters([h["entropy"] for h in history])}
    if config.curiosity.enabled:
        trends["intrinsic/step"] = quarters(runner.intrinsic_means)
        for key in ("icm/forward", "icm/inverse", "icm/inverse_accuracy"):
            trends[key] = quarters([h[key] for h in history])
    return Result(setting, seed, float(np.mean(np.asarray(scores) > 0)),
                  float(np.mean([s for _, s, _ in last])) if last else float("nan"),
                  first, max((f for _, _, f in log), default=0), len(log), runner.state.step, seconds, trends)


def measure_random(length: int, max_steps: int, back_to_start: bool, episodes: int, seed: int) -> int:
    """Successes of a uniformly random policy in ``episodes`` episodes of the real env."""
    env = SparseCorridorEnv(length, max_steps, back_to_start)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    successes = 0
    for _ in range(episodes):
        env.reset()
        while True:
            _, _, terminated, truncated, info = env.step(int(rng.integers(2)))
            if terminated or truncated:
                successes += bool(info["success"])
                break
    return successes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds; each setting runs once per seed")
    p.add_argument("--settings", default="icm,plain", help="comma-separated: icm, plain")
    p.add_argument("--updates", type=int, default=200, help="gradient updates per run")
    # the task
    p.add_argument("--length", type=int, default=25, help="corridor cells (the goal is length - 1 moves away)")
    p.add_argument("--max-steps", type=int, default=50, help="time limit of an episode, in steps")
    p.add_argument("--back-to-start", action=argparse.BooleanOptionalAction, default=True,
                   help="the back action drops the agent to the start (else: one cell back)")
    # the agent: the same for both settings
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--rollout", type=int, default=20, help="steps per env per update (n of n-step returns)")
    p.add_argument("--n-stack", type=int, default=1)
    p.add_argument("--recurrent", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--optimizer", default="adam", choices=["adam", "rmsprop"])
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--entropy", type=float, default=0.001, help="entropy coefficient")
    p.add_argument("--eta", type=float, default=0.5, help="curiosity_coeff (used by ICM runs only)")
    p.add_argument("--icm-beta", type=float, default=0.2,
                   help="beta: curiosity loss = (1 - beta) * inverse loss + beta * forward loss")
    p.add_argument("--icm-lambda", type=float, default=0.1)
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=False,
                   help="icm_normalize: divide intrinsic rewards by their running std")
    # measurement
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--random-episodes", type=int, default=20_000,
                   help="episodes of a uniformly random policy to measure its success rate (0: skip)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is fastest for these tiny nets)")
    return p


def main(argv: Optional[list[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    for s in settings:
        if s not in SETTINGS:
            raise SystemExit(f"unknown setting {s!r} (icm or plain)")

    kind = "back drops to the start" if args.back_to_start else "back is one cell back"
    exact = random_success_probability(args.length, args.max_steps, back_to_start=args.back_to_start)
    print(f"task: corridor of {args.length} cells ({args.length - 1} moves to the goal, {kind}), "
          f"time limit {args.max_steps} steps")
    print(f"random policy: exact success probability {exact:.2e} per episode", end="")
    if args.random_episodes:
        wins = measure_random(args.length, args.max_steps, args.back_to_start, args.random_episodes, seed=12345)
        print(f"; measured {wins}/{args.random_episodes} episodes")
    else:
        print()
    steps = args.updates * args.num_envs * args.rollout
    print(f"per run: {args.updates} updates x {args.num_envs} envs x {args.rollout} steps = {steps} env steps; "
          f"a random policy would reach the goal {exact * steps / args.max_steps:.1e} times in "
          f"{steps // args.max_steps} full-length episodes")
    print(f"same hyper-parameters for both settings: recurrent={args.recurrent} hidden={args.hidden_size} "
          f"n_stack={args.n_stack} gamma={args.gamma} {args.optimizer} lr={args.lr} entropy={args.entropy} "
          f"num_envs={args.num_envs} rollout={args.rollout}; ICM: eta={args.eta} beta={args.icm_beta} "
          f"lambda={args.icm_lambda} normalize={args.normalize} extrinsic_coeff=1.0")
    print(flush=True)

    header = (f"{'setting':<8}{'seed':>5}{'eval':>7}{'last100':>9}{'first success':>15}"
              f"{'furthest':>10}{'episodes':>10}{'time s':>8}")
    print(header)
    print("-" * len(header), flush=True)
    results: list[Result] = []
    for seed in seeds:
        for setting in settings:
            r = run_one(args, setting, seed)
            results.append(r)
            first = f"{r.first_success}" if r.first_success is not None else "never"
            print(f"{r.setting:<8}{r.seed:>5}{r.eval_success:>7.2f}{r.last100:>9.2f}{first:>15}"
                  f"{r.furthest:>10}{r.episodes:>10}{r.seconds:>8.1f}", flush=True)

    print("\nper quarter of each run (means):")
    for r in results:
        parts = "  ".join(f"{key} " + "/".join(f"{v:.3g}" for v in values) for key, values in r.trends.items())
        print(f"  {r.setting:<6} seed {r.seed}: {parts}")

    print()
    for setting in settings:
        rs = [r for r in results if r.setting == setting]
        succeeded = sum(r.eval_success >= SUCCEEDED for r in rs)
        firsts = [r.first_success for r in rs if r.first_success is not None]
        first_text = f"median first success at {int(np.median(firsts))} env steps" if firsts else "never"
        print(f"{setting:<6}: {succeeded}/{len(rs)} seeds succeeded (final-policy success >= {SUCCEEDED}); "
              f"mean eval success {np.mean([r.eval_success for r in rs]):.2f}, "
              f"mean last-100 success {np.mean([r.last100 for r in rs]):.2f}; "
              f"goal reached during training on {len(firsts)}/{len(rs)} seeds, {first_text}")
    print(f"total training time {sum(r.seconds for r in results):.0f}s "
          f"(evaluation and the random-policy measurement not included)")


if __name__ == "__main__":
    main()
