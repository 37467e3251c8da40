"""Architecture adapters: everything family-specific, as data.

The engine (``mixing/``) never branches on the model family. It needs, per block, five
tensors that every attention block has in some form, and an adapter says where each lives:

- the block's input ``x`` (the residual stream entering the block),
- the per-head value vectors (output of the value projection),
- the attention weights ``α`` (second output of the attention module, eager path),
- the output projection ``W_O, b_O`` (its output is ``Σ_j a_ij + b_O``),
- the normalization after the residual sum (LN1 in post-LN blocks; LN2 in pre-LN blocks),
  whose input is the real pre-LN vector ``z`` and whose output is the real ``x̃``.

Module paths are relative to one block (an element of ``layers``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mixscope.errors import UnsupportedArchitectureError


@dataclass(frozen=True)
class Adapter:
    """Where one model family keeps the pieces of its attention block."""

    family: str
    model_types: tuple[str, ...]
    layers: str  # path from the base model to the ModuleList of blocks
    attention: str  # module whose output is (attn_output, attn_weights [batch, heads, q, k])
    value: str  # Linear giving the values [batch, seq, kv_heads * head_dim]
    out_proj: str  # Linear W_O [hidden, heads * head_dim], b_O [hidden]
    norm_after: str  # the normalization applied to z = x + attention output
    norm_kind: Literal["layer", "rms"] = "layer"
    placement: Literal["post", "pre"] = "post"
    heads_attr: str = "num_attention_heads"
    kv_heads_attr: str | None = None  # grouped-query attention; None: as many as query heads
    norm_eps_attr: str = "eps"  # attribute of the norm module holding its epsilon
    position_offset: int = 0  # positions reserved by the embedding (RoBERTa: padding_idx + 1)
    uses_token_type_ids: bool = True
    causal: bool = False


BERT = Adapter(
    family="bert",
    model_types=("bert",),
    layers="encoder.layer",
    attention="attention.self",
    value="attention.self.value",
    out_proj="attention.output.dense",
    norm_after="attention.output.LayerNorm",
)

ROBERTA = Adapter(
    family="roberta",
    model_types=("roberta", "xlm-roberta", "camembert"),
    layers="encoder.layer",
    attention="attention.self",
    value="attention.self.value",
    out_proj="attention.output.dense",
    norm_after="attention.output.LayerNorm",
    position_offset=2,
)

ELECTRA = Adapter(
    family="electra",
    model_types=("electra",),
    layers="encoder.layer",
    attention="attention.self",
    value="attention.self.value",
    out_proj="attention.output.dense",
    norm_after="attention.output.LayerNorm",
)

DISTILBERT = Adapter(
    family="distilbert",
    model_types=("distilbert",),
    layers="transformer.layer",
    attention="attention",
    value="attention.v_lin",
    out_proj="attention.out_lin",
    norm_after="sa_layer_norm",
    heads_attr="n_heads",
    uses_token_type_ids=False,
)

ADAPTERS: tuple[Adapter, ...] = (BERT, ROBERTA, ELECTRA, DISTILBERT)


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
