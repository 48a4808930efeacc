"""Every setting of a run, each declared once: its default, its help text and its flag (name,
parser, metavar), from which ``main.py`` builds the command line and ``docs/flags.md`` is written.
The settings every run has are :class:`Config`'s fields and blocks; an algorithm declares its own
block in its own file (``ppo.Clipped``, ``grpo.Group``), added here by the registry
(:func:`add_algorithm_block`). Tests build a config directly."""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from seeds import SEED_LIMIT

OPTIMIZERS = ("torch-rmsprop", "rmsprop-tf", "adam", "rmsprop-debiased")  # see agent.make_optimizer
# Names an optimizer had before: "rmsprop" was TensorFlow's form (in checkpoints of format 2 and typed flags).
OPTIMIZER_ALIASES = {"rmsprop": "rmsprop-tf"}


def optimizer_name(text: str) -> str:
    """An optimizer's name as ``OPTIMIZERS`` spells it, from its name or an older one (argparse type)."""
    return OPTIMIZER_ALIASES.get(text, text)


RANDOMIZE_EVERY = ("episode", "never")  # when --randomize-domain draws an env's physics
RANDOMIZE_DOMAIN = ("uniform", "adr")  # what --randomize-domain draws from (randomize.py, adr.py)
SCHEDULES = ("constant", "linear")  # --lr-schedule, --entropy-schedule
VEC_ENVS = ("ale", "dummy", "subproc", "sync", "async")  # --vec-env

# Named presets (--preset NAME, Atari games only): settings over the defaults, under the typed flags.
# fast-cpu trains the recurrent default on a CPU without a GPU: 64x64 frames (smaller ones began to
# learn late on most seeds), 2M env steps, the learning rate and entropy bonus decayed to 0 over the
# last quarter (at a constant rate their noise kept the late games below what the policy plays).
# Its speed and scores: docs/speed.md#the-fast-cpu-preset.
# fast-gpu is fast-cpu at 64 envs a step, the batch a GPU runs well: four times the rate, with RMSprop's
# square average bias-corrected (torch's first step, ten times the rate, took the policy's entropy near 0
# at this rate), and the decays begun at 60% of the run, where most of the climb to 18 happens.
# Its screen: docs/speed.md#the-fast-gpu-preset.
FAST_CPU: dict[str, Any] = {
    "frame_size": 64,
    "num_updates": 25_000,
    "lr_schedule": "linear",
    "lr_decay_start": 0.75,
    "entropy_schedule": "linear",
    "entropy_decay_start": 0.75,
}
PRESETS: dict[str, dict[str, Any]] = {
    "fast-cpu": FAST_CPU,
    "fast-gpu": {
        **FAST_CPU,
        "num_envs": 64,
        "num_updates": FAST_CPU["num_updates"] // 4,  # the same 2M env steps
        "lr": 2.8e-3,
        "optimizer": "rmsprop-debiased",
        "lr_decay_start": 0.6,
        "entropy_decay_start": 0.6,
    },
}


