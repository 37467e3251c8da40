"""Distance profiles: how much of each token's context comes from each distance (method.md §5e).

For token i and its sources j ≠ i at distance δ = |i − j| (a causal model's weights are 0
for j > i, so there δ = i − j), buckets ``B_0 = {1}, B_1 = {2, 3}, …, B_b = {2^b .. 2^(b+1) − 1}``,
the last one open-ended. Per bucket, the sum of the per-pair norms ‖a_ij‖ of the ATTN parts
``a_ij = Σ_h α^h_ij f^h(x_j)`` and the sum of the head-mean weights ᾱ_ij.

No [seq, seq, hidden] tensor: ‖a_ij‖² = α_ijᵀ G_j α_ij with α_ij the [heads] vector of
head weights and G_j = U_j U_jᵀ the [heads, heads] Gram matrix of the per-head vectors
f^h(x_j) (built in token chunks: no [heads, seq, hidden] tensor either). α comes block of
query rows by block (mixing/alpha_rows.py), so memory is O(seq · rows); per block, a
prefix sum over j of the norms and the weights gives every bucket's sum as the difference
of two prefix sums at the bucket's edges (both sides of i, self excluded).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from mixscope.choices import DISTANCE_BUCKETS
from mixscope.errors import MixscopeError
from mixscope.mixing.alpha_rows import BLOCK_SCORES, ScoreInputs, alpha_rows, block_rows
from mixscope.mixing.block_tensors import BlockParams, head_values

#: the buckets of the default profile: δ = 1, 2–3, 4–7, …, 1024–2047, ≥ 2048; also the
#: most a run may ask for (the group's stored columns are fixed: their codes are stable)
DEFAULT_BUCKETS = MAX_BUCKETS = DISTANCE_BUCKETS


def check_buckets(buckets: int) -> int:
    """``analysis.distance_buckets``, checked: 2 to :data:`MAX_BUCKETS` (with fewer, the
    last bucket opens at 2^(K−1) and the columns past it hold 0)."""
    if isinstance(buckets, bool) or not isinstance(buckets, int) or not 2 <= buckets <= MAX_BUCKETS:
        raise MixscopeError(
            f"distance_buckets must be an integer from 2 to {MAX_BUCKETS}, got {buckets!r}"
        )
    return buckets


def bucket_of(delta: int, buckets: int = DEFAULT_BUCKETS) -> int:
    """The bucket of a distance δ ≥ 1: ⌊log2 δ⌋, the last one open-ended."""
    return min(int(delta).bit_length() - 1, buckets - 1)


def head_grams(values: torch.Tensor, p: BlockParams, budget: int = BLOCK_SCORES) -> torch.Tensor:
    """G_j[h, k] = f^h(x_j) · f^k(x_j) for every token: [batch, seq, heads, heads].

    ``values`` [batch, seq, kv_heads · head_dim] (x W_V + b_V); f^h(x_j) = v_j^h W_O^h is
    built for a chunk of tokens at a time ([batch, chunk, heads, hidden] each)."""
    v = head_values(values, p)  # [batch, seq, heads, head_dim]
    w = p.w_out.reshape(p.w_out.shape[0], p.heads, p.head_dim).to(v.dtype)  # [hidden, h, e]
    batch, seq = v.shape[:2]
    out = torch.empty(batch, seq, p.heads, p.heads, dtype=v.dtype, device=v.device)
    chunk = max(1, budget // max(1, batch * p.heads * w.shape[0]))
    for start in range(0, seq, chunk):
        f = torch.einsum("bjhe,dhe->bjhd", v[:, start : start + chunk], w)  # [b, c, h, hidden]
        out[:, start : start + chunk] = f @ f.transpose(-1, -2)  # [batch, chunk, h, h]
    return out


def pair_norms_of(alpha: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """‖a_ij‖ = sqrt(α_ijᵀ G_j α_ij) for a block of rows: alpha [batch, heads, rows, seq],
    gram [batch, seq, heads, heads] → [batch, rows, seq].

    G is symmetric: Σ_h G_hh α_h² + 2 Σ_{h<k} G_hk α_h α_k, heads(heads + 1)/2 fused
    multiply-adds over [batch, rows, seq] in α's own layout (no permuted copy of the block,
    no per-source [rows, heads] × [heads, heads] products: 2.4x the speed on the CPU)."""
    heads = alpha.shape[1]
    g = gram.permute(0, 2, 3, 1)[:, :, :, None, :]  # [batch, h, k, 1, seq(j)]
    sq = torch.zeros_like(alpha[:, 0])  # [batch, rows, seq]
    cross = torch.empty_like(sq)
    for h in range(heads):
        a_h = alpha[:, h]  # [batch, rows, seq]
        sq.addcmul_(a_h * a_h, g[:, h, h])
        if h + 1 < heads:
            cross.zero_()
            for k in range(h + 1, heads):
                cross.addcmul_(alpha[:, k], g[:, h, k])
            sq.addcmul_(a_h, cross, value=2.0)
    return sq.clamp_min_(0).sqrt_()


def _edges(start: int, stop: int, seq: int, buckets: int, device: torch.device) -> torch.Tensor:
    """Prefix-sum positions of every bucket's edges for rows ``start:stop``: [rows, 2K + 2].

    With C[m] = Σ_{j<m}, bucket b sums C[P_b] − C[P_{b+1}] before i (P_b = i − 2^b + 1,
    P_K = 0) and C[Q_{b+1}] − C[Q_b] after it (Q_b = i + 2^b, Q_K = seq), each clamped to
    [0, seq]: an edge beyond the sequence makes the bucket's range empty."""
    i = torch.arange(start, stop, device=device)[:, None]  # [rows, 1]
    powers = 2 ** torch.arange(buckets, device=device)[None, :]  # [1, K]
    before = torch.cat([i - powers + 1, torch.zeros_like(i)], dim=1)  # P_0 … P_K
    after = torch.cat([i + powers, torch.full_like(i, seq)], dim=1)  # Q_0 … Q_K
    return torch.cat([before, after], dim=1).clamp_(0, seq)  # [rows, 2K + 2]


