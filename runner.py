"""The training loop: act in the envs, store the rollout, update the agent, log, checkpoint.

One update reads::

    collect a rollout -> compute returns -> agent.update -> log

and everything else the loop does (checkpoints, periodic evaluation, the network's health, reward
parts, histograms) is a callback (``callbacks.py``) called at fixed points of it.

The rollout is collected without gradients; the update (``A2CAgent.loss``) runs the network over
the stored observations again, from the recurrent state the rollout started with. The speed
setting ``keep_graph`` (on by default; docs/speed.md) collects with gradients instead and trains
through that forward pass, which gives the same numbers without the second pass. The runner owns
the live recurrent state between rollouts; it is detached at each rollout boundary, so
gradients never cross into an earlier rollout.
"""
from __future__ import annotations

import json
import os
import time
from collections import deque
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv

import normalize
from agent import A2CAgent
from callbacks import Callback, default_callbacks
from checkpoints import Checkpoints, TrainingState
from config import Config
from control import RunContext, StopSignals
from devices import HostToDevice
from distributed import gather_games, shared_statistics
from metrics import Metrics
from storage import Batch, RolloutStorage
from utils import atomic_write

HISTORY_LENGTH = 1_000  # updates whose stats Runner.history keeps


# Plays the current policy for whole games on envs of its own and returns their raw scores.
Evaluator = Callable[[torch.nn.Module], Sequence[float]]


