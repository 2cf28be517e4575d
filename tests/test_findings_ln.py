"""F13 (LN's own numbers) and F18 (ε and the two-pass variance): the analyses measure them with
the real layer and numpy (``analyze ln-numbers``, ``analyze ln-epsilon``), the claims judge the
CSVs they write. F13: "checks only" as shipped, "inconclusive" when a check is given an input on
which the property does not hold. F18: "yes" as shipped, "no" for a one-pass layer,
"inconclusive" when its demonstration fails. And the page regenerates with TensorFlow and Keras
blocked from import."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from trainer.analysis import ln_epsilon as E
from trainer.analysis import ln_numbers as N
from trainer.atomic import write_csv
from trainer.findings.inference import f18
from trainer.findings.ln import f13
from trainer.findings.reference import Reference

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "results" / "reference" / "analysis"


def _judge(tmp_path: Path, claim, name: str, rows: list[dict]):
    """``claim`` judged on a root holding only ``analysis/NAME.csv`` with ``rows``."""
    write_csv(tmp_path / "analysis" / f"{name}.csv", rows)
    return claim(Reference(tmp_path))


def _parts(f) -> dict:
    return {p.text: p.shown for p in f.parts}


def _read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_ln_numbers_are_checks_that_hold_for_the_real_layer(tmp_path):
    f = _judge(tmp_path, f13, "ln_numbers", N.measure())
    assert f.verdict == "checks only", f.lines
    assert all(p.control and p.shown for p in f.parts)
    assert "1.732" in f.lines[0] and "1.291" in f.lines[1]  # the numbers of the doc-tested example


def test_a_dominant_vector_below_epsilon_is_not_unit_std(tmp_path):
    rows = N.measure({"dominant": [1e-3, 0.0, 0.0, 0.0], "near-constant": N.NEAR_CONSTANT})
    f = _judge(tmp_path, f13, "ln_numbers", rows)  # variance 2e-7 << epsilon 1e-5
    assert f.verdict == "inconclusive" and not _parts(f)["the dominant vector becomes mean 0, std 1"]


def test_a_vector_flatter_than_epsilon_is_not_re_expanded(tmp_path):
    rows = N.measure({"dominant": N.DOMINANT, "near-constant": [1.0, 1.0001, 0.9999, 1.0]})
    f = _judge(tmp_path, f13, "ln_numbers", rows)
    assert f.verdict == "inconclusive" and not _parts(f)["the near-constant vector is re-expanded"]


def test_a_norm_that_mixes_tokens_fails_the_jacobian_check(tmp_path):
    rows = N.measure(jacobian=lambda norm, seed: N.cross_token_jacobian("batch", seed))
    f = _judge(tmp_path, f13, "ln_numbers", rows)
    assert f.verdict == "inconclusive"
    assert not _parts(f)["LN's tokens do not see each other (BN's in training mode do)"]


def test_without_their_csvs_f13_and_f18_are_not_run(tmp_path):
    ref = Reference(tmp_path)
    for claim, csv_name in ((f13, "analysis/ln_numbers.csv"), (f18, "analysis/ln_epsilon.csv")):
        f = claim(ref)
        assert f.verdict == "not run" and f.missing == [csv_name] and not f.files


def test_the_committed_csvs_are_what_the_analyses_measure():
    """results/reference/analysis/ln_{numbers,epsilon}.csv hold the analyses' own numbers (float32
    reassociation across machines aside: 1e-5 relative)."""
    for path, rows in ((COMMITTED / "ln_numbers.csv", N.measure()),
                       (COMMITTED / "ln_epsilon.csv", E.measure())):
        committed = _read(path)
        assert [list(r) for r in committed] == [list(map(str, r)) for r in rows]
        for got, want in zip(committed, rows):
            for k, v in want.items():
                if isinstance(v, float):
                    assert np.isclose(float(got[k]), v, rtol=1e-5, atol=0), (path.name, got, k)
                else:
                    assert got[k] == str(v), (path.name, got, k)


# ---- F18: ε and the two-pass variance (a mechanism demonstration) ---------------------------
def test_f18_as_shipped_the_lab_layer_keeps_the_spread_and_every_check_holds(tmp_path):
    f = _judge(tmp_path, f18, "ln_epsilon", E.measure())
    assert f.verdict == "yes", (f.parts, f.lines)
    assert [p.control for p in f.parts] == [False, True, True, True]
    assert "mechanism demonstration" in f.claim


def test_f18_a_one_pass_lab_layer_loses_the_spread(tmp_path):
    """The evidence part can fail: a LayerNorm computing E[x²] − E[x]² in float32 loses it. Its
    error is above the tolerance on every seed (2.0, 831, 2.1 against 0.01), but three heavy-
    tailed values give a geometric interval reaching below it, so by pre-registration 2's rule
    the part is underpowered, not refuted: never shown, and the claim never reads "yes"."""
    rows = E.measure(lab=lambda x: (E.numpy_ln(x, 1e-5, "one-pass"), 1e-5))
    f = _judge(tmp_path, f18, "ln_epsilon", rows)
    (part,) = [p for p in f.parts if not p.control]
    assert part.shown is not True and part.underpowered
    assert f.verdict == "inconclusive (underpowered)"


def test_f18_without_an_offset_the_one_pass_check_fails(tmp_path):
    """On a token without a large offset one-pass keeps the spread too: the demonstration's
    control fails and the claim reads inconclusive, not yes."""
    f = _judge(tmp_path, f18, "ln_epsilon", E.measure(offset=1.0))
    assert f.verdict == "inconclusive"
    assert not _parts(f)["one-pass variance loses the offset token's spread at every ε"]


def test_numpy_ln_two_pass_matches_float64_one_pass_does_not_at_the_offset():
    x = E.offset_token(0)
    for eps in (0.0, 1e-5):
        assert E.spread_error(E.numpy_ln(x, eps, "two-pass"), x, eps) < 1e-2
        assert E.spread_error(E.numpy_ln(x, eps, "one-pass"), x, eps) > 0.1
    assert np.isnan(E.numpy_ln(E.constant_token(), 0.0, "two-pass")).all()


def test_a_constant_token_is_described_by_its_row():
    rows = {(r["method"], r["epsilon"]): r for r in E.measure() if r["token"] == "constant"}
    assert E.describe_output(rows[("two-pass", 0.0)]) == "NaN"
    assert E.describe_output(rows[("two-pass", 1e-5)]) == "0"
    assert E.describe_output({"nan": 0, "inf": 0, "max_abs": 2.5}) == "max |y| 2.5"
    assert E.describe_output({"nan": "0", "inf": "3", "max_abs": "0.0"}) == "Inf"


def test_ln_epsilon_writes_its_csv_figure_and_stamp(tmp_path):
    assert E.main(["--out", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"ln_epsilon.csv", "ln_epsilon.png",
                                                    "ln_epsilon.meta.json"}
    assert len(_read(tmp_path / "ln_epsilon.csv")) == (2 * 3 + 1) * (len(E.SEEDS) + 1)


# ---- the page needs no TensorFlow --------------------------------------------------------
BLOCKER = '''import sys


class Blocked:
    """Importing tensorflow or keras (or any of their submodules) raises."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "tf_keras"):
            raise ImportError(f"blocked by the test: {name}")
        return None


sys.meta_path.insert(0, Blocked())
'''


def test_the_page_regenerates_with_tensorflow_and_keras_blocked(tmp_path):
    """``python -m trainer findings`` on a copy of results/ (files linked, so every write the
    command makes replaces a link, never a committed file) in an interpreter where importing
    tensorflow or keras raises: results/README.md byte for byte."""
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCKER)
    results = tmp_path / "results"
    shutil.copytree(REPO / "results", results, copy_function=os.symlink)
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "block"), str(REPO)])
    probe = subprocess.run([sys.executable, "-c", "import tensorflow"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode != 0 and "blocked by the test" in probe.stderr  # the block works
    proc = subprocess.run([sys.executable, "-m", "trainer", "findings", str(results / "reference")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = results / "README.md"
    assert not written.is_symlink()
    assert written.read_bytes() == (REPO / "results" / "README.md").read_bytes()
