"""Pre-registration 3's instability claims I1 (QK-norm) and I2 (z-loss), judged on sub-sweep
``inst_lr`` (results/PREREGISTRATION-SCALE.md, section 2; thresholds in ``thresholds``).

``inst_lr`` trains Pre-LN, QK-norm and z-loss at every rate of ``INSTABILITY_GRID`` and every
seed of ``INSTABILITY_SEEDS``, under ``results/reference/scale/inst_lr/``. Definitions, as
pre-registered:

- a variant's *best rate*: the lowest mean validation loss over the seeds (a tie to the lower
  rate; a seed that diverged makes its rate's mean infinite); a best at an edge of the rates
  tried is "cannot be judged" for every part that reads it (the edge rule extends the grid);
- a diverged run's loss in a paired difference: the unigram loss of the same split's tokens;
- a run's *max attention logit*: the maximum over blocks of ``instruments_max``'s
  ``attention/block_i/max_logit``; its *log Z drift*: max(|max|, |min|) over training of
  ``output/log_z_mean``; its *final |log Z|*: the last step's |``output/log_z_mean``|;
- *LR sensitivity per seed*: ``lr_sweep.lr_sensitivity`` over that seed's runs at every rate.

Control: Pre-LN's seed-0 runs at the rates of ``RATE_GRID`` are the reference's ``lr`` runs of
the same config and seed, rerun with the instruments on: their curves must equal the committed
ones (``reproduce``'s comparison); a failed control makes every claim here inconclusive.
"""

from __future__ import annotations

import math
from pathlib import Path

from trainer.findings.claim import Finding, line
from trainer.findings.reference import EXTRA, Reference
from trainer.findings.thresholds import (INSTABILITY_GRID, INSTABILITY_SEEDS, LOGIT_FACTOR,
                                         LOGZ_MARGIN, LOSS_MARGIN, NULL_MARGIN, R_TOP, RATE_GRID,
                                         SENSITIVITY_MARGIN)
from trainer.results import lr_sweep
from trainer.results.baselines import or_unigram
from trainer.results.metrics import final_loss, final_test_loss
from trainer.results.rule import compare, not_worse

SCALE = "scale"  # results/reference/scale: pre-registration 3's sub-sweeps
GROUP = "inst_lr"
VARIANTS = {"Pre-LN": dict(qk_norm="none", z_loss=0.0),
            "QK-norm": dict(qk_norm="layer", z_loss=0.0),
            "z-loss": dict(qk_norm="none", z_loss=1e-4)}
MAX_LOGIT, LOG_Z = "max_logit", "output/log_z_mean"
PLOTS = f"{SCALE}/{GROUP}/plots"  # I1's and I2's figures (``figures_scale``)


def max_logit(run) -> float | None:
    """The largest attention logit of any block over training (None: not recorded)."""
    found = [v for k, v in (run.summary.get("instruments_max") or {}).items()
             if k.startswith("attention/") and k.endswith(MAX_LOGIT)]
    return max(found) if found else None


def log_z_drift(run) -> float | None:
    """max(|max|, |min|) over training of the mean log Z (None: not recorded)."""
    hi = (run.summary.get("instruments_max") or {}).get(LOG_Z)
    lo = (run.summary.get("instruments_min") or {}).get(LOG_Z)
    return None if hi is None or lo is None else max(abs(hi), abs(lo))


def final_abs_log_z(run) -> float | None:
    value = (run.summary.get("instruments") or {}).get(LOG_Z)
    return None if value is None else abs(value)


