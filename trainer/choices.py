"""The config's vocabularies: one ``Choice`` enum per field that takes one of a fixed set of names.

They live here, apart from trainer.models and trainer.data, so that reading and validating a
config never imports TensorFlow. Each is the key set of the registry (or dispatch table) that
implements it, and that registry checks at import that it covers every member (the class
docstrings name it), so a name cannot be valid in the config and missing in the code.
"""

from __future__ import annotations

import difflib
import enum


class ConfigError(ValueError):
    """A bad config or override; the message is one line meant for the user."""


class Choice(str, enum.Enum):
    """A config value from a fixed vocabulary. Each member is also its plain string (its name):
    it compares and hashes equal to it, prints and serialises as it ("layer", never
    "Norm.layer"), so ``cfg.model.norm == "layer"`` holds and YAML round-trips unchanged."""

    __str__ = str.__str__
    __format__ = str.__format__

    @staticmethod
    def _generate_next_value_(name, start, count, last_values):
        return name

    @classmethod
    def unknown(cls, value, key: str) -> str:
        """The one-line message for a value outside the vocabulary, with the closest member."""
        valid = [m.value for m in cls]
        hint = difflib.get_close_matches(str(value), valid, n=1, cutoff=0.6)
        extra = f" (did you mean '{hint[0]}'?)" if hint else ""
        return f"unknown {key} '{value}'{extra}; valid: {', '.join(valid)}"

    @classmethod
    def require_keys(cls, table: dict, what: str) -> dict:
        """``table`` itself, once checked to be keyed by exactly the members: the config must not
        accept a name that no code implements, nor hide one that some code does."""
        if set(table) != set(cls):
            raise ImportError(f"{cls.__name__} and {what} differ: {sorted(set(cls) ^ set(table))}")
        return table

    @classmethod
    def parse(cls, value, key: str):
        """The member named ``value`` (a member or its string); a ConfigError naming ``key``,
        the value and the valid ones otherwise."""
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(cls.unknown(value, key)) from None


class Norm(Choice):
    """model.norm: keys of the norm registry, trainer.models.norms.NORMS."""
    layer = enum.auto()
    batch = enum.auto()
    masked_batch = enum.auto()
    sync_batch = enum.auto()
    rms = enum.auto()
    dyt = enum.auto()
    none = enum.auto()


class Placement(Choice):
    """model.placement: pre: h = x + F(N(x)) (+ final norm); post: h = N(x + F(x))."""
    pre = enum.auto()
    post = enum.auto()


class Residual(Choice):
    """model.residual: true | false (no add op at all) | rezero (x + a*F, a init 0). YAML writes
    the first two as booleans; the value is read case-insensitively (``_missing_``), and the
    loader turns YAML booleans into members before OmegaConf sees them."""
    true = enum.auto()
    false = enum.auto()
    rezero = enum.auto()

    @classmethod
    def _missing_(cls, value):
        return cls.__members__.get(str(value).strip().lower())


class Init(Choice):
    """model.init: the schemes of trainer.models.block.kernel_init."""
    normal = enum.auto()
    xavier = enum.auto()
    scaled = enum.auto()


class Source(Choice):
    """data.source: keys of trainer.data.sources.LOADERS."""
    embedded = enum.auto()
    hub = enum.auto()
    files = enum.auto()


class Format(Choice):
    """data.format: a local file format (a ``datasets`` builder name), or auto (resolved from the
    files' extensions by ``resolve``)."""
    auto = enum.auto()
    text = enum.auto()
    json = enum.auto()
    parquet = enum.auto()


class Strategy(Choice):
    """runtime.strategy: keys of trainer.train.strategy.STRATEGIES."""
    auto = enum.auto()
    default = enum.auto()
    mirrored = enum.auto()
    multi_worker = enum.auto()
    tpu = enum.auto()


class Decay(Choice):
    """train.decay: the learning rate after warm-up (trainer.train.loop.make_schedule)."""
    cosine = enum.auto()
    constant = enum.auto()
