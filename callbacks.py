"""What the training loop does besides training: checkpoints, periodic evaluation, and what it logs
of the network and the envs. Each is a callback (as in stable-baselines3), so the loop in
``runner.Runner.train`` reads as the algorithm, and a new diagnostic is a class, not an edit there.

The loop calls every callback, in the order of its list (``default_callbacks``), at these points,
whatever the algorithm and its collector (A2C's and PPO's rollouts, GRPO's rounds)::

    on_reset(runner, infos)         the envs were reset (their reset infos)
    on_step(runner, infos, t)       after step t of the batch (the infos of the envs whose step it holds)
    on_rollout_end(runner, batch)   after the batch was collected, before the update
    on_loss(runner, loss)           with the update's loss, before the weights change (an update
                                    that takes no step, such as GRPO's without a signal, has none)
    on_update_end(runner, batch)    after the update, once the counters have moved on

``runner`` gives the state (``runner.state``: update, env step, the last games), the agent, the
envs' current step (``runner.obs``...), the metrics writer and the checkpoints.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from diagnostics import core_health

# Below this spread across envs (with most gates saturated) the LSTM's output no longer depends on
# the frames: 0.007 for a fresh network on Pong, 1e-5 and less for one whose gates saturated.
DEAD_CORE_OUTPUT_STD = 1e-4


class Callback:
    """Does nothing at every point of the loop; a callback overrides the points it needs."""

    def on_reset(self, runner: Any, infos: list[dict]) -> None:
        pass

    def on_step(self, runner: Any, infos: list[dict], t: int) -> None:
        pass

    def on_rollout_end(self, runner: Any, batch: Any) -> None:
        pass

    def on_loss(self, runner: Any, loss: float) -> None:
        pass

    def on_update_end(self, runner: Any, batch: Any) -> None:
        pass


def every(interval: int, update: int) -> bool:
    """Whether update number ``update`` (counted from 1) ends an interval of ``interval`` updates (0: never)."""
    return bool(interval) and update % interval == 0


class RewardParts(Callback):
    """Per-episode sums of any extra reward the agent mixed in (e.g. curiosity), by name.

    Summed over the same full-game episodes as the raw returns and logged when they end, as
    ``episode/return_<name>``; plus the rollout's mean and max as ``rewards/<name>_mean|max``
    every ``log_interval`` updates.
    """

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.episode_ends: list[tuple[int, int]] = []  # (step in rollout, env) where a full game ended, in time order

    def on_step(self, runner: Any, infos: list[dict], t: int) -> None:
        if t == 0:
            self.episode_ends.clear()
        self.episode_ends += [(t, i) for i, info in enumerate(infos) if info.get("episode") is not None]

    def on_rollout_end(self, runner: Any, batch: Any) -> None:
        if not getattr(batch, "reward_parts", None):  # none in A2C without curiosity, nor in GRPO's rounds
            return
        state, metrics = runner.state, runner.metrics
        end_step = state.step + runner.steps_per_update  # the rollout's last env step
        for name, rewards in batch.reward_parts.items():
            sums = self.sums.setdefault(name, torch.zeros(runner.config.num_envs))
            rewards = rewards.detach().cpu()
            ended = 0
            for t in range(rewards.shape[0]):
                sums += rewards[t]
                while ended < len(self.episode_ends) and self.episode_ends[ended][0] == t:
                    i = self.episode_ends[ended][1]
                    metrics.scalar(
                        f"episode/return_{name}", float(sums[i]), runner.episode_end_step(t, i, runner.context.rank)
                    )
                    sums[i] = 0.0
                    ended += 1
            if (state.update + 1) % runner.config.log_interval == 0:
                metrics.scalar(f"rewards/{name}_mean", float(rewards.mean()), end_step)
                metrics.scalar(f"rewards/{name}_max", float(rewards.max()), end_step)


class BestCheckpoints(Callback):
    """``a2c_best_reward``: the weights that played a rollout after which the mean of the last 100
    games peaked; ``a2c_best_loss``: the weights of the lowest loss. Both before the update changes
    the weights (``checkpoints.Checkpoints``)."""

    def on_rollout_end(self, runner: Any, batch: Any) -> None:
        runner.checkpoints.rollout_played(runner.state, games_ended=runner.new_episodes > 0)

    def on_loss(self, runner: Any, loss: float) -> None:
        runner.checkpoints.loss_computed(runner.state, loss)


class CoreHealth(Callback):
    """``core/*`` every ``log_interval`` updates: the health of the encoder and the recurrent core on
    the envs' current step (``diagnostics.core_health``); warns once if the LSTM has collapsed to
    one output for all frames."""

    def __init__(self) -> None:
        self.warned = False

    def on_update_end(self, runner: Any, batch: Any) -> None:
        config = runner.config
        if not every(config.log_interval, runner.state.update) or config.num_envs < 2 or not runner.context.is_main:
            return
        health = core_health(runner.agent.model, runner.obs, runner.recurrent_state, runner.episode_starts)
        for name, value in health.items():
            runner.metrics.scalar(f"core/{name}", value, runner.state.step)
        if not self.warned and health.get("gate_saturation", 0.0) > 0.5 and health["output_std"] < DEAD_CORE_OUTPUT_STD:
            self.warned = True
            runner.metrics.say(
                f"warning: the LSTM gives the same output for every env (spread "
                f"{health['output_std']:.1e}, {health['gate_saturation']:.0%} of its gates saturated): "
                f"the policy no longer sees the screen; see core/ in TensorBoard"
            )


class RolloutHistograms(Callback):
    """``rollout/<name>`` histograms of the batch's fields every ``histogram_interval`` updates."""

    def __init__(self, names: tuple[str, ...] = ("advantages", "values", "returns")) -> None:
        self.names = names

    def on_update_end(self, runner: Any, batch: Any) -> None:
        if every(runner.config.histogram_interval, runner.state.update):
            for name in self.names:
                runner.metrics.histogram(f"rollout/{name}", getattr(batch, name), runner.state.step)


class PhysicsHistograms(Callback):
    """``physics/<name>``: histograms of the physics drawn for the episodes begun since the last ones
    (``--randomize-domain``; a switch such as LunarLander's wind as 0 or 1), every
    ``histogram_interval`` updates."""

    def __init__(self) -> None:
        self.drawn: list[dict[str, Any]] = []

    def on_reset(self, runner: Any, infos: list[dict]) -> None:
        self.drawn += [info["physics"] for info in infos if "physics" in info]

    def on_step(self, runner: Any, infos: list[dict], t: int) -> None:
        self.on_reset(runner, infos)

    def on_update_end(self, runner: Any, batch: Any) -> None:
        if not every(runner.config.histogram_interval, runner.state.update) or not self.drawn:
            return
        for name in self.drawn[0]:
            values = torch.tensor([float(p[name]) for p in self.drawn])
            runner.metrics.histogram(f"physics/{name}", values, runner.state.step)
        self.drawn = []


class ADRRanges(Callback):
    """``adr/<name>_low`` and ``adr/<name>_high``: the ranges of ``--randomize-domain adr`` every
    ``log_interval`` updates."""

    def on_update_end(self, runner: Any, batch: Any) -> None:
        if getattr(runner, "adr", None) is not None and every(runner.config.log_interval, runner.state.update):
            for name, value in runner.adr.scalars().items():
                runner.metrics.scalar(f"adr/{name}", value, runner.state.step)


class Evaluation(Callback):
    """Every ``eval_interval`` updates, play the current policy on the runner's evaluator (envs of
    its own, ``evaluate.PeriodicEvaluator``): ``eval/return_{mean,std,min,max}``, and the best
    evaluated weights kept as ``a2c_best_eval``."""

    def on_update_end(self, runner: Any, batch: Any) -> None:
        if runner.evaluator is not None and every(runner.config.eval_interval, runner.state.update):
            self.evaluate(runner)

    @staticmethod
    def evaluate(runner: Any) -> float:
        scores = list(runner.evaluator(runner.agent.model))
        mean = sum(scores) / len(scores)
        step = runner.state.step
        for name, value in (("mean", mean), ("std", float(np.std(scores))), ("min", min(scores)), ("max", max(scores))):
            runner.metrics.scalar(f"eval/return_{name}", value, step)
        runner.metrics.say(f"evaluation at {step} env steps: mean score {mean:.2f} over {len(scores)} games")
        runner.checkpoints.evaluated(runner.state, mean)
        return mean


class LastCheckpoint(Callback):
    """``a2c_last``, the full state to resume from, every ``checkpoint_interval`` updates (the loop
    also writes it on the way out, however it ends)."""

    def on_update_end(self, runner: Any, batch: Any) -> None:
        if every(runner.config.checkpoint_interval, runner.state.update):
            runner.save("a2c_last")


def default_callbacks(histograms: tuple[str, ...] = ("advantages", "values", "returns")) -> list[Callback]:
    """Every run's callbacks, in the order the loop calls them; ``histograms``: the batch fields
    logged as ``rollout/<name>``."""
    return [
        RewardParts(),
        BestCheckpoints(),
        CoreHealth(),
        RolloutHistograms(histograms),
        PhysicsHistograms(),
        ADRRanges(),
        Evaluation(),
        LastCheckpoint(),
    ]
