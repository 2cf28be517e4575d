"""``plots/lr_sensitivity.png`` on a synthetic learning-rate sweep of the issue's variant table
(18 variants x 5 rates x 2 seeds, diverged and off-scale rates): the layout checks of
tests/test_plots.py (no text overlapping text or an axes, legend outside), one look per variant
in the norm's colour, × on the top edge, baselines drawn."""

from __future__ import annotations

import itertools
import math
import random

import matplotlib
from matplotlib.colors import to_hex

from tests.test_plots import BASELINES, _check_layout, _run
from trainer.results.lr_plot import lr_figure
from trainer.results.lr_sweep import lr_variants
from trainer.results.palette import NORM_COLORS
from trainer.results.run import Run

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LR_RATES = (3e-4, 1e-3, 10 ** -2.5, 1e-2, 10 ** -1.5)  # the grid, √10 apart
# the variant table: every norm at both placements with the residual, LN and no-norm
# without it, Pre-LN and Post-LN without warm-up
LR_VARIANTS = ([{"model.norm": n, "model.placement": p, "model.residual": "true",
                 "train.warmup_steps": 20}
                for n in ("layer", "batch", "masked_batch", "rms", "dyt", "none")
                for p in ("pre", "post")]
               + [{"model.norm": n, "model.placement": p, "model.residual": "false",
                   "train.warmup_steps": 20} for n in ("layer", "none") for p in ("pre", "post")]
               + [{"model.norm": "layer", "model.placement": p, "model.residual": "true",
                   "train.warmup_steps": 0} for p in ("pre", "post")])


def _lr_runs(seeds=(0, 1)) -> list[Run]:
    """Loss-vs-rate parabolas around a random best rate (steep ones end above the plotted
    range); every Post-LN variant diverges at the highest rate."""
    rng, runs = random.Random(3), []
    for values in LR_VARIANTS:
        best, width = rng.uniform(-3.2, -2.2), rng.uniform(0.3, 1.5)
        for lr, seed in itertools.product(LR_RATES, seeds):
            run = _run({**values, "train.lr": lr}, seed, rng)
            loss = 5.3 + width * (math.log10(lr) - best) ** 2 + 0.02 * seed
            diverged = values["model.placement"] == "post" and lr == LR_RATES[-1]
            run.summary = {"status": "diverged" if diverged else "completed",
                           "final_eval_loss": None if diverged else loss, "loss_spikes": 0}
            run.eval["loss"][0] = (0, 9.0)
            runs.append(run)
    return runs


def test_lr_sensitivity_figure_reads_cleanly():
    variants = lr_variants(_lr_runs(), BASELINES)
    assert len(variants) == len(LR_VARIANTS)
    open_before = plt.get_fignums()
    fig = lr_figure(variants, BASELINES)
    # drawn off-screen (trainer.atomic.subplots): no pyplot figure is left open behind it
    assert plt.get_fignums() == open_before
    try:
        _check_layout(fig)
        (ax,) = fig.axes
        assert ax.get_xscale() == "log"
        lo, top = ax.get_ylim()
        assert BASELINES["unigram"] < top < BASELINES["unigram"] + 1.0, "clipped above unigram"
        looks = {line.get_gid(): (to_hex(line.get_color()), line.get_linestyle(),
                                  line.get_marker()) for line in ax.get_lines()
                 if line.get_gid() and ":" not in line.get_gid()}
        assert set(looks) == {v.name for v in variants}
        assert len(set(looks.values())) == len(variants), "one look per variant"
        for v in variants:
            assert looks[v.name][0] == NORM_COLORS[v.values["model.norm"]], v.name
        events = [line for line in ax.get_lines() if (line.get_gid() or "").startswith("event:")]
        crosses = [line for line in events if line.get_marker() == "x"]
        assert any(line.get_marker() == "^" for line in events), "an off-scale rate is marked"
        assert len(crosses) == sum(v.values["model.placement"] == "post" for v in variants)
        assert all(y == top for line in events for y in line.get_ydata()), "on the top edge"
        # side by side around the rate, so every colour shows
        assert all(abs(math.log10(line.get_xdata()[0] / LR_RATES[-1])) < 0.2 for line in crosses)
        assert len({line.get_xdata()[0] for line in crosses}) == len(crosses)
        baselines = {line.get_gid() for line in ax.get_lines()
                     if (line.get_gid() or "").startswith("baseline:")}
        assert baselines == {"baseline:unigram", "baseline:bigram"}
        legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
        assert "unigram baseline 6.94" in legend and "diverged (top edge)" in legend
    finally:
        plt.close(fig)
