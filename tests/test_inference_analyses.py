"""``analyze decode`` (F15, F16) and ``analyze ln-backward`` (F17) on tiny real runs (LayerNorm
and naive BatchNorm, trained a few steps): each writes its CSV and figure, and what holds by
construction holds on real checkpoints — a request's logits and earlier positions unchanged in
inference mode, the token-by-token served loss equal to the full forward's, BN's batch
statistics different and never kept, the full backward formula exact and the short one off by
exactly the term it drops."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from tests.conftest import NORM_RUNS_GROUP, mean_token_loss, run_cli



# The runs are conftest's session-wide ``norm_runs``: every test that reads them goes to one
# xdist worker (--dist loadgroup, setup.cfg), where they are trained once.
pytestmark = pytest.mark.xdist_group(NORM_RUNS_GROUP)


@pytest.fixture
def runs(norm_runs):
    return norm_runs


def _restored(run_dir):
    from trainer.analysis.batch_size import full_windows
    from trainer.train.checkpoint import restore_trained

    _, corpus, model = restore_trained(run_dir)
    return model, full_windows(corpus, 4)


def test_decode_csv_and_what_holds_by_construction(runs, tmp_path):
    from trainer.analysis.decode import run

    rows = run([runs["layer"], runs["batch"]], tmp_path, windows=2)
    with open(tmp_path / "decode.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 2
    assert (tmp_path / "decode.png").read_bytes()[:4] == b"\x89PNG"
    by = {r["norm"]: r for r in rows}
    for r in rows:  # inference mode: rows and later positions never reach a token
        assert r["stream_max_delta"] < 1e-4 and r["grow_max_delta"] < 1e-4
        assert r["tokens"] == 2 * 32
    assert by["layer"]["served_loss_batch_stats"] == "" == by["layer"]["grow_max_delta_train"]
    assert by["batch"]["grow_max_delta_train"] > 1e-3  # batch statistics see later tokens
    assert abs(by["batch"]["served_loss_batch_stats"] - by["batch"]["served_loss"]) > 1e-4


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_served_loss_is_the_full_forward_loss_and_changes_no_variable(runs, norm):
    import tensorflow as tf

    from trainer.analysis.decode import growing_delta, served_loss

    model, batch = _restored(runs[norm])
    before = [v.numpy().copy() for v in model.variables]
    two = {k: v[:2] for k, v in batch.items()}
    assert served_loss(model, two, False) == pytest.approx(mean_token_loss(model, [two]),
                                                           abs=1e-5)
    if norm == "batch":
        served_loss(model, two, True)
        growing_delta(model, two, True)
    assert all(np.array_equal(b, v.numpy()) for b, v in zip(before, model.variables))
    if norm == "batch":  # ... which training mode alone would have changed
        model.decode_step(tf.constant([[5]]), model.new_cache(1), tf.constant([[0]]),
                          training=True)
        assert not all(np.array_equal(b, v.numpy()) for b, v in zip(before, model.variables))


def test_bn_served_with_batch_statistics_predicts_one_distribution(runs):
    """At batch 1 BN in training mode sees one token: its output is β, whatever the token, so
    the loss is the cross-entropy of the same logits at every position."""
    import tensorflow as tf

    from trainer.analysis.decode import served_loss

    model, batch = _restored(runs["batch"])
    one = {k: v[:1] for k, v in batch.items()}
    cache = model.new_cache(1)
    logits, _ = model.decode_step(tf.constant([[int(one["inputs"][0, 0])]]), cache,
                                  tf.constant([[0]]), training=True)
    z = np.asarray(logits, np.float64)[0, 0]
    logp = z - z.max() - np.log(np.exp(z - z.max()).sum())
    expected = -logp[one["targets"][0]].mean()
    assert served_loss(model, one, True) == pytest.approx(expected, abs=1e-4)


def test_ln_backward_full_formula_exact_short_off_by_the_dropped_term(runs, tmp_path):
    from trainer.analysis.ln_backward import autodiff, norm_io, run

    rows = run([runs["layer"]], tmp_path, windows=4)
    assert (tmp_path / "ln_backward.png").read_bytes()[:4] == b"\x89PNG"
    assert len(rows) == 1 and rows[0]["full_error"] < 1e-4
    # the short formula's error is the dropped term (1/σ)·x̂·mean(g ⊙ x̂), computed here anew
    model, batch = _restored(runs["layer"])
    (x, dy), = norm_io(model, batch)
    norm = model.blocks[0].attention_norm
    g = dy.astype(np.float64) * norm.inner.gamma.numpy()
    mu, sd = x.mean(-1, keepdims=True), np.sqrt(x.var(-1, keepdims=True) + norm.epsilon)
    xhat = (x - mu) / sd
    dropped = xhat * (g * xhat).mean(-1, keepdims=True) / sd
    auto = autodiff(norm, x, dy)
    assert rows[0]["short_error"] == pytest.approx(np.abs(dropped).max() / np.abs(auto).max(),
                                                   rel=1e-3)
    assert rows[0]["short_error"] > 100 * rows[0]["full_error"]


def test_ln_backward_refuses_another_norm(runs, tmp_path):
    proc = run_cli("analyze", "ln-backward", runs["batch"], "--out", tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error:")
    assert "model.norm=layer" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
