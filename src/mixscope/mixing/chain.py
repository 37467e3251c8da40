"""The block's algebra, in one place: per-token parts propagated through the block's chain.

docs/method.md §1, §5, §6. A block is a chain per half, attention then feed-forward:

    branch → optional norm inside the branch → residual add → optional norm the next stage reads

Every vector along it is, per token i, a sum of parts by source: the token's *own* part,
the *context* (the sum over the other tokens j ≠ i) and a *bias* part that belongs to no
token (b_O, a norm's β, the FF's biases). Each step is linear in the parts given the real
per-token scalars it holds fixed (a norm's s(v_i) of its real input), so three parts per
token carry every scope, never a per-pair tensor. This module applies the steps; the
adapter says which steps a family has (norm positions and kinds, γ offsets: engine.py
builds them into :class:`~mixscope.mixing.block_tensors.BlockParams`). Groups read the
named scopes of :class:`BlockChain` and re-derive nothing:

- ``attn``: the attention branch, a_ij = Σ_h α^h_ij f^h(x_j) (own a_ii, bias b_O);
- ``attnres``: what the residual sums: the branch after the norm inside it (Gemma, OLMo-2:
  ``post_attention_layernorm``; none elsewhere) plus δ_ij x_i;
- ``norm_input``: ``attnres`` plus δ_ij m_i, a parallel residual's MLP output (the token's
  own): the real input z of the norm that follows;
- ``attnresln``: what the next stage reads, ``norm_input`` through that norm (BERT's LN1;
  Llama's and Gemma's FF input norm; the next block's input norm with a parallel residual),
  or ``norm_input`` itself where none stands (OLMo-2);
- ``ff_input`` and ``ff_stream``: what the FF reads and the stream its residual adds to;
  :func:`ff_residual` takes the FF's parts (the ``ff`` group splits them, mixing/ff_parts.py)
  through the norm inside the FF branch and adds the stream.

A norm's 1/s is carried as a deferred per-token ``scale`` (the ratios do not need it, the
residual add and the exactness identities apply it), so the hot path costs what the
groups' own arithmetic did before this module existed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import torch

from mixscope.mixing.attention_parts import norm_ratio, self_attention_vector
from mixscope.mixing.block_tensors import (
    BlockParams,
    BlockTensors,
    NormParams,
    centre,
    centre_,
    norm_scale,
)


def _norm(v: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(v, dim=-1)


def norm_split(v: torch.Tensor, n: NormParams) -> torch.Tensor:
    """γ ⊙ centre(v): a norm's split of one part, without its 1/s (one new tensor)."""
    if n.norm_kind == "rms":  # centre is the identity: v itself must not be changed
        return v * n.gamma
    return centre(v, n.norm_kind).mul_(n.gamma)


def _split_(v: torch.Tensor, n: NormParams) -> torch.Tensor:
    """:func:`norm_split` in place (``v`` is overwritten and returned)."""
    return centre_(v, n.norm_kind).mul_(n.gamma)


