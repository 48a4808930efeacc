"""One rank of a torchrun job in tests/test_distributed.py: ``main.main`` as ``main.py`` runs it,
recording what the tests read of this rank into OUT_DIR.

    PYTHONPATH=REPO torchrun ... tests/torchrun_worker.py OUT_DIR MAIN_FLAGS...

Writes ``rank<R>.json`` (this rank's pid when it starts; then also the env seeds it built its envs
with, the games that ended on its own envs, the loss of its own shard at each update and its
exit code) and ``rank<R>.pt`` (its weights, optimizer state, counters and the stats of each
update when training ended).
"""

from __future__ import annotations

import json
import os
import sys


def main(out_dir: str, argv: list[str]) -> int:
    import torch

    import envs
    import main as cli
    import runner

    rank = int(os.environ["RANK"])
    record: dict = {"pid": os.getpid(), "env_seeds": [], "own_games": 0, "own_losses": []}
    path = os.path.join(out_dir, f"rank{rank}.json")

    def write() -> None:
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)

    write()
    make_vec_env, note, learn, train = (
        envs.make_vec_env,
        runner.Runner._note_step,
        runner.Runner.learn,
        runner.Runner.train,
    )

    def recording_make_vec_env(env_name, num_envs, n_stack=4, seed=0, *args, **kwargs):
        record["env_seeds"] += [seed + i for i in range(num_envs)]
        return make_vec_env(env_name, num_envs, n_stack, seed, *args, **kwargs)

    def recording_note(self, infos, t, playing):
        record["own_games"] += sum("episode" in info for info, plays in zip(infos, playing) if plays)
        return note(self, infos, t, playing)

    def recording_learn(self, batch):
        stats = learn(self, batch)
        record["own_losses"].append(stats["total"])  # this rank's shard's, before the ranks' mean
        return stats

    def recording_train(self):
        state = train(self)
        torch.save(
            {
                "model": self.agent.model.state_dict(),
                "optimizer": self.agent.optimizer.state_dict(),
                "update": state.update,
                "step": state.step,
                "episode_count": state.episodes.count,
                "history": list(self.history),
            },
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
        return state

    envs.make_vec_env, runner.Runner._note_step, runner.Runner.learn, runner.Runner.train = (
        recording_make_vec_env,
        recording_note,
        recording_learn,
        recording_train,
    )
    code = cli.main(argv)
    record["exit_code"] = code
    write()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
