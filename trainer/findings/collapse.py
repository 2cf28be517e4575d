"""Pre-registration 3's I5: which instrument moves first when Post-LN with warm-up collapses
(results/PREREGISTRATION-SCALE.md, section 2; thresholds in ``thresholds``).

The originals: every Post-LN run (LayerNorm, residual, the lab's init: pre-registration 4's Post-LN
on Xavier init is not one) with warm-up at d = 64 in the reference
(any sub-sweep, ``scale/deep_lr`` included) and in the python setting that *fails* at rate 0.003
or 0.00316: diverged, or its final validation loss at the unigram plateau (``at_plateau``, the
setting's validation baselines). Each is rerun with ``train.eval_every`` =
``COLLAPSE_EVAL_EVERY`` into ``scale/collapse/<setting>-<sub-sweep>-<run>`` (``main`` below
launches the reruns that are missing). Per failing rerun, the first step at which each
instrument *moves*, after the end of warm-up W (the value at the last logged step <= W is the
baseline):

- the max attention logit over blocks (``attention/block_i/max_logit``, train) exceeds
  ``LOGIT_MOVE`` x its value at W;
- the mean log Z (``output/log_z_mean``, train) is more than ``LOGZ_MOVE`` nats from its value
  at W;
- the last block's token cosine (``probe/token_cosine/block_<last>``, eval) exceeds
  ``COSINE_MOVE`` (at any step: its threshold is absolute).

Resolution 10 steps; equal first steps are a tie. Shown when the attention logits move strictly
first in every failing rerun; refuted when another instrument moves strictly first in more than
half of them; mixed (inconclusive) otherwise. Control: each rerun's training curves reproduce
its original's (``reproduce``'s comparison, the training curves alone since the rerun evaluates
more often); a rerun that does not is dropped and named.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from trainer import rundir
from trainer.findings.claim import Finding
from trainer.findings.ladder import DEFAULTS  # a key a run predates reads as its default
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (COLLAPSE_EVAL_EVERY, COSINE_MOVE, INSTABILITY_SEEDS,
                                         LOGIT_MOVE, LOGZ_MOVE)
from trainer.results.baselines import at_plateau
from trainer.results.metrics import final_loss

SCALE, GROUP = "scale", "collapse"
SETTINGS = ("reference", "python")  # the d = 64 settings the originals come from
RATES = ("0.003", "0.00316")
# the lab's init: pre-registration 4's Post-LN on Xavier init (scale/init_ctl) is not an original
POST_WARM = dict(norm="layer", residual="true", placement="post", warmup_steps="50", dim="64",
                 init="normal")
INSTRUMENTS = ("attention logits", "log Z", "token cosine")


def fails(run, baselines: dict | None) -> bool:
    """Diverged, or ended at the unigram plateau (validation)."""
    loss = final_loss(run)
    return run.finished and loss is not None and (math.isinf(loss) or at_plateau(loss, baselines))


def originals(ref: Reference) -> list[tuple[str, object, dict | None]]:
    """(rerun name, original run, its setting's validation baselines) for every failing Post-LN
    warm-up run at d = 64 and 3e-3, in the reference (``ref``) and the python setting beside it;
    sorted by name."""
    from trainer.findings.replication import settings

    found, seen = [], set()
    for setting, sref in settings(ref).items():
        if setting not in SETTINGS:
            continue
        baselines = sref.baselines("lr", "validation")
        for run in sref.runs:
            values = sref.values(run)
            if (run.name.startswith(f"{SCALE}/{GROUP}/") or values.get("lr") not in RATES
                    or any(values.get(k, DEFAULTS.get(k)) != v for k, v in POST_WARM.items())):
                continue
            same = (setting, tuple(sorted(values.items())))  # best's seed 0 is lr's run, copied
            if fails(run, baselines) and same not in seen:
                seen.add(same)
                found.append((f"{setting}-{run.name.replace('/', '-')}", run, baselines))
    return sorted(found, key=lambda x: x[0])


def _curve(run, group: str, tag: str) -> dict[int, float]:
    return dict(getattr(run, group).get(tag) or [])


def _at_or_before(curve: dict[int, float], step: int) -> float | None:
    before = [s for s in curve if s <= step]
    return curve[max(before)] if before else None


def first_moves(run) -> dict[str, float]:
    """Instrument -> the first step at which it moves (inf: never; see the module docstring)."""
    warm = int(run.cfg.train.warmup_steps)
    last = int(run.cfg.model.num_layers) - 1
    logit_tags = [t for t in run.train if t.startswith("attention/") and t.endswith("/max_logit")]
    logit: dict[int, float] = {}
    for tag in logit_tags:
        for step, value in _curve(run, "train", tag).items():
            logit[step] = max(logit.get(step, -math.inf), value)
    log_z = _curve(run, "train", "output/log_z_mean")
    cosine = _curve(run, "eval", f"probe/token_cosine/block_{last}")
    logit0, log_z0 = _at_or_before(logit, warm), _at_or_before(log_z, warm)

    def first(curve, moved) -> float:
        return min((s for s, v in curve.items() if moved(s, v)), default=math.inf)

    return {"attention logits": first(logit, lambda s, v: logit0 is not None and s > warm
                                      and v > LOGIT_MOVE * logit0),
            "log Z": first(log_z, lambda s, v: log_z0 is not None and s > warm
                           and abs(v - log_z0) > LOGZ_MOVE),
            "token cosine": first(cosine, lambda s, v: v > COSINE_MOVE)}


def leader(moves: dict[str, float]) -> str | None:
    """The instrument that moves strictly first; None on a tie or when none moves."""
    ordered = sorted(moves.items(), key=lambda x: x[1])
    if math.isinf(ordered[0][1]) or ordered[0][1] == ordered[1][1]:
        return None
    return ordered[0][0]


def i5(ref: Reference) -> Finding:
    f = Finding("I5", """When Post-LN with warm-up collapses at 3e-3, the attention logits move
                first (Dehghani et al. 2023)""",
                f"""every failing Post-LN warm-up run at d = 64 and 3e-3 (reference, python),
                rerun evaluating every {COLLAPSE_EVAL_EVERY} steps: the first step after warm-up
                at which the max attention logit doubles, mean log Z moves
                {LOGZ_MOVE:g} nat, or the last block's token cosine passes {COSINE_MOVE:g}""",
                """another instrument moves strictly first in more than half of the failing
                reruns""")
    wanted = originals(ref)
    scale = ref.below(SCALE)
    deep = [r for r in scale.matching("deep_lr", lr="0.003", **POST_WARM)
            if r.finished]
    if len(deep) < len(INSTABILITY_SEEDS):
        f.missing.append(f"{SCALE}/deep_lr: Post-LN with warm-up at 0.003, seeds "
                         f"{INSTABILITY_SEEDS[0]}–{INSTABILITY_SEEDS[-1]} (possible originals)")
    reruns = {Path(r.name).name: r for r in scale.groups.get(GROUP, [])}
    absent = [name for name, *_ in wanted if name not in reruns or not reruns[name].finished]
    if absent:
        f.missing.append(f"{SCALE}/{GROUP}: {', '.join(absent)}")
    if f.missing:
        return f
    f.used[f"{SCALE}/{GROUP}"] = [reruns[name] for name, *_ in wanted]
    failing, dropped = _controlled(f, wanted, reruns)
    leaders = {name: leader(moves) for name, moves in failing.items()}
    for name, moves in failing.items():
        f.lines.append(f"{name}: {_moves_text(moves)}")
    for name, moves in dropped.items():  # shown, never counted: the control dropped them
        f.lines.append(f"{name} (dropped by the control, not counted): {_moves_text(moves)}")
    f.evidence("the attention logits move strictly first in every failing rerun",
               *_rule(leaders, bool(wanted)))
    return f