@dataclass(frozen=True)
class Parts:
    """One per-token vector split by source: ``(own + context + bias) · scale + shift``.

    Shapes ``[..., hidden]`` (``[batch, seq, hidden]`` or flattened ``[tokens, hidden]``);
    ``bias`` may be ``[hidden]`` while it is the same for every token; ``scale`` is
    ``[..., 1]`` (a norm's 1/s, deferred) and ``shift`` ``[hidden]`` (a norm's β), None for
    1 and 0 (``scale`` may be a function that computes it when first needed). ``context``
    is None where no other token contributes (a parallel residual's FF reads x_i alone)."""

    own: torch.Tensor
    context: torch.Tensor | None
    bias: torch.Tensor
    #: a tensor, or a function giving it on first need: a ratio never needs the scale, so
    #: the real input's s (a reduction over [..., hidden]) is taken only where applied
    scale: torch.Tensor | Callable[[], torch.Tensor] | None = None
    shift: torch.Tensor | None = None
    #: ‖context‖ per token once taken, shared by the scopes that keep the same context
    #: tensor (the residual add changes only the own part)
    norms: dict[str, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)

    def context_norm(self) -> torch.Tensor:
        assert self.context is not None
        if "context" not in self.norms:
            self.norms["context"] = _norm(self.context)
        return self.norms["context"]

    def ratio(self) -> torch.Tensor:
        """‖context‖ / (‖context‖ + ‖own‖) per token (the scale cancels): [...]; 0 without
        context."""
        n_own = _norm(self.own)
        if self.context is None:
            return torch.zeros_like(n_own)
        return norm_ratio(self.context_norm(), n_own)

    def ratio_after(self, n: NormParams) -> torch.Tensor:
        """:meth:`ratio` of the parts through the norm ``n`` (its 1/s cancels too)."""
        if self.context is None:
            return torch.zeros_like(_norm(self.own))
        return norm_ratio(_norm(norm_split(self.context, n)), _norm(norm_split(self.own, n)))

    def scale_tensor(self) -> torch.Tensor | None:
        """The deferred per-token factor [..., 1], computed now if it was deferred."""
        s = self.scale
        return s() if callable(s) else s

    def applied(self) -> Parts:
        """The same vector with scale and shift applied to the parts (bias per token)."""
        if self.scale is None and self.shift is None:
            return self
        own, context, bias, s = self.own, self.context, self.bias, self.scale_tensor()
        if s is not None:
            own, bias = own * s, bias * s
            context = None if context is None else context * s
        if self.shift is not None:
            bias = bias + self.shift
        return Parts(own, context, bias)

    def total(self) -> torch.Tensor:
        """The vector itself: every part summed, scaled and shifted: [..., hidden]."""
        p = self.applied()
        out = p.own + p.bias
        return out if p.context is None else out + p.context

    def through_norm(
        self, n: NormParams | None, s: torch.Tensor | Callable[[], torch.Tensor]
    ) -> Parts:
        """The distributive split of ``N(v) = γ ⊙ centre(v) / s + β`` with ``s`` [..., 1]
        the real input's (held fixed; or a function computing it when first needed): each
        part γ ⊙ centre(part), 1/s deferred, β the shift. ``n`` None: the identity."""
        if n is None:
            return self
        p = self.applied()
        context = None if p.context is None else norm_split(p.context, n)
        inverse = (lambda: s().reciprocal()) if callable(s) else s.reciprocal()
        return Parts(norm_split(p.own, n), context, norm_split(p.bias, n), inverse, n.beta)

    def times(self, c: float) -> Parts:
        """Every part scaled by the constant ``c`` (Granite's residual multiplier)."""
        if c == 1.0:
            return self
        p = self.applied()
        context = None if p.context is None else p.context * c
        return Parts(p.own * c, context, p.bias * c)

    def plus_own(self, v: torch.Tensor) -> Parts:
        """The residual add of the token's own vector ``v`` [..., hidden] (x_i; m_i)."""
        p = self.applied()
        shared = self.norms if p is self else {}  # the same context tensor: its norm too
        return Parts(p.own + v, p.context, p.bias, norms=shared)

    def plus(self, other: Parts) -> Parts:
        """The sum of two split vectors (a residual stream and a branch's output)."""
        a, b = self.applied(), other.applied()
        if a.context is None or b.context is None:
            context = a.context if b.context is None else b.context
        else:
            context = a.context + b.context
        return Parts(a.own + b.own, context, a.bias + b.bias)

    def rows(self, start: int, stop: int) -> Parts:
        """Tokens ``start:stop`` of the flattened parts ([tokens, ·] each)."""

        def cut(v: torch.Tensor | None, per_token: bool = True) -> torch.Tensor | None:
            if v is None or (not per_token and v.dim() == 1):
                return v
            return v.reshape(-1, v.shape[-1])[start:stop]

        context = cut(self.context)
        return Parts(
            cut(self.own),  # type: ignore[arg-type]
            context,
            cut(self.bias, per_token=False),  # type: ignore[arg-type]
            cut(self.scale_tensor()),
            self.shift,
        )


