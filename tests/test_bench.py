"""bench/throughput.py (Atari and vector envs, the env-only rows, presets, the bfloat16 and compiled
twins, SB3's A2C): what each trainer trains, the comparisons computed from the timed runs, the
refusals, and tiny runs end to end."""

from __future__ import annotations

import dataclasses
import tempfile

import pytest

from bench import throughput as bench
from bench.throughput import BF16, COMPILED, DEFAULTS, ENV_ONLY, FEEDFORWARD, GROUPED, PRESET, RECURRENT, SB3, Trials

pytestmark = pytest.mark.usefixtures("torch_single_thread")
PONG = "PongNoFrameskip-v4"


def trials(name: str, rate: float) -> Trials:
    return Trials(name, steps=[int(rate)] * 3, seconds=[1.0, 2.0, 0.5])  # rates rate/2, rate, 2 rate: median rate


def measured(monkeypatch) -> dict:
    """What the next ``bench.main`` measures (without a warm-up round): its results, as handed to the report."""
    monkeypatch.setattr(bench, "WARMUP_STEPS", 0)
    seen: dict = {}
    report = bench.print_report

    def record(results, ablated=()):
        seen.update(results)
        report(results, ablated)

    monkeypatch.setattr(bench, "print_report", record)
    return seen


def test_ablation_rows_each_take_away_one_switch_then_all():
    def changed(config, default) -> set:
        speed = {k for k, v in dataclasses.asdict(config.speed).items() if v != getattr(default.speed, k)}
        return speed | ({"vec_env"} if config.vec_env != default.vec_env else set())

    default = bench.cli_config([], PONG, 2)
    rows = [bench.cli_config(flags, PONG, 2) for flags in bench.ablations(PONG, 2).values()]
    assert [changed(config, default) for config in rows] == [
        {"vec_env"},
        {"channels_last"},
        {"keep_freed_memory"},
        {"keep_graph"},
        {"vec_env", "channels_last", "keep_freed_memory", "keep_graph", "encoder_chunk"},
    ]
    assert all(config == dataclasses.replace(default, vec_env=config.vec_env, speed=config.speed) for config in rows)
    # On dummy envs already, taking the ale path away would train the default itself: no such row.
    assert len(bench.ablations(PONG, 2, ["--vec-env", "dummy"])) == 4


def test_the_configurations_of_ours_and_their_bfloat16_and_compiled_twins():
    configs = {name: bench.cli_config(flags, PONG, 2) for name, flags in bench.ours("both", BF16, COMPILED).items()}
    assert configs[RECURRENT] == bench.cli_config([], PONG, 2)  # main.py's default
    assert configs[FEEDFORWARD].arch == "nature" and not configs[FEEDFORWARD].recurrent
    for name in (RECURRENT, FEEDFORWARD):
        assert not configs[name].speed.bf16 and configs[name + BF16].speed.bf16
        assert not configs[name].speed.compile and configs[name + COMPILED].speed.compile
        # Each twin is its plain row with one lever turned on, the two levers together too.
        for twin, lever in ((BF16, {"bf16"}), (COMPILED, {"compile"}), (BF16 + COMPILED, {"bf16", "compile"})):
            plain, other = dataclasses.asdict(configs[name].speed), dataclasses.asdict(configs[name + twin].speed)
            assert {key for key in plain if plain[key] != other[key]} == lever
            assert configs[name + twin] == dataclasses.replace(configs[name], speed=configs[name + twin].speed)
    assert list(bench.ours("feedforward")) == [FEEDFORWARD] and bench.ours("none") == {}
    assert list(bench.ours("recurrent", COMPILED)) == [RECURRENT, RECURRENT + COMPILED]
    grouped = bench.cli_config(bench.ours("recurrent", GROUPED)[RECURRENT + GROUPED], PONG, 2)
    assert grouped == dataclasses.replace(
        configs[RECURRENT], speed=dataclasses.replace(configs[RECURRENT].speed, env_groups=2)
    )


