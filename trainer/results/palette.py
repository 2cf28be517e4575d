"""One palette and one set of short labels for every figure and table of a sweep.

- ``NORM_COLORS``, ``NORM_SHORT``, ``norm_color``: each norm's colour and short label, read from its
  row of the one norm table (``trainer/norm_names.py``), so "LayerNorm is blue" holds in every
  figure; a norm from outside the lab gets one outside colour and its class name.
- ``Sweep(runs)``: the layout of one sweep's figures from its swept keys
  (``trainer.results.config_values.swept_keys``, where a run's config values are read): the
  first is the panel axis of the small multiples, the second the colour (shade) axis, the
  others the line style.
- ``short_label(run_or_cfg, keys)``: ``LN · res · pre`` instead of
  ``norm=layer,residual=true,placement=pre``; ``key_caption(keys)`` spells the abbreviations out
  once, for a figure caption or a table note.
"""

from __future__ import annotations

import colorsys
import itertools
from dataclasses import dataclass

from matplotlib.colors import to_rgb

from trainer.norm_names import NORM_TABLE, row
from trainer.results.config_values import swept_keys, value_of

# Every norm's colour and short label come from its row of the one norm table (trainer/norm_names.py);
# these are its columns, keyed by norm name, for the figures that draw the lab's own norms.
NORM_COLORS = {name: r.color for name, r in NORM_TABLE.items()}
NORM_SHORT = {name: r.short for name, r in NORM_TABLE.items()}

# A log axis cannot draw 0, and a per-token norm's invariance deltas are exactly 0: every figure
# draws 0 (and float noise below it) at this floor and says so on the axis.
LOG_AXIS_FLOOR = 1e-9

# Keys whose values read as words: value -> short word.
VALUE_SHORT = {
    "model.norm": NORM_SHORT,
    "model.residual": {"true": "res", "false": "no-res", "rezero": "rezero"},
    "model.placement": {"pre": "pre", "post": "post"},
    "runtime.mixed_precision": {"true": "bf16", "false": "fp32"},
    "model.norm_affine": {"true": "γβ", "false": "no-γβ"},
}
# Numeric keys: prefix + value (``wu20``, ``lr0.01``, ``L6``).
KEY_SHORT = {
    "train.warmup_steps": "wu", "train.lr": "lr", "train.clip_norm": "clip",
    "train.weight_decay": "wd", "train.steps": "steps", "train.decay": "decay",
    "model.num_layers": "L", "model.dim": "d", "model.num_heads": "h", "model.ffn_dim": "ffn",
    "model.dropout": "drop", "model.dyt_alpha": "α", "model.bn_momentum": "mom",
    "data.tokens_per_batch": "tok", "data.max_len": "len", "data.vocab_size": "V",
}
SEPARATOR = " · "


def short_value(key: str, value: str) -> str:
    """One value of one key, abbreviated: ``("model.norm", "layer")`` -> ``LN``."""
    if key == "model.norm":  # a norm from outside the lab reads as its class name
        return row(value).short
    words = VALUE_SHORT.get(key)
    if words is not None:
        return words.get(value, value)
    return f"{KEY_SHORT.get(key, key.rsplit('.', 1)[-1] + '=')}{value}"


def short_label(run_or_cfg, swept_keys: list[str]) -> str:
    """``LN · res · pre``: the run's values of the swept keys, abbreviated, in key order.

    With no swept keys (a single run) the label is the run's norm (``LN``).
    """
    keys = list(swept_keys) or ["model.norm"]
    return SEPARATOR.join(short_value(k, value_of(run_or_cfg, k)) for k in keys)


def key_caption(keys: list[str], runs=()) -> str:
    """The abbreviations used by :func:`short_label` for ``keys``, spelled out once.

    With ``runs`` only the values that occur in them are listed (no legend for absent norms).
    """
    present = {k: {value_of(r, k) for r in runs} for k in keys} if runs else {}
    parts = []
    for key in keys or ["model.norm"]:
        words = VALUE_SHORT.get(key)
        if words is not None:
            seen = present.get(key, set(words))
            parts.append(f"{key}: " + ", ".join(s if s == v else f"{s} = {v}"
                                                for v, s in words.items() if v in seen))
        else:
            parts.append(f"{KEY_SHORT.get(key, key.rsplit('.', 1)[-1] + '=')}N = {key} N")
    return "; ".join(parts)


def norm_color(norm: str) -> str:
    """The project-wide colour of a norm name (``trainer.norm_names``)."""
    return row(norm).color


def shades(color, n: int) -> list[tuple[float, float, float]]:
    """``n`` clearly different lightnesses of one hue, dark to light (one colour when n == 1).

    Inside a per-norm panel the colour axis is drawn as shades of the norm's own colour, so
    the norm keeps its colour everywhere and a second axis still reads as colour.
    """
    h, lum, s = colorsys.rgb_to_hls(*to_rgb(color))
    if n <= 1:
        return [to_rgb(color)]
    lo, hi = 0.30, 0.72  # darker than the base hue down to a light tint still visible on white
    return [colorsys.hls_to_rgb(h, lo + (hi - lo) * i / (n - 1), s) for i in range(n)]


# ---- the layout every figure of one sweep shares ------------------------------------------------

