"""A run's config values and the keys that differ between runs (``trainer.results.config_values``):
a key missing from an older config reads as its schema default, so it never splits a legend,
a table or a rate curve; a value that really differs still does."""

from __future__ import annotations

import random

from omegaconf import OmegaConf

from tests.test_plots import _run
from trainer.results.config_values import swept_keys, value_of
from trainer.results.lr_plot import Encoding
from trainer.results.lr_sweep import lr_variants, variant_keys


def _runs(corpus_of_new: str | None) -> list:
    """The evaluate-norm figure's runs: baselines whose configs predate ``data.corpus`` and the
    user's norm, whose config spells it out (``corpus_of_new``; None: left out too)."""
    rng, runs = random.Random(0), []
    for norm in ("layer", "rms", "my_norm.py:PowerNorm"):
        for lr in (1e-3, 3e-3):
            run = _run({"model.norm": norm, "train.lr": lr}, 0, rng)
            if norm.endswith("PowerNorm") and corpus_of_new is not None:
                OmegaConf.update(run.cfg, "data.corpus", corpus_of_new)
            runs.append(run)
    return runs


def test_a_key_missing_from_older_configs_reads_as_its_default():
    old, new = _runs("wikipedia")[0], _runs("wikipedia")[-1]
    assert OmegaConf.select(old.cfg, "data.corpus") is None  # it predates the key
    assert value_of(old, "data.corpus") == value_of(new, "data.corpus") == "wikipedia"
    assert value_of(old, "no.such.key") == "None"  # a key the schema does not know


def test_the_default_spelled_out_is_not_a_split():
    runs = _runs("wikipedia")
    assert swept_keys(runs) == ["model.norm", "train.lr"] == swept_keys(_runs(None))
    variants = lr_variants(runs)
    assert variant_keys(runs) == ["model.norm"]
    assert Encoding(variants).style_keys == []  # one look per norm: no corpus in the legend


def test_a_value_that_differs_from_the_default_still_splits():
    runs = _runs("python")
    assert swept_keys(runs) == ["model.norm", "train.lr", "data.corpus"]
    assert Encoding(lr_variants(runs)).style_keys == ["data.corpus"]
