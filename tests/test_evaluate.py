"""Evaluation of saved agents: statistics, protocols in the emulator, fixed shares, argmax play, videos, JSON, errors.

Games are capped at a few hundred emulator frames so each one ends within a second or two.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re

import cv2
import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.atari_wrappers import NoopResetEnv
from stable_baselines3.common.monitor import Monitor

import main as cli
from envs import _make_ale, make_eval_envs
from evaluate import EvalResult, episode_shares, evaluate, summarize
from model import ActorCritic, build_model
from video import GameRecorder

pytestmark = pytest.mark.usefixtures("torch_single_thread")

GAME = "PongNoFrameskip-v4"
FRAMES = 160  # cap on a test game's emulator frames (Pong never ends this soon on its own)
VIDEO_NAME = re.compile(r"^env(\d\d)_episode(\d{3})_score(-?\d+(?:\.\d+)?)\.mp4$")


def raw_env(envs, i: int = 0) -> gym.Env:
    """The env under the Monitor of eval env ``i`` (the emulator's side of the pipeline)."""
    env = envs.venv.venv.envs[i]
    while not isinstance(env, Monitor):
        env = env.env
    return env.env


def wrapper_chain(envs, i: int = 0) -> list[gym.Env]:
    env, chain = envs.venv.venv.envs[i], []
    while isinstance(env, gym.Wrapper):
        chain.append(env)
        env = env.env
    return chain + [env]


def video_codec(path: str) -> str:
    """The codec ffmpeg reads in a video file ('h264' plays in browsers, TensorBoard and GitHub)."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(path)
    meta = next(reader)
    reader.close()
    return meta["codec"]


def video_frames(path: str) -> tuple[int, tuple[int, ...]]:
    """(frames decoded, shape of a frame) of a video file."""
    cap = cv2.VideoCapture(path)
    count, shape = 0, ()
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        count, shape = count + 1, frame.shape
    cap.release()
    return count, shape


def model_for(envs, seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return build_model(envs.observation_space.shape, int(envs.action_space.n))


# ------------------------------------------------------------------------------------------------ statistics
def test_eval_result_statistics_by_hand():
    # mean 40/8 = 5; squared deviations 9+1+1+1+0+0+4+16 = 32, population variance 32/8 = 4, std 2;
    # median of the sorted list: (4 + 5) / 2.
    result = EvalResult(scores=[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], lengths=[10, 20, 30, 40, 50, 60, 70, 80])
    assert (result.mean, result.std, result.median, result.min, result.max) == (5.0, 2.0, 4.5, 2.0, 9.0)
    assert EvalResult(scores=[-21.0, 3.0, -1.0]).median == -1.0
    d = result.to_dict()
    assert d == {
        "episodes": 8,
        "mean": 5.0,
        "std": 2.0,
        "median": 4.5,
        "min": 2.0,
        "max": 9.0,
        "scores": result.scores,
        "lengths": result.lengths,
    }
    json.dumps(d)  # plain values only
    assert summarize(result) == "episodes: 8  mean: 5.00  std: 2.00  median: 4.50  min: 2.00  max: 9.00"
    assert math.isnan(EvalResult().mean)


# ------------------------------------------------------------------------------------------------ protocols
def test_protocol_settings_reach_the_emulator():
    classic = make_eval_envs(GAME, 1, seed=1, protocol="classic")
    machado = make_eval_envs(GAME, 1, seed=1, protocol="machado")
    full = make_eval_envs("ALE/Pong-v5", 1, seed=1, protocol="machado", full_action_space=True)
    v5_classic = make_eval_envs("ALE/Pong-v5", 1, seed=1, protocol="classic")
    try:
        ale = raw_env(classic).unwrapped.ale
        assert ale.getFloat("repeat_action_probability") == 0.0
        (noop,) = [w for w in wrapper_chain(classic) if isinstance(w, NoopResetEnv)]
        assert noop.noop_max == 30
        assert int(classic.action_space.n) == 6  # minimal action set

        assert raw_env(machado).unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
        limit = raw_env(machado)  # the time limit counts the raw env's steps: emulator frames
        assert isinstance(limit, gym.wrappers.TimeLimit) and limit._max_episode_steps == 108_000
        assert not [w for w in wrapper_chain(machado) if isinstance(w, NoopResetEnv)]
        assert int(machado.action_space.n) == 6
        assert int(full.action_space.n) == 18

        # v5 ids: frames are skipped once (by the Atari wrapper), and the protocol, not the id, sets sticky actions.
        for envs in (full, v5_classic):
            assert raw_env(envs).unwrapped._frameskip == 1
        assert raw_env(v5_classic).unwrapped.ale.getFloat("repeat_action_probability") == 0.0
        obs = machado.reset()
        assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
    finally:
        for envs in (classic, machado, full, v5_classic):
            envs.close()


def test_full_action_space_is_for_machado_only():
    from utils import UsageError

    with pytest.raises(UsageError, match="--protocol machado"):
        make_eval_envs(GAME, 1, seed=1, protocol="classic", full_action_space=True)


# ------------------------------------------------------------------------------------------------ evaluate
def test_each_env_plays_its_fixed_share():
    assert episode_shares(3, 2) == [1, 2] and episode_shares(10, 4) == [2, 2, 3, 3]
    envs = make_eval_envs(GAME, 2, seed=5, protocol="classic", max_episode_frames=FRAMES)
    try:
        result = evaluate(model_for(envs), envs, episodes=3)
    finally:
        envs.close()
    assert len(result.scores) == len(result.lengths) == 3
    assert all(float(s).is_integer() for s in result.scores)
    assert result.lengths == [FRAMES] * 3  # emulator frames of each whole game, cut by the cap


class RecordingModel(ActorCritic):
    """Remembers every action's logits, to check which action was played."""

    def forward(self, obs, state, episode_starts):
        logits, values, state = super().forward(obs, state, episode_starts)
        self.trace.append(logits.clone())
        return logits, values, state


def built_as(cls: type, *args, **kwargs) -> ActorCritic:
    """``build_model``'s network, as an instance of the subclass ``cls`` of ActorCritic."""
    model = build_model(*args, **kwargs)
    model.__class__ = cls
    return model


def test_deterministic_play_takes_argmax_and_repeats_exactly():
    def play(deterministic: bool, torch_seed: int):
        envs = make_eval_envs(GAME, 2, seed=11, protocol="machado", max_episode_frames=FRAMES)
        try:
            torch.manual_seed(0)
            model = built_as(RecordingModel, envs.observation_space.shape, int(envs.action_space.n))
            model.trace = []
            taken = []
            original_step = envs.step

            def step(actions):
                taken.append(np.array(actions))
                return original_step(actions)

            envs.step = step
            torch.manual_seed(torch_seed)  # sampling would depend on it; argmax must not
            result = evaluate(model, envs, episodes=2, deterministic=deterministic)
        finally:
            envs.close()
        return result, model.trace, np.stack(taken)

    first, logits, actions = play(True, torch_seed=1)
    second, _, actions_again = play(True, torch_seed=2)
    assert first.scores == second.scores and first.lengths == second.lengths
    np.testing.assert_array_equal(actions, actions_again)
    np.testing.assert_array_equal(actions, torch.stack(logits).argmax(-1).numpy())
    # Sampled play is not argmax play (the check above can tell them apart).
    _, logits, sampled = play(False, torch_seed=1)
    assert (sampled != torch.stack(logits).argmax(-1).numpy()).any()


def test_the_recurrent_state_starts_afresh_where_an_episode_ended():
    class StartsModel(ActorCritic):
        def forward(self, obs, state, episode_starts):
            self.seen.append(episode_starts.clone())
            return super().forward(obs, state, episode_starts)

    envs = make_eval_envs("BreakoutNoFrameskip-v4", 2, seed=4, protocol="classic", max_episode_frames=FRAMES)
    dones = []
    step = envs.step

    def recording_step(actions):
        out = step(actions)
        dones.append(torch.as_tensor(out[2], dtype=torch.float32))
        return out

    envs.step = recording_step
    try:
        torch.manual_seed(0)
        model = built_as(StartsModel, envs.observation_space.shape, int(envs.action_space.n), hidden_size=32)
        model.seen = []
        evaluate(model, envs, episodes=4)
    finally:
        envs.close()
    starts = torch.stack(model.seen)
    assert torch.equal(starts[0], torch.ones(2))  # every env starts an episode
    assert torch.equal(starts[1:], torch.stack(dones[:-1]))  # then exactly where the last step ended one
    assert 4 <= int(starts[1:].sum()) < starts[1:].numel()  # lost lives and capped games, mid-play


def test_a_bfloat16_agent_casts_its_weights_once_a_game_and_plays_the_same(monkeypatch):
    from test_speed import WeightCasts

    def play():
        envs = make_eval_envs(GAME, 2, seed=3, protocol="classic", max_episode_frames=FRAMES)
        try:
            torch.manual_seed(0)
            model = built_as(
                RecordingModel,
                envs.observation_space.shape,
                int(envs.action_space.n),
                recurrent=False,
                arch="nature",
                bf16=True,
            )
            model.trace = []
            with WeightCasts(model.encoder.parameters()) as casts:
                result = evaluate(model, envs, episodes=2, deterministic=True)
        finally:
            envs.close()
        return result, torch.stack(model.trace), casts.count

    once, logits_once, casts_once = play()
    monkeypatch.setattr(ActorCritic, "casting_once", lambda self: contextlib.nullcontext())
    each, logits_each, casts_each = play()
    weights, steps = 8, len(logits_each)  # the 4 layers' weights and biases; a step a trace entry
    assert (casts_once, casts_each) == (weights, weights * steps) and steps > 10
    assert torch.equal(logits_once, logits_each)  # the same bfloat16 weights: the same play
    assert (once.scores, once.lengths) == (each.scores, each.lengths)


# ------------------------------------------------------------------------------------------------ video
def test_videos_hold_every_emulator_frame_and_name_episode_and_score(tmp_path):
    envs = make_eval_envs(
        GAME,
        2,
        seed=7,
        protocol="classic",
        video_dir=str(tmp_path),
        max_episodes_per_env=episode_shares(3, 2),
        max_episode_frames=FRAMES,
    )
    try:
        result = evaluate(model_for(envs), envs, episodes=3)
    finally:
        envs.close()  # the game env 0 started beyond its share leaves nothing behind
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 3, files
    found = []
    for name in files:
        env, episode, score = VIDEO_NAME.match(name).groups()
        frames, shape = video_frames(str(tmp_path / name))
        assert shape == (210, 160, 3)  # the real screen, not the network's 84x84 input
        assert video_codec(str(tmp_path / name)) == "h264"
        found.append((int(env), int(episode), float(score), frames))
    # Env 0 plays 1 game, env 1 plays 2; episode numbers are unique across envs.
    assert sorted((env, episode) for env, episode, _, _ in found) == [(0, 1), (1, 2), (1, 3)]
    # The screen after the reset and after each emulator frame: the Monitor's length + 1.
    assert sorted((score, frames) for _, _, score, frames in found) == sorted(
        (score, length + 1) for score, length in zip(result.scores, result.lengths)
    )


def test_recorder_keeps_only_finished_games_of_its_share(tmp_path):
    env = GameRecorder(_make_ale(GAME, max_episode_steps=30), str(tmp_path), "env03", first_episode=5, max_games=2)
    env.action_space.seed(0)

    def play_game(steps: int = 10**9) -> float:
        env.reset()
        score, done = 0.0, False
        while not done and steps > 0:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            score, done, steps = score + reward, terminated or truncated, steps - 1
        return score

    first = play_game()
    play_game(steps=5)  # cut short by a reset: streamed to a temporary file, then dropped
    assert [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]
    second = play_game()
    play_game()  # beyond its share: not recorded
    play_game(steps=5)  # cut short by close
    env.close()
    assert sorted(os.listdir(tmp_path)) == [
        f"env03_episode005_score{first:g}.mp4",
        f"env03_episode006_score{second:g}.mp4",
    ]
    assert video_frames(str(tmp_path / f"env03_episode006_score{second:g}.mp4")) == (31, (210, 160, 3))


# ------------------------------------------------------------------------------------------------ command line
def _train(log_dir, *extra: str) -> str:
    code = cli.main(
        [
            "--num-envs",
            "2",
            "--rollout-size",
            "5",
            "--no-progress",
            "--no-cuda",
            "--threads",
            "1",
            "--no-tensorboard",
            "--seed",
            "3",
            "--log-dir",
            str(log_dir),
            *extra,
        ]
    )
    assert code == 0
    (run,) = os.listdir(log_dir)
    return os.path.join(log_dir, run)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    """A plain run and a curiosity run, a few updates each, with every checkpoint kind."""
    plain = _train(tmp_path_factory.mktemp("plain"), "--num-updates", "8", "--max-episode-frames", "120")
    icm = _train(tmp_path_factory.mktemp("icm"), "--icm", "--num-updates", "6", "--max-episode-frames", "60")
    for run in (plain, icm):
        assert {"a2c_best_loss", "a2c_best_reward", "a2c_last"} <= set(os.listdir(run))
    return {"plain": plain, "icm": icm}


@pytest.mark.parametrize(
    "run, kind",
    [
        ("plain", "a2c_best_loss"),
        ("plain", "a2c_best_reward"),
        ("plain", "a2c_last"),
        ("icm", "a2c_best_reward"),
        ("icm", "a2c_last"),
    ],
)
def test_cli_eval_writes_json_for_every_checkpoint_kind(runs, run, kind, tmp_path, capsys):
    ckpt = os.path.join(runs[run], kind)
    out = tmp_path / "results.json"
    code = cli.main(
        [
            "--no-cuda",
            "--eval",
            "--load",
            ckpt,
            "--episodes",
            "2",
            "--json",
            str(out),
            "--max-episode-frames",
            "100",
            "--no-cuda",
            "--threads",
            "1",
            "--deterministic",
            "--protocol",
            "machado",
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    scores = [float(s) for s in lines[-2].removeprefix("scores: ").split()]
    assert lines[-1].startswith("episodes: 2  mean: ") and "median: " in lines[-1]
    data = json.loads(out.read_text())
    assert data["scores"] == scores and len(data["lengths"]) == 2
    assert data["mean"] == pytest.approx(np.mean(scores)) and data["std"] == pytest.approx(np.std(scores))
    assert (data["median"], data["min"], data["max"]) == (np.median(scores), min(scores), max(scores))
    assert data["checkpoint_step"] == torch.load(ckpt, weights_only=True)["step"]
    assert kind != "a2c_last" or data["checkpoint_step"] > 0  # a best-loss file may hold update 0 (step 0)
    assert (data["protocol"], data["deterministic"], data["env_name"], data["episodes"]) == ("machado", True, GAME, 2)
    assert data["checkpoint"] == os.path.abspath(ckpt) and data["max_episode_frames"] == 100
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp")]


def test_cli_eval_refuses_bad_input(runs, tmp_path, one_line_error):
    last = os.path.join(runs["plain"], "a2c_last")
    assert "checkpoint not found: /no/such/ckpt" in one_line_error(["--eval", "--load", "/no/such/ckpt"])
    assert "6 actions; BreakoutNoFrameskip-v4 has 4" in one_line_error(
        ["--eval", "--load", last, "--env-name", "BreakoutNoFrameskip-v4", "--no-cuda"]
    )
    assert "with --full-action-space has 18" in one_line_error(
        ["--eval", "--load", last, "--protocol", "machado", "--full-action-space", "--no-cuda"]
    )
    assert "--protocol machado" in one_line_error(["--eval", "--load", last, "--full-action-space"])
    assert "cannot write --json file" in one_line_error(
        ["--eval", "--load", last, "--json", str(tmp_path / "missing" / "r.json")]
    )
    assert "invalid choice" in one_line_error(["--eval", "--load", last, "--protocol", "nope"])
    assert "not allowed with" in one_line_error(["--eval", "--load", last, "--deterministic", "--stochastic"])
    assert "--eval-envs: expected a positive integer" in one_line_error(["--eval", "--load", last, "--eval-envs", "0"])


def test_cli_eval_flags_parse():
    _, args, typed = cli.parse_args(["--eval", "--load", "x"])
    assert (args.deterministic, args.protocol, args.full_action_space, args.eval_envs, args.json, args.video) == (
        False,
        "classic",
        False,
        None,
        None,
        None,
    )
    _, args, typed = cli.parse_args(
        ["--deterministic", "--stochastic"][:1]
        + ["--protocol", "machado", "--full-action-space", "--eval-envs", "3", "--json", "r.json", "--video", "v"]
    )
    assert (args.deterministic, args.protocol, args.full_action_space, args.eval_envs, args.json, args.video) == (
        True,
        "machado",
        True,
        3,
        "r.json",
        "v",
    )
    assert typed == set()  # evaluation flags are not run settings
    assert cli.parse_args(["--stochastic"])[1].deterministic is False


# ------------------------------------------------------------------------------------------------ env path
@pytest.mark.parametrize("protocol,sticky,noops", [("classic", 0.0, 30), ("machado", 0.25, 0)])
def test_agents_trained_on_the_ale_path_are_evaluated_on_it_with_the_protocols_settings(protocol, sticky, noops):
    """The same preprocessing as in training: the C++ vector env, with the protocol's sticky actions
    and no-op starts; its scores are raw full games, as on SB3's path."""
    from ale_vec_env import AleVecEnv

    envs = make_eval_envs(GAME, 2, seed=3, protocol=protocol, vec_env="ale", max_episode_frames=FRAMES)
    try:
        assert isinstance(envs, AleVecEnv)
        assert (envs.repeat_action_probability, envs.noop_max) == (sticky, noops)
        result = evaluate(model_for(envs), envs, episodes=2)
    finally:
        envs.close()
    assert len(result.scores) == 2 and all(n > 0 for n in result.lengths)


def test_videos_play_through_sb3_s_wrappers_whatever_the_training_path(tmp_path):
    envs = make_eval_envs(GAME, 1, seed=3, vec_env="ale", video_dir=str(tmp_path), max_episode_frames=FRAMES)
    try:
        assert not isinstance(envs, __import__("ale_vec_env").AleVecEnv)
    finally:
        envs.close()
