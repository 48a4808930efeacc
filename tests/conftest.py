"""Shared pytest setup (pytest.ini's ``pythonpath = .`` makes the project and ``bench`` importable)."""

import os

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` need a GPU: skipped on a machine without CUDA (CI has none)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def device_named(request, monkeypatch):
    """Every test that trains or evaluates through ``main`` names its device (``--no-cuda`` or
    ``--cuda``): left to the default, a test would move to the GPU on a machine that has one, where
    its thresholds, tuned on the CPU's random stream, do not hold. Tests of the default itself
    are marked ``device_default``."""
    if "device_default" in request.keywords:
        yield
        return
    import devices

    choose = devices.choose_device

    def named_only(want_cuda, cuda_by_default, **kwargs):
        assert want_cuda is not None, "this test trains or evaluates without naming its device (--no-cuda)"
        return choose(want_cuda, cuda_by_default, **kwargs)

    monkeypatch.setattr(devices, "choose_device", named_only)
    yield


@pytest.fixture(scope="module")
def torch_single_thread():
    """Run a module's tiny-tensor tests on one intra-op thread (restored afterwards).

    On a small, busy CPU, torch's thread pool makes tiny convs/QRs ~100x slower than one thread.
    Opt in with ``pytestmark = pytest.mark.usefixtures("torch_single_thread")``.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def torch_threads_restored():
    """A test that runs ``main`` in-process with ``--threads N`` leaves torch's thread count as it found it."""
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def one_line_error(capsys):
    """``one_line_error(argv)`` runs ``main`` in-process and returns its error line.

    It checks that the run exits with code 2 and prints exactly one ``error: ...`` line on
    stderr, with no traceback.
    """
    import main

    def run(argv: list[str]) -> str:
        if "--cuda" not in argv and "--no-cuda" not in argv:
            argv = ["--no-cuda", *argv]  # bad input is refused on any device; these tests name the CPU
        try:
            code = main.main(argv)
        except SystemExit as exc:  # argparse's own checks
            code = exc.code
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        errors = [line for line in err if line.startswith("error: ")]
        assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
        return errors[0]

    return run


@pytest.fixture
def make_runner():
    """``make_runner(config, run_dir, **runner_kwargs)``: a :class:`runner.Runner` on real envs,
    built as ``main.train`` builds it (seeded from the config); its envs are closed at teardown."""
    import seeds
    from algorithms import make_agent
    from envs import action_size, make_vec_env
    from runner import Runner

    made = []

    def build(config, run_dir, **runner_kwargs) -> Runner:
        seeds.seed_everything(config.seed)
        envs = make_vec_env(
            config.env_name, config.num_envs, config.n_stack, config.seed, config.vec_env, config.max_episode_frames
        )
        made.append(envs)
        num_actions, continuous = action_size(envs.action_space)
        agent = make_agent(config, envs.observation_space.shape, num_actions, continuous=continuous)
        os.makedirs(run_dir, exist_ok=True)
        return Runner(agent, envs, config, str(run_dir), **runner_kwargs)

    yield build
    for envs in made:
        envs.close()