def test_comparisons_are_ratios_of_the_median_rates():
    preset = PRESET + "fast-cpu"
    results = {
        t.name: t
        for t in (
            trials(RECURRENT, 130),
            trials(FEEDFORWARD, 200),
            trials(FEEDFORWARD + BF16, 250),
            trials(RECURRENT + COMPILED, 156),
            trials(FEEDFORWARD + BF16 + COMPILED, 300),
            trials(SB3, 100),
            trials("recurrent, dummy envs", 65),
            trials(ENV_ONLY, 1000),
            trials(preset, 500),
            trials(bench.preset_envs(preset), 2000),
        )
    }
    assert bench.comparisons(results, ["recurrent, dummy envs"]) == pytest.approx(
        {
            (RECURRENT, SB3): 1.3,
            (FEEDFORWARD, SB3): 2.0,
            (FEEDFORWARD + BF16, SB3): 2.5,
            (RECURRENT + COMPILED, SB3): 1.56,
            (FEEDFORWARD + BF16 + COMPILED, SB3): 3.0,
            (preset, SB3): 5.0,
            (FEEDFORWARD + BF16, FEEDFORWARD): 1.25,  # what --bf16 bought
            (RECURRENT + COMPILED, RECURRENT): 1.2,  # what --compile bought
            (FEEDFORWARD + BF16 + COMPILED, FEEDFORWARD + BF16): 1.2,  # and in bfloat16
            (RECURRENT, "recurrent, dummy envs"): 2.0,  # what the ale path bought
            (preset, FEEDFORWARD): 2.5,
            # Each trainer as a share of its own envs' rate: a preset's envs are its own.
            (RECURRENT, ENV_ONLY): 0.13,
            (FEEDFORWARD, ENV_ONLY): 0.2,
            (FEEDFORWARD + BF16, ENV_ONLY): 0.25,
            (RECURRENT + COMPILED, ENV_ONLY): 0.156,
            (FEEDFORWARD + BF16 + COMPILED, ENV_ONLY): 0.3,
            (preset, bench.preset_envs(preset)): 0.25,
        }
    )
    for twin in (BF16, COMPILED, BF16 + COMPILED):  # a preset's twins step the same envs
        assert bench.preset_envs(preset + twin) == bench.preset_envs(preset)
    # Nothing measured, nothing compared.
    assert bench.comparisons({RECURRENT: trials(RECURRENT, 130)}, []) == {}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--vec-env", "dummy"], "unrecognized arguments: --vec-env dummy"),  # it is --ours-vec-env
        (
            ["--env-name", "CartPole-v1", "--ablation", "--bf16"],
            "--ablation, --bf16: for Atari games; CartPole-v1 trains with its own defaults",
        ),
        (["--env-name", "CartPole-v1", "--ours", "feedforward"], "--ours: for Atari games"),
        (["--env-name", "CartPole-v1", "--compile"], "--compile: for Atari games"),
        (["--env-name", "CartPol-v1"], "unknown env id 'CartPol-v1'"),
        (["--steps", "0"], "argument --steps: expected a positive integer, got '0'"),
    ],
)
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
    assert (
        bench.main(
            [
                "--steps",
                "10",
                "--num-envs",
                "2",
                "--repeats",
                "1",
                "--no-sb3",
                "--ours",
                "feedforward",
                "--bf16",
                "--env-only",
            ]
        )
        == 0
    )
    assert set(results) == {FEEDFORWARD, FEEDFORWARD + BF16, ENV_ONLY}
    assert all(t.steps == [10] and t.seconds[0] > 0 for t in results.values())


def test_a_tiny_vector_env_run_times_ours_sb3_and_the_envs_alone(monkeypatch):
    results = measured(monkeypatch)
    assert (
        bench.main(
            [
                "--env-name",
                "CartPole-v1",
                "--num-envs",
                "4",
                "--steps",
                "200",
                "--repeats",
                "1",
                "--env-only",
                "--threads",
                "1",
            ]
        )
        == 0
    )
    assert set(results) == {DEFAULTS, SB3, ENV_ONLY}
    assert all(t.steps == [200] for t in results.values())  # 10 updates of 4 envs x 5 steps, or 50 vector steps


def test_sb3_trains_the_steps_asked_and_leaves_no_log_folder_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    steps, seconds = bench.train_sb3(10, "PongNoFrameskip-v4", 2)
    assert steps == 10 and seconds > 0  # 2 envs x 5 steps: one update
    assert not list(tmp_path.glob("SB3-*"))


@pytest.mark.parametrize("env_name", ["Pendulum-v1", "PongNoFrameskip-v4"])
def test_the_envs_alone_take_random_actions_of_their_space_for_whole_vector_steps(env_name):
    steps, seconds = bench.train_ours(9, env_name, 2, envs_only=True)  # Box actions, then Discrete ones
    assert steps == 10 and seconds > 0  # 9 env steps of 2 envs: rounded up to 5 vector steps


