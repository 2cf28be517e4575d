"""The command line's help lists what it can do: every subcommand of the table, every analysis,
every ``bench`` subcommand (read from the help a user sees, compared with what runs)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.__main__ import COMMANDS, parser
from trainer.analysis import ANALYSES
from trainer.bench.cli import ACTIONS, parse_args as bench_args

REPO = Path(__file__).resolve().parents[1]


def _help(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "trainer", *args, "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_help_lists_every_subcommand():
    text = _help()
    section = text.split("positional arguments:")[1].split("options:")[0]
    listed = re.findall(r"^ {4}([\w-]+)", section, flags=re.M)
    subparsers = next(a for a in parser()._actions if a.dest == "command").choices
    assert listed == list(COMMANDS) == list(subparsers)
    assert {"train", "sweep", "worker", "summarize", "reproduce", "findings", "analyze",
            "tensorboard", "bench"} <= set(listed)


def test_every_subcommand_has_a_small_handler_and_its_own_help():
    for name, command in COMMANDS.items():
        assert command.help and callable(command.run), name
        if name != "bench":  # bench's own parser answers its --help (below)
            with pytest.raises(SystemExit) as done:
                parser().parse_args([name, "--help"])
            assert done.value.code == 0


def test_analyze_help_lists_every_analysis():
    text = " ".join(_help("analyze").split())  # argparse wraps the list
    kinds = re.search(r"arguments: KIND (.+?) args ", text).group(1)
    assert [k.strip() for k in kinds.split(",")] == list(ANALYSES)
    assert len(ANALYSES) == 9


def test_bench_help_lists_every_bench_subcommand_and_each_parses():
    text = " ".join(_help("bench").split())  # argparse wraps the description
    listed = re.search(r"`bench ([\w|]+) --help`", text).group(1).split("|")
    assert listed == list(ACTIONS) and "sweep" in listed
    for action in ACTIONS:
        with pytest.raises(SystemExit) as done:
            bench_args([action, "--help"])
        assert done.value.code == 0
    assert all(a in COMMANDS["bench"].help for a in ACTIONS)  # the top-level help line too


@pytest.mark.parametrize("argv,spec,overrides", [
    (["sweep", "S.yaml"], "S.yaml", []),
    (["sweep", "--config", "S.yaml", "a=1"], "S.yaml", ["a=1"]),
    (["sweep", "S.yaml", "--parallel", "2", "a=1", "b=2"], "S.yaml", ["a=1", "b=2"]),
    (["sweep", "--parallel", "2", "S.yaml", "a=1", "--no-reuse", "b=2"], "S.yaml", ["a=1", "b=2"]),
])
def test_sweep_spec_positional_or_config_and_overrides_around_options(argv, spec, overrides):
    from trainer.__main__ import _parse, sweep_spec

    args = _parse(parser(), argv)
    assert sweep_spec(args.config, args.overrides) == (spec, overrides)


def test_train_overrides_after_an_option_keep_their_order():
    from trainer.__main__ import _parse

    args = _parse(parser(), ["train", "a=1", "--workdir", "w", "a=2"])
    assert args.overrides == ["a=1", "a=2"] and args.workdir == "w"


@pytest.mark.parametrize("args,fragment", [
    (["sweep", "nope.yaml"], "nope.yaml: cannot read sweep spec"),
    (["sweep", "--config", "nope.yaml"], "nope.yaml: cannot read sweep spec"),
    (["sweep"], "sweep needs a spec"),
    (["sweep", "configs/sweeps/quick.yaml", "--parallel", "2", "model.nrom=x"],
     "did you mean 'model.norm'?"),
    (["sweep", "configs/sweeps/quick.yaml", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_sweep_input_errors_are_one_line_before_tensorflow_loads(args, fragment):
    """What makes a bad sweep fail in a second: nothing imports TensorFlow before the spec
    and every variant's config are checked (a fresh process, so nothing imported it before)."""
    code = ("import sys; from trainer.__main__ import main\n"
            "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
            "print('tensorflow' in sys.modules, 'keras' in sys.modules, rc)")
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.split() == ["False", "False", "2"], proc.stdout + proc.stderr
    assert fragment in proc.stderr.splitlines()[-1], proc.stderr
    if "--bogus" not in args:  # argparse's own errors come with its usage line
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error:"), proc.stderr
