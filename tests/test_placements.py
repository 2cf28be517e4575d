"""The placements (pre, post, peri, output), DeepNorm and QK-norm: each reads as its equation,
every lab norm trains in each, and the combinations that mean nothing are one config error."""

import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from tests.conftest import run_cli  # noqa: E402
from trainer.models.block import Block, model_config  # noqa: E402
from trainer.models.lm import CausalLM  # noqa: E402
from trainer.models.norms import NORMS  # noqa: E402

L, DIM = 3, 32
SMALL = dict(num_layers=L, dim=DIM, num_heads=2, ffn_dim=64)
X = np.random.default_rng(0).normal(0, 1, (2, 7, DIM)).astype("float32")


def _block(**config) -> Block:
    keras.utils.set_random_seed(0)
    block = Block(model_config(**SMALL, **config), name="block_0")
    block.build((None, None, DIM))
    rng = np.random.default_rng(1)
    for w in block.trainable_weights:  # gains and biases away from 1 and 0
        w.assign(w.numpy() + rng.normal(0, 0.1, w.shape).astype("float32"))
    return block


def _expected(block: Block, placement: str, deepnorm: bool) -> np.ndarray:
    """The block's output from its own sublayers, composed as the placement's equation."""
    def att(h):
        return block.attention(h, h, use_causal_mask=True)

    def n(norm, h):
        return norm(h, training=False)

    alpha = (2 * L) ** 0.25 if deepnorm else 1.0  # DeepNet, decoder-only: (2N)^(1/4)
    x = tf.constant(X)
    n1, n2 = block.attention_norm, block.ffn_norm
    if placement == "pre":
        h = x + att(n(n1, x))
        return h + block.ffn(n(n2, h))
    if placement == "post":
        h = n(n1, alpha * x + att(x))
        return n(n2, alpha * h + block.ffn(h))
    if placement == "peri":
        m1, m2 = block.out_norms
        h = x + n(m1, att(n(n1, x)))
        return h + n(m2, block.ffn(n(n2, h)))
    h = x + n(n1, att(x))  # output
    return h + n(n2, block.ffn(h))


@pytest.mark.parametrize("placement,residual", [
    ("pre", "true"), ("post", "true"), ("peri", "true"), ("output", "true"),
    ("post", "deepnorm")])
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_each_placement_computes_its_equation(placement, residual, norm):
    block = _block(norm=norm, placement=placement, residual=residual)
    got = np.asarray(block(tf.constant(X), training=False))
    want = np.asarray(_expected(block, placement, residual == "deepnorm"))
    assert np.abs(got - want).max() < 1e-5
    assert np.abs(want).max() > 0.1  # not a comparison of zeros


def test_only_peri_adds_norms_and_only_qk_norm_adds_attention_weights():
    names = {p: {w.path for w in _block(placement=p).weights} for p in ("pre", "peri", "output")}
    assert names["pre"] == names["output"]  # the same two norms per block, moved
    extra = names["peri"] - names["pre"]
    assert extra and all("out_norm" in n for n in extra)
    qk = {w.path for w in _block(qk_norm="layer").weights} - names["pre"]
    assert sorted(n.split("/")[-2] for n in qk) == ["key_norm", "query_norm"]


def test_deepnorm_scales_value_output_and_ffn_init_by_beta():
    beta = (8 * L) ** -0.25  # DeepNet's decoder-only init gain
    plain, deep = _block(placement="post", init="xavier"), None
    keras.utils.set_random_seed(0)
    deep = Block(model_config(**SMALL, placement="post", residual="deepnorm", init="xavier"))
    deep.build((None, None, DIM))
    keras.utils.set_random_seed(0)
    plain = Block(model_config(**SMALL, placement="post", init="xavier"))
    plain.build((None, None, DIM))

    def kernels(b):
        a = b.attention
        return {"query": a._query_dense.kernel, "key": a._key_dense.kernel,
                "value": a._value_dense.kernel, "output": a._output_dense.kernel,
                "hidden": b.ffn.hidden.kernel, "out": b.ffn.out.kernel}

    for name, (p, d) in {k: (v, kernels(deep)[k]) for k, v in kernels(plain).items()}.items():
        ratio = np.asarray(d) / np.asarray(p)
        want = 1.0 if name in ("query", "key") else beta
        assert np.allclose(ratio, want, rtol=1e-5), name


