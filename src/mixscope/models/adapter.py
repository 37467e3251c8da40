"""The ``Adapter`` record: where one model family keeps the pieces of its blocks.

Its fields are the data the engine and the block's chain read (module paths, layouts, which
chain steps a family has, configuration variants); models/adapters.py holds one per
family. See models/adapters.py for what each piece is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

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
    # where the norm after the attention's sum stands: "post" (BERT: LN1 is the FF's input
    # and the residual's, LN2 follows the FF) or "pre" (the FF's own input norm): the FF's
    # placement in the block's chain (mixing/chain.py ff_stream) and the README's table
    placement: Literal["post", "pre"] = "post"
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
    # A mixture of experts in place of the dense FF (docs/method.md §6), in the blocks that
    # have ``moe_experts`` (the others, Qwen3-MoE's ``mlp_only_layers``, keep ``ff_in`` …):
    # ``moe_router`` outputs (logits, the top-k gates [tokens, k], their experts [tokens,
    # k]); ``moe_experts`` holds every expert's weights as 3-D tensors, laid out as
    #   "rows"         gate_up_proj [E, 2F, hidden] (the gate's rows, then the up's),
    #                  down_proj [E, hidden, F], no biases, f = act_fn(g) · u (Qwen3-MoE,
    #                  OLMoE, Mixtral)
    #   "interleaved"  gate_up_proj [E, hidden, 2F] (gate the even columns, up the odd),
    #                  down_proj [E, F, hidden], biases, and gpt-oss's clamped SwiGLU
    #                  f = (clamp(u, ±L) + 1) · g′ σ(α g′), g′ = min(g, L)
    moe_router: str | None = None
    moe_experts: str | None = None
    moe_layout: Literal["rows", "interleaved"] = "rows"
    # the attention has a learned sink per head (gpt-oss ``sinks``, passed as ``s_aux``): a
    # logit with no value vector, so a row of α sums to 1 − π, π the sink's mass
    learned_sinks: bool = False
    # Configuration-dependent variants: (config attribute, value, overrides); the first whose
    # attribute equals the value is applied by :func:`adapter_for_config`.
    variants: tuple[tuple[str, Any, tuple[tuple[str, Any], ...]], ...] = ()
    # the model families in words, and what sets them apart (the README's table,
    # generated by mixing/architectures.py)
    names: str = ""
    notes: str = ""

    def for_config(self, config: Any) -> Adapter:
        """This adapter with the overrides of the first variant ``config`` matches."""
        for attr, value, overrides in self.variants:
            if getattr(config, attr, None) == value:
                return replace(self, variants=(), **dict(overrides))
        return replace(self, variants=())
