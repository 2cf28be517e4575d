"""KV-cache decoding (trainer/models/decode.py) against the full-sequence forward, every norm.

The decoder under test is ``generate``'s: the token loop compiled as one XLA program; the
per-token loop (``compiled=False``) must give its tokens and logits. Tiny models (2 layers,
dim 32, vocab 50, max_len 24, so the compiled loop steps through cache lengths 3, 6, 9, ...)
with weights moved off their init (so logits are of order 1, not near-uniform) and, for the
batch norms, running statistics moved off (0, 1) by training-mode passes. Inference mode,
float32. "Equal" is <= 1e-5 on the logits.
"""

import numpy as np
import pytest

import trainer

tf = trainer.import_tensorflow_quietly()
import keras  # noqa: E402

from trainer.models import CausalLM, model_config  # noqa: E402
from trainer.models.decode import Decoder, Request  # noqa: E402
from trainer.models.decode_loop import choose, reach, request_key, segments  # noqa: E402
from trainer.models.lm import DECODE_NEEDS_INFERENCE  # noqa: E402
from trainer.models.norms import BATCH_NORMS, NORMS  # noqa: E402

VOCAB, MAX_LEN = 50, 24
SAME = 1e-5
RNG = np.random.default_rng(3)
# BOS (1) first, then prompts of different lengths; ids >= 3 (no PAD/EOS inside a prompt)
PROMPTS = [[1, *RNG.integers(3, VOCAB, n)] for n in (2, 6, 4, 9, 3)]


# DyT as its authors' LLM code sets it up: a learnable embedding scalar (the stream at std ~1)
# and alpha per location; the scalar multiplies the embeddings in the cached path too.
DYT_RECIPE = {"embed_scale": 1 / (0.02 * 2 ** 0.5), "dyt_alpha_attention": 0.8,
              "dyt_alpha_ffn": 0.2, "dyt_alpha_final": 0.3}
VARIANTS = {**{str(n): {"norm": str(n)} for n in NORMS},
            "dyt+recipe": {"norm": "dyt", **DYT_RECIPE},
            # the placements, DeepNorm and QK-norm (the cached keys are the normalised ones)
            "peri+qk_rms": {"placement": "peri", "qk_norm": "rms"},
            "output+rms+qk_layer": {"norm": "rms", "placement": "output", "qk_norm": "layer"},
            "deepnorm": {"placement": "post", "residual": "deepnorm"},
            "peri+masked_batch": {"norm": "masked_batch", "placement": "peri"}}


def _model(variant: str) -> CausalLM:
    keras.utils.set_random_seed(0)
    model = CausalLM(model_config(num_layers=2, dim=32, num_heads=2, ffn_dim=64, bn_momentum=0.5,
                                  **VARIANTS[variant]), VOCAB, MAX_LEN)
    model.build((None, MAX_LEN))
    rng = np.random.default_rng(1)
    for w in model.trainable_weights:  # away from N(0, 0.02) and γ = 1, β = 0
        w.assign(w.numpy() + rng.normal(0, 0.15, w.shape).astype("float32"))
    for _ in range(3):  # batch norms: running statistics from batches, not (0, 1)
        model(rng.integers(1, VOCAB, (4, 12)).astype("int32"), training=True)
    return model


# Each variant's decoder is built and compiled once: a variant's tests go to one xdist worker
# (--dist loadgroup, setup.cfg), the variants spread over the workers. The first tier decodes
# one of each kind; the variants it leaves to the slow tier repeat a kind it has (batch and
# sync_batch: masked_batch's running statistics; dyt: dyt+recipe; peri+masked_batch: peri and
# masked_batch each), as compiling the token loop takes ~20 s per variant on 2 cores.
SLOW_VARIANTS = ("batch", "dyt", "peri+masked_batch", "sync_batch")


def _variant(name: str):
    marks = [pytest.mark.xdist_group(f"test_decode_{name}")]
    return pytest.param(name, marks=[*marks, pytest.mark.slow] if name in SLOW_VARIANTS else marks)


@pytest.fixture(scope="module", params=[_variant(v) for v in sorted(VARIANTS)])
def decoder(request) -> Decoder:
    """One decoder per norm (and DyT's recipe): its compiled programs are shared below."""
    return Decoder(_model(request.param), record_logits=True)


