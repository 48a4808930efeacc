"""--env-groups (overlap.py, ale_vec_env.EnvGroups): the games in groups play what one vector env of them
plays with the same actions, and a run that overlaps their steps with the network learns what the serial
loop learns."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from tiny_run import TINY

import agent as agent_module
import main as cli
from ale_vec_env import AleVecEnv, EnvGroups
from envs import make_vec_env

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def same_infos(expected: list[dict], got: list[dict]) -> bool:
    """The infos of one step agree: the same keys, arrays equal, episodes equal but for their wall time."""
    for a, b in zip(expected, got, strict=True):
        if a.keys() != b.keys():
            return False
        for key, value in a.items():
            if key == "episode":
                value, other = {**value, "t": 0}, {**b[key], "t": 0}
            else:
                other = b[key]
            if not np.array_equal(value, other):
                return False
    return True


def test_groups_play_the_games_of_one_vector_env_with_the_same_actions():
    # Sticky actions, no-op starts, lost lives and a time limit: every source of randomness and every kind of end.
    settings = dict(max_episode_frames=400, repeat_action_probability=0.25, noop_max=30, frame_size=42)
    one = AleVecEnv("BreakoutNoFrameskip-v4", 4, seed=7, **settings)
    groups = EnvGroups(lambda n, first: AleVecEnv("BreakoutNoFrameskip-v4", n, seed=7 + first, **settings), 4, 2)
    actions = np.random.default_rng(0).integers(4, size=(300, 4))
    try:
        assert np.array_equal(one.reset(), groups.reset())
        ends = 0
        for step in actions:
            expected = one.step(step)
            for g, part in enumerate(groups.slices):  # as the overlapped collector steps them
                groups.send(g, step[part])
            got = groups.receive()
            for a, b in zip(expected[:3], got[:3]):
                assert np.array_equal(a, b)
            assert same_infos(expected[3], got[3])
            ends += int(expected[2].sum())
        assert ends > 4  # the comparison went through episode ends
    finally:
        one.close()
        groups.close()


def test_make_vec_env_builds_the_groups_and_refuses_what_it_cannot_split():
    from utils import UsageError

    envs = make_vec_env("PongNoFrameskip-v4", 4, seed=1, groups=2, frame_size=42)
    try:
        assert isinstance(envs, EnvGroups) and envs.num_envs == 4 and envs.reset().shape == (4, 4, 42, 42)
    finally:
        envs.close()
    for kwargs, message in (
        (dict(env_name="PongNoFrameskip-v4", num_envs=4, groups=3), "--env-groups 3 must divide --num-envs 4"),
        (dict(env_name="PongNoFrameskip-v4", num_envs=4, groups=2, vec_env="dummy"), "not --vec-env dummy"),
        (dict(env_name="CartPole-v1", num_envs=4, groups=2), "not CartPole-v1's"),
    ):
        with pytest.raises(UsageError, match=message):
            make_vec_env(**kwargs)


def test_a_run_with_its_steps_overlapped_learns_from_the_rollouts_of_the_serial_loop(tmp_path, monkeypatch):
    # Actions that depend only on each env's own logits (the most probable one), so both loops take the
    # same actions whatever batches the network sees. The network acting on two halves of the batch
    # rounds floats differently from one pass over all of it; everything else is exact.
    import runner as runner_module

    monkeypatch.setattr(agent_module.Agent, "sample", lambda self, dist, logits: logits.argmax(-1))
    learn = runner_module.Runner.learn
    fields = ("obs", "episode_starts", "actions", "returns", "advantages", "values", "log_probs")
    batches: dict[str, list] = {"1": [], "2": []}

    def keep(seen: list, batch) -> None:  # a copy: the batch's fields are the storage's, refilled by the next rollout
        seen.append({name: getattr(batch, name).detach().clone() for name in fields})

    weights = {}
    for groups in batches:
        monkeypatch.setattr(
            runner_module.Runner,
            "learn",
            lambda self, batch, seen=batches[groups]: keep(seen, batch) or learn(self, batch),
        )
        log_dir = tmp_path / groups
        flags = [*TINY, "--num-envs", "4", "--num-updates", "4", "--frame-size", "42", "--max-episode-frames", "48"]
        assert cli.main([*flags, "--env-groups", groups, "--log-dir", str(log_dir)]) == 0
        (run,) = os.listdir(log_dir)
        weights[groups] = torch.load(log_dir / run / "a2c_last", weights_only=True)["model"]
    assert len(batches["1"]) == len(batches["2"]) == 4
    for serial, overlapped in zip(batches["1"], batches["2"]):
        for name in fields[:3]:
            assert torch.equal(serial[name], overlapped[name]), name
        for name in fields[3:]:
            torch.testing.assert_close(overlapped[name], serial[name], rtol=1e-4, atol=1e-5)
    assert any(batch["episode_starts"][1:].any() for batch in batches["1"])  # episodes ended inside the rollouts
    for name, value in weights["1"].items():
        torch.testing.assert_close(weights["2"][name], value, rtol=1e-3, atol=1e-5, msg=name)


def test_env_groups_for_another_collector_are_refused_in_one_line(tmp_path, capsys):
    code = cli.main(["--env-name", "CartPole-v1", "--algo", "grpo", "--env-groups", "2", "--log-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--env-groups overlaps the steps of rollouts; --algo grpo" in err and err.count("\n") == 1
    assert os.listdir(tmp_path) == []
