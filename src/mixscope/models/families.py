"""The dense families' adapters: one ``Adapter`` per family, data only.

models/adapters.py assembles every family (these, and the mixtures of experts of
models/families_moe.py) into the registry and looks them up; models/adapter.py is the
record and says what each field is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mixscope.models.adapter import Adapter

BERT = Adapter(
    names="BERT",
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

DECODER: dict[str, Any] = dict(
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
    **DECODER,
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
    **DECODER,
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
    **DECODER,
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
    **DECODER,
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
    **DECODER,
)

# Gemma-3 (text): sandwich norms (the attention's and the FF's outputs normed inside their
# branches, the FF reads pre_feedforward_layernorm); every norm scales by 1 + weight
GEMMA = Adapter(
    names="Gemma-3 (text), EmbeddingGemma",
    notes=(
        "q/k norms, `query_pre_attn_scalar`, sliding and global layers, embeddings × √d; "
        "EmbeddingGemma attends both ways; multimodal `gemma3` checkpoints run their "
        "language model (their `text_config`)"
    ),
    family="gemma3",
    model_types=("gemma3_text",),
    norm_after="pre_feedforward_layernorm",
    attn_branch_norm="post_attention_layernorm",
    ff_branch_norm="post_feedforward_layernorm",
    gamma_offset=1.0,
    next_norm="input_layernorm",
    **_SWIGLU,
    # EmbeddingGemma: the same block attending both ways (sliding layers |i − j| < w)
    variants=(("use_bidirectional_attention", True, (("causal", False),)),),
)

# Gemma-2: Gemma-3's sandwich without q/k norms; soft-capped scores
GEMMA2 = replace(
    GEMMA,
    family="gemma2",
    model_types=("gemma2",),
    names="Gemma-2",
    notes=(
        "`query_pre_attn_scalar`, sliding and global layers, soft-capped scores (the fast "
        "path caps them too), embeddings × √d"
    ),
    variants=(),
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
    **DECODER,
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

# Granite: each branch's output times ``residual_multiplier`` (a linear step of the chain)
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
