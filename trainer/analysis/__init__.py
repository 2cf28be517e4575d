"""Analyses: forward/backward passes over models (at init or from a run's checkpoint) that
answer one question each and write a CSV (+ PNG) into a results directory.

``python -m trainer analyze KIND ...``; KIND is a key of ``ANALYSES``.
"""

ANALYSES = {"grad-profile": "trainer.analysis.grad_profile",
            "batch-size": "trainer.analysis.batch_size",
            "composition": "trainer.analysis.composition", "padding": "trainer.analysis.padding",
            "stream": "trainer.analysis.stream"}


def run_dirs_parser(kind: str, doc: str, outputs: str):
    """The argument parser every checkpoint analysis shares: RUN_DIR... and --out DIR."""
    import argparse
    from pathlib import Path

    p = argparse.ArgumentParser(prog=f"python -m trainer analyze {kind}",
                                description=doc.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--out", required=True, type=Path, help=f"directory for {outputs}")
    return p


def parse_run_dirs(parser, argv: list[str]):
    """Parse ``argv``; a RUN_DIR without a config.yaml is one clear error."""
    from trainer.config import ConfigError

    args = parser.parse_args(argv)
    for d in args.run_dirs:
        if not (d / "config.yaml").is_file():
            raise ConfigError(f"not a run directory (no config.yaml): {d}")
    return args
