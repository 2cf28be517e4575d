"""Plots at scale: synthetic sweeps of 6, 24 and 60 variants x 3 seeds, no training.

Each figure is checked from matplotlib's own artists after ``fig.canvas.draw()``: one
(colour, line style) per variant, no text overlapping another text or an axes, a bounded width,
baselines drawn when given.
"""

from __future__ import annotations

import itertools
import math
import random

import matplotlib
import pytest
from matplotlib.colors import to_hex
from omegaconf import OmegaConf

from trainer.results.config_values import swept_keys
from trainer.results.palette import NORM_COLORS, Sweep, key_caption, short_label
from trainer.results.plots import DPI, FIGURES, MAX_WIDTH_PX, NAMES, write_plots
from trainer.results.run import Run

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BASE = {"model": {"norm": "layer", "placement": "pre", "residual": "true", "num_layers": 3},
        "train": {"lr": 0.002, "warmup_steps": 20, "seed": 0, "steps": 40},
        "data": {"vocab_size": 1024}}  # real configs always have it (the spike rule reads it)
# name -> grid axes ({dotted key: values}); 6 = 3x2, 24 = 6x2x2 (the reference grid), 60 = 5x3x2x2;
# 8 = the reference lr slice (2 norms: a narrow, two-panel figure).
SWEEPS = {
    8: {"model.norm": ["layer", "none"], "model.placement": ["pre", "post"],
        "train.warmup_steps": [0, 20]},
    6: {"model.norm": ["layer", "batch", "none"], "model.residual": ["true", "false"]},
    24: {"model.norm": ["layer", "batch", "masked_batch", "rms", "dyt", "none"],
         "model.residual": ["true", "false"], "model.placement": ["pre", "post"]},
    60: {"model.norm": ["layer", "batch", "masked_batch", "rms", "dyt"],
         "model.residual": ["true", "false", "rezero"], "model.placement": ["pre", "post"],
         "train.warmup_steps": [0, 20]},
}
SEEDS = (0, 1, 2)
BASELINES = {"unigram": 6.94, "bigram": 5.31}


def _run(values: dict, seed: int, rng: random.Random, blocks: int = 3) -> Run:
    cfg = OmegaConf.create(BASE)
    for key, value in {**values, "train.seed": seed}.items():
        OmegaConf.update(cfg, key, value)
    variant = ",".join(f"{k.split('.')[-1]}={v}" for k, v in values.items())
    name = f"{variant},seed={seed}" if seed else variant
    steps = range(0, 41, 5)
    level = rng.uniform(5.5, 7.0)
    train = {"loss": [(s, level + 2.5 * math.exp(-s / 10) + rng.uniform(0, 0.1)) for s in steps],
             "grad_norm/global": [(s, rng.uniform(0.1, 5)) for s in steps]}
    evals = {"loss": [(s, level + 2.5 * math.exp(-s / 10)) for s in (0, 20, 40)]}
    for i in range(blocks):
        train[f"grad_norm/block_{i}"] = [(s, 10 ** rng.uniform(-8, 0)) for s in steps]
        train[f"activation/block_{i}/token_std"] = [(40, 10 ** rng.uniform(-5, 2))]
        evals[f"probe/token_cosine/block_{i}"] = [(40, rng.uniform(0, 1))]
    summary = {"status": "completed", "steps": 40, "final_eval_loss": evals["loss"][-1][1],
               "final_eval_loss_train_mode": evals["loss"][-1][1] - rng.uniform(-0.1, 0.5),
               "probes": {"probe/batch_invariance": rng.choice([0.0, rng.uniform(1e-3, 50)]),
                          "probe/batch_invariance_inference": 0.0}}
    return Run(path=None, name=name, variant=variant, cfg=cfg, summary=summary, train=train,
               eval=evals)


def _sweep_runs(n: int) -> list[Run]:
    rng = random.Random(n)
    axes = SWEEPS[n]
    combos = [dict(zip(axes, vals)) for vals in itertools.product(*axes.values())]
    assert len(combos) == n
    return [_run(c, seed, rng) for c in combos for seed in SEEDS]


@pytest.fixture(scope="module", params=sorted(SWEEPS))
def sweep(request):
    return request.param, Sweep(_sweep_runs(request.param))


def _shown_ticklabels(axis):
    """Tick labels matplotlib actually draws: visible, non-empty, inside the view interval."""
    lo, hi = sorted(axis.get_view_interval())
    out = []
    for minor in (False, True):
        for loc, label in zip(axis.get_ticklocs(minor=minor), axis.get_ticklabels(minor=minor)):
            if lo - 1e-12 * abs(hi) <= loc <= hi * (1 + 1e-12) + 1e-12:
                out.append(label)
    return out


