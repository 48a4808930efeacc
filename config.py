"""Every setting of a run, in one dataclass, each field with its default and its help text (the
flag's ``--help``). `main.py` fills it from the command line; tests build it directly."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional


OPTIMIZERS = ("rmsprop", "adam", "torch-rmsprop", "rmsprop-debiased")  # see agent.make_optimizer
RANDOMIZE_EVERY = ("episode", "never")  # when --randomize-domain draws an env's physics
RANDOMIZE_DOMAIN = ("uniform", "adr")  # what --randomize-domain draws from (randomize.py, adr.py)


def setting(default: Any, help: str) -> Any:
    """A setting's field: its default and its help text (read by :func:`field_doc`)."""
    return field(default=default, metadata={"help": help})


def block(settings: type, help: str) -> Any:
    """The field holding a block of settings (a dataclass of its own, built with its defaults)."""
    return field(default_factory=settings, metadata={"help": help})


@dataclass
class Curiosity:
    """The Intrinsic Curiosity Module's settings (Pathak et al. 2017; ``icm.py``): one block of a run's settings."""
    enabled: bool = setting(False, "Intrinsic Curiosity Module (Pathak et al. 2017): adds a curiosity reward and "
                                   "its losses.")
    eta: float = setting(0.01, "eta: intrinsic reward = eta/2 * forward-model error (with --icm).")
    beta: float = setting(0.2, "beta: curiosity loss = (1 - beta) * inverse loss + beta * forward loss (with "
                               "--icm).")
    policy_weight: float = setting(0.1, "lambda: objective = lambda * A2C loss + curiosity loss (with --icm).")
    extrinsic_coeff: float = setting(1.0, "Weight of the game's reward when curiosity is on; 0 trains on curiosity "
                                          "alone (with --icm).")
    normalize: bool = setting(False, "Divide intrinsic rewards by their running standard deviation (with --icm).")
    forward_trains_encoder: bool = setting(True, "Let the forward loss train the ICM's encoder phi, as in the "
                                                 "paper; off, phi learns from the inverse loss alone (with --icm).")


@dataclass
class Group:
    """Group-relative policy optimization's settings (``--algo grpo``; ``grpo.py``): one block of a run's settings."""
    size: int = setting(8, "Envs in a group: they reset with one seed (the same start state) and each member's "
                           "advantage is its return against the group's (with --algo grpo; must divide --num-envs).")
    horizon: int = setting(0, "Steps a member plays at most in a round (0: until its episode ends, within the env's "
                              "own time limit) (with --algo grpo).")
    scale_by_std: bool = setting(True, "Divide each advantage by its group's standard deviation; --no-group-std: "
                                       "the return minus the group's mean only, as Dr. GRPO (with --algo grpo).")
    kl_coeff: float = setting(0.0, "Weight of the KL penalty to a reference policy (k3 estimator); 0: none (with "
                                   "--algo grpo).")
    ref_interval: int = setting(10, "Updates between refreshes of the KL reference to the current policy (with "
                                    "--algo grpo --kl-coeff).")


@dataclass
class Clipped:
    """The clipped objective's settings (Schulman et al. 2017), one block that ``--algo ppo`` and
    ``--algo grpo`` share (``ppo.py``, ``grpo.py``); GRPO's defaults are 8 epochs of 16 minibatches."""
    epochs: int = setting(10, "Passes over each batch, a PPO rollout or a GRPO round (with --algo ppo or grpo).")
    minibatches: int = setting(32, "Minibatches per pass, one clipped gradient step each: of samples, of envs with "
                                   "--recurrent (PPO), of group members (GRPO) (with --algo ppo or grpo).")
    eps: float = setting(0.2, "The probability ratio is clipped to [1 - eps, 1 + eps] in the surrogate (with --algo "
                              "ppo or grpo).")
    sequence_length: int = setting(0, "With --recurrent: a rollout's env columns are cut into sequences of this many "
                                      "steps, each run from the state the network reached there, and minibatches "
                                      "hold sequences (0: whole columns) (with --algo ppo).")


