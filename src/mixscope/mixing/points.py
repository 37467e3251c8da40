"""Capture points: where each sits in one loaded model, and the weights it brings.

A *capture point* is a module of a block (found through the architecture adapter) whose
hook keeps what the measure groups read (mixing/capture.py), and the weights those tensors
are read with: the norm after the attention's residual sum comes with its γ and β, the
feed-forward's pre-activations with its projections and activation, the norm after the
FF's residual sum with its own. A block's params are the attention's own weights (W_O,
b_O, the norm inside the branch, the branch multiplier) plus what each point a selected
group reads brings, so the engine holds nothing point-specific: a new point is one entry
here and its ``_keep`` in capture.py.

Points, in the order their weights are read (a later one may read an earlier one's):

- ``block_input``: the block's input x (the residual stream), a forward pre-hook;
- ``values``: the value vectors ``x W_V + b_V`` (a slice of a fused projection);
- ``attention``: α — the full weights (eager) or the fast kernel's per-token weights;
- ``attn_out``: the output projection, ``Σ_j a_ij + b_O``;
- ``attn_norm``: the norm after the attention's residual sum (input z, output x̃); where
  no norm stands there (OLMo-2), the module that reads the sum (input z = output);
- ``parallel_mlp``: the MLP output of a parallel residual (the token's own term), added
  wherever ``attn_norm`` is needed on such a model;
- ``ff_in``: the feed-forward's input projection, its pre-activation ``W₁ y + b₁`` (the
  gate's, and then ``ff_up``, the up projection's, registered with it); in a block with
  experts, the router: each token's top-k gates and experts;
- ``ff_out``: the feed-forward's output ``FF(y)`` (the experts' weighted sum);
- ``ff_norm``: the norm after the feed-forward's residual sum (LN2 of a post-LN block; the
  next block's input norm, or the final norm, of a pre-LN one: its hook fires in the next
  block or after the last, and the block finishes then); where none stands (OLMo-2
  between blocks), the block's own output, read as the identity's input and output.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mixscope.errors import MixscopeError
from mixscope.mixing.block_tensors import BlockParams
from mixscope.mixing.block_weights import BlockWeights
from mixscope.models.loading import LoadedModel

#: the points every block registers: the attention block's own tensors (BlockTensors)
BASE = frozenset({"block_input", "values", "attention", "attn_out", "attn_norm"})


@dataclass(frozen=True)
class Point:
    """A module of block ``idx`` whose hook keeps what the groups read from it."""

    module: Callable[[int], Any]  # block index → the module
    pre: bool = False  # a forward pre-hook (with kwargs) instead of a forward hook
    #: adds the weights this point's tensors are read with to block ``idx``'s params
    weights: Callable[[int, BlockParams], None] | None = None


class ModelPoints:
    """The capture points of one loaded model, and each block's params for a set of them."""

    def __init__(self, loaded: LoadedModel, weights: BlockWeights) -> None:
        a = loaded.adapter
        self.adapter = a
        self.model = loaded.model
        self.weights = weights
        self.blocks = list(loaded.model.get_submodule(a.layers))
        blocks = self.blocks
        # where no norm follows the attention's residual sum (OLMo-2): the module reading it
        self.norm_is_identity = a.norm_after is None and not a.parallel_residual
        self.norms = self._attn_norms()
        self.points: dict[str, Point] = {
            "block_input": Point(lambda i: blocks[i], pre=True),
            "values": Point(lambda i: blocks[i].get_submodule(a.value)),
            "attention": Point(lambda i: blocks[i].get_submodule(a.attention)),
            "attn_out": Point(lambda i: blocks[i].get_submodule(a.out_proj)),
            "attn_norm": Point(lambda i: self.norms[i], self.norm_is_identity, self._norm),
            "parallel_mlp": Point(lambda i: blocks[i].get_submodule(a.mlp)),
            "ff_in": Point(self._ff_in_module, weights=self._ff),
            "ff_up": Point(lambda i: blocks[i].get_submodule(a.ff_up)),
            "ff_out": Point(self._ff_out_module),
            "ff_norm": Point(self._ff_norm_module, weights=self._ff_norm),
        }

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    def experts(self, idx: int) -> Any | None:
        """Block ``idx``'s experts module; None in a block without (a dense FF)."""
        return self._experts[idx]

    @functools.cached_property
    def _experts(self) -> list[Any | None]:
        path = self.adapter.moe_experts
        out: list[Any | None] = []
        for block in self.blocks:
            try:
                out.append(None if path is None else block.get_submodule(path))
            except AttributeError:  # Qwen3-MoE's mlp_only_layers: a dense FF
                out.append(None)
        return out

    def expand(self, needs: frozenset[str], idx: int | None = None) -> frozenset[str]:
        """``needs`` with the points that come with another on this model (block ``idx``'s,
        where given): a parallel residual's MLP output with the norm, a dense gated FF's up
        projection with its gate (a block with experts reads its router instead)."""
        a = self.adapter
        if "attn_norm" in needs and a.parallel_residual:
            needs = needs | {"parallel_mlp"}
        moe = idx is not None and self.experts(idx) is not None
        if "ff_in" in needs and a.ff_up and not moe:
            needs = needs | {"ff_up"}
        unknown = needs - set(self.points)
        if unknown:
            raise MixscopeError(f"unknown capture point {sorted(unknown)[0]!r}")
        return needs

    def params(self, idx: int, needs: frozenset[str], heads: int, kv_heads: int) -> BlockParams:
        """Block ``idx``'s params: the attention's own weights, then what each point in
        ``needs`` brings, in the points' order."""
        p = self.weights.attention(self.blocks[idx], heads=heads, kv_heads=kv_heads)
        for name, point in self.points.items():
            if name in needs and point.weights is not None:
                point.weights(idx, p)
        return p

    def _attn_norms(self) -> list[Any]:
        """The norm after each block's attention residual sum (see Adapter.parallel_residual);
        where none stands (OLMo-2), the module that reads the sum."""
        a, blocks = self.adapter, self.blocks
        if a.parallel_residual:
            if not (a.mlp and a.next_norm and a.final_norm):
                raise MixscopeError(f"adapter {a.family}: parallel residual needs mlp/norms")
            norms = [b.get_submodule(a.next_norm) for b in blocks[1:]]
            return [*norms, self.model.get_submodule(a.final_norm)]
        if self.norm_is_identity:
            if not a.mlp:
                raise MixscopeError(f"adapter {a.family}: no norm after and no mlp")
            return [b.get_submodule(a.mlp) for b in blocks]
        assert a.norm_after is not None
        return [b.get_submodule(a.norm_after) for b in blocks]

    @functools.cached_property
    def ff_norms(self) -> list[Any | None]:
        """The norm after each block's feed-forward residual sum: LN2 of a post-LN block,
        the next block's input norm (the final norm after the last) of a pre-LN one; None
        where no norm stands there (OLMo-2 between blocks: the identity). Looked up only
        where a selected group reads the point."""
        a = self.adapter
        if a.ff_norm is not None:
            return [b.get_submodule(a.ff_norm) for b in self.blocks]
        if not a.final_norm:
            raise MixscopeError(f"adapter {a.family}: no norm after the feed-forward")
        try:
            final = self.model.get_submodule(a.final_norm)
        except AttributeError:  # OPT without a final norm (_remove_final_layer_norm)
            raise MixscopeError(
                f"this {a.family} model has no norm after its last block: no ff group"
            ) from None
        after = [b.get_submodule(a.next_norm) if a.next_norm else None for b in self.blocks[1:]]
        return [*after, final]

    def _ff_in_module(self, idx: int) -> Any:
        """The ``ff_in`` hook's module: the input projection, or the router of experts."""
        a = self.adapter
        if self.experts(idx) is not None:
            assert a.moe_router is not None
            return self.blocks[idx].get_submodule(a.moe_router)
        assert a.ff_in is not None
        return self.blocks[idx].get_submodule(a.ff_in)

    def _ff_out_module(self, idx: int) -> Any:
        """The ``ff_out`` hook's module: the output projection, or the experts' sum."""
        experts = self.experts(idx)
        if experts is not None:
            return experts
        assert self.adapter.ff_out is not None
        return self.blocks[idx].get_submodule(self.adapter.ff_out)

    def _ff_norm_module(self, idx: int) -> Any:
        """The ``ff_norm`` hook's module: the norm, or the block itself where none stands."""
        norm = self.ff_norms[idx]
        return self.blocks[idx] if norm is None else norm

    def _norm(self, idx: int, p: BlockParams) -> None:
        p.norm = None if self.norm_is_identity else self.weights.norm_of(self.norms[idx], p)

    def _ff(self, idx: int, p: BlockParams) -> None:
        experts = self.experts(idx)
        if experts is not None:
            self.weights.add_moe(self.blocks[idx], experts, p)
        else:
            self.weights.add_ff(self.blocks[idx], p)

    def _ff_norm(self, idx: int, p: BlockParams) -> None:
        norm = self.ff_norms[idx]
        p.ff_norm = None if norm is None else self.weights.norm_of(norm, p)
