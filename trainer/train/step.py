"""Pure train and eval steps, compiled with XLA.

A step takes a batch dict ``{inputs, targets, mask}`` and returns a dict of tensors; nothing in
here writes summaries or touches Python state (XLA would skip it or retrace). Non-finite detection
is a reduction returned as a tensor, because ``tf.debugging.check_numerics`` is skipped under XLA.

Every step is a ``Step``: call it with a batch; ``compilations()`` is the number of programs
it has traced so far, one per batch shape of each of its compiled functions (with XLA each
trace is one XLA compilation on a single device; ``tests/test_compile.py`` holds this against
XLA's own dump).
"""

from __future__ import annotations

import tensorflow as tf

from trainer.telemetry.stats import (attention_instruments, block_grad_norms, log_z_stats,
                                     stream_stats, update_ratio)


class Step:
    """A compiled step: ``step(batch) -> dict`` and ``step.compilations()``."""

    def __init__(self, call, programs):
        self._call, self._programs = call, tuple(programs)

    def __call__(self, batch):
        return self._call(batch)

    def compilations(self) -> int:
        """Programs traced so far over this step's compiled functions (one per shape each)."""
        return sum(int(p.experimental_get_tracing_count()) for p in self._programs)


def masked_loss(logits, targets, mask, with_log_z: bool = False):
    """Sum of token cross-entropies over real tokens, and their count. Pads contribute nothing.

    ``with_log_z``: also log Z = logsumexp(logits) per position (B, T), read off the
    cross-entropy (CE = log Z - the target's logit) rather than taken again over the vocabulary;
    its gradient is softmax(logits), log Z's own."""
    mask = tf.cast(mask, tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    log_z = ce + tf.gather(logits, targets, batch_dims=2) if with_log_z else None
    # where, not multiply: a non-finite logit at a pad must not turn the sum into NaN.
    ce = tf.where(mask > 0, ce, 0.0)
    out = (tf.reduce_sum(ce), tf.reduce_sum(mask))
    return (*out, log_z) if with_log_z else out


def make_train_step(model, optimizer, *, clip_norm: float, telemetry: bool, xla: bool,
                    shared_update: bool = False, strategy=None, z_loss: float = 0.0) -> Step:
    """Return the train step: forward, backward, clip, AdamW update, statistics.

    ``z_loss`` > 0 adds z_loss * mean(log Z^2) over real tokens to the loss that is
    differentiated (PaLM's z-loss); the ``loss`` it returns stays the cross-entropy alone, so
    losses compare across z_loss values, and ``z_loss`` holds the penalty's value.

    One replica, ``shared_update=False``: one XLA program per batch shape does everything; the
    embedding gradients stay sparse (``tf.IndexedSlices``) into Keras' sparse AdamW path, whose
    second moment sums the *squared* per-token slices of a repeated token.
    ``shared_update=True``: the per-shape program stops at dense gradients (and the
    residual-stream statistics); the norm, clipping, AdamW update and weight statistics are one
    shape-independent program, compiled once. That is plain dense AdamW, and each bucket's
    program holds only the forward and backward pass: a third of the memory (about 50 instead
    of 145 MB per shape at the default config). The two give different numbers;
    results/reference used the second (``runtime.shared_update``, configs/base.yaml).

    Several replicas (``strategy`` with more than one): the same forward/backward and the same
    update, with a cross-replica sum in between (see ``_replicated``).
    """
    parts = _Parts(model, optimizer, clip_norm=clip_norm, telemetry=telemetry, z_loss=z_loss)
    if strategy is not None and strategy.num_replicas_in_sync > 1:
        return _replicated(parts, strategy, xla)
    if not shared_update:
        @tf.function(jit_compile=xla)
        def step(batch):
            loss, count, hidden, grads = parts.forward_backward(batch)
            return {"loss": loss, "tokens": count, **parts.update(grads, loss),
                    **parts.stream(hidden, batch)}

        return Step(step, [step])

    @tf.function(jit_compile=xla)
    def gradients(batch):  # one program per batch shape
        loss, count, hidden, grads = parts.forward_backward(batch)
        return parts.dense(grads), {"loss": loss, "tokens": count, **parts.stream(hidden, batch)}

    shared = tf.function(parts.update, jit_compile=xla)  # one program for every shape

    def shared_step(batch):
        grads, metrics = gradients(batch)
        return {**metrics, **shared(grads, metrics["loss"])}

    return Step(shared_step, [gradients, shared])


class _Parts:
    """The pieces every train step is made of: forward/backward, the update (with the
    weight-side telemetry) and the activation-side statistics (``stream``)."""

    def __init__(self, model, optimizer, *, clip_norm: float, telemetry: bool,
                 z_loss: float = 0.0):
        self.model, self.optimizer = model, optimizer
        self.clip_norm, self.telemetry, self.z_loss = clip_norm, telemetry, z_loss
        self.variables = model.trainable_variables
        index = {id(v): i for i, v in enumerate(self.variables)}
        self.group_idx = [[index[id(v)] for v in block.trainable_variables]
                          for block in model.blocks]
        # The FFN output kernel of each block: Xiong et al. (2020) read Pre/Post-LN off it.
        self.ffn_out_idx = [[index[id(block.ffn.out.kernel)]] for block in model.blocks]

    def forward_backward(self, batch, denominator=None):
        """Loss (the token mean, or the loss sum over ``denominator`` tokens), real-token
        count, hidden states (with the output instruments under ``"output"``) and gradients of
        the loss plus the z-loss."""
        with tf.GradientTape() as tape:
            logits, hidden = self.model(batch["inputs"], padding_mask=batch["mask"],
                                        training=True, return_hidden=True)
            want_z = self.z_loss > 0 or self.telemetry
            loss_sum, count, *z = masked_loss(logits, batch["targets"], batch["mask"], want_z)
            tokens = tf.maximum(count, 1.0) if denominator is None else denominator
            loss = loss_sum / tokens
            objective, output = loss, {}
            if want_z:
                z = z[0]
                output = log_z_stats(z, batch["mask"]) if self.telemetry else {}
            if self.z_loss > 0:
                mask = tf.cast(batch["mask"], tf.float32)
                output["z_loss"] = self.z_loss * tf.reduce_sum(tf.square(z) * mask) / tokens
                objective = loss + output["z_loss"]
        hidden = {"blocks": hidden, "output": output}
        return loss, count, hidden, tape.gradient(objective, self.variables)

    @staticmethod
    def dense(grads):
        return [tf.convert_to_tensor(g) for g in grads]  # embeddings: IndexedSlices -> dense

    def stream(self, hidden, batch):
        """The activation-side statistics: residual stream, attention and output instruments
        (telemetry), and the z-loss's value (when on)."""
        out = dict(hidden["output"])
        if self.telemetry:
            out.update(stream_stats(hidden["blocks"], batch["mask"]))
            out.update(attention_instruments(hidden["blocks"]))
        return out

    def update(self, grads, loss, replicas: int = 1):
        """Norm, clip, AdamW, and the weight-side telemetry; ``grads`` may be sparse.
        ``replicas``: Keras sums the gradients across replicas once more inside
        ``apply_gradients``, so already-summed gradients are divided by their number."""
        variables = self.variables
        grad_norm = tf.linalg.global_norm(grads)
        finite = tf.math.is_finite(loss) & tf.math.is_finite(grad_norm)
        metrics = {"grad_norm/global": grad_norm,
                   "nonfinite": 1.0 - tf.cast(finite, tf.float32),
                   "learning_rate": tf.cast(self.optimizer.learning_rate, tf.float32)}
        if self.telemetry:  # every gradient norm is taken before clipping: the model's own
            metrics["grad_norm/{block}"] = block_grad_norms(grads, self.group_idx)
            metrics["grad_norm/ffn_out/{block}"] = block_grad_norms(grads, self.ffn_out_idx)
        if self.clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm, use_norm=grad_norm)
        if replicas > 1:
            grads = [g / replicas for g in grads]
        if self.telemetry:
            before = [tf.identity(v) for v in variables]
        self.optimizer.apply_gradients(zip(grads, variables))
        if self.telemetry:
            deltas = [v - b for v, b in zip(variables, before)]
            metrics["update_ratio/global"] = update_ratio(deltas, before)
            metrics["update_ratio/{block}"] = tf.stack(
                [update_ratio([deltas[i] for i in idx], [before[i] for i in idx])
                 for idx in self.group_idx])
        return metrics


