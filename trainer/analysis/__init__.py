"""Analyses: forward/backward passes over models (at init or from a run's checkpoint) that
answer one question each and write a CSV (+ PNG) into a results directory.

``python -m trainer analyze KIND ...``; KIND is a key of ``ANALYSES``. Each writes, beside its
CSV, ``NAME.meta.json``: the commit and tree state that made it and its command line
(``trainer.provenance.write_stamp``), which the findings page's Provenance lists.

Modules, one per KIND: ``grad_profile`` (at init), ``batch_size``, ``composition``, ``padding``,
``stream``, ``decode``, ``ln_backward`` (from checkpoints), ``ln_numbers`` and ``ln_epsilon``
(LN's definition measured: no model, no run); and ``thresholds``, the
pre-registered numbers they draw (below the claims: no analysis imports ``trainer.findings``).
"""

ANALYSES = {"grad-profile": "trainer.analysis.grad_profile",
            "batch-size": "trainer.analysis.batch_size",
            "composition": "trainer.analysis.composition", "padding": "trainer.analysis.padding",
            "stream": "trainer.analysis.stream", "decode": "trainer.analysis.decode",
            "ln-backward": "trainer.analysis.ln_backward",
            "ln-numbers": "trainer.analysis.ln_numbers", "ln-epsilon": "trainer.analysis.ln_epsilon"}


def run_dirs_parser(kind: str, doc: str, outputs: str):
    """The argument parser every checkpoint analysis shares: RUN_DIR... and --out DIR."""
    import argparse
    from pathlib import Path

    p = argparse.ArgumentParser(prog=f"python -m trainer analyze {kind}",
                                description=doc.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--out", required=True, type=Path, help=f"directory for {outputs}")
    return p


def option(flag: str, **kwargs) -> tuple[str, dict]:
    """A command-line option of an analysis (``argparse.add_argument`` keywords)."""
    return flag, kwargs


def at_least_one(*params: str):
    """A ``check`` for ``analysis_main``: each of the named options must be >= 1."""
    def check(args) -> None:
        from trainer.config import ConfigError

        if min(getattr(args, p) for p in params) < 1:
            flags = ", ".join("--" + p.replace("_", "-") for p in params)
            raise ConfigError(f"{flags} must be >= 1")

    return check


def analysis_main(kind: str, doc: str, run, check=None, **options):
    """The ``main(argv)`` of a checkpoint analysis: ``RUN_DIR... --out DIR`` and ``options``
    (``param=option("--flag", ...)``), then ``run(run_dirs, out, param=value, ...)``.
    ``check(args)`` may reject values with a ``ConfigError``."""
    from trainer.rundir import analysis_name

    name = analysis_name(kind)

    def main(argv: list[str]) -> int:
        p = run_dirs_parser(kind, doc, f"{name}.csv/.png")
        for param, (flag, kwargs) in options.items():
            p.add_argument(flag, dest=param, metavar=flag.lstrip("-").upper().replace("-", "_"),
                           **kwargs)
        args = parse_run_dirs(p, argv)
        if check:
            check(args)
        from trainer.provenance import write_stamp

        run(args.run_dirs, args.out, **{param: getattr(args, param) for param in options})
        write_stamp(args.out / f"{name}.csv", ["analyze", kind, *argv])
        return 0

    return main


def analyse_runs(run_dirs, out, name: str, analyse, plot, describe) -> list[dict]:
    """Rows of ``analyse(run_dir)`` for every run directory, each printed as ``describe(row)``
    as its run finishes; written to ``out/NAME.csv`` and drawn by ``plot(rows, out/NAME.png)``."""
    from pathlib import Path

    from trainer.atomic import write_csv

    rows = []
    for run_dir in run_dirs:
        mine = analyse(Path(run_dir))
        for row in mine:
            print(describe(row), flush=True)
        rows += mine
    write_csv(Path(out) / f"{name}.csv", rows)
    plot(rows, Path(out) / f"{name}.png")
    return rows


def parse_run_dirs(parser, argv: list[str]):
    """Parse ``argv``; a RUN_DIR without a config.yaml is one clear error."""
    from trainer.config import ConfigError
    from trainer.rundir import CONFIG

    args = parser.parse_args(argv)
    for d in args.run_dirs:
        if not (d / CONFIG).is_file():
            raise ConfigError(f"not a run directory (no config.yaml): {d}")
    return args