# ------------------------------------------------------------------------------------- flag values
def _number(kind: type, what: str, allow_zero: bool = False) -> Callable[[str], Any]:
    """A parser of flag values: a finite ``kind`` above 0 (or at least 0 with ``allow_zero``)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'")
        return value

    parse.__name__ = what  # argparse names the type in its message
    return parse


positive_int = _number(int, "a positive integer")
positive_float = _number(float, "a positive number")
non_negative_int = _number(int, "an integer >= 0", allow_zero=True)
non_negative = _number(float, "a number >= 0", allow_zero=True)


def unit_interval(text: str) -> float:
    """A number in [0, 1] (a flag's value)."""
    value = _number(float, "a number in [0, 1]", allow_zero=True)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got '{text}'")
    return value


def finite(text: str) -> float:
    """A finite number of either sign (a flag's value)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got '{text}'")
    return value


def parse_seed(text: str) -> int:
    """A seed: an integer from 0 to SEED_LIMIT - 1 (a flag's value)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {SEED_LIMIT - 1}, got '{text}'")
    return value


def probability_below_one(text: str) -> float:
    """A probability in [0, 1) (a flag's value): at 1 the emulator would repeat its first action for ever."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got '{text}'")
    return value


# ------------------------------------------------------------------------------------- declarations
def setting(
    default: Any,
    help: str,
    *,
    flag: str = "",
    aliases: Sequence[str] = (),
    parse: Optional[Callable[[str], Any]] = None,
    metavar: Optional[str] = None,
    choices: Optional[Sequence[str]] = None,
    const: Any = None,
    off: str = "",
) -> Any:
    """A setting's field: its default, its help text and its flag.

    ``flag``: the flag's name (``--`` and the field's name with dashes unless given), ``aliases``
    other names it answers to; ``parse`` turns the typed text into the value (a switch, a setting
    typed ``bool``, takes ``--X`` / ``--no-X`` instead); ``metavar`` and ``choices`` as argparse's.
    ``const``: the value of the flag typed alone, and ``off`` the help of a ``--no-X`` form that
    sets the default back (``--randomize-domain``).
    """
    flag_spec = {
        "flag": flag,
        "aliases": tuple(aliases),
        "parse": parse,
        "metavar": metavar,
        "choices": tuple(choices) if choices is not None else None,
        "const": const,
        "off": off,
    }
    return field(default=default, metadata={"help": help, **flag_spec})


def block(settings: type, help: str) -> Any:
    """The field holding a block of settings (a dataclass of its own, built with its defaults)."""
    return field(default_factory=settings, metadata={"help": help})


@dataclass
class Curiosity:
    """The Intrinsic Curiosity Module's settings (Pathak et al. 2017; ``icm.py``): one block of a run's settings."""

    enabled: bool = setting(
        False, "Intrinsic Curiosity Module (Pathak et al. 2017): adds a curiosity reward and its losses.", flag="--icm"
    )
    eta: float = setting(
        0.01,
        "eta: intrinsic reward = eta/2 * forward-model error (with --icm).",
        flag="--icm-eta",
        aliases=("--curiosity-coeff",),
        parse=non_negative,
        metavar="ETA",
    )
    beta: float = setting(
        0.2,
        "beta: curiosity loss = (1 - beta) * inverse loss + beta * forward loss (with --icm).",
        flag="--icm-beta",
        parse=unit_interval,
        metavar="BETA",
    )
    policy_weight: float = setting(
        0.1,
        "lambda: objective = lambda * A2C loss + curiosity loss (with --icm).",
        flag="--icm-policy-weight",
        aliases=("--icm-lambda",),
        parse=non_negative,
        metavar="LAMBDA",
    )
    extrinsic_coeff: float = setting(
        1.0,
        "Weight of the game's reward when curiosity is on; 0 trains on curiosity alone (with --icm).",
        parse=non_negative,
        metavar="C",
    )
    normalize: bool = setting(
        False, "Divide intrinsic rewards by their running standard deviation (with --icm).", flag="--icm-normalize"
    )
    forward_trains_encoder: bool = setting(
        True,
        "Let the forward loss train the ICM's encoder phi, as in the "
        "paper; off, phi learns from the inverse loss alone (with --icm).",
        flag="--icm-forward-grad",
    )


@dataclass
class ADRSettings:
    """Automatic domain randomization's settings (``--randomize-domain adr``; OpenAI et al. 2019; ``adr.py``)."""

    low: Optional[float] = setting(
        None,
        "A range narrows when the mean return of --adr-episodes episodes played at "
        "its edge is below this (None: the env's; LunarLander 100, CartPole 300) "
        "(with --randomize-domain adr).",
        flag="--adr-low",
        parse=finite,
        metavar="RETURN",
    )
    high: Optional[float] = setting(
        None,
        "A range widens when that mean is at least this (None: the env's; "
        "LunarLander 200, CartPole 475) (with --randomize-domain adr).",
        flag="--adr-high",
        parse=finite,
        metavar="RETURN",
    )
    step: float = setting(
        0.05,
        "How far a range's edge moves, as a share of the whole range it may cover (with --randomize-domain adr).",
        flag="--adr-step",
        parse=unit_interval,
        metavar="SHARE",
    )
    episodes: int = setting(
        10,
        "Episodes played at an edge before it moves (with --randomize-domain adr).",
        flag="--adr-episodes",
        parse=positive_int,
        metavar="N",
    )
    boundary_prob: float = setting(
        0.5,
        "The share of episodes that play one range at its edge, the others "
        "drawn inside the ranges (with --randomize-domain adr).",
        flag="--adr-boundary-prob",
        parse=unit_interval,
        metavar="P",
    )


@dataclass
class Speed:
    """Settings that change how fast training runs, not what it computes (``--bf16`` and ``--tf32``
    aside, which change the arithmetic): each switches one trick, and docs/speed.md measures what each buys
    (``bench/throughput.py --ablation``). The C++ env path is ``--vec-env ale``, an env setting."""

    channels_last: Optional[bool] = setting(
        None,
        "Conv weights and activations in channels-last (NHWC) memory "
        "order: the same network. None (the default): on for the CPU, "
        "where it was measured faster; on a GPU only with --bf16.",
    )
    keep_graph: bool = setting(
        True,
        "Train through the forward pass made while collecting the rollout, instead of "
        "running the rollout through the network again in the update: the same "
        "numbers, one forward pass fewer.",
    )
    encoder_chunk: int = setting(
        16,
        "Frames per pass of the universe encoder on the CPU, whose first feature maps "
        "then stay nearer the core's cache (0: a batch in one pass, as on a GPU): the "
        "same numbers.",
        parse=non_negative_int,
        metavar="N",
    )
    keep_freed_memory: bool = setting(
        True,
        "Let glibc's malloc keep freed blocks for reuse instead of returning "
        "them to the system, so activations do not fault in fresh pages at "
        "every update.",
    )
    bf16: bool = setting(
        False,
        "Run the policy's conv encoder in bfloat16 (autocast); weights, LSTM, heads, losses "
        "and optimizer stay float32. Faster on hardware with bfloat16 arithmetic (AVX-512 "
        "BF16, AMX, recent GPUs); changes the arithmetic.",
    )
    tf32: bool = setting(
        False,
        "On a GPU, let cuDNN's convolutions and cuBLAS's matmuls compute float32 in TF32 "
        "(10 bits of mantissa; Ampere and later): faster, and changes the arithmetic. Off: "
        "float32 is float32.",
    )
    compile: bool = setting(
        False,
        "Compile the network with torch.compile (capture.py): fewer kernel launches a "
        "step, the same function; the first updates pay the compilation. Off by default: "
        "not yet measured faster on a GPU, and slower to start on a CPU.",
    )
    env_groups: int = setting(
        1,
        "Split the games into this many groups of ale-py's C++ vector env and step each while "
        "the network acts for the next (overlap.py): the same games and updates. 1 (the default): "
        "one vector env, stepped once the network has acted for every game (docs/speed.md).",
        parse=positive_int,
        metavar="G",
    )


@dataclass
class Config:
    # --- environment
    env_name: str = setting(
        "PongNoFrameskip-v4",
        "Gymnasium id of an Atari game: PongNoFrameskip-v4 style or ALE/Pong-v5 style.",
        metavar="ID",
    )
    preset: str = setting(
        "",
        "A named set of settings for Atari games, under the flags typed beside it: fast-cpu, "
        "for training on a CPU without a GPU; fast-gpu, 64 envs a step for one GPU (see "
        "docs/speed.md); empty: none.",
        choices=tuple(PRESETS),
    )
    num_envs: int = setting(
        16,
        "Envs stepped in parallel; one rollout holds num_envs x rollout_size transitions.",
        parse=positive_int,
        metavar="N",
    )
    n_stack: int = setting(4, "Consecutive frames stacked into one observation.", parse=positive_int, metavar="N")
    frame_size: int = setting(
        84,
        "Atari frames are resized to frame_size x frame_size grayscale pixels (84: "
        "DQN's size; 64: the fast-cpu preset's; 42: the curiosity paper's, about 4x cheaper "
        "for the convolutions).",
        parse=positive_int,
        metavar="PIXELS",
    )
    vec_env: str = setting(
        "ale",
        "ale: ale-py's C++ vector env (the preprocessing of SB3's Atari wrappers, stepped "
        "in C++ threads; faster); dummy (or sync): SB3's Atari wrappers, all envs in this "
        "process; subproc (or async): the same, one process per env. Other envs: "
        "gymnasium's vector env, async (or subproc) one process per env, otherwise all in "
        "this process.",
        choices=VEC_ENVS,
    )
    max_episode_frames: Optional[int] = setting(
        None,
        "Cap on an episode's emulator frames (a time-limit truncation); None keeps the game's own limit.",
        parse=positive_int,
        metavar="N",
    )
    sticky_actions: Optional[float] = setting(
        None,
        "Atari: at every emulator frame, the previous action is "
        "repeated instead of the chosen one with this probability "
        "(sticky actions, Machado et al. 2018), in [0, 1); None: the "
        "id's own, 0 for NoFrameskip-v4 ids and 0.25 for ALE/...-v5.",
        parse=probability_below_one,
        metavar="P",
    )
    randomize_domain: str = setting(
        "",
        "Each episode plays physics of its own, drawn from the seed (LunarLander: "
        "gravity, wind, turbulence; CartPole: gravity, pole mass and length; see "
        "randomize.py): uniform, from the whole ranges; adr, automatic domain "
        "randomization (adr.py), from ranges that start at the default physics and "
        "widen where the agent does well; empty: the default physics.",
        choices=RANDOMIZE_DOMAIN,
        const="uniform",
        off="The default physics (undoes --randomize-domain).",
    )
    physics: str = setting(
        "",
        "Every env plays these physics, e.g. gravity=-3,wind_power=15: one cell of "
        "--physics-grid (its other values as there), for a specialist of that cell; empty: "
        "the env's default.",
        metavar="NAME=X[,NAME=X]",
    )
    randomize_every: str = setting(
        "episode",
        "With --randomize-domain: episode draws new physics at every reset; never keeps each env's first draw.",
        choices=RANDOMIZE_EVERY,
    )
    adr: ADRSettings = block(ADRSettings, "Automatic domain randomization's settings (see :class:`ADRSettings`).")
    obs_history: int = setting(
        1,
        "Vector observations the policy sees at each step: the current one and the "
        "obs_history - 1 before it in the episode (zeros before its start).",
        parse=positive_int,
        metavar="K",
    )
    prev_action_reward: bool = setting(
        False, "The policy also sees its previous action (one-hot) and reward (vector observations)."
    )
    normalize_obs: bool = setting(
        False,
        "Vector observations minus their running mean, over their running std, "
        "clipped to +-10 (the statistics are saved in checkpoints and frozen in "
        "evaluation).",
    )
    normalize_reward: bool = setting(
        False, "Rewards over the running std of the discounted return, clipped to +-10 (logged returns stay raw)."
    )
    seed: int = setting(
        42,
        "Seeds torch, numpy, Python's random and the envs (env i gets seed + i); from 0 to 2**30 - 1.",
        parse=parse_seed,
    )

    # --- model
    arch: str = setting(
        "universe",
        "universe: 4 conv layers (32 3x3 filters, stride 2, ELU) giving 288 features; "
        "nature: the Nature-DQN CNN (32 8x8/4, 64 4x4/2, 64 3x3/1, 512 units, ReLU), "
        "about a fifth cheaper to train on the CPU.",
        metavar="NAME",
    )
    recurrent: bool = setting(True, "Encoder followed by an LSTM cell; False drops the LSTM (feed-forward).")
    hidden_size: int = setting(256, "Size of the LSTM state.", parse=positive_int, metavar="N")
    conv_filters: int = setting(
        32,
        "Filters in each of the universe encoder's 4 conv layers (Atari frames; its "
        "features are 9 times as many). The curiosity module's encoder keeps 32.",
        parse=positive_int,
        metavar="N",
    )
    mlp_width: int = setting(
        64,
        "Units in each of the two tanh layers of the MLP encoder (vector observations; the "
        "actor's and, without --recurrent, the critic's).",
        parse=positive_int,
        metavar="N",
    )
    log_std_init: float = setting(
        0.0,
        "Starting log standard deviation of the Gaussian policy (continuous actions; 0: std 1).",
        parse=finite,
        metavar="X",
    )
    sde: bool = setting(
        False,
        "State-dependent exploration (gSDE's noise model): each continuous action's spread "
        "is a learned function of the actor's features, not one number per action; each "
        "env's noise weights are drawn once a rollout, so its noise follows the state "
        "(--eval and GRPO draw noise every step).",
    )
    feature_norm: bool = setting(
        False, "Layer-normalize each frame's encoder features (learned scale and shift) before the LSTM or the heads."
    )
    lstm_norm: bool = setting(
        True,
        "A layer-normalized LSTM cell (the gates' input and state parts, and the cell, "
        "each layer-normalized), whose gates cannot all saturate; False: torch's "
        "LSTMCell.",
    )
    core_skip: bool = setting(
        True, "The heads read the encoder's features beside the LSTM's output (a skip connection around the core)."
    )

    # --- algorithm
    algo: str = setting(
        "a2c",
        "a2c: advantage actor-critic; ppo: A2C's rollouts and critic, trained with PPO's "
        "clipped objective over several epochs of minibatches; grpo: critic-free "
        "group-relative policy optimization (grpo: vector-observation envs).",
        metavar="NAME",
    )
    rollout_size: int = setting(
        5,
        "Steps per env in one rollout: the n of n-step returns and the length of truncated BPTT.",
        parse=positive_int,
        metavar="T",
    )
    num_updates: int = setting(
        125_000,
        "Gradient updates in the whole run (125,000 x 16 envs x 5 steps = 10M env steps).",
        parse=positive_int,
        metavar="N",
    )
    max_env_steps: Optional[int] = setting(
        None,
        "Stop once this many env steps are done, if before --num-updates (GRPO's rounds vary in length).",
        parse=positive_int,
        metavar="N",
    )
    gamma: float = setting(0.99, "Discount factor.", parse=unit_interval)
    gae_lambda: float = setting(
        1.0, "1.0: n-step returns; below 1: generalized advantage estimation.", parse=unit_interval
    )
    normalize_advantages: bool = setting(
        False,
        "Each rollout's advantages (with --algo ppo: each minibatch's) to "
        "zero mean and unit standard deviation before the policy loss "
        "(SB3's normalize_advantage): the policy's step no longer scales "
        "with the rewards.",
    )
    critic: bool = setting(
        True,
        "A critic (value head) as baseline and bootstrap; False: none and no value loss, "
        "so each advantage is the discounted reward to the rollout's end (REINFORCE over "
        "the rollout).",
    )
    value_coeff: float = setting(0.5, "Weight of the value loss.", parse=non_negative)
    entropy_coeff: float = setting(0.01, "Weight of the entropy bonus.", parse=non_negative)
    entropy_schedule: str = setting(
        "constant",
        "constant, or linear decay of the entropy bonus's weight to 0 at the last update (as lr_schedule).",
        choices=SCHEDULES,
    )
    entropy_decay_start: float = setting(
        0.0,
        "With entropy_schedule linear: the share of the run, from 0 to 1, "
        "trained at the full weight before its linear decay to 0 at the last "
        "update begins (0: from the first update).",
        parse=unit_interval,
        metavar="SHARE",
    )
    max_grad_norm: float = setting(
        0.5, "Gradients are clipped to this global norm.", parse=positive_float, aliases=("--max-grad_norm",)
    )
    optimizer: str = setting(
        "torch-rmsprop",
        "torch-rmsprop: torch.optim.RMSprop (alpha 0.99, eps 1e-5); rmsprop-tf "
        "(also rmsprop): "
        "RMSprop as TensorFlow computes it (the square average starts at 1, "
        "eps inside the root), which keeps a plain LSTM alive but learns "
        "slowly; adam (eps 1e-5); rmsprop-debiased: torch.optim.RMSprop's "
        "formula with the square average bias-corrected (Adam without "
        "momentum: betas 0 and 0.99, eps 1e-5).",
        choices=OPTIMIZERS,
        parse=optimizer_name,
    )
    lr: float = setting(7e-4, "Learning rate.", parse=positive_float)
    lr_schedule: str = setting("constant", "constant, or linear decay to 0 at the last update.", choices=SCHEDULES)
    lr_decay_start: float = setting(
        0.0,
        "With lr_schedule linear: the share of the run, from 0 to 1, trained at "
        "the full rate before the linear decay to 0 at the last update begins "
        "(0: from the first update).",
        parse=unit_interval,
        metavar="SHARE",
    )
    lr_decay_from: float = setting(
        1.0,
        "With lr_schedule linear: the rate the decay begins at, as a share of lr "
        "(1: the full rate; 0.5: the rate halves where the decay begins, then "
        "falls linearly to 0 at the last update).",
        parse=unit_interval,
        metavar="SHARE",
    )
    curiosity: Curiosity = block(Curiosity, "The Intrinsic Curiosity Module's settings (see :class:`Curiosity`).")
    max_skipped_updates: int = setting(
        10,
        "Training stops after this many non-finite losses in a row (a2c_last keeps the last good state).",
        parse=positive_int,
        metavar="N",
    )

    # --- hardware
    cuda: Optional[bool] = setting(
        None,
        "--cuda: the GPU for any env (on a machine without CUDA, say so and use "
        "the CPU); --no-cuda: the CPU. Neither: Atari games on the GPU when CUDA "
        "is available, vector-observation envs on the CPU (their small networks "
        "run faster there). The device is this process's, not the run's: a resumed "
        "run or an evaluation takes what is typed now.",
    )
    reproducible: bool = setting(
        False,
        "Deterministic kernels where torch has them "
        "(torch.use_deterministic_algorithms, warning once for an op that has none; "
        "cuDNN without autotuning); the run names what stays nondeterministic.",
    )
    threads: int = setting(
        0,
        "Torch CPU threads; 0 keeps torch's default (one per core). 1 is much faster on a busy small machine.",
        parse=non_negative_int,
        metavar="N",
    )
    speed: Speed = block(Speed, "How fast training runs (see :class:`Speed`).")

    # --- logging and checkpoints
    log_dir: str = setting("runs", "Each run gets its own directory under this one.", metavar="DIR")
    tensorboard: bool = setting(True, "Write TensorBoard event files into the run directory.")
    log_interval: int = setting(
        10, "Updates between loss scalars (averaged over the interval).", parse=positive_int, metavar="N"
    )
    histogram_interval: int = setting(
        500, "Updates between histograms of advantages and values.", parse=positive_int, metavar="N"
    )
    checkpoint_interval: int = setting(
        1000, "Updates between writes of a2c_last (it is also written at exit).", parse=positive_int, metavar="N"
    )
    eval_interval: int = setting(
        0,
        "Updates between evaluations of the current policy on separate envs (eval/ "
        "curves in TensorBoard, the best kept as a2c_best_eval); 0: none.",
        parse=non_negative_int,
        metavar="N",
    )
    eval_episodes: int = setting(
        10, "Whole games played at each evaluation (with --eval-interval).", parse=positive_int, metavar="N"
    )
    progress: bool = setting(True, "Live progress bar on the console.")

    # The blocks that algorithms declare in their own files, by name (see ALGORITHM_BLOCKS): read as
    # attributes (``config.clip.epochs``), saved nested as the blocks above.
    algorithm_blocks: dict[str, Any] = field(
        default_factory=lambda: {name: settings() for name, settings in ALGORITHM_BLOCKS.items()}, repr=False
    )

    def __getattr__(self, name: str) -> Any:
        """An algorithm's block of settings (``config.clip``), as an attribute like the blocks above."""
        blocks = self.__dict__.get("algorithm_blocks", {})
        if name in blocks:
            return blocks[name]
        raise AttributeError(
            f"{type(self).__name__!r} has no setting or block {name!r} (an algorithm's block "
            f"joins the configs made once it is registered: import algorithms first)"
        )

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.rollout_size

    @property
    def observation_window(self) -> tuple[int, bool]:
        """What the policy sees of a vector-observation env besides its observation (``gym_vec_env.ObservationWindow``)."""
        return self.obs_history, self.prev_action_reward

    @property
    def total_steps(self) -> int:
        return self.num_updates * self.steps_per_update

    def to_dict(self) -> dict[str, Any]:
        """Nested as the settings are: ``{"env_name": ..., "curiosity": {"enabled": ...}, "clip": {...}, ...}``."""
        values = dataclasses.asdict(self)
        return {**values, **values.pop("algorithm_blocks")}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Config":
        """Build from a saved dict, as this version or an older one saved it (see
        :func:`upgraded_settings`), ignoring keys this version no longer knows."""
        known = set(setting_names())
        return with_settings(cls(), {k: v for k, v in upgraded_settings(values).items() if k in known})


BLOCKS = {"curiosity": Curiosity, "adr": ADRSettings, "speed": Speed}  # Config's blocks, by the field that holds each
# The blocks of settings that algorithms declare in their own files, by name (``clip``: ppo.Clipped,
# ``group``: grpo.Group), added by the registry (algorithms.register) with add_algorithm_block.
ALGORITHM_BLOCKS: dict[str, type] = {}
# Older names of the settings of an algorithm's runs (by algorithm), as configs saved then hold them.
RENAMED: dict[str, dict[str, str]] = {}


def add_algorithm_block(name: str, settings: type, renamed: Optional[dict[str, str]] = None, algo: str = "") -> None:
    """Give every config made from now on the block ``name`` of ``settings`` (a dataclass of
    :func:`setting` fields); ``renamed``: older names of settings that runs of ``algo`` saved."""
    if name in BLOCKS or any(f.name == name for f in dataclasses.fields(Config)):
        raise ValueError(f"a block cannot be named {name!r}: a setting of every run is")
    ALGORITHM_BLOCKS[name] = settings
    if renamed:
        RENAMED.setdefault(algo, {}).update(renamed)


def _holder(name: str) -> Optional[type]:
    """The dataclass that declares setting ``name`` (``"lr"``: Config, ``"clip.eps"``: ppo.Clipped)."""
    block_name, _, inner = name.partition(".")
    if not inner:
        return Config
    return BLOCKS.get(block_name) or ALGORITHM_BLOCKS.get(block_name)


def setting_names() -> list[str]:
    """Every setting's name, in the order of the dataclasses, algorithms' blocks last: a block's
    settings as ``block.name``."""
    names = []
    for f in dataclasses.fields(Config):
        if f.name in BLOCKS:
            names += [f"{f.name}.{g.name}" for g in dataclasses.fields(BLOCKS[f.name])]
        elif f.name != "algorithm_blocks":
            names.append(f.name)
    for block_name, settings in ALGORITHM_BLOCKS.items():
        names += [f"{block_name}.{g.name}" for g in dataclasses.fields(settings)]
    return names


def setting_field(name: str) -> dataclasses.Field:
    """The field that declares setting ``name`` (as in :func:`setting_names`): its default and metadata."""
    holder = _holder(name)
    inner = name.partition(".")[2] or name
    for f in dataclasses.fields(holder) if holder else ():
        if f.name == inner:
            return f
    raise KeyError(name)


def field_doc(name: str) -> str:
    """The help text of setting ``name`` (as in :func:`setting_names`), declared in its field: the flag's help."""
    try:
        return setting_field(name).metadata.get("help", "")
    except KeyError:
        return ""


def flag_names(name: str) -> tuple[str, ...]:
    """The flag that sets setting ``name`` and its aliases: as declared, else ``--`` and the
    setting's own name with dashes (``num_envs``: ``--num-envs``; ``speed.bf16``: ``--bf16``)."""
    metadata = setting_field(name).metadata
    own = "--" + name.rpartition(".")[2].replace("_", "-")
    return (metadata.get("flag") or own, *metadata.get("aliases", ()))


def flag_of(name: str) -> str:
    """The flag that sets setting ``name`` (``"curiosity.policy_weight"``: ``--icm-policy-weight``)."""
    return flag_names(name)[0]


def is_switch(name: str) -> bool:
    """Whether setting ``name`` is on or off (typed ``--X`` / ``--no-X``)."""
    return setting_field(name).type in ("bool", "Optional[bool]")


def get_setting(config: Config, name: str) -> Any:
    """The value of setting ``name`` (``"lr"``, ``"curiosity.beta"``)."""
    value: Any = config
    for part in name.split("."):
        value = getattr(value, part)
    return value


def with_settings(config: Config, changes: dict[str, Any]) -> Config:
    """A copy of ``config`` with the settings ``changes`` names (as in :func:`setting_names`) replaced."""
    top: dict[str, Any] = {}
    blocks: dict[str, dict[str, Any]] = {}
    for name, value in changes.items():
        block, _, inner = name.partition(".")
        if inner:
            blocks.setdefault(block, {})[inner] = value
        else:
            top[name] = value
    algorithm_blocks = dict(config.algorithm_blocks)
    for block, inner in blocks.items():
        replaced = dataclasses.replace(getattr(config, block), **inner)
        if block in algorithm_blocks:
            algorithm_blocks[block] = replaced
        else:
            top[block] = replaced
    return dataclasses.replace(config, **top, algorithm_blocks=algorithm_blocks)


# ---------------------------------------------------------------------------------------------
# Configs saved by older versions
# ---------------------------------------------------------------------------------------------
# What a saved config without a setting meant: it was written before the setting existed, and ran
# the network and optimizer of that time (the defaults changed since; docs/recurrent.md).
ABSENT_FROM_OLDER_CONFIGS = {"feature_norm": False, "lstm_norm": False, "core_skip": False}
# The names the settings of a block had when all settings were flat, as in configs saved then.
FLAT_NAMES = {
    "icm": "curiosity.enabled",
    "curiosity_coeff": "curiosity.eta",
    "icm_beta": "curiosity.beta",
    "icm_lambda": "curiosity.policy_weight",
    "extrinsic_coeff": "curiosity.extrinsic_coeff",
    "icm_normalize": "curiosity.normalize",
    "icm_forward_grad": "curiosity.forward_trains_encoder",
    "channels_last": "speed.channels_last",
    "bf16": "speed.bf16",
}


def upgraded_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The settings of a saved config (nested as :meth:`Config.to_dict` writes it) by their names now
    (as in :func:`setting_names`), whatever version saved it: a setting the dict lacks takes the
    value it had before it existed where ``ABSENT_FROM_OLDER_CONFIGS`` names one (any other takes
    its default in :meth:`Config.from_dict`); configs saved before the settings were grouped (flat
    ``icm_beta`` and the like, ``FLAT_NAMES``) or with an algorithm's settings under older names
    (``RENAMED``, declared by each algorithm) read the same. Keys no setting has any more are
    passed on."""
    flat = {FLAT_NAMES.get(k, k): v for k, v in values.items() if not isinstance(v, dict)}
    if isinstance(flat.get("randomize_domain"), bool):  # a switch before ADR: on meant uniform draws
        flat["randomize_domain"] = "uniform" if flat["randomize_domain"] else ""
    for block, settings in values.items():
        if isinstance(settings, dict):
            flat.update({f"{block}.{k}": v for k, v in settings.items()})
    renamed = RENAMED.get(flat.get("algo", Config.algo), {})
    flat.update({new: flat[old] for old, new in renamed.items() if old in flat and new not in flat})
    return {**ABSENT_FROM_OLDER_CONFIGS, **flat}
