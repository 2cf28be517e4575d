"""Typed, strict experiment configuration.

Layers, lowest first: the dataclass defaults below -> a YAML file (a small diff, may name a
``base:`` file it extends) -> dotted CLI overrides (``model.norm=batch``). OmegaConf does the
merging and type checking; this module turns its errors into one line that names the bad key (or
value) and the closest valid one, and ``validate`` rejects combinations that mean nothing.

Fields that take one of a fixed set of names are typed by a ``Choice`` enum (trainer/choices.py):
OmegaConf rejects any other value, the loaded config holds the member, which is also its plain
string (``cfg.model.norm == "layer"``), and YAML, ``to_dict`` and the run directory hold the string.
``resolve`` fills in what the lab decides (``data.format=auto``); ``validate`` only checks.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Optional, get_type_hints

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from trainer.choices import (Choice, ConfigError, Decay, EmbeddedCorpus, Format, Init, Norm,
                             Placement, QKNorm, Residual, Source, Strategy)
from trainer.config_rules import (DYT_ALPHAS, MIN_VOCAB, check_dyt_alphas, check_norm,
                                  check_residual, infer_format, resolve, validate)

__all__ = ["CHOICES", "Choice", "ConfigError", "Decay", "ExperimentConfig", "Format", "Init",
           "Norm", "Placement", "QKNorm", "Residual", "Source", "Strategy", "check_dyt_alphas", "check_norm",
           "check_residual", "infer_format", "load_config", "MIN_VOCAB",
           "network_key", "resolve", "to_dict", "to_yaml", "validate"]




@dataclass
class ModelConfig:
    # normalization in every block: a name of trainer.norm_names.NORM_TABLE, or a norm from
    # outside the lab, FILE.py:Class or package.module:Class (trainer/models/plugin.py)
    norm: str = "layer"
    # pre: h = x + F(N(x)) | post: h = N(x + F(x)) | peri: h = x + N_out(F(N_in(x))) (Peri-LN)
    # | output: h = x + N(F(x)) (OLMo 2); every placement but post adds a final norm
    placement: Placement = Placement.pre
    # true | false (no add op at all) | rezero (x + a*F, a init 0) | deepnorm (post only:
    # N(alpha*x + F), alpha = (2L)^(1/4), V/out/FFN init scaled by beta = (8L)^(-1/4); DeepNet)
    residual: Residual = Residual.true
    # a norm on queries and keys, per head over the head dimension, before q.k (QK-norm):
    # none | layer (LayerNorm, scale only; Dehghani et al. 2023) | rms (RMSNorm)
    qk_norm: QKNorm = QKNorm.none
    num_layers: int = 4  # number of Transformer blocks
    dim: int = 128  # width of the residual stream
    num_heads: int = 4  # attention heads (dim must divide evenly)
    ffn_dim: int = 512  # hidden width of the feed-forward sublayer
    dropout: float = 0.0  # dropout after attention and FFN (0 keeps probes exact)
    dyt_alpha: float = 0.5  # initial alpha of DyT: gamma * tanh(alpha * x) + beta
    # DyT's initial alpha per location (Zhu et al.'s LLaMA code sets one per location, e.g.
    # 0.8 / 0.2 / 0.2 at 7B); null: model.dyt_alpha. norm=dyt only; the final norm: pre only.
    dyt_alpha_attention: Optional[float] = None  # each block's attention norm (its first)
    dyt_alpha_ffn: Optional[float] = None  # each block's FFN norm (its second)
    dyt_alpha_final: Optional[float] = None  # the final norm before the head
    # A learnable scalar multiplying the input embeddings (token + position), initialised here
    # and never weight-decayed, as DyT's LLaMA code scales its token embedding; null: none.
    # 1 / (0.02 * sqrt(2)) = 35.36 puts the stream at std 1 at init (two N(0, 0.02) tables).
    embed_scale: Optional[float] = None
    norm_epsilon: float = 1e-5  # epsilon of every normalization layer
    bn_momentum: float = 0.99  # running-statistics momentum of the batch-norm variants
    # false: no learnable gain/bias (γ, β; RMSNorm's scale) in any norm, the final one included;
    # DyT keeps its α, none is unaffected. LN then gives every token the norm sqrt(dim) (F10).
    norm_affine: bool = True
    head_bias: bool = True  # a bias on the vocabulary head (GPT-2 and LLaMA have none)
    init: Init = Init.normal  # normal: N(0, 0.02) | xavier: Glorot normal | scaled: GPT-2, out-proj / sqrt(2L)


@dataclass
class DataConfig:
    source: Source = Source.embedded  # embedded (a corpus inside a pinned package) | hub | files
    # source=embedded: wikipedia (gensim's article sample) | python (docutils' source code)
    corpus: EmbeddedCorpus = EmbeddedCorpus.wikipedia
    name: Optional[str] = None  # hub dataset name, e.g. wikitext
    config: Optional[str] = None  # hub dataset config, e.g. wikitext-2-raw-v1
    files: Optional[Any] = None  # local files: a path/glob, a list, or {split: path(s)}
    format: Format = Format.auto  # local file format: text | json | parquet | auto (from the extension)
    text_column: str = "text"  # column holding the text
    validation_fraction: float = 0.05  # held out when a source has no validation split
    test_fraction: float = 0.05  # held out when a source has no test split
    max_len: int = 256  # longest training sequence; longer texts are split into windows
    # The fewest lengths (multiples of 8) that keep padding <= 10 % on the embedded corpus;
    # each one is an XLA compilation, so short runs may prefer fewer (configs/reference.yaml: two).
    buckets: list[int] = field(
        default_factory=lambda: [16, 40, 64, 88, 112, 136, 160, 184, 216, 256])
    tokens_per_batch: int = 4096  # token budget of one batch: batch size = budget // bucket
    vocab_size: int = 8192  # BPE vocabulary size (trained on the train split, cached)
    eval_batches: int = 16  # validation batches used at each evaluation (0 = all)
    cache_dir: Optional[str] = None  # default: $NORMLAB_CACHE or ~/.cache/normlab


@dataclass
class TrainConfig:
    steps: int = 200  # optimizer steps
    lr: float = 1e-3  # peak learning rate (AdamW)
    warmup_steps: int = 20  # linear warm-up from 0 (0 = none)
    decay: Decay = Decay.cosine  # cosine | constant after warm-up
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.01  # decoupled, on weight matrices only (train/optimizer.py)
    clip_norm: float = 1.0  # global gradient-norm clipping (0 = off)
    seed: int = 0  # seeds parameters, data order and dropout
    eval_every: int = 50  # steps between evaluations (the last step is always evaluated)
    log_every: int = 10  # steps between training summaries
    checkpoint_every: int = 100  # steps between checkpoints (the last step always saves)
    loss_upper_bound: float = 1e4  # a loss above this counts as diverged
    # coefficient of the z-loss, z * mean(log Z^2) over real tokens, log Z = logsumexp(logits)
    # (PaLM: 1e-4); added to the loss that is differentiated, never to the loss that is reported
    z_loss: float = 0.0
    # validation prompts continued greedily (32 tokens) at each evaluation, written to the eval
    # run's Text tab (tag samples); 0 = off. Changes no training number.
    samples: int = 4


@dataclass
class RuntimeConfig:
    xla: bool = True  # compile train/eval steps with XLA (tf.function(jit_compile=True))
    strategy: Strategy = Strategy.auto  # auto | default | mirrored | multi_worker | tpu
    mixed_precision: bool = False  # bfloat16 compute on GPU/TPU; norms stay float32
    telemetry: bool = True  # per-block statistics in the train step
    # true: compile the AdamW update once for all bucket shapes, on dense gradients (a third of
    # the memory per shape; configs/base.yaml and every run in results/reference); false:
    # forward, backward and a sparse-embedding update in one program per shape, as the earlier
    # reference runs were made before this key existed. See make_train_step.
    shared_update: bool = False


@dataclass
class ExperimentConfig:
    name: str = "run"  # free-form label
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)


def _choice_fields(cls: type = ExperimentConfig, prefix: str = "") -> dict[str, type[Choice]]:
    out: dict[str, type[Choice]] = {}
    hints = get_type_hints(cls)
    for f in fields(cls):
        kind = hints[f.name]
        if is_dataclass(kind):
            out.update(_choice_fields(kind, f"{prefix}{f.name}."))
        elif isinstance(kind, type) and issubclass(kind, Choice):
            out[prefix + f.name] = kind
    return out


CHOICES: dict[str, type[Choice]] = _choice_fields()  # "model.norm" -> Norm, for every Choice field


def _closest(key: str, valid: list[str], prefix: str = "") -> str:
    """'did you mean ...' with the closest of ``valid`` to ``key``, as a full dotted key."""
    match = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f"did you mean '{prefix}{match[0]}'?" if match else ""


def _one_line(err: OmegaConfBaseException, schema: DictConfig, origin: str) -> ConfigError:
    """Turn an OmegaConf error into one line naming the key and the closest valid key or value."""
    full_key = getattr(err, "full_key", None) or ""
    if isinstance(err, ConfigKeyError):  # a key the schema does not have
        parent_path, _, leaf = full_key.rpartition(".")
        parent = OmegaConf.select(schema, parent_path) if parent_path else schema
        valid = [str(k) for k in parent.keys()] if isinstance(parent, DictConfig) else []
        prefix = f"{parent_path}." if parent_path else ""
        hint = (_closest(leaf, valid, prefix)
                or f"valid keys: {', '.join(prefix + k for k in valid)}")
        return ConfigError(f"{origin}: unknown config key '{full_key}'; {hint}")
    if isinstance(err, ValidationError) and full_key in CHOICES:  # a value outside the vocabulary
        value = getattr(err, "value", None)
        return ConfigError(f"{origin}: {CHOICES[full_key].unknown(value, full_key)}")
    return ConfigError(f"{origin}: bad value for '{full_key}': {str(err).splitlines()[0]}")


def _load_yaml(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[str, Any]]:
    """Read a YAML config (safe loader) and the chain of ``base:`` files it extends."""
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: 'base:' chain loops back to itself")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    chain: list[tuple[str, Any]] = []
    base = data.pop("base", None)
    if base is not None:
        chain += _load_yaml((path.parent / str(base)), seen + (path,))
    return chain + [(str(path), data)]


def _booleans_as_text(data: dict) -> dict:
    """YAML (and a dotted override) reads ``residual: true`` as a boolean; OmegaConf refuses a
    boolean for an Enum field, so a Choice field gets the boolean's text, which the Choice
    itself reads (``Residual._missing_``)."""
    for key in CHOICES:
        *path, leaf = key.split(".")
        parent = data
        for part in path:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and isinstance(parent.get(leaf), bool):
            parent[leaf] = str(parent[leaf])
    return data


def _merge(cfg: DictConfig, data: dict, schema: DictConfig, origin: str) -> DictConfig:
    try:
        return OmegaConf.merge(cfg, OmegaConf.create(_booleans_as_text(data)))
    except OmegaConfBaseException as e:
        raise _one_line(e, schema, origin) from None


def load_config(path: str | os.PathLike | None = None, overrides: list[str] = ()) -> DictConfig:
    """Defaults <- YAML file (and its bases) <- dotted overrides; strict, validated, read-only."""
    schema = OmegaConf.structured(ExperimentConfig)
    cfg = schema
    for origin, data in _load_yaml(Path(path)) if path else []:
        cfg = _merge(cfg, data, schema, origin)
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override '{item}' is not of the form key.path=value")
        origin = f"override '{item}'"
        try:
            data = OmegaConf.to_container(OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as e:
            raise _one_line(e, schema, origin) from None
        cfg = _merge(cfg, data, schema, origin)
    resolve(cfg)
    validate(cfg)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def network_key(cfg: DictConfig) -> str:
    """The config as YAML with ``name`` dropped (a label only), a per-location DyT alpha equal to
    ``model.dyt_alpha`` read as null and, for ``model.norm=none``, ``placement`` and
    ``norm_affine`` fixed: two configs with the same key train the same function
    from the same seed. ``sweep.dedupe`` drops a variant whose key an earlier one has.

    With ``model.norm=none`` there is no norm to place: pre ``x + F(x)`` and post ``x + F(x)``
    (and the final norm, identity) are one network, so ``placement`` is canonically ``pre``,
    and there is no γ/β to drop, so ``norm_affine`` is canonically ``true``.
    A per-location DyT alpha equal to ``model.dyt_alpha`` is canonically null (what null means).

    Nothing else is canonicalised: every other key is compared as written, even one the network
    ignores (``dyt_alpha`` with ``norm=layer``, ``bn_momentum`` with a norm that keeps no running
    statistics), so such configs get different keys although they train the same network.
    """
    data = to_dict(cfg)
    data.pop("name", None)
    for leaf in DYT_ALPHAS:
        if data["model"].get(leaf) == data["model"]["dyt_alpha"]:
            data["model"][leaf] = None
    if data["model"]["norm"] == Norm.none:
        data["model"]["placement"] = "pre"
        data["model"]["norm_affine"] = True
    return OmegaConf.to_yaml(OmegaConf.create(data))


def to_yaml(cfg: DictConfig) -> str:
    """The config as YAML; a Choice is written as its plain string."""
    return OmegaConf.to_yaml(cfg, resolve=True)


def to_dict(cfg: DictConfig) -> dict:
    """The config as plain Python values; a Choice becomes its plain string (its name)."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]
