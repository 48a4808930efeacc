"""The env factory of training and evaluation (:func:`make_vec_env`, :func:`make_eval_envs`), which
hands each id to its env family (``families.py``; :func:`family_of`). The two built-in families are
registered at the end of this module:

* ``atari``: games become frame-stacked, channel-first, uint8 vector envs: ale-py's C++ vector env
  (the default, ``vec_env="ale"``: see ``ale_vec_env.py``) or stable-baselines3's Atari wrappers,
  with the same preprocessing; evaluated under the ``classic`` or ``machado`` protocol;
* ``vector``: other gymnasium envs with flat vector observations, in gymnasium's own vector envs
  (``gym_vec_env.py``), with the RL Zoo's A2C settings as defaults (``VECTOR_DEFAULTS``, ``ENV_DEFAULTS``).

SB3's wrapper order per env, from the emulator out::

    gym.make(id) -> Monitor -> AtariWrapper (no-op starts, frame skip 4 with max-pool, life loss ends
    the learning episode, fire on reset, 84x84 grayscale, reward clipping)

then, over the vector: frame stack (``n_stack`` frames) and a transpose to ``[C, H, W]``. The
Monitor sits under the Atari wrappers, so the episode returns it reports (``info["episode"]``)
are raw full-game scores, while the agent learns from clipped rewards and per-life episodes.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import ale_py
import gymnasium as gym
from stable_baselines3.common.atari_wrappers import AtariWrapper
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecFrameStack, VecTransposeImage

from ale_vec_env import AleVecEnv, EnvGroups, frame_cap
from config import PRESETS
from control import workers_ignore_stop_signals
from families import FAMILIES, EnvFamily, owner, register_family
from gym_vec_env import GymVecEnv
from randomize import physics_wrapper
from utils import UsageError, probe_writable
from video import GameRecorder

gym.register_envs(ale_py)

VEC_ENVS = {"dummy": DummyVecEnv, "subproc": SubprocVecEnv}  # the SB3 wrapper pipeline, run in-process or in workers
VEC_ENV_CHOICES = (*VEC_ENVS, "ale")  # "ale": ale-py's C++ vector env (see ale_vec_env.py)


def check_env_id(env_name: str) -> None:
    """Raise `UsageError` unless `env_name` is a registered gymnasium id, suggesting close ids."""
    if env_name not in gym.registry:
        close = _close_ids(env_name) or difflib.get_close_matches(env_name, list(gym.registry), n=2, cutoff=0.8)
        hint = (
            f"; did you mean {', '.join(close)}?"
            if close
            else "; Atari ids look like PongNoFrameskip-v4 or ALE/Pong-v5, others like CartPole-v1"
        )
        raise UsageError(f"unknown env id '{env_name}'{hint}")


def check_env(env_name: str) -> bool:
    """:func:`check_env_id`, then its family's check (``EnvFamily.check``: a vector env's spaces, one
    env built and closed): raise `UsageError` before anything is written if the agent cannot play it.
    Returns whether its actions are continuous (an Atari game's never are)."""
    return family_of(env_name).check(env_name)


def family_of(env_name: str) -> EnvFamily:
    """The family of the registered id ``env_name`` (``families.py``); a one-line `UsageError` for an
    unknown id or one that no family owns."""
    check_env_id(env_name)
    family = owner(env_name)
    if family is None:
        raise UsageError(f"'{env_name}' belongs to no env family this agent knows")
    return family


def owner_of(env_name: str) -> Optional[EnvFamily]:
    """The family of ``env_name``; None for an id that is not registered (a checkpoint of an env made
    in another program) or that no family owns."""
    return owner(env_name) if env_name in gym.registry else None


def _check_vector_env(env_name: str) -> bool:
    try:
        env = gym.make(env_name)
    except gym.error.DependencyNotInstalled as exc:  # e.g. MuJoCo for HalfCheetah-v5
        raise UsageError(f"{env_name} needs a package that is not installed: {exc}") from None
    try:
        return _check_spaces(env_name, env.observation_space, env.action_space)
    finally:
        env.close()


def _check_spaces(env_name: str, observation_space: gym.Space, action_space: gym.Space) -> bool:
    if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1):
        raise UsageError(
            f"'{env_name}' observes {observation_space}; this agent trains on Atari games and on "
            "envs with flat Box observations"
        )
    return action_size(action_space)[1]  # refuses what it cannot act in