def bucket_sums(pairs: torch.Tensor, start: int, buckets: int) -> torch.Tensor:
    """Per-bucket sums over sources j ≠ i of ``pairs`` [..., rows, seq] (rows from query
    ``start``): [..., rows, K], summed in float64 (a long row's prefix sums stay exact
    enough that their differences keep a near bucket's small share)."""
    *lead, rows, seq = pairs.shape
    prefix = torch.zeros(*lead, rows, seq + 1, dtype=torch.float64, device=pairs.device)
    torch.cumsum(pairs, dim=-1, dtype=torch.float64, out=prefix[..., 1:])  # C[m] = Σ_{j<m}
    edges = _edges(start, start + rows, seq, buckets, pairs.device)  # [rows, 2K + 2]
    at = prefix.gather(-1, edges.expand(*lead, rows, edges.shape[-1]))  # [..., rows, 2K + 2]
    before, after = at[..., : buckets + 1], at[..., buckets + 1 :]
    return (before[..., :-1] - before[..., 1:]) + (after[..., 1:] - after[..., :-1])


def row_blocks(
    full: torch.Tensor | None,
    scores: ScoreInputs | None,
    shape: tuple[int, int, int],
    dtype: torch.dtype,
    budget: int = BLOCK_SCORES,
) -> Iterator[tuple[int, torch.Tensor]]:
    """(start, α of the block's rows [batch, heads, rows, seq]) over every query row;
    ``shape`` (batch, heads, seq)."""
    batch, heads, seq = shape
    # at most an eighth of the rows a block: a causal block's sources end at its last row,
    # so narrower blocks leave out more of the (zero) later ones (56% of the work, not 75%)
    rows = min(block_rows(batch, heads, seq, budget), max(64, -(-seq // 8)))
    for start in range(0, seq, rows):
        yield start, alpha_rows(full, scores, start, min(seq, start + rows), dtype)


def distance_sums(
    full: torch.Tensor | None,
    scores: ScoreInputs | None,
    values: torch.Tensor,
    p: BlockParams,
    buckets: int = DEFAULT_BUCKETS,
    budget: int = BLOCK_SCORES,
) -> torch.Tensor:
    """Σ_{j∈B_b} ‖a_ij‖ and Σ_{j∈B_b} ᾱ_ij per token: [2 (norm, weight), buckets, batch, seq]
    (float64). ``full``: the eager weights [batch, heads, seq, seq], or None to recompute
    α's rows from ``scores``; ``values`` [batch, seq, kv_heads · head_dim]."""
    batch, seq = values.shape[:2]
    gram = head_grams(values, p, budget)  # [batch, seq, heads, heads]
    out = torch.empty(2, batch, seq, buckets, dtype=torch.float64, device=values.device)
    for start, alpha in row_blocks(full, scores, (batch, p.heads, seq), values.dtype, budget):
        stop = start + alpha.shape[2]
        # sources past the block's last one with a weight (a causal block's later tokens)
        # add nothing: left out, they halve a causal model's work
        reach = alpha.amax(dim=(0, 1, 2)).nonzero()  # [sources with a weight, 1]
        cols = int(reach[-1, 0]) + 1 if len(reach) else 1
        alpha = alpha[..., :cols]
        pairs = torch.stack([pair_norms_of(alpha, gram[:, :cols]), alpha.mean(dim=1)])
        out[:, :, start:stop] = bucket_sums(pairs, start, buckets)  # pairs [2, b, rows, cols]
    return out.permute(0, 3, 1, 2)  # [2, buckets, batch, seq]


def shares(sums: torch.Tensor) -> torch.Tensor:
    """Each bucket's share of the row's total over the buckets, 0 where the total is 0 (no
    context): sums [..., buckets, batch, seq] → the same shape."""
    total = sums.sum(dim=-3, keepdim=True)
    return torch.where(total > 0, sums / torch.where(total > 0, total, 1.0), 0.0)