def _replicated(parts: _Parts, strategy, xla: bool) -> Step:
    """The train step over several replicas (``tf.distribute``), from the same parts.

    ``batch`` is the global numpy batch; rows are dealt round-robin to the replicas. Each
    replica differentiates its loss sum divided by the *global* real-token count, so the
    all-reduced sum of the gradients is exactly the single-device gradient of the global batch.
    The per-replica forward/backward is XLA-compiled (one program per shape, built on each
    replica's device); the all-reduce and the update run outside XLA, where collectives are
    supported on every platform. Stream statistics are token means: each replica's is weighted
    by its real tokens (``_combine_stream``), so the telemetry is that of the global batch.
    """
    replicas = strategy.num_replicas_in_sync

    @tf.function(jit_compile=xla)
    def local(batch, global_tokens):
        loss, count, hidden, grads = parts.forward_backward(batch, denominator=global_tokens)
        return parts.dense(grads), loss, count, parts.stream(hidden, batch)

    def replica_step(batch, global_tokens):
        grads, loss, count, stream = local(batch, global_tokens)
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        loss = ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss)
        return {"loss": loss, "tokens": global_tokens,
                **parts.update(grads, loss, replicas),
                **_combine_stream(ctx, stream, count, global_tokens)}

    @tf.function
    def run(batch, global_tokens):
        out = strategy.run(replica_step, args=(batch, global_tokens))
        return {k: strategy.experimental_local_results(v)[0] for k, v in out.items()}

    def step(batch):
        dealt = strategy.experimental_distribute_values_from_function(
            lambda ctx: {k: v[ctx.replica_id_in_sync_group::replicas] for k, v in batch.items()})
        return run(dealt, tf.reduce_sum(tf.cast(batch["mask"], tf.float32)))

    return Step(step, [local])


