"""The training loop: collect a batch, update the agent, log, checkpoint.

One update reads::

    collector.collect -> agent.update -> log

The collector is the algorithm's way of gathering a batch (:class:`RolloutCollector`: A2C's and
PPO's rollouts of ``rollout_size`` steps; ``grpo.GroupCollector``: rounds of whole episodes); the
runner owns the envs and their live step (observations, recurrent state, episode starts) and
gives the collector one way to reset them and one way to step them, so that every algorithm's
games are logged alike and every callback point (``callbacks.py``: checkpoints, periodic
evaluation, the network's health, reward parts, histograms) fires for every algorithm.

A rollout is collected without gradients; the update (``A2CAgent.loss``) runs the network over
the stored observations again, from the recurrent state the rollout started with. The speed
setting ``keep_graph`` (on by default; docs/speed.md) collects with gradients instead and trains
through that forward pass, which gives the same numbers without the second pass. The live
recurrent state is detached at each rollout boundary, so gradients never cross into an earlier
rollout.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv

import normalize
from agent import Agent, RolloutAgent
from callbacks import Callback, default_callbacks
from checkpoints import Checkpoints, TrainingState
from config import Config
from control import RunContext, StopSignals
from devices import HostToDevice
from distributed import gather_games, shared_statistics
from metrics import Metrics
from model import State
from storage import Batch, RolloutStorage
from utils import atomic_write

HISTORY_LENGTH = 1_000  # updates whose stats Runner.history keeps
# What an env's info at the step that ended an episode says of the next one, begun by its autoreset
# (gym_vec_env: the physics drawn for it): not shown to the callbacks where that episode is not played.
NEXT_EPISODE_INFO = ("physics",)


# Plays the current policy for whole games on envs of its own and returns their raw scores.
Evaluator = Callable[[torch.nn.Module], Sequence[float]]


class Collector(Protocol):
    """How an algorithm gathers the batch of one update, through the runner's :meth:`Runner.reset`
    and :meth:`Runner.step`. Built with the runner (``collector(runner)``) once its envs are reset."""

    histograms: tuple[str, ...]  # the batch's fields logged as rollout/<name> histograms

    def collect(self, runner: "Runner") -> Any:
        """One batch for ``runner.agent.update``."""
        ...


@dataclass
class EnvStep:
    """What one step of every env gave a collector (the next observation is ``runner.obs``)."""

    rewards: torch.Tensor  # [N] float on the device
    dones: torch.Tensor  # [N] float on the device: 1 where the action ended env i's episode
    playing: torch.Tensor  # [N] float on the device: 1 where env i's step belongs to the batch
    ended: np.ndarray  # [N] bool on the host: the dones, for decisions that need no device read
    infos: list[dict]  # the envs' infos (terminal observations, time limits, finished games)


class Runner:
    """Drives a vector env with an agent for ``config.num_updates`` updates.

    ``collector``: the class of the algorithm's collector (:class:`RolloutCollector` unless given),
    built with the runner once the envs are reset.
    ``evaluator``, when given, is called every ``config.eval_interval`` updates with the network
    (see :class:`evaluate.PeriodicEvaluator` and :class:`callbacks.Evaluation`). ``callbacks``:
    what the loop calls besides training (``callbacks.default_callbacks()`` unless given).
    """

    def __init__(
        self,
        agent: Agent,
        envs: VecEnv,
        config: Config,
        run_dir: str,
        state: Optional[TrainingState] = None,
        writer: Any = None,
        evaluator: Optional[Evaluator] = None,
        context: RunContext = RunContext(),
        callbacks: Optional[list[Callback]] = None,
        adr: Any = None,
        collector: Optional[type] = None,
    ) -> None:
        collector = collector or RolloutCollector
        self.agent, self.envs, self.config, self.run_dir = agent, envs, config, run_dir
        self.evaluator = evaluator
        self.adr = adr  # the ranges of --randomize-domain adr (adr.ADR), which the envs draw from
        self.callbacks = default_callbacks(collector.histograms) if callbacks is None else callbacks
        self.device = agent.device
        self.state = state or TrainingState()
        self.checkpoints = Checkpoints(
            run_dir, agent, config, enabled=context.is_main, normalizer=self.env_state, world_size=context.world_size
        )
        self.context = context
        # Env steps of one rollout over every rank (config.num_envs is per rank): the step axis is global.
        self.steps_per_update = config.steps_per_update * context.world_size
        # The envs' arrays onto the device (devices.HostToDevice: no copy on the CPU; on a GPU
        # asynchronous copies from page-locked buffers): the frames, each step's rewards and dones
        # in one copy, and the rare arrays of a time limit.
        self.obs_to_device = HostToDevice(self.device)
        self.step_to_device = HostToDevice(self.device)
        self.rare_to_device = HostToDevice(self.device)
        # Normalizer and curiosity statistics, merged over the ranks after every batch (from the reset on).
        self.statistics = shared_statistics(envs, agent, context)
        self.stop = StopSignals()
        self.stop_reason = ""
        self.metrics = Metrics(writer, enabled=context.is_main)
        self.new_episodes = 0  # episodes finished in the current update (on every rank)
        self.ended_games: list[tuple[int, int, float, int]] = []  # (step, place, return, length) of the batch's games
        self.steps_before = [0]  # env steps this rank played in the batch before each of its steps
        # The stats of the last updates, for tests and callers; bounded, so a long run's memory stays flat.
        self.history: deque[dict[str, float]] = deque(maxlen=HISTORY_LENGTH)
        self.reset()  # the live step: obs, recurrent_state, episode_starts
        self.collector: Collector = collector(self)

    def env_state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the envs: the normalizers' statistics, and ADR's ranges."""
        return {**normalize.state(self.envs), **({"adr": self.adr.state_dict()} if self.adr is not None else {})}

    def notify(self, point: str, *args: Any) -> None:
        """Call every callback at ``point`` of the loop (see ``callbacks.py``)."""
        for callback in self.callbacks:
            getattr(callback, point)(self, *args)

    # ------------------------------------------------------------------ the envs, for the collectors
    def reset(self, seeds: Optional[Sequence[int]] = None) -> None:
        """Reset every env (env i with ``seeds[i]`` where given, for this reset only): a fresh
        episode and recurrent state everywhere."""
        if seeds is not None:
            self.envs.set_reset_seeds(seeds)
        self.recurrent_state = self.agent.model.initial_state(self.config.num_envs, self.device)
        # The one place where observations (numpy) become torch (see obs_to_device).
        self.obs = self.obs_to_device(self.envs.reset())
        self.notify("on_reset", getattr(self.envs, "reset_infos", []))
        self.episode_starts = torch.ones(self.config.num_envs, device=self.device)

    def step(self, actions: torch.Tensor, next_state: State, t: int, playing: Optional[np.ndarray] = None) -> EnvStep:
        """Step every env with ``actions`` (step ``t`` of the batch); the envs' next observation,
        ``next_state`` and the episodes that start become the live step.

        ``playing`` (bool ``[N]``; None: all): the envs whose step belongs to the batch, the others
        playing on outside it (a GRPO member whose episode has ended). Only their steps count on
        the env-step axis, only their finished games are logged, and only their infos reach the
        callbacks' ``on_step`` (less what an ended episode's info says of the next one, which
        such an env does not play).
        """
        # The step's one read from the device: the envs need the actions.
        obs, rewards, dones, infos = self.envs.step(actions.cpu().numpy())
        return self.took_step(obs, rewards, dones, infos, next_state, t, playing)

    def took_step(
        self,
        obs: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        infos: list[dict],
        next_state: State,
        t: int,
        playing: Optional[np.ndarray] = None,
    ) -> EnvStep:
        """What :meth:`step` does once the envs have stepped: for a collector that steps them itself
        (overlap.py)."""
        ended = dones.astype(bool)
        if playing is None:
            rewards_t, dones_t = self.step_to_device(np.stack([rewards, dones]).astype(np.float32, copy=False))
            playing_t = torch.ones_like(dones_t)
            seen = infos
        else:
            rewards_t, playing_t, dones_t = self.step_to_device(
                np.stack([rewards, playing, dones]).astype(np.float32, copy=False)
            )
            seen = [
                ({k: v for k, v in info.items() if k not in NEXT_EPISODE_INFO} if ended[i] else info)
                if playing[i]
                else {}
                for i, info in enumerate(infos)
            ]
        self._note_step(infos, t, np.ones(len(infos), bool) if playing is None else playing)
        self.notify("on_step", seen, t)
        self.obs, self.episode_starts, self.recurrent_state = self.obs_to_device(obs), dones_t, next_state
        return EnvStep(rewards_t, dones_t, playing_t, ended, infos)

    def detach_state(self) -> None:
        """Truncated backpropagation through time: no gradient flows from here into earlier steps."""
        self.recurrent_state = tuple(s.detach() for s in self.recurrent_state)

    def collect(self) -> Any:
        """The algorithm's batch for one update (its collector's), with the batch's games logged."""
        self.ended_games, self.steps_before = [], [0]
        batch = self.collector.collect(self)
        self._record_games()
        self.statistics.merge()
        return batch

    def _note_step(self, infos: list[dict], t: int, playing: np.ndarray) -> None:
        """Count step ``t``'s env steps (those of the envs ``playing``) and note the games that
        ended there (raw full-game returns, from the Monitor), each with its place among them."""
        for place, i in enumerate(np.flatnonzero(playing)):
            episode = infos[i].get("episode")
            if episode is not None:
                self.ended_games.append((t, place, float(episode["r"]), int(episode["l"])))
        self.steps_before.append(self.steps_before[-1] + int(playing.sum()))

    def _record_games(self) -> None:
        """Count and log the batch's finished games, those of every rank, each at the global env
        step where it ended (in a data-parallel run every rank counts them all, in step, rank, env order)."""
        ranks = gather_games(self.ended_games, max(self.batch_steps, 1), self.context)
        games = sorted(
            (t, rank, place, r, length) for rank, finished in enumerate(ranks) for t, place, r, length in finished
        )
        for t, rank, place, episode_return, length in games:
            step = self.episode_end_step(t, place, rank)
            self.state.episodes.add(episode_return)
            self.new_episodes += 1
            self.metrics.scalar("episode/return", episode_return, step)
            self.metrics.scalar("episode/length", length, step)
            self.metrics.scalar("episode/return_mean100", self.state.episodes.mean, step)

    @property
    def batch_steps(self) -> int:
        """The env steps this rank has played in the batch so far."""
        return self.steps_before[-1]

    def episode_end_step(self, t: int, place: int, rank: int = 0) -> int:
        """The env step at which a game ended: at step t of the batch, in the env at ``place`` among
        those playing (env ``place`` when all play), of rank ``rank``. The envs' steps are counted
        in turn, step by step, rank by rank (every rank plays as many), env by env: every game gets
        a step of its own on the curves."""
        playing = self.steps_before[t + 1] - self.steps_before[t]
        world = self.context.world_size
        return self.state.step + self.steps_before[t] * world + rank * playing + place + 1

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
                    steps = self.batch_steps * self.context.world_size  # the env steps of every rank
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
                        self.stop_reason = (
                            f"{skipped_in_a_row} non-finite losses in a row; stopped with the last good weights"
                        )
                        metrics.say(f"error: {self.stop_reason}")
                        break

                    if st.update % cfg.log_interval == 0 and metrics.interval_updates:
                        now = time.perf_counter()
                        fps = (st.step - tic_step) / max(now - tic, 1e-9)
                        tic, tic_step = now, st.step
                        metrics.log_interval(st.step, self.agent.lr, fps)
                    self.notify("on_update_end", batch)
                    metrics.progress(steps, *((st.episodes.mean, st.episodes.count) if st.update % 10 == 0 else ()))
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

    def learn(self, batch: Any) -> dict[str, float]:
        """The algorithm's update on the batch (``agent.update``); the callbacks see the batch's loss
        before the weights change (the best-loss rule). The stats to log."""
        return self.agent.update(batch, self.state.update, on_loss=lambda loss: self.notify("on_loss", loss))

    def request_stop(self, signum: int = 0, frame: Any = None) -> None:
        """Finish the current update, then write a2c_last and leave (what Ctrl+C and SIGTERM do)."""
        self.stop.request(signum, frame)

    def save(self, name: str, full: bool = True) -> str:
        """Write checkpoint ``name`` of the run as it stands (see ``checkpoints.py``)."""
        return self.checkpoints.save(name, self.state, full)


