"""Training throughput of this project against stable-baselines3's A2C, in one run: an Atari game
or a vector-observation env, chosen by ``--env-name``.

Every trainer learns the same env with the same number of envs for the same number of env steps,
with the same torch thread count (torch's default, the number of cores, unless ``--threads`` sets
it). Each timed run happens in a fresh process of its own, so none inherits another's memory,
allocator state or warmed caches. The trainers, for an Atari game (default ``PongNoFrameskip-v4``):

* ``ours recurrent``: the default configuration of a real run (``Config()``: universe encoder
  + LSTM, channels-last, malloc keeping freed memory) on the env path ``--ours-vec-env``
  (default ``ale``, ale-py's C++ vector env);
* ``ours feed-forward (nature)``: the fast configuration, ``arch="nature", recurrent=False``,
  otherwise the same;
* with ``--bf16``, each of ours again with its encoder in bfloat16 (``Speed.bf16``), named
  ``... bf16``: a setting that changes the arithmetic, so it is measured beside, not instead;
* ``sb3``: stable-baselines3's A2C with the RL Zoo's Atari settings (``CnnPolicy``) on SB3's own
  env pipeline (``make_atari_env`` + ``VecFrameStack``, vector env class ``--sb3-vec-env``),
  trained by ``sb3_reference.train``, the one SB3 training loop of bench/;
* with ``--ablation``, the recurrent default with one optimization removed at a time, to show
  what each bought: ``recurrent, dummy envs`` (SB3's wrappers in this process instead of the
  fast env path), ``recurrent, no channels-last``, ``recurrent, default malloc``,
  ``recurrent, rollout run again`` (acting without gradients, then the whole rollout through
  the network again in the update, instead of training through the forward pass kept from
  collecting) and ``recurrent, none of them`` (all four removed, and the encoder taking the
  update's 80 frames in one pass instead of in passes of ``Speed.encoder_chunk``: the
  starting point before the speed work); and with ``--bf16`` each
  bfloat16 trainer of ours without its single cast a rollout, named ``..., a cast a pass`` (its
  encoder's weights cast to bfloat16 at every pass, as autocast does outside
  ``ActorCritic.casting_once``). ``--ours feedforward --bf16 --ablation`` measures only the
  feed-forward ones of these.

For any other env (a flat vector observation: ``--env-name LunarLander-v3``, CartPole-v1, ...):

* ``ours (env defaults)``: what ``python main.py --env-name ENV --num-envs N`` trains (the env's
  own defaults, e.g. an MLP of 64-64 tanh for the actor and one for the critic), its envs in
  gymnasium's vector env in this process (``--ours-vec-env subproc``: one process an env);
* ``sb3``: SB3's A2C with ``MlpPolicy`` and the Zoo's LunarLander settings, its ``DummyVecEnv``.

``--preset NAME`` (repeatable) adds ``ours --preset NAME``: what ``python main.py --env-name GAME
--preset NAME`` trains, with its own env count and frame size (``--num-envs`` where the preset names
none); ``--preset "NAME FLAGS"`` types main.py's FLAGS beside it (``--preset "fast-cpu --hidden-size
256"``: the preset with one of its settings changed, measured beside the preset itself); with
``--env-only``, also ``envs only (--preset NAME)``, its envs alone (the same count and frame size),
and ``network alone (--preset NAME)``, the same trainer on envs that cost nothing
(:class:`StillEnvs`: every step returns the frames of one real reset, reward 0, no game ends), which
times its network, storage and update alone. The summary gives the preset's training throughput as
a share of its envs' rate, against the target of 50%, its ratio to SB3 and to the fast
configuration, and the network's rate beside its envs': a loop that steps the envs and then runs
the network, one after the other, trains at most at ``1 / (1/envs + 1/network)``, and so reaches
half the envs' rate only when the network alone is at least as fast as the envs. With ``--bf16``,
``ours --preset NAME bf16`` (and with ``--env-only`` its ``network alone (--preset NAME) bf16``) is
the preset with ``--bf16`` typed beside it, judged against the same envs, and the summary gives what
the bfloat16 encoder bought it.

``--one-core`` (with ``--env-only`` and ``--preset``) adds each preset's envs alone and its network
alone pinned to one core on one torch thread (``..., one core``; Linux), and the summary gives the
most that all the cores this process may use could train at with them, however a loop shared the
two out: ``cores / (1/envs + 1/network)``, each on one core, as though no core were ever idle and
sharing cost nothing (a core does no more beside another than alone); and the rate on one core its
network alone would need for that most to reach 50% of its envs' rate on all the cores.

``--ablation``, ``--bf16``, ``--plain-lstm``, ``--preset`` and ``--ours`` are for Atari games.

With ``--env-only``, one more row: ``envs only``, ours' envs (the same env path, env count and env
steps) stepped with uniformly random actions and no network, the rate the envs alone allow; each
trainer of ours is then also given as a share of it (training throughput as a share of the
env-only rate).

Malloc: a real run of ours calls ``perf.keep_freed_memory()`` (``main.pick_device``), so glibc
keeps freed activations for reuse instead of unmapping them; each run of ours does the same.
SB3 (and the ``default malloc`` ablations) run with glibc's untouched defaults, as SB3's users
run it: a fresh process, nothing changed. Every run starts with the environment as this script
found it.

Only the training loop is timed:

* ours: ``Runner(...).train()`` after ``envs.make_vec_env`` and ``Runner(...)`` (which resets
  the envs) are built: collection, returns, gradient updates and the checkpoints the runner
  writes on its own (best loss, best reward, last), as in a real run without TensorBoard;
* SB3: ``model.learn(total_timesteps=...)`` after ``A2C(...)`` is built and its envs are reset;
* envs only: the stepping loop, after the envs are built and reset;
* network alone: as ours, on :class:`StillEnvs` built from the reset real envs (closed before timing).

The trainers are run in turn, ``--repeats`` rounds (ours recurrent, ours feed-forward, SB3, the
ablations, then again), after one untimed warm-up round (``--warmup-steps``), and the median of
each is reported, so that the drift of a shared, noisy machine hits all of them alike. Absolute
numbers move from run to run; the ratios measured within one run are what to compare. Printed
after the table: each of ours over SB3 (``ratio (ours recurrent / sb3): 1.23x``), whether the
Atari targets are met (recurrent >= 1.3x and feed-forward >= 2x SB3's env steps/s, the bf16
feed-forward row held to the same 2x), with ``--ablation`` the speed-up of the recurrent default
over each of its ablation rows and of each bfloat16 trainer over its ``a cast a pass`` row, and
with ``--env-only`` each of ours as a share of the env-only rate.

Memory: the table gives the peak RSS of each trainer's process (the largest over its runs;
Python, torch and the other libraries every run loads included), and the last lines the
largest of all and what subproc env workers held, if any.

    python bench/throughput.py                          # Pong, 16 envs: ours (recurrent, feed-forward) vs SB3
    python bench/throughput.py --ablation               # and what each optimization of the default bought
    python bench/throughput.py --env-only               # and the rate of the envs alone, each of ours a share of it
    python bench/throughput.py --ours recurrent --plain-lstm   # and what the layer-normalized LSTM costs
    python bench/throughput.py --ours feedforward --bf16   # the fast configuration, float32 and bfloat16
    python bench/throughput.py --ours feedforward --bf16 --ablation   # and what the single cast bought
    python bench/throughput.py --ours feedforward --preset fast-cpu --env-only   # the CPU preset, its envs, its network
    python bench/throughput.py --ours none --no-sb3 --preset fast-cpu --preset "fast-cpu --hidden-size 256"
    python bench/throughput.py --ours none --no-sb3 --preset fast-cpu --env-only --one-core   # and what the cores allow
    python bench/throughput.py --steps 20000 --repeats 5 --threads 1 --sb3-vec-env subproc
    python bench/throughput.py --env-name LunarLander-v3 --steps 50000 --repeats 3 --threads 1   # a vector env
    python bench/throughput.py --env-only --no-sb3 --ours recurrent --ours-vec-env dummy        # another env path
    python bench/throughput.py --cuda --num-envs 64             # on a GPU: networks there, envs on the CPU
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.dirname(os.path.abspath(__file__))):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from stable_baselines3.common.vec_env import VecEnv  # noqa: E402

import sb3_reference  # noqa: E402
from algorithms import make_agent  # noqa: E402
from config import Config, Speed, with_settings  # noqa: E402
from envs import VEC_ENV_CHOICES, VEC_ENVS, action_size, check_env_id, is_atari, make_vec_env  # noqa: E402
from runner import Runner  # noqa: E402
from perf import keep_freed_memory  # noqa: E402
from recipes import PRESETS  # noqa: E402
from seeds import seed_everything  # noqa: E402
from utils import UsageError  # noqa: E402

OURS_RECURRENT, OURS_FEEDFORWARD, SB3 = "ours recurrent", "ours feed-forward (nature)", "sb3"
OURS_PLAIN = "ours recurrent, plain LSTM"  # --plain-lstm: torch's LSTMCell, heads on its output only
OURS_DEFAULTS = "ours (env defaults)"  # a vector env: what main.py trains on it by default
ENV_ONLY = "envs only"  # --env-only: ours' envs stepped with random actions, no network
PRESET = "ours --preset "  # --preset NAME: the trainer "ours --preset NAME", its envs alone, its network alone
NETWORK_ONLY = "network alone"  # --preset NAME --env-only: the preset's trainer on StillEnvs
ONE_CORE = ", one core"  # --one-core: the suffix of a preset's envs alone and network alone pinned to one core
PRESET_SHARE = 0.5  # --preset: its training throughput as a share of its envs' own rate, at least
BF16 = " bf16"  # the suffix of a trainer of ours with its encoder in bfloat16 (--bf16)
TARGETS = {OURS_RECURRENT: ("recurrent", 1.3), OURS_FEEDFORWARD: ("feed-forward", 2.0)}  # x SB3's steps/s
OPTIONAL_TARGETS = {OURS_FEEDFORWARD + BF16: ("feed-forward bf16", 2.0)}  # judged only when measured

# The optimizations of the recurrent default, each as the train_ours arguments that take it away (--ablation).
OPTIMIZATIONS = {"dummy envs": {"vec_env": "dummy"},
                 "no channels-last": {"channels_last": False},
                 "default malloc": {"keep_freed": False},
                 "rollout run again": {"keep_graph": False}}
# Taken away only with all the others: once the update trains through the collected forward pass,
# the encoder never sees more than the 16 frames of one step, and passes change nothing there.
BEFORE_SPEED_WORK = {"encoder_passes": False}
# What --ablation takes out of each trainer of ours that has it, as a row named trainer + suffix:
# suffix -> (the train_ours argument set to False, which setups have it, what the summary calls it).
CAST_A_PASS = ", a cast a pass"
TRAINER_OPTIMIZATIONS: dict[str, tuple[str, Callable[[dict[str, Any]], bool], str]] = {
    CAST_A_PASS: ("cast_once", lambda setup: setup["bf16"], "casting once a rollout"),
}


# ------------------------------------------------------------------------------------------------
# One timed training run of each kind. Each returns (env steps trained, seconds of the training loop).
# ------------------------------------------------------------------------------------------------
def steps_per_update(num_envs: int, rollout_size: int = Config.rollout_size) -> int:
    return num_envs * rollout_size


def train_ours(steps: int, env_name: str, num_envs: int, vec_env: str, recurrent: bool, seed: int = 0, *,
               arch: str = Config.arch, channels_last: bool = Speed.channels_last,
               keep_freed: bool = True, encoder_passes: bool = True, keep_graph: bool = True,
               bf16: bool = Speed.bf16, cast_once: bool = True, lstm_norm: bool = Config.lstm_norm,
               core_skip: bool = Config.core_skip, device: str = "cpu",
               frame_size: int = Config.frame_size) -> tuple[int, float]:
    """Train this project's pipeline for ``steps // (num_envs * rollout_size)`` updates.

    Built as ``main.train`` builds it (keep_freed_memory -> Config -> make_vec_env ->
    make_agent -> Runner), on the CPU, without TensorBoard or progress bar, into a
    throw-away log directory. ``keep_freed=False`` leaves malloc as the process found it;
    ``encoder_passes=False`` has the universe encoder take every batch in one pass;
    ``keep_graph=False`` collects without gradients and runs the rollout again in the update;
    ``bf16=True`` runs the encoder in bfloat16; ``cast_once=False`` then casts its weights at every
    pass, as before the runner collected each rollout in ``ActorCritic.casting_once``.
    """
    if keep_freed:
        keep_freed_memory()
    speed = Speed(channels_last=channels_last, keep_graph=keep_graph, bf16=bf16, keep_freed_memory=keep_freed,
                  encoder_chunk=Speed.encoder_chunk if encoder_passes else 0)
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as log_dir:
        config = Config(env_name=env_name, num_envs=num_envs, vec_env=vec_env, arch=arch, recurrent=recurrent,
                        speed=speed, seed=seed, lstm_norm=lstm_norm, core_skip=core_skip, frame_size=frame_size,
                        num_updates=max(1, steps // steps_per_update(num_envs)), cuda=device == "cuda",
                        tensorboard=False, progress=False, log_dir=log_dir)
        seed_everything(config.seed)
        envs = make_vec_env(config.env_name, config.num_envs, config.n_stack, config.seed, config.vec_env,
                            config.max_episode_frames, frame_size=config.frame_size)
        try:
            agent = make_agent(config, envs.observation_space.shape, int(envs.action_space.n), device)
            if not cast_once:
                agent.model.casting_once = contextlib.nullcontext  # each pass in an autocast region of its own
            return timed_training(agent, envs, config, log_dir)
        finally:
            envs.close()


def timed_training(agent: Any, envs: Any, config: Config, log_dir: str) -> tuple[int, float]:
    """Build the Runner (its reset of the envs is not timed), then time its ``train()``. Returns
    (env steps trained, seconds)."""
    runner = Runner(agent, envs, config, log_dir)
    tic = time.perf_counter()
    state = runner.train()
    seconds = time.perf_counter() - tic
    note_worker_memory(envs)
    return state.step, seconds


def cli_config(argv: list[str], seed: int = 0, steps: int = 0, log_dir: str = "runs", device: str = "cpu") -> Config:
    """What ``python main.py ARGV --seed S`` trains (the env's and the preset's defaults under the
    flags), without TensorBoard or progress bar, for ``steps // (num_envs * rollout_size)`` updates."""
    import main as train_cli
    import recipes

    config, _, typed = train_cli.parse_args([*argv, "--seed", str(seed), "--no-tensorboard", "--no-progress",
                                             "--log-dir", log_dir, "--cuda" if device == "cuda" else "--no-cuda"])
    config = recipes.with_env_defaults(config, typed)
    return with_settings(config, {"num_updates": max(1, steps // config.steps_per_update)})


def vector_config(env_name: str, num_envs: int, seed: int = 0, steps: int = 0, log_dir: str = "runs",
                  device: str = "cpu") -> Config:
    """What ``python main.py --env-name ENV --num-envs N --seed S`` trains on a vector env (its own
    defaults): see ``cli_config``."""
    return cli_config(["--env-name", env_name, "--num-envs", str(num_envs)], seed, steps, log_dir, device)


def preset_config(env_name: str, preset: str, num_envs: int, seed: int = 0, steps: int = 0, log_dir: str = "runs",
                  device: str = "cpu") -> Config:
    """What ``python main.py --env-name ENV --preset NAME --seed S`` trains, with ``--num-envs N`` unless
    the preset names its own env count; ``preset`` may be ``"NAME FLAGS"``, main.py's FLAGS typed beside
    the preset (``--num-envs`` among them then counts): see ``cli_config``."""
    from recipes import PRESETS

    name, *flags = shlex.split(preset)  # "NAME FLAGS": main.py's FLAGS typed beside the preset
    argv = ["--env-name", env_name, "--preset", name]
    if "num_envs" not in PRESETS[name]:
        argv += ["--num-envs", str(num_envs)]
    return cli_config([*argv, *flags], seed, steps, log_dir, device)  # a flag typed twice: the last wins


class StillEnvs(VecEnv):
    """Envs that cost nothing, with the spaces of ``envs``: every step returns the frames of one
    reset of ``envs``, reward 0, and no game ends. A trainer on them times its network, storage and
    update alone (``network alone``)."""

    render_mode = None  # nothing to render

    def __init__(self, envs: VecEnv) -> None:
        super().__init__(envs.num_envs, envs.observation_space, envs.action_space)
        self.frames = np.array(envs.reset())
        self.rewards = np.zeros(envs.num_envs, np.float32)
        self.dones = np.zeros(envs.num_envs, bool)

    def reset(self) -> np.ndarray:
        return self.frames

    def step_async(self, actions: np.ndarray) -> None:
        pass

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        return self.frames, self.rewards, self.dones, [{} for _ in range(self.num_envs)]

    def close(self) -> None:
        pass

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(self, attr_name)] * self.num_envs  # one set of frames for all: nothing per env

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        raise AttributeError(attr_name)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list[Any]:
        raise AttributeError(method_name)

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * self.num_envs


def train_config(config: Config, log_dir: str, device: str, vec_env: Optional[str] = None,
                 still: bool = False) -> tuple[int, float]:
    """Train ``config`` as ``main.py`` would (its envs stepped as ``vec_env`` says, else as the config
    does) into ``log_dir``; ``still``: on :class:`StillEnvs` made from them instead (the real envs
    closed after their reset). Returns (env steps trained, seconds of ``train()``)."""
    if config.speed.keep_freed_memory:
        keep_freed_memory()  # as main.py does
    seed_everything(config.seed)
    envs = make_vec_env(config.env_name, config.num_envs, config.n_stack, config.seed, vec_env or config.vec_env,
                        config.max_episode_frames, frame_size=config.frame_size)
    if still:
        real, envs = envs, StillEnvs(envs)
        real.close()
    try:
        size, continuous = action_size(envs.action_space)
        agent = make_agent(config, envs.observation_space.shape, size, device, continuous=continuous)
        return timed_training(agent, envs, config, log_dir)
    finally:
        envs.close()


def train_ours_vector(steps: int, env_name: str, num_envs: int, vec_env: str = "ale", seed: int = 0,
                      device: str = "cpu") -> tuple[int, float]:
    """Train this project on a vector-observation env with the env's own defaults (``vector_config``),
    its envs stepped as ``vec_env`` says (``subproc``/``async``: one process an env; otherwise in this
    process), into a throw-away log directory. Returns (env steps trained, seconds of ``train()``)."""
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as log_dir:
        return train_config(vector_config(env_name, num_envs, seed, steps, log_dir, device), log_dir, device, vec_env)


def train_ours_preset(steps: int, env_name: str, num_envs: int, preset: str, seed: int = 0,
                      device: str = "cpu", still: bool = False, bf16: bool = False) -> tuple[int, float]:
    """Train what ``--preset`` trains (``preset_config``) into a throw-away log directory; ``still``:
    on :class:`StillEnvs` (its network alone); ``bf16``: with ``--bf16`` typed beside the preset.
    Returns (env steps trained, seconds of ``train()``)."""
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as log_dir:
        config = preset_config(env_name, preset, num_envs, seed, steps, log_dir, device)
        config = with_settings(config, {"speed.bf16": True}) if bf16 else config
        return train_config(config, log_dir, device, still=still)


def train_sb3(steps: int, env_name: str, num_envs: int, vec_env: str, seed: int = 0,
              device: str = "cpu") -> tuple[int, float]:
    """Train stable-baselines3's A2C with the RL Zoo's settings for ``steps`` env steps (``sb3_reference.train``:
    ``CnnPolicy`` for an Atari game, ``MlpPolicy`` otherwise) on SB3's own env pipeline with the vector
    env class ``vec_env`` (a key of ``envs.VEC_ENVS``); malloc is left as the process found it, as SB3's
    users run it. Returns (env steps trained, seconds of ``model.learn``)."""
    run = sb3_reference.train(env_name, num_envs, steps, seed, vec_env=vec_env, device=device,
                              on_envs=note_worker_memory)
    return run.steps, run.seconds


def step_randomly(steps: int, env_name: str, num_envs: int, vec_env: str, seed: int = 0,
                  device: str = "cpu", frame_size: int = Config.frame_size) -> tuple[int, float]:
    """Step ``num_envs`` envs of ``envs.make_vec_env`` (the env path ``vec_env``) with uniformly random
    actions, drawn beforehand, for ``steps`` env steps (rounded up to whole vector steps), no network:
    the rate the envs alone allow. Returns (env steps, seconds of the stepping loop). ``device`` is
    accepted for a trainer's signature; nothing runs there."""
    envs = make_vec_env(env_name, num_envs, seed=seed, vec_env=vec_env, frame_size=frame_size)
    try:
        rng = np.random.default_rng(seed)
        vector_steps = -(-steps // num_envs)
        space = envs.action_space
        if isinstance(space, gym.spaces.Discrete):
            actions = rng.integers(0, int(space.n), size=(vector_steps, num_envs))
        else:
            shape = (vector_steps, num_envs, *space.shape)
            actions = rng.uniform(space.low, space.high, size=shape).astype(space.dtype)
        envs.reset()
        tic = time.perf_counter()
        for action in actions:
            envs.step(action)
        seconds = time.perf_counter() - tic
        note_worker_memory(envs)
    finally:
        envs.close()
    return vector_steps * num_envs, seconds


def on_one_core(steps: int, train: Callable[..., tuple[int, float]], **kwargs: Any) -> tuple[int, float]:
    """``train(steps, **kwargs)`` pinned to one core (the first this process may use) on one torch
    thread: ale-py's env threads, started later, inherit the pin (``--one-core``)."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    return train(steps, **kwargs)


def default_setup(vec_env: str) -> dict[str, Any]:
    """Keyword arguments of ``train_ours`` (after steps, env name and env count) for the recurrent default."""
    return dict(vec_env=vec_env, recurrent=Config.recurrent, arch=Config.arch, channels_last=Speed.channels_last,
                keep_freed=True, encoder_passes=True, keep_graph=True, bf16=Speed.bf16)


def ours_setups(ours: str, vec_env: str, bf16: bool = False) -> dict[str, dict[str, Any]]:
    """Trainer name -> ``train_ours`` keyword arguments; ``ours`` is ``both``, ``recurrent`` or ``feedforward``;
    ``bf16`` adds a bfloat16 twin of each."""
    setups: dict[str, dict[str, Any]] = {}
    if ours in ("both", "recurrent"):
        setups[OURS_RECURRENT] = default_setup(vec_env)
    if ours in ("both", "feedforward"):
        setups[OURS_FEEDFORWARD] = {**default_setup(vec_env), "arch": "nature", "recurrent": False}
    if bf16:
        setups.update({name + BF16: {**setup, "bf16": True} for name, setup in list(setups.items())})
    return setups


def trainer_ablation_setups(setups: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each trainer of ``setups`` without each of ``TRAINER_OPTIMIZATIONS`` it has (--ablation):
    the bfloat16 ones casting their encoder's weights at every pass."""
    rows = {}
    for suffix, (argument, has_it, _) in TRAINER_OPTIMIZATIONS.items():
        rows.update({name + suffix: {**setup, argument: False} for name, setup in setups.items() if has_it(setup)})
    return rows


def ablation_setups(vec_env: str) -> dict[str, dict[str, Any]]:
    """The recurrent default without each of ``OPTIMIZATIONS``, then without all of them.

    A row that would be the default itself (``dummy envs`` when ``vec_env`` is ``dummy``) is left out.
    """
    default = default_setup(vec_env)
    removals = {**OPTIMIZATIONS, "none of them": {**{k: v for change in OPTIMIZATIONS.values() for k, v in change.items()},
                                                  **BEFORE_SPEED_WORK}}
    setups = {f"recurrent, {what}": {**default, **change} for what, change in removals.items()}
    return {name: setup for name, setup in setups.items() if setup != default}


# ------------------------------------------------------------------------------------------------
@dataclass
class Trials:
    """The runs of one trainer: env steps, seconds and peak RSS (KiB, where measured) of each."""

    name: str
    steps: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    peak_rss_kib: list[int] = field(default_factory=list)
    peak_gpu_mib: list[float] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [s / t for s, t in zip(self.steps, self.seconds)]

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)


Trainer = tuple[Callable[..., tuple[int, float]], dict[str, Any]]  # train_ours or train_sb3, its arguments


def run_trial(train: Callable[..., tuple[int, float]], steps: int, kwargs: dict[str, Any],
              threads: int) -> tuple[int, float, int, float, dict[str, int]]:
    """One timed run, in the fresh process it is sent to: env steps, seconds, this process's peak
    RSS (KiB), its peak GPU memory held by torch (MiB; 0 on the CPU) and what was recorded of env workers."""
    if threads:
        torch.set_num_threads(threads)
    trained, seconds = train(steps, **kwargs)
    gpu_mib = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_initialized() else 0.0
    return trained, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, gpu_mib, dict(_workers)


def run_alternating(trainers: dict[str, Trainer], steps: int, repeats: int, warmup_steps: int,
                    threads: int = 0) -> dict[str, Trials]:
    """Run every trainer in turn, ``repeats`` rounds, after one untimed warm-up round of
    ``warmup_steps``; each run in a new process (spawned, so nothing is inherited)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    width = max(map(len, trainers))
    results = {name: Trials(name) for name in trainers}
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        def run(name: str, n: int) -> tuple[int, float, int, float, dict[str, int]]:
            train, kwargs = trainers[name]
            return pool.submit(run_trial, train, n, kwargs, threads).result()

        if warmup_steps > 0:
            for name in trainers:
                print(f"warm-up  {name:<{width}} {warmup_steps} steps", flush=True)
                run(name, warmup_steps)
        for round_ in range(1, repeats + 1):
            for name in trainers:
                trained, seconds, peak_kib, gpu_mib, workers = run(name, steps)
                results[name].steps.append(trained)
                results[name].seconds.append(seconds)
                results[name].peak_rss_kib.append(peak_kib)
                results[name].peak_gpu_mib.append(gpu_mib)
                for key, value in workers.items():
                    _workers[key] = max(_workers[key], value)
                print(f"round {round_}  {name:<{width}} {trained} steps in {seconds:6.2f} s: "
                      f"{trained / seconds:7.1f} steps/s", flush=True)
    return results


def print_table(results: dict[str, Trials]) -> None:
    width = max(len("trainer"), *map(len, results))
    gpu = any(max(trials.peak_gpu_mib, default=0.0) > 0 for trials in results.values())
    print()
    print(f"{'trainer':<{width}} {'steps':>7} {'median s':>9} {'steps/s (median)':>17} {'peak RSS':>9}  "
          + (f"{'peak GPU':>9}  " if gpu else "") + "steps/s of each round")
    for trials in results.values():
        rounds = " ".join(f"{r:.1f}" for r in trials.rates)
        peak = f"{max(trials.peak_rss_kib) / 1024:.0f} MiB" if trials.peak_rss_kib else "-"
        gpu_peak = f"{max(trials.peak_gpu_mib):>5.0f} MiB  " if gpu else ""
        print(f"{trials.name:<{width}} {trials.steps[0]:>7} {statistics.median(trials.seconds):>9.2f} "
              f"{trials.median_rate:>17.1f} {peak:>9}  {gpu_peak}{rounds}")


def preset_envs(trainer: str) -> str:
    """The name of the env-only row of a preset's envs (``--preset NAME --env-only``), the same for
    the preset with its encoder in bfloat16 (``--bf16``)."""
    return f"{ENV_ONLY} (--preset {trainer.removeprefix(PRESET).removesuffix(BF16)})"


def preset_network(trainer: str) -> str:
    """The name of the row of a preset's network alone (``--preset NAME --env-only``), with ``bf16``
    after it for the preset's bfloat16 encoder."""
    name = trainer.removeprefix(PRESET)
    return f"{NETWORK_ONLY} (--preset {name.removesuffix(BF16)})" + (BF16 if name.endswith(BF16) else "")


def core_bound(envs_one: float, network_one: float, cores: int) -> float:
    """The most env steps/s that ``cores`` cores can train at when an env step costs one core
    ``1/envs_one`` seconds of env stepping and ``1/network_one`` of network, however that work is
    shared out among them (overlapped, pipelined, a learner lagging the actors), no core idle, no loss."""
    return cores / (1 / envs_one + 1 / network_one)


def network_needed(share: float, envs_all: float, envs_one: float, cores: int) -> float:
    """The network-alone rate on one core (env steps/s) at which ``core_bound`` reaches ``share`` of
    the envs' rate on all ``cores`` (``envs_all``); infinite when the envs alone take that much of
    the cores' time."""
    left = cores / (share * envs_all) - 1 / envs_one  # the core-seconds an env step may spend in the network
    return 1 / left if left > 0 else float("inf")


def core_bound_line(network: str, envs_all: float, envs_one: float, network_one: float, trained: float,
                    cores: int) -> str:
    """What ``core_bound`` allows a preset (``--one-core``), and what its network alone would need on
    one core for the target share ``PRESET_SHARE``."""
    bound = core_bound(envs_one, network_one, cores)
    needed = network_needed(PRESET_SHARE, envs_all, envs_one, cores)
    target = (f"{PRESET_SHARE:.0%} needs its network alone on one core at {needed:,.0f} env steps/s "
              f"({needed / network_one:.2f}x)" if needed < float("inf") else
              f"{PRESET_SHARE:.0%} is out of reach of any network: its envs alone take that much of the cores' time")
    return (f"{network}{ONE_CORE}: {network_one:,.0f} env steps/s, its envs on one core {envs_one:,.0f}: {cores} "
            f"cores, however the two share them, train at most at {bound:,.0f} ({bound / envs_all:.0%} of its envs' "
            f"rate; it trained at {trained / bound:.0%} of that); {target}")


def summary_lines(results: dict[str, Trials], ablations: list[str], cores: int = 1) -> list[str]:
    """Ratios of ours to SB3 and the Atari targets they meet (when SB3 was measured), then the speed-up
    of the recurrent default over each of the ``ablations`` rows (what the optimizations it lacks
    bought), then each of ours as a share of the env-only rate (when ``ENV_ONLY`` was measured).
    ``cores``: how many this process may use, for what a preset's rows on one core allow (``--one-core``)."""
    lines = []
    if SB3 in results and OURS_DEFAULTS in results:
        lines.append(f"ratio ({OURS_DEFAULTS} / {SB3}): "
                     f"{results[OURS_DEFAULTS].median_rate / results[SB3].median_rate:.2f}x")
    if SB3 in results and any(name in results for name in {**TARGETS, **OPTIONAL_TARGETS}):
        verdicts = []
        for name, (label, target) in {**TARGETS, **OPTIONAL_TARGETS}.items():
            if name in results:
                ratio = results[name].median_rate / results[SB3].median_rate
                lines.append(f"ratio ({name} / {SB3}): {ratio:.2f}x")
                verdicts.append(f"{label} >= {target:g}x: {'yes' if ratio >= target else 'no'}")
            elif name in TARGETS:
                verdicts.append(f"{label} >= {target:g}x: not measured")
        lines.append("targets: " + ", ".join(verdicts))
    if OURS_PLAIN in results and OURS_RECURRENT in results:
        if SB3 in results:
            lines.append(f"ratio ({OURS_PLAIN} / {SB3}): {results[OURS_PLAIN].median_rate / results[SB3].median_rate:.2f}x")
        lines.append(f"the layer-normalized cell and the skip connection: {OURS_PLAIN} over {OURS_RECURRENT}: "
                     f"{results[OURS_PLAIN].median_rate / results[OURS_RECURRENT].median_rate:.2f}x")
    recurrent_rows = [name for name in ablations if not name.endswith(tuple(TRAINER_OPTIMIZATIONS))]
    if recurrent_rows and OURS_RECURRENT in results:
        lines.append(f"what each optimization bought (speed-up of {OURS_RECURRENT} over the row):")
        for name in recurrent_rows:
            lines.append(f"  {name}: {results[OURS_RECURRENT].median_rate / results[name].median_rate:.2f}x")
    for suffix, (_, _, what) in TRAINER_OPTIMIZATIONS.items():
        for name in ablations:
            trainer = name.removesuffix(suffix)
            if trainer != name and trainer in results and name in results:
                lines.append(f"what {what} bought: {trainer} over {name}: "
                             f"{results[trainer].median_rate / results[name].median_rate:.2f}x")
    for name in (name for name in results if name.startswith(PRESET)):
        for other in (SB3, OURS_FEEDFORWARD):
            if other in results:
                lines.append(f"ratio ({name} / {other}): {results[name].median_rate / results[other].median_rate:.2f}x")
        plain = name.removesuffix(BF16)
        if plain != name and plain in results:
            lines.append(f"what --bf16 bought the preset: {name} over {plain}: "
                         f"{results[name].median_rate / results[plain].median_rate:.2f}x")
        envs = preset_envs(name)
        if envs in results:
            share = results[name].median_rate / results[envs].median_rate
            lines.append(f"{name} as a share of the rate of its envs alone ({results[envs].median_rate:,.0f} env "
                         f"steps/s): {share:.0%}; target >= {PRESET_SHARE:.0%}: {'yes' if share >= PRESET_SHARE else 'no'}")
            network = preset_network(name)
            if network in results:
                env_rate, net_rate = results[envs].median_rate, results[network].median_rate
                serial = 1 / (1 / env_rate + 1 / net_rate)
                lines.append(f"{network}: {net_rate:,.0f} env steps/s, {net_rate / env_rate:.0%} of its envs' rate; "
                             f"envs then network, one after the other, allow {serial:,.0f} ({serial / env_rate:.0%} "
                             f"of its envs' rate), and it trained at {results[name].median_rate / serial:.0%} of that")
            if envs + ONE_CORE in results and network + ONE_CORE in results:
                lines.append(core_bound_line(network, results[envs].median_rate, results[envs + ONE_CORE].median_rate,
                                             results[network + ONE_CORE].median_rate, results[name].median_rate, cores))
    if ENV_ONLY in results:
        envs_rate = results[ENV_ONLY].median_rate
        shares = [f"{name} {results[name].median_rate / envs_rate:.0%}" for name in results
                  if name.startswith("ours") and name not in ablations and not name.startswith(PRESET)]
        if shares:
            lines.append(f"training as a share of the env-only rate ({envs_rate:,.0f} env steps/s): " + ", ".join(shares))
    return lines


# ------------------------------------------------------------------------------------------------
# Memory. ru_maxrss covers one process only: subproc env workers are children of the
# multiprocessing fork server, not of the training process, so their memory is read from /proc.
# ------------------------------------------------------------------------------------------------
_workers = {"count": 0, "peak_rss_kib": 0, "pss_kib": 0}


def _proc_kib(path: str, key: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def note_worker_memory(venv) -> None:
    """Record the memory of a vector env's worker processes (none for dummy or ale); call it before ``close()``.

    Keeps the largest peak RSS of one worker (``VmHWM``) and the largest total PSS of one set of
    workers (``smaps_rollup``: pages shared between processes, such as the torch libraries every
    worker imports, are split among them instead of counted in full by each).
    """
    processes = getattr(venv.unwrapped, "processes", None) or []
    peak = pss = 0
    for process in processes:
        try:
            peak = max(peak, _proc_kib(f"/proc/{process.pid}/status", "VmHWM"))
            pss += _proc_kib(f"/proc/{process.pid}/smaps_rollup", "Pss")
        except OSError:  # not Linux, or the worker is gone
            continue
    _workers["count"] = max(_workers["count"], len(processes))
    _workers["peak_rss_kib"] = max(_workers["peak_rss_kib"], peak)
    _workers["pss_kib"] = max(_workers["pss_kib"], pss)


def memory_lines(peak_kib: Optional[int] = None) -> list[str]:
    """Peak RSS of a training process (``peak_kib``; default: this process's ``ru_maxrss``, KiB on
    Linux) and what was recorded of env workers."""
    own = peak_kib if peak_kib is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lines = [f"peak RSS of a training process (ru_maxrss): {own} KiB ({own / 1024:.0f} MiB)"]
    if _workers["peak_rss_kib"]:
        lines.append(f"subproc env workers ({_workers['count']} processes): peak RSS of one worker "
                     f"{_workers['peak_rss_kib'] / 1024:.0f} MiB; PSS of all workers together "
                     f"{_workers['pss_kib'] / 1024:.0f} MiB (shared pages split among them)")
    return lines


# ------------------------------------------------------------------------------------------------
def _int_at_least(low: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'")
        return value
    parse.__name__ = what  # argparse names the type in its message
    return parse


positive_int = _int_at_least(1, "a positive integer")
non_negative_int = _int_at_least(0, "an integer >= 0")


def preset_spec(text: str) -> str:
    """``--preset``: a preset's name, then main.py's flags to type beside it, if any, as one string
    (``"fast-cpu --hidden-size 256"``), its words joined by single spaces."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if not words or words[0] not in PRESETS:
        raise argparse.ArgumentTypeError(f"{text!r}: the name of a preset first ({', '.join(PRESETS)}), then "
                                         f"main.py's flags, if any")
    return shlex.join(words)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the help, and the module docstring as written."""


ATARI_STEPS, VECTOR_STEPS = 4000, 50_000  # the default --steps of an Atari game and of a vector env
ATARI_ONLY = ("ablation", "bf16", "plain_lstm", "preset")  # with --ours: what a vector env, trained on its defaults, has not


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--steps", type=positive_int, default=None,
                   help=f"env steps each timed run trains, rounded down to whole updates (num_envs x rollout size) "
                        f"(default: {ATARI_STEPS} for an Atari game, {VECTOR_STEPS} for a vector env)")
    p.add_argument("--env-name", default="PongNoFrameskip-v4",
                   help="gymnasium id: an Atari game, or an env with a flat vector observation (LunarLander-v3)")
    p.add_argument("--num-envs", type=positive_int, default=16, help="envs stepped in parallel (every trainer)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="rounds of alternating runs; the median of each trainer is reported")
    p.add_argument("--warmup-steps", type=non_negative_int, default=160,
                   help="env steps of one untimed run of each trainer before the timed rounds (0: none)")
    p.add_argument("--ours", choices=["both", "recurrent", "feedforward", "none"], default="both",
                   help="which configuration(s) of ours to measure (Atari; none: only --preset's)")
    p.add_argument("--no-recurrent", dest="ours", action="store_const", const="feedforward",
                   default=argparse.SUPPRESS, help="shorthand for --ours feedforward")
    p.add_argument("--no-sb3", action="store_true", help="measure ours only")
    p.add_argument("--env-only", action="store_true",
                   help="also step ours' envs with random actions and no network, and give each of ours as a share "
                        "of that rate")
    p.add_argument("--preset", type=preset_spec, action="append", default=[], metavar="'NAME [FLAGS]'",
                   help=f"also what python main.py --preset NAME [FLAGS] trains (Atari; NAME one of "
                        f"{', '.join(PRESETS)}; its own env count and frame size), and with --env-only its envs "
                        f"alone, judged by the target of training at >= 50%% of that rate; repeat for several")
    p.add_argument("--one-core", action="store_true",
                   help="with --env-only and --preset: also each preset's envs alone and its network alone pinned to "
                        "one core on one torch thread, and the most that training on all the cores could reach "
                        "with them, however it overlapped the two (Linux)")
    p.add_argument("--plain-lstm", action="store_true",
                   help="also the recurrent agent with torch's plain LSTMCell and no skip connection (what the "
                        "layer-normalized cell costs; Atari)")
    p.add_argument("--bf16", action="store_true",
                   help="also measure each of ours with its encoder in bfloat16 (changes the arithmetic; Atari)")
    p.add_argument("--ablation", action="store_true",
                   help="also measure the recurrent default without each optimization (dummy envs, no "
                        "channels-last, default malloc, rollout run again) and without all of "
                        "them; with --bf16, each bfloat16 trainer casting its weights at every pass (Atari)")
    p.add_argument("--ours-vec-env", choices=VEC_ENV_CHOICES, default="ale",
                   help="env path of ours (Atari: ale, ale-py's C++ vector env; dummy/subproc: SB3's wrappers; a "
                        "vector env: subproc steps one process an env, the others all in this process)")
    p.add_argument("--sb3-vec-env", choices=sorted(VEC_ENVS), default="dummy",
                   help="vector env class of SB3's own env pipeline")
    p.add_argument("--cuda", action="store_true",
                   help="train every trainer on the GPU (networks there, envs on the CPU); adds peak GPU memory")
    p.add_argument("--seed", type=int, default=0, help="seed of every run")
    p.add_argument("--threads", type=non_negative_int, default=0,
                   help="torch intra-op threads for every trainer (0: torch's default, the number of cores)")
    return p


def parse_bench_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse, refuse an unknown env with the parser's own error, and set torch's thread count."""
    args = parser.parse_args(argv)
    try:
        check_env_id(args.env_name)
    except UsageError as exc:
        parser.error(str(exc))
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def env_path(vec_env: str, atari: bool = True, sb3: bool = False) -> str:
    """How a trainer's envs are stepped (``sb3``: SB3's own pipeline), for the header."""
    if not atari:
        if sb3:
            return f"{vec_env} (SB3 {VEC_ENVS[vec_env].__name__})"
        return "async (gymnasium AsyncVectorEnv)" if vec_env in ("subproc", "async") else \
            "sync (gymnasium SyncVectorEnv)"
    if vec_env == "ale":
        import ale_py

        return f"ale (ale-py {ale_py.__version__} C++ vector env)"
    return f"{vec_env} (SB3 Atari wrappers, {VEC_ENVS[vec_env].__name__})"


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parse_bench_args(parser, argv)
    if args.cuda and not torch.cuda.is_available():
        parser.error("--cuda: CUDA is not available on this machine")
    if args.one_core and not (args.env_only and args.preset):
        parser.error("--one-core: measures a preset's envs and network, so it needs --env-only and --preset")
    if args.one_core and not hasattr(os, "sched_setaffinity"):
        parser.error("--one-core: pinning to a core needs os.sched_setaffinity (Linux)")
    atari = is_atari(args.env_name)
    if not atari:
        typed = [f"--{name.replace('_', '-')}" for name in ATARI_ONLY if getattr(args, name)]
        typed += ["--ours"] if args.ours != "both" else []
        if typed:
            parser.error(f"{', '.join(typed)}: for Atari games; {args.env_name} trains with its own defaults")
    device = "cuda" if args.cuda else "cpu"
    rollout_size = Config.rollout_size if atari else vector_config(args.env_name, args.num_envs).rollout_size
    per_update = steps_per_update(args.num_envs, rollout_size)
    wanted = args.steps or (ATARI_STEPS if atari else VECTOR_STEPS)
    steps = max(per_update, wanted // per_update * per_update)  # the same count for every trainer
    warmup = args.warmup_steps and max(per_update, args.warmup_steps // per_update * per_update)
    common = dict(env_name=args.env_name, num_envs=args.num_envs, seed=args.seed, device=device)

    def ours(setup: dict[str, Any]) -> Trainer:
        return train_ours, {**common, **setup}

    setups = ours_setups(args.ours, args.ours_vec_env, args.bf16) if atari else {}
    trainers = {name: ours(setup) for name, setup in setups.items()}
    if not atari:
        trainers[OURS_DEFAULTS] = train_ours_vector, {**common, "vec_env": args.ours_vec_env}
    if args.plain_lstm:
        trainers[OURS_PLAIN] = ours({**default_setup(args.ours_vec_env), "lstm_norm": False, "core_skip": False})
    if not args.no_sb3:
        trainers[SB3] = train_sb3, {**common, "vec_env": args.sb3_vec_env}
    ablations: dict[str, dict[str, Any]] = {}
    if args.ablation:
        ablations.update(ablation_setups(args.ours_vec_env) if OURS_RECURRENT in setups else {})
        ablations.update(trainer_ablation_setups(setups))
    trainers.update((name, ours(setup)) for name, setup in ablations.items())
    if args.env_only and (setups or not atari):  # the envs of ours' default configurations (not with --ours none)
        trainers[ENV_ONLY] = step_randomly, {**common, "vec_env": args.ours_vec_env}
    for preset in args.preset:
        try:
            config = preset_config(args.env_name, preset, args.num_envs)
        except (UsageError, SystemExit) as exc:  # main.py's parser has said what is wrong with its flags
            parser.error(f"--preset {preset!r}: {exc if isinstance(exc, UsageError) else 'not flags main.py takes'}")
        if args.env_only:
            envs_setup = {**common, "num_envs": config.num_envs, "vec_env": config.vec_env,
                          "frame_size": config.frame_size}
            envs_row = preset_envs(PRESET + preset)
            trainers[envs_row] = step_randomly, envs_setup
            if args.one_core:
                trainers[envs_row + ONE_CORE] = on_one_core, {**envs_setup, "train": step_randomly}
        for bf16 in (False, True) if args.bf16 else (False,):  # --bf16: the preset with --bf16 typed beside it too
            name, setup = PRESET + preset + (BF16 if bf16 else ""), {**common, "preset": preset, "bf16": bf16}
            trainers[name] = train_ours_preset, setup
            if args.env_only:
                trainers[preset_network(name)] = train_ours_preset, {**setup, "still": True}
            if args.one_core:
                trainers[preset_network(name) + ONE_CORE] = on_one_core, {**setup, "still": True,
                                                                          "train": train_ours_preset}

    envs_used = f"ours {env_path(args.ours_vec_env, atari)}" + \
        ("" if args.no_sb3 else f", sb3 {env_path(args.sb3_vec_env, atari, sb3=True)}")
    print(f"{args.env_name}, {args.num_envs} envs, {steps} env steps a run, {args.repeats} rounds; "
          f"envs: {envs_used}; torch {torch.__version__} with {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs" + (f", {torch.cuda.get_device_name()}" if args.cuda else ""), flush=True)
    results = run_alternating(trainers, steps, args.repeats, warmup, args.threads)
    print_table(results)
    peak = max(max(trials.peak_rss_kib) for trials in results.values())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    for line in summary_lines(results, list(ablations), cores) + memory_lines(peak):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