def is_atari(env_name: str) -> bool:
    """Whether ``env_name`` is a registered ALE game (played as frame-stacked grayscale images)."""
    return env_name in gym.registry and _is_atari(env_name)


def action_size(space: gym.Space) -> tuple[int, bool]:
    """``(size, continuous)`` of an action space: ``(n, False)`` for ``Discrete(n)``, ``(A, True)``
    for a ``Box`` of shape ``(A,)``; any other space is refused."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n), False
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return int(space.shape[0]), True
    raise UsageError(f"action space {space} is not supported (Discrete and flat Box are)")


def game_of(env_id: str) -> str:
    """'ALE/Pong-v5', 'PongNoFrameskip-v4', 'pong' -> 'pong'."""
    name = env_id.split("/")[-1]
    return re.sub(r"(NoFrameskip|Deterministic)?(-v\d+)?$", "", name).lower()


def _close_ids(env_name: str) -> list[str]:
    """Ids of the games whose names are closest to ``env_name``, in the two forms this agent is meant for."""
    by_game: dict[str, list[str]] = {}
    for env_id in gym.registry:
        if _is_atari(env_id) and (env_id.endswith("NoFrameskip-v4") or env_id.startswith("ALE/")):
            by_game.setdefault(game_of(env_id), []).append(env_id)
    games = difflib.get_close_matches(game_of(env_name), list(by_game), n=2, cutoff=0.6)
    return [env_id for game in games for env_id in sorted(by_game[game], reverse=True)]


def _is_atari(env_name: str) -> bool:
    entry = gym.registry[env_name].entry_point
    return isinstance(entry, str) and entry.startswith("ale_py")


def id_sticky_actions(env_name: str) -> float:
    """The probability of sticky actions that an Atari id sets itself: 0 for ``...NoFrameskip-v4``, 0.25 for ``ALE/...-v5``."""
    return float(gym.registry[env_name].kwargs.get("repeat_action_probability", 0.0))


def check_sticky_actions(sticky_actions: Optional[float], env_name: str) -> None:
    """Refuse, in one line, sticky actions outside [0, 1) or for an env that is not an Atari game."""
    if sticky_actions is None:
        return
    if family_of(env_name).sticky_actions(env_name) is None:
        raise UsageError(f"--sticky-actions is for Atari games; {env_name} has no emulator to repeat actions")
    if not 0 <= sticky_actions < 1:
        raise UsageError(f"--sticky-actions is a probability in [0, 1), got {sticky_actions:g}")


def wrapper_skips_frames(env_name: str) -> dict[str, Any]:
    """Emulator settings for SB3's Atari wrapper: v5 ids skip frames in the emulator, but here the
    wrapper does the skipping (with max-pooling), so the emulator's own skipping is turned off."""
    return {"frameskip": 1} if gym.registry[env_name].kwargs.get("frameskip", 1) != 1 else {}


def stack_frames(venv: VecEnv, n_stack: int) -> VecEnv:
    """The last ``n_stack`` frames of each env, channel-first: observations ``[N, n_stack, H, W]`` uint8."""
    return VecTransposeImage(VecFrameStack(venv, n_stack=n_stack, channels_order="last"))


def _make_ale(env_name: str, **kwargs: Any) -> gym.Env:
    # Runs in the worker process too (subproc), which must register the ALE ids itself.
    gym.register_envs(ale_py)
    return gym.make(env_name, **kwargs)


