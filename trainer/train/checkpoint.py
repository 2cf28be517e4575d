"""A run's checkpoints: restore the newest readable one, save with its progress, clean up.

``RUN_DIR/checkpoints/ckpt-N.{index,data-*}`` are tf.train checkpoints (model, optimizer,
step); ``progress-N.json`` beside each holds the loop's running values at step N (best eval
loss, max grad norm, ...), so falling back to an older checkpoint also falls back to its
progress. ``RUN_DIR/progress.json`` mirrors the newest one for people and tools.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

import tensorflow as tf

from trainer.faults import _reason, writing
from trainer.train.rundir import RunDirError, read_json, write_json

KEEP = 2  # a corrupt newest checkpoint leaves an older one to fall back to
_INDEX = re.compile(r"ckpt-(\d+)\.index")
# What reading a damaged checkpoint raises: TF errors, or e.g. IndexError("Read less bytes
# than requested") from a truncated data file; a structure mismatch fails the assert.
_UNREADABLE = (tf.errors.OpError, OSError, ValueError, IndexError, AssertionError)


def make_checkpoint(model, optimizer=None, step=None) -> tf.train.Checkpoint:
    """The tf.train.Checkpoint of a run: every model variable, the optimizer and the step.

    ``weights`` lists ``model.variables`` explicitly, in construction order: tf.train does not
    follow the Keras 3 list of blocks, so without it a block's non-trainable state (BN running
    statistics) was never saved, and its trainable weights only through the optimizer.
    """
    parts = {"weights": list(model.variables), "model": model}
    if optimizer is not None:
        parts["optimizer"] = optimizer
    if step is not None:
        parts["step"] = step
    return tf.train.Checkpoint(**parts)


def _found(directory: Path) -> list[int]:
    """Checkpoint numbers with an index file, newest first."""
    return sorted((int(m.group(1)) for p in directory.glob("ckpt-*.index")
                   if (m := _INDEX.fullmatch(p.name))), reverse=True)


def remove_temp(directory: Path) -> list[Path]:
    """Delete ``*_temp*`` directories a save interrupted by a crash or a full disk left."""
    removed = [p for p in Path(directory).glob("*_temp*") if p.is_dir()]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


def restore(ckpt: tf.train.Checkpoint, run_dir: Path) -> tuple[tf.train.CheckpointManager, int, dict]:
    """Restore the newest readable checkpoint of ``run_dir`` into ``ckpt``.

    Returns the manager to save with, the restored step (0 when there is none) and the
    progress saved with it. Each unreadable checkpoint is reported in one line on stderr;
    when none is readable, ``RunDirError`` is raised and nothing is deleted.
    """
    directory = Path(run_dir) / "checkpoints"
    remove_temp(directory)
    found, restored, failures = _found(directory), None, []
    for n in found:
        prefix = directory / f"ckpt-{n}"
        try:
            ckpt.restore(str(prefix)).assert_existing_objects_matched()
        except _UNREADABLE as e:
            failures.append((n, _reason(e)))
            continue
        restored = n
        break
    if found and restored is None:
        why = "; ".join(f"ckpt-{n}: {reason}" for n, reason in failures)
        raise RunDirError(f"no readable checkpoint in {directory} ({why}); nothing was deleted")
    for n, reason in failures:
        # Out of the way (a later save may not reuse its number) but kept for inspection.
        aside = directory / "unreadable"
        aside.mkdir(exist_ok=True)
        for f in directory.glob(f"ckpt-{n}.*"):
            f.replace(aside / f.name)
        print(f"checkpoint {directory / f'ckpt-{n}'}.* is unreadable ({reason}); resuming from "
              f"ckpt-{restored} (the unreadable files are in {aside})", file=sys.stderr, flush=True)
    if restored is not None:
        # The manager keeps what the state file lists: list only what is at or before the
        # restored step, so an unreadable newer one never pushes a good one out.
        # Timestamps after the "last preserved" one, or the manager would never delete them.
        kept = sorted(n for n in found if n <= restored)[-KEEP:]
        now = time.time()
        tf.compat.v1.train.update_checkpoint_state(  # no TF2 alias; still maintained
            str(directory), str(directory / f"ckpt-{restored}"),
            all_model_checkpoint_paths=[str(directory / f"ckpt-{n}") for n in kept],
            all_model_checkpoint_timestamps=[now - len(kept) + i for i in range(len(kept))],
            last_preserved_timestamp=now - len(kept) - 1)
    manager = tf.train.CheckpointManager(ckpt, str(directory), max_to_keep=KEEP)
    if restored is None:
        return manager, 0, {}
    progress = read_json(directory / f"progress-{restored}.json")
    if not progress:  # a run dir from before per-checkpoint progress files
        progress = read_json(Path(run_dir) / "progress.json")
    return manager, restored, progress


def save(manager: tf.train.CheckpointManager, step_var: tf.Variable, step: int,
         progress: dict, run_dir: Path) -> None:
    """Checkpoint at ``step`` with its ``progress``; an I/O failure is a ``RunIOError`` and
    leaves the previous checkpoints as they were (the manager deletes only after a save)."""
    directory = Path(manager.directory)
    # The progress file first: a checkpoint on disk always has its progress beside it.
    write_json(directory / f"progress-{step}.json", {"step": step, **progress})
    step_var.assign(step)
    with writing("checkpoint", directory / f"ckpt-{step}"):
        manager.save(checkpoint_number=step)
    write_json(Path(run_dir) / "progress.json", {"step": step, **progress})
    kept = {Path(p).name for p in manager.checkpoints}
    for p in directory.glob("progress-*.json"):
        if p.name.replace("progress-", "ckpt-").removesuffix(".json") not in kept:
            p.unlink(missing_ok=True)
