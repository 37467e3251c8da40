"""Runs a stock transformers model once and decomposes every attention block on the fly.

Forward hooks (module paths from the adapter) capture the block's input, values, attention
weights, output projection and norm; when the norm fires, the block's measures are computed
and every large tensor is dropped, so memory stays at what the forward pass itself needs
plus O(batch · seq) per layer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mixscope.errors import MixscopeError
from mixscope.mixing.block import BlockParams, BlockTensors
from mixscope.mixing.exactness import check_exactness
from mixscope.mixing.pairs import pair_norms
from mixscope.mixing.ratios import token_measures
from mixscope.models.loading import LoadedModel


@dataclass
class EngineOutput:
    measures: torch.Tensor  # [batch, layer, measure, seq] float32 on CPU (MEASURE_ORDER)
    pairs: torch.Tensor | None  # [batch, layer, measure, seq, seq] float32 (PAIR_MEASURES)
    max_exactness_error: float | None  # largest identity residual seen (verify only)


def _stat_dtype(model_dtype: torch.dtype) -> torch.dtype:
    """Statistics are float32 (float64 when the model runs in float64)."""
    return torch.float64 if model_dtype == torch.float64 else torch.float32


@contextlib.contextmanager
def eager_attention(model: Any) -> Iterator[None]:
    """Temporarily switch a model to the eager attention path (it returns the weights)."""
    current = getattr(model.config, "_attn_implementation", "eager")
    if current == "eager":
        yield
        return
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(current)


class MixingEngine:
    """Decomposes every block of one loaded model; a plain class (no Ray), reused per batch."""

    def __init__(self, loaded: LoadedModel, *, verify: bool = False) -> None:
        self.loaded = loaded
        self.verify = verify
        model = loaded.model
        adapter = loaded.adapter
        self.blocks = list(model.get_submodule(adapter.layers))
        self.model_dtype = next(model.parameters()).dtype
        self.stat_dtype = _stat_dtype(self.model_dtype)
        config = model.config
        heads = int(getattr(config, adapter.heads_attr))
        kv_heads = (
            int(getattr(config, adapter.kv_heads_attr, heads)) if adapter.kv_heads_attr else heads
        )
        self.params = [self._block_params(block, heads, kv_heads) for block in self.blocks]

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    def _block_params(self, block: Any, heads: int, kv_heads: int) -> BlockParams:
        a = self.loaded.adapter
        out_proj = block.get_submodule(a.out_proj)
        norm = block.get_submodule(a.norm_after)
        sd = self.stat_dtype
        w_out = out_proj.weight.detach().to(sd)  # [hidden, heads * head_dim]
        hidden = w_out.shape[0]
        b_out = out_proj.bias if getattr(out_proj, "bias", None) is not None else None
        beta = getattr(norm, "bias", None)
        zeros = torch.zeros(hidden, dtype=sd, device=w_out.device)
        return BlockParams(
            w_out=w_out,
            b_out=b_out.detach().to(sd) if b_out is not None else zeros,
            gamma=norm.weight.detach().to(sd),
            beta=beta.detach().to(sd) if beta is not None else zeros,
            eps=float(getattr(norm, a.norm_eps_attr)),
            norm_kind=a.norm_kind,
            heads=heads,
            kv_heads=kv_heads,
        )

    @torch.inference_mode()
    def run(
        self,
        input_ids: torch.Tensor,  # [batch, seq]
        attention_mask: torch.Tensor,  # [batch, seq] 1 = token, 0 = padding
        token_type_ids: torch.Tensor | None = None,  # [batch, seq]
        *,
        pairs: bool = False,
    ) -> EngineOutput:
        """One forward pass; the measures of every block for every position."""
        model = self.loaded.model
        a = self.loaded.adapter
        device = next(model.parameters()).device
        valid = attention_mask.to(device).bool()  # [batch, seq]
        per_layer: list[torch.Tensor | None] = [None] * self.num_layers
        per_layer_pairs: list[torch.Tensor | None] = [None] * self.num_layers
        max_err: list[float] = []
        handles = []
        sd = self.stat_dtype

        for idx, block in enumerate(self.blocks):
            store: dict[str, torch.Tensor] = {}

            def on_block_input(_m, args, kwargs, store=store):
                hidden = args[0] if args else kwargs["hidden_states"]
                store["x"] = hidden

            def on_values(_m, _inp, out, store=store):
                store["values"] = out

            def on_attention(_m, _inp, out, store=store):
                weights = out[1] if isinstance(out, tuple | list) and len(out) > 1 else None
                if weights is None:
                    raise MixscopeError(
                        "the attention module returned no attention weights; "
                        "mixscope needs the eager attention path"
                    )
                store["alpha"] = weights

            def on_out_proj(_m, _inp, out, store=store):
                store["attn_out"] = out

            def on_norm(_m, inp, out, store=store, idx=idx):
                t = BlockTensors(
                    x=store.pop("x").to(sd),
                    values=store.pop("values").to(sd),
                    alpha=store.pop("alpha").to(sd),
                    attn_out=store.pop("attn_out").to(sd),
                    z=inp[0].to(sd),
                    y=out.to(sd),
                )
                p = self.params[idx]
                if self.verify:
                    max_err.append(check_exactness(t, p, valid, self.model_dtype, idx + 1))
                per_layer[idx] = token_measures(t, p).float()  # [measure, batch, seq]
                if pairs:
                    per_layer_pairs[idx] = pair_norms(t, p).float()

            handles += [
                block.register_forward_pre_hook(on_block_input, with_kwargs=True),
                block.get_submodule(a.value).register_forward_hook(on_values),
                block.get_submodule(a.attention).register_forward_hook(on_attention),
                block.get_submodule(a.out_proj).register_forward_hook(on_out_proj),
                block.get_submodule(a.norm_after).register_forward_hook(on_norm),
            ]

        inputs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}
        if a.uses_token_type_ids and token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids.to(device)
        was_training = model.training
        model.eval()
        try:
            with eager_attention(model):
                model(**inputs)
        finally:
            for h in handles:
                h.remove()
            model.train(was_training)

        if any(m is None for m in per_layer):
            raise MixscopeError("some blocks did not run; the adapter does not match this model")
        measures = torch.stack(per_layer, dim=1)  # [measure, layer, batch, seq]
        measures = measures.permute(2, 1, 0, 3).contiguous().cpu()  # [batch, layer, measure, seq]
        pair_out = None
        if pairs:
            stacked = torch.stack(per_layer_pairs, dim=1)  # [measure, layer, batch, seq, seq]
            pair_out = stacked.permute(2, 1, 0, 3, 4).contiguous().cpu()
        return EngineOutput(measures, pair_out, max(max_err) if max_err else None)
