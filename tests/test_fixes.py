"""I3 (Peri-LN) and I4 (DeepNorm), pre-registration 3, judged on synthetic ``scale/`` sub-sweeps:
real run directories (config.yaml from the reference config and the variant's keys, summary.json,
event files by the lab's writers), made-up numbers. With the healthy numbers every part shows;
each flip below changes the numbers of one variant and must change the verdict."""

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.reference_fixture import BASELINES, INIT_LOSS, STEPS, write_run
from tests.test_instability import write_reference as write_inst_lr
from trainer.findings import dynamics, fixes
from trainer.findings.reference import Reference
from trainer.findings.thresholds import DEEP_DEPTH, DEEP_DEPTH_RATES, INSTABILITY_SEEDS, RATE_GRID

INF = math.inf
LAYERS = 6
PRE_BEST = 0.003  # test_instability's Pre-LN: best at 3e-3
# (validation = test) loss at each rate of RATE_GRID (seed 0; seed s adds 0.01 s)
PERI_LR = (2.6, 2.3, 2.08, 2.2, 2.6)
DEEP_LR = {("Post-LN", 50): (2.45, 2.35, 3.1, 3.1, INF),  # trains at 2 rates
           ("DeepNorm", 50): (2.45, 2.3, 2.2, 2.3, 2.6),  # trains at 4
           ("DeepNorm", 0): (2.45, 2.3, 2.22, 2.35, 2.7),
           ("Post-LN", 0): (2.45, 3.1, 3.1, INF, INF)}  # trains at 1 (F6 reads it)
DEEP_DEPTH_LOSS = {"Post-LN": (2.45, 2.35, 3.1), "DeepNorm": (2.3, 2.15, 2.2)}
# I6 (pre-registration 4): Post-LN on Xavier init, as plain Post-LN above (trains at 2 rates)
XAVIER_LR = (2.45, 2.35, 3.1, 3.1, INF)
# last / first block token std at the best rate
GROWTH = {"Pre-LN": 4.0, "Peri-LN": 1.5}
KEYS = {"Post-LN": ["model.placement=post", "model.residual=true", "model.init=normal"],
        "DeepNorm": ["model.placement=post", "model.residual=deepnorm", "model.init=xavier"],
        "Post-LN (Xavier)": ["model.placement=post", "model.residual=true", "model.init=xavier",
                             "train.warmup_steps=50"],
        "Peri-LN": ["model.placement=peri", "model.residual=true", "model.qk_norm=none",
                    "train.warmup_steps=50"]}


def _run(path: Path, keys: list[str], lr: float, seed: int, loss: float,
         growth: float | None = None) -> None:
    summary = ({"status": "diverged", "diverged_step": 7, "loss_spikes": 0} if math.isinf(loss)
               else {"status": "completed", "final_eval_loss": loss, "final_test_loss": loss,
                     "loss_spikes": 0})
    last = {"loss": loss} if math.isfinite(loss) else {}
    if growth is not None:
        layers = next((int(k.split("=")[1]) for k in keys if k.startswith("model.num_layers=")),
                      LAYERS)
        last.update({"activation/block_0/token_std": 1.0,
                     f"activation/block_{layers - 1}/token_std": growth})
    write_run(path, ["model.norm=layer", *keys, f"train.lr={lr}", f"train.seed={seed}"], summary,
              {0: {"loss": INIT_LOSS}, STEPS: last}, {0: {"loss": INIT_LOSS}, STEPS: last})


def _grid(group: Path, name: str, keys: list[str], rates, losses, seeds) -> None:
    for lr, loss in zip(rates, losses):
        for seed in seeds:
            _run(group / f"{name},lr={lr},seed={seed}", keys, lr, seed, loss + 0.01 * seed)
    (group / "baselines.json").write_text(json.dumps(BASELINES))


def write_peri(root: Path, growth: float = GROWTH["Peri-LN"], lr_losses=PERI_LR) -> None:
    scale = root / "scale"
    for group in ("place_lr", "place_best"):
        shutil.rmtree(scale / group, ignore_errors=True)
    _grid(scale / "place_lr", "Peri-LN", KEYS["Peri-LN"], RATE_GRID, lr_losses, (0,))
    best = RATE_GRID[lr_losses.index(min(lr_losses))]
    for seed in INSTABILITY_SEEDS:
        _run(scale / "place_best" / f"Peri-LN,seed={seed}", KEYS["Peri-LN"], best, seed,
             min(lr_losses) + 0.01 * seed, growth)
    (scale / "place_best" / "baselines.json").write_text(json.dumps(BASELINES))


