"""The device side of decoding: the sampler, the prefill, one token step, and the token loop.

``Decoder`` (``trainer.models.decode``) schedules requests on the host; the programs here do the
arithmetic. ``token_loop`` runs the whole token loop as one program (a ``tf.while_loop`` that the
decoder compiles with XLA): every step feeds each row its last token at its own position, picks
the next token, and updates the row's bookkeeping on the device (position, budget, done), so the
host is called back only when every row is done, or, when ``refill`` is set, as soon as one row
is done (its slot can then take a waiting request: continuous batching, as with one call per
token). ``step`` is one step for the per-token loop, which keeps its bookkeeping on the host.

Sampling is stateless: request r's i-th token is drawn with the seed ``fold_in(key(r), i)``
(``request_key``), from that row's logits alone, so a request's sample depends neither on the
batch it decodes in nor on which loop decodes it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

NO_STOP = -1  # the stop id when no token stops a request: no token id equals it


def request_key(seed) -> np.ndarray:
    """The (2,) int32 key of a request's sampler, from its seed (an int or a tuple of ints,
    as ``np.random.SeedSequence`` takes them)."""
    return np.random.SeedSequence(seed).generate_state(2, np.uint32).view(np.int32)


def choose(logits, keys, counts, temperature: float, top_k: int):
    """(B,) int32 next tokens from ``logits`` (B, V): argmax at temperature 0, else a draw from
    softmax(logits / temperature) over each row's ``top_k`` most likely tokens (0 = all), row b
    seeded by ``fold_in(keys[b], counts[b])`` (keys (B, 2) int32, counts (B,) int32: the index
    of the token drawn among its request's tokens)."""
    if temperature <= 0:
        return tf.argmax(logits, axis=-1, output_type=tf.int32)
    z = tf.cast(logits, tf.float32) / temperature
    if 0 < top_k < z.shape[-1]:
        kth = tf.math.top_k(z, top_k).values[:, -1:]  # (B, 1): each row's k-th largest
        z = tf.where(z < kth, tf.constant(-np.inf, z.dtype), z)

    def draw(row):  # one row's own seed: no draw depends on another row
        z_row, key, count = row
        seed = tf.random.experimental.stateless_fold_in(key, count)
        return tf.random.stateless_categorical(z_row[None], 1, seed, dtype=tf.int32)[0, 0]

    return tf.map_fn(draw, (z, keys, counts), fn_output_signature=tf.int32)


def prefill(model, tokens, lengths, keys, temperature: float, top_k: int):
    """Prompts ``tokens`` (R, P), right-padded, of ``lengths`` (R,) through ``model`` into a fresh
    cache: (first tokens (R,), that cache's rows, logits (R, P, V) of every prompt position)."""
    rows, length = tokens.shape
    positions = tf.broadcast_to(tf.range(length, dtype=tf.int32)[None], (rows, length))
    logits, kv = model(tokens, cache=model.new_cache(rows), positions=positions, training=False)
    last = tf.gather(logits, lengths - 1, batch_dims=1)  # (R, V): each prompt's last position
    first = choose(last, keys, tf.zeros_like(lengths), temperature, top_k)
    return first, kv, logits


def step(model, last, positions, cache, keys, counts, temperature: float, top_k: int):
    """One token for every row: (chosen tokens (B,), logits (B, V), updated cache), feeding
    ``last`` (B,) at ``positions`` (B,)."""
    logits, cache = model(last[:, None], cache=cache, positions=positions[:, None],
                          training=False)
    logits = logits[:, 0]
    return choose(logits, keys, counts, temperature, top_k), logits, cache


SEGMENTS = 8  # the token loop's cache lengths are multiples of max_len / SEGMENTS


def reach(lengths, max_len: int) -> int:
    """The cache length a token loop needs for sequences of at most ``lengths`` tokens (prompt
    plus new tokens, each at most max_len): the next multiple of max_len / ``SEGMENTS``."""
    step = max(1, max_len // SEGMENTS)
    return min(max_len, -(-max(lengths) // step) * step)


def segments(max_len: int, top: int) -> list[int]:
    """The cache lengths the token loop steps through, up to ``top`` (a ``reach``)."""
    step = max(1, max_len // SEGMENTS)
    return [*range(step, top, step), top]


def token_loop(model, cache, rows: dict, keys, refill, stop_id, temperature: float,
               top_k: int, record_logits: bool, top: int) -> dict:
    """Decode every active row until all are done (or, with ``refill`` true, until one is).

    Each step attends over the whole cache it is given, so its time grows with the cache's
    length: while every active row's position is below a length of ``segments``, the steps run
    on the cache's first positions alone (the others are never attended to before then). Each
    length is one more copy of the model in the program (compile time grows with it); lengths
    past ``top``, which no row reaches, are left out.

    Args:
        model: the ``CausalLM``.
        cache: the batch cache (B, layers, 2, max_len, heads, head_dim).
        rows: (B,) int32 tensors ``last`` (each row's newest token), ``position`` (its
            position), ``budget`` (tokens it may still add), ``count`` (tokens it has drawn:
            the sampler's index), and bool ``active`` (rows still decoding).
        keys: (B, 2) int32 sampler keys (``request_key``).
        refill: scalar bool: stop after the step in which a row finished.
        stop_id: scalar int32; a row that draws it is done without keeping it (``NO_STOP``).
        temperature, top_k: as ``choose``.
        record_logits: also return the logits of every step.
        top: the cache length no row's position reaches (``reach``).

    Returns:
        ``rows`` updated, plus ``cache``, ``tokens`` (B, max_len) int32 (row b's new tokens are
        ``tokens[b, :count_out - count_in]``), ``fed`` (B,) the steps each row was active in,
        and, with ``record_logits``, ``logits`` (B, max_len, V) (row b's: ``[b, :fed[b]]``).
    """
    batch, length = rows["last"].shape[0], model.max_len
    sample = (keys, stop_id, temperature, top_k, record_logits)
    # No loop variable passes through a loop unchanged: XLA in TF 2.21 fails on three loops in
    # a row that carry a constant (tensorflow/tensorflow#122886), so the logits buffer is a
    # loop variable only when it is written.
    state = (tf.constant(0), rows["last"], rows["position"], rows["budget"], rows["count"],
             rows["active"], tf.zeros((batch,), tf.int32), tf.constant(False),
             tf.zeros((batch, length), tf.int32))
    if record_logits:
        state += (tf.zeros((batch, length, model.vocab_size)),)
    for size in segments(length, top):
        part = cache[:, :, :, :size]  # the steps carry each layer's keys and values apart
        layers = [(part[:, i, 0], part[:, i, 1]) for i in range(part.shape[1])]
        layers, state = _segment(model, layers, state, refill, sample)
        part = tf.stack([tf.stack(kv, axis=1) for kv in layers], axis=1)
        cache = part if size == length else tf.concat([part, cache[:, :, :, size:]], axis=3)
    names = ("t", "last", "position", "budget", "count", "active", "fed", "freed", "tokens",
             "logits")
    out = dict(zip(names, state))
    del out["t"], out["freed"]
    return {**out, "cache": cache}


def _segment(model, cache: list, state: tuple, refill, sample: tuple):
    """``token_loop``'s steps on ``cache``, per layer a (keys, values) pair of length S, while
    every active row's position is below S: (that cache, the loop state). Carried per layer, a
    step rewrites only the positions it writes, in place, not a restacked copy of the cache."""
    keys, stop_id, temperature, top_k, record_logits = sample
    size, length = cache[0][0].shape[1], state[8].shape[1]
    columns = tf.range(length)[None]  # (1, L)

    def body(cache, t, last, position, budget, count, active, fed, freed, tokens, *logits_out):
        fed_at = tf.where(active, position, 0)  # a done row's stale position may be >= S
        chosen, logits, cache = step(model, last, fed_at, cache, keys, count, temperature,
                                     top_k)
        keep = active & (chosen != stop_id)
        at_t = columns == t  # (1, L): this step's column of the buffers
        tokens = tf.where(at_t, chosen[:, None], tokens)
        if record_logits:
            logits_out = (tf.where(at_t[:, :, None], logits[:, None], logits_out[0]),)
        fed += tf.cast(active, tf.int32)
        last = tf.where(keep, chosen, last)
        position = tf.where(keep, position + 1, position)
        budget = tf.where(keep, budget - 1, budget)
        count += tf.cast(keep, tf.int32)
        still = keep & (budget > 0)
        freed |= tf.reduce_any(active & ~still)
        return (cache, t + 1, last, position, budget, count, still, fed, freed, tokens,
                *logits_out)

    def more(cache, t, last, position, budget, count, active, fed, freed, *buffers):
        inside = tf.reduce_max(tf.where(active, position, 0)) < size
        return (t < length) & tf.reduce_any(active) & ~(refill & freed) & inside

    cache, *state = tf.while_loop(more, body, (cache, *state))
    return cache, tuple(state)