@pytest.mark.parametrize("placement", ["pre", "post", "peri", "output"])
def test_a_final_norm_precedes_the_head_except_in_post(placement):
    model = CausalLM(model_config(**SMALL, placement=placement), 40, 16)
    model.build((None, 16))
    assert (type(model.final_norm).__name__ == "Identity") == (placement == "post")


COMBOS = ([(n, p, "true") for n in sorted(NORMS) for p in ("peri", "output")]
          + [(n, "post", "deepnorm") for n in sorted(NORMS) if n != "none"])


@pytest.mark.parametrize("norm,placement,residual", COMBOS)
def test_every_lab_norm_trains_causally_in_every_new_placement(norm, placement, residual):
    keras.utils.set_random_seed(0)
    model = CausalLM(model_config(**SMALL, norm=norm, placement=placement, residual=residual,
                                  qk_norm="rms"), 40, 16)
    model.build((None, 16))
    rng = np.random.default_rng(2)
    tokens = rng.integers(3, 40, (4, 12)).astype("int32")
    with tf.GradientTape() as tape:
        logits = model(tokens, padding_mask=np.ones((4, 12), "float32"), training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tokens[:, 1:], logits=logits[:, :-1]))
    grads = tape.gradient(loss, model.trainable_variables)
    assert np.isfinite(float(loss))
    assert all(g is not None and np.all(np.isfinite(tf.convert_to_tensor(g))) for g in grads)
    changed = tokens.copy()
    changed[:, 8:] = rng.integers(3, 40, (4, 4))
    a, b = model(tokens, training=False), model(changed, training=False)
    assert np.abs(np.asarray(a)[:, :8] - np.asarray(b)[:, :8]).max() < 1e-5


@pytest.mark.parametrize("placement", ["peri", "output"])
def test_a_norm_from_outside_the_lab_works_in_the_new_placements(placement):
    keras.utils.set_random_seed(0)
    model = CausalLM(model_config(**SMALL, norm="examples/norms/group_norm.py:GroupNorm",
                                  placement=placement), 40, 16)
    model.build((None, 16))
    logits = model(np.arange(3, 15, dtype="int32")[None], training=False)
    assert np.all(np.isfinite(np.asarray(logits)))


@pytest.mark.parametrize("overrides,words", [
    (["model.residual=deepnorm"], "placement=post"),
    (["model.residual=deepnorm", "model.placement=post", "model.norm=none"], "pick a norm"),
    (["model.residual=rezero", "model.placement=post"], "use placement=pre"),
    (["model.qk_norm=lyer"], "did you mean 'layer'"),
    (["model.placement=peri-ln"], "valid: pre, post, peri, output"),
    (["train.z_loss=-1"], "must be >= 0"),
])
def test_combinations_that_mean_nothing_are_one_error_line(tmp_path, overrides, words):
    result = run_cli("train", "--config", "configs/base.yaml", *overrides,
                     "--workdir", tmp_path / "run")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


SCALE_SPECS = sorted(Path("configs/sweeps/scale").glob("*.yaml"))


@pytest.mark.parametrize("path", SCALE_SPECS, ids=[p.stem for p in SCALE_SPECS])
def test_pre_registration_3s_sweeps_build_what_it_says(path):
    """Every run of section 2's sub-sweeps is a valid config of the variant it names."""
    from trainer.config import load_config
    from trainer.sweep import expand_variants, load_spec

    spec, base = load_spec(path)
    variants = expand_variants(spec)
    assert variants
    for v in variants:
        cfg = load_config(base, v.overrides)
        m = cfg.model
        if m.residual == "deepnorm":  # DeepNorm as its authors specify it
            assert m.placement == "post" and m.init == "xavier"
        if m.placement == "output":  # OLMo 2: RMSNorm and RMS QK-norm
            assert m.norm == "rms" and m.qk_norm == "rms"


def test_the_scale_variants_are_configs_the_lab_builds():
    from trainer.config import load_config
    from trainer.findings.thresholds import SCALE_VARIANTS

    keys = {"z_loss": "train", "warmup_steps": "train"}
    for values in SCALE_VARIANTS.values():
        overrides = [f"{keys.get(k, 'model')}.{k}={v}" for k, v in values.items()]
        load_config("configs/reference.yaml", overrides)
