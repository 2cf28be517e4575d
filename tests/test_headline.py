"""The headline figure (``trainer.findings.headline``) on tiny synthetic settings written with the
lab's own run writer: one panel per setting, each variant's final test loss from its own runs
(DyT by its recipe from ``dyt_recipe`` at α₀ = 1.0 in the reference, from ``best`` elsewhere),
a setting without runs drawn as an empty panel, nothing written when no setting has runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from matplotlib.collections import PathCollection
from matplotlib.image import imread

from tests.reference_fixture import BASELINES, write_run
from tests.test_plots import _check_layout
from trainer.findings import headline as H
from trainer.findings.reference import Reference
from trainer.findings.thresholds import EMBED_UNIT_SCALE, HEADLINE_VARIANTS

PRE = ["model.residual=true", "model.placement=pre", "train.warmup_steps=50"]
RECIPE = ["model.norm=dyt", f"model.embed_scale={EMBED_UNIT_SCALE}", *PRE]


def _run(root: Path, group: str, name: str, overrides: list[str], seed: int,
         loss: float) -> None:
    summary = ({"status": "diverged", "diverged_step": 7} if math.isinf(loss) else
               {"status": "completed", "final_eval_loss": loss, "final_test_loss": loss})
    write_run(root / group / f"{name},seed={seed}", [*overrides, f"train.seed={seed}"], summary)
    (root / group / "baselines.json").write_text(json.dumps(BASELINES))


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> Path:
    """reference: Pre-LN (2 seeds), BN (one seed diverged), DyT's recipe in ``dyt_recipe`` at
    α₀ 0.5 and 1.0; python: Pre-LN and DyT's recipe in ``best``; long: nothing."""
    top = tmp_path_factory.mktemp("headline")
    ref = top / "reference"
    for seed, loss in ((0, 2.1), (1, 2.2)):
        _run(ref, "best", "norm=layer", ["model.norm=layer", *PRE], seed, loss)
    for seed, loss in ((0, 2.4), (1, math.inf)):
        _run(ref, "best", "norm=batch", ["model.norm=batch", *PRE], seed, loss)
    for alpha, loss in ((0.5, 2.3), (1.0, 2.9)):
        _run(ref, "dyt_recipe", f"dyt_alpha={alpha}", [*RECIPE, f"model.dyt_alpha={alpha}"], 0,
             loss)
    py = top / "python"
    _run(py, "best", "norm=layer", ["model.norm=layer", *PRE], 0, 1.5)
    _run(py, "best", "norm=dyt", [*RECIPE, "model.dyt_alpha=1.0"], 0, 1.7)
    return top


def _refs(top: Path) -> dict[str, Reference]:
    return {name: Reference(top / name, setting=name) for name in ("reference", "python", "long")}


def test_headline_values_come_from_each_variants_runs(settings):
    values = H.headline_values(_refs(settings))
    assert list(values) == ["reference", "python", "long"]
    ref = values["reference"]
    assert list(ref) == list(HEADLINE_VARIANTS)
    assert ref["Pre-LN"] == {0: pytest.approx(2.1), 1: pytest.approx(2.2)}
    assert ref["BN"] == {0: pytest.approx(2.4), 1: math.inf}
    assert ref["DyT (recipe)"] == {0: pytest.approx(2.9)}, "dyt_recipe at α₀ = 1.0 only"
    assert ref["Post-LN"] == {} and ref["Pre-LN, no warm-up"] == {}
    assert values["python"]["DyT (recipe)"] == {0: pytest.approx(1.7)}
    assert values["python"]["Pre-LN"] == {0: pytest.approx(1.5)}
    assert all(v == {} for v in values["long"].values())


def test_a_changed_run_changes_the_plotted_value(tmp_path):
    top = tmp_path / "changed"
    top.mkdir()
    _run(top / "reference", "best", "norm=layer", ["model.norm=layer", *PRE], 0, 2.1)
    refs = {"reference": Reference(top / "reference")}
    assert H.headline_values(refs)["reference"]["Pre-LN"] == {0: pytest.approx(2.1)}
    _run(top / "reference", "best", "norm=layer", ["model.norm=layer", *PRE], 0, 2.6)
    refs = {"reference": Reference(top / "reference")}
    assert H.headline_values(refs)["reference"]["Pre-LN"] == {0: pytest.approx(2.6)}
    fig = H.headline_figure(refs)
    drawn = [float(y) for c in fig.axes[0].collections if isinstance(c, PathCollection)
             for _, y in c.get_offsets()]
    assert drawn == [pytest.approx(2.6)]


def test_headline_writes_a_png_with_an_empty_panel_for_a_setting_not_run(settings, tmp_path):
    refs = _refs(settings)
    out = H.headline(refs, tmp_path / "deep" / "dir" / "headline.png")
    assert out == tmp_path / "deep" / "dir" / "headline.png"
    image = imread(out)
    assert image.shape[0] > 300 and image.shape[1] > 1000 and image.std() > 0.01
    fig = H.headline_figure(refs)
    _check_layout(fig)
    panels = fig.axes[:3]
    assert [ax.get_title(loc="left").split("\n")[0] for ax in panels][0].startswith("the reference")
    assert [t.get_text() for t in panels[2].texts] == ["not run yet"]
    assert [t.get_text() for t in panels[0].get_xticklabels()] == list(HEADLINE_VARIANTS)
    assert any(t.get_text() == "not run" for t in panels[0].texts)  # e.g. Post-LN


def test_headline_is_none_when_no_setting_has_runs(tmp_path):
    refs = {"reference": Reference(tmp_path / "none"), "wide": Reference(tmp_path / "wide")}
    assert H.headline(refs, tmp_path / "headline.png") is None
    assert not (tmp_path / "headline.png").exists()
