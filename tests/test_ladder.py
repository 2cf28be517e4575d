"""The model-size ladder (pre-registration 3, section 3; trainer/findings/ladder*.py) on synthetic
rungs: real run directories (config.yaml from the reference config at the rung's width,
summary.json, event files by the lab's writers) under results/ladder/d32, results/reference and
results/replication/wide, with made-up numbers: Pre-LN and no norm, seed 0 at three rates and
seeds 0-2 at the best. Each test sets the numbers that decide it, so changing one of them breaks
it; and the d = 32 sweep specs are checked against thresholds.py."""

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.reference_fixture import BASELINES, INIT_LOSS, STEPS, write_run
from trainer.findings import ladder_figures, ladder_page, ladder_trends
from trainer.findings.ladder import Ladder, rungs
from trainer.findings.ladder_trends import TRENDS, read, variant_trend
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (HEADLINE_VARIANTS, LADDER_HEADS, LADDER_WIDTHS,
                                         MIN_SEEDS, RATE_GRID, SCALE_VARIANTS)

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (32, 64, 128)
RUNG = {32: "ladder/d32", 64: "reference", 128: "replication/wide"}
KEYS = {"Pre-LN": ["model.norm=layer"], "no norm": ["model.norm=none"]}
PRE_LN = 2.1  # Pre-LN's test loss at its best rate (seed s adds 0.01 s)
NOISE = (-0.01, 0.02, -0.01)  # added per seed to the gap no norm − Pre-LN: mean 0
GRID = (0.5, 1.0, 2.0)  # each rung's own rates: its best rate times these, beside RATE_GRID
GRID_LOSS = (2.4, 2.2, 2.5)  # validation loss at them: the middle one is best
DESIGN_LOSS = 2.6  # validation loss at each rate of RATE_GRID (the design of rungs 32 and 64)
# a gap growing by 0.1 nats per doubling of width: refuted (no norm not worse) at 32 and 64,
# shown (worse by LOSS_MARGIN = 0.05) at 128
LINEAR = {32: -0.1, 64: 0.0, 128: 0.1}
# best rates halving per doubling of width (none of them, nor x0.5 or x2, a rate of RATE_GRID)
HALVING = {32: 0.0064, 64: 0.0032, 128: 0.0016}


def _run(path: Path, width: int, name: str, lr: float, seed: int, val: float, test: float):
    diverged = math.isinf(test)
    summary = ({"status": "diverged", "diverged_step": 7, "loss_spikes": 0} if diverged else
               {"status": "completed", "final_eval_loss": val, "final_test_loss": test,
                "loss_spikes": 0})
    write_run(path, [*KEYS[name], "model.residual=true", "model.placement=pre",
                     "train.warmup_steps=50", f"model.dim={width}", f"model.ffn_dim={4 * width}",
                     f"train.lr={lr}", f"train.seed={seed}"], summary, {},
              {0: {"loss": INIT_LOSS}, STEPS: {} if diverged else {"loss": val}})


def build(results: Path, gaps=LINEAR, rates=HALVING, widths=WIDTHS, diverged=None) -> Path:
    """The rungs under ``results``; no norm's test loss is Pre-LN's + ``gaps[width]`` + the
    seed's noise; ``diverged``: a (width, seed) whose no-norm best-rate run diverged."""
    for width in widths:
        rung = results / RUNG[width]
        for name in KEYS:
            grid = [(float(f"{rates[width] * f:.6g}"), loss) for f, loss in zip(GRID, GRID_LOSS)]
            for lr, loss in [*grid, *((lr, DESIGN_LOSS) for lr in RATE_GRID)]:
                _run(rung / "lr" / f"{name},lr={lr}", width, name, lr, 0, loss, loss)
            for seed in range(MIN_SEEDS):
                test = PRE_LN + 0.01 * seed
                if name == "no norm":
                    test = math.inf if diverged == (width, seed) else test + gaps[width] + NOISE[seed]
                _run(rung / "best" / f"{name},seed={seed}", width, name, rates[width], seed,
                     GRID_LOSS[1], test)
        for group in ("lr", "best"):
            (rung / group / "baselines.json").write_text(json.dumps(BASELINES))
    return results / "reference"