class Runner:
    """Drives a vector env with an agent for ``config.num_updates`` updates.

    ``evaluator``, when given, is called every ``config.eval_interval`` updates with the network
    (see :class:`evaluate.PeriodicEvaluator` and :class:`callbacks.Evaluation`). ``callbacks``:
    what the loop calls besides training (``callbacks.default_callbacks()`` unless given).
    """

    HISTOGRAMS = ("advantages", "values", "returns")  # Batch fields logged as rollout/<name> histograms

    def __init__(self, agent: A2CAgent, envs: VecEnv, config: Config, run_dir: str,
                 state: Optional[TrainingState] = None, writer: Any = None,
                 evaluator: Optional[Evaluator] = None, context: RunContext = RunContext(),
                 callbacks: Optional[list[Callback]] = None, adr: Any = None) -> None:
        self.agent, self.envs, self.config, self.run_dir = agent, envs, config, run_dir
        self.evaluator = evaluator
        self.adr = adr  # the ranges of --randomize-domain adr (adr.ADR), which the envs draw from
        self.callbacks = default_callbacks(self.HISTOGRAMS) if callbacks is None else callbacks
        self.device = agent.device
        self.state = state or TrainingState()
        self.checkpoints = Checkpoints(run_dir, agent, config, enabled=context.is_main,
                                       normalizer=self.env_state, world_size=context.world_size)
        self.context = context
        # Env steps of one update over every rank (config.num_envs is per rank): the step axis is global.
        self.steps_per_update = config.steps_per_update * context.world_size
        obs_dtype = torch.from_numpy(np.zeros(0, envs.observation_space.dtype)).dtype
        self.storage = RolloutStorage(config.rollout_size, config.num_envs, envs.observation_space.shape, self.device,
                                      obs_dtype, action_shape=envs.action_space.shape or ())
        self.recurrent_state = agent.model.initial_state(config.num_envs, self.device)
        # The envs' arrays onto the device (devices.HostToDevice: no copy on the CPU; on a GPU
        # asynchronous copies from page-locked buffers): the frames, each step's rewards and dones
        # in one copy, and the rare arrays of a time limit.
        self.obs_to_device = HostToDevice(self.device)
        self.step_to_device = HostToDevice(self.device)
        self.rare_to_device = HostToDevice(self.device)
        # Normalizer and curiosity statistics, merged over the ranks after every rollout (from the reset on).
        self.statistics = shared_statistics(envs, agent, context)
        self.obs = self._to_tensor(envs.reset())
        self.notify("on_reset", getattr(envs, "reset_infos", []))
        self.episode_starts = torch.ones(config.num_envs, device=self.device)
        self.stop = StopSignals()
        self.stop_reason = ""
        self.metrics = Metrics(writer, enabled=context.is_main)
        self.new_episodes = 0  # episodes finished in the current update (on every rank)
        self.ended_games: list[tuple[int, int, float, int]] = []  # (step, env, return, length) of this rollout's games
        # The stats of the last updates, for tests and callers; bounded, so a long run's memory stays flat.
        self.history: deque[dict[str, float]] = deque(maxlen=HISTORY_LENGTH)

    def env_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the envs: the normalizers' statistics, and ADR's ranges."""
        return {**normalize.state(self.envs), **({"adr": self.adr.state_dict()} if self.adr is not None else {})}

    def notify(self, point: str, *args: Any) -> None:
        """Call every callback at ``point`` of the loop (see ``callbacks.py``)."""
        for callback in self.callbacks:
            getattr(callback, point)(self, *args)

    # ------------------------------------------------------------------ collection
    def _to_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """The one place where observations (numpy) become torch (see ``obs_to_device``)."""
        return self.obs_to_device(obs)

    def _step_arrays(self, *arrays: np.ndarray) -> torch.Tensor:
        """A step's arrays ``[N]`` (rewards, dones) as the rows of one float32 tensor on the device, in one copy."""
        return self.step_to_device(np.stack(arrays).astype(np.float32, copy=False))

    def collect(self) -> Batch:
        """Step every env ``rollout_size`` times; the agent turns the rollout into a batch with returns."""
        agent, storage = self.agent, self.storage
        # Truncated backpropagation through time: no gradient flows into the previous rollout.
        self.recurrent_state = tuple(s.detach() for s in self.recurrent_state)
        storage.start(self.recurrent_state)
        agent.draw_exploration(self.envs.num_envs)
        with agent.model.casting_once():
            self._collect_steps(storage)
        self._record_episodes()
        batch = agent.make_batch(storage)
        self.statistics.merge()
        return batch

    def _collect_steps(self, storage: RolloutStorage) -> None:
        """The rollout itself: ``rollout_size`` steps of every env, and the values to bootstrap from."""
        cfg, agent = self.config, self.agent
        for t in range(cfg.rollout_size):
            if cfg.speed.keep_graph:  # a speed setting: the update will train through this forward pass
                actions, log_probs, logits, values, next_state = agent.act_with_graph(
                    self.obs, self.recurrent_state, self.episode_starts)
                storage.keep_outputs(logits, values)
                values = values.detach()
            else:
                actions, log_probs, values, next_state = agent.act(self.obs, self.recurrent_state, self.episode_starts)
            # The step's one read from the device: the envs need the actions.
            obs, rewards, dones, infos = self.envs.step(actions.cpu().numpy())
            bootstrap = self._truncation_bootstrap(dones, infos, next_state)
            self._note_episodes(infos, t)
            self.notify("on_step", infos, t)
            rewards_t, dones_t = self._step_arrays(rewards, dones)
            storage.insert(t, self.obs, self.episode_starts, actions, values, rewards_t, dones_t, bootstrap, log_probs)
            self.obs, self.episode_starts, self.recurrent_state = self._to_tensor(obs), dones_t, next_state
        storage.finish(self.obs, agent.value(self.obs, self.recurrent_state, self.episode_starts))

    def _truncation_bootstrap(self, dones: np.ndarray, infos: list[dict],
                              next_state: tuple[torch.Tensor, ...]) -> Optional[torch.Tensor]:
        """A time limit is not a death: ``gamma * V(terminal_obs)`` for each truncated env, else 0."""
        idx = [i for i, info in enumerate(infos)
               if dones[i] and info.get("TimeLimit.truncated", False) and "terminal_observation" in info]
        if not idx:
            return None
        terminal_obs = self.rare_to_device(np.stack([infos[i]["terminal_observation"] for i in idx]))
        index = self.rare_to_device(np.asarray(idx, dtype=np.int64))
        # The terminal observation continues the same episode: it reads the state that step produced.
        state = tuple(s.index_select(0, index) for s in next_state)
        values = self.agent.value(terminal_obs, state, torch.zeros(len(idx), device=self.device))
        bootstrap = torch.zeros(self.config.num_envs, device=self.device)
        return bootstrap.index_copy_(0, index, self.agent.gamma * values)

    def _note_episodes(self, infos: list[dict], t: int) -> None:
        """Note the games that ended at step ``t`` of the rollout (raw full-game returns, from the Monitor)."""
        for i, info in enumerate(infos):
            episode = info.get("episode")
            if episode is not None:
                self.ended_games.append((t, i, float(episode["r"]), int(episode["l"])))

    def _record_episodes(self) -> None:
        """Count and log the rollout's finished games, those of every rank, each at the global env
        step where it ended (in a data-parallel run every rank counts them all, in step, rank, env order)."""
        ranks = gather_games(self.ended_games, self.config.num_envs * self.config.rollout_size, self.context)
        self.ended_games = []
        games = sorted((t, rank, i, r, length) for rank, finished in enumerate(ranks) for t, i, r, length in finished)
        for t, rank, i, episode_return, length in games:
            step = self.episode_end_step(t, i, rank)
            self.state.episodes.add(episode_return)
            self.new_episodes += 1
            self.metrics.scalar("episode/return", episode_return, step)
            self.metrics.scalar("episode/length", length, step)
            self.metrics.scalar("episode/return_mean100", self.state.episodes.mean, step)

    def episode_end_step(self, t: int, i: int, rank: int = 0) -> int:
        """The env step at which env i (of rank ``rank``)'s step t of the rollout falls, counting the
        envs' steps of each rollout step in turn, rank by rank: every episode gets a step of its own
        on the curves."""
        envs = self.config.num_envs
        return self.state.step + t * envs * self.context.world_size + rank * envs + i + 1

    # ------------------------------------------------------------------ training
    def train(self) -> TrainingState:
        """Run until ``num_updates``, Ctrl+C / SIGTERM, or too many non-finite losses in a row.

        ``a2c_last`` is written periodically and always on the way out, and TensorBoard is flushed.
        """
        cfg, st, metrics = self.config, self.state, self.metrics
        metrics.start_progress(planned_steps(cfg, self.context.world_size), st.step, cfg.progress)
        skipped_in_a_row = 0
        tic, tic_step = time.perf_counter(), st.step
        with self.stop:
            try:
                while not self.finished() and not self.context.any(self.stop.requested):
                    # Set every update, so a resumed optimizer state never brings back a stale rate.
                    self.agent.set_lr(scheduled_lr(cfg, st.update, st.step))
                    self.agent.entropy_coeff = scheduled_entropy_coeff(cfg, st.update, st.step)
                    self.new_episodes = 0
                    batch = self.collect()
                    self.notify("on_rollout_end", batch)
                    stats = self.learn(batch)
                    steps = self.env_steps(batch) * self.context.world_size  # the env steps of every rank
                    st.update += 1
                    st.step += steps
                    stats = self.context.mean(stats)  # the losses and rollout statistics of every rank
                    stats["lr"] = self.agent.lr
                    if cfg.entropy_schedule != "constant":
                        stats["entropy_coeff"] = self.agent.entropy_coeff  # logged as train/entropy_coeff
                    self.history.append(stats)

                    if stats["skipped"]:
                        skipped_in_a_row += 1
                        metrics.say(f"warning: non-finite loss at update {st.update}; update skipped")
                    else:
                        skipped_in_a_row = 0
                        metrics.add_update(stats)
                    if self.context.any(skipped_in_a_row >= cfg.max_skipped_updates):
                        self.stop_reason = (f"{skipped_in_a_row} non-finite losses in a row; "
                                            f"stopped with the last good weights")
                        metrics.say(f"error: {self.stop_reason}")
                        break

                    if st.update % cfg.log_interval == 0 and metrics.interval_updates:
                        now = time.perf_counter()
                        fps = (st.step - tic_step) / max(now - tic, 1e-9)
                        tic, tic_step = now, st.step
                        metrics.log_interval(st.step, self.agent.lr, fps)
                    self.notify("on_update_end", batch)
                    metrics.progress(steps, *((st.episodes.mean, st.episodes.count)
                                                             if st.update % 10 == 0 else ()))
            finally:
                try:  # still inside: a second Ctrl+C cannot cut this write short
                    self.save("a2c_last")
                finally:
                    metrics.close()
        if self.stop.requested and not self.stop_reason:
            self.stop_reason = self.stop.reason
        return st

    def finished(self) -> bool:
        """The run has done ``num_updates`` updates, or ``max_env_steps`` env steps where that is set."""
        cfg, st = self.config, self.state
        return st.update >= cfg.num_updates or (cfg.max_env_steps is not None and st.step >= cfg.max_env_steps)

    def learn(self, batch: Batch) -> dict[str, float]:
        """The algorithm's update on the batch (``agent.update``); the callbacks see the batch's loss
        before the weights change (the best-loss rule). The stats to log."""
        return self.agent.update(batch, self.state.update, on_loss=lambda loss: self.notify("on_loss", loss))

    def env_steps(self, batch: Batch) -> int:
        """Env steps that ``batch`` holds: every env, every step of the rollout."""
        return self.config.steps_per_update

    def request_stop(self, signum: int = 0, frame: Any = None) -> None:
        """Finish the current update, then write a2c_last and leave (what Ctrl+C and SIGTERM do)."""
        self.stop.request(signum, frame)

    def save(self, name: str, full: bool = True) -> str:
        """Write checkpoint ``name`` of the run as it stands (see ``checkpoints.py``)."""
        return self.checkpoints.save(name, self.state, full)


