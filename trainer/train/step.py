"""Pure train and eval steps, compiled with XLA.

A step takes a batch dict ``{inputs, targets, mask}`` and returns a dict of tensors; nothing in
here writes summaries or touches Python state (XLA would skip it or retrace). Non-finite detection
is a reduction returned as a tensor, because ``tf.debugging.check_numerics`` is skipped under XLA.
"""

from __future__ import annotations

import tensorflow as tf

from trainer.telemetry.stats import block_grad_norms, stream_stats, update_ratio


def masked_loss(logits, targets, mask):
    """Sum of token cross-entropies over real tokens, and their count. Pads contribute nothing."""
    mask = tf.cast(mask, tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    # where, not multiply: a non-finite logit at a pad must not turn the sum into NaN.
    ce = tf.where(mask > 0, ce, 0.0)
    return tf.reduce_sum(ce), tf.reduce_sum(mask)


def make_train_step(model, optimizer, *, clip_norm: float, telemetry: bool, xla: bool,
                    shared_update: bool = False):
    """Return ``step(batch) -> metrics``: forward, backward, clip, AdamW update, statistics.

    ``shared_update=False``: one XLA program per batch shape does everything; the embedding
    gradients stay sparse (``tf.IndexedSlices``) into Keras' sparse AdamW path, whose second
    moment sums the *squared* per-token slices of a repeated token. ``shared_update=True``:
    the per-shape program stops at dense gradients (and the residual-stream statistics); the
    norm, clipping, AdamW update and weight statistics are one shape-independent program,
    compiled once. That is plain dense AdamW, and each bucket's program holds only the
    forward and backward pass: a third of the memory (about 50 instead of 145 MB per shape at
    the default config). The two give different numbers; results/reference used the first.

    The returned function has ``experimental_get_tracing_count()``: XLA compilations so far.
    """
    variables = model.trainable_variables
    index = {id(v): i for i, v in enumerate(variables)}
    group_idx = [[index[id(v)] for v in block.trainable_variables] for block in model.blocks]
    # The FFN output kernel of each block: Xiong et al. (2020) read Pre/Post-LN off its gradient.
    ffn_out_idx = [[index[id(block.ffn.out.kernel)]] for block in model.blocks]

    def forward_backward(batch):
        with tf.GradientTape() as tape:
            logits, hidden = model(batch["inputs"], padding_mask=batch["mask"], training=True,
                                   return_hidden=True)
            loss_sum, count = masked_loss(logits, batch["targets"], batch["mask"])
            loss = loss_sum / tf.maximum(count, 1.0)
        return loss, count, hidden, tape.gradient(loss, variables)

    def update(grads, loss):
        """Norm, clip, AdamW, and the weight-side telemetry; ``grads`` may be sparse."""
        grad_norm = tf.linalg.global_norm(grads)
        finite = tf.math.is_finite(loss) & tf.math.is_finite(grad_norm)
        metrics = {"grad_norm/global": grad_norm,
                   "nonfinite": 1.0 - tf.cast(finite, tf.float32),
                   "learning_rate": tf.cast(optimizer.learning_rate, tf.float32)}
        if telemetry:  # every gradient norm is taken before clipping: the model's own signal
            metrics["grad_norm/{block}"] = block_grad_norms(grads, group_idx)
            metrics["grad_norm/ffn_out/{block}"] = block_grad_norms(grads, ffn_out_idx)
        if clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=grad_norm)
        if telemetry:
            before = [tf.identity(v) for v in variables]
        optimizer.apply_gradients(zip(grads, variables))
        if telemetry:
            deltas = [v - b for v, b in zip(variables, before)]
            metrics["update_ratio/global"] = update_ratio(deltas, before)
            metrics["update_ratio/{block}"] = tf.stack(
                [update_ratio([deltas[i] for i in idx], [before[i] for i in idx])
                 for idx in group_idx])
        return metrics

    def stream_metrics(hidden, batch):
        return stream_stats(hidden, batch["mask"]) if telemetry else {}

    if not shared_update:
        @tf.function(jit_compile=xla)
        def step(batch):
            loss, count, hidden, grads = forward_backward(batch)
            return {"loss": loss, "tokens": count, **update(grads, loss),
                    **stream_metrics(hidden, batch)}

        return step

    @tf.function(jit_compile=xla)
    def gradients(batch):  # one program per batch shape
        loss, count, hidden, grads = forward_backward(batch)
        dense = [tf.convert_to_tensor(g) for g in grads]  # embeddings: IndexedSlices -> dense
        return dense, {"loss": loss, "tokens": count, **stream_metrics(hidden, batch)}

    shared = tf.function(update, jit_compile=xla)  # one program for every shape

    def shared_step(batch):
        grads, metrics = gradients(batch)
        return {**metrics, **shared(grads, metrics["loss"])}

    shared_step.experimental_get_tracing_count = lambda: (
        gradients.experimental_get_tracing_count() + shared.experimental_get_tracing_count())
    return shared_step