class RolloutCollector:
    """A2C's and PPO's batches: rollouts of ``rollout_size`` steps of every env, stored in a
    :class:`storage.RolloutStorage`, which the agent turns into returns and advantages
    (``agent.make_batch``). The envs play on across rollouts, and the recurrent state with them."""

    histograms = ("advantages", "values", "returns")

    def __init__(self, runner: Runner) -> None:
        envs, config = runner.envs, runner.config
        obs_dtype = torch.from_numpy(np.zeros(0, envs.observation_space.dtype)).dtype
        self.storage = RolloutStorage(
            config.rollout_size,
            config.num_envs,
            envs.observation_space.shape,
            runner.device,
            obs_dtype,
            action_shape=envs.action_space.shape or (),
        )

    def collect(self, runner: Runner) -> Batch:
        """Step every env ``rollout_size`` times; the agent turns the rollout into a batch with returns."""
        agent: RolloutAgent = runner.agent
        runner.detach_state()
        self.storage.start(runner.recurrent_state)
        agent.draw_exploration(runner.envs.num_envs)
        with agent.model.casting_once():
            self.collect_steps(runner)
        return agent.make_batch(self.storage)

    def collect_steps(self, runner: Runner) -> None:
        """The rollout itself: ``rollout_size`` steps of every env, and the values to bootstrap from."""
        agent, storage = runner.agent, self.storage
        for t in range(storage.rollout_size):
            obs, starts = runner.obs, runner.episode_starts
            actions, log_probs, values, next_state, step = self.act_and_step(runner, t)
            bootstrap = self.truncation_bootstrap(runner, step, next_state)
            storage.insert(t, obs, starts, actions, values, step.rewards, step.dones, bootstrap, log_probs)
        storage.finish(runner.obs, agent.value(runner.obs, runner.recurrent_state, runner.episode_starts))

    def act_and_step(self, runner: Runner, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State, EnvStep]:
        """Step ``t``: the agent acts for every env from the live step, and the envs take the actions;
        the actions, their log-probabilities, the values (detached), the next state and the envs' step."""
        agent, keep_graph = runner.agent, runner.config.speed.keep_graph
        act = agent.act_with_graph if keep_graph else agent.act
        *outputs, next_state = act(runner.obs, runner.recurrent_state, runner.episode_starts)
        actions, log_probs, values = self.kept(runner, outputs)
        return actions, log_probs, values, next_state, runner.step(actions, next_state, t)

    def kept(self, runner: Runner, outputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The acting pass's actions, log-probabilities and values (detached). With ``--keep-graph``, a speed
        setting, the pass also gave its logits, and the update will train through them and the values."""
        if not runner.config.speed.keep_graph:
            actions, log_probs, values = outputs
            return actions, log_probs, values
        actions, log_probs, logits, values = outputs
        self.storage.keep_outputs(logits, values)
        return actions, log_probs, values.detach()

    @staticmethod
    def truncation_bootstrap(runner: Runner, step: EnvStep, next_state: State) -> Optional[torch.Tensor]:
        """A time limit is not a death: ``gamma * V(terminal_obs)`` for each truncated env, else 0."""
        infos = step.infos
        idx = [
            i
            for i, info in enumerate(infos)
            if step.ended[i] and info.get("TimeLimit.truncated", False) and "terminal_observation" in info
        ]
        if not idx:
            return None
        terminal_obs = runner.rare_to_device(np.stack([infos[i]["terminal_observation"] for i in idx]))
        index = runner.rare_to_device(np.asarray(idx, dtype=np.int64))
        # The terminal observation continues the same episode: it reads the state that step produced.
        state = tuple(s.index_select(0, index) for s in next_state)
        values = runner.agent.value(terminal_obs, state, torch.zeros(len(idx), device=runner.device))
        bootstrap = torch.zeros(len(infos), device=runner.device)
        return bootstrap.index_copy_(0, index, runner.agent.gamma * values)


def scheduled_lr(config: Config, update: int, step: int = 0) -> float:
    """Learning rate at ``update`` (and env ``step``): constant, or decayed linearly to 0 at the end
    of the run (``num_updates``, or ``max_env_steps`` if that comes first), the decay beginning once
    the share ``lr_decay_start`` of the run is done, from the share ``lr_decay_from`` of the rate."""
    if config.lr_schedule != "linear":
        return config.lr
    return linear_schedule(config.lr, run_progress(config, update, step), config.lr_decay_start, config.lr_decay_from)


def scheduled_entropy_coeff(config: Config, update: int, step: int = 0) -> float:
    """Weight of the entropy bonus at ``update`` (and env ``step``): constant, or decayed linearly to
    0 at the end of the run, as the learning rate, the decay beginning once the share
    ``entropy_decay_start`` of the run is done."""
    if config.entropy_schedule == "linear":
        return linear_schedule(config.entropy_coeff, run_progress(config, update, step), config.entropy_decay_start)
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
