"""Videos of whole games: ``GameRecorder`` writes each game an env plays as an H.264 .mp4
(``main.py --eval --video DIR``)."""

from __future__ import annotations

import os
from typing import Any, Optional

import gymnasium as gym
import numpy as np

VIDEO_FPS = 60  # the emulator's frame rate: every emulator frame of an Atari game is written
RENDER_FPS_FALLBACK = 30  # the frame rate of a rendered env's video when its metadata gives none


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

    def __init__(
        self,
        env: gym.Env,
        directory: str,
        prefix: str,
        first_episode: int = 1,
        episode_stride: int = 1,
        max_games: Optional[int] = None,
        fps: Optional[float] = None,
    ) -> None:
        super().__init__(env)
        self.ale = getattr(env.unwrapped, "ale", None)  # None: frames come from env.render()
        if self.ale is None and env.render_mode != "rgb_array":
            raise ValueError(
                f"GameRecorder records env.render(): make the env with render_mode='rgb_array', not {env.render_mode!r}"
            )
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
        self._writer = imageio_ffmpeg.write_frames(
            self._tmp_path,
            (width, height),
            fps=self.fps,
            codec="libx264",
            pix_fmt_in="rgb24",
            pix_fmt_out="yuv420p",
            macro_block_size=2,
            ffmpeg_log_level="error",
            output_params=["-f", "mp4"],
        )
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
