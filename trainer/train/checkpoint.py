"""A run's checkpoints: resume from the newest readable one, save with the loop's history, clean
up, and restore a trained run's model: for inference from the run directory alone
(``restore_model``), or with its data for analysis (``restore_trained``).

``RUN_DIR/checkpoints/ckpt-N.{index,data-*}`` are tf.train checkpoints of everything a resume
needs: model, optimizer, step and the loop's running values at step N (best eval loss, max
grad norm, last eval losses, last finite step, spike counter, last probes) as JSON in one
string variable, ``history``. One save writes them together, so a kill can never leave a
checkpoint beside a stale history, and falling back to an older checkpoint falls back to its
history too. ``history_at`` reads it back for people and tools.

Checkpoints written before the history moved into them (it was in ``progress-N.json`` files
beside them) are not resumed: each counts as unreadable ("written before ..."), so a run dir
holding only those is refused with ``RunDirError`` and nothing is deleted; train such a run
again in a fresh directory.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from trainer.atomic import atomic_write
from trainer.config import ConfigError, load_config
from trainer.data import prepare
from trainer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from trainer.faults import _reason, writing
from trainer.models import build_model, use_run_norm
from trainer.rundir import CHECKPOINTS, CONFIG, MODEL, PROMPT_COUNT, TOKENIZER
from trainer.telemetry.samples import sample_prompts
from trainer.train.rundir import RunDirError, load_prompts, load_tokenizer

KEEP = 2  # a corrupt newest checkpoint leaves an older one to fall back to
_INDEX = re.compile(r"ckpt-(\d+)\.index")
# What reading a damaged checkpoint raises: TF errors, or e.g. IndexError("Read less bytes
# than requested") from a truncated data file; a structure mismatch fails the assert.
_UNREADABLE = (tf.errors.OpError, OSError, ValueError, IndexError, AssertionError)
HISTORY_KEY = "history/.ATTRIBUTES/VARIABLE_VALUE"  # the history variable's name in a checkpoint
_LEGACY = "written before checkpoints held the run's history (train it again in a fresh directory)"


def make_checkpoint(model, optimizer=None, resumable: bool = False) -> tf.train.Checkpoint:
    """The tf.train.Checkpoint of a run: every model variable, the optimizer, and when
    ``resumable`` the step and the loop's history (``save`` assigns them, ``resume`` restores
    them and returns the history).

    ``weights`` lists ``model.variables`` explicitly, in construction order: tf.train does not
    follow the Keras 3 list of blocks, so without it a block's non-trainable state (BN running
    statistics) was never saved, and its trainable weights only through the optimizer.
    """
    parts = {"weights": list(model.variables), "model": model}
    if optimizer is not None:
        parts["optimizer"] = optimizer
    if resumable:
        parts["step"] = tf.Variable(0, dtype=tf.int64, name="step")
        parts["history"] = tf.Variable("{}", dtype=tf.string, name="history")
    return tf.train.Checkpoint(**parts)


def save_model(model, run_dir: Path) -> Path:
    """Write the final ``model`` as ``RUN_DIR/model.keras`` (atomically): config and weights,
    which ``keras.saving.load_model`` opens with only ``trainer.models`` imported (every custom
    layer is registered under the package name ``trainer``)."""
    path = Path(run_dir) / MODEL
    with writing("the final model", path):
        atomic_write(path, lambda tmp: model.save(tmp))
    return path


def history_at(prefix: str | Path) -> dict:
    """The loop's history saved in the checkpoint ``prefix`` (``.../checkpoints/ckpt-N``)."""
    return json.loads(tf.train.load_checkpoint(str(prefix)).get_tensor(HISTORY_KEY))


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


def resume(ckpt: tf.train.Checkpoint, run_dir: Path) -> tuple[tf.train.CheckpointManager, int, dict]:
    """Restore the newest readable checkpoint of ``run_dir`` into ``ckpt``, to train on.

    Returns the manager to save with, the restored step (0 when there is none) and the
    history saved with it ({} when there is none). Each unreadable checkpoint is reported in
    one line on stderr; when none is readable, ``RunDirError`` is raised and nothing is deleted.
    """
    directory = Path(run_dir) / CHECKPOINTS
    remove_temp(directory)
    found, restored, failures = _found(directory), None, []
    for n in found:
        prefix = directory / f"ckpt-{n}"
        try:
            if HISTORY_KEY not in dict(tf.train.list_variables(str(prefix))):
                failures.append((n, _LEGACY))
                continue
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
    return manager, restored, json.loads(ckpt.history.numpy().decode())


