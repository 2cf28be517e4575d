"""The rules a loaded config must satisfy, and what the lab fills in (trainer/config.py applies them).

``resolve`` fills in what a config leaves to the lab (``data.format=auto``); ``validate`` rejects
values and combinations that mean nothing, one ConfigError line each, and changes nothing. The
``check_*`` rules are also applied where a model is built from a bare ``ModelConfig``
(trainer/models/block.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from trainer.choices import ConfigError, EmbeddedCorpus, Format, Norm, Placement, Residual, Source
from trainer.norm_names import plugin_target

MIN_VOCAB = 3 + 256  # [PAD] [BOS] [EOS] + the byte alphabet of byte-level BPE


# data.format=auto: the local files' extension decides (compressed files by the inner one)
FORMAT_BY_EXTENSION = {".txt": Format.text, ".text": Format.text, ".md": Format.text,
                       ".json": Format.json, ".jsonl": Format.json, ".ndjson": Format.json,
                       ".parquet": Format.parquet}


def infer_format(files: Any) -> Format:
    """The file format of ``data.files`` (a path/glob, a list, or {split: path(s)}) from its
    extensions; one clear error when they are unknown or disagree."""
    if OmegaConf.is_config(files):
        files = OmegaConf.to_container(files, resolve=True)
    items = files.values() if isinstance(files, dict) else [files]
    paths = [str(x) for item in items for x in ([item] if isinstance(item, (str, os.PathLike))
                                                 else (item or []))]
    found = set()
    for path in paths:
        suffixes = [x.lower() for x in Path(path).suffixes]
        if suffixes and suffixes[-1] in (".gz", ".bz2", ".xz", ".zst"):
            suffixes = suffixes[:-1]
        fmt = FORMAT_BY_EXTENSION.get(suffixes[-1] if suffixes else "")
        if fmt is None:
            concrete = ", ".join(f for f in Format if f != Format.auto)
            raise ConfigError(f"data.format=auto cannot tell the format of '{path}' from its "
                              f"extension; set data.format to one of {concrete}")
        found.add(fmt)
    if len(found) > 1:
        raise ConfigError(f"data.files mix formats ({', '.join(sorted(found))}); set data.format")
    return found.pop() if found else Format.text


def resolve(cfg: DictConfig) -> None:
    """Fill in what a config leaves to the lab (the run directory records the result):
    ``data.format=auto`` as the files' format (``text`` for the embedded corpus and hub
    datasets, which do not use it)."""
    if cfg.data.format == Format.auto:
        cfg.data.format = (infer_format(cfg.data.files) if cfg.data.source == Source.files
                           else Format.text)


def check_residual(placement: str, residual: str, norm: str = Norm.layer) -> None:
    """The rules joining placement, residual and norm; ``validate`` and ``Block`` both apply
    them: ReZero gates a branch that a norm must not renormalise (not post), and DeepNorm is
    Post-LN's up-weighted residual (post only, with a norm)."""
    residual = Residual.parse(residual, "model.residual")
    placement = Placement.parse(placement, "model.placement")
    if residual == Residual.rezero and placement == Placement.post:
        raise ConfigError("model.residual=rezero with model.placement=post means nothing: "
                          "post-norm renormalizes x + a*F, so ReZero's gated identity at init is "
                          "lost; use placement=pre")
    if residual == Residual.deepnorm and placement != Placement.post:
        raise ConfigError(f"model.residual=deepnorm with model.placement={placement} means "
                          f"nothing: DeepNorm is post-norm's N(alpha*x + F(x)); use placement=post")
    if residual == Residual.deepnorm and str(norm) == Norm.none:
        raise ConfigError("model.residual=deepnorm with model.norm=none means nothing: without "
                          "the norm, alpha*x + F(x) grows by alpha every block; pick a norm")


def check_norm(value) -> str:
    """``model.norm`` as a plain string: one of the lab's norms, or the syntax of a norm from
    outside the lab (``FILE.py:Class``, ``package.module:Class``; whether it loads and honours
    the norm contract is checked with TensorFlow, before training: trainer/models/plugin.py).
    One ConfigError line otherwise, listing the valid names."""
    value = str(value)
    if value in Norm.__members__ or plugin_target(value):
        return value
    raise ConfigError(f"{Norm.unknown(value, 'model.norm')}; or a norm from outside the lab: "
                      f"FILE.py:Class or package.module:Class")


