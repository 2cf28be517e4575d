"""The measuring instruments behind the findings: baselines, init schemes, loss spikes,
population statistics for BN, the centred rank-collapse probe, and duplicate-network sweeps."""

from __future__ import annotations

import math

import numpy as np
import pytest

import trainer

tf = trainer.import_tensorflow_quietly()
import keras  # noqa: E402

from trainer.config import load_config, network_key  # noqa: E402
from trainer.models import CausalLM, model_config  # noqa: E402
from trainer.results import baselines as bl  # noqa: E402
from trainer.sweep import SweepSpec, dedupe, expand_variants  # noqa: E402
from trainer.telemetry.precise_bn import population_statistics  # noqa: E402
from trainer.telemetry.probes import rank_collapse_residual  # noqa: E402
from trainer.telemetry.spikes import SpikeCounter  # noqa: E402


# ------------------------------------------------------------------ baselines
def test_ngram_baselines_match_a_brute_force_count():
    """Unigram/bigram cross-entropies against explicit probability tables on random tokens."""
    rng = np.random.default_rng(0)
    vocab = 7
    train = (rng.integers(0, vocab, 400), rng.integers(0, vocab, 400))
    evals = (rng.integers(0, vocab, 50), rng.integers(0, vocab, 50))
    held = np.arange(400) % 10 == 9
    out = bl.compute(train, evals, vocab, held)
    s, t = train
    k = out["bigram_k"]
    table = np.full((vocab, vocab), k)
    np.add.at(table, (s, t), 1.0)
    table /= table.sum(1, keepdims=True)
    assert out["bigram"] == pytest.approx(-np.mean(np.log(table[evals[0], evals[1]])), rel=1e-12)
    ku = out["unigram_k"]
    uni = (np.bincount(t, minlength=vocab) + ku) / (len(t) + ku * vocab)
    assert out["unigram"] == pytest.approx(-np.mean(np.log(uni[evals[1]])), rel=1e-12)
    assert out["bigram_k"] in bl.K_GRID and out["unigram_k"] in bl.K_GRID


def test_bigram_beats_unigram_on_text_with_structure():
    """Tokens that follow a cycle: the bigram table knows the next token, the unigram cannot."""
    seq = np.tile(np.arange(5), 200)
    pairs = (seq[:-1], seq[1:])
    out = bl.compute(pairs, pairs, 5, np.arange(len(seq) - 1) % 10 == 9)
    assert out["bigram"] < 0.01 < math.log(5) - 0.01 < out["unigram"]


def test_plateau_label_is_within_the_margin_only():
    b = {"unigram": 3.0}
    assert bl.at_plateau(3.0 + bl.PLATEAU_MARGIN * 0.9, b)
    assert not bl.at_plateau(3.0 - bl.PLATEAU_MARGIN * 1.1, b)
    assert not bl.at_plateau(None, b) and not bl.at_plateau(3.0, None)


# ------------------------------------------------------------------ model.init
def _kernel_stds(init: str, layers: int = 4, dim: int = 64, ffn: int = 256, vocab: int = 300):
    keras.utils.set_random_seed(0)
    model = CausalLM(model_config(num_layers=layers, dim=dim, num_heads=4, ffn_dim=ffn, init=init),
                     vocab, 16)
    model.build((None, 16))
    block = model.blocks[-1]
    return {"ffn_hidden": float(np.std(block.ffn.hidden.kernel)),
            "ffn_out": float(np.std(block.ffn.out.kernel)),
            "attn_out": float(np.std(block.attention._output_dense.kernel)),
            "attn_query": float(np.std(block.attention._query_dense.kernel)),
            "head": float(np.std(model.head.kernel))}


@pytest.mark.parametrize("init, expected", [
    ("normal", dict(ffn_hidden=0.02, ffn_out=0.02, attn_out=0.02, attn_query=0.02, head=0.02)),
    ("xavier", dict(ffn_hidden=(2 / 320) ** 0.5, ffn_out=(2 / 320) ** 0.5, attn_out=(1 / 64) ** 0.5,
                    attn_query=(1 / 64) ** 0.5, head=(2 / 364) ** 0.5)),
    ("scaled", dict(ffn_hidden=0.02, ffn_out=0.02 / 8 ** 0.5, attn_out=0.02 / 8 ** 0.5,
                    attn_query=0.02, head=0.02)),
])
def test_init_schemes_give_the_documented_scales(init, expected):
    """Sample std of each kernel matches its scheme's formula (4 layers: 1/sqrt(2L) = 1/sqrt(8))."""
    got = _kernel_stds(init)
    for name, std in expected.items():
        assert got[name] == pytest.approx(std, rel=0.08), name


