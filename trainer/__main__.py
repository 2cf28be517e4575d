"""Command line: ``python -m trainer {train,sweep,summarize,findings,analyze,reproduce,bench,tensorboard}``
(kept thin on purpose)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer import import_tensorflow_quietly
from trainer.config import ConfigError
from trainer.faults import EXIT_BUSY, EXIT_IO, EXIT_STOPPED, RunIOError, Stopped, writing


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainer",
                                description="Normalization and residual ablation lab.")
    sub = p.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train one variant into a run directory")
    train.add_argument("--config", default="configs/base.yaml", help="experiment YAML")
    train.add_argument("--workdir", help="run directory (default: runs/<config name>)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.norm=batch")

    sweep = sub.add_parser("sweep", help="run every variant of a sweep grid")
    sweep.add_argument("--config", required=True, help="sweep spec YAML (configs/sweeps/*.yaml)")
    sweep.add_argument("--out", help="results directory (default: results/<sweep name>)")
    sweep.add_argument("--parallel", type=int, default=1, help="variants run at once (local)")
    sweep.add_argument("--launcher", choices=("local", "submitit", "submitit-local"),
                       default="local", help="local processes, or submitit jobs (SLURM)")
    sweep.add_argument("--no-wait", action="store_true",
                       help="leave variants another process is running to it (no table yet)")
    sweep.add_argument("--wait-limit", type=float, default=24 * 3600, metavar="SECONDS",
                       help="longest wait for variants running elsewhere (default: 24 h)")
    sweep.add_argument("--no-reuse", action="store_true",
                       help="one process per variant (default: --parallel worker processes "
                       "that run variants in turn, starting Python and TensorFlow once each)")
    sweep.add_argument("overrides", nargs="*", help="dotted overrides applied to every variant")

    worker = sub.add_parser("worker", help="run commands read from stdin, one JSON list of "
                            "arguments per line, each in a forked child (sweep's workers)")
    worker.add_argument("result_fd", type=int, help="file descriptor the exit codes go to")

    summ = sub.add_parser("summarize", help="tables and plots from a results directory")
    summ.add_argument("results_dir")

    rep = sub.add_parser("reproduce", help="rerun a run (or a results directory's runs) from "
                         "the saved config and compare")
    rep.add_argument("run_dir", help="a run directory, or a results directory holding runs")
    rep.add_argument("--out", help="where reruns go (default: runs/reproduce/<name>)")
    rep.add_argument("--reuse", action="store_true",
                     help="compare against the reproduction in --out (its code version checked)")
    rep.add_argument("--strict", action="store_true", help="demand bit-identity on any machine")
    rep.add_argument("--sample", type=int,
                     help="results directory: rerun N runs drawn at random (default all)")
    rep.add_argument("--seed", type=int, help="results directory: seed of the --sample draw")
    rep.add_argument("--parallel", type=int, help="results directory: reruns at once (default 1)")

    find = sub.add_parser("findings", help="measure the claims on reference results -> README")
    find.add_argument("results_dir", nargs="?", default="results/reference")

    analyze = sub.add_parser("analyze", help="an analysis (e.g. grad-profile); KIND --help for more")
    analyze.add_argument("kind", help="grad-profile")
    analyze.add_argument("args", nargs=argparse.REMAINDER, help="the analysis' own arguments")

    board = sub.add_parser("tensorboard", help="start TensorBoard on a results or run directory")
    board.add_argument("logdir", nargs="?", default="results", help="default: results/")
    board.add_argument("--port", type=int, default=6006, help="0: any free port")
    board.add_argument("--host", default="localhost", help="0.0.0.0 to serve other machines")

    # Listed here for --help; ``bench ...`` is parsed by trainer/bench/cli.py (see main).
    sub.add_parser("bench", help="performance report as JSON; `bench data`, `bench report` "
                   "(bench --help)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # its own parser: subcommands beside positional overrides
        from trainer.bench.cli import parse_args as bench_args

        args = bench_args(argv[1:])
    else:
        args = _parser().parse_args(argv)
    if args.command in ("train", "reproduce"):  # before TensorFlow starts XLA
        from trainer import compile_cache

        compile_cache.enable()
    from trainer.data.sources import DataError
    from trainer.sweep import SweepFailed
    from trainer.train.rundir import RunBusyError
    try:
        if args.command == "train":
            from trainer.config import load_config

            cfg = load_config(args.config, args.overrides)  # a typo fails before TF starts
            import_tensorflow_quietly()
            from trainer.train.loop import run_training

            workdir = Path(args.workdir or Path("runs") / Path(args.config).stem)
            command = [sys.argv[0], *argv]  # as typed (a worker child gets its own)
            summary = run_training(cfg, workdir, argv=command, progress=not args.quiet)
            loss = summary.get("final_eval_loss")
            print(f"{workdir}: {summary['status']} after {summary['steps']} steps"
                  + (f", eval loss {loss:.4f}" if loss is not None else ""))
        else:  # the other commands import TensorFlow somewhere: mute its start-up first
            import_tensorflow_quietly()
        if args.command == "sweep":
            from trainer.sweep import run_sweep

            root = run_sweep(args.config, args.out, args.parallel, args.overrides, args.launcher,
                             wait=not args.no_wait, wait_limit_s=args.wait_limit,
                             reuse=not args.no_reuse)
            print((root / "summary.md").read_text())
        elif args.command == "worker":
            from trainer.launch import serve_worker

            return serve_worker(args.result_fd)
        elif args.command == "summarize":
            from trainer.results.summarize import summarize

            root = Path(args.results_dir)
            if not root.is_dir():
                raise ConfigError(f"results directory not found: {root}")
            with writing("tables", root):
                summarize(root)
            print((root / "summary.md").read_text())
        elif args.command == "reproduce":
            from trainer.reproduce import reproduce_path

            return reproduce_path(Path(args.run_dir), args.out, args.sample, args.seed,
                                  args.parallel, args.reuse, args.strict)
        elif args.command == "findings":
            from trainer.findings.core import main as findings_main

            if not Path(args.results_dir).is_dir():
                raise ConfigError(f"results directory not found: {args.results_dir}")
            return findings_main([args.results_dir])
        elif args.command == "analyze":
            import importlib

            from trainer.analysis import ANALYSES

            if args.kind not in ANALYSES:
                raise ConfigError(f"unknown analysis '{args.kind}'; valid: {', '.join(ANALYSES)}")
            return importlib.import_module(ANALYSES[args.kind]).main(args.args)
        elif args.command == "tensorboard":
            from trainer.telemetry.tensorboard import serve

            return serve(Path(args.logdir), args.port, args.host)
        elif args.command == "bench":
            from trainer.bench.cli import run as run_bench

            return run_bench(args)
    except Stopped as e:  # pre-empted after a checkpoint (a sweep: some variants were)
        print(e, file=sys.stderr)
        return EXIT_STOPPED
    except RunBusyError as e:  # a sweep counts this variant as running elsewhere
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BUSY
    except RunIOError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_IO
    except (ConfigError, DataError, SweepFailed) as e:  # the project's own errors; others trace
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
