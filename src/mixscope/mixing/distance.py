"""Distance profiles: how much of each token's context comes from each distance (method.md §5e).

For token i and its sources j ≠ i at distance δ = |i − j| (a causal model's weights are 0
for j > i, so there δ = i − j), buckets ``B_0 = {1}, B_1 = {2, 3}, …, B_b = {2^b .. 2^(b+1) − 1}``,
the last one open-ended. Per bucket, the sum of the per-pair norms ‖a_ij‖ of the ATTN parts
``a_ij = Σ_h α^h_ij f^h(x_j)`` and the sum of the head-mean weights ᾱ_ij.

No [seq, seq, hidden] tensor: ‖a_ij‖² = α_ijᵀ G_j α_ij = ‖L_jᵀ α_ij‖² with α_ij the [heads]
vector of head weights, G_j = U_j U_jᵀ the [heads, heads] Gram matrix of the per-head vectors
f^h(x_j) (built in token chunks: no [heads, seq, hidden] tensor either) and L_j its Cholesky
factor. α comes a block of query rows at a time, source-major ([batch, sources, heads,
rows]; mixing/alpha_rows.py), so memory is O(seq · rows); per block one batched matmul per
source, M_j = [L_jᵀ; 1/heads] times α_ij, gives both the norm's parts and ᾱ_ij, and one
matmul of a skewed view of the norms and the weights with a [distance, bucket] membership
matrix gives every bucket's sum (a row's bucket depends only on i − j; self excluded).
"""

from __future__ import annotations

import functools
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
#: triangle scored) and its arrays stay near the CPU's cache. Llama-small at n = 2,048,
#: the whole paper + distance analysis over the SDPA forward, one process, 9 interleaved
#: reps, twice (2 threads): 48 rows 2.27x / 2.16x, 56 2.32x / 2.27x, 64 2.38x / 2.24x,
#: 40 2.46x / 2.28x, 32 2.51x / 2.44x (one layer alone, earlier: 32 and 128 10–20% slower
#: than 64). Where every block reaches every source (an encoder), blocks as large as
#: :data:`BLOCK` allows: fewer, larger per-source matmuls and fewer small ops
ROWS = 48

#: tokens per chunk of the per-head vectors f^h(x_j) (:func:`head_grams`)
GRAM_TOKENS = 128

#: α elements per block of rows at most ([batch, sources, heads, rows]: 8 MiB in float32,
#: the pair matmul's output as much again). Larger blocks cost far more per element on the
#: CPU: MiniLM at n = 512, batch 4, one layer (2 threads, side by side) 36–40 ms with
#: blocks up to 2^21 elements, 58–95 ms from 2^21.5, 198 ms at 2^24 (the shared budget,
#: BLOCK_SCORES); batch 8 85 against 312 ms. One sequence of 512 (3.1M elements) is split
#: in two blocks of 256 rows: 6.5 against 6.0 ms
BLOCK = 1 << 21