def make_vec_env(
    env_name: str,
    num_envs: int,
    n_stack: int = 4,
    seed: int = 0,
    vec_env: str = "ale",
    max_episode_frames: int | None = None,
    env_kwargs: Optional[Sequence[dict[str, Any]]] = None,
    *,
    randomize: Optional[str] = None,
    physics: Optional[dict[str, Any]] = None,
    wrap: Optional[Callable[[int, gym.Env], gym.Env]] = None,
    frame_size: int = 84,
    adr: Any = None,
    observation_window: tuple[int, bool] = (1, False),
    sticky_actions: Optional[float] = None,
    groups: int = 1,
) -> VecEnv:
    """`num_envs` copies of a gymnasium env, the one factory of training and evaluation.

    An Atari game gives frame-stacked images ``[num_envs, n_stack, frame_size, frame_size]`` uint8
    (grayscale screens resized by area interpolation, on either path); ``vec_env``
    is ``ale`` for the C++ vector env (the default, faster), or ``dummy`` / ``sync`` or
    ``subproc`` / ``async`` for SB3's wrappers in this process or one process an env. Any other
    env with a flat ``Box`` observation runs in gymnasium's vector env (``gym_vec_env.GymVecEnv``:
    ``subproc`` / ``async`` one process an env, otherwise all in this process), with
    ``env_kwargs[i]`` passed to env i's ``gym.make`` (Atari takes none).

    Env i is seeded with ``seed + i``. ``max_episode_frames`` caps an episode's emulator frames
    (Atari) or steps (other envs): a time-limit truncation, reported with ``info["TimeLimit.truncated"]``.
    ``sticky_actions`` (Atari): the probability that the emulator repeats the previous action at a
    frame, on every path alike; None keeps the id's own (``id_sticky_actions``).

    Physics (non-Atari envs that ``randomize.py`` knows): ``randomize`` draws each env's physics
    from the seed, afresh at every reset (``"episode"``) or once (``"never"``); ``physics`` gives
    every env the same (a cell of an evaluation grid); ``adr`` (an ``adr.ADR``) draws them from
    its ranges, which move with the returns (in this process only). ``wrap(i, env)`` wraps env i further
    (e.g. a video recorder), outside its physics. ``observation_window`` (non-Atari envs): what
    ``gym_vec_env.ObservationWindow`` shows the policy, (observations, previous action and reward).
    ``groups`` (Atari on ``vec_env="ale"``, a speed setting): the games in that many C++ vector envs
    (``ale_vec_env.EnvGroups``), each game seeded as in one, for overlap.py to step in turn.
    """
    check_sticky_actions(sticky_actions, env_name)
    return family_of(env_name).make_envs(
        env_name,
        num_envs,
        n_stack,
        seed,
        vec_env,
        max_episode_frames,
        env_kwargs,
        randomize=randomize,
        physics=physics,
        wrap=wrap,
        frame_size=frame_size,
        adr=adr,
        observation_window=observation_window,
        sticky_actions=sticky_actions,
        groups=groups,
    )


def _vector_envs(
    env_name: str,
    num_envs: int,
    n_stack: int,
    seed: int,
    vec_env: str,
    max_episode_frames: Optional[int],
    env_kwargs: Optional[Sequence[dict[str, Any]]],
    *,
    randomize: Optional[str],
    physics: Optional[dict[str, Any]],
    wrap: Optional[Callable[[int, gym.Env], gym.Env]],
    adr: Any,
    observation_window: tuple[int, bool],
    groups: int,
    **_: Any,
) -> VecEnv:
    """The vector family's envs (``make_vec_env``): gymnasium's vector env, physics and window on top."""
    if groups != 1:
        raise UsageError(f"--env-groups splits ale-py's C++ vector env of Atari games, not {env_name}'s")
    mode = "async" if vec_env in ("subproc", "async") else "sync"
    if adr is not None and mode == "async":
        raise UsageError(
            "--randomize-domain adr moves one set of ranges that every env draws from: it "
            "needs the envs in this process (--vec-env sync), not --vec-env async"
        )
    if randomize is not None or physics is not None or adr is not None:
        wrap = physics_wrapper(env_name, seed, randomize or "never", physics, outer=wrap, adr=adr)
    venv = GymVecEnv(
        env_name, num_envs, seed, mode, env_kwargs, max_episode_frames, wrap=wrap, observation_window=observation_window
    )
    try:
        _check_spaces(env_name, venv.observation_space, venv.action_space)
    except UsageError:
        venv.close()
        raise
    return venv


