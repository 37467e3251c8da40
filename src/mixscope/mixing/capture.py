"""Forward hooks that capture, per block, what the selected measure groups need.

A *capture point* is a module of the block (found through the architecture adapter) and
what its hook keeps; a batch registers the points of the union of the groups' needs, for
one forward pass, inside :func:`hooks` — a context manager, so no hook is ever left on a
long-lived actor's model when registration or the forward fails. When a block's last
needed point has fired, ``finish(idx, store)`` computes its measures and the store is
dropped: memory stays at what the forward needs plus O(batch · seq) per layer. When the
last block has finished, the forward pass stops (:class:`ForwardDone`): what follows it
is never read.

Points (``POINTS``):

- ``block_input``: the block's input x (the residual stream), a forward pre-hook;
- ``values``: the value vectors ``x W_V + b_V`` (a slice of a fused projection);
- ``attention``: α — the full weights (eager) or the fast kernel's per-token weights —
  kept as α_ii and α_i0 (and α whole where a per-pair map or the exactness check reads it);
  padded query rows zeroed (see :func:`_zero_padded_rows`);
- ``attn_out``: the output projection, ``Σ_j a_ij + b_O``;
- ``attn_norm``: the norm after the attention's residual sum (input z, output x̃); where
  no norm stands there (OLMo-2), the module that reads the sum (input z = output);
- ``parallel_mlp``: the MLP output of a parallel residual (the token's own term), added
  wherever ``attn_norm`` is needed on such a model;
- ``ff_in``: the feed-forward's input projection, its pre-activation ``W₁ y + b₁`` (the
  gate's, and then ``ff_up``, the up projection's, registered with it);
- ``ff_out``: the feed-forward's output ``FF(y)``;
- ``ff_norm``: the norm after the feed-forward's residual sum (LN2 of a post-LN block; the
  next block's input norm, or the final norm, of a pre-LN one: its hook fires in the next
  block or after the last, and the block finishes then); where none stands (OLMo-2
  between blocks), the block's own output, read as the identity's input and output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mixscope.errors import MixscopeError
from mixscope.mixing.block_tensors import select_values
from mixscope.mixing.fast_attention import FastWeights


class ForwardDone(Exception):
    """Raised by the hook that finishes the last block: nothing after it is read (the last
    feed-forward of a post-LN model, a pooler), so the forward pass ends there; the engine
    catches it. Not an error: the forward's early end."""


#: the points every block registers: the attention block's own tensors (BlockTensors)
BASE = frozenset({"block_input", "values", "attention", "attn_out", "attn_norm"})
#: store key under which the names of the points that have fired are kept
SEEN = "_seen"


@dataclass(frozen=True)
class Point:
    """A module of block ``idx`` and a hook keeping what the groups read from it."""

    #: the module, or None where this model has no such module
    module: Callable[[Any, int], Any]
    pre: bool  # a forward pre-hook (with kwargs) instead of a forward hook


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
        self, engine: Any, needs: frozenset[str], *, full_alpha: bool, first: bool = True
    ) -> None:
        self.engine = engine
        a = engine.loaded.adapter
        if "attn_norm" in needs and a.parallel_residual:
            needs = needs | {"parallel_mlp"}
        if "ff_in" in needs and a.ff_up:  # a gated FF: the up projection's too
            needs = needs | {"ff_up"}
        self.needs = needs
        self.full_alpha = full_alpha  # keep α whole (per-pair maps, the exactness check)
        self.first = first  # keep α_i0 (a selected group reads it)
        blocks = engine.blocks
        self.points = {
            "block_input": Point(lambda _e, i: blocks[i], pre=True),
            "values": Point(lambda _e, i: blocks[i].get_submodule(a.value), False),
            "attention": Point(lambda _e, i: blocks[i].get_submodule(a.attention), False),
            "attn_out": Point(lambda _e, i: blocks[i].get_submodule(a.out_proj), False),
            # where no norm stands (OLMo-2) the module that reads the sum: before it runs
            "attn_norm": Point(lambda e, i: e.norms[i], pre=engine.norm_is_identity),
            "parallel_mlp": Point(lambda _e, i: blocks[i].get_submodule(a.mlp), False),
            "ff_in": Point(lambda _e, i: blocks[i].get_submodule(a.ff_in), False),
            "ff_up": Point(lambda _e, i: blocks[i].get_submodule(a.ff_up), False),
            "ff_out": Point(lambda _e, i: blocks[i].get_submodule(a.ff_out), False),
            # where no norm follows the FF's residual sum (OLMo-2), the block's own output
            "ff_norm": Point(
                lambda e, i: blocks[i] if e.ff_norms[i] is None else e.ff_norms[i], False
            ),
        }
        unknown = needs - set(self.points)
        if unknown:
            raise MixscopeError(f"unknown capture point {sorted(unknown)[0]!r}")

    def _keep(self, name: str, store: dict[str, Any], args: Any, kwargs: Any, out: Any) -> Any:
        """Keep what point ``name`` gives; returns a replacement output or None."""
        e = self.engine
        sd = e.stat_dtype
        if name == "block_input":
            store["x"] = (args[0] if args else kwargs["hidden_states"]).to(sd)
        elif name == "values":
            p = e.params[store["idx"]]
            layout = e.loaded.adapter.value_layout
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
            y = z if e.norm_is_identity else out
            store["y"] = y.reshape(x_shape).to(sd)
        elif name == "parallel_mlp":
            store["extra"] = out.to(sd)
        elif name == "ff_norm":
            if e.ff_norms[store["idx"]] is None:  # the block's output: the identity's in = out
                v = out if isinstance(out, torch.Tensor) else out[0]
                store["ff_norm_in"] = store["ff_norm_out"] = v.to(sd)
            else:
                store["ff_norm_in"] = args[0].reshape(self._shape(store, out)).to(sd)
                store["ff_norm_out"] = out.reshape(self._shape(store, out)).to(sd)
        elif name == "ff_in" and e.loaded.adapter.ff_fused_gate_up:  # Phi-3: [gate | up]
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
        else:  # eager: α [batch, heads, seq, seq]
            store["alpha_self"] = torch.diagonal(weights, dim1=-2, dim2=-1)
            if self.first:
                store["alpha_first"] = _first_column(weights, batch.first)
            if self.full_alpha:
                store["alpha"] = weights.to(self.engine.stat_dtype)
        if not bool(batch.valid.all()):
            return _zero_padded_rows(out, batch.valid)
        return None

    @contextlib.contextmanager
    def hooks(self, batch: Any, finish: Callable[[int, dict[str, Any]], None]) -> Iterator[None]:
        """Hooks on every block for one forward pass; all removed on the way out."""
        handles = []
        remaining = [self.engine.num_layers]  # blocks not yet finished

        def finish_block(idx: int, store: dict[str, Any]) -> None:
            finish(idx, store)
            remaining[0] -= 1
            if remaining[0] == 0:
                raise ForwardDone

        try:
            for idx in range(self.engine.num_layers):
                store: dict[str, Any] = {"idx": idx, "batch": batch, SEEN: set()}
                for name in sorted(self.needs):
                    handles.append(self._register(name, idx, store, finish_block))
            yield
        finally:
            for h in handles:
                h.remove()

    def _register(
        self, name: str, idx: int, store: dict[str, Any], finish: Callable[..., None]
    ) -> Any:
        point = self.points[name]
        module = point.module(self.engine, idx)

        def fired(args: Any, kwargs: Any, out: Any) -> Any:
            replaced = self._keep(name, store, args, kwargs, out)
            store[SEEN].add(name)
            if store[SEEN] >= self.needs:  # the block's last needed point
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
