"""Behaviours the rest of the suite leaves open: raw scores on a game where clipping changes them,
the bootstrap value leaving the recurrent state alone, resume refusals, the curiosity reward's
running std across a resume, Ctrl+C and exit code 1 through the command line, mode-flag misuse,
and each env of a vector playing its own seed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from stable_baselines3.common.monitor import Monitor

import main as cli
import utils
from agent import agent_from_config, load_agent
from config import Config, Speed
from envs import make_vec_env
from metrics import Metrics
from runner import Runner
from recording_writer import RecordingWriter

pytestmark = pytest.mark.usefixtures("torch_single_thread")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 2 envs x 5 steps = 10 env steps an update; one torch thread, nothing but what a test reads.
TINY = ["--num-envs", "2", "--rollout-size", "5", "--no-progress", "--no-cuda", "--threads", "1",
        "--no-tensorboard", "--seed", "3", "--eval-interval", "0"]
SPACE_INVADERS = "SpaceInvadersNoFrameskip-v4"  # aliens are worth 5 to 30 points: clipping changes scores


def _train(log_dir, *extra: str) -> str:
    """A tiny run through ``main.main`` in-process; the path of its run directory."""
    assert cli.main([*TINY, "--log-dir", str(log_dir), *extra]) == 0
    (run,) = os.listdir(log_dir)
    return os.path.join(log_dir, run)


# ------------------------------------------------------------------------------------------------ 1. raw scores
@pytest.fixture(scope="module")
def space_invaders_run(tmp_path_factory, torch_single_thread):
    """A short training run on Space Invaders (default ``ale`` path, 500-frame games), with the raw
    rewards the emulator gave each step (read under the clipping), and what the runner logged."""
    run_dir = str(tmp_path_factory.mktemp("space_invaders"))
    config = Config(env_name=SPACE_INVADERS, num_envs=4, rollout_size=10, num_updates=20, seed=3,
                    max_episode_frames=500, tensorboard=False, progress=False, checkpoint_interval=10**6)
    utils.seed_everything(config.seed)
    envs = make_vec_env(config.env_name, config.num_envs, config.n_stack, config.seed, config.vec_env,
                        config.max_episode_frames)
    try:
        agent = agent_from_config(config, envs.observation_space.shape, envs.action_space.n)
        runner = Runner(agent, envs, config, run_dir)
        writer = RecordingWriter()
        runner.metrics = Metrics(writer)
        raw_steps, games = [], []  # each step's raw rewards; (raw sum, clipped sum) of each finished game
        receive, step = envs.ale.recv, envs.step

        def recording_receive():  # the C++ vector env's own output: raw, unclipped rewards
            out = receive()
            raw_steps.append(np.asarray(out[1], dtype=np.float64).copy())
            return out

        raw_sum, clipped_sum = np.zeros(config.num_envs), np.zeros(config.num_envs)

        def recording_step(actions):
            obs, rewards, dones, infos = step(actions)
            raw_sum[:] += raw_steps[-1]
            clipped_sum[:] += rewards
            for i, info in enumerate(infos):
                if "episode" in info:
                    games.append((float(raw_sum[i]), float(clipped_sum[i])))
                    raw_sum[i] = clipped_sum[i] = 0.0
            return obs, rewards, dones, infos

        envs.ale.recv = recording_receive
        runner.envs.step = recording_step
        runner.train()
    finally:
        envs.close()
    logged = [value for tag, value, _ in writer.scalars if tag == "episode/return"]
    return {"run_dir": run_dir, "games": games, "logged": logged, "runner": runner}


def test_training_logs_raw_space_invaders_scores_not_clipped_ones(space_invaders_run):
    games, logged = space_invaders_run["games"], space_invaders_run["logged"]
    assert len(games) >= 3, "500-frame games end within the run"
    # What the learner saw was clipped; the scores differ from it in at least one game (for this seed).
    assert any(raw != clipped for raw, clipped in games)
    assert all(raw % 5 == 0 and raw >= 5 * clipped for raw, clipped in games)
    # The logged episode returns are the emulator's raw sums, game for game.
    assert logged == [raw for raw, _ in games]
    assert list(space_invaders_run["runner"].state.episodes.returns) == logged
    rewards = space_invaders_run["runner"].storage.rewards
    assert set(rewards.unique().tolist()) <= {-1.0, 0.0, 1.0}  # while the learner trains on clipped ones


@pytest.mark.parametrize("vec_env", ["ale", "dummy"])
def test_eval_prints_raw_space_invaders_scores(space_invaders_run, monkeypatch, capsys, vec_env):
    """On the env path the agent trained on (ale) and on SB3's (typed --vec-env dummy)."""
    import evaluate
    from ale_vec_env import AleVecEnv

    games: list[list[float]] = []  # each eval env's finished games' raw sums, read from the emulator
    real_make = evaluate.make_eval_envs

    def record_ale(envs):  # the C++ vector env's own rewards, raw, summed per env until its game ends
        receive, step = envs.ale.recv, envs.step
        games.extend([] for _ in range(envs.num_envs))
        raw, totals = [], np.zeros(envs.num_envs)

        def recording_receive():
            out = receive()
            raw.append(np.asarray(out[1], dtype=np.float64).copy())
            return out

        def recording_step(actions):
            out = step(actions)
            totals[:] += raw[-1]
            for i, info in enumerate(out[3]):
                if "episode" in info:
                    games[i].append(float(totals[i]))
                    totals[i] = 0.0
            return out

        envs.ale.recv, envs.step = recording_receive, recording_step

    def record_sb3(envs):
        for env in envs.venv.venv.envs:
            while not isinstance(env, Monitor):
                env = env.env
            emulator = env.env  # under the Monitor and the Atari wrappers' clipping
            games.append([])
            total = [0.0]

            def step(action, emulator_step=emulator.step, mine=games[-1], total=total):
                obs, reward, terminated, truncated, info = emulator_step(action)
                total[0] += float(reward)
                if terminated or truncated:
                    mine.append(total[0])
                    total[0] = 0.0
                return obs, reward, terminated, truncated, info

            emulator.step = step

    def make_recorded(*args, **kwargs):
        envs = real_make(*args, **kwargs)
        assert isinstance(envs, AleVecEnv) == (vec_env == "ale")
        (record_ale if vec_env == "ale" else record_sb3)(envs)
        return envs

    monkeypatch.setattr(evaluate, "make_eval_envs", make_recorded)
    checkpoint = os.path.join(space_invaders_run["run_dir"], "a2c_last")
    typed = [] if vec_env == "ale" else ["--vec-env", vec_env]
    assert cli.main(["--no-cuda", "--eval", "--load", checkpoint, "--episodes", "2", "--max-episode-frames", "600",
                     "--no-cuda", "--threads", "1", "--seed", "3", *typed]) == 0
    scores = [float(s) for s in capsys.readouterr().out.strip().splitlines()[-2].removeprefix("scores: ").split()]
    assert len(scores) == 2 and len(games) == 2
    assert sorted(scores) == sorted(mine[0] for mine in games)  # each env's first game: its share
    assert max(scores) >= 5 and all(s % 5 == 0 for s in scores)  # points, not clipped counts (for this seed)