class BlockChain:
    """One block's scopes, each computed once on first use and shared by the block's
    groups (:class:`Parts`).

    ``attn_sum``: Σ_j a_ij rebuilt from the full α and the per-head vectors, for the
    exactness identities (mixing/exactness.py); by default the model's own output
    projection minus b_O, which costs nothing.
    """

    def __init__(
        self, t: BlockTensors, p: BlockParams, attn_sum: torch.Tensor | None = None
    ) -> None:
        self.t, self.p = t, p
        self._attn_sum = attn_sum

    def attention_ratios(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ratios of ``attn``, ``attnres`` and ``attnresln`` per token, [batch, seq] each.

        Where no group has asked for these scopes' vectors, one pass down the chain on
        private temporaries, each step in place (the paper group's hot path: two new
        [batch, seq, hidden] tensors per block, three with a norm inside the branch);
        otherwise from the cached scopes. Both give the same bits: the same operations in
        the same order (tests/test_measure_groups.py)."""
        p, t = self.p, self.t
        if {"attn", "attnres", "norm_input", "attnresln"} & set(vars(self)):
            ln = self.attnresln
            return self.attn.ratio(), self.attnres.ratio(), ln.ratio()
        context = self._attn_context()  # private: changed in place below
        n_context = _norm(context)
        ratios = [norm_ratio(n_context, _norm(self.a_self))]
        nb, m = p.attn_branch_norm, p.branch_scale
        own = self.a_self  # not changed: the first step below makes a private copy
        if nb is not None:  # the norm inside the branch, the real output's s: ã_ij
            inverse = norm_scale(t.attn_out, nb).reciprocal()  # [batch, seq, 1]
            own = norm_split(own, nb).mul_(inverse)
            _split_(context, nb).mul_(inverse)
        if m != 1.0:  # Granite's multiplier
            own = torch.mul(own, m) if own is self.a_self else own.mul_(m)
            context.mul_(m)
        own = torch.add(own, t.x) if own is self.a_self else own.add_(t.x)  # r_ii
        if nb is not None or m != 1.0:
            n_context = _norm(context)
        ratios.append(norm_ratio(n_context, _norm(own)))
        if t.extra is not None:  # a parallel residual's MLP output: the token's own
            own.add_(t.extra)
        n = p.norm
        if n is None:  # no norm after the sum: the next stage reads it as it is
            ratios.append(norm_ratio(n_context, _norm(own)))
        else:  # γ ⊙ centre(·), in place on the temporaries (the shared 1/s cancels)
            _split_(context, n)
            _split_(own, n)
            ratios.append(norm_ratio(_norm(context), _norm(own)))
        return ratios[0], ratios[1], ratios[2]

    def _attn_context(self) -> torch.Tensor:
        """Σ_{j≠i} a_ij, a new tensor: the attention output − b_O − a_ii (or the sum
        rebuilt from α, for the exactness identities)."""
        if self._attn_sum is not None:
            return self._attn_sum - self.a_self
        return torch.sub(self.t.attn_out, self.p.b_out).sub_(self.a_self)

    @cached_property
    def a_self(self) -> torch.Tensor:
        """a_ii = Σ_h α^h_ii f^h(x_i): [batch, seq, hidden]."""
        return self_attention_vector(self.t, self.p)

    @cached_property
    def attn(self) -> Parts:
        """The attention branch: own a_ii, context Σ_{j≠i} a_ij, bias b_O."""
        return Parts(self.a_self, self._attn_context(), self.p.b_out)

    @cached_property
    def branch(self) -> Parts:
        """The attention branch after the norm inside it (s of the real branch output;
        the branch itself where none stands), times the branch's multiplier."""
        n = self.p.attn_branch_norm
        parts = (
            self.attn if n is None else self.attn.through_norm(n, norm_scale(self.t.attn_out, n))
        )
        return parts.times(self.p.branch_scale)

    @cached_property
    def attnres(self) -> Parts:
        """What the residual sums: the branch plus δ_ij x_i."""
        return self.branch.plus_own(self.t.x)

    @cached_property
    def norm_input(self) -> Parts:
        """The real input z of the norm that follows: ``attnres`` (+ δ_ij m_i)."""
        return self.attnres if self.t.extra is None else self.attnres.plus_own(self.t.extra)

    @cached_property
    def attnresln(self) -> Parts:
        """What the next stage reads: the norm after the residual sum applied to its
        parts (s of the real z), or ``norm_input`` where no norm stands there."""
        n = self.p.norm
        if n is None:
            return self.norm_input
        return self.norm_input.through_norm(n, lambda: self.s_norm)

    @cached_property
    def s_norm(self) -> torch.Tensor:
        """s(z_i) of the norm after the residual sum: [batch, seq, 1] (taken once, where a
        scope's real vector needs it: a ratio does not)."""
        assert self.p.norm is not None
        return norm_scale(self.t.z, self.p.norm)

    # -- the feed-forward half ------------------------------------------------------------

    @cached_property
    def ff_input(self) -> Parts:
        """What the FF reads, split: ``attnresln`` (a post-LN block's LN1 output; a pre-LN
        one's FF input norm; the residual sum h itself where no norm stands); with a
        parallel residual N_in(x_i), the token's own alone (and β_in)."""
        ff = self.p.ff
        if self.p.ff_placement != "parallel":
            return self.attnresln
        assert ff is not None
        n = ff.input_norm
        assert n is not None
        x = self.t.x
        zeros = torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device)
        return Parts(x, None, zeros).through_norm(n, norm_scale(x, n))

    @cached_property
    def ff_stream(self) -> Parts:
        """The stream the FF's residual adds to: the FF input itself after a post-LN
        block's LN1, else the attention half's residual sum (``attnres``: x + branch)."""
        return self.attnresln if self.p.ff_placement == "post" else self.attnres


def ff_residual(p: BlockParams, stream: Parts, ff: Parts, ff_out: torch.Tensor) -> Parts:
    """``ffres`` of some tokens: the FF's parts through the norm inside the FF branch (s
    of the real FF output ``ff_out``; none in most families), times the branch's
    multiplier (Granite), plus the residual
    ``stream`` (the same tokens of :attr:`BlockChain.ff_stream`). The norm after it is
    ``p.ff_norm`` (the identity where None): :meth:`Parts.ratio_after` for a ratio,
    :meth:`Parts.through_norm` with its real input's s for the exact vector."""
    n = p.ff_branch_norm
    if n is not None:
        ff = ff.through_norm(n, norm_scale(ff_out, n))
    return stream.plus(ff.times(p.branch_scale))