def write_deep(root: Path, lr_table=DEEP_LR, depth=DEEP_DEPTH_LOSS) -> None:
    scale = root / "scale"
    for group in ("deep_lr", "deep_depth"):
        shutil.rmtree(scale / group, ignore_errors=True)
    for (name, warmup), losses in lr_table.items():
        _grid(scale / "deep_lr", f"{name},w{warmup}", [*KEYS[name], f"train.warmup_steps={warmup}"],
              RATE_GRID, losses, INSTABILITY_SEEDS)
    for name, losses in depth.items():
        _grid(scale / "deep_depth", name, [*KEYS[name], "train.warmup_steps=50",
                                           f"model.num_layers={DEEP_DEPTH}"],
              DEEP_DEPTH_RATES, losses, INSTABILITY_SEEDS)


def write_init_ctl(root: Path, losses=XAVIER_LR) -> None:
    shutil.rmtree(root / "scale" / fixes.INIT_CTL, ignore_errors=True)
    _grid(root / "scale" / fixes.INIT_CTL, "xavier", KEYS["Post-LN (Xavier)"], RATE_GRID, losses,
          INSTABILITY_SEEDS)


def write_scale(root: Path) -> Path:
    """Every sub-sweep I1–I4 read, with the healthy numbers."""
    write_inst_lr(root)
    for seed in INSTABILITY_SEEDS:  # Pre-LN at its best, with the stream's std per block
        _run(root / "scale/inst_lr" / f"Pre-LN,lr={PRE_BEST},seed={seed}",
             ["model.residual=true", "model.placement=pre", "train.warmup_steps=50",
              "model.qk_norm=none", "train.z_loss=0.0"], PRE_BEST, seed, 2.1 + 0.01 * seed,
             GROWTH["Pre-LN"])
    write_peri(root)
    write_deep(root)
    write_init_ctl(root)
    return root


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    return write_scale(tmp_path_factory.mktemp("fixes") / "reference")


@pytest.fixture
def root(healthy, tmp_path) -> Path:
    shutil.copytree(healthy, tmp_path / "reference")
    return tmp_path / "reference"


def test_healthy_numbers_show_every_part(healthy):
    ref = Reference(healthy)
    i3, i4 = fixes.i3(ref), fixes.i4(ref)
    assert not i3.missing and not i4.missing
    assert (i3.marks, i4.marks) == ("✓✓", "✓✓✓✓")
    assert i3.verdict == i4.verdict == "yes"


def test_a_peri_stream_that_grows_as_much_as_pre_lns_refutes_i3a(root):
    write_peri(root, growth=GROWTH["Pre-LN"])
    i3 = fixes.i3(Reference(root))
    assert i3.marks == "✗✓" and i3.verdict == "partly"


def test_a_worse_peri_ln_refutes_i3b(root):
    write_peri(root, lr_losses=tuple(x + 0.3 for x in PERI_LR))
    assert fixes.i3(Reference(root)).marks == "✓✗"


def test_a_best_at_the_grids_edge_is_not_judged_and_place_best_is_not_read(root):
    write_peri(root, lr_losses=(2.0, 2.3, 2.08, 2.2, 2.6))  # best at 3e-4, the lowest rate
    shutil.rmtree(root / "scale/place_best")
    i3 = fixes.i3(Reference(root))
    assert not i3.missing and i3.marks == "??" and "open edge" in i3.parts[0].why


def test_missing_seeds_at_the_best_rate_are_named(root):
    shutil.rmtree(root / "scale/place_best" / "Peri-LN,seed=2")
    i3 = fixes.i3(Reference(root))
    assert i3.verdict == "not run" and any("place_best" in m and "seed 2" in m for m in i3.missing)


def test_deepnorm_training_at_no_more_rates_refutes_i4a(root):
    write_deep(root, lr_table={**DEEP_LR, ("DeepNorm", 50): (2.55, 2.3, 2.2, 3.1, INF)})
    i4 = fixes.i4(Reference(root))
    assert i4.marks[0] == "✗" and i4.verdict == "partly"
    assert fixes.Grid(Reference(root).below("scale"), i4, "DeepNorm", "deep_lr",
                      dict(fixes.DEEP, warmup_steps=50), RATE_GRID,
                      INSTABILITY_SEEDS).trains_count(RATE_GRID) == {0: 2, 1: 2, 2: 2}


def test_deepnorm_that_needs_warmup_refutes_i4c(root):
    write_deep(root, lr_table={**DEEP_LR, ("DeepNorm", 0): (2.45, 3.1, 3.1, INF, INF)})
    assert fixes.i4(Reference(root)).marks[2] == "✗"


