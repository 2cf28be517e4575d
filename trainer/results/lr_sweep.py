"""Learning-rate sweeps: every variant's loss-vs-rate curve, its best rate and LR sensitivity.

A results group whose runs vary ``train.lr`` is read as one curve per *variant*. Every rule
used on such a group is defined here, once; the tables, ``plots/lr_sensitivity.png``, the sweep
spec's ``best_lr:`` and the claims all read these definitions:

- **variant**: the runs whose configs agree on every key that differs across the group, except
  ``train.lr`` and ``train.seed`` (:func:`variant_keys`).
- **final loss at a rate**: ``summary.json`` ``final_eval_loss`` (the validation split); a
  diverged run counts as +inf. With several seeds at one rate it is the **mean over the seeds**
  that finished (one diverged seed makes it +inf). Unfinished runs are left out; a rate none of
  whose runs finished is listed, but not *tried* (:func:`rate_point`).
- **loss at init**: the eval curve's ``loss`` at step 0, mean over the same seeds.
- **trains**: the final loss lies below the group's bigram baseline (``baselines.json``);
  unknown (None) without baselines.
- **best rate**: the lowest final loss; a tie goes to the lower rate (:func:`best_point`).
  No best rate when every rate tried diverged.
- **LR sensitivity** (Wortsman et al. 2023, *Small-scale proxies for large-scale Transformer
  training instabilities*): the mean over the rates tried of ``min(final loss, loss at init) −
  best loss`` (:func:`lr_sensitivity`); a diverged rate thus costs the loss at init, not +inf.
- **edge**: the best rate is the lowest or the highest rate tried (or the only one), so the
  optimum may lie outside the grid (:func:`edge_of`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from trainer import rundir
from trainer.atomic import write_csv, write_text

from trainer.results.baselines import read_run_baselines
from trainer.results.metrics import final_loss, finite, mean
from trainer.results.palette import _ordered, short_label, swept_keys, value_of
from trainer.results.run import group_status, load_runs

LR_KEY = "train.lr"


def variant_keys(runs) -> list[str]:
    """The keys that tell the variants of ``runs`` apart: every differing key but lr and seed."""
    return [k for k in swept_keys(runs) if k != LR_KEY]


def varies_lr(runs) -> bool:
    """Whether ``runs`` are a learning-rate sweep: some variant was trained at more than one
    rate. A group whose variants each ran at its own single rate (a best-rate sub-sweep) is
    not one: its "loss vs rate" would be one point per variant."""
    return any(len({float(r.cfg.train.lr) for r in members}) > 1
               for members in _by_variant(runs, variant_keys(runs)).values())


def _by_variant(runs, keys: list[str]) -> dict[tuple, list]:
    """``runs`` grouped by their values of ``keys`` (see :func:`variant_keys`)."""
    groups: dict[tuple, list] = {}
    for run in runs:
        groups.setdefault(tuple(value_of(run, k) for k in keys), []).append(run)
    return groups


def rate_step(lr: float) -> int:
    """A rate's step on the √10 lattice, in half-decades (1e-3 is -6): the lab's grids round one
    step two ways (``RATE_GRID``'s 0.003; ×/÷ ``RATE_STEP`` from 3e-4 gives 0.000948, 0.00316),
    and both spellings are the same step when two grids are compared rate by rate."""
    return round(2 * math.log10(lr))


def shared_steps(*rates) -> set[int]:
    """The √10-lattice steps (``rate_step``) that every one of ``rates`` (iterables of rates)
    holds: the rates two grids both ran."""
    return set.intersection(*({rate_step(x) for x in r} for r in rates))


def init_loss(run) -> float | None:
    """The validation loss at step 0 (before any update), or None when not recorded."""
    curve = run.eval.get("loss")
    return finite(curve[0][1]) if curve and curve[0][0] == 0 else None


@dataclass(frozen=True)
class RatePoint:
    """One learning rate of one variant (its seeds pooled, see the module docstring)."""

    lr: float
    runs: tuple[str, ...]  # run names (every seed, finished or not)
    final_loss: float | None  # mean over finished seeds; inf when one diverged; None: not tried
    seed_losses: tuple[float, ...]  # per finished seed (inf when diverged)
    init_loss: float | None
    status: str  # "completed", "diverged", "diverged 1/3", "unfinished"
    loss_spikes: int | None  # summed over the finished seeds
    trains: bool | None  # final loss below bigram; None without baselines or when not tried

    @property
    def tried(self) -> bool:
        return self.final_loss is not None


def rate_point(lr: float, runs, bigram: float | None) -> RatePoint:
    """Pool the runs of one variant at one rate (the seeds)."""
    done = [r for r in runs if r.finished]
    seeds = tuple(x for r in done if (x := final_loss(r)) is not None)
    loss = mean(seeds)
    spikes = [r.summary["loss_spikes"] for r in done if r.summary.get("loss_spikes") is not None]
    return RatePoint(
        lr=lr, runs=tuple(r.name for r in runs), final_loss=loss, seed_losses=seeds,
        init_loss=mean([init_loss(r) for r in done]),
        status=group_status([r.status for r in runs]),
        loss_spikes=sum(spikes) if spikes else None,
        trains=None if bigram is None or loss is None else loss < bigram)


def best_point(points: list[RatePoint]) -> RatePoint | None:
    """The rate with the lowest final loss, a tie going to the lower rate; None when no rate
    tried has a finite loss."""
    finite_points = [p for p in points if p.tried and math.isfinite(p.final_loss)]
    return min(finite_points, key=lambda p: (p.final_loss, p.lr), default=None)


def lr_sensitivity(points: list[RatePoint], best_loss: float | None) -> float | None:
    """Mean over the rates tried of ``min(final loss, loss at init) − best loss``.

    A rate without a recorded loss at init is not capped (its term is its final loss − best,
    +inf when it diverged). None without a best loss.
    """
    tried = [p for p in points if p.tried]
    if best_loss is None or not tried:
        return None
    terms = [min(p.final_loss, p.init_loss if p.init_loss is not None else math.inf) - best_loss
             for p in tried]
    return sum(terms) / len(terms)


def edge_of(points: list[RatePoint], best: RatePoint | None) -> str | None:
    """``"lowest"``/``"highest"`` when the best rate is that end of the rates tried, ``"only"``
    when it is the only rate tried, else None."""
    rates = [p.lr for p in points if p.tried]
    if best is None or not rates:
        return None
    if len(rates) == 1:
        return "only"
    return "lowest" if best.lr == min(rates) else "highest" if best.lr == max(rates) else None


@dataclass
class LRVariant:
    """One variant's loss-vs-rate curve and what it yields (definitions: module docstring)."""

    name: str  # "norm=layer,placement=post" (the variant keys' leaf names)
    label: str  # short label, "LN · post"
    values: dict[str, str]  # variant key -> value word
    runs: list = field(repr=False)
    points: list[RatePoint] = field(default_factory=list)  # ascending rate

    @property
    def best(self) -> RatePoint | None:
        return best_point(self.points)

    @property
    def best_lr(self) -> float | None:
        return self.best.lr if self.best else None

    @property
    def best_loss(self) -> float | None:
        return self.best.final_loss if self.best else None

    @property
    def sensitivity(self) -> float | None:
        return lr_sensitivity(self.points, self.best_loss)

    @property
    def edge(self) -> str | None:
        return edge_of(self.points, self.best)

    @property
    def trains_at(self) -> list[float]:
        """The rates tried whose final loss lies below bigram."""
        return [p.lr for p in self.points if p.trains]

    @property
    def trains(self) -> bool | None:
        """Whether it trains at any rate tried; None when unknown (no baselines)."""
        known = [p.trains for p in self.points if p.trains is not None]
        return any(known) if known else None


def variant_name(keys: list[str], values: dict[str, str]) -> str:
    """``norm=layer,placement=post``: leaf names, the full key where two leaves collide."""
    leaves = [k.rsplit(".", 1)[-1] for k in keys]
    return ",".join(f"{leaf if leaves.count(leaf) == 1 else k}={values[k]}"
                    for k, leaf in zip(keys, leaves)) or "all runs"


def lr_variants(runs, baselines: dict | None = None) -> list[LRVariant]:
    """Group ``runs`` into variants and pool each rate; variants in reading order (norms in
    the palette's order, numbers ascending)."""
    keys = variant_keys(runs)
    bigram = (baselines or {}).get("bigram")
    groups = _by_variant(runs, keys)
    order = {k: _ordered(k, (value_of(r, k) for r in runs)) for k in keys}
    out = []
    for combo in sorted(groups, key=lambda c: [order[k].index(v) for k, v in zip(keys, c)]):
        members = groups[combo]
        values = dict(zip(keys, combo))
        by_rate: dict[float, list] = {}
        for run in members:
            by_rate.setdefault(float(run.cfg.train.lr), []).append(run)
        points = [rate_point(lr, by_rate[lr], bigram) for lr in sorted(by_rate)]
        out.append(LRVariant(variant_name(keys, values), short_label(members[0], keys), values,
                             members, points))
    return out


def load_lr_sweep(root) -> tuple[list[LRVariant], dict | None]:
    """The variants of the results group ``root`` and its baselines (``baselines.json``)."""
    base = read_run_baselines(root)
    return lr_variants(load_runs(root), base), base


# ---- tables: lr_sweep.csv and lr_sweep.md ---------------------------------------------------

TRAINS_WORD = {True: "yes", False: "no rate tried", None: "unknown (no baselines)"}
EDGE_WORD = {"lowest": "lowest rate", "highest": "highest rate", "only": "only rate", None: ""}


def rate_column(lr: float) -> str:
    """The table column of one rate's final validation loss."""
    return f"val_loss@lr={lr:g}"


def table_rows(variants: list[LRVariant]) -> list[dict]:
    """One row per variant: best rate, its loss, sensitivity, where it trains, and the final
    validation loss at every rate of the group (inf: diverged; None: not run or unfinished)."""
    rates = sorted({p.lr for v in variants for p in v.points})
    rows = []
    for v in variants:
        at = {p.lr: p.final_loss for p in v.points}
        rows.append({"variant": v.name, "best_lr": v.best_lr, "best_val_loss": v.best_loss,
                     "lr_sensitivity": v.sensitivity, "trains": TRAINS_WORD[v.trains],
                     "rates_that_train": " ".join(f"{lr:g}" for lr in v.trains_at),
                     "best_at_edge": EDGE_WORD[v.edge],
                     **{rate_column(lr): at.get(lr) for lr in rates}})
    return rows


def _cell(x) -> str:
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    return "∞" if math.isinf(x) else f"{x:.4g}"


def markdown(variants: list[LRVariant], baselines: dict | None = None) -> str:
    """The table of :func:`table_rows` in Markdown, with the definitions under it."""
    rows = table_rows(variants)
    if not rows:
        return "No runs.\n"
    rates = [k for k in rows[0] if k.startswith("val_loss@lr=")]
    head = ["variant", "best rate", "best val loss", "LR sensitivity", "trains",
            "rates that train", "best at edge",
            *(f"lr {float(k.split('=', 1)[1]):.3g}" for k in rates)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["variant"], "" if r["best_lr"] is None else f"{r['best_lr']:.3g}",
                 _cell(r["best_val_loss"]), _cell(r["lr_sensitivity"]), r["trains"],
                 r["rates_that_train"], r["best_at_edge"], *(_cell(r[k]) for k in rates)]
        lines.append("| " + " | ".join(cells) + " |")
    note = ("\nFinal validation loss (nats) at each learning rate, the mean over seeds where a "
            "rate has several; ∞: diverged. Best rate: the lowest final loss (a tie goes to the "
            "lower rate). LR sensitivity (Wortsman et al. 2023): the mean over the rates tried "
            "of min(final loss, loss at init) − best loss. Trains: \"yes\" when the final loss "
            "lies below the bigram baseline at some rate, \"no rate tried\" when at none. "
            "Best at edge: the best rate is the lowest or highest rate tried, so the optimum "
            "may lie outside the grid. Figure: plots/lr_sensitivity.png.\n")
    if baselines:
        note += (f"\nBaselines on the same validation tokens: unigram "
                 f"{baselines['unigram']:.4f}, bigram {baselines['bigram']:.4f} nats.\n")
    return "\n".join(lines) + "\n" + note


def write_lr_sweep(root, runs, baselines: dict | None = None, plots: bool = True
                   ) -> list[LRVariant]:
    """Write ``lr_sweep.csv``, ``lr_sweep.md`` (and ``plots/lr_sensitivity.png``) into the
    results directory ``root`` for ``runs`` (which must vary ``train.lr``); returns the variants."""
    root = Path(root)
    variants = lr_variants(runs, baselines)
    write_csv(root / rundir.LR_SWEEP_CSV, table_rows(variants))
    write_text(root / rundir.LR_SWEEP_MD, markdown(variants, baselines))
    if plots:
        from trainer.results.lr_plot import write_lr_figure

        write_lr_figure(variants, root / rundir.PLOTS, baselines)
    return variants