@dataclass
class Curriculum:
    """Automatic domain randomization's settings (``--randomize-domain adr``; OpenAI et al. 2019; ``adr.py``)."""
    low: Optional[float] = setting(None, "A range narrows when the mean return of --adr-episodes episodes played at "
                                         "its edge is below this (None: the env's; LunarLander 100, CartPole 300) "
                                         "(with --randomize-domain adr).")
    high: Optional[float] = setting(None, "A range widens when that mean is at least this (None: the env's; "
                                          "LunarLander 200, CartPole 475) (with --randomize-domain adr).")
    step: float = setting(0.05, "How far a range's edge moves, as a share of the whole range it may cover (with "
                                "--randomize-domain adr).")
    episodes: int = setting(10, "Episodes played at an edge before it moves (with --randomize-domain adr).")
    boundary_prob: float = setting(0.5, "The share of episodes that play one range at its edge, the others "
                                        "drawn inside the ranges (with --randomize-domain adr).")


@dataclass
class Speed:
    """Settings that change how fast training runs, not what it computes (``--bf16`` and ``--tf32``
    aside, which change the arithmetic): each switches one trick, and docs/speed.md measures what each buys
    (``bench/throughput.py --ablation``). The C++ env path is ``--vec-env ale``, an env setting."""
    channels_last: Optional[bool] = setting(None, "Conv weights and activations in channels-last (NHWC) memory "
                                                  "order: the same network. None (the default): on for the CPU, "
                                                  "where it was measured faster; on a GPU only with --bf16.")
    keep_graph: bool = setting(True, "Train through the forward pass made while collecting the rollout, instead of "
                                     "running the rollout through the network again in the update: the same "
                                     "numbers, one forward pass fewer.")
    encoder_chunk: int = setting(16, "Frames per pass of the universe encoder on the CPU, whose first feature maps "
                                     "then stay nearer the core's cache (0: a batch in one pass, as on a GPU): the "
                                     "same numbers.")
    keep_freed_memory: bool = setting(True, "Let glibc's malloc keep freed blocks for reuse instead of returning "
                                            "them to the system, so activations do not fault in fresh pages at "
                                            "every update.")
    bf16: bool = setting(False, "Run the policy's conv encoder in bfloat16 (autocast); weights, LSTM, heads, losses "
                                "and optimizer stay float32. Faster on hardware with bfloat16 arithmetic (AVX-512 "
                                "BF16, AMX, recent GPUs); changes the arithmetic.")
    tf32: bool = setting(False, "On a GPU, let cuDNN's convolutions and cuBLAS's matmuls compute float32 in TF32 "
                                "(10 bits of mantissa; Ampere and later): faster, and changes the arithmetic. Off: "
                                "float32 is float32.")