def block_plan(device: torch.device) -> tuple[int, int | None]:
    """(α elements per block, query rows per block at most where the first rows do not
    reach every source) on ``device``.

    The CPU's are measured (:data:`BLOCK`, :data:`ROWS`: arrays that stay near its cache).
    A GPU has no such cache to stay in, and each block costs some twenty kernel launches
    whatever its size: 48-row blocks of a 2,048-token causal sequence would be 43 blocks,
    ~900 launches a layer. There the blocks take the shared score budget
    (:data:`BLOCK_SCORES`, 64 MiB of float32 α) with no row cap: 8 blocks for one sequence
    of a 32-head Llama at n = 2,048. Not yet timed on a GPU (``benchmarks/distance.py --gpu`` in
    ``gpu_check.sh``); the sums are the same whichever plan (tests/test_distance.py)."""
    if device.type == "cpu":
        return BLOCK, ROWS
    return BLOCK_SCORES, None


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
    built for a chunk of :data:`GRAM_TOKENS` tokens at a time, head-major ([heads, chunk,
    hidden]: one batched matmul over the heads, no permute) and its Grams read from a
    token-major view of it (one batched matmul over the tokens); chunks small enough to
    stay in the CPU's cache. Against one einsum over every token, side by side on the
    shared 2-core CPU: MiniLM n = 512 2.7 → 2.2 ms (1 thread), 1.09 → 1.05 ms (2);
    Llama-small n = 2,048 3.7 → 3.3 ms (1 thread), 5.6 → 1.9 ms (2)."""
    v = head_values(values, p)  # [batch, seq, heads, head_dim]
    batch, seq, heads, dim = v.shape
    w = p.w_out.reshape(-1, heads, dim).permute(1, 2, 0).to(v.dtype).contiguous()  # [h, e, d]
    tokens = v.reshape(batch * seq, heads, dim)  # [tokens, heads, head_dim]
    out = torch.empty(batch * seq, heads, heads, dtype=v.dtype, device=v.device)
    chunk = max(1, min(GRAM_TOKENS, budget // max(1, heads * w.shape[-1])))
    for start in range(0, batch * seq, chunk):
        f = torch.bmm(tokens[start : start + chunk].transpose(0, 1), w)  # [h, chunk, hidden]
        f = f.transpose(0, 1)  # [chunk, heads, hidden] (strided)
        torch.bmm(f, f.transpose(1, 2), out=out[start : start + chunk])  # [chunk, h, h]
    return out.view(batch, seq, heads, heads)


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
    mix = torch.empty(*gram.shape[:-2], heads + 1, heads, dtype=dtype, device=gram.device)
    mix[..., :heads, :] = low.transpose(-1, -2)  # L_jᵀ
    mix[..., heads, :] = 1.0 / heads
    return mix


def pair_values(alpha: torch.Tensor, mix: torch.Tensor) -> torch.Tensor:
    """‖a_ij‖ and ᾱ_ij of a block of query rows, source-major: alpha [batch, sources,
    heads, rows], mix [batch, seq, heads + 1, heads] (:func:`head_mix`, seq ≥ sources) →
    [2 (norm, weight), batch, sources, rows].

    One batched matmul over the sources ([heads + 1, heads] × [heads, rows] each) and a sum
    of squares over the heads; both quantities in one [2, …] view of its output."""
    batch, cols, heads, rows = alpha.shape
    t = torch.bmm(
        mix[:, :cols].reshape(batch * cols, heads + 1, heads),
        alpha.reshape(batch * cols, heads, rows),
    )  # [batch · sources, heads + 1, rows]
    t4 = t.view(batch, cols, heads + 1, rows)  # (L_jᵀ α_ij, ᾱ_ij)
    # Σ_h by halves: the upper half's squares added onto the lower's (one addcmul: no pass
    # that squares the upper half alone), then halves again, ⌈log2 heads⌉ ops in all; a sum
    # over a middle dimension, a square pass over every head or one add per head cost more
    # (1 thread, 512 sources × 12 heads × 512 rows: 2.1 ms against 3.3 ms for square + halves)
    half = heads // 2
    squares = t4[:, :, : heads - half].square_()  # [batch, sources, heads − half, rows]
    squares[:, :, :half].addcmul_(t4[:, :, heads - half : heads], t4[:, :, heads - half : heads])
    live = heads - half
    while live > 1:
        half = live // 2
        squares[:, :, :half].add_(squares[:, :, live - half : live])
        live -= half
    t4[:, :, 0].sqrt_()  # ‖a_ij‖ in L's first row's place
    return t4[:, :, ::heads].movedim(2, 0)  # [2 (norm, weight), batch, sources, rows]


@functools.lru_cache(maxsize=64)
def _membership(
    lo: int, span: int, buckets: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """[span, buckets]: row t one-hot at the bucket of the distance |δ|, δ = lo − t (all
    zero at δ = 0: the token itself is in no bucket)."""
    delta = (lo - torch.arange(span, device=device)).abs_()  # [span]
    edges = 2 ** torch.arange(1, buckets, device=device)  # [K − 1]: 2, 4, …, 2^(K−1)
    bucket = (delta[:, None] >= edges).sum(dim=-1)  # ⌊log2 |δ|⌋, the last open-ended
    member = torch.nn.functional.one_hot(bucket, buckets).to(dtype)  # [span, K]
    return member.masked_fill_((delta == 0)[:, None], 0.0)


def bucket_sums(
    pairs: torch.Tensor, start: int, buckets: int, work: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-bucket sums over sources j ≠ i of ``pairs`` [..., sources, rows] (source-major;
    rows from query ``start``; sources past the last given add nothing): [..., K, rows].

    One matmul: a row's bucket depends only on its distance, so in a skewed view of the
    rows — column t of row r holds source j = r + t − (rows − 1), the distance i − j =
    start + rows − 1 − t the same for every row — the sums are that view times the
    [t, bucket] membership matrix (:func:`_membership`). The view costs one transposed copy
    into a zero-padded row-major buffer (each row ``rows − 1`` zeros, then its sources: the
    view's rows are that buffer's with a stride one longer); no prefix sums, whose
    differences needed float64 to keep a near bucket's small share: these are sums of
    non-negative terms, in the pairs' own dtype (float32 for 16-bit pairs). ``work``: a
    flat buffer for the padded rows, where it is large enough (reused across blocks)."""
    *lead, cols, rows = pairs.shape
    count = pairs[..., 0, 0].numel()
    pad = rows - 1
    span = pad + cols  # t: every source of every row
    dtype = torch.promote_types(pairs.dtype, torch.float32)  # 16-bit pairs summed in float32
    size = count * (rows + 1) * span
    if work is not None and work.dtype == dtype and work.numel() >= size:
        grid = work[:size].view(count, rows + 1, span)  # [m, rows + 1, pad + sources]
    else:
        grid = pairs.new_empty(count, rows + 1, span, dtype=dtype)
    grid[:, :, :pad].zero_()
    grid[:, rows, pad:].zero_()
    # row-major (no reshape of the strided pairs first: a copy where batch > 1)
    grid.view(*lead, rows + 1, span)[..., :rows, pad:].copy_(pairs.mT)  # [..., rows, sources]
    # the skewed view: [m, rows, span], row r starts r elements further into its own row
    # (past its last source it reads the next row's leading zeros, the last row the zero row)
    skew = grid.as_strided((count, rows, span), (grid.stride(0), span + 1, 1))
    member = _membership(start + pad, span, buckets, dtype, pairs.device)  # [span, K]
    sums = torch.matmul(skew, member)  # [m, rows, K]
    return sums.mT.reshape(*lead, buckets, rows)