def test_unknown_init_is_one_config_error():
    from trainer.config import ConfigError

    with pytest.raises(ConfigError, match="model.init"):
        load_config(None, ["model.init=kaiming"])


# ------------------------------------------------------------------ spikes
def test_spike_counter_flags_blow_ups_and_not_a_falling_loss():
    counter = SpikeCounter(vocab_size=100, window=3)
    losses = [4.7, 4.0, 3.0, 2.5, 2.4, 5.2, 2.3, 2.2, 9.9, 2.1]
    flags = [counter.update(i, x) for i, x in enumerate(losses)]
    # 5.2 > 2 x min(3.0, 2.5, 2.4); 9.9 > 1.1 ln 100; 4.7 at step 0 is init (< 1.1 ln 100)
    assert [i for i, f in enumerate(flags) if f] == [5, 8]
    resumed = SpikeCounter.from_state(100, 3, counter.state())
    assert resumed.update(10, 4.5) and resumed.count == 3


# ------------------------------------------------------------------ PreciseBN
@pytest.mark.parametrize("norm", ["batch", "masked_batch"])
def test_population_statistics_are_the_mean_of_the_batch_moments(norm):
    keras.utils.set_random_seed(0)
    model = CausalLM(model_config(num_layers=1, dim=16, num_heads=2, ffn_dim=32, norm=norm), 40, 8)
    model.build((None, 8))
    rng = np.random.default_rng(1)
    batches = [{"inputs": rng.integers(1, 40, (3, 8)).astype("int32"),
                "mask": (np.arange(8)[None] < rng.integers(2, 9, (3, 1))).astype("float32")}
               for _ in range(5)]
    layer = model.blocks[0].attention_norm
    before = [v.numpy() for v in model.non_trainable_variables]
    captured = []
    with population_statistics(model, batches):
        inside = [v.numpy() for v in layer.running_moments]
        for b in batches:  # the first norm sees the embeddings: its batch moments directly
            x = model.token_embedding(b["inputs"]) + model.position_embedding(np.arange(8))[None]
            captured.append([m.numpy() for m in layer.moments(x, b["mask"])])
    for i in range(2):
        np.testing.assert_allclose(inside[i], np.mean([c[i] for c in captured], 0), rtol=1e-5,
                                   atol=1e-7)
    for v, b in zip(model.non_trainable_variables, before):  # restored on exit
        np.testing.assert_array_equal(v.numpy(), b)


# ------------------------------------------------------------------ rank collapse
def test_rank_collapse_residual_is_centred():
    rng = np.random.default_rng(0)
    mask = np.ones((1, 6))
    same = np.tile(rng.normal(size=(1, 1, 8)), (1, 6, 1))
    spread = rng.normal(size=(1, 6, 8))
    offset = spread * 0.01 + 5.0  # tokens share a large offset but still differ
    assert rank_collapse_residual(same, mask) == pytest.approx(0.0, abs=1e-12)
    assert rank_collapse_residual(spread, mask) > 0.8
    assert rank_collapse_residual(np.zeros((1, 6, 8)), mask) == 0.0  # underflow counts as collapse
    # the offset dominates the norm: small but non-zero, and the pads never enter
    padded = np.concatenate([offset, rng.normal(size=(1, 3, 8)) * 100], axis=1)
    assert rank_collapse_residual(padded, np.r_[mask[0], np.zeros(3)][None]) == pytest.approx(
        rank_collapse_residual(offset, mask))


# ------------------------------------------------------------------ duplicate networks
def test_sweep_drops_norm_none_at_the_second_placement():
    spec = SweepSpec(grid={"model.norm": ["layer", "none"], "model.placement": ["pre", "post"]})
    variants = expand_variants(spec)
    configs = [load_config(None, v.overrides) for v in variants]
    kept, _, notes = dedupe(variants, configs)
    assert [v.name for v in kept] == ["norm=layer,placement=pre", "norm=layer,placement=post",
                                      "norm=none,placement=pre"]
    assert notes == ["skipping norm=none,placement=post: the same network as norm=none,placement=pre"]
    assert network_key(configs[0]) != network_key(configs[1])