def save(manager: tf.train.CheckpointManager, step: int, history: dict) -> None:
    """Checkpoint at ``step`` with the loop's ``history`` in it; an I/O failure is a
    ``RunIOError`` and leaves the previous checkpoints as they were (the manager deletes only
    after a save)."""
    ckpt = manager.checkpoint
    ckpt.history.assign(json.dumps({"step": step, **history}, default=str))
    ckpt.step.assign(step)
    with writing("checkpoint", Path(manager.directory) / f"ckpt-{step}"):
        manager.save(checkpoint_number=step)


@dataclass(frozen=True)
class RunText:
    """What inference needs of a run's data (``restore_model``): its ``tokenizer``, ``max_len``
    and the ids of its fixed validation ``prompts`` (``trainer.telemetry.samples``); the special
    ids as on a ``Corpus``."""

    tokenizer: Any
    max_len: int
    prompts: list[list[int]]
    pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()


def restore_model(run_dir: Path):
    """(cfg, ``RunText``, model) of a trained run, the model at its last checkpoint: what
    ``generate`` needs, read from the run directory alone (config, tokenizer.json, prompts.json,
    checkpoint), no data and no network. A run made before runs saved their tokenizer falls
    back to preparing its data, with a note on stderr. Errors as ``restore_trained``."""
    run_dir = Path(run_dir)
    cfg, latest = _latest(run_dir)
    tok, prompts = load_tokenizer(run_dir), load_prompts(run_dir)
    if tok is None or prompts is None:
        corpus = _prepare_for(run_dir, cfg, tok)
        text = RunText(corpus.tokenizer, corpus.max_len, sample_prompts(corpus, PROMPT_COUNT))
    else:
        text = RunText(tok, int(cfg.data.max_len), prompts)
    return cfg, text, _restored(cfg, text.vocab_size, text.max_len, latest)


def restore_trained(run_dir: Path):
    """(cfg, corpus, model) of a trained run, the model at its last checkpoint: what the
    checkpoint analyses (``trainer.analysis``) evaluate. The data is prepared for its text and
    encoded with the run's own tokenizer (``RUN_DIR/tokenizer.json``), so a run analyses the
    same ids it was trained on, whatever the cache holds. A ``ConfigError`` when there is no
    checkpoint or it lacks a model variable."""
    run_dir = Path(run_dir)
    cfg, latest = _latest(run_dir)
    corpus = _prepare_for(run_dir, cfg, load_tokenizer(run_dir))
    return cfg, corpus, _restored(cfg, corpus.vocab_size, corpus.max_len, latest)


def _latest(run_dir: Path) -> tuple:
    """(cfg, newest checkpoint prefix) of ``run_dir`` (its norm from outside the lab, if any,
    made the one its copy holds); a ConfigError when it has no checkpoint."""
    cfg = load_config(run_dir / CONFIG)
    use_run_norm(run_dir, cfg.model.norm)  # a norm from outside the lab: the run's own copy
    latest = tf.train.latest_checkpoint(str(run_dir / CHECKPOINTS))
    if latest is None:
        raise ConfigError(f"{run_dir} has no checkpoint (checkpoints are not committed: rerun "
                          f"it with the same config, or `python -m trainer reproduce`, to make one)")
    return cfg, latest


def _prepare_for(run_dir: Path, cfg, tok):
    """The run's data as a Corpus, encoded with ``tok`` (None: a run made before runs saved
    their tokenizer; the one trained on the data, with a note)."""
    if tok is None:
        print(f"note: {run_dir} has no {TOKENIZER} (made before runs saved it): preparing its "
              f"data for the tokenizer", file=sys.stderr, flush=True)
    return prepare(cfg.data, tok=tok)


def _restored(cfg, vocab_size: int, max_len: int, latest: str):
    """The run's model built for ``vocab_size``/``max_len``, its weights from ``latest``."""
    model = build_model(cfg.model, vocab_size, max_len)
    try:
        make_checkpoint(model).restore(latest).expect_partial().assert_existing_objects_matched()
    except AssertionError:
        raise ConfigError(f"{latest} does not hold every model variable (made before "
                          f"checkpoints listed them all): rerun the run to make one") from None
    return model