@pytest.fixture(scope="module")
def linear(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("ladder") / "results")


F11 = next(t for t in TRENDS if t.id == "F11")


def test_the_rungs_are_the_reference_wide_and_the_ladder_roots(linear):
    found = rungs(Reference(linear))
    assert list(found) == list(LADDER_WIDTHS)
    per_rung = len(KEYS) * (len(GRID) + len(RATE_GRID) + MIN_SEEDS)
    assert {w: len(found[w].runs) for w in found} == {32: per_rung, 64: per_rung,
                                                      128: per_rung, 256: 0}
    assert found[128].root == linear.parent / "replication" / "wide"


def test_a_linear_trend_in_a_gap_recovers_its_slope(linear):
    r = read(Ladder(Reference(linear)), F11)
    assert r.fitted == list(WIDTHS) and r.fit.n == len(WIDTHS) * MIN_SEEDS
    true = 0.1  # LINEAR's step per doubling
    assert r.fit.lo < true < r.fit.hi and r.fit.lo > 0  # its sign, and the true slope inside
    for w, c in r.cells.items():
        if w in WIDTHS:
            assert c.ci.mean == pytest.approx(LINEAR[w], abs=1e-9)


def test_a_verdict_that_flips_between_rungs_names_the_width(linear):
    r = read(Ladder(Reference(linear)), F11)
    assert [r.cells[w].judged.outcome for w in WIDTHS] == ["refuted", "refuted", "shown"]
    assert r.changes[0].startswith("interval moves from below 0 to straddles 0 at d = 64: "
                                   "refuted at d = 32 (mean -0.100")
    assert r.changes[1].startswith("verdict changes at d = 128: refuted at d = 64")
    assert "shown at d = 128 (mean +0.100, 95 % +0.057" in r.changes[1] and len(r.changes) == 2
    text = "\n".join(ladder_page.ladder_section(Reference(linear)))
    assert "- F11 verdict changes at d = 128" in text


def test_a_flat_trend_has_an_interval_around_zero(tmp_path):
    ref = Reference(build(tmp_path / "results", gaps={32: 0.2, 64: 0.22, 128: 0.2}))
    r = read(Ladder(ref), F11)
    assert r.fit.lo < 0 < r.fit.hi and not r.changes
    assert {r.cells[w].judged.outcome for w in WIDTHS} == {"shown"}


def test_the_best_rate_power_law_of_rates_halving_per_doubling_is_minus_one(linear):
    v = variant_trend(Ladder(Reference(linear)), "no norm")
    assert v.best == HALVING and not v.why
    assert v.power.slope == pytest.approx(-1.0, abs=1e-9) and v.power.n == len(WIDTHS)
    assert v.slope.slope == pytest.approx(0.0, abs=1e-9)  # the same grid shape on every rung


def test_a_best_at_the_grids_edge_is_left_out_of_both_fits(tmp_path):
    ref = Reference(build(tmp_path / "results"))
    # no norm at d = 128: the lowest rate tried now best (2.1 < GRID_LOSS), its edge open
    run = ref.root.parent / RUNG[128] / "lr" / f"no norm,lr={min(RATE_GRID)}"
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "final_eval_loss": 2.1}))
    ladder = Ladder(Reference(ref.root))
    v = variant_trend(ladder, "no norm")
    assert 128 not in v.best and "open edge" in v.why[128] and v.power.n == 2
    c = read(ladder, F11).cells[128]
    assert not c.fitted and "open edge" in c.why