def _atari_envs(
    env_name: str,
    num_envs: int,
    n_stack: int,
    seed: int,
    vec_env: str,
    max_episode_frames: Optional[int],
    env_kwargs: Optional[Sequence[dict[str, Any]]],
    *,
    randomize: Optional[str],
    physics: Optional[dict[str, Any]],
    wrap: Optional[Callable[[int, gym.Env], gym.Env]],
    frame_size: int,
    adr: Any,
    observation_window: tuple[int, bool],
    sticky_actions: Optional[float],
    groups: int,
) -> VecEnv:
    """The Atari family's envs (``make_vec_env``): frame-stacked screens, on ale-py's C++ vector env or SB3's wrappers."""
    if (
        env_kwargs is not None
        or randomize is not None
        or physics is not None
        or wrap is not None
        or adr is not None
        or observation_window != (1, False)
    ):
        raise UsageError("per-env keyword arguments, physics and wrappers are for non-Atari envs")
    vec_env = {"sync": "dummy", "async": "subproc"}.get(vec_env, vec_env)
    if groups != 1 and vec_env != "ale":
        raise UsageError(f"--env-groups splits ale-py's C++ vector env (--vec-env ale), not --vec-env {vec_env}")
    if groups != 1 and num_envs % groups:
        raise UsageError(f"--env-groups {groups} must divide --num-envs {num_envs} into groups of one size")
    if vec_env == "ale":

        def games(n: int, first: int = 0) -> AleVecEnv:  # n games, the first seeded as game `first`
            settings = dict(frame_size=frame_size, repeat_action_probability=sticky_actions)
            return AleVecEnv(env_name, n, n_stack, seed + first, max_episode_frames, **settings)

        return games(num_envs) if groups == 1 else EnvGroups(games, num_envs, groups)
    env_kwargs = wrapper_skips_frames(env_name)
    if sticky_actions is not None:
        env_kwargs["repeat_action_probability"] = sticky_actions
    if max_episode_frames is not None:
        env_kwargs["max_episode_steps"] = max_episode_frames
    with workers_ignore_stop_signals():  # Ctrl+C stops the run, not its subproc workers (see control.py)
        venv = make_atari_env(
            functools.partial(_make_ale, env_name),
            n_envs=num_envs,
            seed=seed,
            env_kwargs=env_kwargs,
            vec_env_cls=VEC_ENVS[vec_env],
            wrapper_kwargs={"screen_size": frame_size},
        )
    return stack_frames(venv, n_stack)


# ------------------------------------------------------------------------------------------------ evaluation
# The envs of ``main.py --eval`` and of the periodic evaluation: the games under an evaluation
# protocol (evaluate.py's docstring describes both).
PROTOCOLS = ("classic", "machado")
MACHADO_MAX_FRAMES = 108_000  # 30 minutes of play at 60 frames a second


@dataclass(frozen=True)
class Protocol:
    """What an evaluation protocol sets in the emulator and the Atari wrapper."""

    repeat_action_probability: float
    noop_max: int
    max_episode_frames: Optional[int]  # a time limit on top of the id's own; None: the id's own only


PROTOCOL_SETTINGS = {
    "classic": Protocol(repeat_action_probability=0.0, noop_max=30, max_episode_frames=None),
    "machado": Protocol(repeat_action_probability=0.25, noop_max=0, max_episode_frames=MACHADO_MAX_FRAMES),
}


