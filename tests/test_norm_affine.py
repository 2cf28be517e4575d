"""``model.norm_affine``: every registered norm with and without its learnable γ/β (F10): what
``affine=False`` drops is what the norm's class declares (``affine_weights``)."""

import numpy as np
import pytest

import trainer

tf = trainer.import_tensorflow_quietly()

from trainer.config import load_config, network_key  # noqa: E402
from trainer.models.block import Block  # noqa: E402
from trainer.models.lm import CausalLM, build_model  # noqa: E402
from trainer.models.norms import NORMS, make_norm  # noqa: E402

def _data(seed=0, shape=(3, 5, 8)):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) * (1 + np.arange(shape[0]))[:, None, None] + 0.5
    mask = (np.arange(shape[1])[None] < np.asarray([5, 3, 2])[:, None]).astype("float32")
    return x.astype("float32"), mask


def _trainable(layer) -> set[str]:
    return {v.path.rsplit("/", 1)[-1] for v in layer.trainable_weights}


@pytest.mark.parametrize("name", sorted(NORMS))
def test_affine_switch_removes_exactly_the_declared_affine_weights(name):
    x, mask = _data()
    with_affine, without = make_norm(name, affine=True), make_norm(name, affine=False)
    for layer in (with_affine, without):
        layer.build(x.shape)
    declared = set(NORMS[name].affine_weights)
    assert _trainable(with_affine) - _trainable(without) == declared
    assert _trainable(without) == _trainable(with_affine) - declared  # the rest is kept
    assert not _trainable(without) & {"gamma", "beta", "scale"}  # the usual names of γ/β
    # At init the gain is 1 and the bias 0: dropping them changes nothing, in either mode.
    for training in (False, True):
        np.testing.assert_allclose(with_affine(x, padding_mask=mask, training=training),
                                   without(x, padding_mask=mask, training=training), atol=1e-6)
    clone = type(without).from_config(without.get_config())
    assert clone.get_config()["affine"] is False


def test_layer_norm_without_affine_gives_every_token_norm_sqrt_c():
    x, _ = _data(1, shape=(4, 16, 32))
    eps = 1e-5
    ln = make_norm("layer", epsilon=eps, affine=False)
    y = np.asarray(ln(x), "float64")
    var = x.astype("float64").var(-1)
    # ||LN(x)||^2 = C * var / (var + eps) exactly; here var >= ~0.5, so within 2e-5 of sqrt(C).
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.sqrt(32 * var / (var + eps)),
                               rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.sqrt(32), rtol=1e-4)
    # A trained γ breaks it: that spread is what γ/β give back (F10, trainer/findings/stream.py).
    with_gamma = make_norm("layer", epsilon=eps, affine=True)
    with_gamma.build(x.shape)
    with_gamma.inner.gamma.assign(np.linspace(0.2, 2.0, 32).astype("float32"))
    norms = np.linalg.norm(np.asarray(with_gamma(x)), axis=-1)
    assert norms.std() / norms.mean() > 0.01


@pytest.mark.parametrize("norm,placement", [("layer", "pre"), ("masked_batch", "post"),
                                            ("dyt", "pre")])
def test_model_threads_norm_affine_to_every_norm_and_round_trips(norm, placement):
    cfg = load_config(None, [f"model.norm={norm}", f"model.placement={placement}",
                             "model.norm_affine=false", "model.num_layers=2", "model.dim=16",
                             "model.ffn_dim=32", "model.num_heads=2"])
    model = build_model(cfg.model, vocab_size=cfg.data.vocab_size, max_len=16)
    names = {v.path.rsplit("/", 1)[-1] for v in model.trainable_weights}
    assert not names & {"gamma", "beta", "scale"}, names
    assert ("alpha" in names) == (norm == "dyt")
    config = model.get_config()
    assert config["config"]["norm_affine"] is False
    clone = CausalLM.from_config(config)
    assert clone.blocks[0].attention_norm.affine is False and clone.final_norm.affine is False
    block_cfg = Block.from_config(model.blocks[1].get_config()).get_config()
    assert block_cfg["config"]["norm_affine"] is False
    default = build_model(load_config(None, [f"model.norm={norm}", "model.num_layers=1",
                                             "model.dim=16", "model.ffn_dim=32",
                                             "model.num_heads=2"]).model,
                          vocab_size=cfg.data.vocab_size, max_len=16)
    assert {v.path.rsplit("/", 1)[-1] for v in default.trainable_weights} & {"gamma"}


def test_network_key_tells_affine_apart_except_without_a_norm():
    def key(*o):
        return network_key(load_config(None, list(o)))
    assert key("model.norm=layer") != key("model.norm=layer", "model.norm_affine=false")
    assert key("model.norm=none") == key("model.norm=none", "model.norm_affine=false")
