"""A run's config values as words, and the keys that differ between runs: what tables, figures
and ``best_lr`` read from a run's config.yaml.

- ``value_of(run_or_cfg, key)``: the value of a dotted key as it reads in run names (``"true"``,
  ``"0.01"``, ``"layer"``).
- ``swept_keys(runs)``: the dotted keys whose values differ across runs (seed excluded), norm
  first, then residual, placement, then the rest in config order.

A key missing from a config (one written before the schema had it) reads as its schema default
(``trainer.config.ExperimentConfig``): the run ran with that value, so a key a newer config
merely spells out is never a difference between runs. A key the schema does not know reads as
``None``.
"""

from __future__ import annotations

from functools import lru_cache

from omegaconf import DictConfig, OmegaConf

PREFERRED = ("model.norm", "model.residual", "model.placement")


def _flat(cfg) -> dict[str, object]:
    """``{dotted key: value}`` of a config (OmegaConf or plain dict); lists become tuples."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    out: dict[str, object] = {}

    def walk(node, prefix):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value

    walk(cfg, "")
    return out


@lru_cache(maxsize=1)
def defaults() -> dict[str, object]:
    """Every schema key's default, dotted (``data.corpus`` -> ``wikipedia``)."""
    from trainer.config import ExperimentConfig

    return _flat(OmegaConf.structured(ExperimentConfig))


def _cfg(run_or_cfg):
    return getattr(run_or_cfg, "cfg", run_or_cfg)


def word(value) -> str:
    """Config values as they read in run names: ``True`` -> ``true``, ``0.01`` -> ``0.01``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def value_of(run_or_cfg, key: str) -> str:
    """The value of dotted ``key`` in a run's config, as a word (``"true"``, ``"0.01"``); a key
    the config lacks reads as its schema default."""
    cfg = _cfg(run_or_cfg)
    if isinstance(cfg, DictConfig):
        found = OmegaConf.select(cfg, key, default=_ABSENT)
    else:
        found = _flat(cfg).get(key, _ABSENT)
    return word(defaults().get(key) if found is _ABSENT else found)


_ABSENT = object()


def swept_keys(runs) -> list[str]:
    """Dotted config keys whose values differ across ``runs`` (``train.seed`` excluded), a key
    missing from a config read as its default.

    Order: norm, residual, placement, then the remaining keys in config order, so the
    first key is the natural panel axis. Empty for a single run or identical configs.
    """
    configs = [_flat(_cfg(r)) for r in runs]
    if not configs:
        return []
    order = list(dict.fromkeys(k for f in configs for k in f))
    flats = [{**defaults(), **f} for f in configs]
    differ = [k for k in order if k != "train.seed"
              and len({word(f.get(k)) for f in flats}) > 1]
    return [k for k in PREFERRED if k in differ] + [k for k in differ if k not in PREFERRED]
