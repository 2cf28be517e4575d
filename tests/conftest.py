"""Shared test set-up: quiet TensorFlow, a per-session data cache, tiny configs."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path

# What the command line sets (trainer/__main__.py), before anything imports TensorFlow.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

import trainer  # noqa: E402

trainer.import_tensorflow_quietly()

# Small enough for a few seconds of CPU per run, big enough to hold two length buckets.
TINY = ["model.num_layers=1", "model.dim=32", "model.num_heads=2", "model.ffn_dim=64",
        "data.vocab_size=512", "data.max_len=32", "data.buckets=[16,32]",
        "data.tokens_per_batch=256", "data.eval_batches=2", "train.steps=6",
        "train.warmup_steps=2", "train.eval_every=3", "train.log_every=1",
        "train.checkpoint_every=3"]


@pytest.fixture(scope="session", autouse=True)
def data_cache(tmp_path_factory):
    """One dataset/tokenizer cache for the session (the user's ~/.cache stays untouched)."""
    path = tmp_path_factory.mktemp("normlab-cache")
    os.environ["NORMLAB_CACHE"] = str(path)
    return path


@pytest.fixture
def tiny():
    """Overrides for a tiny model on the embedded corpus (a copy: tests may extend it)."""
    return list(TINY)


def tiny_spec(path: Path, grid: str, more: str = "") -> Path:
    """A sweep spec over configs/base.yaml with the TINY overrides; ``grid`` is its YAML body
    (indented two spaces), ``more`` any further top-level YAML (seeds, exclude)."""
    root = Path(__file__).resolve().parents[1]
    path.write_text(f"base: {root / 'configs/base.yaml'}\noverrides: {TINY}\ngrid:\n{grid}{more}")
    return path


def train_runs(root: Path, runs: dict[str, list[str]]) -> dict[str, Path]:
    """Train each named run (configs/base.yaml, TINY, then its overrides) into ``root/NAME``;
    returns name -> run directory."""
    from trainer.config import load_config
    from trainer.train.loop import run_training

    out = {}
    for name, overrides in runs.items():
        cfg = load_config("configs/base.yaml", [*TINY, *overrides])
        out[name] = root / name
        run_training(cfg, out[name], argv=["test"], progress=False)
    return out


# The modules that read ``norm_runs`` share this xdist group, so the runs are trained once.
NORM_RUNS_GROUP = "norm_runs"


@pytest.fixture(scope="session")
def norm_runs(tmp_path_factory) -> dict[str, Path]:
    """A tiny LayerNorm run and a tiny BatchNorm run (no XLA: the analyses restore them and
    compile nothing of the training step), trained once for the checkpoint analyses' tests
    (``tests/test_analysis.py``, ``tests/test_inference_analyses.py``)."""
    return train_runs(tmp_path_factory.mktemp("norm_runs"), {
        norm: [f"model.norm={norm}", "runtime.xla=false"] for norm in ("layer", "batch")})


@dataclass
class CliResult:
    """What ``python -m trainer ARGS`` gave: exit code, stdout, stderr."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args) -> CliResult:
    """``python -m trainer ARGS`` run in this process (``trainer.__main__.main``, the function the
    module runs), stdout and stderr captured: for the tests of error lines and exit codes, which
    need no fresh process. What only a fresh process shows (nothing but our line reaches a user's
    stderr, TensorFlow's start-up noise included) is checked with real subprocesses in
    tests/test_config.py (before TensorFlow loads) and tests/test_analysis.py (after)."""
    import trainer.launch  # noqa: F401 (submitit, imported by it, binds a log handler to
    # sys.stderr at import: imported here, it binds the real one, not the capture below)
    from trainer.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse's usage errors exit (code 2) instead of returning
            code = e.code if isinstance(e.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())


def restore_final_model(run_dir: Path):
    """(cfg, corpus, model) of a finished run, the model at its last checkpoint: rebuilt here
    from config.yaml, so tests can recompute what the loop reported from the saved weights."""
    import tensorflow as tf

    from trainer.config import load_config
    from trainer.data import prepare
    from trainer.models import build_model
    from trainer.train.checkpoint import make_checkpoint

    cfg = load_config(run_dir / "config.yaml")
    corpus = prepare(cfg.data)
    model = build_model(cfg.model, corpus.vocab_size, corpus.max_len)
    latest = tf.train.latest_checkpoint(str(run_dir / "checkpoints"))
    make_checkpoint(model).restore(latest).expect_partial().assert_existing_objects_matched()
    return cfg, corpus, model


def mean_token_loss(model, batches, training: bool = False) -> float:
    """Mean next-token cross-entropy over the real tokens of ``batches``, in float64 numpy (not
    the trainer's loss). ``training=True`` uses batch statistics; call it only on models
    without them, or inside ``frozen_state``, since it would move BN running statistics."""
    import numpy as np

    total = count = 0.0
    for b in batches:
        logits = np.asarray(model(b["inputs"], padding_mask=b["mask"], training=training))
        ce = token_cross_entropy(logits, b["targets"])
        total += float(np.where(b["mask"] > 0, ce, 0.0).sum())
        count += float(np.sum(b["mask"]))
    return total / count


def token_cross_entropy(logits, targets):
    """-log softmax(logits)[target] per position, in float64 numpy."""
    import numpy as np

    z = np.asarray(logits, np.float64)
    z = z - z.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, np.asarray(targets)[..., None], -1)[..., 0]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """The healthy synthetic reference (``tests/reference_fixture.py``), built once per module;
    a test that changes numbers copies it (``build(..., base=base)``)."""
    from tests.reference_fixture import build

    root = tmp_path_factory.mktemp("base") / "reference"
    build(root)
    return root


@pytest.fixture(scope="module")
def healthy(base) -> dict:
    """Every claim measured on ``base``, by id."""
    from trainer.findings import page
    from trainer.findings.reference import Reference

    return {f.id: f for f in page.measure(Reference(base))}
