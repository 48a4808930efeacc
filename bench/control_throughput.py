"""Training speed on a vector-observation env: this project against stable-baselines3's A2C.

Both train ``--env-name`` (LunarLander-v3) with ``--num-envs`` envs (16) stepped in this process
and 5-step rollouts, on the CPU with ``--threads`` torch threads, for ``--steps`` env steps a
round: ours with the env's own defaults (``main.py --env-name ENV --num-envs N``: an MLP of 64-64
tanh for the actor and one for the critic, gymnasium's ``SyncVectorEnv``), SB3's ``A2C`` with
``MlpPolicy`` (the same network sizes, its ``DummyVecEnv``), the RL Zoo's LunarLander settings
for both (gamma 0.995, learning rate 8.3e-4, entropy 1e-5). The trainers take turns for
``--repeats`` rounds after an untimed warm-up round each; the median env steps per second of
each, and their ratio, are printed. Only the ratio means much on a shared machine.

    python bench/control_throughput.py --steps 50000 --repeats 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import main as train_cli  # noqa: E402
from agent import agent_from_config  # noqa: E402
from envs import action_size, make_vec_env  # noqa: E402
from runner import Runner  # noqa: E402
from utils import seed_everything  # noqa: E402


def train_ours(env_name: str, num_envs: int, steps: int, seed: int = 0) -> tuple[int, float]:
    with tempfile.TemporaryDirectory(prefix="bench-control-") as log_dir:
        config, _, typed = train_cli.parse_args(["--env-name", env_name, "--num-envs", str(num_envs),
                                                 "--no-tensorboard", "--no-progress", "--no-cuda",
                                                 "--log-dir", log_dir, "--seed", str(seed)])
        config = train_cli.with_env_defaults(config, typed)
        config = train_cli.with_settings(config, {"num_updates": max(1, steps // config.steps_per_update)})
        seed_everything(config.seed)
        envs = make_vec_env(env_name, num_envs, seed=seed, vec_env=config.vec_env)
        try:
            size, continuous = action_size(envs.action_space)
            agent = agent_from_config(config, envs.observation_space.shape, size, "cpu", continuous=continuous)
            runner = Runner(agent, envs, config, log_dir)  # resets the envs: not timed
            tic = time.perf_counter()
            state = runner.train()
            return state.step, time.perf_counter() - tic
        finally:
            envs.close()


def train_sb3(env_name: str, num_envs: int, steps: int, seed: int = 0) -> tuple[int, float]:
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = sb3_make_vec_env(env_name, n_envs=num_envs, seed=seed, vec_env_cls=DummyVecEnv)
    try:
        model = A2C("MlpPolicy", env, n_steps=5, gamma=0.995, learning_rate=8.3e-4, ent_coef=1e-5, seed=seed,
                    device="cpu", verbose=0)
        model.set_logger(Logger(folder=None, output_formats=[]))
        tic = time.perf_counter()
        model.learn(total_timesteps=steps)
        return model.num_timesteps, time.perf_counter() - tic
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-name", default="LunarLander-v3")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--steps", type=int, default=50_000, help="env steps of each timed run (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    trainers = {"ours": train_ours, "SB3 A2C": train_sb3}
    for trainer in trainers.values():  # warm-up: imports, first allocations
        trainer(args.env_name, args.num_envs, min(args.steps, 5_000))
    rates: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(args.repeats):
        for name, trainer in trainers.items():
            steps, seconds = trainer(args.env_name, args.num_envs, args.steps)
            rates[name].append(steps / seconds)
    print(f"{args.env_name}, {args.num_envs} envs, {args.steps} env steps a run, {args.repeats} rounds, "
          f"{args.threads} torch thread(s)")
    print(f"{'trainer':<10} {'median env steps/s':>19}  rounds")
    for name, values in rates.items():
        print(f"{name:<10} {statistics.median(values):>19.0f}  {' '.join(f'{v:.0f}' for v in values)}")
    ratio = statistics.median(rates["ours"]) / statistics.median(rates["SB3 A2C"])
    print(f"ours / SB3: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
