"""F13 (LN's own numbers) computed with the real layer: every part is a control (LN's definition),
so the verdict is "checks only" as shipped, and "inconclusive" when a check is given an input on
which the property does not hold."""

from __future__ import annotations

from trainer.findings import ln as L


def _parts(f) -> dict:
    return {p.text: p.shown for p in f.parts}


def test_ln_numbers_are_checks_that_hold_for_the_real_layer():
    f = L.f13(None)
    assert f.verdict == "checks only", f.lines
    assert all(p.control and p.shown for p in f.parts)
    assert "1.732" in f.lines[0] and "1.291" in f.lines[1]  # the numbers of the doc-tested example


def test_a_dominant_vector_below_epsilon_is_not_unit_std(monkeypatch):
    monkeypatch.setattr(L, "DOMINANT", [1e-3, 0.0, 0.0, 0.0])  # variance 2e-7 << epsilon 1e-5
    f = L.f13(None)
    assert f.verdict == "inconclusive" and not _parts(f)["the dominant vector becomes mean 0, std 1"]


def test_a_vector_flatter_than_epsilon_is_not_re_expanded(monkeypatch):
    monkeypatch.setattr(L, "NEAR_CONSTANT", [1.0, 1.0001, 0.9999, 1.0])
    f = L.f13(None)
    assert f.verdict == "inconclusive" and not _parts(f)["the near-constant vector is re-expanded"]


def test_a_norm_that_mixes_tokens_fails_the_jacobian_check(monkeypatch):
    real = L.cross_token_jacobian
    monkeypatch.setattr(L, "cross_token_jacobian", lambda norm, seed: real("batch", seed))
    f = L.f13(None)
    assert f.verdict == "inconclusive"
    assert not _parts(f)["LN's tokens do not see each other (BN's in training mode do)"]
