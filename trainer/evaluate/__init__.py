"""``python -m trainer evaluate-norm NORM``: the lab's whole protocol for one norm, in one command.

NORM is a lab norm (`layer`, `batch`, …) or one from outside the lab (``PATH.py:Class``,
``package.module:Class``: trainer/models/plugin.py). `--budget`:

- `checks` (no training, seconds): the norm contract's properties on the reference model at
  init (``trainer.telemetry.contract``), and on a trained checkpoint of an earlier `quick`/`reference` run
  into the same `--out` when there is one;
- `quick` / `reference`: the rate grid, the best rate on validation, `--seeds` seeds at
  it, the test split, against the baselines at the same budget (``protocol``), then the
  properties at init and trained.
- `ladder`: the model-size ladder's rungs d = 32, 64, 128, each with the rate grid extended by
  the edge rule and `--seeds` seeds at the best rate, against the lab's Pre-LN on each rung
  (the committed ladder), with the trend of the gap over width (``ladder``).

`--placement pre|post|peri|output` puts the norm in that placement (``model.placement``) for
the checks and the runs; the baselines stay the lab's norms in Pre placement, and the report
says which placement was tested.

It writes ``DIR/report.json`` and ``DIR/report.md`` (``report``), the learning-rate figure, and
the runs under ``DIR/lr`` and ``DIR/best`` (``DIR/d<width>/lr``, ``…/best`` at `ladder`). A bad
NORM is one error line (exit 2) before
anything is trained or written.

Modules: ``protocol`` (budgets, the runs,
the baselines), ``ladder`` (the ladder budget: the edge rule, the rungs, the trends),
``report`` (report.json, report.md; no TensorFlow).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainer import rundir
from trainer.choices import Placement
from trainer.config import ConfigError, check_norm

BUDGET_NAMES = ("checks", "quick", "reference", "ladder")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``evaluate-norm`` subcommand's arguments."""
    p.add_argument("norm", help="a lab norm, PATH.py:Class or package.module:Class")
    p.add_argument("--budget", choices=BUDGET_NAMES, default="checks",
                   help="checks: properties only, no training (default); quick: the 2-block "
                   "model, ≤ 25 min on 2 cores; reference: the reference model and protocol; "
                   "ladder: rungs d = 32, 64, 128 against Pre-LN's trend (hours)")
    p.add_argument("--placement", choices=[str(x) for x in Placement], default="pre",
                   help="where the norm sits in each block (model.placement; default pre); "
                   "the baselines stay Pre")
    p.add_argument("--seeds", type=int, default=3, help="seeds at the best rate (default 3)")
    p.add_argument("--out", help="report and runs directory (default: "
                   "runs/evaluate-norm/<norm>[-<placement>]-<budget>)")
    p.add_argument("--parallel", type=int, default=2, help="runs at once (default 2)")


def default_out(norm: str, budget: str, placement: str = "pre") -> Path:
    """``runs/evaluate-norm/<name>-<budget>`` (``<name>-<placement>-<budget>`` outside Pre):
    the class name for a norm from outside the lab."""
    from trainer.norm_names import plugin_target

    found = plugin_target(norm)
    where = "" if placement == Placement.pre else f"-{placement}"
    return Path("runs") / "evaluate-norm" / f"{found[2] if found else norm}{where}-{budget}"


def placement_overrides(placement: str) -> tuple[str, ...]:
    """The config overrides that put the evaluated norm in ``placement`` (none for Pre, so a
    Pre evaluation's configs and runs are what they were before the option existed)."""
    return () if placement == Placement.pre else (f"model.placement={placement}",)


def _model(norm: str, overrides=(), seed: int = 0):
    """The reference model with ``norm``, freshly initialised from ``seed``."""
    import keras

    from trainer.config import load_config
    from trainer.evaluate.protocol import BUDGETS
    from trainer.models import build_model, plugin

    cfg = load_config(BUDGETS["reference"].config, [f"model.norm={norm}", *overrides])
    if plugin.is_plugin(norm):  # the contract first: one line, before anything is written
        m = cfg.model
        plugin.check(norm, m.dim, epsilon=m.norm_epsilon, momentum=m.bn_momentum,
                     affine=bool(m.norm_affine))
    keras.utils.set_random_seed(seed)
    return build_model(cfg.model, cfg.data.vocab_size, cfg.data.max_len)


