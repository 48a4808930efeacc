"""End to end on real Atari through the command line: train, log, checkpoint, resume, evaluate, refuse bad input."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import devices
import main as cli
from checkpoints import CHECKPOINT_FORMAT

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 2 envs x 5 steps = 10 env steps an update; a 120-frame cap (30 agent steps) makes episodes end
# (by time limit) within a few updates, so every episode statistic and checkpoint appears.
SMALL = [
    "--num-envs",
    "2",
    "--rollout-size",
    "5",
    "--max-episode-frames",
    "120",
    "--no-progress",
    "--no-cuda",
    "--log-interval",
    "2",
    "--histogram-interval",
    "4",
    "--checkpoint-interval",
    "4",
    "--seed",
    "3",
    "--eval-interval",
    "4",
    "--eval-episodes",
    "2",
]
UPDATES = 8


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_importing_main_loads_no_torch():
    # torch is imported inside the functions that need it (the parser, for the flags each algorithm
    # declares in its own file), so that a script can import main for a part of it.
    code = "import sys, main; assert 'torch' not in sys.modules, 'main imports torch'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> str:
    log_dir = tmp_path_factory.mktemp("runs")
    result = run_cli(*SMALL, "--num-updates", str(UPDATES), "--log-dir", str(log_dir))
    assert result.returncode == 0, result.stderr
    (run_dir,) = [os.path.join(log_dir, d) for d in os.listdir(log_dir)]
    return run_dir


def test_training_writes_tensorboard_scalars_against_env_steps(trained_run):
    found = scalars(trained_run)
    expected = {
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "loss/total",
        "train/explained_variance",
        "train/grad_norm",
        "train/lr",
        "train/steps_per_second",
        "train/resident_memory_mib",
        "episode/return",
        "episode/length",
        "episode/return_mean100",
        "rollout/value_mean",
        "rollout/return_mean",
        "rollout/advantage_mean",
        "rollout/advantage_std",
        "eval/return_mean",
        "eval/return_std",
        "eval/return_min",
        "eval/return_max",
    }
    assert expected <= set(found)
    # Evaluated every 4 updates of 10 env steps, on games of its own.
    assert [step for step, _ in found["eval/return_mean"]] == [40, 80]
    assert all(float(v).is_integer() for _, v in found["eval/return_min"])
    # Losses every 2 updates of 10 env steps: the x axis is the global env-step count.
    assert [step for step, _ in found["loss/total"]] == [20, 40, 60, 80]
    assert all(value == pytest.approx(7e-4) for _, value in found["train/lr"])
    # Raw episode returns of Pong are integers (points), never clipped fractions.
    assert all(float(v).is_integer() for _, v in found["episode/return"])
    acc = EventAccumulator(trained_run, size_guidance={"histograms": 0})
    acc.Reload()
    assert {"rollout/advantages", "rollout/values", "rollout/returns"} <= set(acc.Tags()["histograms"])
    assert "settings/text_summary" in acc.Tags()["tensors"]


def test_training_writes_all_checkpoints_and_settings(trained_run):
    assert {"a2c_best_loss", "a2c_best_reward", "a2c_best_eval", "a2c_last", "config.json"} <= set(
        os.listdir(trained_run)
    )
    last = torch.load(os.path.join(trained_run, "a2c_last"), weights_only=True)
    assert last["format"] == CHECKPOINT_FORMAT
    assert (last["update"], last["step"]) == (UPDATES, UPDATES * 10)
    assert {"optimizer", "rng", "episode_returns", "config", "model_spec"} <= set(last)
    assert last["config"]["env_name"] == "PongNoFrameskip-v4"
    best_loss = torch.load(os.path.join(trained_run, "a2c_best_loss"), weights_only=True)
    assert best_loss["best_loss"] == pytest.approx(last["best_loss"])
    best_reward = torch.load(os.path.join(trained_run, "a2c_best_reward"), weights_only=True)
    assert best_reward["best_reward"] == best_reward["mean_return"] == last["best_reward"]
    best_eval = torch.load(os.path.join(trained_run, "a2c_best_eval"), weights_only=True)
    evals = [v for _, v in scalars(trained_run)["eval/return_mean"]]
    assert best_eval["best_eval"] == pytest.approx(max(evals)) == pytest.approx(last["best_eval"])
    assert best_eval["step"] == 40 * (1 + evals.index(max(evals)))
    assert not [f for f in os.listdir(trained_run) if f.startswith(".tmp")]


def test_resume_continues_step_count_and_curves(trained_run, tmp_path):
    run_dir = shutil.copytree(trained_run, tmp_path / "run")
    result = run_cli("--resume", str(run_dir / "a2c_last"), "--num-updates", str(UPDATES + 4), "--no-progress")
    assert result.returncode == 0, result.stderr
    last = torch.load(run_dir / "a2c_last", weights_only=True)
    assert (last["update"], last["step"]) == (UPDATES + 4, (UPDATES + 4) * 10)
    curves = scalars(str(run_dir))
    steps = [step for step, _ in curves["loss/total"]]
    assert steps == [20, 40, 60, 80, 100, 120]  # continued, nothing repeated
    before = torch.load(os.path.join(trained_run, "a2c_last"), weights_only=True)["episode_count"]
    assert 0 < before <= last["episode_count"] == len(curves["episode/return"])  # counted on, not from zero
    # Settings that define the run cannot change under it.
    refused = run_cli("--resume", str(run_dir / "a2c_last"), "--num-envs", "4")
    assert refused.returncode == 2 and "--num-envs 2" in refused.stderr


def test_resume_restores_the_optimizer_and_every_random_stream(trained_run, tmp_path, monkeypatch):
    import runner as runner_module
    import seeds

    run_dir = shutil.copytree(trained_run, tmp_path / "run")
    saved = torch.load(run_dir / "a2c_last", weights_only=True)
    seen = {}

    def train(self):  # where training would begin: what it would begin from
        seen["optimizer"], seen["rng"] = self.agent.optimizer.state_dict(), seeds.rng_state()
        seen["lr"], seen["entropy_coeff"] = runner_module.scheduled_lr(self.config, 0), self.agent.entropy_coeff
        return self.state

    monkeypatch.setattr(runner_module.Runner, "train", train)
    assert (
        cli.main(
            [
                "--no-cuda",
                "--resume",
                str(run_dir / "a2c_last"),
                "--num-updates",
                str(UPDATES + 1),
                "--lr",
                "3e-4",
                "--entropy-coeff",
                "0.02",
            ]
        )
        == 0
    )
    assert (seen["lr"], seen["entropy_coeff"]) == (3e-4, 0.02)  # typed settings apply from the resume on
    assert seen["optimizer"]["state"].keys() == saved["optimizer"]["state"].keys() != set()
    for index, state in saved["optimizer"]["state"].items():
        assert all(torch.equal(seen["optimizer"]["state"][index][k], v) for k, v in state.items())
    assert torch.equal(seen["rng"]["torch"], saved["rng"]["torch"])
    assert torch.equal(seen["rng"]["numpy"]["keys"], saved["rng"]["numpy"]["keys"])
    assert seen["rng"]["numpy"]["pos"] == saved["rng"]["numpy"]["pos"]
    assert seen["rng"]["python"] == seeds._as_tuples(saved["rng"]["python"])


def test_resume_after_a_hard_kill_keeps_best_checkpoints_written_after_a2c_last(trained_run, tmp_path):
    run_dir = shutil.copytree(trained_run, tmp_path / "run")
    # As after SIGKILL: a2c_last predates better bests (here: ones no update can beat).
    last = torch.load(run_dir / "a2c_last", weights_only=True)
    torch.save({**last, "best_loss": 1e9, "best_reward": -1e9, "best_eval": -1e9}, run_dir / "a2c_last")
    for name, key, best in (
        ("a2c_best_loss", "best_loss", -1e9),
        ("a2c_best_reward", "best_reward", 1e9),
        ("a2c_best_eval", "best_eval", 1e9),
    ):
        saved = torch.load(run_dir / name, weights_only=True)
        torch.save({**saved, key: best}, run_dir / name)
    before = {name: (run_dir / name).read_bytes() for name in ("a2c_best_loss", "a2c_best_reward", "a2c_best_eval")}
    result = run_cli("--resume", str(run_dir / "a2c_last"), "--num-updates", str(UPDATES + 4), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert {name: (run_dir / name).read_bytes() for name in before} == before
    last = torch.load(run_dir / "a2c_last", weights_only=True)
    assert (last["best_loss"], last["best_reward"], last["best_eval"]) == (-1e9, 1e9, 1e9)


def test_eval_prints_raw_scores(trained_run):
    result = run_cli(
        "--eval",
        "--load",
        os.path.join(trained_run, "a2c_best_reward"),
        "--episodes",
        "3",
        "--max-episode-frames",
        "200",
        "--no-cuda",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    scores = [float(s) for s in lines[-2].removeprefix("scores: ").split()]
    assert len(scores) == 3 and all(s.is_integer() for s in scores)
    assert lines[-1].startswith("episodes: 3  mean: ")


def test_plot_draws_the_runs_curves(trained_run, tmp_path):
    out = tmp_path / "figures" / "runs.png"
    result = run_cli("--plot", trained_run, trained_run + "/", "--out", str(out))
    assert result.returncode == 2 and "twice" in result.stderr  # the same run given twice is refused
    result = run_cli("--plot", trained_run, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "episode return, entropy, value loss, policy loss, explained variance, gradient norm" in result.stdout
    import matplotlib.image

    image = matplotlib.image.imread(str(out))
    assert image.shape[0] > 300 and image.shape[1] > 600 and image.std() > 0.05


def test_sigterm_finishes_update_writes_last_and_exits_zero(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-u", "main.py", *SMALL, "--num-updates", "100000", "--log-dir", str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("device: cpu (")  # the first line names the device
        line = proc.stdout.readline()
        assert line.startswith("run directory:")
        # a2c_last is first written after update 4 (--checkpoint-interval 4), with the signal
        # handlers long in place and losses logged (--log-interval 2).
        last_path = os.path.join(line.split(":", 1)[1].strip(), "a2c_last")
        deadline = time.monotonic() + 120
        while not os.path.exists(last_path) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert os.path.exists(last_path)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopped by SIGTERM" in out
    (run_dir,) = os.listdir(tmp_path)
    last = torch.load(tmp_path / run_dir / "a2c_last", weights_only=True)
    assert 4 <= last["update"] < 100000
    assert max(step for step, _ in scalars(str(tmp_path / run_dir))["loss/total"]) <= last["step"]


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env-name", "Pongg"], "unknown env id 'Pongg'; did you mean PongNoFrameskip-v4, ALE/Pong-v5?"),
        (["--env-name", "FrozenLake-v1"], "flat Box observations"),
        (["--num-envs", "0"], "--num-envs: expected a positive integer, got '0'"),
        (["--num-envs", "-2"], "--num-envs: expected a positive integer"),
        (["--rollout-size", "0"], "--rollout-size: expected a positive integer"),
        (["--lr", "0"], "--lr: expected a positive number"),
        (["--lr=-1e-3"], "--lr: expected a positive number"),
        (["--lr", "nan"], "--lr: expected a positive number"),
        (["--num-updates", "-5"], "--num-updates: expected a positive integer"),
        (["--gamma", "1.5"], "--gamma: expected a number in [0, 1]"),
        (["--lr-decay-start", "0.5"], "--lr-decay-start is where the linear decay of --lr-schedule linear begins"),
        (["--lr-schedule", "linear", "--lr-decay-start", "1"], "--lr-decay-start is a share of the run below 1"),
        (["--lr-decay-from", "0.5"], "--lr-decay-from is the rate the decay of --lr-schedule linear begins at"),
        (
            ["--entropy-decay-start", "0.5"],
            "--entropy-decay-start is where the linear decay of --entropy-schedule linear",
        ),
        (
            ["--entropy-schedule", "linear", "--entropy-decay-start", "1"],
            "--entropy-decay-start is a share of the run below 1",
        ),
        (["--lr-schedule", "linear", "--lr-decay-from", "0"], "--lr-decay-from is a share of --lr above 0"),
        (["--lr-schedule", "linear", "--lr-decay-from", "1.5"], "--lr-decay-from: expected a number in [0, 1]"),
        (["--resume", "/no/such/a2c_last"], "checkpoint not found: /no/such/a2c_last"),
        (["--eval", "--load", "/no/such/file"], "checkpoint not found"),
        (["--eval"], "--eval needs --load"),
        (["--json", "out.json"], "--json is for --eval"),
        (["--stochastic"], "--deterministic/--stochastic is for --eval"),
        (["--arch", "resnet"], "unknown --arch 'resnet' (one of universe, nature)"),
        (["--vec-env", "ray"], "--vec-env: invalid choice: 'ray'"),
        (["--seed", "-1"], "--seed: expected an integer from 0 to 1073741823, got '-1'"),
        (["--seed", "1073741824"], "--seed: expected an integer from 0 to 1073741823"),
        (["--seed", "99999999999999999999"], "--seed: expected an integer from 0 to 1073741823"),
    ],
)
def test_bad_input_one_line_exit_2(argv, message, one_line_error):
    assert message in one_line_error(argv)


def test_every_env_seed_a_run_makes_is_one_ale_py_takes():
    from ale_vec_env import AleVecEnv
    from seeds import SEED_LIMIT, env_seed

    assert (env_seed(42), env_seed(42, update=3)) == (42, 42 + 3 * 7919)
    for update in (271_200, 10**9):  # a resumed long run: its offset wraps, it does not overflow
        assert 0 <= env_seed(SEED_LIMIT - 1, update=update) < SEED_LIMIT
    # The largest: the evaluation envs of the largest seed (seed + 1,000,000 + env index).
    assert env_seed(SEED_LIMIT - 1, evaluation=True) == SEED_LIMIT - 1 + 1_000_000
    envs = AleVecEnv("PongNoFrameskip-v4", 2, seed=env_seed(SEED_LIMIT - 1, evaluation=True))
    try:
        assert envs.reset().shape == (2, 4, 84, 84)
    finally:
        envs.close()


def test_unwritable_log_dir(tmp_path, one_line_error):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert "cannot write to log dir" in one_line_error(["--log-dir", str(blocker / "runs")])


def test_truncated_and_corrupt_checkpoints_are_refused(trained_run, tmp_path, one_line_error):
    data = open(os.path.join(trained_run, "a2c_last"), "rb").read()
    truncated, garbage = tmp_path / "truncated", tmp_path / "garbage"
    truncated.write_bytes(data[: len(data) // 2])
    garbage.write_bytes(os.urandom(4096))
    for path in (truncated, garbage):
        assert "truncated or corrupt" in one_line_error(["--resume", str(path)])
        assert "truncated or corrupt" in one_line_error(["--eval", "--load", str(path)])


def test_checkpoint_of_other_game_or_architecture_is_refused(trained_run, one_line_error):
    last = os.path.join(trained_run, "a2c_last")
    message = one_line_error(["--eval", "--load", last, "--env-name", "BreakoutNoFrameskip-v4"])
    assert "6 actions; BreakoutNoFrameskip-v4 has 4" in message
    message = one_line_error(["--eval", "--load", last, "--env-name", "SpaceInvadersNoFrameskip-v4"])  # 6 actions too
    assert message.endswith("was trained on PongNoFrameskip-v4; SpaceInvadersNoFrameskip-v4 is another game")
    # Another id of the same game plays (a v4-trained agent under the v5 id's settings, say).
    assert (
        cli.main(
            [
                "--no-cuda",
                "--eval",
                "--load",
                last,
                "--env-name",
                "ALE/Pong-v5",
                "--episodes",
                "1",
                "--max-episode-frames",
                "120",
                "--no-cuda",
            ]
        )
        == 0
    )
    assert "another architecture" in one_line_error(["--eval", "--load", last, "--no-recurrent"])
    assert "another architecture" in one_line_error(["--eval", "--load", last, "--n-stack", "2"])
    assert "--env-name PongNoFrameskip-v4" in one_line_error(["--resume", last, "--env-name", "BreakoutNoFrameskip-v4"])


def test_resume_into_a_run_directory_it_cannot_write_is_refused_before_training(
    trained_run, one_line_error, monkeypatch
):
    import training

    def read_only(directory):  # what a read-only or immutable directory answers (root writes through chmod)
        if os.path.samefile(directory, trained_run):
            raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(training, "probe_writable", read_only)
    monkeypatch.setattr(training, "seed_everything", lambda seed: pytest.fail("training started"))
    message = one_line_error(["--resume", os.path.join(trained_run, "a2c_last"), "--num-updates", str(UPDATES + 2)])
    assert message == f"error: cannot write to the run directory '{trained_run}': Permission denied"


def test_json_path_that_is_no_file_is_refused_before_playing(trained_run, tmp_path, one_line_error):
    last = os.path.join(trained_run, "a2c_last")
    for path in (str(tmp_path), "", str(tmp_path / "new") + "/"):
        assert "--json needs the path of a file to write" in one_line_error(
            ["--eval", "--load", last, "--episodes", "1", "--json", path]
        )


def test_a_resumed_runs_settings_are_checked_as_a_new_runs(trained_run, one_line_error, monkeypatch):
    """The flags a resume may change (those not fixed by the run) still have to fit the env and
    the algorithm: the checkpoint's settings with them on top go through a new run's checks."""
    import training

    monkeypatch.setattr(training, "seed_everything", lambda seed: pytest.fail("training started"))
    last = os.path.join(trained_run, "a2c_last")
    more = ["--num-updates", str(UPDATES + 2)]
    assert "--normalize-obs and --normalize-reward are for vector observations" in one_line_error(
        ["--resume", last, *more, "--normalize-reward"]
    )
    assert "PongNoFrameskip-v4" in one_line_error(["--resume", last, *more, "--randomize-domain"])
    assert "--horizon is for --algo grpo" in one_line_error(["--resume", last, *more, "--horizon", "5"])


def test_weights_only_checkpoint_cannot_resume(trained_run, one_line_error):
    assert "holds weights only" in one_line_error(["--resume", os.path.join(trained_run, "a2c_best_loss")])


def test_bad_input_from_a_real_process_has_no_traceback():
    result = run_cli("--env-name", "NoSuchGame-v4", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: unknown env id 'NoSuchGame-v4'")
    assert "Traceback" not in result.stderr


def test_help_lists_every_flag_with_default():
    parser = cli.build_parser()
    # The help's entries: each starts with its option strings on a line indented by two, and runs
    # on to the next entry or section heading.
    entries, lines = [], []
    for line in parser.format_help().splitlines() + [""]:
        if line.startswith("  -") or not line.startswith(" "):
            if lines:
                entries.append(" ".join(" ".join(lines).split()))
            lines = [line] if line.startswith("  -") else []
        elif lines:
            lines.append(line)
    defaults = vars(parser.parse_args([]))  # what a run gets for each flag not typed
    actions = [action for action in parser._actions if action.option_strings and action.dest != "help"]
    assert len(entries) == len(actions) + 1  # one entry for each flag, and --help's
    shown = set()
    for action in actions:
        (entry,) = [e for e in entries if e.split()[0].rstrip(",") == action.option_strings[0]]
        for name in action.option_strings:  # --max-grad_norm too, and each --no- twin
            assert name in entry, (name, entry)
        if action.default is not argparse.SUPPRESS:
            assert action.default == defaults[action.dest]
            assert entry.endswith(f"(default: {action.default})"), entry
            shown.add(action.dest)
    # A flag without a default of its own (--stochastic) sets the setting of one that shows it.
    assert shown == {action.dest for action in actions}
    assert "--lr LR Learning rate. (default: 0.0007)" in entries
    assert entries[1].startswith("--env-name ID") and entries[1].endswith("(default: PongNoFrameskip-v4)")
    # And the flags themselves are still there.
    names = {name for action in actions for name in action.option_strings}
    assert {
        "--env-name",
        "--cuda",
        "--no-cuda",
        "--tensorboard",
        "--no-tensorboard",
        "--log-dir",
        "--seed",
        "--max-grad-norm",
        "--max-grad_norm",
        "--lr",
        "--num-envs",
        "--n-stack",
        "--rollout-size",
        "--num-updates",
        "--curiosity-coeff",
        "--icm-beta",
        "--value-coeff",
        "--entropy-coeff",
        "--recurrent",
        "--no-recurrent",
        "--optimizer",
        "--lr-schedule",
        "--entropy-schedule",
        "--gamma",
        "--gae-lambda",
        "--vec-env",
        "--resume",
        "--eval",
        "--load",
        "--episodes",
    } <= names


def test_flags_parse_into_config_and_booleans_turn_off():
    config, _, typed = cli.parse_args(["--no-cuda", "--no-tensorboard", "--no-recurrent", "--max-grad_norm", "2"])
    assert (config.cuda, config.tensorboard, config.recurrent, config.max_grad_norm) == (False, False, False, 2.0)
    assert typed == {"cuda", "tensorboard", "recurrent", "max_grad_norm"}
    default, _, _ = cli.parse_args([])
    assert default.cuda is None and default.tensorboard and default.recurrent  # None: the device by the env
    assert default.total_steps == 10_000_000


def test_a_saved_config_without_a_newer_setting_keeps_what_it_ran_with():
    """Configs saved before --lstm-norm and --core-skip existed ran the plain LSTM without skip:
    they come back so (the defaults are now on), and a setting they hold wins."""
    from config import Config

    saved = {k: v for k, v in Config().to_dict().items() if k not in ("lstm_norm", "core_skip", "feature_norm")}
    old = Config.from_dict(saved)
    assert (old.lstm_norm, old.core_skip, old.feature_norm) == (False, False, False)
    assert Config().lstm_norm and Config().core_skip and Config().optimizer == "torch-rmsprop"
    assert Config.from_dict({**saved, "lstm_norm": True}).lstm_norm is True


def test_curiosity_run_logs_its_curves_resumes_and_plays_without_flags(tmp_path):
    result = run_cli(*SMALL, "--icm", "--num-updates", "4", "--max-episode-frames", "60", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (name,) = os.listdir(tmp_path)
    run_dir = tmp_path / name
    found = scalars(str(run_dir))
    assert {
        "icm/inverse",
        "icm/forward",
        "icm/inverse_accuracy",
        "rewards/intrinsic_mean",
        "rewards/intrinsic_max",
        "loss/a2c_total",
        "episode/return",
        "episode/return_intrinsic",
    } <= set(found)
    # Intrinsic episode returns are sums of non-negative rewards; the extrinsic ones are raw Pong scores.
    assert all(v >= 0 for _, v in found["episode/return_intrinsic"])
    assert "intrinsic" in torch.load(run_dir / "a2c_last", weights_only=True)
    resumed = run_cli("--resume", str(run_dir / "a2c_last"), "--num-updates", "6", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert torch.load(run_dir / "a2c_last", weights_only=True)["update"] == 6
    played = run_cli(
        "--eval", "--load", str(run_dir / "a2c_best_loss"), "--episodes", "2", "--max-episode-frames", "120"
    )
    assert played.returncode == 0, played.stderr
    assert "episodes: 2" in played.stdout


@pytest.mark.parametrize("hardware_bf16", [False, True])
def test_bf16_trains_and_warns_only_where_the_hardware_lacks_it(tmp_path, monkeypatch, capsys, hardware_bf16):
    import training

    monkeypatch.setattr(training, "has_fast_bf16", lambda device: hardware_bf16)
    args = [*SMALL, "--eval-interval", "0", "--num-updates", "1", "--no-tensorboard", "--threads", "1"]
    assert cli.main([*args, "--arch", "nature", "--no-recurrent", "--bf16", "--log-dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    warned = "warning: this CPU has no bfloat16 arithmetic; --bf16 will be slower, not faster" in err
    assert warned != hardware_bf16
    (name,) = os.listdir(tmp_path)
    saved = torch.load(tmp_path / name / "a2c_last", weights_only=True)
    assert saved["config"]["speed"]["bf16"] and all(
        w.dtype == torch.float32 for w in saved["model"].values() if w.is_floating_point()
    )


def test_eval_plays_in_the_precision_it_was_told(trained_run, monkeypatch):
    import evaluate
    import play

    played = []
    real = evaluate.evaluate
    monkeypatch.setattr(play, "evaluate", lambda model, *a, **k: played.append(model.bf16) or real(model, *a, **k))
    checkpoint = os.path.join(trained_run, "a2c_last")
    for flags in ([], ["--bf16"], ["--no-bf16"]):
        assert (
            cli.main(
                [
                    "--no-cuda",
                    "--eval",
                    "--load",
                    checkpoint,
                    "--episodes",
                    "1",
                    "--max-episode-frames",
                    "60",
                    "--no-cuda",
                    *flags,
                ]
            )
            == 0
        )
    assert played == [False, True, False]  # the run trained in float32; --bf16 asks for bfloat16


def test_every_setting_has_a_flag_and_curiosity_settings_come_as_one_block():
    from config import Config, Curiosity, flag_of, setting_names

    dests = {action.dest for action in cli.build_parser()._actions if action.option_strings}
    assert set(setting_names()) <= dests  # every setting can be typed
    config, _, typed = cli.parse_args(["--icm", "--icm-beta", "0.3", "--icm-lambda", "0.5", "--curiosity-coeff", "2"])
    assert config.curiosity == Curiosity(enabled=True, beta=0.3, policy_weight=0.5, eta=2.0)
    assert typed == {"curiosity.enabled", "curiosity.beta", "curiosity.policy_weight", "curiosity.eta"}
    saved = config.to_dict()
    assert saved["curiosity"]["beta"] == 0.3 and "icm_beta" not in saved
    assert Config.from_dict(saved) == config
    # A config saved while the settings were flat reads the same.
    flat = {k: v for k, v in saved.items() if k != "curiosity"}
    flat.update(
        icm=True,
        icm_beta=0.3,
        icm_lambda=0.5,
        curiosity_coeff=2.0,
        extrinsic_coeff=1.0,
        icm_normalize=False,
        icm_forward_grad=True,
    )
    assert Config.from_dict(flat) == config
    assert flag_of("curiosity.policy_weight") == "--icm-policy-weight"


def test_speed_settings_are_one_block_and_each_reaches_what_it_switches(monkeypatch):
    from algorithms import make_agent
    from config import Config, Speed

    config, _, typed = cli.parse_args(
        ["--no-keep-graph", "--encoder-chunk", "0", "--no-keep-freed-memory", "--no-channels-last"]
    )
    assert config.speed == Speed(keep_graph=False, encoder_chunk=0, keep_freed_memory=False, channels_last=False)
    assert typed == {"speed.keep_graph", "speed.encoder_chunk", "speed.keep_freed_memory", "speed.channels_last"}
    assert Config.from_dict({"channels_last": False, "bf16": True}).speed == Speed(channels_last=False, bf16=True)
    calls = []
    monkeypatch.setattr(devices, "keep_freed_memory", lambda: calls.append(1) or True)
    devices.pick_device(False, 0, keep_freed=False)
    assert calls == []
    devices.pick_device(False, 0, keep_freed=True)
    assert calls == [1]
    agent = make_agent(Config(speed=Speed(encoder_chunk=5)), (4, 84, 84), 6)
    assert agent.model.encoder.cpu_chunk == 5


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_non_finite_log_std_init_is_refused(one_line_error, value):
    assert one_line_error(["--env-name", "Pendulum-v1", f"--log-std-init={value}"]) == (
        f"error: argument --log-std-init: expected a finite number, got '{value}' (see --help)"
    )


def test_an_env_whose_optional_dependency_is_missing_is_refused_in_one_line(one_line_error, tmp_path):
    import gymnasium as gym

    try:
        gym.make("HalfCheetah-v5").close()
        pytest.skip("MuJoCo is installed here")
    except gym.error.DependencyNotInstalled:
        pass
    message = one_line_error(["--env-name", "HalfCheetah-v5", "--log-dir", str(tmp_path)])
    assert message.startswith("error: HalfCheetah-v5 needs a package that is not installed: MuJoCo")
    assert not os.listdir(tmp_path)