class Grid:
    """One variant of a rate sub-sweep (``inst_lr`` by default): its runs by rate and seed, its
    best rate, per-seed values. ``rates`` x ``seeds`` is what must have finished (more, e.g. the
    edge rule's extensions, is read too); the best rate, the counts and the sensitivities are on
    ``seeds``. Extra seeds (``Reference.with_extra``: more seeds at the rates a plan names) are
    read by the per-rate values (``at``) only."""

    def __init__(self, scale: Reference, finding: Finding, name: str, group: str = GROUP,
                 want: dict | None = None, rates=INSTABILITY_GRID, seeds=INSTABILITY_SEEDS):
        self.name, self.seeds = name, tuple(seeds)
        runs = scale.select(finding, group, **(VARIANTS[name] if want is None else want))
        runs = [r for r in runs if int(r.cfg.train.seed) in self.seeds
                or Path(r.name).parts[0] == EXTRA]
        finding.used.setdefault(f"{SCALE}/{group}", []).extend(runs)
        self.runs = {(float(r.cfg.train.lr), int(r.cfg.train.seed)): r for r in runs}
        self.val_bl = scale.baselines(group, "validation") or {}
        self.test_bl = scale.baselines(group, "test") or {}
        absent = [f"lr {lr:g} seed {s}" for lr in rates for s in self.seeds
                  if not any(math.isclose(lr, x) and s == y and r.finished
                             for (x, y), r in self.runs.items())]
        if runs and absent:
            finding.missing.append(f"{SCALE}/{group}: {name} lacks {', '.join(absent)}")
        no_baselines = f"{SCALE}/{group}/baselines.json"
        if runs and not self.val_bl and no_baselines not in finding.missing:
            finding.missing.append(no_baselines)
        designed = [r for r in runs if int(r.cfg.train.seed) in self.seeds]
        self.variant = lr_sweep.lr_variants(designed, self.val_bl)[0] if designed else None

    @property
    def best(self) -> float | None:
        """The best rate; None when none has a finite mean or it sits at an edge."""
        v = self.variant
        return None if v is None or v.best is None or v.edge else v.best_lr

    def why_no_best(self) -> str:
        v = self.variant
        if v is None or v.best is None:
            return f"{self.name} has no finite validation loss at any rate"
        return f"{self.name}'s best rate {v.best_lr:g} is the {v.edge} rate tried (open edge)"

    def at(self, lr: float | None, fn) -> dict:
        """Seed -> ``fn(run)`` at rate ``lr`` (None: {})."""
        if lr is None:
            return {}
        return {s: fn(r) for (x, s), r in sorted(self.runs.items()) if math.isclose(x, lr)}

    def val(self, lr) -> dict:
        return self.at(lr, lambda r: or_unigram(final_loss(r), self.val_bl))

    def test(self, lr) -> dict:
        return self.at(lr, lambda r: or_unigram(final_test_loss(r), self.test_bl))

    def trains_count(self, rates=None) -> dict:
        """Seed -> the number of ``rates`` (default: every rate run) at which that seed's run
        trains (validation below bigram; a diverged run does not); a seed lacking one of them is
        left out."""
        bigram = self.val_bl.get("bigram")
        rates = sorted({lr for lr, _ in self.runs}) if rates is None else rates
        out = {}
        for seed in self.seeds:
            losses = [self.val(lr).get(seed) for lr in rates]
            if bigram is not None and all(x is not None for x in losses):
                out[seed] = sum(x < bigram for x in losses)
        return out

    def sensitivity(self) -> dict:
        """Seed -> LR sensitivity over that seed's rates (validation)."""
        out = {}
        for seed in self.seeds:
            runs = [r for (_, s), r in self.runs.items() if s == seed]
            if runs:
                out[seed] = lr_sweep.lr_variants(runs, self.val_bl)[0].sensitivity
        return out


def control(ref: Reference, finding: Finding, pre: Grid) -> None:
    """Pre-LN's seed-0 runs at ``RATE_GRID`` reproduce the reference's ``lr`` runs."""
    from trainer.results.compare import compare_runs

    checked, failed = 0, []
    for lr in RATE_GRID:
        new = pre.runs.get((lr, 0))
        old = ref.matching("lr", norm="layer", residual="true", placement="pre",
                           warmup_steps=50, lr=lr, seed=0)
        if new is None or len(old) != 1 or not new.finished:
            continue
        cmp, why = compare_runs(old[0], new, int(new.cfg.train.steps))
        checked += 1
        if cmp.diffs:
            failed.append(f"lr {lr:g} ({len(cmp.diffs)} differences; {'; '.join(why) or 'identity demanded'})")
    finding.control(f"the instruments change no number: Pre-LN's seed-0 runs at {checked} "
                    f"rates reproduce the reference's lr runs"
                    + (f"; fails at {', '.join(failed)}" if failed else ""),
                    checked == len(RATE_GRID) and not failed)


def i1(ref: Reference) -> Finding:
    f = Finding("I1", """Without QK-norm, Pre-LN's attention logits grow at the highest rates and
                its loss suffers there; with QK-norm the logits stay bounded and the variant is
                less sensitive to the rate, at no cost at its best rate (Dehghani et al. 2023;
                Wortsman et al. 2024)""",
                f"""Pre-LN and QK-norm at {len(INSTABILITY_GRID)} rates, seeds
                {INSTABILITY_SEEDS[0]}–{INSTABILITY_SEEDS[-1]}: max attention logit, validation
                loss at {R_TOP:g}, LR sensitivity per seed, test loss at each one's best rate""",
                f"""Pre-LN's max logit at {R_TOP:g} under {LOGIT_FACTOR:g}× its own at its best
                rate or under {LOGIT_FACTOR:g}× QK-norm's; Pre-LN no worse at {R_TOP:g}; QK-norm
                as sensitive; or QK-norm worse at its best""",
                plot=f"{PLOTS}/max_logit_vs_rate.png")
    grids = _grids(ref, f, "QK-norm")
    if grids is None:
        return f
    pre, qk = grids
    for g in (pre, qk):
        f.lines.append(line(f"{g.name} max attention logit at {R_TOP:g}", g.at(R_TOP, max_logit),
                            log=True))
    if pre.best is None:
        f.evidence("(a) Pre-LN's logits grow: at its best rate", None, pre.why_no_best())
    else:
        f.evidence(f"(a) Pre-LN's max attention logit at {R_TOP:g} ≥ {LOGIT_FACTOR:g}× its own "
                   f"at its best rate {pre.best:g}",
                   compare(pre.at(R_TOP, max_logit), pre.at(pre.best, max_logit), LOGIT_FACTOR,
                           log=True))
    f.evidence(f"(b) at {R_TOP:g}, Pre-LN's max attention logit ≥ {LOGIT_FACTOR:g}× QK-norm's",
               compare(pre.at(R_TOP, max_logit), qk.at(R_TOP, max_logit), LOGIT_FACTOR, log=True))
    f.evidence(f"(c) at {R_TOP:g}, Pre-LN's validation loss worse than QK-norm's by "
               f"{LOSS_MARGIN:g}", compare(pre.val(R_TOP), qk.val(R_TOP), LOSS_MARGIN))
    f.evidence(f"(d) Pre-LN's LR sensitivity exceeds QK-norm's by {SENSITIVITY_MARGIN:g}, per seed",
               compare(pre.sensitivity(), qk.sensitivity(), SENSITIVITY_MARGIN))
    _null_at_best(f, "(e) QK-norm", qk, pre)
    return f