DYT_ALPHAS = ("dyt_alpha_attention", "dyt_alpha_ffn", "dyt_alpha_final")  # per location


def check_dyt_alphas(m) -> None:
    """The per-location DyT alphas: positive, only with ``norm=dyt``, and the final norm's only
    where there is one (pre placement); ``validate`` and ``model_config`` both apply it."""
    for leaf in DYT_ALPHAS:
        value = getattr(m, leaf)
        if value is None:
            continue
        if m.norm != Norm.dyt:
            raise ConfigError(f"model.{leaf} means nothing with model.norm={m.norm}: it sets the "
                              f"initial alpha of DyT layers; use model.norm=dyt or leave it null")
        if leaf == "dyt_alpha_final" and m.placement == Placement.post:
            raise ConfigError("model.dyt_alpha_final means nothing with model.placement=post: "
                              "post-norm has no final norm; leave it null")
        if not value > 0:
            raise ConfigError(f"model.{leaf} must be > 0, got {value}")


def validate(cfg: DictConfig) -> None:
    """Reject values and combinations that mean nothing, one line each (changes nothing)."""
    m, d, t = cfg.model, cfg.data, cfg.train

    def positive(key: str, value: float) -> None:
        if not value > 0:
            raise ConfigError(f"{key} must be > 0, got {value}")

    for key in ("model.num_layers", "model.dim", "model.num_heads", "model.ffn_dim",
                "data.max_len", "data.tokens_per_batch", "train.steps", "train.lr",
                "train.eval_every", "train.log_every", "train.checkpoint_every"):
        positive(key, OmegaConf.select(cfg, key))
    if m.dim % m.num_heads:
        raise ConfigError(f"model.dim ({m.dim}) must be divisible by model.num_heads ({m.num_heads})")
    if not 0 <= m.dropout < 1:
        raise ConfigError(f"model.dropout must be in [0, 1), got {m.dropout}")
    check_norm(m.norm)
    check_residual(m.placement, m.residual, m.norm)
    check_dyt_alphas(m)
    if m.embed_scale is not None:
        positive("model.embed_scale", m.embed_scale)
    if d.vocab_size < MIN_VOCAB:
        raise ConfigError(f"data.vocab_size must be >= {MIN_VOCAB} (3 special tokens + 256 byte "
                          f"symbols of byte-level BPE), got {d.vocab_size}")
    buckets = list(d.buckets)
    if not buckets or buckets != sorted(set(buckets)) or buckets[0] < 2:
        raise ConfigError(f"data.buckets must be increasing lengths >= 2, got {buckets}")
    if buckets[-1] != d.max_len:
        raise ConfigError(f"the largest of data.buckets ({buckets[-1]}) must equal data.max_len ({d.max_len})")
    if d.tokens_per_batch < d.max_len:
        raise ConfigError(f"data.tokens_per_batch ({d.tokens_per_batch}) must hold at least one "
                          f"sequence of data.max_len ({d.max_len})")
    if d.source == Source.hub and not d.name:
        raise ConfigError("data.source=hub needs data.name (a Hugging Face dataset name)")
    if d.corpus != EmbeddedCorpus.wikipedia and d.source != Source.embedded:
        raise ConfigError(f"data.corpus={d.corpus} needs data.source=embedded (data.source="
                          f"{d.source} reads its own text)")
    if d.source == Source.files and not d.files:
        raise ConfigError("data.source=files needs data.files (a path, a list, or {split: path})")
    for key in ("data.validation_fraction", "data.test_fraction"):
        if not 0 <= OmegaConf.select(cfg, key) < 0.5:
            raise ConfigError(f"{key} must be in [0, 0.5)")
    if t.warmup_steps < 0 or t.warmup_steps > t.steps:
        raise ConfigError(f"train.warmup_steps must be in [0, train.steps], got {t.warmup_steps}")
    if t.samples < 0:
        raise ConfigError(f"train.samples must be >= 0 (0 = off), got {t.samples}")
    if t.clip_norm < 0 or t.weight_decay < 0 or t.z_loss < 0:
        raise ConfigError("train.clip_norm, train.weight_decay and train.z_loss must be >= 0")
