"""Forward hooks that capture, per block, what the selected measure groups need.

A *capture point* (mixing/points.py) is a module of the block and what its hook keeps; a
batch registers the points of the union of the groups' needs, for
one forward pass, inside :func:`hooks` — a context manager, so no hook is ever left on a
long-lived actor's model when registration or the forward fails. When a block's last
needed point has fired, ``finish(idx, store)`` computes its measures and the store is
dropped: memory stays at what the forward needs plus O(batch · seq) per layer. When the
last block has finished, the forward pass stops (:class:`ForwardDone`): what follows it
is never read.

The points, their modules and the weights they bring are mixing/points.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mixscope.errors import MixscopeError
from mixscope.mixing.block_tensors import BlockParams, BlockTensors, select_values
from mixscope.mixing.fast_attention import FastWeights
from mixscope.mixing.points import ModelPoints


class ForwardDone(Exception):
    """Raised by the hook that finishes the last block: nothing after it is read (the last
    feed-forward of a post-LN model, a pooler), so the forward pass ends there; the engine
    catches it. Not an error: the forward's early end."""


#: store key under which the names of the points that have fired are kept
SEEN = "_seen"


def _zero_padded_rows(out: Any, valid: torch.Tensor) -> Any:
    """A query row with every key masked (left padding) can come out NaN (a float64 mask
    overflows to -inf in a float32 softmax); NaN values at a padded position would reach
    real tokens as 0 · NaN in the next layer. Zero the padded rows: real tokens never read
    them (α = 0 exactly)."""
    return (out[0].masked_fill(~valid.unsqueeze(-1), 0.0), *out[1:])


