"""bench/throughput.py (Atari and vector envs, the env-only row) and bench/sb3_reference.py (the one SB3
training loop): their trainers, summary lines and command lines, and tiny runs end to end."""
from __future__ import annotations

import dataclasses
import re
import tempfile

import pytest

from bench import throughput as bench
from bench.throughput import OURS_FEEDFORWARD, OURS_RECURRENT, SB3, Trials

pytestmark = pytest.mark.usefixtures("torch_single_thread")


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


def test_summary_gives_a_vector_env_s_ratio_and_each_of_ours_as_a_share_of_the_env_only_rate():
    results = {t.name: t for t in (trials(bench.OURS_DEFAULTS, 300), trials(SB3, 100), trials(bench.ENV_ONLY, 1200))}
    assert bench.summary_lines(results, []) == [  # no Atari trainer: no Atari targets
        "ratio (ours (env defaults) / sb3): 3.00x",
        "training as a share of the env-only rate (1,200 env steps/s): ours (env defaults) 25%"]
    cast = OURS_RECURRENT + " bf16, a cast a pass"
    atari = {t.name: t for t in (trials(OURS_RECURRENT, 300), trials(OURS_RECURRENT + " bf16", 400), trials(cast, 350),
                                 trials(bench.ENV_ONLY, 1000))}
    assert bench.summary_lines(atari, [cast])[-1] == (  # an ablation row is no trainer of ours to share out
        "training as a share of the env-only rate (1,000 env steps/s): ours recurrent 30%, ours recurrent bf16 40%")