def make_eval_envs(
    env_name: str,
    num_envs: int,
    seed: int,
    protocol: Union[str, Protocol] = "classic",
    n_stack: int = 4,
    full_action_space: bool = False,
    video_dir: Optional[str] = None,
    max_episodes_per_env: Union[int, Sequence[int], None] = None,
    max_episode_frames: Optional[int] = None,
    vec_env: str = "dummy",
    frame_size: int = 84,
    observation_window: tuple[int, bool] = (1, False),
) -> VecEnv:
    """``num_envs`` evaluation copies of an Atari game under ``protocol`` (a name of ``PROTOCOLS``, or
    a `Protocol` of its own, e.g. one cell of ``robustness.py``): observations
    ``[num_envs, n_stack, frame_size, frame_size]`` uint8, as in training (see ``envs.make_vec_env``). Any other
    env is played as in training, in gymnasium's vector env (``gym_vec_env.GymVecEnv``), under
    the classic protocol only (the protocols' settings are the emulator's).

    ``vec_env`` is the env path the agent was trained on, so that it plays with the same
    preprocessing: ``ale`` (ale-py's C++ vector env, the training default) or SB3's wrappers
    (``dummy``/``subproc``, which after a lost life zero the frame stack and press FIRE, where the
    ``ale`` path leaves both to the agent). Videos need each game's screen, which the C++ envs do
    not expose, so with ``video_dir`` Atari games are played through SB3's wrappers whatever
    ``vec_env``, in this process; other envs are then made with ``render_mode="rgb_array"`` and
    played in this process too (``GymVecEnv``'s ``sync`` mode), as the recorders write files.

    Env i is seeded with ``seed + i``. ``full_action_space`` (machado only) plays with all 18
    actions. ``max_episode_frames`` replaces the protocol's cap on a game's emulator frames
    (steps, for other envs; a time-limit truncation, meant for short test games). With
    ``video_dir`` (made if missing), env i records its games there (see `GameRecorder`), at most
    ``max_episodes_per_env`` of them (an int for every env, or one per env; None: all). ``observation_window``:
    what other envs show the policy, as in training (``make_vec_env``). Episode
    numbers are unique across envs, for Atari and other envs alike: with one cap per env (e.g.
    `episode_shares`) env i numbers its games after the caps of envs 0..i-1, so the numbers run
    1..sum(caps); with one cap for all envs, env i numbers in blocks of that cap; without caps,
    the k-th game of env i is number ``k * num_envs + i + 1``.
    """
    if isinstance(protocol, str) and protocol not in PROTOCOL_SETTINGS:
        raise UsageError(f"unknown evaluation protocol '{protocol}' (one of {', '.join(PROTOCOLS)})")
    if full_action_space and protocol != "machado":
        raise UsageError(
            "--full-action-space belongs to --protocol machado (the classic protocol plays the minimal action set)"
        )
    family = family_of(env_name)
    name = protocol if isinstance(protocol, str) else "machado"  # a protocol of its own sets the emulator
    if name not in family.protocols:
        raise UsageError(
            f"--protocol {name} is for {', '.join(f.label for f in FAMILIES.values() if name in f.protocols)}, "
            f"not {env_name} (it plays the {' or '.join(family.protocols)} protocol)"
        )

    caps: list[Optional[int]]
    if max_episodes_per_env is None or isinstance(max_episodes_per_env, int):
        caps = [max_episodes_per_env] * num_envs
    else:
        caps = [int(c) for c in max_episodes_per_env]
        if len(caps) != num_envs:
            raise ValueError(f"max_episodes_per_env has {len(caps)} entries for {num_envs} envs")
    if video_dir is not None:
        try:
            os.makedirs(video_dir, exist_ok=True)
            probe_writable(video_dir)
        except OSError as exc:
            raise UsageError(f"cannot write videos to '{video_dir}': {exc.strerror or exc}") from None

    def record(rank: int, env: gym.Env) -> gym.Env:
        """Env ``rank`` with its `GameRecorder`, numbered as the docstring says."""
        if caps[rank] is None:
            first, stride = rank + 1, num_envs
        else:
            first, stride = 1 + sum(caps[:rank]), 1  # type: ignore[arg-type]
        return GameRecorder(
            env, video_dir, f"env{rank:02d}", first_episode=first, episode_stride=stride, max_games=caps[rank]
        )

    return family.make_eval_envs(
        env_name,
        num_envs,
        seed,
        PROTOCOL_SETTINGS[protocol] if isinstance(protocol, str) else protocol,
        n_stack=n_stack,
        full_action_space=full_action_space,
        record=record if video_dir is not None else None,
        max_episode_frames=max_episode_frames,
        vec_env=vec_env,
        frame_size=frame_size,
        observation_window=observation_window,
    )