def _first_column(alpha: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """α^h_i0 from the full weights [batch, heads, seq, seq]: [batch, heads, seq]."""
    index = first.view(-1, 1, 1, 1).expand(*alpha.shape[:3], 1)  # [batch, heads, seq, 1]
    return alpha.gather(-1, index).squeeze(-1)


class Capture:
    """The points one batch registers and what each keeps (the engine builds one per run)."""

    def __init__(
        self,
        points: ModelPoints,
        params: list[BlockParams],
        needs: frozenset[str],
        *,
        stat_dtype: torch.dtype,
        full_alpha: bool,
        alpha_first: bool = True,
    ) -> None:
        self.points = points
        self.params = params
        # per block (unknown points refused here): a block with experts reads its router where
        # a dense one reads its up projection
        self.block_needs = [points.expand(needs, i) for i in range(points.num_layers)]
        self.stat_dtype = stat_dtype
        self.full_alpha = full_alpha  # keep α whole (per-pair maps, the exactness check)
        self.alpha_first = alpha_first  # keep α_i0 (a selected group reads it)

    def _keep(self, name: str, store: dict[str, Any], args: Any, kwargs: Any, out: Any) -> Any:
        """Keep what point ``name`` gives; returns a replacement output or None."""
        points, sd = self.points, self.stat_dtype
        if name == "block_input":
            store["x"] = (args[0] if args else kwargs["hidden_states"]).to(sd)
        elif name == "values":
            p = self.params[store["idx"]]
            layout = points.adapter.value_layout
            store["values"] = select_values(out, layout, p.heads, p.head_dim, p.kv_heads)
        elif name == "attention":
            return self._keep_attention(store, out)
        elif name == "attn_out":
            store["attn_out"] = out.to(sd)
        elif name == "attn_norm":
            z = args[0] if args else kwargs["hidden_states"]
            x_shape = store["x"].shape if "x" in store else z.shape
            # OPT normalizes a [batch · seq, hidden] view
            store["z"] = z.reshape(x_shape).to(sd)
            # where no norm stands (OLMo-2) the point is the module reading z: y = z
            y = z if points.norm_is_identity else out
            store["y"] = y.reshape(x_shape).to(sd)
        elif name == "parallel_mlp":
            store["extra"] = out.to(sd)
        elif name == "ff_norm":
            if points.ff_norms[store["idx"]] is None:  # the block's output: the identity's in = out
                v = out if isinstance(out, torch.Tensor) else out[0]
                store["ff_norm_in"] = store["ff_norm_out"] = v.to(sd)
            else:
                store["ff_norm_in"] = args[0].reshape(self._shape(store, out)).to(sd)
                store["ff_norm_out"] = out.reshape(self._shape(store, out)).to(sd)
        elif name == "ff_in" and points.experts(store["idx"]) is not None:  # the router
            _logits, gates, experts = out  # [batch · seq, k] each
            store["ff_route"] = (gates.detach().to(sd), experts.detach())
        elif name == "ff_in" and points.adapter.ff_fused_gate_up:  # Phi-3: [gate | up]
            gate, up = out.reshape(self._shape(store, out)).to(sd).chunk(2, dim=-1)
            store["ff_in"], store["ff_up"] = gate, up
        elif name in ("ff_in", "ff_up", "ff_out"):  # OPT's FF runs on [batch · seq, ·]
            store[name] = out.reshape(self._shape(store, out)).to(sd)
        return None

    @staticmethod
    def _shape(store: dict[str, Any], out: torch.Tensor) -> tuple[int, ...]:
        """[batch, seq, width] of a module output (a flattened one: OPT's FF and norms)."""
        return (*store["x"].shape[:2], out.shape[-1]) if "x" in store else tuple(out.shape)

    def _keep_attention(self, store: dict[str, Any], out: Any) -> Any:
        batch = store["batch"]
        weights = out[1] if isinstance(out, tuple | list) and len(out) > 1 else None
        if weights is None:
            raise MixscopeError(
                "the attention module returned no attention weights; this model's "
                "attention does not go through transformers' attention interface"
            )
        if isinstance(weights, FastWeights):  # α_ii, α_i0 [batch, heads, seq]
            store["alpha_self"], store["alpha_first"] = weights.own, weights.first
            store["sink_mass"] = weights.sink  # π [batch, heads, seq]; None without sinks
            store["scores"] = weights.scores  # q, k, mask, LSE where a group reads α_ij
        else:  # eager: α [batch, heads, seq, seq]
            store["alpha_self"] = torch.diagonal(weights, dim1=-2, dim2=-1)
            if self.points.adapter.learned_sinks:  # the sink's column was dropped: 1 − Σ_j α
                store["sink_mass"] = 1.0 - weights.to(self.stat_dtype).sum(dim=-1)
            if self.alpha_first:
                store["alpha_first"] = _first_column(weights, batch.first_position)
            if self.full_alpha:
                store["alpha"] = weights.to(self.stat_dtype)
        if not bool(batch.valid.all()):
            return _zero_padded_rows(out, batch.valid)
        return None

    def tensors(self, store: dict[str, Any]) -> BlockTensors:
        """A finished block's tensors from what its hooks kept (the BASE points always
        fire: x, values, α, attn_out, z, y are there; the rest where a group read them)."""
        return BlockTensors(
            x=store["x"],
            values=store["values"].to(self.stat_dtype),
            alpha_self=store["alpha_self"],
            alpha=store.get("alpha"),
            attn_out=store["attn_out"],
            z=store["z"],
            y=store["y"],
            extra=store.get("extra"),
            alpha_first=store.get("alpha_first"),
            sink_mass=store.get("sink_mass"),
            ff_norm_in=store.get("ff_norm_in"),
            ff_norm_out=store.get("ff_norm_out"),
            ff_pre=(
                tuple(store[k] for k in ("ff_in", "ff_up") if k in store)
                if "ff_in" in store
                else None
            ),
            ff_out=store.get("ff_out"),
            ff_route=store.get("ff_route"),
            scores=store.get("scores"),
        )

    @contextlib.contextmanager
    def hooks(self, batch: Any, finish: Callable[[int, dict[str, Any]], None]) -> Iterator[None]:
        """Hooks on every block for one forward pass; all removed on the way out."""
        handles = []
        remaining = [self.points.num_layers]  # blocks not yet finished

        def finish_block(idx: int, store: dict[str, Any]) -> None:
            finish(idx, store)
            remaining[0] -= 1
            if remaining[0] == 0:
                raise ForwardDone

        try:
            for idx in range(self.points.num_layers):
                store: dict[str, Any] = {"idx": idx, "batch": batch, SEEN: set()}
                for name in sorted(self.block_needs[idx]):
                    handles.append(self._register(name, idx, store, finish_block))
            yield
        finally:
            for h in handles:
                h.remove()

    def _register(
        self, name: str, idx: int, store: dict[str, Any], finish: Callable[..., None]
    ) -> Any:
        point = self.points.points[name]
        module = point.module(idx)

        def fired(args: Any, kwargs: Any, out: Any) -> Any:
            replaced = self._keep(name, store, args, kwargs, out)
            store[SEEN].add(name)
            if store[SEEN] >= self.block_needs[idx]:  # the block's last needed point
                try:
                    finish(idx, store)  # raises ForwardDone after the last block
                finally:
                    store.clear()
                    store.update({"idx": idx, "batch": store_batch, SEEN: set()})
            return replaced

        store_batch = store["batch"]
        if point.pre:
            return module.register_forward_pre_hook(
                lambda _m, args, kwargs: fired(args, kwargs, None), with_kwargs=True
            )
        return module.register_forward_hook(lambda _m, args, out: fired(args, {}, out))
