"""The attention weights of a block of query rows, without ever holding the [seq, seq] matrix.

A group that reads every pair's weight (the ``distance`` group, docs/method.md §5e) walks the
query rows block by block. On the eager path the rows are a slice of the weights the model
returned. On the fast path the kernel returned only the output and each row's log-sum-exp,
so the rows are recomputed from the scores:

    α^h_ij = exp(s_ij + m_ij − LSE_i),   s_ij = scale · q_i · k_j   (capped: c · tanh(s / c))

with the kernel's own LSE (the learned sinks' LSE' where the family has them, so a row sums
to 1 − π as on eager). One block costs [batch, heads, rows, seq]: memory O(seq · rows).
:class:`ScoreInputs` is what the fast attention function keeps for this (q, k, the mask,
LSE), held only until the block's measures are computed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

#: score elements ([batch, heads, rows, seq]) per block of rows: 2^24 (64 MiB in float32)
BLOCK_SCORES = 1 << 24


@dataclass(frozen=True)
class ScoreInputs:
    """What the fast kernel saw, to recompute any block of α's rows (fast_attention.py)."""

    query: torch.Tensor  # [batch, heads, seq, head_dim]
    key: torch.Tensor  # [batch, kv_heads, seq, head_dim]
    mask: torch.Tensor | None  # bool keep-mask or additive, [batch | 1, 1 | heads, seq, seq]
    lse: torch.Tensor  # [batch, heads, seq]: LSE_i (LSE'_i with learned sinks)
    scale: float
    causal: bool  # no mask given, keys after the query masked (the kernel's is_causal)
    softcap: float | None = None  # Gemma-2's score cap c

    def rows(self, start: int, stop: int, dtype: torch.dtype) -> torch.Tensor:
        """α of query rows ``start:stop``: [batch, heads, rows, seq] in ``dtype``."""
        q = self.query[:, :, start:stop].to(dtype)  # [batch, heads, rows, head_dim]
        k = self.key.to(dtype)  # [batch, kv_heads, seq, head_dim]
        batch, heads, rows, dim = q.shape
        kv, seq = k.shape[1], k.shape[2]
        grouped = q.reshape(batch, kv, heads // kv, rows, dim)  # heads grouped by kv head
        s = (grouped @ k.unsqueeze(2).transpose(-1, -2)).reshape(batch, heads, rows, seq)
        s.mul_(self.scale)  # [batch, heads, rows, seq]
        if self.softcap is not None:
            s = s.div_(self.softcap).tanh_().mul_(self.softcap)
        if self.mask is not None:
            m = self.mask[..., start:stop, :]
            if m.dtype == torch.bool:
                s.masked_fill_(~m, float("-inf"))
            else:
                s.add_(m.to(dtype))
        if self.causal:
            i = torch.arange(start, stop, device=s.device)[:, None]
            j = torch.arange(seq, device=s.device)[None, :]
            s.masked_fill_(j > i, float("-inf"))
        lse = self.lse[:, :, start:stop].to(dtype).unsqueeze(-1)  # [batch, heads, rows, 1]
        # a fully masked row (a padded query) has no weights, whatever its LSE says
        s.sub_(torch.where(torch.isfinite(lse), lse, float("inf"))).exp_()
        return s

    def source_blocks(
        self, rows: int, dtype: torch.dtype, reuse: bool = False
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """(start, :meth:`sources` of rows ``start:start + rows``) over every query row, the
        operands prepared once. ``reuse``: every block written into one buffer (a block is
        overwritten by the next: for a caller done with it before asking for the next), no
        fresh multi-MiB allocation per block; and per block what :meth:`score_bound`
        proves used: no clamp before the exp where every score stays above the floor, the
        causal block's later keys zeroed by a multiply (~7x faster than ``masked_fill_`` on
        the CPU) where no exp can overflow (inf · 0 would be NaN)."""
        seq = self.query.shape[2]
        ops = self.operands(dtype)
        starts = range(0, seq, rows)
        flags = [(True, False)] * len(starts)
        buf = None
        if reuse:
            batch, heads = self.query.shape[:2]
            size = batch * seq * heads * min(rows, seq)  # the largest block's α
            buf = torch.empty(size, dtype=dtype, device=ops[0].device)
            bound = self.score_bound(ops)  # [2, seq]
            per_block = torch.stack([bound[:, i : i + rows].amax(dim=1) for i in starts])
            floor = _floor(dtype, buf.device)
            top = math.log(torch.finfo(dtype).max) - 1.0  # exp overflows past log(max)
            flags = [
                (floor is not None and low >= -(floor + 1.0), high < top)  # 1: rounding margin
                for low, high in per_block.tolist()
            ]
        for start, (clamp, finite) in zip(starts, flags, strict=True):
            stop = min(seq, start + rows)
            yield start, self.sources(start, stop, dtype, ops, buf, clamp, finite)

    def score_bound(self, ops: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Per query row, bounds on its exponents e_ij = s_ij − LSE_i over every head and
        source: [2, seq], row 0 an upper bound on −e_ij, row 1 one on e_ij.

        |s_ij| ≤ scale · ‖q_i‖ · max_j ‖k_j‖ (Cauchy–Schwarz); +inf (both) with a score cap
        or an additive mask (not bounded here); a row with no key (LSE +inf) has −e +inf."""
        q, k, lse = ops
        seq = q.shape[2]
        if self.softcap is not None or (self.mask is not None and self.mask.dtype != torch.bool):
            return torch.full((2, seq), float("inf"), device=q.device)
        dim = self.key.shape[-1]
        q_norm = q[..., :dim].norm(dim=-1)  # [batch, heads, seq] (q already scaled)
        reach = q_norm * k[..., :dim].norm(dim=-1).amax()  # [batch, heads, seq]: max |s_ij|
        return torch.stack([(reach + lse).amax(dim=(0, 1)), (reach - lse).amax(dim=(0, 1))])

    def operands(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What :meth:`sources` multiplies, for every row: (q', k', LSE) with q' = (scale ·
        q_i, −LSE_i) and k' = (k_j, 1) without a score cap (scale · q_i and k_j with one),
        LSE +inf where a row has no key (a padded query: no weights, whatever LSE says)."""
        lse = self.lse.to(dtype)  # [batch, heads, seq]
        lse = torch.where(torch.isfinite(lse), lse, float("inf"))
        q = self.query.to(dtype) * self.scale  # [batch, heads, seq, head_dim]
        k = self.key.to(dtype)  # [batch, kv_heads, seq, head_dim]
        if self.softcap is None:
            q = torch.cat([q, -lse.unsqueeze(-1)], dim=-1)
            k = torch.cat([k, torch.ones_like(k[..., :1])], dim=-1)
        return q, k, lse

    def sources(
        self,
        start: int,
        stop: int,
        dtype: torch.dtype,
        ops: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        out: torch.Tensor | None = None,
        clamp: bool = True,
        finite: bool = False,
    ) -> torch.Tensor:
        """α of query rows ``start:stop`` source-major, for the sources that can have a
        weight (``sources`` = :meth:`reach`): [batch, sources, heads, rows].

        The same numbers as :meth:`rows` transposed (α^h_ij at [b, j, h, i − start]) in
        fewer passes over the block: −LSE_i rides in the score matmul as one more
        dimension (q' = (scale · q_i, −LSE_i), k' = (k_j, 1); without a score cap), the
        matmul writes straight into the source-major layout (one [sources, heads per kv
        head · rows] product per key/value head into a strided view: no transpose pass; an
        exp into a transposed view was ~5x a contiguous one on the CPU), the clamp and the
        exp run in place on contiguous memory, and a causal block's later keys are never
        scored. ``ops``: :meth:`operands`, where a caller has them; ``out``: a flat buffer
        to write the block into (its leading elements), where it is large enough;
        ``clamp=False``: no clamp before the exp (the caller has bounded the scores above
        the floor: :meth:`score_bound`); ``finite``: no exp overflows (bounded too), so a
        causal block's later keys are zeroed by a multiply."""
        cols = self.reach(start, stop)
        q_all, k_all, lse_all = self.operands(dtype) if ops is None else ops
        q = q_all[:, :, start:stop]  # [batch, heads, rows, head_dim (+ 1)]
        k = k_all[:, :, :cols]  # [batch, kv_heads, sources, head_dim (+ 1)]
        batch, heads, rows, dim = q.shape
        kv = k.shape[1]
        group = heads // kv
        size = batch * cols * heads * rows
        if out is not None and out.numel() >= size:
            a = out[:size].view(batch, cols, heads, rows)
        else:
            a = torch.empty(batch, cols, heads, rows, dtype=dtype, device=q.device)
        by_kv = a.view(batch, cols, kv, group * rows).transpose(1, 2)  # [b, kv, j, g · rows]
        torch.matmul(k, q.reshape(batch, kv, group * rows, dim).transpose(-1, -2), out=by_kv)
        if self.softcap is not None:
            a.div_(self.softcap).tanh_().mul_(self.softcap)
            a.sub_(lse_all[:, None, :, start:stop])  # [batch, 1, heads, rows]
        mask = None
        if self.mask is not None:
            m = self.mask[..., start:stop, :cols]  # [b | 1, 1 | heads, rows, sources]
            m = m.permute(0, 3, 1, 2)  # [b | 1, sources, 1 | heads, rows]
            if m.dtype == torch.bool:
                mask = ~m
            else:
                a.add_(m.to(dtype))
                mask = torch.isneginf(m)
        floor = _floor(dtype, a.device)
        if floor is not None and clamp:  # no exp below it: see _floor
            a.clamp_min_(floor)
        a.exp_()  # [batch, sources, heads, rows]
        # masked weights exactly 0 (after the exp: exp(−inf) is slow on the CPU)
        if mask is not None:
            a.masked_fill_(mask, 0.0)
        if self.causal and stop - start > 1:  # keys after the query, within the block
            if finite:  # exact: x · 1 = x, x · 0 = 0 for finite x
                a[:, start:stop].mul_(_earlier(stop - start, dtype, a.device))
            else:
                a[:, start:stop].masked_fill_(_later(stop - start, a.device), 0.0)
        return a

    def reach(self, start: int, stop: int) -> int:
        """How many leading sources can have a weight for query rows ``start:stop``: the
        block's last row + 1 when causal, the last key a boolean mask keeps, else all."""
        seq = self.key.shape[2]
        if self.causal:
            return stop
        if self.mask is not None and self.mask.dtype == torch.bool:
            kept = self.mask[..., start:stop, :].flatten(0, -2).any(dim=0).nonzero()
            return int(kept[-1, 0]) + 1 if len(kept) else 1
        return seq


@functools.lru_cache(maxsize=8)
def _later(rows: int, device: torch.device) -> torch.Tensor:
    """[rows (j), 1, rows (i)]: j > i, a causal block's keys after its query."""
    i = torch.arange(rows, device=device)
    return (i[:, None] > i[None, :])[:, None, :]


@functools.lru_cache(maxsize=8)
def _earlier(rows: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[rows (j), 1, rows (i)] in ``dtype``: 1 where j ≤ i, 0 for a causal block's later keys."""
    return (~_later(rows, device)).to(dtype)


def _floor(dtype: torch.dtype, device: torch.device) -> float | None:
    """The least log-weight on the CPU: log(tiny) / 3 (float32: α ≥ 2e-13, float64:
    α ≥ 3e-103), None elsewhere (no slow paths to avoid).

    On the CPU, exp of −inf or of anything below about −87 (float32) takes a slow path
    (50–100x: 4x the exp of MiniLM's real attention), and subnormal numbers cost ~100
    cycles in every later multiply (the pair matmul 50x, the squares of the norms).
    Scores clamped at the floor before the exp keep every weight and every square of
    ‖L_jᵀ α_ij‖'s parts normal; masked weights are set to exactly 0 after the exp. A
    weight below exp(floor) is raised to it: at most seq · 2e-13 of a row's weight
    (float32), far below the 1e-5 the measures are held to."""
    if device.type != "cpu" or dtype not in (torch.float32, torch.float64):
        return None
    return math.log(torch.finfo(dtype).tiny) / 3


def block_rows(batch: int, heads: int, seq: int, budget: int = BLOCK_SCORES) -> int:
    """Query rows per block so that one block of weights holds about ``budget`` elements."""
    return max(1, min(seq, budget // max(1, batch * heads * seq)))


def alpha_rows(
    full: torch.Tensor | None, scores: ScoreInputs | None, start: int, stop: int, dtype: torch.dtype
) -> torch.Tensor:
    """α of query rows ``start:stop``, [batch, heads, rows, seq]: a slice of the eager
    weights ``full`` where the block has them, else recomputed from ``scores``."""
    if full is not None:
        return full[:, :, start:stop].to(dtype)
    if scores is None:
        raise ValueError("no attention weights: neither the eager weights nor the scores")
    return scores.rows(start, stop, dtype)


def alpha_sources(
    full: torch.Tensor | None, scores: ScoreInputs | None, start: int, stop: int, dtype: torch.dtype
) -> torch.Tensor:
    """α of query rows ``start:stop`` source-major, [batch, sources, heads, rows], for
    the leading sources that can have a weight (a causal block's later keys left out):
    from the eager weights ``full`` (transposed) where the block has them, else
    recomputed."""
    if full is not None:
        cols = alpha_reach(full, None, start, stop)
        src = full[:, :, start:stop, :cols].permute(0, 3, 1, 2)  # [batch, sources, heads, rows]
        out = src.to(dtype, memory_format=torch.contiguous_format)
        floor = _floor(dtype, out.device)
        if floor is not None:  # no subnormal weights into the pair matmul (_floor)
            torch.nn.functional.threshold(out, math.exp(floor), 0.0, inplace=True)
        return out
    if scores is None:
        raise ValueError("no attention weights: neither the eager weights nor the scores")
    return scores.sources(start, stop, dtype)


def alpha_reach(
    full: torch.Tensor | None, scores: ScoreInputs | None, start: int, stop: int
) -> int:
    """How many leading sources can have a weight for query rows ``start:stop``: from the
    eager weights (the last with one), else :meth:`ScoreInputs.reach`."""
    if full is not None:
        reach = full[:, :, start:stop].amax(dim=(0, 1, 2)).nonzero()  # sources with a weight
        return int(reach[-1, 0]) + 1 if len(reach) else 1
    if scores is None:
        raise ValueError("no attention weights: neither the eager weights nor the scores")
    return scores.reach(start, stop)
