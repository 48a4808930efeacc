"""bench/side_by_side.py: how its two runs are told apart and built."""
from __future__ import annotations

import argparse

import pytest

from bench import side_by_side as bench


def test_a_variant_is_a_name_and_the_flags_that_set_it_apart():
    assert bench.parse_variant("bf16=--bf16") == ("bf16", ["--bf16"])
    assert bench.parse_variant("ale=--vec-env ale") == ("ale", ["--vec-env", "ale"])
    assert bench.parse_variant("float32=") == ("float32", [])
    for bad in ("bf16", "=--bf16", "../x=--bf16"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_variant(bad)


def test_the_runs_share_everything_but_their_variant_flags():
    args = argparse.Namespace(env_name="BreakoutNoFrameskip-v4", seed=7, log_dir="out",
                              flags="--arch nature --no-recurrent")
    plain = bench.run_command("float32", [], args)
    fast = bench.run_command("bf16", ["--bf16"], args)
    assert plain[1].endswith("main.py")
    # One torch thread each, so that they share the machine evenly; each in a directory of its own.
    for command, name in ((plain, "float32"), (fast, "bf16")):
        assert command[command.index("--threads") + 1] == "1"
        assert command[command.index("--log-dir") + 1].endswith(name)
        assert command[-3 if name == "float32" else -4:][:3] == ["--arch", "nature", "--no-recurrent"]
    differ = [a for a, b in zip(plain, fast) if a != b]
    assert differ == ["out/float32"] and fast[len(plain):] == ["--bf16"]


@pytest.mark.parametrize("argv", [["--variants", "a=--bf16", "a="], ["--variants", "oops", "b="]])
def test_refuses_bad_variants(argv):
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