def row_blocks(
    full: torch.Tensor | None,
    scores: ScoreInputs | None,
    shape: tuple[int, int, int],
    dtype: torch.dtype,
    budget: int = BLOCK,
    reuse: bool = False,
    cap: int | None = ROWS,
) -> Iterator[tuple[int, torch.Tensor]]:
    """(start, α of the block's rows source-major [batch, sources, heads, rows]) over every
    query row (:func:`pair_values`); ``shape`` (batch, heads, seq). Blocks of ``budget``
    elements at most, as even as that allows, and of ``cap`` rows at most where the first
    rows do not reach every source (causal, left padding). ``reuse``: recomputed blocks
    share one buffer, each overwritten by the next (:meth:`ScoreInputs.source_blocks`)."""
    batch, heads, seq = shape
    rows = block_rows(batch, heads, seq, budget)
    if cap is not None and alpha_reach(full, scores, 0, min(seq, cap)) < seq:
        rows = min(rows, cap)
    rows = -(-seq // -(-seq // rows))  # the same count of blocks, even sizes
    if full is None and scores is not None:
        yield from scores.source_blocks(rows, dtype, reuse)
        return
    for start in range(0, seq, rows):
        yield start, alpha_sources(full, scores, start, min(seq, start + rows), dtype)


def distance_sums(
    full: torch.Tensor | None,
    scores: ScoreInputs | None,
    values: torch.Tensor,
    p: BlockParams,
    buckets: int = DEFAULT_BUCKETS,
    plan: tuple[int, int | None] | None = None,
) -> torch.Tensor:
    """Σ_{j∈B_b} ‖a_ij‖ and Σ_{j∈B_b} ᾱ_ij per token: [2 (norm, weight), buckets, batch, seq]
    (float64). ``full``: the eager weights [batch, heads, seq, seq], or None to recompute
    α's rows from ``scores``; ``values`` [batch, seq, kv_heads · head_dim]. ``plan``: the
    blocks' (budget, row cap) (:func:`row_blocks`), by default the device's
    :func:`block_plan`."""
    batch, seq = values.shape[:2]
    budget, cap = block_plan(values.device) if plan is None else plan
    mix = head_mix(head_grams(values, p, budget), values.dtype)  # [batch, seq, h + 1, h]
    out = torch.empty(2, buckets, batch, seq, dtype=torch.float64, device=values.device)
    shape = (batch, p.heads, seq)
    work: torch.Tensor | None = None  # bucket_sums' padded rows, one buffer for every block
    blocks = row_blocks(full, scores, shape, values.dtype, budget, reuse=True, cap=cap)
    for start, alpha in blocks:
        stop = start + alpha.shape[-1]
        pairs = pair_values(alpha, mix)  # [2, batch, sources, rows]
        if work is None:
            rows = alpha.shape[-1]
            grid_dtype = torch.promote_types(values.dtype, torch.float32)
            work = values.new_empty(2 * batch * (rows + 1) * (rows - 1 + seq), dtype=grid_dtype)
        sums = bucket_sums(pairs, start, buckets, work)  # [2, batch, K, rows]
        out[:, :, :, start:stop] = sums.transpose(1, 2)
    return out


def shares(sums: torch.Tensor) -> torch.Tensor:
    """Each bucket's share of the row's total over the buckets, 0 where the total is 0 (no
    context): sums [..., buckets, batch, seq] → the same shape."""
    total = sums.sum(dim=-3, keepdim=True)
    return torch.where(total > 0, sums / torch.where(total > 0, total, 1.0), 0.0)
