"""The model-size ladder (pre-registration 3, section 3): the d = 32 sweep specs
(configs/sweeps/ladder/d32/) run what thresholds.py fixes: every variant of HEADLINE_VARIANTS and
SCALE_VARIANTS at every rate of RATE_GRID on seed 0, then MIN_SEEDS seeds at its best rate, at
width LADDER_WIDTHS[0] with LADDER_HEADS heads."""

from pathlib import Path

from trainer.findings.thresholds import (HEADLINE_VARIANTS, LADDER_HEADS, LADDER_WIDTHS,
                                         MIN_SEEDS, RATE_GRID, SCALE_VARIANTS)

ROOT = Path(__file__).resolve().parents[1]


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
            assert (specs / spec.best_lr["from"]).resolve() == ROOT / "results/ladder/d32/lr"
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
