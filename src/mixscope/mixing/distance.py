"""Distance profiles: how much of each token's context comes from each distance (method.md §5e).

For token i and its sources j ≠ i at distance δ = |i − j| (a causal model's weights are 0
for j > i, so there δ = i − j), buckets ``B_0 = {1}, B_1 = {2, 3}, …, B_b = {2^b .. 2^(b+1) − 1}``,
the last one open-ended. Per bucket, the sum of the per-pair norms ‖a_ij‖ of the ATTN parts
``a_ij = Σ_h α^h_ij f^h(x_j)`` and the sum of the head-mean weights ᾱ_ij.

No [seq, seq, hidden] tensor: ‖a_ij‖² = α_ijᵀ G_j α_ij = ‖L_jᵀ α_ij‖² with α_ij the [heads]
vector of head weights, G_j = U_j U_jᵀ the [heads, heads] Gram matrix of the per-head vectors
f^h(x_j) (built in token chunks: no [heads, seq, hidden] tensor either) and L_j its Cholesky
factor. α comes a block of query rows at a time, source-major ([batch, groups, sources,
heads per group, rows]; mixing/alpha_rows.py), so memory is O(seq · rows); per block one
batched matmul per source, M_j = [L_jᵀ; 1/heads] times α_ij, gives both the norm's parts and
ᾱ_ij, and a prefix sum over j of the norms and the weights gives every bucket's sum as the
difference of two prefix sums at the bucket's edges (both sides of i, self excluded).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from mixscope.choices import DISTANCE_BUCKETS
from mixscope.errors import MixscopeError
from mixscope.mixing.alpha_rows import (
    BLOCK_SCORES,
    ScoreInputs,
    alpha_reach,
    alpha_sources,
    block_rows,
)
from mixscope.mixing.block_tensors import BlockParams, head_values

#: the buckets of the default profile: δ = 1, 2–3, 4–7, …, 1024–2047, ≥ 2048; also the
#: most a run may ask for (the group's stored columns are fixed: their codes are stable)
DEFAULT_BUCKETS = MAX_BUCKETS = DISTANCE_BUCKETS

#: query rows per block at most where the first rows do not reach every source (causal,
#: left padding): a causal block's sources end closer to its rows (less of the masked
#: triangle scored) and its arrays stay near the CPU's cache. Where every block reaches
#: every source (an encoder), blocks as large as the memory budget allows: fewer, larger
#: per-source matmuls and fewer small ops (on this shared 2-core CPU the difference from
#: 64-row blocks on MiniLM at n = 512 was within the run-to-run noise, ±20%)
ROWS = 64

#: recomputed α keeps a group per key/value head up to this many key/value heads
GROUPED_KV = 2


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


def head_mix(gram: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per source j, the [heads + 1, heads] matrix M_j whose first rows are L_jᵀ with
    G_j = L_j L_jᵀ and whose last row is 1/heads: M_j α_ij = (L_jᵀ α_ij, ᾱ_ij), so
    ‖a_ij‖² = α_ijᵀ G_j α_ij = ‖L_jᵀ α_ij‖². gram [batch, seq, heads, heads] →
    [batch, seq, heads + 1, heads] in ``dtype``.

    L_j is G_j's Cholesky factor in float64; a G_j that is singular (or, rounded, not
    positive definite) takes V √Λ from its eigendecomposition instead, eigenvalues below 0
    clamped (an exact factor of the nearest PSD matrix)."""
    g = gram.to(torch.float64)
    low, info = torch.linalg.cholesky_ex(g)  # [batch, seq, heads, heads]
    failed = info != 0
    if bool(failed.any()):
        lam, vec = torch.linalg.eigh(g[failed])
        low[failed] = vec * lam.clamp_min(0).sqrt().unsqueeze(-2)  # V √Λ
    heads = gram.shape[-1]
    mean = torch.full((*gram.shape[:-2], 1, heads), 1.0 / heads, dtype=torch.float64,
                      device=gram.device)  # fmt: skip
    return torch.cat([low.transpose(-1, -2), mean], dim=-2).to(dtype)


