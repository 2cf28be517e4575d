"""Arguments of ``python -m trainer bench [data|report|sweep|decode]`` (argparse only: imported
before TF): ``bench`` alone reports one config, ``ACTIONS`` are its subcommands. ``main`` is the
bench's own entry (``python -m trainer.bench``): the same parse and ``run``."""

from __future__ import annotations

import argparse
import shlex
import sys


class _Parser(argparse.ArgumentParser):
    """Bad flags are one line (``error: PROG: ...``) and exit 2, like the project's other errors."""

    def error(self, message):
        self.exit(2, f"error: {self.prog}: {message}\n")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got '{text}'")
    return value


def _sizes(text: str) -> list[int]:
    try:
        return [_positive(s) for s in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be positive integers separated by commas, e.g. 1024,2048,3072; got '{text}'"
        ) from None


def _run_parser() -> _Parser:
    p = _Parser(prog="python -m trainer bench", description="Performance report of one config "
                f"as JSON (docs/performance.md). Also: `bench {'|'.join(ACTIONS)} --help`.")
    p.add_argument("--config", default="configs/bench.yaml", help="experiment YAML")
    p.add_argument("--out", default="bench.json", help="JSON report path")
    p.add_argument("--steps", type=_positive, default=30,
                   help="timed steps per measurement (telemetry on, off, pad-to-max)")
    p.add_argument("--pairs", type=_positive, default=5,
                   help="interleaved telemetry on/off pairs the steps are split into")
    p.add_argument("--matmul-sizes", type=_sizes, default=[1024, 2048, 3072], metavar="N,N,...",
                   help="matmul sizes for the peak, in the compute dtype (the best counts)")
    p.add_argument("--no-profile", dest="profile", action="store_false",
                   help="skip the forward/backward profile of one shape")
    p.add_argument("--no-pad-to-max", dest="pad_to_max", action="store_false",
                   help="skip the pad-to-max run (its ratio then reads 1, marked skipped)")
    p.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. model.dim=256")
    return p


def _data_parser() -> _Parser:
    p = _Parser(prog="python -m trainer bench data",
                description="Data-preparation check: tokenise a generated text file in a child "
                            "process (cold, then warm cache) and report peak RSS and time.")
    p.add_argument("--mb", type=_positive, default=200, help="size of the generated text file")
    p.add_argument("--vocab-size", type=_positive, default=8192)
    p.add_argument("--out", default="bench_data.json", help="JSON report path")
    p.add_argument("--workdir", default=None, help="where the temp file and cache go")
    return p


def _report_parser() -> _Parser:
    p = _Parser(prog="python -m trainer bench report",
                description="Print the performance table (Markdown) of a bench JSON.")
    p.add_argument("json", help="a bench report, e.g. results/bench/cpu.json")
    p.add_argument("--readme", metavar="PATH", help="also rewrite PATH's block between "
                   "'<!-- bench:NAME -->' and '<!-- /bench -->', NAME the JSON's stem "
                   "(the committed table: docs/performance.md)")
    return p


def _sweep_parser() -> _Parser:
    p = _Parser(prog="python -m trainer bench sweep",
                description="Run a sweep spec the old way (one process per variant, no "
                            "compilation cache) and the new way (worker processes, the cache "
                            "cold, then warm); compare wall time, train share, compilations "
                            "and whether every run's numbers agree.")
    p.add_argument("spec", nargs="?", default="configs/sweeps/quick.yaml", help="sweep spec YAML")
    p.add_argument("--parallel", type=_positive, default=2, help="variants run at once")
    p.add_argument("--out", default="bench_sweep.json", help="JSON report path")
    p.add_argument("--no-rerun", dest="rerun", action="store_false",
                   help="skip the third pass on the warm cache")
    p.add_argument("--workdir", default=None, help="where the temporary results go")
    p.add_argument("overrides", nargs="*", help="dotted overrides applied to every variant")
    return p


