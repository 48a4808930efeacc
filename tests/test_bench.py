"""bench/throughput.py (Atari and vector envs, the env-only rows, presets) and bench/sb3_reference.py (the
one SB3 training loop): what each trainer trains, the comparisons computed from the timed runs, the
refusals, and tiny runs end to end."""
from __future__ import annotations

import dataclasses
import tempfile

import pytest

from bench import throughput as bench
from bench.throughput import BF16, ENV_ONLY, OURS_DEFAULTS, OURS_FEEDFORWARD, OURS_RECURRENT, PRESET, SB3, Trials

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def trials(name: str, rate: float) -> Trials:
    return Trials(name, steps=[int(rate)] * 3, seconds=[1.0, 2.0, 0.5])  # rates rate/2, rate, 2 rate: median rate


def measured(monkeypatch) -> dict:
    """What the next ``bench.main`` measures: its results, as handed to the summary."""
    seen: dict = {}
    summary = bench.summary_lines

    def record(results, ablations):
        seen.update(results)
        return summary(results, ablations)

    monkeypatch.setattr(bench, "summary_lines", record)
    return seen


def test_ablation_rows_each_take_away_one_switch_then_all():
    default = bench.default_setup("ale")
    rows = bench.ablation_setups("ale")
    changed = [{k for k in setup if setup[k] != default[k]} for setup in rows.values()]
    assert changed == [{"vec_env"}, {"channels_last"}, {"keep_freed"}, {"keep_graph"},
                       {"vec_env", "channels_last", "keep_freed", "encoder_passes", "keep_graph"}]
    # On dummy envs already, taking the ale path away would leave the default itself: no such row.
    assert [setup for setup in bench.ablation_setups("dummy").values() if setup == bench.default_setup("dummy")] == []
    assert len(bench.ablation_setups("dummy")) == 4


def test_the_configurations_of_ours_and_their_bfloat16_twins():
    setups = bench.ours_setups("both", "ale", bf16=True)
    assert setups[OURS_RECURRENT] == bench.default_setup("ale") and setups[OURS_RECURRENT]["recurrent"]
    assert setups[OURS_FEEDFORWARD] == {**bench.default_setup("ale"), "arch": "nature", "recurrent": False}
    for name in (OURS_RECURRENT, OURS_FEEDFORWARD):
        assert not setups[name]["bf16"] and setups[name + BF16] == {**setups[name], "bf16": True}
    assert list(bench.ours_setups("feedforward", "ale")) == [OURS_FEEDFORWARD]
    assert bench.ours_setups("none", "ale") == {}


def test_comparisons_are_ratios_of_the_median_rates():
    preset = PRESET + "fast-cpu"
    results = {t.name: t for t in (trials(OURS_RECURRENT, 130), trials(OURS_FEEDFORWARD, 200),
                                   trials(OURS_FEEDFORWARD + BF16, 250), trials(SB3, 100),
                                   trials("recurrent, dummy envs", 65), trials(ENV_ONLY, 1000),
                                   trials(preset, 500), trials(bench.preset_envs(preset), 2000))}
    assert bench.comparisons(results, ["recurrent, dummy envs"]) == pytest.approx({
        (OURS_RECURRENT, SB3): 1.3, (OURS_FEEDFORWARD, SB3): 2.0, (OURS_FEEDFORWARD + BF16, SB3): 2.5,
        (preset, SB3): 5.0,
        (OURS_FEEDFORWARD + BF16, OURS_FEEDFORWARD): 1.25,  # what --bf16 bought
        (OURS_RECURRENT, "recurrent, dummy envs"): 2.0,  # what the ale path bought
        (preset, OURS_FEEDFORWARD): 2.5,
        # Each trainer as a share of its own envs' rate: a preset's envs are its own.
        (OURS_RECURRENT, ENV_ONLY): 0.13, (OURS_FEEDFORWARD, ENV_ONLY): 0.2, (OURS_FEEDFORWARD + BF16, ENV_ONLY): 0.25,
        (preset, bench.preset_envs(preset)): 0.25})
    assert bench.preset_envs(preset + BF16) == bench.preset_envs(preset)  # the bfloat16 twin steps the same envs
    # Nothing measured, nothing compared.
    assert bench.comparisons({OURS_RECURRENT: trials(OURS_RECURRENT, 130)}, []) == {}