# ------------------------------------------------------------------------------------------------ 2. bootstrap
@pytest.mark.parametrize("keep_graph", [True, False])
def test_bootstrap_value_does_not_advance_the_recurrent_state(make_runner, tmp_path, keep_graph):
    config = Config(num_envs=2, rollout_size=5, num_updates=3, seed=11, tensorboard=False, progress=False,
                    max_episode_frames=120, checkpoint_interval=10**6, speed=Speed(keep_graph=keep_graph))
    runner = make_runner(config, tmp_path)
    name = "act_with_graph" if keep_graph else "act"
    act = getattr(runner.agent, name)
    produced = []  # the state each step of the rollout produced

    def recording_act(obs, state, starts):
        out = act(obs, state, starts)
        produced.append(tuple(s.detach().clone() for s in out[-1]))
        return out

    setattr(runner.agent, name, recording_act)
    for _ in range(3):
        produced.clear()
        before = tuple(s.clone() for s in runner.recurrent_state)
        runner.collect()
        assert len(produced) == config.rollout_size
        last = produced[-1]
        assert not all(torch.equal(a, b) for a, b in zip(before, last))  # the rollout did move it
        # The next rollout starts from the state of the rollout's last step, not one step further.
        assert len(runner.recurrent_state) == len(last) == 2
        assert all(torch.equal(a, b) for a, b in zip(runner.recurrent_state, last))
        # ... and the bootstrap value was computed from that very state.
        with torch.no_grad():
            expected = runner.agent.model.value(runner.obs, last, runner.episode_starts)
        torch.testing.assert_close(runner.storage.last_values, expected, rtol=0, atol=1e-6)
    runner.collect()  # the next rollout is stored as starting from it
    assert all(torch.equal(a, b) for a, b in zip(runner.storage.initial_state, last))


