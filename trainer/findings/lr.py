"""The learning-rate table at the top of results/README.md, and each variant's grid read by the
claims (F5's sensitivity, F6's trainable range).

Sub-sweep ``lr`` trains every variant of the table at every rate of ``RATE_GRID`` (1 seed, the
reference's steps, warm-up and clipping). The definitions (best rate on the validation loss, a
tie to the lower rate; LR sensitivity as Wortsman et al. 2023 define it; "trains": below the
validation bigram at some rate) live in ``trainer.results.lr_sweep``; this module only reads
them. ``best_lr:`` in the sweep specs of the later sub-sweeps resolves the same best rates.
"""

from __future__ import annotations

from trainer.findings.reference import Reference
from trainer.results import lr_sweep

GROUP = "lr"


def variant(ref: Reference, finding, **want) -> lr_sweep.LRVariant | None:
    """The grid of the one variant matching ``want`` (every rate), with the validation
    baselines; records what is missing on ``finding``."""
    runs = ref.select(finding, GROUP, **want)
    if not runs:
        return None
    for r in runs:
        finding.used.setdefault(GROUP, []).append(r)
    found = lr_sweep.lr_variants(runs, ref.baselines(GROUP, "validation"))
    if len(found) != 1 or len(found[0].points) < 2 or found[0].trains is None:
        finding.missing.append(f"{GROUP}: one variant's full rate grid with baselines for {want}")
        return None
    return found[0]


def describe(v: lr_sweep.LRVariant) -> str:
    """One line: where it trains, its best rate and loss, its sensitivity."""
    where = (f"trains at lr {', '.join(f'{x:g}' for x in v.trains_at)}" if v.trains
             else "trains at no rate tried")
    best = "no finite loss at any rate" if v.best is None else (
        f"best lr {v.best_lr:g} ({v.best_loss:.3f}{', at the ' + v.edge + ' rate' if v.edge else ''})")
    sens = "n/a" if v.sensitivity is None else f"{v.sensitivity:.3f}"
    return f"{where}; {best}; LR sensitivity {sens} nats (validation)"


def section(ref: Reference) -> list[str]:
    """The page's learning-rate section: the table, the figure, what it is for."""
    lines = ["## Learning rates: every variant at its own best rate", ""]
    runs = ref.groups.get(GROUP)
    if not runs:
        return lines + ["Not run yet: sub-sweep `lr` (`scripts/reference.sh lr_a lr_b lr_c`)."]
    base = ref.baselines(GROUP, "validation")
    variants = lr_sweep.lr_variants(runs, base)
    lines += ["Each variant trained at every rate of the grid (1 seed). Its best rate, on the "
              "validation split, is the rate every later sub-sweep runs it at; the claims below "
              "read the test split. A variant that trains at no rate is reported as such, with "
              "the rates.", "", lr_sweep.markdown(variants, base).rstrip("\n")]
    if (ref.root / GROUP / "plots" / "lr_sensitivity.png").is_file():
        lines += ["", f"![learning rates]({ref.root.name}/{GROUP}/plots/lr_sensitivity.png)"]
    return lines
