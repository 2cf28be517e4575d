"""The config's vocabularies: one ``Choice`` enum per field that takes one of a fixed set of names.

They live here, apart from trainer.models and trainer.data, so that reading and validating a
config never imports TensorFlow. The class docstrings name the code that implements each.

``Norm``, ``Placement``, ``QKNorm``, ``Source``, ``EmbeddedCorpus`` and ``Strategy``
are the key sets of registries (``NORMS``, ``PLACEMENTS``, ``QK_NORMS``, ``LOADERS``,
``CORPORA``, ``STRATEGIES``) that check at import, by ``Choice.require_keys``, that they cover exactly the
members, so a name cannot be valid in the config and missing in the code. The others are read by
comparisons in the code that uses them, which nothing checks at import: ``Residual`` (the
blocks), ``Init`` (``kernel_init``), ``Decay`` (``make_schedule``) and ``Format`` (``resolve``,
the ``datasets`` builder).
"""

from __future__ import annotations

import difflib
import enum

from trainer.faults import ProjectError
from trainer.norm_names import NORM_TABLE


class ConfigError(ProjectError, ValueError):
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


def _choice(name: str, members: str, doc: str) -> type[Choice]:
    """A ``Choice`` enum of the space-separated ``members`` (each its own value)."""
    cls = Choice(name, members, module=__name__)
    cls.__doc__ = doc
    return cls


Norm = _choice("Norm", " ".join(NORM_TABLE),
               "The lab's own norms: the rows of trainer.norm_names.NORM_TABLE, which are the "
               "keys of the norm registry, trainer.models.norms.NORMS. model.norm also takes a "
               "norm from outside the lab (FILE.py:Class, package.module:Class).")
Placement = _choice("Placement", "pre post peri output",
                    "model.placement: pre: h = x + F(N(x)) (+ final norm); post: h = N(x + F(x)); "
                    "peri: h = x + N_out(F(N_in(x))) (+ final norm; Peri-LN, Gemma 2's sandwich); "
                    "output: h = x + N(F(x)) (+ final norm; OLMo 2's reordered norm). The table "
                    "is trainer.models.block.PLACEMENTS.")
QKNorm = _choice("QKNorm", "none layer rms",
                 "model.qk_norm: a norm on the queries and on the keys, per head over the head "
                 "dimension, before their dot product (trainer.models.attention.QK_NORMS).")
Init = _choice("Init", "normal xavier scaled",
               "model.init: the schemes of trainer.models.block.kernel_init.")
Source = _choice("Source", "embedded hub files",
                 "data.source: keys of trainer.data.sources.LOADERS.")
EmbeddedCorpus = _choice("EmbeddedCorpus", "wikipedia python",
                         "data.corpus: the text data.source=embedded reads, from a pinned package "
                         "(no network); keys of trainer.data.sources.CORPORA.")
Format = _choice("Format", "auto text json parquet",
                 "data.format: a local file format (a ``datasets`` builder name), or auto "
                 "(resolved from the files' extensions by ``resolve``).")
Strategy = _choice("Strategy", "auto default mirrored multi_worker tpu",
                   "runtime.strategy: keys of trainer.train.strategy.STRATEGIES.")
Decay = _choice("Decay", "cosine constant", "train.decay: the learning rate after warm-up "
                "(trainer.train.optimizer.make_schedule).")


class Residual(Choice):
    """model.residual: true | false (no add op at all) | rezero (x + a*F, a init 0) | deepnorm
    (post only: N(alpha*x + F), alpha and the init gain beta from the depth, DeepNet). YAML writes
    the first two as booleans; the value is read case-insensitively (``_missing_``), and the
    loader turns YAML booleans into members before OmegaConf sees them."""
    true = enum.auto()
    false = enum.auto()
    rezero = enum.auto()
    deepnorm = enum.auto()

    @classmethod
    def _missing_(cls, value):
        return cls.__members__.get(str(value).strip().lower())