@pytest.mark.parametrize("argv, message", [
    (["--vec-env", "dummy"], "unrecognized arguments: --vec-env dummy"),  # it is --ours-vec-env
    (["--sb3-vec-env", "ale"], "argument --sb3-vec-env: invalid choice: 'ale'"),  # SB3 has no ale path
    (["--env-name", "CartPole-v1", "--ablation", "--bf16"],
     "--ablation, --bf16: for Atari games; CartPole-v1 trains with its own defaults"),
    (["--env-name", "CartPole-v1", "--no-recurrent"], "--ours: for Atari games"),
    (["--env-name", "CartPol-v1"], "unknown env id 'CartPol-v1'"),
    (["--one-core", "--preset", "fast-cpu"], "--one-core: measures a preset's envs and network, so it needs --env-only"),
    (["--one-core", "--env-only"], "--one-core: measures a preset's envs and network, so it needs --env-only"),
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


def test_a_tiny_vector_env_run_times_ours_sb3_and_the_envs_alone(capsys):
    assert bench.main(["--env-name", "CartPole-v1", "--num-envs", "4", "--steps", "200", "--repeats", "1",
                       "--warmup-steps", "0", "--env-only", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "envs: ours sync (gymnasium SyncVectorEnv), sb3 dummy (SB3 DummyVecEnv)" in out
    for name in (bench.OURS_DEFAULTS, SB3, bench.ENV_ONLY):
        row = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert row[len(name):].split()[0] == "200", row  # 10 updates of 4 envs x 5 steps each, or 50 vector steps
    assert "ratio (ours (env defaults) / sb3): " in out and "targets:" not in out
    assert "training as a share of the env-only rate (" in out


@pytest.mark.parametrize("env_name, vec_env", [("Pendulum-v1", "sync"), ("PongNoFrameskip-v4", "ale")])
def test_the_envs_alone_take_random_actions_of_their_space_for_whole_vector_steps(env_name, vec_env):
    steps, seconds = bench.step_randomly(9, env_name, 2, vec_env)  # Box actions, then Discrete ones
    assert steps == 10 and seconds > 0  # 9 env steps of 2 envs: rounded up to 5 vector steps


def test_sb3_reference_trains_with_the_zoos_settings_and_reports_the_mean_of_the_last_100_episodes(capsys):
    from bench import sb3_reference

    atari = sb3_reference.zoo_settings("PongNoFrameskip-v4")
    assert (atari["policy"], atari["learning_rate"], atari["n_steps"], atari["ent_coef"], atari["vf_coef"]) == \
        ("CnnPolicy", 7e-4, 5, 0.01, 0.25)
    vector = sb3_reference.zoo_settings("CartPole-v1")
    assert (vector["policy"], vector["n_steps"], vector["gamma"], vector["ent_coef"]) == ("MlpPolicy", 5, 0.995, 1e-5)
    assert vector["learning_rate"](1.0) == pytest.approx(8.3e-4) and vector["learning_rate"](0.0) == 0.0  # decayed
    run = sb3_reference.train("CartPole-v1", 4, 200, seed=1)
    assert run.steps == 200 and run.seconds > 0
    assert 8 <= run.mean100 <= 200  # random play's CartPole games (a few tens of steps each) ended and were counted
    assert sb3_reference.main(["--env-name", "CartPole-v1", "--num-envs", "4", "--steps", "200", "--seeds", "1"]) == 0
    assert (f"SB3 A2C, CartPole-v1, seed 1: mean return of the last 100 episodes after 200 env steps: "
            f"{run.mean100:.2f}") in capsys.readouterr().out  # the same seed learns the same


@pytest.mark.skipif(bench.torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--cuda"])
    assert exc.value.code == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_a_preset_is_judged_against_the_rate_of_its_own_envs():
    preset, envs = bench.PRESET + "fast-cpu", bench.preset_envs(bench.PRESET + "fast-cpu")
    assert envs == "envs only (--preset fast-cpu)"
    results = {t.name: t for t in (trials(OURS_FEEDFORWARD, 400), trials(SB3, 250), trials(preset, 1000),
                                   trials(envs, 1600), trials(bench.ENV_ONLY, 1200))}
    lines = bench.summary_lines(results, [])
    assert "ratio (ours --preset fast-cpu / sb3): 4.00x" in lines
    assert "ratio (ours --preset fast-cpu / ours feed-forward (nature)): 2.50x" in lines
    assert ("ours --preset fast-cpu as a share of the rate of its envs alone (1,600 env steps/s): 62%; "
            "target >= 50%: yes") in lines
    # The shares of the default configurations are of their own envs' rate, without the preset's.
    assert lines[-1] == "training as a share of the env-only rate (1,200 env steps/s): ours feed-forward (nature) 33%"
    results[envs] = trials(envs, 2100)
    assert "target >= 50%: no" in bench.summary_lines(results, [])[-2]


def test_the_network_alone_bounds_what_a_preset_can_reach():
    preset = bench.PRESET + "fast-cpu"
    network = bench.preset_network(preset)
    assert network == "network alone (--preset fast-cpu)"
    results = {t.name: t for t in (trials(preset, 1000), trials(bench.preset_envs(preset), 6000),
                                   trials(network, 1500))}
    # One after the other: 1 / (1/6000 + 1/1500) = 1200 env steps/s, 20% of the envs' rate; 1000 is 83% of it.
    assert bench.summary_lines(results, [])[-1] == (
        "network alone (--preset fast-cpu): 1,500 env steps/s, 25% of its envs' rate; envs then network, one "
        "after the other, allow 1,200 (20% of its envs' rate), and it trained at 83% of that")


def test_one_core_each_bounds_what_any_loop_on_all_the_cores_can_reach():
    preset = bench.PRESET + "fast-cpu"
    envs, network = bench.preset_envs(preset), bench.preset_network(preset)
    results = {t.name: t for t in (trials(preset, 1600), trials(envs, 6000), trials(network, 3000),
                                   trials(envs + bench.ONE_CORE, 4000), trials(network + bench.ONE_CORE, 2000))}
    # An env step costs one core 1/4000 s of envs and 1/2000 s of network: 2 cores do at most
    # 2 / (1/4000 + 1/2000) = 2,667 env steps/s, 44% of 6,000; 1,600 is 60% of it. 50% of 6,000 is
    # 3,000 env steps/s: 2/3000 - 1/4000 = 1/2400 s of network an env step, 2,400 on one core, 1.20x 2,000.
    assert bench.summary_lines(results, [], cores=2)[-1] == (
        "network alone (--preset fast-cpu), one core: 2,000 env steps/s, its envs on one core 4,000: 2 cores, "
        "however the two share them, train at most at 2,667 (44% of its envs' rate; it trained at 60% of that); "
        "50% needs its network alone on one core at 2,400 env steps/s (1.20x)")
    # Envs at 1,200 on one core take 2 cores 1/600 s for every 3,000 env steps: no time is left for a network.
    results[envs + bench.ONE_CORE] = trials(envs + bench.ONE_CORE, 1200)
    assert bench.summary_lines(results, [], cores=2)[-1].endswith(
        "50% is out of reach of any network: its envs alone take that much of the cores' time")
    assert bench.network_needed(0.5, 6000, 1500, 2) == float("inf")  # exactly all of the cores' time
    # With four cores the same rates leave room: 4/3000 - 1/1200 = 1/2000 s, 2,000 on one core.
    assert bench.network_needed(0.5, 6000, 1200, 4) == pytest.approx(2000)


def _where_it_runs(steps: int) -> tuple[int, float]:
    import os

    import torch

    return len(os.sched_getaffinity(0)), torch.get_num_threads()


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="pinning needs Linux")
def test_one_core_pins_the_run_to_one_core_and_one_torch_thread():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
        assert pool.submit(bench.on_one_core, 10, _where_it_runs).result() == (1, 1)


def test_the_preset_in_bfloat16_is_judged_against_the_same_envs():
    preset = bench.PRESET + "fast-cpu"
    bf16 = preset + bench.BF16
    assert bench.preset_envs(bf16) == "envs only (--preset fast-cpu)"
    assert bench.preset_network(bf16) == "network alone (--preset fast-cpu) bf16"
    results = {t.name: t for t in (trials(preset, 1000), trials(bf16, 1250), trials(bench.preset_envs(preset), 5000),
                                   trials(bench.preset_network(bf16), 2500))}
    lines = bench.summary_lines(results, [])
    assert "what --bf16 bought the preset: ours --preset fast-cpu bf16 over ours --preset fast-cpu: 1.25x" in lines
    assert ("ours --preset fast-cpu bf16 as a share of the rate of its envs alone (5,000 env steps/s): 25%; "
            "target >= 50%: no") in lines
    # 1 / (1/5000 + 1/2500) = 1,667 env steps/s; 1,250 is 75% of it.
    assert lines[-1] == ("network alone (--preset fast-cpu) bf16: 2,500 env steps/s, 50% of its envs' rate; envs then "
                         "network, one after the other, allow 1,667 (33% of its envs' rate), and it trained at 75% of that")


def test_still_envs_return_one_reset_and_nothing_else():
    from envs import make_vec_env

    real = make_vec_env("PongNoFrameskip-v4", 2, frame_size=42)
    try:
        still = bench.StillEnvs(real)
    finally:
        real.close()
    assert still.num_envs == 2 and still.observation_space == real.observation_space
    first = still.reset()
    assert first.shape == (2, *real.observation_space.shape) and first.any()  # the frames of a real reset
    obs, rewards, dones, infos = still.step([0, 1])
    assert (obs == first).all() and not rewards.any() and not dones.any() and infos == [{}, {}]


def test_a_preset_trains_what_main_py_trains_with_it():
    import recipes
    from config import get_setting

    config = bench.preset_config("PongNoFrameskip-v4", "fast-cpu", num_envs=2, steps=1000)
    for name, value in recipes.PRESETS["fast-cpu"].items():
        if name != "num_updates":  # the bench sets the run's length
            assert get_setting(config, name) == value
    assert config.num_envs == recipes.PRESETS["fast-cpu"].get("num_envs", 2)
    assert config.num_updates == max(1, 1000 // config.steps_per_update) and not config.tensorboard


def test_a_preset_with_flags_trains_the_preset_with_them_typed_beside_it():
    import recipes

    config = bench.preset_config("PongNoFrameskip-v4", "fast-cpu --hidden-size 128", num_envs=2, steps=1000)
    assert config.hidden_size == 128 and config.frame_size == recipes.PRESETS["fast-cpu"]["frame_size"]
    assert config.num_envs == 2  # --num-envs where neither the preset nor its flags name one
    assert bench.preset_config("PongNoFrameskip-v4", "fast-cpu --num-envs 4", num_envs=2).num_envs == 4
    assert bench.build_parser().parse_args(["--preset", "fast-cpu  --hidden-size 128"]).preset == [
        "fast-cpu --hidden-size 128"]


@pytest.mark.parametrize("spec", ["nope", "", "fast-cpu --hidden-size x", "fast-cpu --bogus", "'fast-cpu"])
def test_a_preset_that_is_not_a_preset_and_flags_of_main_py_is_refused(spec, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--preset", spec, "--steps", "10", "--no-sb3", "--ours", "none"])
    assert exc.value.code == 2
    assert "--preset" in capsys.readouterr().err.splitlines()[-1]


def test_a_tiny_preset_run_measures_it_and_its_envs(capsys):
    assert bench.main(["--steps", "10", "--num-envs", "2", "--repeats", "1", "--warmup-steps", "0", "--no-sb3",
                       "--ours", "none", "--preset", "fast-cpu", "--env-only", "--one-core"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("envs only (--preset fast-cpu), one core ") for line in out)
    assert any(line.startswith("network alone (--preset fast-cpu), one core: ") for line in out)
    assert any(line.startswith("ours --preset fast-cpu ") for line in out)
    assert any(line.startswith("envs only (--preset fast-cpu) ") for line in out)
    assert any(line.startswith("network alone (--preset fast-cpu) ") for line in out)
    assert any(line.startswith("network alone (--preset fast-cpu): ") for line in out)
    # --ours none: no row, nor share, of the default configurations' envs
    assert not any(re.match(bench.ENV_ONLY + r" +\d", line) or line.startswith("training as a share") for line in out)
    assert any(line.startswith("ours --preset fast-cpu as a share of the rate of its envs alone") for line in out)


def test_a_tiny_preset_run_in_bfloat16_measures_it_beside_the_preset(capsys, monkeypatch):
    assert bench.main(["--steps", "10", "--num-envs", "2", "--repeats", "1", "--warmup-steps", "0", "--no-sb3",
                       "--ours", "none", "--preset", "fast-cpu", "--bf16", "--env-only"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("ours --preset fast-cpu bf16 ") for line in out)
    assert any(line.startswith("network alone (--preset fast-cpu) bf16 ") for line in out)
    assert any(line.startswith("what --bf16 bought the preset: ") for line in out)
    # Each trainer runs in a process of its own: what it trains is checked here, in this one.
    seen = []
    monkeypatch.setattr(bench, "train_config", lambda config, *args, **kwargs: seen.append(config) or (0, 1.0))
    for bf16 in (False, True):
        bench.train_ours_preset(10, "PongNoFrameskip-v4", 2, "fast-cpu", bf16=bf16)
    assert [config.speed.bf16 for config in seen] == [False, True]
    assert seen[0] == dataclasses.replace(seen[1], speed=seen[0].speed, log_dir=seen[0].log_dir)  # nothing else
