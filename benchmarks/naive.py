"""The naive per-pair decomposition (Kobayashi et al. 2021), the engine benchmark's baseline.

Per layer, the ``[batch, heads, n, n, hidden]`` tensor of α^h_ij f^h(x_j) is materialized,
the residual and LN split per pair, then the norms and ratios, as the authors' code does.
"""

from __future__ import annotations

from typing import Any

import torch

#: measure the naive decomposition's memory only where one layer's tensor is below this
NAIVE_MEASURE_MB = 2048


def naive_tensor_mb(batch: int, heads: int, n: int, hidden: int) -> float:
    """Size of one layer's [batch, heads, n, n, hidden] float32 tensor."""
    return batch * heads * n * n * hidden * 4 / 2**20


class NaiveDecomposition:
    """Kobayashi et al.'s way: per layer, materialize the [B, H, n, n, d] tensor α f(x).

    Same hooks as the engine (block input, values, attention weights, LN input), then the
    authors' sequence of operations: transformed vectors f^h(x_j) [B,H,n,d], weighted
    vectors α^h_ij f^h(x_j) [B,H,n,n,d], summed over heads [B,n,n,d], the residual matrix
    δ_ij x_i [B,n,n,d] added, each pair centred and divided by the shared s(z_i), then the
    norms of every pair and the mixing ratios from the vectors (own = diagonal, context =
    row sum minus diagonal).
    """

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded
        model, a = loaded.model, loaded.adapter
        self.blocks = list(model.get_submodule(a.layers))
        self.heads = int(getattr(model.config, a.heads_attr))

    @torch.inference_mode()
    def run(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        model, a = self.loaded.model, self.loaded.adapter
        measures: list[torch.Tensor] = []
        pairs: list[torch.Tensor] = []
        handles = []
        for block in self.blocks:
            store: dict[str, torch.Tensor] = {}
            dense = block.get_submodule(a.out_proj)
            ln = block.get_submodule(a.norm_after)

            def on_input(_m, args, kwargs, store=store):
                store["x"] = args[0] if args else kwargs["hidden_states"]

            def on_values(_m, _inp, out, store=store):
                store["v"] = out

            def on_attention(_m, _inp, out, store=store):
                store["alpha"] = out[1]

            def on_norm(_m, inp, _out, store=store, dense=dense, ln=ln):
                m, p = self._decompose(store.pop("x"), store.pop("v"), store.pop("alpha"),
                                       inp[0], dense, ln)  # fmt: skip
                measures.append(m)
                pairs.append(p)

            handles += [
                block.register_forward_pre_hook(on_input, with_kwargs=True),
                block.get_submodule(a.value).register_forward_hook(on_values),
                block.get_submodule(a.attention).register_forward_hook(on_attention),
                block.get_submodule(a.norm_after).register_forward_hook(on_norm),
            ]
        try:
            model(**inputs)
        finally:
            for h in handles:
                h.remove()
        # [batch, layer, measure, seq] and [batch, layer, measure, seq, seq], like the engine
        m = torch.stack(measures, 1).permute(2, 1, 0, 3)
        p = torch.stack(pairs, 1).permute(2, 1, 0, 3, 4)
        return m.contiguous().cpu(), p.contiguous().cpu()

    def _decompose(self, x, values, alpha, pre_ln, dense, ln):
        batch, n, d = x.shape
        heads = self.heads
        head_size = values.shape[-1] // heads
        v = values.view(batch, n, heads, head_size).permute(0, 2, 1, 3)  # [B,H,n,dh]
        w = dense.weight.view(d, heads, head_size)  # [d,H,dh]
        transformed = torch.einsum("bhsv,dhv->bhsd", v, w)  # f^h(x_j): [B,H,n,d]
        weighted = torch.einsum("bhks,bhsd->bhksd", alpha, transformed)  # [B,H,n,n,d]
        summed = weighted.sum(dim=1)  # a_ij: [B,n,n,d]
        del weighted
        eye = torch.eye(n, device=x.device, dtype=x.dtype)
        residual = torch.einsum("sk,bsd->bskd", eye, x)  # δ_ij x_i: [B,n,n,d]
        res_weighted = summed + residual  # r_ij
        del residual
        var = (pre_ln - pre_ln.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)
        scale = torch.sqrt(var + ln.eps).unsqueeze(-1)  # s(z_i): [B,n,1,1]
        centred = res_weighted - res_weighted.mean(-1, keepdim=True)
        post_ln = torch.einsum("bskd,d->bskd", centred, ln.weight) / scale  # F_i(x_j)
        del centred

        def mixing(layer: torch.Tensor) -> torch.Tensor:
            own = torch.diagonal(layer, dim1=1, dim2=2).permute(0, 2, 1)  # [B,n,d]
            context = layer.sum(dim=2) - own
            c, o = torch.norm(context, dim=-1), torch.norm(own, dim=-1)
            return c / (c + o)

        attn_w = 1 - torch.diagonal(alpha, dim1=-2, dim2=-1).mean(1)
        measures = torch.stack(
            [attn_w, mixing(summed), attn_w / 2, mixing(res_weighted), mixing(post_ln)]
        )
        pair_maps = torch.stack(
            [torch.norm(summed, dim=-1), torch.norm(res_weighted, dim=-1),
             torch.norm(post_ln, dim=-1)]
        )  # fmt: skip
        return measures.float(), pair_maps.float()
