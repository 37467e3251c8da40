"""Architecture adapters: everything family-specific, as data.

The engine (``mixing/``) never branches on the model family. It needs, per block, five
tensors that every attention block has in some form, and an adapter says where each lives:

- the block's input ``x`` (the residual stream entering the block),
- the per-head value vectors (output of the value projection, or a slice of a fused
  query/key/value projection),
- the attention weights ``α`` (second output of the attention module, eager path),
- the output projection ``W_O, b_O`` (its output is ``Σ_j a_ij + b_O``),
- the normalization after the residual sum (LN1 in post-LN blocks; LN2 / the post-attention
  RMSNorm in pre-LN blocks; the next block's input norm with a parallel residual),
  whose input is the real pre-LN vector ``z`` and whose output is the real ``x̃``;
- for the feed-forward block (the ``ff`` measure group): its input projection(s), its
  activation, its output projection, and the norm after its residual sum (LN2 of a post-LN
  block; the next block's input norm, or the final norm after the last block, of a pre-LN one).

In a pre-LN block the value projection reads ``LN1(x_j)``, so the captured values already
are ``LN1(x_j) W_V + b_V``: the same hooks serve both placements.

Module paths are relative to one block (an element of ``layers``), except ``layers`` and
``final_norm`` (relative to the base model).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from mixscope.errors import UnsupportedArchitectureError

ValueLayout = Literal["plain", "fused", "fused_per_head"]


@dataclass(frozen=True)
class Adapter:
    """Where one model family keeps the pieces of its attention block."""

    family: str
    model_types: tuple[str, ...]
    layers: str  # path from the base model to the ModuleList of blocks
    attention: str  # module whose output is (attn_output, attn_weights [batch, heads, q, k])
    value: str  # module whose output holds the values (see ``value_layout``)
    out_proj: str  # W_O [hidden, heads * head_dim] (PyTorch layout), b_O [hidden]
    # the normalization applied to z = x + attention output, which the next stage reads;
    # None where the FF reads z raw (OLMo-2: ``mlp`` then names the module that reads it)
    norm_after: str | None
    norm_kind: Literal["layer", "rms"] = "layer"
    placement: Literal["post", "pre"] = "post"  # documentation: the hooks are the same
    heads_attr: str = "num_attention_heads"
    kv_heads_attr: str | None = None  # grouped-query attention; None: as many as query heads
    norm_eps_attr: str = "eps"  # attribute of the norm module holding its epsilon
    norm_in_float32: bool = False  # the norm computes in float32 whatever the model's dtype
    position_offset: int = 0  # positions reserved by the embedding (RoBERTa: padding_idx + 1)
    uses_token_type_ids: bool = True
    causal: bool = False  # query i sees keys j <= i only
    # How the ``value`` module's output holds the values [.., kv_heads * head_dim]:
    #   "plain"           the output is the values (a separate value projection)
    #   "fused"           [q | k | v] concatenated along the last axis: the values are the
    #                     last kv_heads · head_dim columns (GPT-2's last third; Phi-3)
    #   "fused_per_head"  per head [q_h | k_h | v_h], heads outermost: the last third of each
    #                     head's 3·head_dim slice (GPT-NeoX ``query_key_value``)
    value_layout: ValueLayout = "plain"
    out_proj_transposed: bool = False  # weight stored [in, out] (GPT-2 Conv1D)
    position_ids: bool = False  # pass position ids = (cumsum(mask) - 1) so left padding is exact
    forward_kwargs: tuple[tuple[str, Any], ...] = ()  # extra keyword arguments of the forward
    # Parallel residual x' = x + attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX ``use_parallel_residual``):
    # no norm follows x + attn, so the block's norm is the next block's input norm
    # (``next_norm``, relative to a block) or, after the last block, ``final_norm`` (relative
    # to the base model), applied to x + attn + mlp; the MLP output (``mlp``) is the token's
    # own part. ``parallel_residual=False`` uses ``norm_after``.
    parallel_residual: bool = False
    # The norm after the feed-forward's residual sum of a post-LN block (LN2: BERT's
    # ``output.LayerNorm``); None in pre-LN blocks, where the next block's input norm follows.
    ff_norm: str | None = None
    mlp: str | None = None
    # The norm that opens the next block (relative to a block) and the norm after the last
    # block (relative to the base model): what follows a pre-LN block's feed-forward
    # residual (and, with a parallel residual, the attention's too).
    next_norm: str | None = None
    final_norm: str | None = None
    # The feed-forward block, FF(y) = W₂ φ(W₁ y + b₁) + b₂, or gated (SwiGLU)
    # W_down (φ(W_gate y) ⊙ W_up y): ``ff_in`` is W₁ (the gate when ``ff_up`` is set),
    # ``ff_act`` the module applying φ element-wise, ``ff_out`` W₂ / W_down; the weights are
    # [in, out] when ``ff_transposed`` (GPT-2 Conv1D). With a parallel residual the FF reads
    # ``norm_after`` applied to the block input x.
    ff_in: str | None = None
    ff_up: str | None = None
    ff_act: str | None = None
    ff_out: str | None = None
    ff_transposed: bool = False
    # ``ff_in`` holds the gate and the up projection in one matrix, gate first (Phi-3's
    # ``gate_up_proj``): its output is split in halves
    ff_fused_gate_up: bool = False
    # Norms inside a branch, on its output before the residual add (Gemma-2/3 and OLMo-2
    # ``post_attention_layernorm`` / ``post_feedforward_layernorm``): the block's chain
    # (mixing/chain.py) splits the branch's parts through them
    attn_branch_norm: str | None = None
    ff_branch_norm: str | None = None
    # added to every norm's weight: Gemma's RMSNorm scales by 1 + weight
    gamma_offset: float = 0.0
    # a config attribute scaling each branch's output before the residual add (Granite's
    # ``residual_multiplier``): a linear step of the chain
    branch_multiplier_attr: str | None = None
    # Configuration-dependent variants: (config attribute, value, overrides); the first whose
    # attribute equals the value is applied by :func:`adapter_for_config`.
    variants: tuple[tuple[str, Any, tuple[tuple[str, Any], ...]], ...] = ()
    # the model families in words, and what sets them apart (the README's table,
    # generated by models/architectures.py)
    names: str = ""
    notes: str = ""

    def for_config(self, config: Any) -> Adapter:
        """This adapter with the overrides of the first variant ``config`` matches."""
        for attr, value, overrides in self.variants:
            if getattr(config, attr, None) == value:
                return replace(self, variants=(), **dict(overrides))
        return replace(self, variants=())


BERT = Adapter(
    names="BERT",
    notes="",
    family="bert",
    model_types=("bert",),
    layers="encoder.layer",
    attention="attention.self",
    value="attention.self.value",
    out_proj="attention.output.dense",
    norm_after="attention.output.LayerNorm",
    ff_norm="output.LayerNorm",
    ff_in="intermediate.dense",
    ff_act="intermediate.intermediate_act_fn",
    ff_out="output.dense",
    position_ids=True,
)

# RoBERTa, XLM-R, CamemBERT and ELECTRA keep BERT's module names
ROBERTA = replace(
    BERT,
    names="RoBERTa, XLM-RoBERTa, CamemBERT",
    notes="positions after `padding_idx`",
    family="roberta",
    model_types=("roberta", "xlm-roberta", "camembert"),
    position_offset=2,  # positions start after padding_idx
    position_ids=False,  # RoBERTa derives positions from input_ids != padding_idx
)

ELECTRA = replace(
    BERT, family="electra", model_types=("electra",), names="ELECTRA", notes="projected embeddings"
)

DISTILBERT = Adapter(
    names="DistilBERT",
    notes="",
    family="distilbert",
    model_types=("distilbert",),
    layers="transformer.layer",
    attention="attention",
    value="attention.v_lin",
    out_proj="attention.out_lin",
    norm_after="sa_layer_norm",
    ff_norm="output_layer_norm",
    ff_in="ffn.lin1",
    ff_act="ffn.activation",
    ff_out="ffn.lin2",
    heads_attr="n_heads",
    uses_token_type_ids=False,
    position_ids=True,
)

_DECODER: dict[str, Any] = dict(
    placement="pre",
    causal=True,
    uses_token_type_ids=False,
    position_ids=True,
    forward_kwargs=(("use_cache", False),),
)

GPT2 = Adapter(
    names="GPT-2",
    notes="fused `c_attn` (values = last third), Conv1D weights `[in, out]`, no pad token",
    family="gpt2",
    model_types=("gpt2",),
    layers="h",
    attention="attn",
    value="attn.c_attn",
    value_layout="fused",
    out_proj="attn.c_proj",
    out_proj_transposed=True,
    norm_after="ln_2",
    next_norm="ln_1",
    final_norm="ln_f",
    ff_in="mlp.c_fc",
    ff_act="mlp.act",
    ff_out="mlp.c_proj",
    ff_transposed=True,
    **_DECODER,
)

GPT_NEOX = Adapter(
    names="GPT-NeoX, Pythia",
    notes="per-head interleaved `query_key_value`, partial rotary",
    family="gpt-neox",
    model_types=("gpt_neox",),
    layers="layers",
    attention="attention",
    value="attention.query_key_value",
    value_layout="fused_per_head",
    out_proj="attention.dense",
    norm_after="post_attention_layernorm",
    mlp="mlp",
    next_norm="input_layernorm",
    final_norm="final_layer_norm",
    ff_in="mlp.dense_h_to_4h",
    ff_act="mlp.act",
    ff_out="mlp.dense_4h_to_h",
    variants=(("use_parallel_residual", True, (("parallel_residual", True),)),),
    **_DECODER,
)

LLAMA = Adapter(
    names="Llama, Mistral, Qwen2, Qwen3, SmolLM3",
    notes=(
        "grouped-query attention, rotary; Qwen2's q/k/v biases, Qwen3's q/k norms, "
        "Mistral's sliding window, SmolLM3's layers without rotary embeddings"
    ),
    family="llama",
    # Qwen3's q/k norms and SmolLM3's layers without rotary embeddings change α only,
    # which the attention module's output carries
    model_types=("llama", "mistral", "qwen2", "qwen3", "smollm3"),
    layers="layers",
    attention="self_attn",
    value="self_attn.v_proj",
    out_proj="self_attn.o_proj",
    norm_after="post_attention_layernorm",
    norm_kind="rms",
    norm_eps_attr="variance_epsilon",
    norm_in_float32=True,  # LlamaRMSNorm casts to float32 (also a float64 model)
    kv_heads_attr="num_key_value_heads",
    next_norm="input_layernorm",
    final_norm="norm",
    ff_in="mlp.gate_proj",
    ff_up="mlp.up_proj",
    ff_act="mlp.act_fn",
    ff_out="mlp.down_proj",
    **_DECODER,
)

OPT = Adapter(
    names="OPT",
    notes="learned positions",
    family="opt",
    model_types=("opt",),
    layers="decoder.layers",
    attention="self_attn",
    value="self_attn.v_proj",
    out_proj="self_attn.out_proj",
    norm_after="final_layer_norm",  # the MLP's input norm (do_layer_norm_before=True)
    next_norm="self_attn_layer_norm",
    final_norm="decoder.final_layer_norm",
    ff_in="fc1",
    ff_act="activation_fn",
    ff_out="fc2",
    # OPT-350m normalizes after the residual sum (post-LN): the attention's own norm follows
    variants=(
        (
            "do_layer_norm_before",
            False,
            (
                ("placement", "post"),
                ("norm_after", "self_attn_layer_norm"),
                ("ff_norm", "final_layer_norm"),
            ),
        ),
    ),
    **_DECODER,
)

_SWIGLU: dict[str, Any] = dict(
    layers="layers",
    attention="self_attn",
    value="self_attn.v_proj",
    out_proj="self_attn.o_proj",
    norm_kind="rms",
    norm_in_float32=True,  # the RMSNorm casts to float32 (also a float64 model)
    kv_heads_attr="num_key_value_heads",
    final_norm="norm",
    ff_in="mlp.gate_proj",
    ff_up="mlp.up_proj",
    ff_act="mlp.act_fn",
    ff_out="mlp.down_proj",
    **_DECODER,
)

# Gemma-2 and Gemma-3 (text): sandwich norms. The attention's output is normed inside the
# branch (``post_attention_layernorm``) before the residual add, the FF reads
# ``pre_feedforward_layernorm`` and its output is normed again (``post_feedforward_layernorm``);
# every norm scales by 1 + weight; Gemma-3's q/k norms, ``query_pre_attn_scalar`` and
# Gemma-2's score soft-capping change α only (the fast path caps its scores too)
GEMMA = Adapter(
    names="Gemma-2, Gemma-3 (text)",
    notes=(
        "q/k norms (Gemma-3), `query_pre_attn_scalar`, sliding and global layers, "
        "soft-capped scores (Gemma-2: the fast path caps them too), embeddings × √d"
    ),
    family="gemma",
    model_types=("gemma2", "gemma3_text"),
    norm_after="pre_feedforward_layernorm",
    attn_branch_norm="post_attention_layernorm",
    ff_branch_norm="post_feedforward_layernorm",
    gamma_offset=1.0,
    next_norm="input_layernorm",
    **_SWIGLU,
)

# OLMo-2 and OLMo-3: no input norms; a norm inside each branch (``post_attention_layernorm``,
# ``post_feedforward_layernorm``), the FF reads the residual sum raw (``mlp``), and only the
# final norm follows the last block; q/k norms over the whole projections change α only
OLMO2 = Adapter(
    names="OLMo-2, OLMo-3",
    notes="q/k norms over the whole projections; OLMo-3's sliding layers",
    family="olmo2",
    model_types=("olmo2", "olmo3"),
    norm_after=None,
    mlp="mlp",
    attn_branch_norm="post_attention_layernorm",
    ff_branch_norm="post_feedforward_layernorm",
    norm_eps_attr="variance_epsilon",
    **_SWIGLU,
)

# Phi-3 / Phi-4: Llama's block with a fused ``qkv_proj`` ([q | k | v] with grouped-query
# heads: the values are the last kv_heads · head_dim columns) and a fused ``gate_up_proj``
# (the gate the first half, the up projection the second)
PHI3 = replace(
    LLAMA,
    family="phi3",
    model_types=("phi3",),
    names="Phi-3, Phi-4",
    notes="fused `qkv_proj` (values = the last K·d_h columns), fused `gate_up_proj`",
    value="self_attn.qkv_proj",
    value_layout="fused",
    ff_in="mlp.gate_up_proj",
    ff_up=None,
    ff_fused_gate_up=True,
    ff_act="mlp.activation_fn",
)

# GPT-J: attention and MLP in parallel on one shared ``ln_1``: the FF's input norm is the
# attention's (``norm_after``, read by the parallel FF), the block's norm the next ``ln_1``
GPTJ = Adapter(
    family="gptj",
    model_types=("gptj",),
    names="GPT-J",
    notes="interleaved (GPT-J style) partial rotary",
    layers="h",
    attention="attn",
    value="attn.v_proj",
    out_proj="attn.out_proj",
    norm_after="ln_1",
    parallel_residual=True,
    mlp="mlp",
    next_norm="ln_1",
    final_norm="ln_f",
    ff_in="mlp.fc_in",
    ff_act="mlp.act",
    ff_out="mlp.fc_out",
    **_DECODER,
)

# StableLM: Llama's module names with LayerNorm; ``use_parallel_residual`` runs the MLP
# beside the attention on the shared ``input_layernorm`` (and has no post-attention norm)
STABLELM = replace(
    LLAMA,
    family="stablelm",
    model_types=("stablelm",),
    names="StableLM",
    notes="LayerNorm, partial rotary, optional q/k/v biases",
    norm_kind="layer",
    norm_eps_attr="eps",
    norm_in_float32=False,
    mlp="mlp",
    variants=(
        (
            "use_parallel_residual",
            True,
            (("parallel_residual", True), ("norm_after", "input_layernorm")),
        ),
    ),
)

# Granite: Llama's block with each branch's output scaled by ``residual_multiplier`` before
# the residual add (a linear step of the chain); its embedding and attention multipliers
# change x and α only
GRANITE = replace(
    LLAMA,
    family="granite",
    model_types=("granite",),
    names="Granite",
    notes="`residual_multiplier` on each branch, `attention_multiplier` as the score scale",
    branch_multiplier_attr="residual_multiplier",
)

# ModernBERT: a pre-LN encoder (LayerNorm without bias; layer 0's attention norm is the
# identity, which only the values see), fused ``Wqkv`` ([q | k | v]), GeGLU ``Wi`` (the
# activated half first), global and bidirectional local (windowed) layers
MODERNBERT = Adapter(
    family="modernbert",
    model_types=("modernbert",),
    names="ModernBERT",
    notes="fused `Wqkv`, GeGLU `Wi`, global and local (bidirectional window) layers",
    layers="layers",
    attention="attn",
    value="attn.Wqkv",
    value_layout="fused",
    out_proj="attn.Wo",
    norm_after="mlp_norm",
    placement="pre",
    next_norm="attn_norm",
    final_norm="final_norm",
    ff_in="mlp.Wi",
    ff_fused_gate_up=True,
    ff_act="mlp.act",
    ff_out="mlp.Wo",
    uses_token_type_ids=False,
    position_ids=True,
)

ADAPTERS: tuple[Adapter, ...] = (
    BERT,
    ROBERTA,
    ELECTRA,
    DISTILBERT,
    GPT2,
    GPT_NEOX,
    LLAMA,
    OPT,
    GEMMA,
    OLMO2,
    PHI3,
    GPTJ,
    STABLELM,
    GRANITE,
    MODERNBERT,
)


def supported_model_types() -> list[str]:
    """All ``config.model_type`` values with an adapter, sorted."""
    return sorted(t for a in ADAPTERS for t in a.model_types)


def adapter_for(model_type: str) -> Adapter:
    """The adapter for a ``config.model_type``; a clear error naming the supported ones."""
    for adapter in ADAPTERS:
        if model_type in adapter.model_types:
            return adapter
    raise UnsupportedArchitectureError(
        f"unsupported architecture {model_type!r}; supported: {', '.join(supported_model_types())}"
    )


def adapter_for_config(config: Any) -> Adapter:
    """The adapter for a model configuration, its configuration-dependent variant applied."""
    return adapter_for(config.model_type).for_config(config)