def i2(ref: Reference) -> Finding:
    f = Finding("I2", """The z-loss keeps log Z near 0 and removes the output-logit divergence at
                high rates, at no cost (Chowdhery et al. 2022; Wortsman et al. 2024)""",
                f"""Pre-LN and z-loss (1e-4) at {len(INSTABILITY_GRID)} rates, seeds
                {INSTABILITY_SEEDS[0]}–{INSTABILITY_SEEDS[-1]}: final |log Z| at each one's best
                rate, log Z drift and validation loss at {R_TOP:g}, test loss at each one's
                best""",
                f"""Pre-LN's final |log Z| or its drift at {R_TOP:g} not {LOGZ_MARGIN:g} nats
                above z-loss's; Pre-LN no worse at {R_TOP:g}; or z-loss worse at its best""",
                plot=f"{PLOTS}/log_z_at_top.png")
    grids = _grids(ref, f, "z-loss")
    if grids is None:
        return f
    pre, zl = grids
    for g in (pre, zl):
        f.lines.append(line(f"{g.name} final |log Z| at its best rate",
                            g.at(g.best, final_abs_log_z)))
        f.lines.append(line(f"{g.name} log Z drift at {R_TOP:g}", g.at(R_TOP, log_z_drift)))
    if pre.best is None or zl.best is None:
        f.evidence("(a) final |log Z| at each one's best rate", None,
                   (pre if pre.best is None else zl).why_no_best())
    else:
        f.evidence(f"(a) Pre-LN's final |log Z| at its best exceeds z-loss's by {LOGZ_MARGIN:g}",
                   compare(pre.at(pre.best, final_abs_log_z), zl.at(zl.best, final_abs_log_z),
                           LOGZ_MARGIN))
    f.evidence(f"(b) at {R_TOP:g}, Pre-LN's log Z drift exceeds z-loss's by {LOGZ_MARGIN:g}",
               compare(pre.at(R_TOP, log_z_drift), zl.at(R_TOP, log_z_drift), LOGZ_MARGIN))
    f.evidence(f"(c) at {R_TOP:g}, Pre-LN's validation loss worse than z-loss's by "
               f"{LOSS_MARGIN:g}", compare(pre.val(R_TOP), zl.val(R_TOP), LOSS_MARGIN))
    _null_at_best(f, "(d) z-loss", zl, pre)
    return f


def _grids(ref: Reference, f: Finding, other: str) -> tuple[Grid, Grid] | None:
    """Pre-LN's grid and ``other``'s, the control run and each one's best-rate line on ``f``;
    None (``f`` then lists what is missing) until every run they need has finished."""
    scale = ref.below(SCALE)
    pre = Grid(scale, f, "Pre-LN")
    new = Grid(scale, f, other)
    if f.missing:
        return None
    control(ref, f, pre)
    f.lines += [f"{g.name}: {lr_sweep_line(g)}" for g in (pre, new)]
    return pre, new


def _null_at_best(f: Finding, label: str, new: Grid, pre: Grid) -> None:
    """The null part "``new`` at its best not worse than Pre-LN at its best", on test."""
    text = f"{label}'s test loss at its best rate not worse than Pre-LN's at its best by {NULL_MARGIN:g}"
    if new.best is None or pre.best is None:
        f.evidence(text, None, (new if new.best is None else pre).why_no_best())
        return
    f.evidence(text, not_worse(new.test(new.best), pre.test(pre.best), NULL_MARGIN))


def lr_sweep_line(g: Grid) -> str:
    """Where the variant's best rate is, and its mean validation loss there."""
    v = g.variant
    if v is None or v.best is None:
        return "no finite validation loss at any rate"
    edge = f", at the {v.edge} rate tried" if v.edge else ""
    return f"best rate {v.best_lr:g} (mean validation {v.best_loss:.3f}{edge})"


CLAIMS = (i1, i2)
