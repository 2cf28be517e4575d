"""The ``train`` command: its arguments and what it does, shared by ``python -m trainer train`` and
a sweep worker's forked children (``trainer.launch``), so a variant runs the same code either way.

Importing this module imports no TensorFlow: a bad config fails before TensorFlow starts.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``train`` command's arguments."""
    p.add_argument("--config", default="configs/base.yaml", help="experiment YAML")
    p.add_argument("--workdir", help="run directory (default: runs/<config name>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model.norm=batch")


def parse(argv: list[str]) -> argparse.Namespace:
    """``train`` arguments (after the word ``train``); bad flags exit 2 as on the command line."""
    p = argparse.ArgumentParser(prog="python -m trainer train",
                                description="Train one variant into a run directory.")
    add_arguments(p)
    return p.parse_args(argv)


def train(args: argparse.Namespace, command_line: list[str]) -> int:
    """Train ``args`` (from ``add_arguments``) and print the outcome in one line; returns 0.

    ``command_line`` is recorded in meta.json as typed. The config is read first, before the
    compilation cache is opened (checksumming its entries) and before TensorFlow is imported,
    so a typo in it fails at once; the cache is enabled before TensorFlow starts XLA. Errors
    are raised (``trainer.faults.report`` prints them).
    """
    from trainer import compile_cache, import_tensorflow_quietly
    from trainer.config import load_config

    cfg = load_config(args.config, args.overrides)
    compile_cache.enable()
    import_tensorflow_quietly()
    from trainer.train.loop import run_training

    workdir = Path(args.workdir or Path("runs") / Path(args.config).stem)
    summary = run_training(cfg, workdir, argv=command_line, progress=not args.quiet)
    loss = summary.get("final_eval_loss")
    print(f"{workdir}: {summary['status']} after {summary['steps']} steps"
          + (f", eval loss {loss:.4f}" if loss is not None else ""))
    return 0
