"""Measure the claims of the findings (F1-F6) on the reference results and write results/README.md.

Every number in that README comes from here, computed from the runs' summary.json and event
files; a claim that did not show at this scale is reported as such, with its numbers.

    python -m trainer.results.findings results/reference   # -> results/README.md
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from omegaconf import OmegaConf

from trainer.results.events import read_scalars
from trainer.train.rundir import read_json, write_atomic

TOKEN_NORMS = ("layer", "rms", "dyt", "none")
BATCH_NORMS = ("batch", "masked_batch")


class Runs:
    """The reference runs, looked up by their config values; a variant may have several seeds."""

    def __init__(self, root: Path):
        self.root = root
        self.runs = []
        for cfg_path in sorted(root.rglob("config.yaml")):
            if cfg_path.parent.name.endswith(".reproduce"):
                continue
            cfg = OmegaConf.load(cfg_path)
            self.runs.append((cfg, cfg_path.parent, read_json(cfg_path.parent / "summary.json")))

    def get(self, group: str, **want) -> dict[int, tuple[Path, dict]]:
        """Seed -> (run dir, summary) of the runs under ``root/group`` whose config matches
        ``want`` (keys of model/train: norm, lr, ...)."""
        found = {}
        for cfg, path, summary in self.runs:
            flat = {**cfg.model, **cfg.train}
            if path.parent.name == group and all(str(flat[k]) == str(v) for k, v in want.items()):
                found[int(cfg.train.seed)] = (path, summary)
        if not found:
            raise KeyError(f"no run in {group} with {want}")
        return dict(sorted(found.items()))

    def eval(self, path: Path, tag: str) -> float:
        curve = read_scalars(path / "eval").get(tag)
        return curve[-1][1] if curve else math.nan

    def train_first(self, path: Path, tag: str) -> float:
        curve = read_scalars(path / "train").get(tag)
        return curve[0][1] if curve else math.nan

    def train_last(self, path: Path, tag: str) -> float:
        curve = read_scalars(path / "train").get(tag)
        return curve[-1][1] if curve else math.nan


def _g(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def _s(values: dict) -> str:
    """Per-seed values: ``3.11`` for one seed, ``3.08 (3.11, 3.05)`` (mean, then each) for more."""
    xs = list(values.values())
    if len(xs) == 1:
        return _g(xs[0])
    return f"{_g(sum(xs) / len(xs))} ({', '.join(_g(x) for x in xs)})"


def _each(pred, *per_seed: dict) -> bool:
    """``pred`` holds for every seed that all ``per_seed`` dicts have (seed-paired)."""
    seeds = set.intersection(*(set(d) for d in per_seed))
    return bool(seeds) and all(pred(*(d[s] for d in per_seed)) for s in seeds)


def _verdict(*parts: bool) -> bool | str:
    """True when every part of a claim shows, "partly" when some do, False when none does."""
    return True if all(parts) else ("partly" if any(parts) else False)


def _loss(summary: dict) -> str:
    if summary.get("status") == "diverged":
        return f"diverged at step {summary['diverged_step']}"
    return _g(summary.get("final_eval_loss"))


def _val(summary: dict) -> float:
    """Final eval loss; a diverged run counts as infinitely bad."""
    if summary.get("status") == "diverged":
        return math.inf
    return summary.get("final_eval_loss") or math.inf


def measure(runs: Runs) -> list[dict]:
    """One dict per claim: id, claim, measured (markdown), verdict, evidence (plot / runs).

    Every quantity is measured per seed; a comparison holds when it holds for each seed.
    """
    grid, lr = "grid", "lr_slice"
    layers = int(runs.runs[0][0].model.num_layers)
    base = dict(residual="true", placement="pre")
    out = []

    def per_seed(fn, group, **want) -> dict[int, float]:
        return {seed: fn(path, summary) for seed, (path, summary) in runs.get(group, **want).items()}

    def final(path, s):
        return s.get("final_eval_loss") or math.nan

    inv = {n: per_seed(lambda p, s: runs.eval(p, "probe/batch_invariance"), grid, norm=n, **base)
           for n in TOKEN_NORMS + BATCH_NORMS}
    holds = (max(v for n in TOKEN_NORMS for v in inv[n].values()) < 1e-4 < 1e-3
             < min(v for n in BATCH_NORMS for v in inv[n].values()))
    out.append(dict(id="F1", claim="LN-style norms give a sequence the same output whatever "
                    "its batch; BN does not",
                    measured="max \\|Δ logits\\| (train mode): " + ", ".join(
                        f"{n} {_s(v)}" for n, v in inv.items()),
                    verdict=holds, plot="grid/plots/invariance_and_gap.png"))

    gap = {n: per_seed(lambda p, s: final(p, s) - (s.get("final_eval_loss_train_mode") or math.nan),
                       grid, norm=n, **base) for n in ("layer", "batch", "masked_batch")}
    holds = _each(lambda g: abs(g) < 1e-4, gap["layer"]) and _each(lambda g: g > 0.05, gap["batch"])
    out.append(dict(id="F2", claim="BN switches to running statistics at inference, so training "
                    "and inference disagree; LN is the same function in both",
                    measured="eval loss (inference) − eval loss (batch statistics): " + ", ".join(
                        f"{n} {_s(v)}" for n, v in gap.items()),
                    verdict=holds, plot="grid/plots/invariance_and_gap.png"))

    def drift_of(path, _):
        return sum(runs.eval(path, f"probe/bn_stat_drift/block_{i}") for i in range(layers)) / layers

    drift = {n: per_seed(drift_of, grid, norm=n, **base) for n in BATCH_NORMS}
    loss = {n: per_seed(final, grid, norm=n, **base) for n in BATCH_NORMS}
    holds = _verdict(_each(lambda a, b: a > b, drift["batch"], drift["masked_batch"]),
                     _each(lambda a, b: a > b, loss["batch"], loss["masked_batch"]))
    out.append(dict(id="F3", claim="Padding pollutes BN statistics unless pads are masked",
                    measured=f"mean BN statistic drift: batch {_s(drift['batch'])} vs masked "
                    f"{_s(drift['masked_batch'])}; eval loss: batch {_s(loss['batch'])} vs "
                    f"masked {_s(loss['masked_batch'])}",
                    verdict=holds, plot="grid/summary.md"))

    cos = {r: per_seed(lambda p, s: runs.eval(p, f"probe/token_cosine/block_{layers - 1}"),
                       grid, norm="layer", residual=r, placement="pre") for r in ("true", "false")}
    res_loss = {r: per_seed(final, grid, norm="layer", residual=r, placement="pre")
                for r in ("true", "false")}
    holds = (_each(lambda f, t: f > t + 0.05, cos["false"], cos["true"])
             and _each(lambda f, t: f > t, res_loss["false"], res_loss["true"]))
    out.append(dict(id="F4", claim="Without residual connections deep stacks lose the signal "
                    "(rank collapse)",
                    measured=f"token cosine at block {layers - 1}: residual {_s(cos['true'])}, "
                    f"none {_s(cos['false'])}; eval loss {_s(res_loss['true'])} vs "
                    f"{_s(res_loss['false'])} (layer, pre)",
                    verdict=holds, plot="grid/plots/token_cosine_by_depth.png"))

    def growth_of(path, _):
        return (runs.train_last(path, f"activation/block_{layers - 1}/token_std")
                / runs.train_last(path, "activation/block_0/token_std"))

    growth = {n: per_seed(growth_of, grid, norm=n, **base) for n in ("layer", "none")}
    none_lr = [s for p in ("pre", "post") for w in (0, 20)
               for _, s in runs.get(lr, norm="none", placement=p, warmup_steps=w).values()]
    diverged = sum(s.get("status") == "diverged" for s in none_lr)
    holds = _verdict(min(growth["none"].values()) > max(growth["layer"].values()), diverged > 0)
    out.append(dict(id="F5", claim="Without normalization the residual stream grows with depth "
                    "and training is fragile at high learning rates",
                    measured=f"token std last/first block: none {_s(growth['none'])}, layer "
                    f"{_s(growth['layer'])}; no-norm runs that diverged at lr 1e-2 without "
                    f"clipping: {diverged}/{len(none_lr)} (pre/post × warm-up 0/20 × seeds)",
                    verdict=holds, plot="grid/plots/token_std_by_depth.png"))

    found = {name: runs.get(lr, norm="layer", placement=p, warmup_steps=w)
             for name, p, w in (("post0", "post", 0), ("pre0", "pre", 0), ("post20", "post", 20))}
    ratio = {name: {seed: runs.train_first(path, f"grad_norm/ffn_out/block_{layers - 1}")
                    / runs.train_first(path, "grad_norm/ffn_out/block_0")
                    for seed, (path, _) in found[name].items()} for name in ("post0", "pre0")}
    val = {name: {seed: _val(s) for seed, (_, s) in f.items()} for name, f in found.items()}
    losses = {name: " / ".join(_loss(s) for _, s in f.values()) for name, f in found.items()}
    holds = _verdict(_each(lambda a, b: a > b, val["post0"], val["pre0"]),
                     _each(lambda a, b: a < b, val["post20"], val["post0"]))
    seeds = "/".join(str(s) for s in found["post0"])
    out.append(dict(id="F6", claim="Post-LN needs warm-up, Pre-LN does not; at init Post-LN's "
                    "gradient norm depends on depth",
                    measured=f"lr 1e-2, no warm-up (seeds {seeds}): post {losses['post0']}, pre "
                    f"{losses['pre0']}; post with warm-up {losses['post20']}; step-0 FFN-out "
                    f"grad norm last/first block: post {_s(ratio['post0'])}, pre "
                    f"{_s(ratio['pre0'])}",
                    verdict=holds, plot="lr_slice/plots/loss.png"))
    return out


def render(root: Path, findings: list[dict], runs: Runs) -> str:
    cfg = runs.runs[0][0]
    metas = {read_json(p / "meta.json").get("git_sha") for _, p, _ in runs.runs}
    seeds = sorted({int(c.train.seed) for c, _, _ in runs.runs})
    lines = [
        "# Reference results",
        "",
        "Generated by `python -m trainer.results.findings results/reference` from the runs under",
        "`results/reference/` (made by `scripts/reference.sh`); do not edit by hand.",
        "",
        f"Setting: {cfg.model.num_layers} blocks, d={cfg.model.dim}, {cfg.model.num_heads} heads, "
        f"BPE {cfg.data.vocab_size}, {cfg.train.steps} steps of {cfg.data.tokens_per_batch} "
        f"tokens, embedded Wikipedia sample, 2 CPU cores; {len(runs.runs)} runs, seeds "
        f"{', '.join(str(s) for s in seeds)} (where a variant has several, a value reads "
        f"mean (seed 0, seed 1, …) and a comparison must hold for each seed); code at git "
        f"{', '.join(sorted(str(m)[:10] for m in metas))}.",
        "Tables: `grid/summary.md` (norm × residual × placement at lr 2e-3 with warm-up) and",
        "`lr_slice/summary.md` (lr 1e-2, no clipping, warm-up 0 vs 20); plots in `*/plots/`.",
        "",
        "| id | claim | measured | shows at this scale? | plot |",
        "|---|---|---|---|---|",
    ]
    for f in findings:
        verdict = {True: "yes", "partly": "**partly** (see the numbers)"}.get(
            f["verdict"], "**no** (see the numbers)")
        lines.append(f"| {f['id']} | {f['claim']} | {f['measured']} | {verdict} | "
                     f"[{f['plot']}]({root.name}/{f['plot']}) |")
    collapsed = []
    for cfg_, path, summary in runs.runs:
        cos = runs.eval(path, f"probe/token_cosine/block_{int(cfg_.model.num_layers) - 1}")
        if cos > 0.99:
            collapsed.append(f"`{path.parent.name}/{path.name}` ({_loss(summary)})")
    lines += ["", f"Runs whose last block maps every token of a sequence to the same direction "
              f"(token cosine > 0.99: rank collapse; final eval loss in brackets): "
              f"{len(collapsed)} of {len(runs.runs)}: " + ", ".join(collapsed) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0] if argv else "results/reference")
    runs = Runs(root)
    text = render(root, measure(runs), runs)
    write_atomic(root.parent / "README.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