def _combine_stream(ctx, stream: dict, count, global_tokens) -> dict:
    """Per-replica values -> the global batch's: token means weighted by real tokens (an rms
    through its square), maxima by their maximum, and the z-loss (already over the global
    token count) by its sum."""
    out = {}
    for key, value in stream.items():
        if key.endswith(MAXIMA):
            # tf.distribute reduces by SUM or MEAN only: the replicas' values, then their max
            out[key] = tf.reduce_max(ctx.all_gather(tf.reshape(value, [1]), axis=0))
            continue
        if key == "z_loss":
            out[key] = ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
            continue
        rms = key.endswith("/rms")
        weighted = (tf.square(value) if rms else value) * count
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, weighted) / tf.maximum(global_tokens, 1.0)
        out[key] = tf.sqrt(total) if rms else total
    return out


MAXIMA = ("/max_logit", "/log_z_max")  # stream statistics that are maxima, not token means


def make_eval_step(model, *, xla: bool, training: bool = False) -> Step:
    """Return ``step(batch) -> {loss_sum, tokens}``; ``training=True`` evaluates BN in train mode."""

    def step(batch):
        logits = model(batch["inputs"], padding_mask=batch["mask"], training=training)
        loss_sum, count = masked_loss(logits, batch["targets"], batch["mask"])
        return {"loss_sum": loss_sum, "tokens": count}

    compiled = tf.function(step, jit_compile=xla)
    return Step(compiled, [compiled])