def _decode_parser() -> _Parser:
    p = _Parser(prog="python -m trainer bench decode",
                description="Tokens/s of KV-cache decoding, the compiled loop beside the "
                            "per-token loop, and of recomputing the full prefix for every new "
                            "token, at each batch size (fresh weights, greedy).")
    p.add_argument("--config", default="configs/bench.yaml", help="experiment YAML (the model)")
    p.add_argument("--batch-sizes", type=_sizes, default=[1, 16], metavar="B,B,...")
    p.add_argument("--prompt-tokens", type=_positive, default=16)
    p.add_argument("--new-tokens", type=_positive, default=128)
    p.add_argument("--pairs", type=_positive, default=5,
                   help="interleaved timed passes of the compiled and the per-token loop")
    p.add_argument("--out", default="bench_decode.json", help="JSON report path")
    p.add_argument("--into", metavar="REPORT", help="also write it as the 'decode' key of this "
                   "bench report, e.g. results/bench/cpu.json")
    p.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. model.dim=256")
    return p


_PARSERS = {"run": _run_parser, "data": _data_parser, "report": _report_parser,
            "sweep": _sweep_parser, "decode": _decode_parser}
ACTIONS = tuple(a for a in _PARSERS if a != "run")  # bench's subcommands (``bench ACTION ...``)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``bench`` arguments (after the word ``bench``); ``command`` is "bench", ``action`` "run"
    (one config's report) or one of ``ACTIONS``."""
    action = argv[0] if argv[:1] and argv[0] in ACTIONS else "run"
    rest = argv[1:] if action != "run" else argv
    parser = _PARSERS[action]()
    args = parser.parse_args(rest)
    args.command, args.action = "bench", action
    if action == "run":
        old = [o for o in args.overrides if o.startswith("bench.")]
        if old:
            parser.error(f"'{old[0]}': bench options are flags now (--no-profile, "
                         "--no-pad-to-max, --matmul-sizes N,N,...)")
        args.command_record = {"config_path": args.config, "overrides": list(args.overrides),
                               "steps": args.steps, "pairs": args.pairs,
                               "line": shlex.join(["python", "-m", "trainer", "bench", *argv])}
    return args


def main(argv: list[str]) -> int:
    """``bench ARGV`` to its exit code: parse, import TensorFlow quietly, ``run``; a project
    error is one line on stderr (``trainer.faults.report``), as on the lab's command line."""
    from trainer import import_tensorflow_quietly
    from trainer.faults import report

    args = parse_args(argv)
    args.argv = ["bench", *argv]

    def go() -> int:
        import_tensorflow_quietly()
        return run(args)

    return report(go)


def run(args: argparse.Namespace) -> int:
    """Carry out parsed ``bench`` arguments (errors are the caller's to print)."""
    from pathlib import Path

    if args.action == "data":
        from trainer.bench.data import bench_data

        bench_data(args.mb, Path(args.out), args.vocab_size, args.workdir)
    elif args.action == "report":
        _report(Path(args.json), args.readme)
    elif args.action == "decode":
        from trainer.bench.decode import run as bench_decode

        bench_decode(args)
    elif args.action == "sweep":
        from trainer.bench.sweep import bench_sweep

        bench_sweep(args.spec, args.parallel, Path(args.out), args.overrides, args.rerun,
                    args.workdir)
    else:
        from trainer.bench.runner import bench

        bench(args)
    return 0


def _report(path, readme: str | None) -> None:
    from pathlib import Path

    from trainer.bench import report
    from trainer.config import ConfigError
    from trainer.atomic import read_json

    r = read_json(path)
    if not r:
        raise ConfigError(f"not a bench report (missing or not JSON): {path}")
    table = report.markdown(r)
    sys.stdout.write(table)
    if readme:
        text = Path(readme).read_text(encoding="utf-8")
        try:
            Path(readme).write_text(report.replace_block(text, path.stem, table), encoding="utf-8")
        except ValueError as e:
            raise ConfigError(f"{readme}: {e}") from None
        print(f"updated {readme} (block bench:{path.stem})", file=sys.stderr)
