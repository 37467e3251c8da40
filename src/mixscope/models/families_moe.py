"""The mixtures of experts' adapters (Qwen3-MoE, OLMoE, Mixtral, gpt-oss): data only.

Their attention half is Llama's (q/k norms, sliding windows and gpt-oss's learned sinks
change α only, which the attention module's output carries; the sinks' mass too, see
``Adapter.learned_sinks``). Their feed-forward is a router choosing the top-k experts per
token (``mlp.gate`` / ``mlp.router``) and a module holding every expert's weights as 3-D
tensors (``mlp.experts``): the ``ff`` group splits it with the router's gates held
constant (docs/method.md §6; mixing/moe_parts.py).
"""

from __future__ import annotations

from dataclasses import replace

from mixscope.models.families import LLAMA

#: the Llama layout with a router and experts (its dense FF modules serve the blocks
#: without experts: Qwen3-MoE's mlp_only_layers)
_MOE_BASE = replace(LLAMA, moe_router="mlp.gate", moe_experts="mlp.experts", variants=())

QWEN3_MOE = replace(
    _MOE_BASE,
    names="Qwen3-MoE",
    notes="q/k norms; experts with top-k routing (dense layers: `mlp_only_layers`)",
    family="qwen3_moe",
    model_types=("qwen3_moe",),
)

OLMOE = replace(
    _MOE_BASE,
    names="OLMoE",
    notes="q/k norms over the whole projections; 64 experts, top-8 routing",
    family="olmoe",
    model_types=("olmoe",),
)

MIXTRAL = replace(
    _MOE_BASE,
    names="Mixtral",
    notes="sliding window; 8 experts, top-2 routing",
    family="mixtral",
    model_types=("mixtral",),
)

# gpt-oss: learned attention sinks (a per-head logit with no value: rows of α sum to less
# than one), biases on q/k/v/o, alternating sliding and full layers, RMSNorm that scales
# in float32; experts with biases and a clamped SwiGLU
GPT_OSS = replace(
    _MOE_BASE,
    names="gpt-oss",
    notes=(
        "learned attention sinks (`learned_sink`); alternating sliding layers; "
        "clamped SwiGLU experts"
    ),
    family="gpt_oss",
    model_types=("gpt_oss",),
    learned_sinks=True,
    moe_router="mlp.router",
    moe_layout="interleaved",
)