# ------------------------------------------------------------------------------------------------ 3. resume refusals
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, torch_single_thread) -> str:
    """A plain Pong run that did all its 2 updates."""
    return _train(tmp_path_factory.mktemp("finished"), "--num-updates", "2", "--max-episode-frames", "120")


@pytest.mark.parametrize("flags, message", [
    (["--icm"], "was saved with --icm false (other settings); cannot use true"),
    (["--seed", "4"], "was saved with --seed 3 (other settings); cannot use 4"),
    (["--optimizer", "adam"], "was saved with --optimizer torch-rmsprop (other settings); cannot use adam"),
    (["--icm-normalize"], "was saved with --icm-normalize false"),
])
def test_resume_refuses_to_change_a_fixed_setting(finished_run, one_line_error, flags, message):
    assert {"curiosity.enabled", "seed", "optimizer", "curiosity.normalize"} <= cli.RESUME_FIXED
    last = os.path.join(finished_run, "a2c_last")
    before = open(last, "rb").read()
    assert message in one_line_error(["--resume", last, "--num-updates", "4", *flags])
    assert open(last, "rb").read() == before


@pytest.mark.parametrize("more", [[], ["--num-updates", "2"], ["--num-updates", "1"]])
def test_resume_of_a_run_that_did_all_its_updates_is_refused(finished_run, one_line_error, more):
    last = os.path.join(finished_run, "a2c_last")
    before = sorted(os.listdir(finished_run)), open(last, "rb").read()
    wanted = more[1] if more else "2"
    message = one_line_error(["--resume", last, *more])
    assert message == (f"error: checkpoint {last} already ran 2 of {wanted} updates; pass a larger --num-updates "
                       f"to train further")
    assert (sorted(os.listdir(finished_run)), open(last, "rb").read()) == before


# ------------------------------------------------------------------------------------------------ 4. icm running std
def test_icm_normalize_running_std_is_saved_and_restored(tmp_path, monkeypatch):
    import runner as runner_module

    # Pong in 400-frame games: no episode ends in 2 updates, so all 2 x 10 transitions are counted.
    run_dir = _train(tmp_path / "runs", "--icm", "--icm-normalize", "--num-updates", "2",
                     "--max-episode-frames", "400")
    last = os.path.join(run_dir, "a2c_last")
    saved = torch.load(last, weights_only=True)["intrinsic_std"]
    assert saved["count"] == 20 and saved["m2"] > 0 and saved["mean"] > 0
    agent = load_agent(last)
    assert agent.intrinsic_std is not None and agent.intrinsic_std.state_dict() == saved
    # A resume starts training from those numbers ...
    seen = {}

    def train(self):
        seen["std"] = self.agent.intrinsic_std.state_dict()
        return self.state
    with monkeypatch.context() as patch:
        patch.setattr(runner_module.Runner, "train", train)
        assert cli.main(["--no-cuda", "--resume", last, "--num-updates", "3"]) == 0
    assert seen["std"] == saved
    # ... and counts on from them.
    assert cli.main(["--no-cuda", "--resume", last, "--num-updates", "3"]) == 0
    resumed = torch.load(last, weights_only=True)
    assert resumed["update"] == 3 and resumed["intrinsic_std"]["count"] == 30
    assert resumed["intrinsic_std"]["m2"] >= saved["m2"]


# ------------------------------------------------------------------------------------------------ 5. stop and failure
def wait_for_first_last(proc: subprocess.Popen) -> str:
    """The path of the a2c_last of the run ``proc`` trains, once it has been written (or 60 s passed)."""
    line = proc.stdout.readline()
    if line.startswith("device: "):  # the first line names the device
        line = proc.stdout.readline()
    assert line.startswith("run directory:"), proc.stderr.read() if proc.poll() is not None else line
    last_path = os.path.join(line.split(":", 1)[1].strip(), "a2c_last")
    deadline = time.monotonic() + 60
    while not os.path.exists(last_path) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    return last_path


