"""Each variant against its source (#34, FINDINGS "A faithful method"): the paper, its code where
public, what the lab follows and every deviation with its reason, as data (``RECIPES``) and as a
markdown table (``recipes_table``), which ``page`` renders under "Recipes".

Read against the authors' code where it is public (file and line cited) and against
``trainer/models`` (norms.py, block.py, lm.py) and the reference training setup
(configs/reference.yaml: 6 blocks, d = 64, byte vocabulary, N(0, 0.02) token and learned
position embeddings, AdamW beta2 0.95, weight decay 0.01 on weight matrices only, 50 warm-up
steps then cosine, clip 1, no dropout, 800 steps). ``COMMON`` lists what every variant shares
and no source prescribes; a row lists only what its own source says otherwise.

No TensorFlow here: the table is data; tests/test_recipes.py builds every row's config.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Deviation:
    """One way the lab differs from the source, and why."""

    what: str
    why: str


@dataclass(frozen=True)
class Recipe:
    """One variant: the overrides that build it here, its source and how the lab follows it.

    Args:
        name: the variant as the page names it.
        overrides: dotted config overrides (on configs/reference.yaml) that build it.
        paper: the source paper.
        code: the authors' code (URL, with the files read), None when none is public.
        follows: what the lab takes from the source.
        deviations: every difference from the source, each with its reason.
    """

    name: str
    overrides: tuple[str, ...]
    paper: str
    code: str | None
    follows: str
    deviations: tuple[Deviation, ...]


DYT_CODE = "https://github.com/jiachenzhu/DyT"
OLMO_CORE = "https://github.com/allenai/OLMo-core"
POWERNORM_CODE = "https://github.com/sIncerass/powernorm"

# What every variant shares and no source prescribes: the setting, not the method.
COMMON = (
    Deviation("a decoder-only causal LM, 6 blocks, d = 64, byte vocabulary, 800 steps on a "
              "Wikipedia sample; learned position embeddings, GELU MLP, untied head with bias",
              "one small, fixed setting on 2 CPU cores in which every variant is compared; a "
              "verdict is about this setting (FINDINGS, \"Beyond one setting\")"),
    Deviation("AdamW (beta2 0.95, weight decay 0.01 on weight matrices only), 50 linear "
              "warm-up steps then cosine, clip 1, no dropout, each variant at its best rate",
              "one optimiser for all so that only the norm and residual differ; the rate is "
              "tuned per variant, the rest is not"),
)

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe(
        "Pre-LN", ("model.norm=layer", "model.placement=pre"),
        "Xiong et al. 2020, On Layer Normalization in the Transformer Architecture (ICML)",
        None,
        "h = x + F(LN(x)) in every block and a final LN before the head; LN with gain and bias",
        (Deviation("a 50-step warm-up", "the paper shows Pre-LN trains without one; the lab "
                   "warms every variant up alike, so only the norm differs"),
         Deviation("init N(0, 0.02) (model.init=normal), not the Xavier init the paper's "
                   "analysis assumes", "GPT-2's init for every variant; model.init=xavier "
                   "builds the paper's (analyze grad-profile compares them)"))),
    Recipe(
        "Post-LN", ("model.norm=layer", "model.placement=post"),
        "Vaswani et al. 2017, Attention Is All You Need (NeurIPS)",
        "https://github.com/tensorflow/tensor2tensor",
        "h = LN(x + F(x)) in every block; no final norm (the last block's output is already "
        "normalized), as in the paper",
        (Deviation("AdamW and a 50-step warm-up then cosine, not Adam (beta2 0.98) with the "
                   "inverse-square-root schedule and 4000 warm-up steps",
                   "one optimiser and schedule for all variants (COMMON)"),
         Deviation("learned position embeddings, not sinusoids; embeddings not multiplied by "
                   "sqrt(d_model); no dropout or label smoothing; decoder only",
                   "the lab's one model (COMMON); the sqrt(d) multiplier is a DyT-recipe option "
                   "here (model.embed_scale), not part of this variant"))),
    Recipe(
        "RMSNorm", ("model.norm=rms", "model.placement=pre"),
        "Zhang & Sennrich 2019, Root Mean Square Layer Normalization (NeurIPS)",
        "https://github.com/bzhangGo/rmsnorm (rmsnorm_torch.py)",
        "y = g * x / RMS(x) per token, no centring, no bias, gain g initialised at 1 (the "
        "code's defaults: bias=False, partial RMSNorm off)",
        (Deviation("epsilon 1e-5 inside the square root (keras RMSNormalization: "
                   "x * rsqrt(mean(x^2) + eps)), not 1e-8 added to the RMS (x / (RMS + eps))",
                   "one epsilon for every norm; at the stream's RMS at init (0.028) keras' "
                   "shrinks the output by 0.6 %, the code's by 4e-5 %, less as it grows"),
         Deviation("Pre placement with a final RMSNorm", "the lab's reference placement, as "
                   "for Pre-LN, so RMS and LN differ only in centring"))),
    Recipe(
        "ReZero", ("model.norm=none", "model.residual=rezero", "model.placement=pre"),
        "Bachlechner et al. 2020, ReZero is All You Need: Fast Convergence at Large Depth",
        "https://github.com/majumderb/rezero (rezero/transformer/rztx.py)",
        "x + a * F(x) with a learnable scalar a initialised at 0 and no normalization at all "
        "(no final norm either: the code's stacks pass norm=None)",
        (Deviation("one gate per sublayer (attention and FFN: 2 per block); the code shares "
                   "one resweight between a layer's sublayers",
                   "the lab gates each residual add it ablates; not yet matched"),
         Deviation("model.residual=rezero also runs with a norm inside the branch "
                   "(x + a * F(N(x))); this row is the paper's, norm=none",
                   "the other combinations are the lab's ablations, not ReZero"),
         Deviation("the gates are rank 0 and never weight-decayed", "the lab's decay rule "
                   "(weight matrices only); the code leaves it to the training script"))),
    Recipe(
        "BatchNorm (naive)", ("model.norm=batch", "model.placement=pre"),
        "Shen et al. 2020, PowerNorm: Rethinking Batch Normalization in Transformers (ICML), "
        "which studies BN in place of LN in Transformers",
        f"{POWERNORM_CODE} (fairseq/modules/norm_select.py, norms/mask_syncbatchnorm.py)",
        "BN over batch x time with running statistics at inference, Pre placement (their "
        "transformer_iwslt_de_en_v2 normalizes before)",
        (Deviation("pads included in the statistics; the code's `batch` fills pads with the "
                   "real tokens' mean", "deliberately the naive choice, what dropping keras' "
                   "BatchNormalization into a Transformer does; masked_batch is the masked one"),
         Deviation("no per-token RMS pre-scaling; the code's `batch` (MaskSyncBatchNorm) "
                   "first divides each token by its RMS (LayerScaling1D)",
                   "BN as the layer everyone drops in; the pre-scaling would make it part "
                   "RMSNorm"),
         Deviation("momentum 0.99 (keras; torch 0.01), not 0.05 (torch; keras 0.95)",
                   "keras' default for every BN variant here (model.bn_momentum)"),
         Deviation("in a causal decoder, where training-mode statistics mix future tokens in; "
                   "the code's example runs BN in the encoder and keeps LN in the decoder",
                   "the lab's question is BN in a causal LM; the leak is measured "
                   "(loss_train_mode, F2), not hidden"))),
    Recipe(
        "Masked BatchNorm", ("model.norm=masked_batch", "model.placement=pre"),
        "Shen et al. 2020 (as above): BN whose statistics exclude pads",
        f"{POWERNORM_CODE} (fairseq/modules/norms/mask_batchnorm.py, mask_syncbatchnorm.py)",
        "mean and variance over real tokens only, as the code's MaskBatchNorm computes them; "
        "running statistics updated from them and used at inference",
        (Deviation("pads excluded exactly; the code's wired `batch` (MaskSyncBatchNorm) fills "
                   "pads with the real tokens' mean, which keeps the mean but counts pads in "
                   "the variance's denominator", "the clean contrast with the naive `batch`"),
         Deviation("running statistics at inference; MaskBatchNorm uses batch statistics "
                   "unless use_run is set (False by default)", "a causal LM must not let "
                   "other requests or future tokens into a prediction (F2, generate)"),
         Deviation("running variance from the biased batch variance; the code keeps the "
                   "unbiased one", "a factor n/(n-1) over ~4000 tokens"),
         Deviation("momentum 0.99 (keras; torch 0.01), not 0.1 or 0.05 (torch)",
                   "keras' default for every BN variant (model.bn_momentum)"),
         Deviation("gain initialised at 1; MaskBatchNorm draws it from U(0, 1)",
                   "every norm here starts with unit gain"),
         Deviation("in a causal decoder (as BatchNorm)", "as BatchNorm"))),
    Recipe(
        "DyT", ("model.norm=dyt", "model.placement=pre",
                "model.embed_scale=35.36", "model.dyt_alpha=1.0"),
        "Zhu et al. 2025, Transformers without Normalization (CVPR)",
        f"{DYT_CODE} (dynamic_tanh.py; other_tasks/LLaMA/fms_fsdp/models/llama.py)",
        "gamma * tanh(alpha x) + beta with one learnable scalar alpha per layer, at every LN's "
        "place and the final norm; the LLaMA code's learnable embedding scalar (llama.py "
        "208-209, 275, 383) and alpha_0 per location (model.dyt_alpha_attention / _ffn / "
        "_final; llama.py 73-75, 85-92, 245-248)",
        (Deviation("the scalar multiplies token + position embeddings; LLaMA's multiplies the "
                   "token embedding (llama.py 383)", "LLaMA has no position embedding (RoPE, "
                   "abs_pos=False, llama.py 203); here both tables form the stream"),
         Deviation("scalar initialised at 1/(0.02 sqrt 2) = 35.36 (stream std 1 at init), not "
                   "sqrt(d) (llama.py 209)", "what carries over is the scale, not the "
                   "formula: sqrt(4096) x 0.02 = 1.28 at LLaMA-7B, but sqrt(64) x 0.028 = 0.23 "
                   "here, where DyT stayed at the unigram plateau (FINDINGS: single runs, "
                   "not re-measured for this table)"),
         Deviation("the scalar, alpha and gamma are not weight-decayed; the LLaMA script's "
                   "AdamW decays every parameter by 0.1 (main_training_llama.py 119-121)",
                   "the lab's one decay rule (weight matrices only); decaying the scalar "
                   "would pull the stream back toward std 0.03"),
         Deviation("alpha_0 = 1 everywhere in this row; 0.8 / 0.2 / 0.2 (attention / FFN / "
                   "final) is LLaMA-7B's (other_tasks/LLaMA/README.md)", "the authors tune "
                   "alpha_0 per width; at d = 64 the 7B values left DyT at the plateau, "
                   "alpha_0 = 1 (the LLaMA code's default) did not (FINDINGS: single runs)"),
         Deviation("a bias beta; LLaMA's DyT has none (llama.py 32-46), the ViT code has one "
                   "(dynamic_tanh.py 13-15)", "the lab's norms all keep gamma and beta "
                   "(model.norm_affine)"),
         Deviation("model.dyt_alpha defaults to 0.5 (the ViT code's alpha_init_value) and "
                   "model.embed_scale to none", "defaults leave the committed DyT runs "
                   "unchanged; this row sets the recipe"))),
    Recipe(
        "QK-norm", ("model.norm=layer", "model.placement=pre", "model.qk_norm=layer"),
        "Dehghani et al. 2023, Scaling Vision Transformers to 22 Billion Parameters (ICML); "
        "Wortsman et al. 2024, Small-scale proxies for large-scale Transformer training "
        "instabilities (ICLR)",
        "https://github.com/google/flax (flax/linen/attention.py: normalize_qk)",
        "LayerNorm on the queries and on the keys after their projections, per head over the "
        "head dimension, before q.k / sqrt(d_h); a learnable gain, no bias (flax's "
        "LayerNorm(use_bias=False)), on Pre-LN",
        (Deviation("epsilon 1e-5 (model.norm_epsilon), not flax's 1e-6", "one epsilon for "
                   "every norm in the lab"),
         Deviation("one gain shared by the heads (shape d_h)", "what a LayerNorm over the "
                   "head dimension holds; model.qk_norm=rms gives the RMSNorm form"))),
    Recipe(
        "z-loss", ("model.norm=layer", "model.placement=pre", "train.z_loss=0.0001"),
        "Chowdhery et al. 2022, PaLM: Scaling Language Modeling with Pathways (JMLR 2023), "
        "Sec. 5; Wortsman et al. 2024 (as above)",
        "https://github.com/google-research/t5x (t5x/losses.py: cross_entropy_with_logits, "
        "z_loss)",
        "1e-4 * log^2 Z added to the loss per real token, log Z = logsumexp of the head's "
        "logits, so that log Z stays near 0; on Pre-LN",
        (Deviation("the logged loss is the cross-entropy alone; the penalty is its own curve "
                   "(z_loss)", "losses stay comparable across z-loss settings"),
         Deviation("the penalty is averaged over real tokens like the loss", "the lab's "
                   "masked mean; t5x normalises both terms by the same weights"))),
    Recipe(
        "Peri-LN", ("model.norm=layer", "model.placement=peri"),
        "Kim et al. 2025, Peri-LN: Revisiting Normalization Layer in the Transformer "
        "Architecture (ICML); Gemma Team 2024, Gemma 2 (its 'sandwich' norm)",
        None,
        "h = x + N_out(F(N_in(x))) around attention and the FFN, and a final norm before the "
        "head (Gemma 2's pre_/post_attention_norm, pre_/post_ffw_norm and final_norm)",
        (Deviation("LayerNorm with gain and bias; Gemma 2 uses RMSNorm with a (1 + scale) "
                   "gain", "so Peri-LN and Pre-LN differ in placement only; "
                   "model.norm=rms gives the RMS form, equal at init"),
         Deviation("no sqrt(d) multiplier on the embeddings (Gemma's) and no norm on them",
                   "the lab's one embedding (COMMON); the block equation is what is tested"),
         Deviation("no code of Kim et al. is public", "the equation is the paper's; the "
                   "extra norms sit where Gemma 2's released model puts them"))),
    Recipe(
        "Output norm (OLMo 2)", ("model.norm=rms", "model.placement=output",
                                 "model.qk_norm=rms"),
        "Team OLMo 2025, 2 OLMo 2 Furious (COLM)",
        f"{OLMO_CORE} (src/olmo_core/nn/transformer/block.py: ReorderedNormTransformerBlock)",
        "h = x + RMSNorm(F(x)) for attention and the FFN, a final RMSNorm before the head, "
        "no norm on the embeddings, and RMS QK-norm",
        (Deviation("QK-norm per head over the head dimension; OLMo 2 normalises q and k over "
                   "the full width, all heads jointly", "one QK-norm definition in the lab "
                   "(Dehghani et al.'s); the two agree for one head"),
         Deviation("learned position embeddings and a GELU MLP, not RoPE and SwiGLU", "the "
                   "lab's one model (COMMON)"))),
    Recipe(
        "DeepNorm", ("model.norm=layer", "model.placement=post", "model.residual=deepnorm",
                     "model.init=xavier"),
        "Wang et al. 2022, DeepNet: Scaling Transformers to 1,000 Layers (TPAMI 2024)",
        "https://github.com/microsoft/torchscale (torchscale/architecture/decoder.py)",
        "h = LN(alpha x + F(x)) with the decoder-only alpha = (2L)^(1/4), and the value, "
        "attention-output and both FFN weights initialised beta = (8L)^(-1/4) times smaller, "
        "query and key not (Xavier, the paper's pseudocode)",
        (Deviation("beta multiplies the lab's Glorot-normal draw (model.init=xavier); "
                   "torchscale divides its own initialised weights by 1/beta",
                   "the same scaling on the lab's init"),
         Deviation("the same 50-step warm-up as every variant", "DeepNet's claim of training "
                   "without it is a pre-registered claim, run with warmup_steps=0"))),
    Recipe(
        "No norm", ("model.norm=none", "model.placement=pre"),
        "none: the control (the residual stream left as it is)",
        None,
        "h = x + F(x), no final norm",
        (Deviation("no source to follow", "the baseline every norm is compared with"),)),
)}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def recipes_table(recipes: dict[str, Recipe] | None = None) -> str:
    """The recipes as a markdown table: one row per variant, deviations as "what (why)"."""
    rows = ["| variant | config | source | code | the lab follows | deviations (why) |",
            "|---|---|---|---|---|---|"]
    for r in (RECIPES if recipes is None else recipes).values():
        config = " ".join(f"`{o}`" for o in r.overrides)
        deviations = "; ".join(f"{d.what} ({d.why})" for d in r.deviations)
        rows.append("| " + " | ".join(_cell(x) for x in (
            r.name, config, r.paper, r.code or "none public", r.follows, deviations)) + " |")
    common = "; ".join(f"{d.what} ({d.why})" for d in COMMON)
    return "\n".join(rows) + f"\n\nEvery variant: {_cell(common)}.\n"