def _texts(fig):
    """Every drawn, non-empty text of the figure, each with the axes it sits inside (or None)."""
    out = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        out += [(t, None) for t in (ax.title, ax._left_title, ax._right_title,
                                    ax.xaxis.label, ax.yaxis.label)]
        out += [(t, None) for t in _shown_ticklabels(ax.xaxis) + _shown_ticklabels(ax.yaxis)]
        out += [(t, ax) for t in ax.texts]
    for legend in fig.legends:
        out += [(t, None) for t in legend.get_texts()]
    out += [(t, None) for t in (fig._suptitle, fig._supxlabel, fig._supylabel) if t is not None]
    out += [(t, None) for t in fig.texts]
    unique = {id(t): (t, ax) for t, ax in out}  # the suptitle is also one of fig.texts
    return [(t, ax) for t, ax in unique.values() if t.get_visible() and t.get_text().strip()]


def _overlaps(a, b, tol=-2.0):
    """Boxes intersect, or come closer than 2 px (``tol``), in both directions."""
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > tol) and (min(a.y1, b.y1) - max(a.y0, b.y0) > tol)


def _check_layout(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width_px = fig.get_size_inches()[0] * fig.dpi
    assert fig.dpi == DPI and width_px <= MAX_WIDTH_PX, width_px
    frame = fig.bbox
    texts = _texts(fig)
    boxes = [(t, t.get_window_extent(renderer)) for t, _ in texts]
    assert len(boxes) > 10, "the figure has titles, labels and ticks to check"
    for t, box in boxes:  # nothing cut off at the figure's edge
        assert box.x0 >= frame.x0 - 1 and box.x1 <= frame.x1 + 1, t.get_text()
        assert box.y0 >= frame.y0 - 1 and box.y1 <= frame.y1 + 1, t.get_text()
    for (t1, b1), (t2, b2) in itertools.combinations(boxes, 2):
        assert not _overlaps(b1, b2), (t1.get_text(), t2.get_text())
    visible_axes = [ax for ax in fig.axes if ax.get_visible()]
    for (t, owner), (_, box) in zip(texts, boxes):
        for ax in visible_axes:
            if owner is ax:  # a note written inside its own panel ("no … recorded")
                continue
            assert not _overlaps(box, ax.get_window_extent(renderer)), (t.get_text(), ax)
    for legend in fig.legends:  # legends live outside every axes
        lbox = legend.get_window_extent(renderer)
        for ax in visible_axes:
            assert not _overlaps(lbox, ax.get_window_extent(renderer))


def _variant_looks(fig):
    """``{variant: {(colour, linestyle, marker)}}`` and ``{axes: {look: variants}}`` from lines."""
    looks, per_axes = {}, {}
    for ax in fig.axes:
        for line in ax.get_lines():
            gid = line.get_gid()
            if not gid or ":" in gid:
                continue
            look = (to_hex(line.get_color()), line.get_linestyle(), str(line.get_marker()))
            if line.get_linestyle() == "None":  # dots: the marker shape is what the dot says
                look = (to_hex(line.get_color()),)
            looks.setdefault(gid, set()).add(look)
            per_axes.setdefault(ax, {}).setdefault(look, set()).add(gid)
    return looks, per_axes


@pytest.mark.parametrize("name", NAMES)
def test_figure_layout_and_one_look_per_variant(sweep, name):
    n, sw = sweep
    fig = FIGURES[name](sw, BASELINES)
    try:
        _check_layout(fig)
        looks, per_axes = _variant_looks(fig)
        assert set(looks) == {v.name for v in sw.variants}, "every variant drawn"
        line_looks = {}
        for gid, styles in looks.items():
            lines = {s for s in styles if len(s) == 3}
            dots = {s for s in styles if len(s) == 1}
            # Mean lines carry the style marker, seed lines too: one look per variant.
            assert len(lines) <= 1 and len(dots) <= 1, (gid, styles)
            if lines:
                line_looks[gid] = lines.pop()
        # Within a panel no two variants share a look; across the figure neither (norm hues).
        assert len(set(line_looks.values())) == len(line_looks)
        for ax, by_look in per_axes.items():
            for look, gids in by_look.items():
                if len(look) == 3:
                    assert len(gids) == 1, (look, gids)
        if name == "invariance_and_gap":
            labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
            assert len(labels) == n and len(set(labels)) == n
            assert all(len(label) <= 30 for label in labels), labels
    finally:
        plt.close(fig)


def test_loss_plot_draws_labelled_baselines():
    sw = Sweep(_sweep_runs(6))
    for baselines, expected in ((BASELINES, {"unigram", "bigram"}), ({"unigram": 6.94}, {"unigram"}),
                                (None, set())):
        fig = FIGURES["loss"](sw, baselines)
        try:
            drawn = {line.get_gid().split(":")[1]: line.get_ydata()[0] for ax in fig.axes
                     for line in ax.get_lines() if (line.get_gid() or "").startswith("baseline:")}
            assert set(drawn) == expected
            for key in expected:
                assert drawn[key] == pytest.approx(BASELINES[key])
                ax_lo, ax_hi = fig.axes[0].get_ylim()
                assert ax_lo <= BASELINES[key] <= ax_hi, "baseline inside the y range"
            legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
            for key in expected:
                assert f"{key} baseline {BASELINES[key]:.2f}" in legend
        finally:
            plt.close(fig)


def test_log_axes_where_values_span_decades():
    sw = Sweep(_sweep_runs(6))
    for name, log_axes in (("grad_norm_by_block", 6), ("token_std_by_depth", 3)):
        fig = FIGURES[name](sw)
        try:
            assert sum(ax.get_yscale() == "log" for ax in fig.axes) == log_axes, name
        finally:
            plt.close(fig)
    fig = FIGURES["invariance_and_gap"](sw)
    try:
        assert fig.axes[0].get_xscale() == "log" and fig.axes[1].get_xscale() == "linear"
    finally:
        plt.close(fig)


def test_diverged_and_spiking_runs_are_marked():
    rng = random.Random(0)
    runs = [_run({"model.norm": n}, 0, rng) for n in ("layer", "batch")]
    runs[0].summary.update(status="diverged", diverged_step=25)
    runs[0].train["loss"] = [(s, v if s < 25 else float("nan")) for s, v in runs[0].train["loss"]]
    runs[1].train["loss"][4] = (20, 300.0)  # > 2x the point before: a spike, far off the scale
    fig = FIGURES["loss"](Sweep(runs), None)
    try:
        marks = {(line.get_gid(), line.get_marker()): (line.get_xdata()[0], line.get_ydata()[0])
                 for ax in fig.axes for line in ax.get_lines()
                 if (line.get_gid() or "").startswith("event:")}
        assert marks[("event:norm=layer", "x")][0] == 25
        x, y = marks[("event:norm=batch", "^")]
        assert x == 20 and y <= fig.axes[0].get_ylim()[1], "off-scale spike clamped into view"
    finally:
        plt.close(fig)
    runs[1].summary["loss_spike_steps"] = [10]  # recorded by the loop: used instead of the 2x rule
    fig = FIGURES["loss"](Sweep(runs), None)
    try:
        xs = [line.get_xdata()[0] for ax in fig.axes for line in ax.get_lines()
              if line.get_gid() == "event:norm=batch"]
        assert xs == [10]
    finally:
        plt.close(fig)


def test_swept_keys_and_short_labels():
    runs = _sweep_runs(24)
    assert swept_keys(runs) == ["model.norm", "model.residual", "model.placement"]
    run = next(r for r in runs if r.variant == "norm=layer,residual=true,placement=pre")
    assert short_label(run, swept_keys(runs)) == "LN · res · pre"
    assert short_label(run.cfg, ["model.norm", "train.warmup_steps"]) == "LN · wu20"
    assert short_label(run, []) == "LN"
    assert swept_keys(runs[:1]) == [] and swept_keys([]) == []
    caption = key_caption(swept_keys(runs), runs)
    assert "LN = layer" in caption and "no-res = false" in caption and "sBN" not in caption


def test_same_norm_same_colour_in_every_sweep():
    """A norm's hue is fixed: a sweep over norms alone draws each in NORM_COLORS."""
    rng = random.Random(1)
    runs = [_run({"model.norm": n}, 0, rng) for n in NORM_COLORS]
    sw = Sweep(runs)
    assert {v.label: to_hex(v.color) for v in sw.variants} == {
        short_label(r, ["model.norm"]): NORM_COLORS[r.cfg.model.norm] for r in runs}
    assert len(set(NORM_COLORS.values())) == len(NORM_COLORS)


def test_write_plots_single_run(tmp_path):
    """Down to one run: five PNGs, within the width bound."""
    import matplotlib.image as mpimg

    paths = write_plots([_run({}, 0, random.Random(2))], tmp_path / "plots", BASELINES)
    assert [p.name for p in paths] == [f"{n}.png" for n in NAMES]
    for path in paths:
        height, width = mpimg.imread(path).shape[:2]
        assert 100 < width <= MAX_WIDTH_PX and height > 100, path.name


def test_committed_reference_slice_reads_cleanly():
    """The real lr slice (18 runs, 2 panels, diverged runs): same layout checks as above."""
    from pathlib import Path

    from trainer.results.run import load_runs, variant_name

    root = (Path(__file__).resolve().parents[1] / "results" / "archive" / "reference-2026-11-lr6e-3"
            / "lr_slice")
    if not root.is_dir():
        pytest.skip("no committed reference results")
    runs = load_runs(root)
    sw = Sweep(runs)
    assert len(sw.variants) == len({variant_name(r.name) for r in runs}) >= 4  # seeds grouped
    assert sw.panels == ["LN", "no-norm"]
    for name in NAMES:
        fig = FIGURES[name](sw, BASELINES)
        try:
            _check_layout(fig)
        finally:
            plt.close(fig)


def test_line_markers_leave_the_event_marks_alone():
    """One marker table for every figure: a variant's line never wears ``^`` (an off-scale rate,
    a loss spike) or ``x`` (a diverged run); a sweep's first combinations are plain lines."""
    from trainer.results.palette import MARKERS, combo_look

    looks = [combo_look(i) for i in range(4 * (len(MARKERS) + 2))]
    assert [m for _, m in looks[:4]] == [None] * 4
    assert len(set(looks)) == len(looks) - 4  # distinct until the markers come round again
    assert not {m for _, m in looks} & {"^", "x"} and not set(MARKERS) & {"^", "x"}