def test_sb3_trains_with_the_zoos_settings():
    atari = bench.zoo_settings("PongNoFrameskip-v4")
    assert (atari["policy"], atari["learning_rate"], atari["n_steps"], atari["ent_coef"], atari["vf_coef"]) == (
        "CnnPolicy",
        7e-4,
        5,
        0.01,
        0.25,
    )
    vector = bench.zoo_settings("CartPole-v1")
    assert (vector["policy"], vector["n_steps"], vector["gamma"], vector["ent_coef"]) == ("MlpPolicy", 5, 0.995, 1e-5)
    assert vector["learning_rate"](1.0) == pytest.approx(8.3e-4) and vector["learning_rate"](0.0) == 0.0  # decayed
    steps, seconds = bench.train_sb3(200, "CartPole-v1", 4)
    assert steps == 200 and seconds > 0


def test_a_preset_trains_what_main_py_trains_with_it():
    import recipes
    from config import get_setting

    config = bench.cli_config(["--preset", "fast-cpu"], PONG, 2, steps=1000)
    for name, value in recipes.PRESETS["fast-cpu"].items():
        if name != "num_updates":  # the bench sets the run's length
            assert get_setting(config, name) == value
    assert config.num_updates == max(1, 1000 // config.steps_per_update) and not config.tensorboard
    config = bench.cli_config(["--preset", "fast-cpu", "--hidden-size", "128", "--num-envs", "4"], PONG, 2)
    assert config.hidden_size == 128 and config.frame_size == recipes.PRESETS["fast-cpu"]["frame_size"]
    assert config.num_envs == 4  # the flags typed beside the preset win


@pytest.mark.parametrize("spec", ["nope", "", "fast-cpu --hidden-size x", "fast-cpu --bogus", "'fast-cpu"])
def test_a_preset_that_is_not_a_preset_and_flags_of_main_py_is_refused(spec, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--preset", spec, "--steps", "10", "--no-sb3", "--ours", "none"])
    assert exc.value.code == 2
    assert "--preset" in capsys.readouterr().err.splitlines()[-1]


def test_a_tiny_preset_run_times_it_its_bfloat16_twin_and_its_own_envs(monkeypatch):
    results = measured(monkeypatch)
    assert (
        bench.main(
            [
                "--steps",
                "10",
                "--num-envs",
                "2",
                "--repeats",
                "1",
                "--no-sb3",
                "--ours",
                "none",
                "--preset",
                "fast-cpu",
                "--bf16",
                "--env-only",
            ]
        )
        == 0
    )
    preset = PRESET + "fast-cpu"
    assert set(results) == {preset, preset + BF16, bench.preset_envs(preset)}  # --ours none: no default envs


def test_a_compiled_twin_trains_its_network_compiled_as_main_py_does(monkeypatch):
    compiled = []
    monkeypatch.setattr(bench, "compile_network", lambda model: compiled.append(model) or model)
    flags = bench.ours("feedforward", COMPILED)
    assert bench.train_ours(10, PONG, 2, flags[FEEDFORWARD])[0] == 10 and not compiled
    assert bench.train_ours(10, PONG, 2, flags[FEEDFORWARD + COMPILED])[0] == 10 and len(compiled) == 1
    # Three updates of 10 env steps compiled: the first, which compiles, is left out of the timed steps.
    assert bench.train_ours(30, PONG, 2, flags[FEEDFORWARD + COMPILED])[0] == 20 and len(compiled) == 2
    assert bench.train_ours(30, PONG, 2, flags[FEEDFORWARD])[0] == 30


def test_a_grouped_twin_trains_with_its_steps_overlapped(monkeypatch):
    from overlap import OverlappedRolloutCollector

    collected = []
    monkeypatch.setattr(OverlappedRolloutCollector, "collect_steps", lambda self, runner: collected.append(runner.envs))
    monkeypatch.setattr(bench.Runner, "learn", lambda self, batch: {"skipped": True})  # the rollout is all it needs
    assert bench.train_ours(20, PONG, 4, bench.ours("feedforward", GROUPED)[FEEDFORWARD + GROUPED])[0] == 0
    assert len(collected) == 1 and len(collected[0].groups) == 2  # two groups of two games
