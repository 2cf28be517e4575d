"""The claims' own figures (``trainer.findings.figures``) on the synthetic reference
(``tests/reference_fixture.py``): each is written for the healthy set and linked from its claim,
is absent when the runs it draws are missing, draws the numbers its claim judges, and has no
text overlapping another text or an axes (``tests/test_plots.py``'s layout check, plus the
legends these figures place beside their axes).
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
from matplotlib.collections import PathCollection
from matplotlib.colors import to_hex
from matplotlib.image import imread

from tests.reference_fixture import BASELINES, write_run
from tests.test_plots import _check_layout, _overlaps, _texts
from trainer.analysis import grad_profile, padding
from trainer.findings import dynamics, page
from trainer.findings import figures as FG
from trainer.findings import figures_best as FB
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (EMBED_UNIT_SCALE, GAP_MIN, LOSS_MARGIN, POLLUTION_MIN,
                                         SATURATED_MIN)
from trainer.results import lr_sweep
from trainer.results.lr_plot import write_lr_figure
from trainer.results.palette import NORM_COLORS

NEW = ("best/plots/f2_test_gap.png", "best/plots/f3_precise_bn.png",
       "best/plots/f5_token_std.png", "depth/plots/loss_by_depth.png")
POST_12 = "num_layers=12,norm=layer,residual=true,placement=post"


def copy_without(base: Path, tmp_path: Path, *patterns: str) -> Reference:
    """A copy of the healthy reference without the run directories matching ``patterns``."""
    root = tmp_path / "reference"
    shutil.copytree(base, root)
    for pattern in patterns:
        for path in root.glob(pattern):
            shutil.rmtree(path)
    return Reference(root)


def _legends_clear(fig) -> None:
    """Every axes legend inside the figure, clear of every axes and every other text."""
    renderer = fig.canvas.get_renderer()
    texts = [box for t, _ in _texts(fig) for box in [t.get_window_extent(renderer)]]
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        assert box.x0 >= fig.bbox.x0 - 1 and box.x1 <= fig.bbox.x1 + 1
        for other in fig.axes:
            assert not _overlaps(box, other.get_window_extent(renderer))
        assert not any(_overlaps(box, t) for t in texts)


def _check(fig) -> None:
    _check_layout(fig)
    _legends_clear(fig)


def test_every_claim_figure_is_written_and_linked_from_its_claim(base):
    ref = Reference(base)
    written = {p.relative_to(base).as_posix() for p in FG.write_claim_figures(ref)}
    assert set(NEW) <= written
    for rel in written:
        assert (base / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    claims = {f.id: f for f in (fn(ref) for fn in page.all_claims() if fn.__name__ != "f13")}
    for claim, rel in zip(("F2", "F3", "F5", "F11"), NEW):
        assert rel in claims[claim].plots
        assert f"![{claim}](reference/{rel})" in page.render_page(ref, [claims[claim]])


@pytest.mark.parametrize("drawn", [FB.f2_test_gap, FB.f3_precise_bn, FB.f5_token_std,
                                   FG.loss_by_depth])
def test_claim_figures_have_no_overlapping_text(base, drawn):
    _check(drawn(Reference(base)))


@pytest.mark.parametrize("missing, absent", [
    ("best/norm=masked_batch,*", {"best/plots/f2_test_gap.png", "best/plots/f3_precise_bn.png"}),
    ("best/norm=none,*", {"best/plots/f5_token_std.png"}),
    ("depth/num_layers=*", {"depth/plots/loss_by_depth.png"}),
])
def test_a_figure_is_absent_when_its_runs_are_missing(base, tmp_path, missing, absent):
    ref = copy_without(base, tmp_path, missing)
    for rel in absent:
        (ref.root / rel).unlink(missing_ok=True)  # copied from the base's earlier write
    written = {p.relative_to(ref.root).as_posix() for p in FG.write_claim_figures(ref)}
    assert not written & absent
    assert set(NEW) - absent <= written
    assert not any((ref.root / rel).exists() for rel in absent)


def _points(ax, color) -> list[float]:
    """y of every finite scatter point (a seed) drawn in ``color``."""
    out = []
    for coll in ax.collections:
        edge = coll.get_edgecolors()
        if isinstance(coll, PathCollection) and len(edge) and to_hex(edge[0]) == to_hex(color):
            out += [float(y) for _, y in coll.get_offsets() if math.isfinite(y)]
    return out


def test_f3_draws_the_precise_bn_test_losses_the_margin_and_the_baselines(base):
    ref = Reference(base)
    fig = FB.f3_precise_bn(ref)
    ax = fig.axes[0]
    precise = {n: sorted(r.summary["final_test_loss_precise_bn"] for r in ref.groups["best"]
                         if r.cfg.model.norm == n and r.cfg.model.placement == "pre")
               for n in ("batch", "masked_batch")}
    for n, want in precise.items():
        assert sorted(_points(ax, NORM_COLORS[n])) == pytest.approx(want) and len(want) == 5
    hlines = {line.get_label(): line.get_ydata()[0] for line in ax.get_lines()
              if len(line.get_ydata()) == 2 and line.get_ydata()[0] == line.get_ydata()[1]}
    assert any(abs(y - (max(precise["masked_batch"]) + LOSS_MARGIN)) < 0.01 for y in hlines.values())
    for key in ("unigram", "bigram"):
        assert any(label.startswith(key) and y == BASELINES["test"][key]
                   for label, y in hlines.items())


def test_f2_draws_both_gaps_per_seed_and_gap_min(base):
    ref = Reference(base)
    ax = FB.f2_test_gap(ref).axes[0]
    for n in ("batch", "masked_batch"):
        runs = [r.summary for r in ref.groups["best"]
                if r.cfg.model.norm == n and r.cfg.model.placement == "pre"]
        want = sorted([s["final_test_loss"] - s["final_test_loss_train_mode"] for s in runs]
                      + [s["final_test_loss_precise_bn"] - s["final_test_loss_train_mode"]
                         for s in runs])
        assert sorted(_points(ax, NORM_COLORS[n])) == pytest.approx(want)
    assert any(line.get_ydata()[0] == GAP_MIN and "GAP_MIN" in line.get_label()
               for line in ax.get_lines())


def test_f5_spans_layernorm_and_no_norm_only(base):
    ax = FB.f5_token_std(Reference(base)).axes[0]
    colors = {to_hex(line.get_color()) for line in ax.get_lines() if len(line.get_xdata())}
    assert colors == {NORM_COLORS["layer"], NORM_COLORS["none"]}
    lo, hi = ax.get_ylim()
    assert ax.get_yscale() == "log" and hi / lo < 10, "one decade: LN vs no norm, not DyT's span"


def test_f5_draws_each_seeds_token_std_and_their_geometric_mean(base):
    """F5 judges each seed's growth (last/first block token std) on a log scale: the figure
    draws every seed's per-block curve, their geometric mean (a max or an arithmetic mean
    fails), and labels the geometric mean's last/first ratio, which is the claim's."""
    ref = Reference(base)
    ax = FB.f5_token_std(ref).axes[0]
    layers = ref.num_layers("best")
    for n in ("layer", "none"):
        seeds = sorted([r.train_at(f"activation/block_{b}/token_std") for b in range(layers)]
                       for r in ref.groups["best"]
                       if r.cfg.model.norm == n and r.cfg.model.placement == "pre"
                       and str(r.cfg.model.residual).lower() == "true"
                       and r.cfg.train.warmup_steps == dynamics.WARM)
        assert len(seeds) == 5
        drawn = [line for line in ax.get_lines()
                 if len(line.get_xdata()) and to_hex(line.get_color()) == NORM_COLORS[n]]
        thin = sorted(list(line.get_ydata()) for line in drawn if line.get_marker() != "o")
        (thick,) = [line for line in drawn if line.get_marker() == "o"]
        assert len(thin) == len(seeds)
        for got, want in zip(thin, seeds):
            assert got == pytest.approx(want)
        gmean = [math.exp(sum(math.log(s[b]) for s in seeds) / len(seeds)) for b in range(layers)]
        assert list(thick.get_ydata()) == pytest.approx(gmean)
        growth = math.exp(sum(math.log(s[-1] / s[0]) for s in seeds) / len(seeds))
        assert f"last/first {growth:.3g}×" in thick.get_label(), thick.get_label()


def _hollow_means(ax) -> list[tuple[float, float]]:
    return [(line.get_xdata()[0], line.get_ydata()[0]) for line in ax.get_lines()
            if len(line.get_xdata()) == 1 and line.get_markerfacecolor() == "white"]


def test_f11_marks_points_with_fewer_seeds_and_the_points_from_best(base, tmp_path):
    healthy = FG.loss_by_depth(Reference(base)).axes[0]
    assert not _hollow_means(healthy)
    assert [t.get_text() for t in healthy.get_xticklabels()] == ["2", "6\n(best)", "12"]
    ref = copy_without(base, tmp_path, f"depth/{POST_12},seed=*")  # seed 0 left
    fig = FG.loss_by_depth(ref)
    _check(fig)
    ax = fig.axes[0]
    assert _hollow_means(ax) == [(12, pytest.approx(3.1))]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "Post-LN + residual (seeds 5, 5, 1)" in labels
    assert sum("seeds" in label for label in labels) == 2  # the variant and the key to hollow


def test_f9_shift_axis_starts_at_zero_and_draws_pollution_min(base):
    with open(base / "analysis" / "padding.csv", newline="") as fh:
        rows = [{**r, "shift": float(r["shift"]), "pad_fraction": float(r["pad_fraction"])}
                for r in csv.DictReader(fh)]
    ax = padding.figure(rows).axes[0]
    assert ax.get_ylim()[0] == 0
    assert any(line.get_ydata()[0] == POLLUTION_MIN and "POLLUTION_MIN" in line.get_label()
               for line in ax.get_lines())


def test_f6_shows_the_rate_grid_and_the_init_gradients_when_written(base, tmp_path):
    ref = copy_without(base, tmp_path)
    variants = lr_sweep.lr_variants(ref.groups["lr"], ref.baselines("lr", "validation"))
    write_lr_figure(variants, ref.root / "lr" / "plots")
    f6 = dynamics.f6(ref)
    assert f6.plots == ("lr/plots/lr_sensitivity.png", "init/grad_profile.png")
    text = page.render_page(ref, [f6])
    assert "![F6](reference/lr/plots/lr_sensitivity.png)" in text
    assert "grad_profile.png" not in text, "a figure not written is not linked"
    rows = [{"init": "xavier", "placement": p, "seed": s,
             **{f"block_{i}": (2.0 if p == "post" else 1.0) ** i for i in range(3)}}
            for p in ("pre", "post") for s in (0, 1)]
    grad_profile.plot(rows, ref.root / "init" / "grad_profile.png")
    text = page.render_page(ref, [f6])
    section = text[text.index("## F6"):]
    assert section.index("lr_sensitivity.png") < section.index("![F6](reference/init/grad_profile.png)")


# ---- F14 by DyT's recipe: sub-sweep ``dyt_recipe`` on a tiny tree of its own ---------------
RECIPE = ["model.norm=dyt", f"model.embed_scale={EMBED_UNIT_SCALE}"]
SAT_TAGS = ("probe/dyt_saturation/block_0", "probe/dyt_saturation/block_0/ffn",
            "probe/dyt_saturation/block_1", "probe/dyt_saturation/block_1/ffn",
            "probe/dyt_saturation/final")


def _recipe_run(root: Path, alpha: float, seed: int, loss: float, peak: dict) -> None:
    """One ``dyt_recipe`` run: saturation 0 everywhere at step 0, ``peak`` (tag -> value, the
    others 0.01) at step 50, half of it at step 100."""
    mid = {t: peak.get(t, 0.01) for t in SAT_TAGS}
    evals = {0: dict.fromkeys(SAT_TAGS, 0.0), 50: mid, 100: {t: v / 2 for t, v in mid.items()}}
    summary = ({"status": "diverged", "diverged_step": 60} if math.isinf(loss) else
               {"status": "completed", "final_eval_loss": loss, "final_test_loss": loss})
    write_run(root / "dyt_recipe" / f"dyt_alpha={alpha},seed={seed}",
              [*RECIPE, f"model.dyt_alpha={alpha}", f"train.seed={seed}"], summary, {}, evals)
    (root / "dyt_recipe" / "baselines.json").write_text(json.dumps(BASELINES))


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Path:
    """α₀ 0.2 and 0.5 train (saturation peaks at an FFN / the final norm), 1.0 saturates its
    attention DyT and one of its seeds diverges."""
    root = tmp_path_factory.mktemp("recipe") / "reference"
    for alpha, loss, tag, peak in ((0.2, 2.15, SAT_TAGS[1], 0.05), (0.5, 2.1, SAT_TAGS[4], 0.1),
                                   (1.0, 3.1, SAT_TAGS[2], 0.8)):
        for seed in (0, 1):
            bad = alpha == 1.0 and seed == 1
            _recipe_run(root, alpha, seed, math.inf if bad else loss + 0.01 * seed,
                        {tag: peak + 0.01 * seed})
    return root


def test_dyt_recipe_values_are_the_runs_loss_and_most_saturated_dyt(recipe):
    values = FG.dyt_recipe_values(Reference(recipe))
    assert list(values) == [0.2, 0.5, 1.0]
    assert values[0.5]["loss"] == {0: pytest.approx(2.1), 1: pytest.approx(2.11)}
    assert values[1.0]["loss"] == {0: pytest.approx(3.1), 1: math.inf}
    # max over every location (attention, FFN, final) at each evaluation step
    assert values[0.2]["saturation"][1] == [(0, 0.0), (50, pytest.approx(0.06)),
                                             (100, pytest.approx(0.03))]
    assert values[0.5]["saturation"][0][1] == (50, pytest.approx(0.1))  # the final norm's
    assert values[1.0]["saturation"][1][1] == (50, pytest.approx(0.81))


def test_dyt_recipe_figure_draws_those_values_and_follows_a_changed_run(recipe, tmp_path):
    root = tmp_path / "reference"
    shutil.copytree(recipe, root)
    fig = FG.dyt_recipe_saturation(Reference(root))
    _check(fig)
    loss_ax, sat_ax = fig.axes
    assert sorted(_finite_offsets(loss_ax)) == pytest.approx(
        sorted([2.15, 2.16, 2.1, 2.11, 3.1]))
    assert sum(len(line.get_xdata()) == 1 and line.get_marker() == "x"
               for line in loss_ax.get_lines()) == 1, "one diverged seed: one × at the top"
    curves = sorted(tuple(line.get_ydata()) for line in sat_ax.get_lines()
                    if len(line.get_xdata()) == 3)
    assert len(curves) == 6 and max(max(c) for c in curves) == pytest.approx(0.81)
    assert any(line.get_ydata()[0] == SATURATED_MIN for line in sat_ax.get_lines()
               if len(line.get_xdata()) == 2)
    # a changed run changes what is drawn: α₀ 0.2, seed 0's FFN saturation now peaks at 0.4
    _recipe_run(root, 0.2, 0, 2.15, {SAT_TAGS[3]: 0.4})
    values = FG.dyt_recipe_values(Reference(root))
    assert values[0.2]["saturation"][0][1] == (50, pytest.approx(0.4))
    sat_ax = FG.dyt_recipe_saturation(Reference(root)).axes[1]
    assert max(max(line.get_ydata()) for line in sat_ax.get_lines()
               if len(line.get_xdata()) == 3 and max(line.get_ydata()) < 0.5) == \
        pytest.approx(0.4)


def _finite_offsets(ax) -> list[float]:
    return [float(y) for c in ax.collections if isinstance(c, PathCollection)
            for _, y in c.get_offsets() if math.isfinite(y)]


def test_dyt_recipe_figure_is_written_only_when_its_runs_are_there(recipe, tmp_path):
    ref = Reference(recipe)
    path = recipe / "dyt_recipe" / "plots" / "saturation.png"
    assert "dyt_recipe/plots/saturation.png" in FG.FIGURES
    assert path in FG.write_claim_figures(ref)
    image = imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 1000 and image.std() > 0.01
    empty = tmp_path / "reference"
    _recipe_run(empty, 0.5, 0, 2.1, {})
    shutil.rmtree(empty / "dyt_recipe" / "dyt_alpha=0.5,seed=0")  # the group without runs
    write_run(empty / "best" / "norm=layer", ["model.norm=layer"], {"status": "completed"})
    assert FG.dyt_recipe_saturation(Reference(empty)) is None
    assert FG.dyt_recipe_values(Reference(empty)) == {}