LINESTYLES = ("-", "--", ":", "-.")
# Markers of lines, one home for every figure: "^" and "x" are never among them (they mark
# off-scale points, loss spikes and diverged runs in ``lr_plot`` and ``plots``).
MARKERS = ("o", "s", "D", "v", "P", "h", "*", "X")
NEUTRAL = "#555555"  # legend swatches for shades when each panel has its own hue


def combo_look(i: int) -> tuple[str, str | None]:
    """Line style and marker of a sweep's ``i``-th style combination: the line styles plain,
    then each again with the next of ``MARKERS``."""
    n = len(LINESTYLES)
    return LINESTYLES[i % n], None if i < n else MARKERS[(i // n - 1) % len(MARKERS)]


def _ordered(key: str, values) -> list[str]:
    """Values in reading order: known words in their natural order, numbers ascending."""
    values = set(values)
    known = [v for v in VALUE_SHORT.get(key, NORM_COLORS if key == "model.norm" else {})
             if v in values]
    rest = values - set(known)
    try:
        rest = sorted(rest, key=float)
    except ValueError:
        rest = sorted(rest)
    return known + list(rest)


@dataclass
class Variant:
    """One variant (its seeds) and how it is drawn: panel, colour, line style, short label."""

    name: str
    label: str
    runs: list
    panel: str
    color: tuple
    dash: str
    marker: str | None


class Sweep:
    """Runs grouped into variants and laid out from the swept keys.

    First swept key: one panel per value (only when at least two keys are swept, otherwise
    one panel). Second key: colour, as shades of each norm's ``NORM_COLORS`` hue (a sweep over
    the norm alone: the norm's own colour). Further keys: line style, then markers. So every
    variant gets one (colour, style) pair, distinct within its panel.
    """

    def __init__(self, runs):
        runs = sorted(runs, key=lambda r: (r.variant, r.seed))
        self.runs = runs
        self.keys = keys = swept_keys(runs)
        self.panel_key = keys[0] if len(keys) >= 2 else None
        self.color_key = keys[1] if len(keys) >= 2 else (
            keys[0] if keys and keys[0] != "model.norm" else None)
        self.style_keys = keys[2:]
        order = {k: _ordered(k, (value_of(r, k) for r in runs)) for k in keys}
        self._order = order
        combos = list(itertools.product(*(order[k] for k in self.style_keys)))
        groups: dict[str, list] = {}
        for run in runs:
            groups.setdefault(run.variant, []).append(run)
        variants, sort_keys = [], {}
        for name, members in groups.items():
            first = members[0]
            vals = {k: value_of(first, k) for k in keys}
            hue = norm_color(value_of(first, "model.norm"))
            color = to_rgb(hue)
            if self.color_key:
                levels = order[self.color_key]
                color = shades(hue, len(levels))[levels.index(vals[self.color_key])]
            style = combos.index(tuple(vals[k] for k in self.style_keys))
            panel = (short_value(self.panel_key, vals[self.panel_key]) if self.panel_key
                     else short_label(first, keys) if len(groups) == 1 else "")
            variants.append(Variant(name, short_label(first, keys), members, panel, color,
                                    *combo_look(style)))
            sort_keys[name] = tuple(order[k].index(vals[k]) for k in keys)
        self.variants = sorted(variants, key=lambda v: sort_keys[v.name])
        self.panels = list(dict.fromkeys(v.panel for v in self.variants)) or [""]
        self.max_seeds = max((len(v.runs) for v in self.variants), default=0)

    def variants_in(self, panel: str) -> list[Variant]:
        """The variants drawn in one panel, in reading order."""
        return [v for v in self.variants if v.panel == panel]

    def panel_color(self, panel: str):
        """Panel titles that name a norm (``LN``) are written in the norm's colour."""
        raw = {short_value("model.norm", n): n for n in NORM_COLORS}.get(panel)
        return norm_color(raw) if raw else "black"

    def legend_handles(self) -> list:
        """Legend entries explaining the encoding (not one entry per variant: it scales)."""
        from matplotlib.lines import Line2D

        def header(text):
            return Line2D([], [], ls="none", label=text)

        out = []
        if self.color_key:
            levels = self._order[self.color_key]
            many_hues = len({value_of(r, "model.norm") for r in self.runs}) > 1
            base = NEUTRAL if many_hues else norm_color(value_of(self.runs[0], "model.norm"))
            out.append(header(f"colour{' shade' if many_hues else ''}: {self.color_key}"))
            out += [Line2D([], [], color=c, lw=3, label=short_value(self.color_key, v))
                    for v, c in zip(levels, shades(base, len(levels)))]
        elif self.keys == ["model.norm"]:
            out.append(header("colour: model.norm"))
            out += [Line2D([], [], color=norm_color(v), lw=3, label=short_value("model.norm", v))
                    for v in self._order["model.norm"]]
        if self.style_keys:
            out.append(header("line: " + ", ".join(self.style_keys)))
            combos = itertools.product(*(self._order[k] for k in self.style_keys))
            for i, combo in enumerate(combos):
                dash, marker = combo_look(i)
                out.append(Line2D([], [], color="black", lw=1.5, ls=dash, marker=marker,
                                  label=SEPARATOR.join(short_value(k, v) for k, v in
                                                       zip(self.style_keys, combo))))
        return out

    def caption(self) -> str:
        """The short labels spelled out (once per figure)."""
        if not self.runs:
            return "No runs."
        if not self.keys:
            return "One variant: no config key other than the seed differs between the runs."
        return "Labels: " + key_caption(self.keys, self.runs) + "."