def _vector_eval_envs(
    env_name: str,
    num_envs: int,
    seed: int,
    protocol: Protocol,
    *,
    record: Optional[Callable[[int, gym.Env], gym.Env]],
    max_episode_frames: Optional[int],
    vec_env: str,
    observation_window: tuple[int, bool],
    **_: Any,
) -> VecEnv:
    """The vector family's evaluation envs (``make_eval_envs``): as in training; with videos, rendered in this process."""
    if record is None:
        return make_vec_env(
            env_name,
            num_envs,
            seed=seed,
            vec_env=vec_env,
            max_episode_frames=max_episode_frames,
            observation_window=observation_window,
        )
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame renders off screen (no display needed)
    return GymVecEnv(
        env_name,
        num_envs,
        seed,
        "sync",
        [{"render_mode": "rgb_array"}] * num_envs,
        max_episode_frames,
        wrap=record,
        observation_window=observation_window,
    )


def _atari_eval_envs(
    env_name: str,
    num_envs: int,
    seed: int,
    settings: Protocol,
    *,
    n_stack: int,
    full_action_space: bool,
    record: Optional[Callable[[int, gym.Env], gym.Env]],
    max_episode_frames: Optional[int],
    vec_env: str,
    frame_size: int,
    **_: Any,
) -> VecEnv:
    """The Atari family's evaluation envs (``make_eval_envs``): the games under the protocol's emulator settings."""
    env_kwargs: dict[str, Any] = {
        "repeat_action_probability": settings.repeat_action_probability,
        "full_action_space": bool(full_action_space),
        **wrapper_skips_frames(env_name),
    }
    cap = max_episode_frames if max_episode_frames is not None else settings.max_episode_frames
    if cap is not None:
        env_kwargs["max_episode_steps"] = int(cap)
    if vec_env == "ale" and record is None:
        return AleVecEnv(
            env_name,
            num_envs,
            n_stack,
            seed,
            max_episode_frames=cap,
            repeat_action_probability=settings.repeat_action_probability,
            full_action_space=bool(full_action_space),
            noop_max=settings.noop_max,
            frame_size=frame_size,
        )

    def make_env(rank: int):
        def _init() -> gym.Env:
            env = _make_ale(env_name, **env_kwargs)
            env.action_space.seed(seed + rank)
            env = record(rank, env) if record is not None else env
            return AtariWrapper(Monitor(env), noop_max=settings.noop_max, screen_size=frame_size)

        return _init

    venv = DummyVecEnv([make_env(i) for i in range(num_envs)])
    venv.seed(seed)
    return stack_frames(venv, n_stack)


def effective_frame_cap(
    env_name: str, protocol: Union[str, Protocol], max_episode_frames: Optional[int] = None
) -> Optional[int]:
    """The most emulator frames a game can last under these settings (the time limit or the id's own ALE
    limit, whichever is smaller), or steps for a family without an emulator (the cap given, else the
    id's own time limit); None when nothing limits it."""
    if family_of(env_name).sticky_actions(env_name) is None:
        return max_episode_frames if max_episode_frames is not None else gym.registry[env_name].max_episode_steps
    settings = PROTOCOL_SETTINGS[protocol] if isinstance(protocol, str) else protocol
    limit = max_episode_frames if max_episode_frames is not None else settings.max_episode_frames
    return frame_cap(gym.registry[env_name].kwargs.get("max_num_frames_per_episode"), limit)