def stop_after_first_last(argv: list[str], signum: int) -> tuple[subprocess.Popen, str, str, str]:
    """Train ``main.py argv`` in a process, send it ``signum`` once its first a2c_last is written
    (inside the loop: the handlers are in place), and wait for it to end.

    Returns the process, the a2c_last path, and its stdout and stderr."""
    proc = subprocess.Popen([sys.executable, "-u", "main.py", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        last_path = wait_for_first_last(proc)
        assert os.path.exists(last_path)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc, last_path, out, err


def test_sigint_finishes_the_update_writes_last_and_exits_zero(tmp_path):
    proc, last_path, out, err = stop_after_first_last(
        [*TINY, "--num-updates", "100000", "--max-episode-frames", "120", "--checkpoint-interval", "1",
         "--log-dir", str(tmp_path)], signal.SIGINT)
    assert proc.returncode == 0, err  # README: Ctrl+C ... exits with code 0
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    final = out.strip().splitlines()[-1]
    assert final.startswith("stopped by SIGINT; ")
    last = torch.load(last_path, weights_only=True)
    assert 1 <= last["update"] < 100000
    assert f"{last['step']} env steps, {last['update']} updates" in final  # a2c_last: where it stopped
    assert last["step"] == 10 * last["update"]


def test_repeated_non_finite_losses_exit_with_code_1(tmp_path, monkeypatch, capsys):
    import agent as agent_module

    real_loss = agent_module.A2CAgent.loss

    def nan_loss(self, batch):
        return {k: v * float("nan") for k, v in real_loss(self, batch).items()}

    monkeypatch.setattr(agent_module.A2CAgent, "loss", nan_loss)
    code = cli.main([*TINY, "--num-updates", "50", "--max-skipped-updates", "2", "--max-episode-frames", "120",
                     "--log-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 1  # README: --max-skipped-updates in a row stop training (exit code 1)
    assert "error: 2 non-finite losses in a row" in captured.err
    assert "2 non-finite losses in a row; stopped with the last good weights; 20 env steps, 2 updates" in captured.out
    (run,) = os.listdir(tmp_path)
    last = torch.load(tmp_path / run / "a2c_last", weights_only=True)
    assert last["update"] == 2 and all(torch.isfinite(v).all() for v in last["model"].values())


# ------------------------------------------------------------------------------------------------ 6. mode flags
@pytest.mark.parametrize("argv, message", [
    (["--load", "runs/x/a2c_best_reward"], "error: --load is for --eval; to continue training use --resume PATH"),
    (["--out", "curves.png"], "error: --out is for --plot RUN_DIR [RUN_DIR ...] and --eval --physics-grid"),
])
def test_mode_flag_without_its_mode_is_refused(argv, message, one_line_error, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a run that started anyway would leave runs/ here
    # (a tiny one: a regression fails fast instead of training for hours)
    assert one_line_error([*argv, *TINY, "--num-updates", "1", "--max-episode-frames", "120"]) == message
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------------ 7. seeding
@pytest.mark.parametrize("vec_env", ["ale", "dummy"])
def test_each_env_of_a_vector_plays_its_own_seed(vec_env):
    """Env i of a vector seeded s plays the game of env 0 of a vector seeded s + i: under the same
    actions the envs of one vector play different games, each the one its own seed gives."""
    def play(seed: int, num_envs: int) -> np.ndarray:
        envs = make_vec_env("PongNoFrameskip-v4", num_envs, seed=seed, vec_env=vec_env)
        try:
            frames = [envs.reset()]
            rng = np.random.default_rng(0)
            for _ in range(40):
                frames.append(envs.step(np.full(num_envs, rng.integers(envs.action_space.n)))[0])
        finally:
            envs.close()
        return np.stack(frames)

    both, second = play(7, 2), play(8, 1)
    assert not np.array_equal(both[:, 0], both[:, 1])  # the same actions, different games
    np.testing.assert_array_equal(both[:, 1], second[:, 0])


@pytest.mark.parametrize("argv", [
    ["--env-name", "CartPole-v1", "--vec-env", "async"],     # gymnasium's AsyncVectorEnv workers
    [*TINY, "--vec-env", "subproc", "--max-episode-frames", "120"],  # SB3's SubprocVecEnv workers
], ids=["gymnasium-async", "atari-subproc"])
def test_ctrl_c_to_the_process_group_stops_the_run_not_its_env_workers(tmp_path, argv):
    """A terminal's Ctrl+C reaches every process of its group, the env workers too: they must leave
    the stop to the training process, which finishes its update, writes a2c_last and exits 0."""
    proc = subprocess.Popen([sys.executable, "-u", "main.py", *argv, "--num-envs", "2", "--num-updates", "100000",
                             "--checkpoint-interval", "1", "--no-progress", "--threads", "1", "--log-dir", str(tmp_path)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        last_path = wait_for_first_last(proc)
        assert os.path.exists(last_path)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert out.strip().splitlines()[-1].startswith("stopped by SIGINT; ")
    assert torch.load(last_path, weights_only=True)["update"] >= 1
