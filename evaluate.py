"""Evaluate a saved agent: whole games under a fixed protocol, raw scores, optional videos.

Two evaluation protocols build the envs (`make_eval_envs`) on the env path the agent was trained
on: ale-py's C++ vector env (``--vec-env ale``, the default) with the protocol's emulator settings,
or SB3's Atari wrappers, whose per-game envs also record videos (``--video`` always plays there)::

    gym.make(id) -> [GameRecorder] -> Monitor -> AtariWrapper -> DummyVecEnv -> frame stack -> [C, H, W]

Other envs (flat vector observations) play as they trained, in gymnasium's vector env, which
records their rendered frames with ``--video`` (in one process)::

    gym.make(id, render_mode="rgb_array") -> [GameRecorder] -> RecordEpisodeStatistics -> GymVecEnv (sync)

- ``classic``, the NoFrameskip-v4 protocol: up to 30 no-op starts, no sticky actions, the minimal
  action set (and the id's own ALE frame limit, 108,000 frames for the registered Atari ids).
- ``machado``, Machado et al. 2018 ("Revisiting the ALE"): sticky actions with probability 0.25
  (in the emulator, per frame), no no-op starts, games capped at 108,000 emulator frames, the
  full action set optionally.

Scores are raw full-game scores over all lives (the Monitor sits under the Atari wrappers; the
C++ path reports the same);
the agent still sees a lost life as the end of its episode, and its memory is reset there,
as in training.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.atari_wrappers import AtariWrapper
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from ale_vec_env import AleVecEnv
from model import ActorCritic
from normalize import copy_obs_stats, normalized
from utils import UsageError, atomic_write, frame_cap, probe_writable

PROTOCOLS = ("classic", "machado")
MACHADO_MAX_FRAMES = 108_000  # 30 minutes of play at 60 frames a second
VIDEO_FPS = 60  # the emulator's frame rate: every emulator frame of an Atari game is written
RENDER_FPS_FALLBACK = 30  # the frame rate of a rendered env's video when its metadata gives none


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


# ------------------------------------------------------------------------------------------------ results
@dataclass
class EvalResult:
    """Raw full-game scores and lengths (emulator frames) of the evaluated episodes.

    ``std`` is the population standard deviation (``ddof=0``, numpy's default). The statistics
    of an empty result are NaN.
    """

    scores: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    def _stat(self, fn) -> float:
        return float(fn(np.asarray(self.scores, dtype=np.float64))) if self.scores else float("nan")

    @property
    def mean(self) -> float:
        return self._stat(np.mean)

    @property
    def std(self) -> float:
        return self._stat(np.std)

    @property
    def median(self) -> float:
        return self._stat(np.median)

    @property
    def min(self) -> float:
        return self._stat(np.min)

    @property
    def max(self) -> float:
        return self._stat(np.max)

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": len(self.scores), "mean": self.mean, "std": self.std, "median": self.median,
                "min": self.min, "max": self.max, "scores": [float(s) for s in self.scores],
                "lengths": [int(n) for n in self.lengths]}


def episode_shares(episodes: int, num_envs: int) -> list[int]:
    """Episodes each env plays: env i plays ``(episodes + i) // num_envs`` (they sum to ``episodes``)."""
    return [(episodes + i) // num_envs for i in range(num_envs)]


@torch.no_grad()
def evaluate(model: ActorCritic, envs: VecEnv, episodes: int, deterministic: bool = False,
             generator: Optional[torch.Generator] = None) -> EvalResult:
    """Play ``episodes`` whole games; return their raw scores and lengths.

    Actions are sampled from the policy, or with ``deterministic=True`` the most probable action
    (argmax of the logits, or a Gaussian policy's mean) is taken. Each env plays a fixed share of the episodes (see
    `episode_shares`), so short games are not over-counted by envs that happen to finish first;
    the envs step together as one vector. Scores and lengths come from the Monitor under the
    Atari wrappers (``info["episode"]``): unclipped, all lives, lengths in emulator frames. The
    recurrent state is reset where the agent's episode ends (``dones``, a lost life included).
    Sampling draws from ``generator`` when given (else torch's global one).
    """
    device = next(model.parameters()).device
    n = envs.num_envs
    targets = episode_shares(episodes, n)
    played = [0] * n
    result = EvalResult()
    obs = torch.as_tensor(envs.reset(), device=device)
    state = model.initial_state(n, device)
    episode_starts = torch.ones(n, device=device)
    with model.casting_once():  # a bfloat16 encoder casts its weights once, not at every step
        while any(p < t for p, t in zip(played, targets)):
            logits, _, state = model(obs, state, episode_starts)
            if deterministic:
                actions = model.mode(logits)
            elif model.continuous:  # the Gaussian's mean plus its spread times noise from the generator
                mean = model.mode(logits)
                actions = model.sample_with(logits, torch.randn(mean.shape, generator=generator, device=mean.device))
            else:
                actions = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)
            obs_np, _, dones, infos = envs.step(actions.cpu().numpy())
            for i, info in enumerate(infos):
                if "episode" in info and played[i] < targets[i]:
                    result.scores.append(float(info["episode"]["r"]))
                    result.lengths.append(int(info["episode"].get("l", 0)))
                    played[i] += 1
            obs = torch.as_tensor(obs_np, device=device)
            episode_starts = torch.as_tensor(dones, dtype=torch.float32, device=device)
    return result


class PeriodicEvaluator:
    """Evaluation during training: plays the current network for ``episodes`` whole games on envs of
    its own (classic protocol, sampled actions, as in training), a new set of games each call.

    Its actions are drawn from a random generator of its own, so evaluating leaves training's
    random numbers, and so the training run itself, exactly as they would be without it.
    """

    def __init__(self, env_name: str, episodes: int, seed: int, n_stack: int = 4, num_envs: Optional[int] = None,
                 max_episode_frames: Optional[int] = None, vec_env: str = "dummy",
                 obs_stats_from: Optional[VecEnv] = None) -> None:
        self.episodes = episodes
        self.generator = torch.Generator().manual_seed(seed)
        self.envs = make_eval_envs(env_name, num_envs or min(episodes, 8), seed, "classic", n_stack,
                                   max_episode_frames=max_episode_frames, vec_env=vec_env)
        # With --normalize-obs: the training envs, whose statistics each evaluation plays with, frozen.
        self.obs_stats_from = obs_stats_from
        self.envs = normalized(self.envs, obs_stats_from is not None, False, training=False)

    def __call__(self, model: ActorCritic) -> list[float]:
        if self.obs_stats_from is not None:
            copy_obs_stats(self.obs_stats_from, self.envs)
        device = next(model.parameters()).device
        if self.generator.device != device:  # the first call on a GPU: the same stream, on its device
            self.generator = torch.Generator(device).manual_seed(self.generator.initial_seed())
        return evaluate(model, self.envs, self.episodes, generator=self.generator).scores

    def close(self) -> None:
        self.envs.close()


def summarize(r: EvalResult) -> str:
    """One line: episode count, mean, std (population), median, min and max of the scores."""
    return (f"episodes: {len(r.scores)}  mean: {r.mean:.2f}  std: {r.std:.2f}  median: {r.median:.2f}  "
            f"min: {r.min:.2f}  max: {r.max:.2f}")


def write_json(data: dict[str, Any], path: str) -> None:
    """Write ``data`` as indented JSON, atomically (see `utils.atomic_write`)."""
    atomic_write(path, lambda f: f.write(json.dumps(data, indent=2) + "\n"), binary=False)


# ------------------------------------------------------------------------------------------------ video
class GameRecorder(gym.Wrapper):
    """Records each full game as an H.264 .mp4: the real screen of an Atari game, ``env.render()`` of any other env.

    The frame source: an Atari env's ALE screen (RGB 210x160), read after every emulator frame
    (the recorder sits on the raw env, frame skip 1), written at 60 fps (real time); any other env
    must be made with ``render_mode="rgb_array"``, and its frames are written at its
    ``metadata["render_fps"]`` (30 when it gives none). ``fps`` overrides either rate.

    Sits under the Monitor (or ``RecordEpisodeStatistics``): a video holds a frame after the reset
    and after every step of the game, so a game of ``l`` steps (the episode's ``info["episode"]["l"]``)
    gives ``l + 1`` video frames, at the source's own size (a frame of odd height or width gets
    its last row or column repeated once: yuv420p needs even sizes). Frames are streamed to the
    file as they come. When the game ends (terminated or truncated), the file is closed and renamed
    ``{prefix}_episode{NNN}_score{S}.mp4``; a game that is cut short (reset before its end, or the
    env closed) leaves no file. Only the first ``max_games`` games are recorded. The k-th recorded
    game (k = 0, 1, ...) gets episode number ``first_episode + k * episode_stride``.
    """

    def __init__(self, env: gym.Env, directory: str, prefix: str, first_episode: int = 1,
                 episode_stride: int = 1, max_games: Optional[int] = None, fps: Optional[float] = None) -> None:
        super().__init__(env)
        self.ale = getattr(env.unwrapped, "ale", None)  # None: frames come from env.render()
        if self.ale is None and env.render_mode != "rgb_array":
            raise ValueError(f"GameRecorder records env.render(): make the env with render_mode='rgb_array', "
                             f"not {env.render_mode!r}")
        if fps is None:
            fps = VIDEO_FPS if self.ale is not None else env.metadata.get("render_fps") or RENDER_FPS_FALLBACK
        self.directory, self.prefix = directory, prefix
        self.first_episode, self.episode_stride = first_episode, episode_stride
        self.max_games, self.fps = max_games, fps
        self.recorded = 0  # finished games written to disk
        self.paths: list[str] = []
        self._writer: Any = None
        self._tmp_path: Optional[str] = None
        self._score = 0.0

    @property
    def episode(self) -> int:
        return self.first_episode + self.recorded * self.episode_stride

    def reset(self, **kwargs):
        self._discard()
        obs, info = self.env.reset(**kwargs)
        self._score = 0.0
        if self.max_games is None or self.recorded < self.max_games:
            self._start(self._frame())
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._score += float(reward)
        if self._writer is not None:
            self._writer.send(self._frame())
            if terminated or truncated:
                self._finish()
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self._discard()
        super().close()

    def _frame(self) -> np.ndarray:
        """The screen now, ``[H, W, 3]`` uint8 RGB, with H and W made even (see the class doc)."""
        frame = self.ale.getScreenRGB() if self.ale is not None else self.env.render()
        height, width = frame.shape[:2]
        if height % 2 or width % 2:  # repeat the last row / column: no rescaling, no black edge
            frame = np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
        return np.ascontiguousarray(frame, dtype=np.uint8)

    def _start(self, first_frame: np.ndarray) -> None:
        import imageio_ffmpeg  # its wheel bundles an ffmpeg binary

        self._tmp_path = os.path.join(self.directory, f".tmp-{self.prefix}_episode{self.episode:03d}.mp4")
        height, width = first_frame.shape[:2]
        # H.264 in yuv420p: what browsers, TensorBoard and GitHub play. A macro block of 2 keeps
        # the frames' own (even) size, e.g. the Atari screen's 210 x 160, instead of scaling it
        # to a multiple of 16.
        self._writer = imageio_ffmpeg.write_frames(self._tmp_path, (width, height), fps=self.fps, codec="libx264",
                                                   pix_fmt_in="rgb24", pix_fmt_out="yuv420p", macro_block_size=2,
                                                   ffmpeg_log_level="error", output_params=["-f", "mp4"])
        self._writer.send(None)  # starts ffmpeg
        self._writer.send(first_frame)

    def _finish(self) -> None:
        self._writer.close()
        self._writer = None
        path = os.path.join(self.directory, f"{self.prefix}_episode{self.episode:03d}_score{self._score:g}.mp4")
        os.replace(self._tmp_path, path)
        self._tmp_path = None
        self.paths.append(path)
        self.recorded += 1

    def _discard(self) -> None:
        """Drop the game being recorded, if any (it did not finish)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._tmp_path is not None:
            if os.path.exists(self._tmp_path):
                os.unlink(self._tmp_path)
            self._tmp_path = None

    def __del__(self) -> None:
        try:
            self._discard()
        except Exception:
            pass


# ------------------------------------------------------------------------------------------------ envs
def make_eval_envs(env_name: str, num_envs: int, seed: int, protocol: str = "classic", n_stack: int = 4,
                   full_action_space: bool = False, video_dir: Optional[str] = None,
                   max_episodes_per_env: Union[int, Sequence[int], None] = None,
                   max_episode_frames: Optional[int] = None, vec_env: str = "dummy") -> VecEnv:
    """``num_envs`` evaluation copies of an Atari game under ``protocol``: observations
    ``[num_envs, n_stack, 84, 84]`` uint8, as in training (see ``envs.make_vec_env``). Any other
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
    ``max_episodes_per_env`` of them (an int for every env, or one per env; None: all). Episode
    numbers are unique across envs, for Atari and other envs alike: with one cap per env (e.g.
    `episode_shares`) env i numbers its games after the caps of envs 0..i-1, so the numbers run
    1..sum(caps); with one cap for all envs, env i numbers in blocks of that cap; without caps,
    the k-th game of env i is number ``k * num_envs + i + 1``.
    """
    from envs import _make_ale, check_env_id, is_atari, make_vec_env, stack_frames, wrapper_skips_frames
    from gym_vec_env import GymVecEnv

    if protocol not in PROTOCOL_SETTINGS:
        raise UsageError(f"unknown evaluation protocol '{protocol}' (one of {', '.join(PROTOCOLS)})")
    if full_action_space and protocol != "machado":
        raise UsageError("--full-action-space belongs to --protocol machado (the classic protocol plays the "
                         "minimal action set)")
    check_env_id(env_name)
    atari = is_atari(env_name)
    if not atari and protocol != "classic":
        raise UsageError(f"--protocol {protocol} is for Atari games, not {env_name} (it plays the classic protocol)")

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
        """Env ``rank`` with its `GameRecorder`, numbered as the docstring says (unchanged without videos)."""
        if video_dir is None:
            return env
        if caps[rank] is None:
            first, stride = rank + 1, num_envs
        else:
            first, stride = 1 + sum(caps[:rank]), 1  # type: ignore[arg-type]
        return GameRecorder(env, video_dir, f"env{rank:02d}", first_episode=first, episode_stride=stride,
                            max_games=caps[rank])

    if not atari:
        if video_dir is None:
            return make_vec_env(env_name, num_envs, seed=seed, vec_env=vec_env, max_episode_frames=max_episode_frames)
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame renders off screen (no display needed)
        return GymVecEnv(env_name, num_envs, seed, "sync", [{"render_mode": "rgb_array"}] * num_envs,
                         max_episode_frames, wrap=record)

    settings = PROTOCOL_SETTINGS[protocol]
    env_kwargs: dict[str, Any] = {"repeat_action_probability": settings.repeat_action_probability,
                                  "full_action_space": bool(full_action_space), **wrapper_skips_frames(env_name)}
    cap = max_episode_frames if max_episode_frames is not None else settings.max_episode_frames
    if cap is not None:
        env_kwargs["max_episode_steps"] = int(cap)
    if vec_env == "ale" and video_dir is None:
        return AleVecEnv(env_name, num_envs, n_stack, seed, max_episode_frames=cap,
                         repeat_action_probability=settings.repeat_action_probability,
                         full_action_space=bool(full_action_space), noop_max=settings.noop_max)

    def make_env(rank: int):
        def _init() -> gym.Env:
            env = _make_ale(env_name, **env_kwargs)
            env.action_space.seed(seed + rank)
            return AtariWrapper(Monitor(record(rank, env)), noop_max=settings.noop_max)
        return _init

    venv = DummyVecEnv([make_env(i) for i in range(num_envs)])
    venv.seed(seed)
    return stack_frames(venv, n_stack)


def effective_frame_cap(env_name: str, protocol: str, max_episode_frames: Optional[int] = None) -> Optional[int]:
    """The most emulator frames a game can last under these settings (the time limit or the id's own ALE
    limit, whichever is smaller); None when neither limits it."""
    from envs import is_atari

    if not is_atari(env_name):  # steps, not frames: the cap given, or the env's own time limit
        return max_episode_frames if max_episode_frames is not None else gym.registry[env_name].max_episode_steps
    limit = max_episode_frames if max_episode_frames is not None else PROTOCOL_SETTINGS[protocol].max_episode_frames
    return frame_cap(gym.registry[env_name].kwargs.get("max_num_frames_per_episode"), limit)

