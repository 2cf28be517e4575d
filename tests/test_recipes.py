"""The recipes table (trainer/findings/recipes.py): every variant is a config the lab builds,
with a source, what the lab follows and each deviation's reason; the table renders every row."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from trainer.config import load_config
from trainer.findings.recipes import COMMON, RECIPES, recipes_table

SMALL = ["model.num_layers=2", "model.dim=16", "model.num_heads=2", "model.ffn_dim=32"]
EXPECTED = {"Pre-LN", "Post-LN", "RMSNorm", "ReZero", "BatchNorm (naive)", "Masked BatchNorm",
            "DyT", "No norm", "QK-norm", "z-loss", "Peri-LN", "Output norm (OLMo 2)", "DeepNorm"}


def test_the_table_covers_the_variants_the_issue_names():
    assert set(RECIPES) == EXPECTED


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_is_a_config_the_lab_builds(name):
    from trainer.models import build_model

    recipe = RECIPES[name]
    cfg = load_config("configs/reference.yaml", [*recipe.overrides, *SMALL])
    model = build_model(cfg.model, 259, 16)
    for override in recipe.overrides:  # each override is what the built model (or run) holds
        key, _, value = override.partition("=")
        held = (getattr(model.config, key.removeprefix("model.")) if key.startswith("model.")
                else OmegaConf.select(cfg, key))
        assert str(held) == value or float(held) == float(value), override
    assert recipe.paper and recipe.follows and recipe.deviations
    assert recipe.code is None or recipe.code.startswith("https://github.com/")
    assert all(d.what and d.why for d in recipe.deviations)


def test_the_dyt_row_builds_the_authors_setup():
    from trainer.models import build_model

    cfg = load_config("configs/reference.yaml", [*RECIPES["DyT"].overrides, *SMALL])
    model = build_model(cfg.model, 259, 16)
    assert float(model.embed_scale) == pytest.approx(1 / (0.02 * 2 ** 0.5), rel=1e-3)
    assert float(model.blocks[0].attention_norm.alpha) == 1.0


def test_the_markdown_table_has_one_row_per_recipe_and_the_common_setting():
    table = recipes_table()
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(RECIPES)  # the header and one row each
    for recipe in RECIPES.values():
        row = next(r for r in rows if r.startswith(f"| {recipe.name} |"))
        assert row.count(" | ") == 5  # six cells: no unescaped | inside a cell
        assert all(d.why in row for d in recipe.deviations)
    assert all(d.what in table for d in COMMON)
