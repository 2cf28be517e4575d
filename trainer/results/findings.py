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
    """The reference runs, looked up by their config values."""

    def __init__(self, root: Path):
        self.root = root
        self.runs = []
        for cfg_path in sorted(root.rglob("config.yaml")):
            if cfg_path.parent.name.endswith(".reproduce"):
                continue
            cfg = OmegaConf.load(cfg_path)
            self.runs.append((cfg, cfg_path.parent, read_json(cfg_path.parent / "summary.json")))

    def get(self, group: str, **want):
        """The run under ``root/group`` whose config matches ``want`` (keys: norm, lr, ...)."""
        for cfg, path, summary in self.runs:
            if path.parent.name != group:
                continue
            flat = {**cfg.model, **cfg.train}
            if all(str(flat[k]) == str(v) for k, v in want.items()):
                return path, summary
        raise KeyError(f"no run in {group} with {want}")

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


def _verdict(*parts: bool) -> bool | str:
    """True when every part of a claim shows, "partly" when some do, False when none does."""
    return True if all(parts) else ("partly" if any(parts) else False)


def _loss(summary: dict) -> str:
    if summary.get("status") == "diverged":
        return f"diverged at step {summary['diverged_step']}"
    return _g(summary.get("final_eval_loss"))


def measure(runs: Runs) -> list[dict]:
    """One dict per claim: id, claim, measured (markdown), verdict, evidence (plot / runs)."""
    grid, lr = "grid", "lr_slice"
    layers = int(runs.runs[0][0].model.num_layers)
    base = dict(residual="true", placement="pre")
    out = []

    inv = {n: runs.eval(runs.get(grid, norm=n, **base)[0], "probe/batch_invariance")
           for n in TOKEN_NORMS + BATCH_NORMS}
    holds = max(inv[n] for n in TOKEN_NORMS) < 1e-4 < 1e-3 < min(inv[n] for n in BATCH_NORMS)
    out.append(dict(id="F1", claim="LN-style norms give a sequence the same output whatever "
                    "its batch; BN does not",
                    measured="max \\|Δ logits\\| (train mode): " + ", ".join(
                        f"{n} {_g(v)}" for n, v in inv.items()),
                    verdict=holds, plot="grid/plots/invariance_and_gap.png"))

    gap = {}
    for n in ("layer", "batch", "masked_batch"):
        _, s = runs.get(grid, norm=n, **base)
        gap[n] = (s.get("final_eval_loss") or math.nan) - (s.get("final_eval_loss_train_mode") or math.nan)
    holds = abs(gap["layer"]) < 1e-4 and gap["batch"] > 0.05
    out.append(dict(id="F2", claim="BN switches to running statistics at inference, so training "
                    "and inference disagree; LN is the same function in both",
                    measured="eval loss (inference) − eval loss (batch statistics): " + ", ".join(
                        f"{n} {_g(v)}" for n, v in gap.items()),
                    verdict=holds, plot="grid/plots/invariance_and_gap.png"))

    drift, loss = {}, {}
    for n in BATCH_NORMS:
        path, s = runs.get(grid, norm=n, **base)
        drift[n] = sum(runs.eval(path, f"probe/bn_stat_drift/block_{i}")
                       for i in range(layers)) / layers
        loss[n] = s.get("final_eval_loss") or math.nan
    holds = drift["batch"] > drift["masked_batch"] and loss["batch"] > loss["masked_batch"]
    out.append(dict(id="F3", claim="Padding pollutes BN statistics unless pads are masked",
                    measured=f"mean BN statistic drift: batch {_g(drift['batch'])} vs masked "
                    f"{_g(drift['masked_batch'])}; eval loss: batch {_g(loss['batch'])} vs "
                    f"masked {_g(loss['masked_batch'])}",
                    verdict=holds, plot="grid/summary.md"))

    cos, res_loss = {}, {}
    for r in ("true", "false"):
        path, s = runs.get(grid, norm="layer", residual=r, placement="pre")
        cos[r] = runs.eval(path, f"probe/token_cosine/block_{layers - 1}")
        res_loss[r] = s.get("final_eval_loss") or math.nan
    holds = cos["false"] > cos["true"] + 0.05 and res_loss["false"] > res_loss["true"]
    out.append(dict(id="F4", claim="Without residual connections deep stacks lose the signal "
                    "(rank collapse)",
                    measured=f"token cosine at block {layers - 1}: residual {_g(cos['true'])}, "
                    f"none {_g(cos['false'])}; eval loss {_g(res_loss['true'])} vs "
                    f"{_g(res_loss['false'])} (layer, pre)",
                    verdict=holds, plot="grid/plots/token_cosine_by_depth.png"))

    growth = {}
    for n in ("layer", "none"):
        path, _ = runs.get(grid, norm=n, **base)
        growth[n] = (runs.train_last(path, f"activation/block_{layers - 1}/token_std")
                     / runs.train_last(path, "activation/block_0/token_std"))
    none_lr = [runs.get(lr, norm="none", placement=p, warmup_steps=w)[1]
               for p in ("pre", "post") for w in (0, 20)]
    diverged = sum(s.get("status") == "diverged" for s in none_lr)
    holds = _verdict(growth["none"] > growth["layer"], diverged > 0)
    out.append(dict(id="F5", claim="Without normalization the residual stream grows with depth "
                    "and training is fragile at high learning rates",
                    measured=f"token std last/first block: none {_g(growth['none'])}, layer "
                    f"{_g(growth['layer'])}; no-norm runs diverged at lr 1e-2 without "
                    f"clipping: {diverged}/{len(none_lr)}",
                    verdict=holds, plot="grid/plots/token_std_by_depth.png"))

    post0 = runs.get(lr, norm="layer", placement="post", warmup_steps=0)
    pre0 = runs.get(lr, norm="layer", placement="pre", warmup_steps=0)
    post20 = runs.get(lr, norm="layer", placement="post", warmup_steps=20)
    ratio = {}
    for name, (path, _) in (("post", post0), ("pre", pre0)):
        ratio[name] = (runs.train_first(path, f"grad_norm/ffn_out/block_{layers - 1}")
                       / runs.train_first(path, "grad_norm/ffn_out/block_0"))

    def val(s):
        return math.inf if s.get("status") == "diverged" else (s.get("final_eval_loss") or math.inf)

    holds = _verdict(val(post0[1]) > val(pre0[1]), val(post20[1]) < val(post0[1]))
    out.append(dict(id="F6", claim="Post-LN needs warm-up, Pre-LN does not; at init Post-LN's "
                    "gradient norm depends on depth",
                    measured=f"lr 1e-2, no warm-up: post {_loss(post0[1])}, pre "
                    f"{_loss(pre0[1])}; post with warm-up {_loss(post20[1])}; step-0 FFN-out "
                    f"grad norm last/first block: post {_g(ratio['post'])}, pre "
                    f"{_g(ratio['pre'])}",
                    verdict=holds, plot="lr_slice/plots/loss.png"))
    return out


def render(root: Path, findings: list[dict], runs: Runs) -> str:
    cfg = runs.runs[0][0]
    metas = {read_json(p / "meta.json").get("git_sha") for _, p, _ in runs.runs}
    lines = [
        "# Reference results",
        "",
        "Generated by `python -m trainer.results.findings results/reference` from the runs under",
        "`results/reference/` (made by `scripts/reference.sh`); do not edit by hand.",
        "",
        f"Setting: {cfg.model.num_layers} blocks, d={cfg.model.dim}, {cfg.model.num_heads} heads, "
        f"BPE {cfg.data.vocab_size}, {cfg.train.steps} steps of {cfg.data.tokens_per_batch} "
        f"tokens, embedded Wikipedia sample, 2 CPU cores, seed {cfg.train.seed}; "
        f"{len(runs.runs)} runs; code at git {', '.join(sorted(str(m)[:10] for m in metas))}.",
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