def scheduled_lr(config: Config, update: int, step: int = 0) -> float:
    """Learning rate at ``update`` (and env ``step``): constant, or decayed linearly to 0 at the end
    of the run (``num_updates``, or ``max_env_steps`` if that comes first), the decay beginning once
    the share ``lr_decay_start`` of the run is done, from the share ``lr_decay_from`` of the rate."""
    if config.lr_schedule != "linear":
        return config.lr
    return linear_schedule(config.lr, run_progress(config, update, step), config.lr_decay_start,
                           config.lr_decay_from)


def scheduled_entropy_coeff(config: Config, update: int, step: int = 0) -> float:
    """Weight of the entropy bonus at ``update`` (and env ``step``): constant, or decayed linearly to
    0 at the end of the run, as the learning rate, the decay beginning once the share
    ``entropy_decay_start`` of the run is done."""
    if config.entropy_schedule == "linear":
        return linear_schedule(config.entropy_coeff, run_progress(config, update, step),
                               config.entropy_decay_start)
    return config.entropy_coeff


def run_progress(config: Config, update: int, step: int = 0) -> float:
    """How far the run is at ``update`` (and env ``step``): 0 at the start, 1 at ``num_updates`` or
    at ``max_env_steps`` if that comes first."""
    progress = update / config.num_updates
    if config.max_env_steps is not None:
        progress = max(progress, step / config.max_env_steps)
    return progress


def linear_schedule(base: float, progress: float, start: float = 0.0, share: float = 1.0) -> float:
    """``base`` until ``progress`` reaches ``start``; from there ``share * base``, falling linearly
    to 0 at progress 1 (by default from ``base`` at progress 0)."""
    if progress < start:
        return base
    return base * share * max(0.0, 1.0 - (progress - start) / (1.0 - start))


def planned_steps(config: Config, world_size: int = 1) -> int:
    """The env steps a run is planned for: ``num_updates`` updates of ``world_size`` ranks, or fewer
    with ``max_env_steps``."""
    if config.max_env_steps is None:
        return config.total_steps * world_size
    return min(config.total_steps * world_size, config.max_env_steps)


def save_settings(config: Config, run_dir: str, writer: Any = None) -> None:
    """The run's full settings as JSON in the run directory and as TensorBoard text."""
    text = json.dumps(config.to_dict(), indent=2, sort_keys=True)
    atomic_write(os.path.join(run_dir, "config.json"), lambda f: f.write(text + "\n"), binary=False)
    if writer is not None:
        writer.add_text("settings", "```\n" + text + "\n```", 0)