def test_a_grid_lacking_a_rate_of_the_design_is_not_run_yet(linear, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(linear.parent, results)
    shutil.rmtree(results / RUNG[32] / "lr" / f"no norm,lr={RATE_GRID[0]}")
    ladder = Ladder(Reference(results / "reference"))
    c = read(ladder, F11).cells[32]
    assert c.missing == [f"`lr, best`: no norm lacks lr {RATE_GRID[0]:g} seed 0"]
    assert variant_trend(ladder, "no norm").lacking == {32: f"lr {RATE_GRID[0]:g} seed 0"}


def test_a_clipped_axis_marks_the_clipped_interval(tmp_path):
    ref = Reference(build(tmp_path / "results", diverged=(128, 1)))
    fig = ladder_figures.loss_by_width(Ladder(ref))
    ax = fig.axes[0]
    clipped = [a for a in ax.texts if a.get_gid() == ladder_figures.CLIPPED]
    assert [a.get_text() for a in clipped] == ["∞"]  # no norm at d = 128: mean and top infinite
    assert clipped[0].xy[1] == pytest.approx(ax.get_ylim()[1])  # drawn to the edge
    assert ax.get_ylim()[1] < BASELINES["test"]["unigram"] + 2 * ladder_figures.AXIS_CLIP
    # paired, the diverged seed reads as the unigram loss: a finite interval ~1.3 nats each side
    # of its mean, clipped AXIS_CLIP beyond the outermost mean, both ends printed
    ladder = Ladder(ref)
    ci = read(ladder, F11).cells[128].ci
    gap = ladder_figures.gap_by_width(ladder).axes[0]
    texts = [a.get_text() for a in gap.texts if a.get_gid() == ladder_figures.CLIPPED]
    assert sorted(texts) == sorted([f"{ci.lo:.3g}", f"{ci.hi:.3g}"])
    assert gap.get_ylim()[1] < ci.mean + 2 * ladder_figures.AXIS_CLIP < ci.hi


def test_draw_interval_clips_a_finite_end_beyond_the_axis():
    from trainer.atomic import subplots
    from trainer.results.metrics import interval

    iv = interval([0.1, 0.2, 0.9])  # mean 0.4, 95 % -0.67 … 1.47
    fig, ax = subplots()
    ladder_figures.draw_interval(ax, 0.0, iv, (-1.0, 1.0), "k", "o")
    clipped = [a for a in ax.texts if a.get_gid() == ladder_figures.CLIPPED]
    assert [a.get_text() for a in clipped] == [f"{iv.hi:.3g}"] and clipped[0].xy == (0.0, 1.0)


def test_a_missing_rung_reads_not_run_yet(tmp_path):
    ref = Reference(build(tmp_path / "results", widths=(64,)))
    r = read(Ladder(ref), F11)
    assert r.fit is None and r.cells[32].missing == ["not run yet"] and r.fitted == [64]
    text = ladder_page.ladder_section(ref)
    row = next(line for line in text if line.startswith("| [F11]"))
    assert row.count("not run yet") == 4  # d = 32, d = 128, d = 256 and the slope
    assert "needs two rungs with the runs (has d = 64)" in row
    assert "d = 32 `results/ladder/d32` (not run yet)" in "\n".join(text)


def test_a_rung_with_runs_names_what_it_lacks(linear):
    text = "\n".join(ladder_page.ladder_section(Reference(linear)))
    assert "- d = 128: `lr, best`: BN" in text and "(F3)" in text
    assert ladder_page.NOT_DESIGNED in text  # F3's variants never run at d = 256


# ---- the d = 32 sweep specs ----------------------------------------------------------------

def _signature(values: dict, default) -> tuple:
    """The keys any ladder variant sets, each the variant's value or the config's default."""
    keys = sorted({k for v in (*HEADLINE_VARIANTS.values(), *SCALE_VARIANTS.values()) for k in v})
    return tuple((k, str(values.get(k, default(k))).lower()) for k in keys)


def test_the_d32_specs_run_every_variant_at_every_rate_then_its_seeds():
    from trainer.config import load_config
    from trainer.sweep import expand_variants, load_spec

    specs = ROOT / "configs/sweeps/ladder/d32"
    base_cfg = load_config(ROOT / "configs/settings/d32.yaml")

    def of(cfg):
        return lambda k: cfg.model.get(k, cfg.train.get(k))

    want = {_signature(v, of(base_cfg)): name
            for name, v in {**HEADLINE_VARIANTS, **SCALE_VARIANTS}.items()}
    grid: dict = {}
    best: dict = {}
    for part in ("lr", "lr_dyt", "lr_scale", "best", "best_dyt", "best_scale"):
        spec, base = load_spec(specs / f"{part}.yaml")
        assert base == (ROOT / "configs/settings/d32.yaml").resolve()
        if part.startswith("best"):
            assert spec.best_lr["reuse"] is True
            grid_group = "scale_lr" if part == "best_scale" else "lr"
            assert (specs / spec.best_lr["from"]).resolve() == ROOT / "results/ladder/d32" / grid_group
        for v in expand_variants(spec):
            cfg = load_config(base, v.overrides)
            assert (cfg.model.dim, cfg.model.num_heads) == (LADDER_WIDTHS[0], LADDER_HEADS)
            assert cfg.model.ffn_dim == 4 * LADDER_WIDTHS[0]
            name = want[_signature({}, of(cfg))]  # KeyError: a run of no ladder variant
            (grid if part.startswith("lr") else best).setdefault(name, []).append(
                (cfg.train.lr, cfg.train.seed))
    assert set(grid) == set(best) == set(want.values())
    assert all(sorted(runs) == [(lr, 0) for lr in RATE_GRID] for runs in grid.values())
    assert all(sorted(s for _, s in runs) == list(range(MIN_SEEDS)) for runs in best.values())
    assert sum(map(len, grid.values())) == len(want) * len(RATE_GRID)
    assert sum(map(len, best.values())) == len(want) * MIN_SEEDS


def test_every_trend_reads_variants_the_ladder_runs():
    names = {**HEADLINE_VARIANTS, **SCALE_VARIANTS}
    assert all(t.a in names and (t.b is None or t.b in names) for t in TRENDS)
    assert [t.id for t in TRENDS] == ["S", "F3", "F4", "F5", "F6", "F11", "F14", "I1(c)",
                                      "I1(e)", "I2(d)", "I3(b)", "I4(b)"]
    assert ladder_trends.ols([(1.0, 2.0), (1.0, 3.0)]) is None  # one width: no slope


def test_the_new_variants_are_read_from_groups_of_their_own_off_rung_64(tmp_path):
    """QK-norm and z-loss share norm, residual, placement and warm-up with Pre-LN: in a rung's
    ``lr`` the headline lookups would take them for Pre-LN, so they live in ``scale_lr``."""
    from trainer.findings.ladder import SCALE_GROUPS, source
    from trainer.findings.reference import Reference

    ref = Reference(tmp_path)
    for width in (32, 128, 256):
        for name in SCALE_VARIANTS:
            src = source(ref, width, name)
            assert (src.grid, src.best) == SCALE_GROUPS
        assert (source(ref, width, "Pre-LN").grid, source(ref, width, "Pre-LN").best) == ("lr", "best")


def test_f6_at_d64_reads_both_post_ln_arms_where_the_f6_claim_does(tmp_path):
    """One comparison, one reading: F6's trend cell at d = 64 takes Post-LN with and without
    warm-up from ``scale/deep_lr`` (as ``dynamics.f6`` does at the reference); elsewhere, and
    for Post-LN against a headline variant, ``lr``/``best``."""
    from trainer.findings.ladder import source
    from trainer.findings.reference import Reference

    ref = Reference(tmp_path)
    arms = ("Post-LN", "Post-LN, no warm-up")
    for name, partner in (arms, arms[::-1]):
        src = source(ref, 64, name, partner)
        assert (src.ref.root.name, src.grid, src.best) == ("scale", "deep_lr", "deep_lr")
        assert (source(ref, 128, name, partner).grid, source(ref, 128, name, partner).best) == (
            "lr", "best")
    assert source(ref, 64, "Post-LN, no warm-up", "Pre-LN").grid == "lr"
