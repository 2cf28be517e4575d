"""Command line: ``python -m trainer COMMAND ...``, one entry of ``COMMANDS`` per subcommand
(name, help, arguments, handler). Kept thin on purpose: each handler hands its arguments to the
library; ``bench`` parses its own (``trainer/bench/cli.py``)."""

from __future__ import annotations

from trainer import command_line_environment

# The command line's own settings, made before anything imports TensorFlow (importing the
# ``trainer`` package changes no environment).
command_line_environment()

import argparse  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

from trainer import import_tensorflow_quietly  # noqa: E402
from trainer.analysis import ANALYSES  # noqa: E402
from trainer.bench.cli import ACTIONS as BENCH_ACTIONS, parse_args as bench_args  # noqa: E402
from trainer.config import ConfigError  # noqa: E402
from trainer.faults import report  # noqa: E402
from trainer.rundir import SUMMARY_MD  # noqa: E402
from trainer.train import command as train_command  # noqa: E402


@dataclass(frozen=True)
class Command:
    """One subcommand: ``arguments(parser)`` declares its arguments, ``run(args)`` carries them
    out (returns the exit code, None for 0; raises a ``ProjectError`` to fail in one line)."""
    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int | None]
    mute_tf: bool = True  # import TensorFlow quietly first (the command imports it somewhere)


def _train(args) -> int:
    return train_command.train(args, [sys.argv[0], *args.argv])  # as typed


def _sweep_arguments(p) -> None:
    p.add_argument("--config", metavar="SPEC", help="sweep spec YAML (configs/sweeps/*.yaml); "
                   "or give it as the first positional argument")
    p.add_argument("--out", help="results directory (default: results/<sweep name>)")
    p.add_argument("--parallel", type=int, default=1, help="variants run at once (local)")
    p.add_argument("--launcher", choices=("local", "submitit", "submitit-local"),
                   default="local", help="local processes, or submitit jobs (SLURM)")
    p.add_argument("--no-wait", action="store_true",
                   help="leave variants another process is running to it (no table yet)")
    p.add_argument("--wait-limit", type=float, default=24 * 3600, metavar="SECONDS",
                   help="longest wait for variants running elsewhere (default: 24 h)")
    p.add_argument("--no-reuse", action="store_true",
                   help="one process per variant (default: --parallel worker processes "
                   "that run variants in turn, starting Python and TensorFlow once each)")
    p.add_argument("--edge-rule", action="store_true",
                   help="a learning-rate sweep: after the grid, extend each variant's rates by "
                   "x/÷ 3.16 until its best rate is not at an open edge (trainer/edge_rule.py)")
    p.add_argument("overrides", nargs="*", metavar="[SPEC] key=value",
                   help="the sweep spec (when not --config), then dotted overrides applied to "
                   "every variant")


def sweep_spec(config: str | None, overrides: list[str]) -> tuple[str, list[str]]:
    """The sweep spec and the overrides: ``--config SPEC``, or SPEC as the first positional
    argument (an override always has '=', a spec path never needs one)."""
    if config is None and overrides and "=" not in overrides[0]:
        config, overrides = overrides[0], overrides[1:]
    if config is None:
        raise ConfigError("sweep needs a spec: python -m trainer sweep configs/sweeps/NAME.yaml "
                          "(or --config SPEC)")
    return config, overrides


def _sweep(args) -> None:
    from trainer.sweep import run_sweep

    args.config, args.overrides = sweep_spec(args.config, args.overrides)
    root = run_sweep(args.config, args.out, args.parallel, args.overrides, args.launcher,
                     wait=not args.no_wait, wait_limit_s=args.wait_limit,
                     reuse=not args.no_reuse, edge_rule=args.edge_rule)
    print((root / SUMMARY_MD).read_text())


def _worker(args) -> int:
    from trainer.launch import serve_worker

    return serve_worker(args.result_fd)


def _results_dir(path: str) -> Path:
    if not Path(path).is_dir():
        raise ConfigError(f"results directory not found: {Path(path)}")
    return Path(path)


def _summarize(args) -> None:
    from trainer.faults import writing
    from trainer.results.summarize import summarize

    root = _results_dir(args.results_dir)
    with writing("tables", root):
        summarize(root)
    print((root / SUMMARY_MD).read_text())


def _reproduce_arguments(p) -> None:
    p.add_argument("run_dir", type=Path,
                   help="a run directory, or a results directory holding runs")
    p.add_argument("--out", help="where reruns go (default: runs/reproduce/<name>)")
    p.add_argument("--reuse", action="store_true",
                   help="compare against the reproduction in --out (its code version checked)")
    p.add_argument("--strict", action="store_true", help="demand bit-identity on any machine")
    p.add_argument("--sample", type=int,
                   help="results directory: rerun N runs drawn at random (default all)")
    p.add_argument("--seed", type=int, help="results directory: seed of the --sample draw")
    p.add_argument("--parallel", type=int, help="results directory: reruns at once (default 1)")


def _reproduce(args) -> int:
    from trainer import compile_cache

    compile_cache.enable()  # before TensorFlow starts XLA
    import_tensorflow_quietly()
    from trainer.reproduce import reproduce_path

    return reproduce_path(args.run_dir, args.out, args.sample, args.seed, args.parallel,
                          args.reuse, args.strict)


