"""bench/throughput.py: its trainers, its summary lines, its command line, and one tiny run end to end."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from bench import throughput as bench
from bench.throughput import OURS_FEEDFORWARD, OURS_RECURRENT, SB3, Trials

pytestmark = pytest.mark.usefixtures("torch_single_thread")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def trials(name: str, rate: float) -> Trials:
    return Trials(name, steps=[int(rate)], seconds=[1.0])


def test_ablation_rows_each_take_away_one_optimization_then_all():
    default = bench.default_setup("ale")
    rows = bench.ablation_setups("ale")
    assert list(rows) == ["recurrent, dummy envs", "recurrent, no channels-last", "recurrent, default malloc",
                          "recurrent, rollout run again", "recurrent, none of them"]
    changed = {name: {k for k in setup if setup[k] != default[k]} for name, setup in rows.items()}
    assert changed == {"recurrent, dummy envs": {"vec_env"}, "recurrent, no channels-last": {"channels_last"},
                       "recurrent, default malloc": {"keep_freed"},
                       "recurrent, rollout run again": {"keep_graph"},
                       "recurrent, none of them": {"vec_env", "channels_last", "keep_freed", "encoder_passes",
                                                   "keep_graph"}}
    # On dummy envs already, "dummy envs" would be the default itself.
    assert "recurrent, dummy envs" not in bench.ablation_setups("dummy")


def test_the_two_configurations_of_ours():
    setups = bench.ours_setups("both", "ale")
    assert setups[OURS_RECURRENT] == bench.default_setup("ale")
    assert setups[OURS_RECURRENT]["recurrent"] and setups[OURS_RECURRENT]["arch"] == "universe"
    assert setups[OURS_FEEDFORWARD] == {**bench.default_setup("ale"), "arch": "nature", "recurrent": False}
    assert list(bench.ours_setups("feedforward", "ale")) == [OURS_FEEDFORWARD]


def test_bf16_adds_a_bfloat16_twin_of_each_of_ours_judged_by_the_same_target():
    setups = bench.ours_setups("both", "ale", bf16=True)
    assert list(setups) == [OURS_RECURRENT, OURS_FEEDFORWARD, OURS_RECURRENT + " bf16", OURS_FEEDFORWARD + " bf16"]
    for name in (OURS_RECURRENT, OURS_FEEDFORWARD):
        assert not setups[name]["bf16"] and setups[name + " bf16"] == {**setups[name], "bf16": True}
    results = {t.name: t for t in (trials(OURS_FEEDFORWARD, 150), trials(OURS_FEEDFORWARD + " bf16", 210),
                                   trials(SB3, 100))}
    lines = bench.summary_lines(results, [])
    assert "ratio (ours feed-forward (nature) bf16 / sb3): 2.10x" in lines
    assert lines[-1] == "targets: recurrent >= 1.3x: not measured, feed-forward >= 2x: no, feed-forward bf16 >= 2x: yes"


def test_ablation_takes_each_trainers_own_optimization_out_of_it():
    setups = bench.ours_setups("both", "ale", bf16=True)
    rows = bench.trainer_ablation_setups(setups)
    # Only the bfloat16 trainers have an optimization of their own (one cast a rollout).
    assert list(rows) == [OURS_RECURRENT + " bf16, a cast a pass", OURS_FEEDFORWARD + " bf16, a cast a pass"]
    for name, setup in rows.items():
        trainer = name.removesuffix(", a cast a pass")
        assert setup == {**setups[trainer], "cast_once": False}
    assert list(bench.trainer_ablation_setups(bench.ours_setups("both", "ale"))) == []  # float32 only: nothing
    results = {t.name: t for t in (trials(OURS_FEEDFORWARD, 150), trials(OURS_FEEDFORWARD + " bf16", 210),
                                   trials(OURS_FEEDFORWARD + " bf16, a cast a pass", 175))}
    assert bench.summary_lines(results, list(rows)) == [
        "what casting once a rollout bought: ours feed-forward (nature) bf16 over "
        "ours feed-forward (nature) bf16, a cast a pass: 1.20x"]


def test_summary_gives_ratios_targets_and_what_each_optimization_bought():
    results = {t.name: t for t in (trials(OURS_RECURRENT, 130), trials(OURS_FEEDFORWARD, 190), trials(SB3, 100),
                                   trials("recurrent, dummy envs", 65))}
    assert bench.summary_lines(results, ["recurrent, dummy envs"]) == [
        "ratio (ours recurrent / sb3): 1.30x",
        "ratio (ours feed-forward (nature) / sb3): 1.90x",
        "targets: recurrent >= 1.3x: yes, feed-forward >= 2x: no",
        "what each optimization bought (speed-up of ours recurrent over the row):",
        "  recurrent, dummy envs: 2.00x",
    ]
    del results[OURS_FEEDFORWARD]
    assert "feed-forward >= 2x: not measured" in bench.summary_lines(results, [])[-1]
    del results[SB3]
    assert not any(line.startswith(("ratio", "targets")) for line in bench.summary_lines(results, []))


def test_summary_says_what_the_layer_normalized_lstm_costs():
    results = {t.name: t for t in (trials(OURS_RECURRENT, 120), trials(bench.OURS_PLAIN, 150), trials(SB3, 100))}
    assert bench.summary_lines(results, []) == [
        "ratio (ours recurrent / sb3): 1.20x",
        "targets: recurrent >= 1.3x: no, feed-forward >= 2x: not measured",
        "ratio (ours recurrent, plain LSTM / sb3): 1.50x",
        "the layer-normalized cell and the skip connection: ours recurrent, plain LSTM over ours recurrent: 1.25x",
    ]


@pytest.mark.parametrize("argv, message", [
    (["--vec-env", "dummy"], "unrecognized arguments: --vec-env dummy"),  # it is --ours-vec-env
    (["--sb3-vec-env", "ale"], "argument --sb3-vec-env: invalid choice: 'ale'"),  # SB3 has no ale path
])
def test_refuses_bad_flags(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_a_tiny_run_prints_its_table_and_memory(capsys):
    assert bench.main(["--steps", "10", "--num-envs", "2", "--repeats", "1", "--warmup-steps", "0", "--no-sb3",
                       "--ours", "feedforward"]) == 0
    out = capsys.readouterr().out
    assert "envs: ours ale (ale-py" in out and "1 threads" in out
    row = next(line for line in out.splitlines() if line.startswith(OURS_FEEDFORWARD + " "))
    assert row[len(OURS_FEEDFORWARD):].split()[0] == "10"  # env steps of the run
    assert "peak RSS of a training process" in out and "ratio" not in out


def test_a_tiny_feedforward_ablation_runs_the_trainers_without_their_own_optimizations(capsys):
    assert bench.main(["--steps", "10", "--num-envs", "2", "--repeats", "1", "--warmup-steps", "0", "--no-sb3",
                       "--ours", "feedforward", "--bf16", "--ablation"]) == 0
    out = capsys.readouterr().out.splitlines()
    names = [OURS_FEEDFORWARD, OURS_FEEDFORWARD + " bf16", OURS_FEEDFORWARD + " bf16, a cast a pass"]
    for name in names:
        assert any(line.startswith(name + " ") for line in out), name  # a row of the table
    assert not any(line.startswith(OURS_FEEDFORWARD + ", ") for line in out)  # float32 has nothing of its own to take out
    assert any(line.startswith("what casting once a rollout bought: ") for line in out)
    assert not any(line.startswith("recurrent, ") for line in out)  # no recurrent trainer to take things from


def test_sb3_trains_the_steps_asked_and_leaves_no_log_folder_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    steps, seconds = bench.train_sb3(10, "PongNoFrameskip-v4", 2, "dummy")
    assert steps == 10 and seconds > 0  # 2 envs x 5 steps: one update
    assert not list(tmp_path.glob("SB3-*"))


def test_encoder_batch_times_float32_and_both_ways_of_casting_to_bfloat16():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "encoder_batch.py"), "--bf16", "--frames", "8",
                          "--step-frames", "4", "--repeats", "1", "--iterations", "1", "--threads", "1"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    rows = out.strip().splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["universe", "nature"]
    for row in rows:
        assert "passes of 4" in row
        for variant in ("float32", "bf16 cast a pass", "bf16 cast once"):
            assert f"{variant} " in row
        assert row.count(" ms (") == 3  # those three variants and no other
        assert "(1.00x)" in row.split("bf16")[0]  # float32 is the reference


def test_openmp_spin_runs_each_setting_and_prints_a_row_of_every_column():
    # The table's shape only: the timings are for reading, not for the suite.
    from bench.openmp_spin import COLUMNS

    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "openmp_spin.py"), "--spins", "default", "0",
                          "--steps", "3", "--repeats", "1", "--num-envs", "2", "--threads", "1"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    lines = out.strip().splitlines()
    assert "2 games of Pong" in lines[0] and "torch 1 threads" in lines[0]
    assert lines[1].split()[0] == "GOMP_SPINCOUNT"
    for name in (*COLUMNS, "step after fwd"):
        assert name in lines[1]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert list(rows) == ["default", "0"]
    assert all(len(values) == len(COLUMNS) + 1 for values in rows.values())


@pytest.mark.skipif(bench.torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--cuda"])
    assert exc.value.code == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_core_probe_reads_the_network_before_training_and_after_every_interval():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "core_probe.py"), "--updates", "2", "--every", "1",
                          "--flags", "--num-envs 2 --max-episode-frames 200"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].split()[:6] == ["update", "feature_mean", "feature_max", "saturated", "output_spread",
                                    "value_spread"]
    rows = [line.split() for line in lines[1:4]]
    assert [int(row[0]) for row in rows] == [0, 1, 2]
    assert all(float(value) >= 0 for row in rows for value in row[3:6])  # shares and spreads
    assert lines[-1] == "2 updates in " + lines[-1].split()[-2] + " s"


@pytest.mark.parametrize("optimizer", ["torch-rmsprop", "rmsprop"])
def test_step_sizes_show_torch_rmsprops_first_steps_of_about_ten_times_lr(optimizer):
    """Two updates: torch's RMSprop moves each weight with a gradient by lr / sqrt(1 - alpha) = 7e-3
    at first, whatever its gradient (the RMS over a part is lower where some weights get none);
    TensorFlow's form (square average from 1) by lr x gradient, thousands of times less."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "step_sizes.py"), "--updates", "2",
                          "--flags", f"--num-envs 2 --max-episode-frames 200 --optimizer {optimizer}"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith(f"{optimizer} lr 0.0007, 2 updates")
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in lines[2:]}
    assert set(rows) == {"encoder", "lstm", "actor", "critic"}
    for part, (gradient, first, _) in rows.items():
        assert gradient > 0
        if optimizer == "torch-rmsprop":
            assert 1e-3 < first < 7.1e-3, (part, first)
        else:
            assert first < 1e-5, (part, first)