@dataclass
class Config:
    # --- environment
    preset: str = setting("", "A named set of settings for Atari games, under the flags typed beside it: fast-cpu, "
                              "for training on a CPU without a GPU (see docs/speed.md); empty: none.")
    env_name: str = setting("PongNoFrameskip-v4", "Gymnasium id of an Atari game: PongNoFrameskip-v4 style or "
                                                  "ALE/Pong-v5 style.")
    num_envs: int = setting(16, "Envs stepped in parallel; one rollout holds num_envs x rollout_size transitions.")
    n_stack: int = setting(4, "Consecutive frames stacked into one observation.")
    frame_size: int = setting(84, "Atari frames are resized to frame_size x frame_size grayscale pixels (84: "
                                  "DQN's size; 64: the fast-cpu preset's; 42: the curiosity paper's, about 4x cheaper "
                                  "for the convolutions).")
    vec_env: str = setting("ale", "ale: ale-py's C++ vector env (the preprocessing of SB3's Atari wrappers, stepped "
                                  "in C++ threads; faster); dummy (or sync): SB3's Atari wrappers, all envs in this "
                                  "process; subproc (or async): the same, one process per env. Other envs: "
                                  "gymnasium's vector env, async (or subproc) one process per env, otherwise all in "
                                  "this process.")
    max_episode_frames: Optional[int] = setting(None, "Cap on an episode's emulator frames (a time-limit "
                                                      "truncation); None keeps the game's own limit.")
    sticky_actions: Optional[float] = setting(None, "Atari: at every emulator frame, the previous action is "
                                                    "repeated instead of the chosen one with this probability "
                                                    "(sticky actions, Machado et al. 2018), in [0, 1); None: the "
                                                    "id's own, 0 for NoFrameskip-v4 ids and 0.25 for ALE/...-v5.")
    randomize_domain: str = setting("", "Each episode plays physics of its own, drawn from the seed (LunarLander: "
                                        "gravity, wind, turbulence; CartPole: gravity, pole mass and length; see "
                                        "randomize.py): uniform, from the whole ranges; adr, automatic domain "
                                        "randomization (adr.py), from ranges that start at the default physics and "
                                        "widen where the agent does well; empty: the default physics.")
    physics: str = setting("", "Every env plays these physics, e.g. gravity=-3,wind_power=15: one cell of "
                               "--physics-grid (its other values as there), for a specialist of that cell; empty: "
                               "the env's default.")
    randomize_every: str = setting("episode", "With --randomize-domain: episode draws new physics at every reset; "
                                              "never keeps each env's first draw.")
    adr: Curriculum = block(Curriculum, "Automatic domain randomization's settings (see :class:`Curriculum`).")
    obs_history: int = setting(1, "Vector observations the policy sees at each step: the current one and the "
                                  "obs_history - 1 before it in the episode (zeros before its start).")
    prev_action_reward: bool = setting(False, "The policy also sees its previous action (one-hot) and reward "
                                              "(vector observations).")
    normalize_obs: bool = setting(False, "Vector observations minus their running mean, over their running std, "
                                         "clipped to +-10 (the statistics are saved in checkpoints and frozen in "
                                         "evaluation).")
    normalize_reward: bool = setting(False, "Rewards over the running std of the discounted return, clipped to +-10 "
                                            "(logged returns stay raw).")
    seed: int = setting(42, "Seeds torch, numpy, Python's random and the envs (env i gets seed + i); from 0 to "
                            "2**30 - 1.")

    # --- model
    arch: str = setting("universe", "universe: 4 conv layers (32 3x3 filters, stride 2, ELU) giving 288 features; "
                                    "nature: the Nature-DQN CNN (32 8x8/4, 64 4x4/2, 64 3x3/1, 512 units, ReLU), "
                                    "about a fifth cheaper to train on the CPU.")
    recurrent: bool = setting(True, "Encoder followed by an LSTM cell; False drops the LSTM (feed-forward).")
    hidden_size: int = setting(256, "Size of the LSTM state.")
    conv_filters: int = setting(32, "Filters in each of the universe encoder's 4 conv layers (Atari frames; its "
                                    "features are 9 times as many). The curiosity module's encoder keeps 32.")
    mlp_width: int = setting(64, "Units in each of the two tanh layers of the MLP encoder (vector observations; the "
                                 "actor's and, without --recurrent, the critic's).")
    log_std_init: float = setting(0.0, "Starting log standard deviation of the Gaussian policy (continuous actions; "
                                       "0: std 1).")
    sde: bool = setting(False, "State-dependent exploration (gSDE's noise model): each continuous action's spread "
                               "is a learned function of the actor's features, not one number per action; each "
                               "env's noise weights are drawn once a rollout, so its noise follows the state "
                               "(--eval and GRPO draw noise every step).")
    feature_norm: bool = setting(False, "Layer-normalize each frame's encoder features (learned scale and shift) "
                                        "before the LSTM or the heads.")
    lstm_norm: bool = setting(True, "A layer-normalized LSTM cell (the gates' input and state parts, and the cell, "
                                    "each layer-normalized), whose gates cannot all saturate; False: torch's "
                                    "LSTMCell.")
    core_skip: bool = setting(True, "The heads read the encoder's features beside the LSTM's output (a skip "
                                    "connection around the core).")

    # --- algorithm
    algo: str = setting("a2c", "a2c: advantage actor-critic; ppo: A2C's rollouts and critic, trained with PPO's "
                               "clipped objective over several epochs of minibatches; grpo: critic-free "
                               "group-relative policy optimization (ppo and grpo: vector-observation envs).")
    group: Group = block(Group, "GRPO's settings (see :class:`Group`).")
    clip: Clipped = block(Clipped, "The clipped objective's settings of PPO and GRPO (see :class:`Clipped`).")
    rollout_size: int = setting(5, "Steps per env in one rollout: the n of n-step returns and the length of "
                                   "truncated BPTT.")
    num_updates: int = setting(125_000, "Gradient updates in the whole run (125,000 x 16 envs x 5 steps = 10M env "
                                        "steps).")
    max_env_steps: Optional[int] = setting(None, "Stop once this many env steps are done, if before --num-updates "
                                                 "(GRPO's rounds vary in length).")
    gamma: float = setting(0.99, "Discount factor.")
    gae_lambda: float = setting(1.0, "1.0: n-step returns; below 1: generalized advantage estimation.")
    normalize_advantages: bool = setting(False, "Each rollout's advantages (with --algo ppo: each minibatch's) to "
                                                "zero mean and unit standard deviation before the policy loss "
                                                "(SB3's normalize_advantage): the policy's step no longer scales "
                                                "with the rewards.")
    critic: bool = setting(True, "A critic (value head) as baseline and bootstrap; False: none and no value loss, "
                                 "so each advantage is the discounted reward to the rollout's end (REINFORCE over "
                                 "the rollout).")
    value_coeff: float = setting(0.5, "Weight of the value loss.")
    entropy_coeff: float = setting(0.01, "Weight of the entropy bonus.")
    entropy_schedule: str = setting("constant", "constant, or linear decay of the entropy bonus's weight to 0 at "
                                                "the last update (as lr_schedule).")
    entropy_decay_start: float = setting(0.0, "With entropy_schedule linear: the share of the run, from 0 to 1, "
                                              "trained at the full weight before its linear decay to 0 at the last "
                                              "update begins (0: from the first update).")
    max_grad_norm: float = setting(0.5, "Gradients are clipped to this global norm.")
    optimizer: str = setting("torch-rmsprop", "torch-rmsprop: torch.optim.RMSprop (alpha 0.99, eps 1e-5); rmsprop: "
                                              "RMSprop as TensorFlow computes it (the square average starts at 1, "
                                              "eps inside the root), which keeps a plain LSTM alive but learns "
                                              "slowly; adam (eps 1e-5); rmsprop-debiased: torch.optim.RMSprop's "
                                              "formula with the square average bias-corrected (Adam without "
                                              "momentum: betas 0 and 0.99, eps 1e-5).")
    lr: float = setting(7e-4, "Learning rate.")
    lr_schedule: str = setting("constant", "constant, or linear decay to 0 at the last update.")
    lr_decay_start: float = setting(0.0, "With lr_schedule linear: the share of the run, from 0 to 1, trained at "
                                         "the full rate before the linear decay to 0 at the last update begins "
                                         "(0: from the first update).")
    lr_decay_from: float = setting(1.0, "With lr_schedule linear: the rate the decay begins at, as a share of lr "
                                        "(1: the full rate; 0.5: the rate halves where the decay begins, then "
                                        "falls linearly to 0 at the last update).")
    curiosity: Curiosity = block(Curiosity, "The Intrinsic Curiosity Module's settings (see :class:`Curiosity`).")
    max_skipped_updates: int = setting(10, "Training stops after this many non-finite losses in a row (a2c_last "
                                           "keeps the last good state).")

    # --- hardware
    cuda: Optional[bool] = setting(None, "--cuda: the GPU for any env (on a machine without CUDA, say so and use "
                                         "the CPU); --no-cuda: the CPU. Neither: Atari games on the GPU when CUDA "
                                         "is available, vector-observation envs on the CPU (their small networks "
                                         "run faster there). The device is this process's, not the run's: a resumed "
                                         "run or an evaluation takes what is typed now.")
    reproducible: bool = setting(False, "Deterministic kernels where torch has them "
                                        "(torch.use_deterministic_algorithms, warning once for an op that has none; "
                                        "cuDNN without autotuning); the run names what stays nondeterministic.")
    threads: int = setting(0, "Torch CPU threads; 0 keeps torch's default (one per core). 1 is much faster on a "
                              "busy small machine.")
    speed: Speed = block(Speed, "How fast training runs (see :class:`Speed`).")

    # --- logging and checkpoints
    log_dir: str = setting("runs", "Each run gets its own directory under this one.")
    tensorboard: bool = setting(True, "Write TensorBoard event files into the run directory.")
    log_interval: int = setting(10, "Updates between loss scalars (averaged over the interval).")
    histogram_interval: int = setting(500, "Updates between histograms of advantages and values.")
    checkpoint_interval: int = setting(1000, "Updates between writes of a2c_last (it is also written at exit).")
    eval_interval: int = setting(0, "Updates between evaluations of the current policy on separate envs (eval/ "
                                    "curves in TensorBoard, the best kept as a2c_best_eval); 0: none.")
    eval_episodes: int = setting(10, "Whole games played at each evaluation (with --eval-interval).")
    progress: bool = setting(True, "Live progress bar on the console.")

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.rollout_size

    @property
    def history(self) -> tuple[int, bool]:
        """What the policy sees of a vector-observation env besides its observation (``gym_vec_env.History``)."""
        return self.obs_history, self.prev_action_reward

    @property
    def total_steps(self) -> int:
        return self.num_updates * self.steps_per_update

    def to_dict(self) -> dict[str, Any]:
        """Nested as the settings are: ``{"env_name": ..., "curiosity": {"enabled": ...}, ...}``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Config":
        """Build from a saved dict, as this version or an older one saved it (see
        :func:`upgraded_settings`), ignoring keys this version no longer knows."""
        known = set(setting_names())
        return with_settings(cls(), {k: v for k, v in upgraded_settings(values).items() if k in known})


BLOCKS = {"curiosity": Curiosity, "group": Group, "clip": Clipped, "adr": Curriculum, "speed": Speed}  # settings grouped in a block of their own, by the field that holds it


def setting_names() -> list[str]:
    """Every setting's name, in the order of the dataclasses: a block's settings as ``block.name``."""
    names = []
    for f in dataclasses.fields(Config):
        if f.name in BLOCKS:
            names += [f"{f.name}.{g.name}" for g in dataclasses.fields(BLOCKS[f.name])]
        else:
            names.append(f.name)
    return names


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
    for block, inner in blocks.items():
        top[block] = dataclasses.replace(getattr(config, block), **inner)
    return dataclasses.replace(config, **top)


def field_doc(name: str) -> str:
    """The help text of setting ``name`` (as in :func:`setting_names`), declared in its field: the flag's help."""
    block_name, _, inner = name.partition(".")
    holder = BLOCKS.get(block_name) if inner else Config
    for f in dataclasses.fields(holder) if holder else ():
        if f.name == (inner or name):
            return f.metadata.get("help", "")
    return ""