def _findings(args) -> int:
    from trainer.findings.page import main as findings_main

    _results_dir(args.results_dir)
    return findings_main([args.results_dir])


def _extra_seeds_arguments(p) -> None:
    from trainer.findings.extra import add_arguments

    add_arguments(p)


def _extra_seeds(args) -> int:
    from trainer.findings.extra import run
    from trainer.findings.page import SCALE_CLAIMS, all_claims

    return run(args, all_claims() + SCALE_CLAIMS)


def _analyze(args) -> int:
    import importlib

    if args.kind not in ANALYSES:
        raise ConfigError(f"unknown analysis '{args.kind}'; valid: {', '.join(ANALYSES)}")
    return importlib.import_module(ANALYSES[args.kind]).main(args.args)


def _generate_arguments(p) -> None:
    from trainer.generate import add_arguments

    add_arguments(p)


def _generate(args) -> int:
    from trainer.generate import main

    return main(args)


def _tensorboard_arguments(p) -> None:
    p.add_argument("logdir", nargs="?", default="results", help="default: results/")
    p.add_argument("--port", type=int, default=6006, help="0: any free port")
    p.add_argument("--host", default="localhost", help="0.0.0.0 to serve other machines")


def _tensorboard(args) -> int:
    from trainer.telemetry.tensorboard import serve

    return serve(Path(args.logdir), args.port, args.host)


def _evaluate_norm_arguments(p) -> None:
    from trainer.evaluate import add_arguments
    add_arguments(p)


def _evaluate_norm(args) -> int:
    from trainer.evaluate import main
    return main(args)


def _bench(args) -> int:
    from trainer.bench.cli import run

    return run(args)


COMMANDS = {c.name: c for c in (
    Command("train", "train one variant into a run directory", train_command.add_arguments,
            _train, mute_tf=False),  # it reads the config before TensorFlow starts
    # The spec and every variant's config are checked before TensorFlow loads (run_sweep).
    Command("sweep", "run every variant of a sweep grid", _sweep_arguments, _sweep,
            mute_tf=False),
    Command("worker", "run train commands read from stdin, one JSON list of arguments per "
            "line, each in a forked child (sweep's workers)",
            lambda p: p.add_argument("result_fd", type=int,
                                     help="file descriptor the exit codes go to"), _worker),
    # trainer.results imports no TensorFlow (tests/test_imports.py), but TensorBoard's event
    # reader does when it is installed: muted, or its CUDA probe would print on every summarize.
    Command("summarize", "tables and plots from a results directory",
            lambda p: p.add_argument("results_dir"), _summarize),
    Command("reproduce", "rerun a run (or a results directory's runs) from the saved config "
            "and compare", _reproduce_arguments, _reproduce, mute_tf=False),
    Command("findings", "measure the claims on reference results -> README",
            lambda p: p.add_argument("results_dir", nargs="?", default="results/reference"),
            _findings),
    Command("extra-seeds", "extra seeds (pre-registration 2's rule) for a setting's underpowered "
            "parts (runs them)", _extra_seeds_arguments, _extra_seeds),
    Command("analyze", "an analysis over models or checkpoints; KIND --help for more",
            lambda p: (p.add_argument("kind", metavar="KIND", help=", ".join(ANALYSES)),
                       p.add_argument("args", nargs=argparse.REMAINDER,
                                      help="the analysis' own arguments")), _analyze),
    Command("generate", "continue prompts with a trained run (KV cache, continuous batching)",
            _generate_arguments, _generate),
    Command("evaluate-norm", "the lab's protocol for one norm (yours: PATH.py:Class): contract "
            "properties, rate grid, seeds, test split, against the baselines -> report.md",
            _evaluate_norm_arguments, _evaluate_norm),
    Command("tensorboard", "start TensorBoard on a results or run directory",
            _tensorboard_arguments, _tensorboard),
    # Listed here for --help; ``bench ...`` is parsed by trainer/bench/cli.py (see main).
    Command("bench", f"performance report as JSON; `bench {'|'.join(BENCH_ACTIONS)}` "
            "(bench --help)", lambda p: None, _bench),
)}


def parser() -> argparse.ArgumentParser:
    """The command line's parser: one subparser per entry of ``COMMANDS``."""
    p = argparse.ArgumentParser(prog="python -m trainer",
                                description="Normalization and residual ablation lab.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        command.arguments(sub.add_parser(command.name, help=command.help))
    return p


def _parse(p: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``p.parse_args``, except that overrides may also follow options (``sweep SPEC
    --parallel 2 train.steps=20``): argparse takes a positional list only where it starts."""
    args, rest = p.parse_known_args(argv)
    if rest and isinstance(getattr(args, "overrides", None), list) and not any(
            r.startswith("-") for r in rest):
        args.overrides += rest  # in the order typed: the later override wins
    elif rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # its own parser: subcommands beside positional overrides
        args = bench_args(argv[1:])
    else:
        args = _parse(parser(), argv)
    args.argv = argv
    command = COMMANDS[args.command]

    def run() -> int | None:
        if command.mute_tf:
            import_tensorflow_quietly()
        return command.run(args)

    return report(run)


if __name__ == "__main__":
    sys.exit(main())