def _moves_text(moves: dict) -> str:
    steps = ", ".join(f"{k} {'never' if math.isinf(v) else int(v)}" for k, v in moves.items())
    return f"{steps}; first: {leader(moves) or 'tie'}"


def _controlled(f: Finding, wanted, reruns) -> tuple[dict[str, dict], dict[str, dict]]:
    """Name -> first moves of each rerun that reproduces its original (control) and fails; and
    of each failing rerun the control dropped (shown, not counted). The control's line names
    each dropped rerun with the first curve beyond the tolerance and why the reproduction may
    differ (code, CPU, packages: ``compare.expectation``)."""
    from trainer.results.compare import compare_runs

    kept, dropped, why_dropped = {}, {}, []
    for name, original, baselines in wanted:
        new = reruns[name]
        cmp, why = compare_runs(original, new, int(new.cfg.train.steps), train_only=True)
        if not fails(new, baselines):
            why_dropped.append(f"{name}: it does not fail")
        elif cmp.diffs:
            d = cmp.diffs[0]
            why = [w for w in why if not w.startswith("different instruction sets")]  # long
            why_dropped.append(f"{name}: {d.where} beyond the tolerance at step {d.step}"
                               + (f"; {'; '.join(why)}" if why else ""))
            dropped[name] = first_moves(new)
        else:
            kept[name] = first_moves(new)
    if wanted:
        f.control(f"each rerun's training curves reproduce its original's: {len(kept)} of "
                  f"{len(wanted)}" + (f" (dropped: {' — '.join(why_dropped)})"
                                      if why_dropped else ""), bool(kept))
    return kept, dropped


def _rule(leaders: dict[str, str | None], any_failed: bool) -> tuple[bool | None, str]:
    """Shown / refuted / mixed, as pre-registered."""
    if not any_failed:
        return None, "no Post-LN warm-up run at d = 64 failed at 3e-3: nothing collapsed to read"
    if not leaders:
        return None, "no failing rerun reproduced its original"
    if all(x == "attention logits" for x in leaders.values()):
        return True, ""
    others = sum(x not in (None, "attention logits") for x in leaders.values())
    if others > len(leaders) / 2:
        return False, ""
    return None, (f"mixed: the attention logits first in "
                  f"{sum(x == 'attention logits' for x in leaders.values())} of {len(leaders)}, "
                  f"another instrument in {others}, ties in "
                  f"{sum(x is None for x in leaders.values())}")


def main(argv=None) -> int:
    """``python -m trainer.findings.collapse RESULTS_ROOT [--run]``: list the reruns I5 needs
    (and with ``--run``, train the missing ones, one at a time)."""
    import argparse
    import subprocess

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("root", help="the reference results root, e.g. results/reference")
    p.add_argument("--run", action="store_true", help="train the missing reruns")
    args = p.parse_args(argv)
    ref = Reference(args.root)
    for name, original, _ in originals(ref):
        out = Path(args.root) / SCALE / GROUP / name
        done = (out / rundir.SUMMARY).is_file()
        print(f"{'done' if done else 'todo'}  {out}  <- {original.path}")
        if args.run and not done:
            subprocess.run([sys.executable, "-m", "trainer", "train", "--config",
                            str(original.path / rundir.CONFIG), "--workdir", str(out), "--quiet",
                            f"train.eval_every={COLLAPSE_EVAL_EVERY}"], check=True)
    return 0


CLAIMS = (i5,)

if __name__ == "__main__":
    sys.exit(main())