# ---------------------------------------------------------------------------------------------
# Configs saved by older versions
# ---------------------------------------------------------------------------------------------
# What a saved config without a setting meant: it was written before the setting existed, and ran
# the network and optimizer of that time (the defaults changed since; docs/recurrent.md).
ABSENT_FROM_OLDER_CONFIGS = {"feature_norm": False, "lstm_norm": False, "core_skip": False}
# The names the settings of a block had when all settings were flat, as in configs saved then.
FLAT_NAMES = {"icm": "curiosity.enabled", "curiosity_coeff": "curiosity.eta", "icm_beta": "curiosity.beta",
              "icm_lambda": "curiosity.policy_weight", "extrinsic_coeff": "curiosity.extrinsic_coeff",
              "icm_normalize": "curiosity.normalize", "icm_forward_grad": "curiosity.forward_trains_encoder",
              "channels_last": "speed.channels_last", "bf16": "speed.bf16"}
# Where the clipped objective's settings were, in configs saved before the ``clip`` block.
CLIPPED_BEFORE = {"ppo": {"ppo.epochs": "clip.epochs", "ppo.minibatches": "clip.minibatches", "ppo.clip_eps": "clip.eps"},
                  "group": {"group.update_epochs": "clip.epochs", "group.minibatches": "clip.minibatches",
                            "group.clip_eps": "clip.eps"}}


