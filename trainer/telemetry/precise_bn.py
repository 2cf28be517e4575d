"""Population statistics for the batch norms after training (PreciseBN, Wu & Johnson 2021).

A BN layer's running statistics are an exponential moving average: after a short run a share
``momentum ** steps`` of them is still the initial mean 0 / variance 1 (13 % after 200 steps at
0.99), and the rest lags the weights. A train/inference gap measured with them mixes that
start-up bias into the claim. Here the running statistics are replaced, temporarily, by the
equal-weight average of the batch moments over a fixed set of training batches, computed with the
final weights, so the gap that remains is BN's own: batch statistics vs population statistics.
"""

from __future__ import annotations

import contextlib

from trainer.telemetry.probes import frozen_state

BATCHES = 64  # training batches averaged (a few seconds eagerly); the estimate's noise is ~1/sqrt(64)


def _bn_layers(model) -> list:
    return [layer for layer in model._flatten_layers(include_self=False)
            if hasattr(layer, "moments") and hasattr(layer, "running_moments")]


def _momentum_owner(layer):
    # keras' BatchNormalization inside ``batch`` reads its own momentum; the masked ones theirs.
    return getattr(layer, "inner", layer)


@contextlib.contextmanager
def population_statistics(model, batches):
    """Inside the block every BN layer runs on population statistics over ``batches``.

    Each batch is run in training mode with momentum i/(i+1) for the i-th batch, which makes the
    running value exactly the mean of the batch moments. Weights never change; on exit the
    running statistics and momenta are restored. A model without BN is left as it is.
    """
    layers = _bn_layers(model)
    owners = [_momentum_owner(layer) for layer in layers]
    saved = [owner.momentum for owner in owners]
    with frozen_state(model):
        try:
            for i, batch in enumerate(batches):
                for owner in owners:
                    owner.momentum = i / (i + 1)
                if layers:
                    model(batch["inputs"], padding_mask=batch["mask"], training=True)
        finally:
            for owner, momentum in zip(owners, saved):
                owner.momentum = momentum
        yield model