# ------------------------------------------------------------------------------------------------ families
# The vector family's defaults, where they depart from config.Config's (Atari's), as the RL Zoo's hyperparameter
# table for A2C: any env with a vector observation gets VECTOR_DEFAULTS, and an id listed in
# ENV_DEFAULTS its own on top. A typed flag always wins; a run's config.json holds what it ran with.
VECTOR_DEFAULTS: dict[str, Any] = {"recurrent": False, "num_envs": 8, "num_updates": 25_000}
ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    # The RL Zoo's A2C on CartPole-v1 (n_envs 8, ent_coef 0), 1M env steps. LunarLander-v3 starts
    # from the Zoo's LunarLander-v2 (a learning rate decayed linearly to 0, ent_coef 1e-5) with a
    # batch 24 times its size at 3 times its rate, 1M env steps: its agents played better than
    # those of 32 envs on every seed tried (docs/control.md#defaults).
    "CartPole-v1": {"entropy_coeff": 0.0},
    "LunarLander-v3": {
        "num_envs": 192,
        "num_updates": 1_042,
        "gamma": 0.999,
        "gae_lambda": 0.98,
        "lr": 2.5e-3,
        "lr_schedule": "linear",
        "entropy_coeff": 1e-5,
    },
    # The Zoo's LunarLanderContinuous-v2 with its state-dependent exploration (--sde): 4 envs x 8
    # steps, GAE 0.9, no entropy bonus, log-std -2, observations and rewards normalized, lr 7e-4
    # decayed linearly, 5M env steps.
    "LunarLanderContinuous-v3": {
        "num_envs": 4,
        "rollout_size": 8,
        "num_updates": 156_250,
        "gae_lambda": 0.9,
        "entropy_coeff": 0.0,
        "log_std_init": -2.0,
        "sde": True,
        "normalize_obs": True,
        "normalize_reward": True,
        "lr_schedule": "linear",
    },
    # The Zoo's Pendulum-v1, with its state-dependent exploration (--sde): 8 envs x 8 steps, gamma
    # 0.9, GAE 0.9, no entropy bonus, log-std -2, normalized, lr 7e-4 decayed linearly, 1M env steps.
    "Pendulum-v1": {
        "num_envs": 8,
        "rollout_size": 8,
        "num_updates": 15_625,
        "gamma": 0.9,
        "gae_lambda": 0.9,
        "entropy_coeff": 0.0,
        "log_std_init": -2.0,
        "sde": True,
        "normalize_obs": True,
        "normalize_reward": True,
        "lr_schedule": "linear",
    },
    # The Zoo's BipedalWalker-v3, with --sde: 16 envs x 8 steps, GAE 0.9, no entropy bonus, value
    # coefficient 0.4, log-std -2, normalized, 9.6e-4 decayed linearly, 39,063 updates (5M env steps).
    "BipedalWalker-v3": {
        "num_envs": 16,
        "rollout_size": 8,
        "num_updates": 39_063,
        "gae_lambda": 0.9,
        "entropy_coeff": 0.0,
        "value_coeff": 0.4,
        "lr": 9.6e-4,
        "log_std_init": -2.0,
        "sde": True,
        "normalize_obs": True,
        "normalize_reward": True,
        "lr_schedule": "linear",
    },
}


def vector_defaults(env_name: str) -> dict[str, Any]:
    """The vector family's defaults for ``env_name``: ``VECTOR_DEFAULTS``, its own ``ENV_DEFAULTS`` on top."""
    return {**VECTOR_DEFAULTS, **ENV_DEFAULTS.get(env_name, {})}


# The two built-in env families (families.py); the vector family owns every id that is not a game
# and refuses, in its check, those whose observations are not flat vectors.
register_family(
    EnvFamily(
        name="vector",
        label="vector-observation envs",
        owns=lambda env_name: not _is_atari(env_name),
        observes="vectors",
        make_envs=_vector_envs,
        make_eval_envs=_vector_eval_envs,
        check=_check_vector_env,
        defaults=vector_defaults,
    )
)
register_family(
    EnvFamily(
        name="atari",
        label="Atari games",
        owns=_is_atari,
        observes="images",
        make_envs=_atari_envs,
        make_eval_envs=_atari_eval_envs,
        check=lambda env_name: False,  # a game's actions are discrete, and every game is played as images
        presets=PRESETS,
        cuda=True,
        protocols=PROTOCOLS,
        sticky_actions=id_sticky_actions,
        in_process="dummy",
    )
)