def upgraded_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The settings of a saved config (nested as :meth:`Config.to_dict` writes it) by their names now
    (as in :func:`setting_names`), whatever version saved it: a setting the dict lacks takes the
    value it had before it existed where ``ABSENT_FROM_OLDER_CONFIGS`` names one (any other takes
    its default in :meth:`Config.from_dict`); configs saved before the
    settings were grouped (flat ``icm_beta`` and the like, ``FLAT_NAMES``) or before PPO and GRPO
    shared the ``clip`` block (``CLIPPED_BEFORE``) read the same. Keys no setting has any more are
    passed on."""
    flat = {FLAT_NAMES.get(k, k): v for k, v in values.items() if not isinstance(v, dict)}
    if isinstance(flat.get("randomize_domain"), bool):  # a switch before ADR: on meant uniform draws
        flat["randomize_domain"] = "uniform" if flat["randomize_domain"] else ""
    for block, settings in values.items():
        if isinstance(settings, dict):
            flat.update({f"{block}.{k}": v for k, v in settings.items()})
    # Before PPO and GRPO shared the clipped objective's block, each had its own.
    own = CLIPPED_BEFORE["group" if flat.get("algo") == "grpo" else "ppo"]
    flat.update({new: flat[old] for old, new in own.items() if old in flat and new not in flat})
    return {**ABSENT_FROM_OLDER_CONFIGS, **flat}