def grouped_mix(mix: torch.Tensor, groups: int) -> torch.Tensor:
    """:func:`head_mix`'s [batch, seq, heads + 1, heads] split by groups of heads (columns),
    each contiguous: [groups, batch, seq, heads + 1, heads / groups]."""
    *lead, out, heads = mix.shape
    split = mix.reshape(*lead, out, groups, heads // groups)
    return split.permute(3, 0, 1, 2, 4).contiguous()


def pair_values(alpha: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    """‖a_ij‖ and ᾱ_ij of a block of query rows, source-major: alpha [batch, groups,
    sources, heads per group, rows] (heads = groups × heads per group, in order), mix
    [groups, batch, seq, heads + 1, heads per group] (:func:`grouped_mix`, seq ≥ sources)
    → [2 (norm, weight), batch, sources, rows].

    One batched matmul over the sources per group of heads ([heads + 1, heads per group] ×
    [heads per group, rows] each, summed over the groups) and a sum of squares over the
    heads; both quantities in one [2, …] view of its output."""
    batch, groups, cols, per, rows = alpha.shape
    heads = groups * per
    t = torch.empty(batch * cols, heads + 1, rows, dtype=alpha.dtype, device=alpha.device)
    for c in range(groups):
        m = mix[c, :, :cols].reshape(batch * cols, heads + 1, per)
        a = alpha[:, c].reshape(batch * cols, per, rows)
        if c:
            t.baddbmm_(m, a)
        else:
            torch.bmm(m, a, out=t)
    t4 = t.view(batch, cols, heads + 1, rows)  # (L_jᵀ α_ij, ᾱ_ij)
    norms = t4[:, :, heads - 1].square_()  # Σ_h (L_jᵀ α_ij)_h² in L's last row's place
    for h in range(heads - 1):  # (no reduction over a middle dimension: slow on the CPU)
        norms.addcmul_(t4[:, :, h], t4[:, :, h])
    norms.sqrt_()
    return t4[:, :, heads - 1 :].movedim(2, 0)  # [2 (norm, weight), batch, sources, rows]


def _edges(start: int, stop: int, seq: int, buckets: int, device: torch.device) -> torch.Tensor:
    """Prefix-sum positions of every bucket's edges for rows ``start:stop``: [2K + 2, rows].

    With C[m] = Σ_{j<m}, bucket b sums C[P_b] − C[P_{b+1}] before i (P_b = i − 2^b + 1,
    P_K = 0) and C[Q_{b+1}] − C[Q_b] after it (Q_b = i + 2^b, Q_K = seq), each clamped to
    [0, seq]: an edge beyond the sequence makes the bucket's range empty."""
    i = torch.arange(start, stop, device=device)[None, :]  # [1, rows]
    powers = 2 ** torch.arange(buckets, device=device)[:, None]  # [K, 1]
    before = torch.cat([i - powers + 1, torch.zeros_like(i)], dim=0)  # P_0 … P_K
    after = torch.cat([i + powers, torch.full_like(i, seq)], dim=0)  # Q_0 … Q_K
    return torch.cat([before, after], dim=0).clamp_(0, seq)  # [2K + 2, rows]


def bucket_sums(
    pairs: torch.Tensor, start: int, buckets: int, edges: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-bucket sums over sources j ≠ i of ``pairs`` [..., sources, rows] (source-major;
    rows from query ``start``; sources past the last given add nothing): [..., K, rows],
    summed in float64 (a long row's prefix sums stay exact enough that their differences
    keep a near bucket's small share). ``edges``: :func:`_edges` of these rows over the
    whole sequence, where a caller has them."""
    *lead, cols, rows = pairs.shape
    # the scan runs along the last dimension of the transposed view (a row's sources):
    # along a middle one, torch's CPU cumsum is 2x slower
    prefix = torch.cumsum(pairs.mT, dim=-1, dtype=torch.float64)  # C[m + 1] = Σ_{j≤m}
    if edges is None:
        edges = _edges(start, start + rows, cols, buckets, pairs.device)
    else:  # the rows' slice of _edges over the whole sequence: its sources end at cols
        edges = edges.clamp_max(cols)
    edges = edges.mT  # [rows, 2K + 2]
    at = prefix.gather(-1, (edges - 1).clamp_min_(0).expand(*lead, *edges.shape))
    at = at.masked_fill_(edges == 0, 0.0).mT  # C[0] = 0   [..., 2K + 2, rows]
    before, after = at[..., : buckets + 1, :], at[..., buckets + 1 :, :]
    return (before[..., :-1, :] - before[..., 1:, :]) + (after[..., 1:, :] - after[..., :-1, :])


def row_blocks(
    full: torch.Tensor | None,
    scores: ScoreInputs | None,
    shape: tuple[int, int, int],
    dtype: torch.dtype,
    budget: int = BLOCK_SCORES,
) -> Iterator[tuple[int, torch.Tensor]]:
    """(start, α of the block's rows source-major [batch, groups, sources, heads per group,
    rows]) over every query row (:func:`pair_values`); ``shape`` (batch, heads, seq).

    Recomputed α with few key/value heads (≤ :data:`GROUPED_KV`) stays in the score
    matmul's layout, a group per key/value head (its exp in place, the pair matmul summed
    over the groups); with more, one transpose on the exp makes one group of all heads
    (each group's matmul is a call over every source: many small groups cost more)."""
    batch, heads, seq = shape
    rows = block_rows(batch, heads, seq, budget)
    if alpha_reach(full, scores, 0, min(seq, ROWS)) < seq:
        rows = min(rows, ROWS)
    if full is None and scores is not None:
        yield from scores.source_blocks(rows, dtype, scores.key.shape[1] <= GROUPED_KV)
        return
    for start in range(0, seq, rows):
        yield start, alpha_sources(full, scores, start, min(seq, start + rows), dtype)


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
    mix = head_mix(head_grams(values, p, budget), values.dtype)  # [batch, seq, h + 1, h]
    mixes: dict[int, torch.Tensor] = {}  # by the blocks' groups of heads
    out = torch.empty(2, buckets, batch, seq, dtype=torch.float64, device=values.device)
    edges = _edges(0, seq, seq, buckets, values.device)  # [2K + 2, seq]
    for start, alpha in row_blocks(full, scores, (batch, p.heads, seq), values.dtype, budget):
        stop = start + alpha.shape[-1]
        groups = alpha.shape[1]
        if groups not in mixes:
            mixes[groups] = grouped_mix(mix, groups)
        pairs = pair_values(alpha, mixes[groups])  # [2, batch, sources, rows]
        sums = bucket_sums(pairs, start, buckets, edges[:, start:stop])  # [2, b, K, rows]
        out[:, :, :, start:stop] = sums.transpose(1, 2)
    return out


def shares(sums: torch.Tensor) -> torch.Tensor:
    """Each bucket's share of the row's total over the buckets, 0 where the total is 0 (no
    context): sums [..., buckets, batch, seq] → the same shape."""
    total = sums.sum(dim=-3, keepdim=True)
    return torch.where(total > 0, sums / torch.where(total > 0, total, 1.0), 0.0)