def _same(a: list, b: list) -> None:
    """Completions ``a`` and ``b``: the same tokens, logits within ``SAME``."""
    for x, y in zip(a, b, strict=True):
        assert x.tokens == y.tokens and len(x.logits) == len(y.logits)
        assert np.abs(np.stack(x.logits) - np.stack(y.logits)).max() <= SAME


def _full_logits(model, sequences: list[list[int]]) -> list[np.ndarray]:
    """Logits of each sequence at every position, from one right-padded full forward."""
    length = max(map(len, sequences))
    tokens = np.zeros((len(sequences), length), "int32")
    mask = np.zeros((len(sequences), length), "float32")
    for row, s in enumerate(sequences):
        tokens[row, :len(s)], mask[row, :len(s)] = s, 1.0
    out = np.asarray(model(tokens, padding_mask=mask, training=False))
    return [out[row, :len(s)] for row, s in enumerate(sequences)]


def _requests(new_tokens=(6, 6, 6, 6, 6)) -> list[Request]:
    return [Request(p, n, seed=i) for i, (p, n) in enumerate(zip(PROMPTS, new_tokens))]


def test_bn_running_statistics_are_not_their_init(decoder):
    for block in decoder.model.blocks:
        if block.config.norm in BATCH_NORMS:
            mean, var = block.attention_norm.running_moments
            assert np.abs(mean.numpy()).max() > 1e-2 and np.abs(var.numpy() - 1).max() > 1e-2


def test_cached_logits_equal_the_full_forward_at_every_position(decoder):
    done = decoder.generate(_requests(), batch_size=len(PROMPTS))  # padded prompts, one batch
    fed = [c.sequence[:-1] for c in done]  # the last token is emitted, never read
    full = _full_logits(decoder.model, fed)
    for c, expected in zip(done, full):
        assert len(c.tokens) == 6 and len(c.logits) == len(expected)
        assert np.abs(np.stack(c.logits) - expected).max() <= SAME
    # logits of order 1, not near zero: a 1e-5 agreement says something
    assert max(np.abs(f).max() for f in full) > 0.5


def test_greedy_output_equals_the_argmax_loop_over_full_forwards(decoder):
    done = decoder.generate(_requests(), batch_size=len(PROMPTS))  # the programs compiled above
    # All prompts advance together, each a full forward over its whole prefix (right-padded
    # to max_len: in inference mode a pad never reaches an earlier position).
    forward = tf.function(lambda t: decoder.model(t, training=False))
    seqs = [list(p) for p in PROMPTS]
    for _ in range(6):
        tokens = np.zeros((len(seqs), MAX_LEN), "int32")
        for row, s in enumerate(seqs):
            tokens[row, :len(s)] = s
        logits = forward(tokens).numpy()
        for row, s in enumerate(seqs):
            s.append(int(np.argmax(logits[row, len(s) - 1])))
    assert [c.sequence for c in done] == seqs


def test_a_rows_logits_do_not_change_when_others_join_finish_or_refill(decoder):
    # 5 requests, 2 slots, different lengths: rows finish at different steps and are refilled.
    # Sampled: each request has its own seeded sampler, so its tokens do not change either.
    requests = _requests(new_tokens=(2, 7, 3, 5, 4))
    batched = decoder.generate(requests, batch_size=2, temperature=1.0, top_k=8)
    # alone: one slot, so each request decodes with no other row beside it (one program for
    # all five, not one per request's cache reach)
    alone = decoder.generate(requests, batch_size=1, temperature=1.0, top_k=8)
    _same(batched, alone)
    assert len({len(c.tokens) for c in batched}) > 1 and any(c.tokens for c in batched)


def test_the_per_token_loop_gives_the_compiled_loops_tokens_and_logits(decoder):
    # XLA too: a stateless draw under XLA differs from the same draw in graph mode.
    per_token = Decoder(decoder.model, record_logits=True, compiled=False)
    for temperature, top_k in ((0.0, 0), (1.0, 8)):
        requests = _requests(new_tokens=(2, 7, 3, 5, 4))
        _same(decoder.generate(requests, 2, temperature, top_k),
              per_token.generate(requests, 2, temperature, top_k))