def _trained_properties(run_dir: Path | None):
    """The properties of a trained run's last checkpoint; None without one."""
    if run_dir is None or not any((run_dir / rundir.CHECKPOINTS).glob("*.index")):
        return None
    from trainer.telemetry.contract import measure
    from trainer.train.checkpoint import restore_trained

    return measure(restore_trained(run_dir)[2])


def main(args) -> int:
    """Run ``evaluate-norm`` for parsed ``args``; errors are one line (exit 2)."""
    norm = check_norm(args.norm)
    if args.seeds < 1 or args.parallel < 1:
        raise ConfigError("--seeds and --parallel must be >= 1")
    from trainer import import_tensorflow_quietly

    import_tensorflow_quietly()
    from trainer.evaluate import protocol, report
    from trainer.telemetry.contract import measure
    from trainer.findings.thresholds import INVARIANT_MAX
    from trainer.provenance import git_dirty, git_sha

    placement = args.placement
    out = Path(args.out) if args.out else default_out(norm, args.budget, placement)
    init = measure(_model(norm, placement_overrides(placement)))  # a plugin's contract first
    out.mkdir(parents=True, exist_ok=True)
    rep = {"norm": norm, "display": report.display(norm), "budget": args.budget,
           "placement": placement,
           "seeds": args.seeds, "git_sha": git_sha(), "git_dirty": git_dirty(),
           "invariant_max": INVARIANT_MAX, "properties": {"init": init, "trained": None},
           "baselines": {}, "runs": []}
    if args.budget == "ladder":
        from trainer.evaluate import ladder

        ladder.run_ladder(rep, norm, out, args.seeds, args.parallel, placement_overrides(placement))
        rung = out / f"d{min(ladder.RUNGS, key=lambda w: abs(w - 64))}"  # the reference rung
        rep["properties"]["trained"] = _trained_properties(
            _best_run(protocol.read_outcome(norm, rung)))
    elif args.budget != "checks":
        _protocol(rep, norm, protocol.BUDGETS[args.budget], out, args)
    else:
        previous = protocol.read_outcome(norm, out)  # a trained run of an earlier budget
        rep["properties"]["trained"] = _trained_properties(_best_run(previous))
    rep["sentence"] = report.sentence(rep)
    report.write(rep, out)
    print(f"{rep['display']}: {rep['sentence']}\nwrote {out / rundir.REPORT_MD} and "
          f"{rundir.REPORT_JSON}")
    return 0


def _best_run(outcome) -> Path | None:
    """The seed-0 run at the best rate (its checkpoint is the 'trained' model)."""
    v = outcome.variant
    if v is None or v.best is None:
        return None
    return next((r.path for r in v.runs if float(r.cfg.train.lr) == v.best_lr and r.seed == 0),
                None)


def _protocol(rep: dict, norm: str, budget, out: Path, args) -> None:
    """The trained part of the report: the norm's protocol, the baselines, the paired
    comparison to Pre-LN, the figure, the trained properties (and at ``reference`` the
    reproduction of a committed baseline run)."""
    from trainer.evaluate import protocol, report
    from trainer.results.lr_plot import write_lr_figure
    from trainer.results.lr_sweep import lr_variants

    model = {"num_layers": 2 if budget.name == "quick" else 6}
    if budget.name == "reference":
        rep["reproduction"] = {"run": protocol.REPRODUCED, **protocol.reproduce_baseline(budget)}
    baselines = protocol.baseline_outcomes(budget, args.seeds, args.parallel, model)
    outcome = protocol.run_protocol(norm, budget, out, args.seeds, args.parallel,
                                    placement_overrides(rep["placement"]))
    rep["numbers"] = report.outcome_numbers(outcome)
    rep["baselines"] = {name: report.outcome_numbers(b) for name, b in baselines.items()}
    rep["token_baselines"] = outcome.baselines
    rep["paired_vs_preln"] = report.paired(outcome.test_loss,
                                           baselines[report.PRELN].test_loss)
    runs = [r for o in (outcome, *baselines.values()) if o.variant for r in o.variant.runs]
    if runs:
        path = write_lr_figure(lr_variants(runs, outcome.baselines), out, outcome.baselines)
        rep["figure"] = path.name
    rep["runs"] = sorted(str(p.relative_to(out)) for p in out.glob("*/*")
                         if (p / rundir.SUMMARY).is_file())
    rep["properties"]["trained"] = _trained_properties(_best_run(outcome))
