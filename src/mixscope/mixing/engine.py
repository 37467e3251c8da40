"""Runs a stock transformers model once and decomposes every attention block on the fly.

Forward hooks (module paths from the adapter) capture the block's input, values, attention
weights, output projection and norm; when the norm fires, the block's measures are computed
and every large tensor is dropped, so memory stays at what the forward pass itself needs
plus O(batch · seq) per layer.

The attention weights come from one of two implementations (``attention``): the fast one
(fast_attention.py, a fused kernel whose module output carries only α_ii [batch, heads,
seq], so memory is O(seq)) or eager (the full [batch, heads, seq, seq] weights, which the
per-pair maps and the exactness check read whole).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mixscope.errors import MixscopeError
from mixscope.mixing import ATTENTION_MODES
from mixscope.mixing.block import BlockParams, BlockTensors, select_values
from mixscope.mixing.exactness import check_exactness
from mixscope.mixing.fast_attention import FAST_ATTENTION, register, release_masks
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
def attention_implementation(model: Any, name: str) -> Iterator[None]:
    """Temporarily switch a model's attention implementation ("eager" or the fast one)."""
    current = getattr(model.config, "_attn_implementation", "eager")
    if current == name:
        yield
        return
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(current)


class MixingEngine:
    """Decomposes every block of one loaded model; a plain class (no Ray), reused per batch."""

    def __init__(
        self, loaded: LoadedModel, *, verify: bool = False, attention: str = "auto"
    ) -> None:
        if attention not in ATTENTION_MODES:
            raise MixscopeError(
                f"attention must be one of {', '.join(ATTENTION_MODES)}, got {attention!r}"
            )
        if attention == "fast" and verify:
            raise MixscopeError(
                "the exactness check reads the full attention weights: use attention "
                "'auto' or 'eager' with verify"
            )
        self.loaded = loaded
        self.verify = verify
        self.attention = attention
        if attention != "eager":
            register()
        # batch · width (tokens) that last ran out of device memory; run_batches keeps
        # later batches below it
        self.oom_token_limit: int | None = None
        model = loaded.model
        adapter = loaded.adapter
        self.blocks = list(model.get_submodule(adapter.layers))
        # the norm that follows each block's residual sum (see Adapter.parallel_residual)
        if adapter.parallel_residual:
            if not (adapter.mlp and adapter.next_norm and adapter.final_norm):
                raise MixscopeError(f"adapter {adapter.family}: parallel residual needs mlp/norms")
            self.norms = [b.get_submodule(adapter.next_norm) for b in self.blocks[1:]]
            self.norms.append(model.get_submodule(adapter.final_norm))
        else:
            self.norms = [b.get_submodule(adapter.norm_after) for b in self.blocks]
        self.model_dtype = next(model.parameters()).dtype
        self.stat_dtype = _stat_dtype(self.model_dtype)
        # the dtype the norm really computes in, for the exactness tolerance
        self.norm_dtype = (
            torch.float32
            if adapter.norm_in_float32 and self.model_dtype == torch.float64
            else self.model_dtype
        )
        config = model.config
        heads = int(getattr(config, adapter.heads_attr))
        kv_heads = (
            int(getattr(config, adapter.kv_heads_attr, heads)) if adapter.kv_heads_attr else heads
        )
        self.params = [
            self._block_params(block, norm, heads, kv_heads)
            for block, norm in zip(self.blocks, self.norms, strict=True)
        ]

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    def _block_params(self, block: Any, norm: Any, heads: int, kv_heads: int) -> BlockParams:
        a = self.loaded.adapter
        out_proj = block.get_submodule(a.out_proj)
        sd = self.stat_dtype
        w_out = out_proj.weight.detach()
        if a.out_proj_transposed:  # Conv1D keeps [in, out]
            w_out = w_out.t()
        w_out = w_out.to(sd).contiguous()  # [hidden, heads * head_dim]
        hidden = w_out.shape[0]
        b_out = getattr(out_proj, "bias", None)
        gamma = getattr(norm, "weight", None)  # None: a norm without elementwise affine
        beta = getattr(norm, "bias", None)
        zeros = torch.zeros(hidden, dtype=sd, device=w_out.device)
        return BlockParams(
            w_out=w_out,
            b_out=b_out.detach().to(sd) if b_out is not None else zeros,
            gamma=gamma.detach().to(sd) if gamma is not None else torch.ones_like(zeros),
            beta=beta.detach().to(sd) if beta is not None else zeros,
            eps=float(getattr(norm, a.norm_eps_attr)),
            norm_kind=a.norm_kind,
            heads=heads,
            kv_heads=kv_heads,
        )

    def no_context(self, valid: torch.Tensor) -> torch.Tensor:
        """Real tokens with no other real token to attend to: [batch, seq] bool.

        Causal models: the first real token of each sequence (whatever the padding side);
        bidirectional ones: only a sequence of a single token.
        """
        if self.loaded.adapter.causal:
            seen = valid.long().cumsum(-1)  # real tokens at positions <= i
        else:
            seen = valid.long().sum(-1, keepdim=True).expand_as(valid)
        return valid & (seen == 1)

    def implementation(self, pairs: bool) -> str:
        """The attention implementation one batch runs with: eager where α is read whole."""
        if self.attention == "fast" and pairs:
            raise MixscopeError("per-pair maps read the full attention weights: not with 'fast'")
        if self.attention == "eager" or pairs or self.verify:
            return "eager"
        return FAST_ATTENTION

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
        implementation = self.implementation(pairs)
        model = self.loaded.model
        a = self.loaded.adapter
        device = next(model.parameters()).device
        valid = attention_mask.to(device).bool()  # [batch, seq]
        no_context = self.no_context(valid)  # [batch, seq]
        padded = not bool(valid.all())
        per_layer: list[torch.Tensor | None] = [None] * self.num_layers
        per_layer_pairs: list[torch.Tensor | None] = [None] * self.num_layers
        max_err: list[float] = []
        handles = []
        sd = self.stat_dtype

        for idx, block in enumerate(self.blocks):
            store: dict[str, torch.Tensor] = {}
            p = self.params[idx]

            def on_block_input(_m, args, kwargs, store=store):
                hidden = args[0] if args else kwargs["hidden_states"]
                store["x"] = hidden

            def on_values(_m, _inp, out, store=store, p=p):
                store["values"] = select_values(out, a.value_layout, p.heads, p.head_dim)

            def on_attention(_m, _inp, out, store=store):
                weights = out[1] if isinstance(out, tuple | list) and len(out) > 1 else None
                if weights is None:
                    raise MixscopeError(
                        "the attention module returned no attention weights; this model's "
                        "attention does not go through transformers' attention interface"
                    )
                # fast path: α_ii [batch, heads, seq]; eager: α [batch, heads, seq, seq]
                store["alpha"] = weights
                if padded:
                    # A query row with every key masked (left padding) can come out NaN (a
                    # float64 mask overflows to -inf in a float32 softmax); NaN values at a
                    # padded position would reach real tokens as 0 · NaN in the next layer.
                    # Zero the padded rows: real tokens never read them (α = 0 exactly).
                    return (out[0].masked_fill(~valid.unsqueeze(-1), 0.0), *out[1:])
                return None

            def on_out_proj(_m, _inp, out, store=store):
                store["attn_out"] = out

            def on_mlp(_m, _inp, out, store=store):
                store["extra"] = out

            def on_norm(_m, inp, out, store=store, idx=idx, p=p):
                x = store.pop("x").to(sd)
                extra = store.pop("extra", None)
                alpha = store.pop("alpha")
                full = alpha.dim() == 4
                t = BlockTensors(
                    x=x,
                    values=store.pop("values").to(sd),
                    alpha_self=torch.diagonal(alpha, dim1=-2, dim2=-1) if full else alpha,
                    # the full α in statistics dtype only where it is read whole
                    alpha=alpha.to(sd) if full and (pairs or self.verify) else None,
                    attn_out=store.pop("attn_out").to(sd),
                    z=inp[0].reshape(x.shape).to(sd),  # OPT normalizes a [batch·seq, hidden] view
                    y=out.reshape(x.shape).to(sd),
                    extra=extra.to(sd) if extra is not None else None,
                )
                if self.verify:
                    max_err.append(
                        check_exactness(t, p, valid, self.model_dtype, idx + 1, self.norm_dtype)
                    )
                per_layer[idx] = token_measures(t, p, no_context).float()  # [measure, batch, seq]
                if pairs:
                    per_layer_pairs[idx] = pair_norms(t, p, causal=a.causal).float()

            handles += [
                block.register_forward_pre_hook(on_block_input, with_kwargs=True),
                block.get_submodule(a.value).register_forward_hook(on_values),
                block.get_submodule(a.attention).register_forward_hook(on_attention),
                block.get_submodule(a.out_proj).register_forward_hook(on_out_proj),
                self.norms[idx].register_forward_hook(on_norm),
            ]
            if a.parallel_residual:
                assert a.mlp is not None
                handles.append(block.get_submodule(a.mlp).register_forward_hook(on_mlp))

        inputs: dict[str, Any] = {
            "input_ids": input_ids.to(device),
            "attention_mask": attention_mask.to(device),
            **dict(a.forward_kwargs),
        }
        if a.uses_token_type_ids and token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids.to(device)
        if a.position_ids:  # positions count real tokens only: left padding changes nothing
            inputs["position_ids"] = (valid.long().cumsum(-1) - 1).clamp_min(0)
        was_training = model.training
        model.eval()
        try:
            with attention_implementation(model, implementation):
                model(**inputs)
        finally:
            for h in handles:
                h.remove()
            release_masks()
            model.train(was_training)

        ran = [m for m in per_layer if m is not None]
        if len(ran) != len(per_layer):
            raise MixscopeError("some blocks did not run; the adapter does not match this model")
        measures = torch.stack(ran, dim=1)  # [measure, layer, batch, seq]
        measures = measures.permute(2, 1, 0, 3).contiguous().cpu()  # [batch, layer, measure, seq]
        pair_out = None
        if pairs:
            maps = [m for m in per_layer_pairs if m is not None]
            stacked = torch.stack(maps, dim=1)  # [measure, layer, batch, seq, seq]
            pair_out = stacked.permute(2, 1, 0, 3, 4).contiguous().cpu()
        return EngineOutput(measures, pair_out, max(max_err) if max_err else None)