@pytest.mark.parametrize("argv, message", [
    (["--vec-env", "dummy"], "unrecognized arguments: --vec-env dummy"),  # it is --ours-vec-env
    (["--sb3-vec-env", "ale"], "argument --sb3-vec-env: invalid choice: 'ale'"),  # SB3 has no ale path
    (["--env-name", "CartPole-v1", "--ablation", "--bf16"],
     "--ablation, --bf16: for Atari games; CartPole-v1 trains with its own defaults"),
    (["--env-name", "CartPole-v1", "--ours", "feedforward"], "--ours: for Atari games"),
    (["--env-name", "CartPol-v1"], "unknown env id 'CartPol-v1'"),
    (["--steps", "0"], "argument --steps: expected a positive integer, got '0'"),
])
def test_refuses_bad_flags(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(bench.torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--cuda"])
    assert exc.value.code == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_a_tiny_run_times_each_trainer_asked_for_the_same_env_steps(monkeypatch):
    results = measured(monkeypatch)
    assert bench.main(["--steps", "10", "--num-envs", "2", "--repeats", "1", "--warmup-steps", "0", "--no-sb3",
                       "--ours", "feedforward", "--bf16", "--env-only"]) == 0
    assert set(results) == {OURS_FEEDFORWARD, OURS_FEEDFORWARD + BF16, ENV_ONLY}
    assert all(t.steps == [10] and t.seconds[0] > 0 and t.peak_rss_kib[0] > 0 for t in results.values())


def test_a_tiny_vector_env_run_times_ours_sb3_and_the_envs_alone(monkeypatch):
    results = measured(monkeypatch)
    assert bench.main(["--env-name", "CartPole-v1", "--num-envs", "4", "--steps", "200", "--repeats", "1",
                       "--warmup-steps", "0", "--env-only", "--threads", "1"]) == 0
    assert set(results) == {OURS_DEFAULTS, SB3, ENV_ONLY}
    assert all(t.steps == [200] for t in results.values())  # 10 updates of 4 envs x 5 steps, or 50 vector steps


def test_sb3_trains_the_steps_asked_and_leaves_no_log_folder_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    steps, seconds = bench.train_sb3(10, "PongNoFrameskip-v4", 2, "dummy")
    assert steps == 10 and seconds > 0  # 2 envs x 5 steps: one update
    assert not list(tmp_path.glob("SB3-*"))


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
    assert f"{run.mean100:.2f}" in capsys.readouterr().out  # the same seed learns the same


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


def test_a_tiny_preset_run_times_it_its_bfloat16_twin_and_its_own_envs(monkeypatch):
    results = measured(monkeypatch)
    assert bench.main(["--steps", "10", "--num-envs", "2", "--repeats", "1", "--warmup-steps", "0", "--no-sb3",
                       "--ours", "none", "--preset", "fast-cpu", "--bf16", "--env-only"]) == 0
    preset = PRESET + "fast-cpu"
    assert set(results) == {preset, preset + BF16, bench.preset_envs(preset)}  # --ours none: no default envs
    # Each trainer runs in a process of its own: what it trains is checked here, in this one.
    seen = []
    monkeypatch.setattr(bench, "train_config", lambda config, *args, **kwargs: seen.append(config) or (0, 1.0))
    for bf16 in (False, True):
        bench.train_ours_preset(10, "PongNoFrameskip-v4", 2, "fast-cpu", bf16=bf16)
    assert [config.speed.bf16 for config in seen] == [False, True]
    assert seen[0] == dataclasses.replace(seen[1], speed=seen[0].speed, log_dir=seen[0].log_dir)  # nothing else