def make_eval_step(model, *, xla: bool, training: bool = False):
    """Return ``step(batch) -> {loss_sum, tokens}``; ``training=True`` evaluates BN in train mode."""

    def step(batch):
        logits = model(batch["inputs"], padding_mask=batch["mask"], training=training)
        loss_sum, count = masked_loss(logits, batch["targets"], batch["mask"])
        return {"loss_sum": loss_sum, "tokens": count}

    return tf.function(step, jit_compile=xla)


def make_replicated_train_step(strategy, model, optimizer, *, clip_norm: float, xla: bool):
    """The train step for several replicas (``tf.distribute``): ``step(batch) -> metrics``.

    ``batch`` is the global numpy batch; rows are dealt round-robin to the replicas. Each replica
    differentiates its loss sum divided by the *global* real-token count, so the all-reduced sum
    of the gradients is exactly the single-device gradient of the global batch. The per-replica
    forward/backward is XLA-compiled; the all-reduce, clipping and update run outside XLA, where
    collectives are supported on every platform. Per-block telemetry is single-device only.
    """
    variables = model.trainable_variables
    replicas = strategy.num_replicas_in_sync

    @tf.function(jit_compile=xla)
    def local_grads(batch, global_tokens):
        with tf.GradientTape() as tape:
            logits = model(batch["inputs"], padding_mask=batch["mask"], training=True)
            loss_sum, _ = masked_loss(logits, batch["targets"], batch["mask"])
            scaled = loss_sum / global_tokens
        grads = tape.gradient(scaled, variables)  # embeddings give IndexedSlices: densify
        return [tf.convert_to_tensor(g) for g in grads], loss_sum

    def replica_step(batch, global_tokens):
        grads, loss_sum = local_grads(batch, global_tokens)
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        loss = ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss_sum) / global_tokens
        grad_norm = tf.linalg.global_norm(grads)
        finite = tf.math.is_finite(loss) & tf.math.is_finite(grad_norm)
        if clip_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=grad_norm)
        # Keras sums gradients across replicas once more inside apply_gradients.
        optimizer.apply_gradients(zip([g / replicas for g in grads], variables))
        return {"loss": loss, "grad_norm/global": grad_norm, "tokens": global_tokens,
                "nonfinite": 1.0 - tf.cast(finite, tf.float32),
                "learning_rate": tf.cast(optimizer.learning_rate, tf.float32)}

    @tf.function
    def run(batch, global_tokens):
        out = strategy.run(replica_step, args=(batch, global_tokens))
        return {k: strategy.experimental_local_results(v)[0] for k, v in out.items()}

    def step(batch):
        dealt = strategy.experimental_distribute_values_from_function(
            lambda ctx: {k: v[ctx.replica_id_in_sync_group::replicas] for k, v in batch.items()})
        return run(dealt, tf.reduce_sum(tf.cast(batch["mask"], tf.float32)))

    step.experimental_get_tracing_count = local_grads.experimental_get_tracing_count
    return step