def test_no_gain_at_depth_refutes_i4d(root):
    write_deep(root, depth={**DEEP_DEPTH_LOSS, "Post-LN": (2.3, 2.15, 2.2)})
    assert fixes.i4(Reference(root)).marks[3] == "✗"


def test_an_absent_deep_depth_run_is_named(root):
    shutil.rmtree(root / "scale/deep_depth" / f"DeepNorm,lr={DEEP_DEPTH_RATES[0]},seed=1")
    i4 = fixes.i4(Reference(root))
    assert i4.verdict == "not run" and any("deep_depth" in m and "seed 1" in m for m in i4.missing)


def test_i6_shows_when_post_ln_on_xavier_collapses_where_deepnorm_trains(healthy):
    i6 = fixes.i6(Reference(healthy))
    assert not i6.missing and i6.marks == "✓✓✓" and i6.verdict == "yes"
    assert any(x.startswith("the init's own effect (described)") for x in i6.lines)


def test_post_ln_on_xavier_as_good_as_deepnorm_refutes_i6(root):
    """The gain is the init's: Post-LN on Xavier with DeepNorm's numbers refutes every part."""
    write_init_ctl(root, DEEP_LR[("DeepNorm", 50)])
    i6 = fixes.i6(Reference(root))
    assert i6.marks == "✗✗✗" and i6.verdict == "no"
    assert fixes.i4(Reference(root)).verdict == "yes"  # I4 is judged as pre-registered


def test_i6_is_not_run_yet_without_its_sub_sweep_and_its_runs_are_no_collapse_originals(root):
    from trainer.findings import collapse

    write_init_ctl(root, (2.45, 2.35, INF, 3.1, INF))  # diverges at 3e-3: a failure
    assert all("init_ctl" not in name for name, _, _ in collapse.originals(Reference(root)))
    shutil.rmtree(root / "scale" / fixes.INIT_CTL)
    i6 = fixes.i6(Reference(root))
    assert i6.verdict == "not run" and any("init_ctl" in m for m in i6.missing)


def test_f6_reads_post_ln_on_deep_lr_where_every_seed_ran_every_rate(base, tmp_path):
    """With ``scale/deep_lr`` (seeds 0–2 at every rate), F6's Post-LN part reads it: without
    warm-up Post-LN trains at 1 rate of 5 on every seed, with it at 2, and that alone shows
    "needs warm-up" (its loss at its best is worse too); as many rates and the same losses
    refute it. Pre-LN's part still reads ``lr``/``best``."""
    root = tmp_path / "reference"
    shutil.copytree(base, root)
    write_deep(root)
    f6 = dynamics.f6(Reference(root))
    assert [p.mark for p in f6.parts] == ["✓", "✓", "✓"], f6.parts
    assert "post-LN, warm-up 0, rates of the 5 shared at which it trains: 1 ± 0 [1, 1] (per seed: " \
           "1 / 1 / 1)" in f6.lines
    # its best (3e-4) is the lowest rate tried: its loss is not read, and the page says why
    assert "post-LN, warm-up 0: post-LN, warm-up 0's best rate 0.0003 is the lowest rate tried " \
           "(open edge)" in f6.lines
    assert "one seed ran every rate" not in " ".join(x for x in f6.lines if x.startswith("post"))
    write_deep(root, lr_table={**DEEP_LR, ("Post-LN", 0): DEEP_LR[("Post-LN", 50)]})
    assert [p.mark for p in dynamics.f6(Reference(root)).parts] == ["✗", "✓", "✓"]
    # fewer rates without warm-up, but as good at its best: still shown (either part suffices)
    write_deep(root, lr_table={**DEEP_LR, ("Post-LN", 0): (2.35, 3.1, 3.1, INF, INF)})
    assert dynamics.f6(Reference(root)).parts[0].mark == "✓"


def test_what_we_found_has_a_line_for_the_fixes_with_the_first_refuted_statistic(root):
    """The opening's line for pre-registration 3: each claim linked, its verdict and marks, and
    where a part is refuted, that part's statistic."""
    from trainer.findings.page import scale_summary

    write_peri(root, growth=GROWTH["Pre-LN"])  # Peri-LN's stream grows as much as Pre-LN's
    ref = Reference(root)
    i3, i4 = fixes.i3(ref), fixes.i4(ref)
    [text] = scale_summary([i3, i4])
    assert text.startswith("- **The field's instabilities and their fixes**")
    assert f"[I3](#i3) Peri-LN's stream grows less with depth than Pre-LN's, at no cost: " \
           f"**partly** (✗✓); {i3.parts[0].text}: {i3.parts[0].stat}" in text
    assert "[I4](#i4) DeepNorm trains Post-LN where it collapses, without warm-up: yes (✓✓✓✓)" in text
    assert scale_summary([]) == []