@pytest.mark.parametrize("compiled", [True, False])
def test_a_row_stops_at_max_len_tokens_in_all(compiled):
    decoder = Decoder(_model("layer"), xla=False, compiled=compiled)
    prompt = [1, *range(3, MAX_LEN)]  # MAX_LEN - 2 tokens
    (c,) = decoder.generate([Request(prompt, 10)], batch_size=1)
    assert len(c.tokens) == 2 and len(c.sequence) == MAX_LEN


@pytest.mark.parametrize("compiled", [True, False])
def test_the_stop_token_ends_a_request_and_is_not_kept(compiled):
    model = _model("layer")
    logits = _full_logits(model, [PROMPTS[1]])[0]
    free = Decoder(model, xla=False, compiled=compiled)
    (c,) = free.generate([Request(PROMPTS[1], 5)], batch_size=1)
    assert len(c.tokens) == 5 and c.tokens[0] == int(np.argmax(logits[-1]))
    later = next(n for n, t in enumerate(c.tokens) if t not in c.tokens[:n] and n > 0)
    for n in (0, later):  # the stop token drawn first (at the prefill), then in the token loop
        decoder = Decoder(model, xla=False, stop_id=c.tokens[n], compiled=compiled)
        (stopped,) = decoder.generate([Request(PROMPTS[1], 5)], batch_size=1)
        assert stopped.tokens == c.tokens[:n]


@pytest.mark.parametrize("norm", sorted(BATCH_NORMS))
def test_decoding_with_batch_statistics_is_refused_with_the_reason(norm):
    model = _model(norm)
    with pytest.raises(ValueError) as err:
        model(np.ones((1, 1), "int32"), cache=model.new_cache(1),
              positions=np.zeros((1, 1), "int32"), training=True)
    assert DECODE_NEEDS_INFERENCE in str(err.value)  # keras adds a header line


def test_the_token_loop_runs_on_the_cache_lengths_its_requests_reach():
    assert reach([16 + 128], 256) == 160 and segments(256, 160) == [32, 64, 96, 128, 160]
    assert reach([16 + 128, 40], 256) == 160 and reach([5, 300], 256) == 256
    assert segments(24, reach([2], 24)) == [3] and segments(24, 24)[-3:] == [18, 21, 24]


def _choose(logits, keys, counts, temperature=0.0, top_k=0) -> list[int]:
    return choose(tf.constant(logits, tf.float32), tf.constant(keys, tf.int32),
                  tf.constant(counts, tf.int32), temperature, top_k).numpy().tolist()


def test_choose_greedy_top_k_and_seeded_sampling():
    logits = np.array([0.0, 3.0, 1.0, 2.9, -1.0], "float32")
    rows = np.tile(logits, (200, 1))
    keys = np.stack([request_key(s) for s in range(200)])
    assert _choose(rows[:2], keys[:2], [0, 0]) == [1, 1]
    draws = _choose(rows, keys, np.zeros(200), 5.0, 2)
    assert set(draws) == {1, 3}  # top-2 only, both drawn at a high temperature
    assert draws == _choose(rows, keys, np.zeros(200), 5.0, 2)  # seeded: the same again
    assert len(set(_choose(rows, keys, np.zeros(200), 5.0))) == 5
    # one request, its successive tokens (count 0, 1, ...): a fresh draw each
    assert len(set(_choose(rows, np.tile(keys[0], (200, 1)), np.arange(200), 5.0))) == 5


def test_a_draw_depends_on_its_own_row_alone():
    rng = np.random.default_rng(0)
    logits, keys = rng.normal(size=(6, 50)), np.stack([request_key((7, i)) for i in range(6)])
    counts = np.arange(6)
    together = _choose(logits, keys, counts, 1.0, 10)
    alone = [_choose(logits[i:i + 1], keys[i:i + 1], counts[i:i + 1], 1.0, 10)[0]
             for i in range(6)]
    assert together == alone
    shuffled = _choose(logits[::-1], keys[::-1], counts[::-1], 1.0, 10)
    assert shuffled == together[::-1]
