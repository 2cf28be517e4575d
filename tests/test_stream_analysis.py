"""``analyze stream`` (F10, F12) on tiny real runs: the token-identity probe and the spread of
the attention norm's output."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from tests.conftest import run_cli, train_runs

# A tiny vocabulary (bytes only). Epsilon 1e-9: an untrained stream's tokens have a variance of
# ~1e-3, where LN's default epsilon (1e-5) alone moves their output norms by ~1e-3.
BYTES = ["data.vocab_size=259", "runtime.xla=false", "model.norm_epsilon=1e-9"]
COLUMNS = ["run", "norm", "residual", "norm_affine", "seed", "block", "probe_accuracy",
           "norm_output_cv", "stream_norm_cv", "scale_probe_r2", "scale_probe_r2_xhat"]


# Its module-scoped runs are built once: every test here goes to the same xdist worker
# (--dist loadgroup, setup.cfg), not once per worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_stream_analysis")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return train_runs(tmp_path_factory.mktemp("stream"), {
        affine: [*BYTES, "model.num_layers=2", f"model.norm_affine={affine}"]
        for affine in ("true", "false")})


def test_stream_csv_probe_and_flat_norm_without_affine(runs, tmp_path):
    from trainer.analysis.stream import run

    rows = run([runs["true"], runs["false"]], tmp_path, train_windows=64, test_windows=16,
               steps=200)
    with open(tmp_path / "stream.csv") as fh:
        written = list(csv.DictReader(fh))
    assert list(written[0]) == COLUMNS and len(written) == len(rows) == 2 * 3
    assert (tmp_path / "stream.png").read_bytes()[:4] == b"\x89PNG"
    by = {(r["norm_affine"], r["block"]): r for r in rows}
    for affine in ("true", "false"):  # the embedding output still names its token
        assert by[(affine, -1)]["probe_accuracy"] > 0.9
        assert by[(affine, -1)]["norm_output_cv"] == ""
    for block in (0, 1):  # LN without γ/β: every token leaves with norm sqrt(C)
        assert by[("false", block)]["norm_output_cv"] < 1e-4
        assert by[("false", block)]["stream_norm_cv"] > 1e-3  # ... whatever the stream's spread
    for (affine, block), r in by.items():  # F19: γ⊙x̂ + β reads what x̂ reads
        if block < 0:
            assert r["scale_probe_r2"] == r["scale_probe_r2_xhat"] == ""
        else:
            assert abs(r["scale_probe_r2"] - r["scale_probe_r2_xhat"]) < 1e-3, r


def test_a_random_gamma_spreads_the_norm_output(runs):
    from trainer.analysis.batch_size import full_windows
    from trainer.train.checkpoint import restore_trained
    from trainer.analysis.stream import cv, features

    _, corpus, model = restore_trained(runs["true"])
    batch = full_windows(corpus, 8)
    rng = np.random.default_rng(0)
    for block in model.blocks:
        gamma = block.attention_norm.inner.gamma
        gamma.assign(rng.lognormal(0.0, 0.5, size=gamma.shape).astype("float32"))
    for layer in features(model, batch)[1:]:
        assert cv(np.linalg.norm(layer["normed"], axis=1)) > 0.05


def test_probe_is_at_chance_on_features_that_do_not_carry_the_token():
    from trainer.analysis.stream import probe_accuracy

    rng = np.random.default_rng(0)
    y = rng.integers(0, 20, size=1200)
    noise = rng.normal(size=(1200, 16)).astype("float32")
    assert probe_accuracy(noise[:900], y[:900], noise[900:], y[900:], steps=100) < 0.2
    onehot = np.eye(20, dtype="float32")[y] + 0.1 * noise[:, :1]  # carries it: near 1
    assert probe_accuracy(onehot[:900], y[:900], onehot[900:], y[900:], steps=100) > 0.95


def test_stream_cli_errors_are_one_line(tmp_path):
    proc = run_cli("analyze", "stream", tmp_path, "--out", tmp_path / "o")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1


def test_scale_probe_r2_reads_a_linear_target_and_not_noise():
    from trainer.analysis.stream import ridge_r2

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 16)) * rng.uniform(0.1, 10, 16) + rng.normal(size=16) * 5
    w = rng.normal(size=16)
    y = (x - x.mean(0)) / x.std(0) @ w + 0.1 * rng.normal(size=2000)
    assert ridge_r2(x[:1500], y[:1500], x[1500:], y[1500:]) > 0.99
    noise = rng.normal(size=2000)
    assert ridge_r2(x[:1500], noise[:1500], x[1500:], noise[1500:]) < 0.02
    # a per-feature affine map (no zero gain) changes nothing: F19's control
    gamma, beta = rng.uniform(0.2, 3, 16) * rng.choice([-1, 1], 16), rng.normal(size=16)
    assert ridge_r2(x[:1500] * gamma + beta, y[:1500], x[1500:] * gamma + beta, y[1500:]) == \
        pytest.approx(ridge_r2(x[:1500], y[:1500], x[1500:], y[1500:]), abs=1e-9)


@pytest.mark.parametrize("norm", ["layer", "rms", "dyt"])
def test_xhat_is_the_lab_norm_without_gamma_beta(norm):
    from trainer.analysis.stream import normalised
    from trainer.models.norms import make_norm

    x = np.random.default_rng(1).normal(1.0, 2.0, size=(5, 8)).astype("float32")
    plain = make_norm(norm, affine=False)
    got = normalised(make_norm(norm), x)
    if norm == "dyt":
        assert got is None
    else:
        np.testing.assert_allclose(got, np.asarray(plain(x[None]))[0], atol=1e-5)
