"""The ``ff`` group: the feed-forward block, its residual and the norm after it.

docs/method.md §5; Kobayashi et al., "Analyzing Feed-Forward Blocks in Transformers
through the Lens of Attention Maps" (ICLR 2024): the scopes ATB → ATBFF → ATBFFRES →
ATBFFRESLN. The FF input's parts ``y_ij`` are the attention block's (post-LN: the LN1
output's ``F_i(x_j)``; pre-LN: LN2 split over ``r_ij``; a parallel residual: the FF reads
LN(x_i), so every part is the token's own). Through the FF by exact integrated gradients
(mixing/ff_parts.py):

- ``ff_n`` = ratio(FF_ij),
- ``ffres_n`` = ratio(FF_ij + res_ij), the residual around the FF carrying ``F_i(x_j)``
  (post-LN) or ``r_ij`` (pre-LN),
- ``ffresln_n`` = ratio(N(FF_ij + res_ij)), N the distributive split of the norm after the
  FF's residual sum (LN2; the next block's input norm; the final norm after the last block).

Bias parts (b_O, β, the FF's biases) belong to no token and enter no ratio. Per token only
two parts are carried, its own and the sum of the others (the latter from the captured
pre-activation minus the own and bias parts): one more pass of the own part through the
input projection(s) and of both through the output projection, O(seq · d_ff) per layer.
Per-pair FF maps would need the FF of every (i, j) pair, n² · d · d_ff: out of scope.

Exactness (eager path): Σ_j FF_ij + the bias part == the real FF output, and the norm
after the FF rebuilt from every part == its real output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mixscope.mixing.measures.base import (
    BatchInfo,
    Column,
    MeasureGroup,
    Residual,
    Workspace,
)

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.block_tensors import BlockParams, BlockTensors
    from mixscope.models.adapters import Adapter


class FeedForward(MeasureGroup):
    name = "ff"
    title = (
        "ATBFF, ATBFFRES, ATBFFRESLN: the feed-forward block, its residual and the norm "
        "after it (Kobayashi et al., ICLR 2024)"
    )
    columns = (
        Column("ff_n", "FF-N", "#8c6d31"),
        Column("ffres_n", "FFRES-N", "#d6616b"),
        Column("ffresln_n", "FFRESLN-N", "#7b4173"),
    )
    needs = frozenset(
        {"block_input", "values", "attention", "attn_out", "attn_norm", "ff_in", "ff_out"}
    )
    verify_needs = frozenset({"ff_norm"})

    def unsupported(self, adapter: Adapter) -> str | None:
        if not (adapter.ff_in and adapter.ff_act and adapter.ff_out):
            return f"the {adapter.family} adapter names no feed-forward modules"
        if adapter.ff_norm is None and not (adapter.next_norm and adapter.final_norm):
            return f"the {adapter.family} adapter names no norm after the feed-forward"
        return None

    def compute(
        self, t: BlockTensors, p: BlockParams, batch: BatchInfo, work: Workspace
    ) -> torch.Tensor:
        import torch

        from mixscope.mixing.ff_parts import chunk_tokens
        from mixscope.mixing.measures.paper import ATTN_SELF
        from mixscope.mixing.ratios import self_attention_vector

        assert p.ff is not None and t.ff_pre is not None and t.ff_out is not None
        a_self = work.shared.get(ATTN_SELF)
        if a_self is None:
            a_self = self_attention_vector(t, p)  # a_ii              [batch, seq, hidden]
        flat = lambda v: v.reshape(-1, v.shape[-1])  # noqa: E731  [tokens, ·]
        tokens = _Tokens(
            flat(t.x),
            flat(t.attn_out),
            flat(t.z),
            flat(a_self),
            tuple(map(flat, t.ff_pre)),
            flat(t.ff_out),
        )
        count, d_ff = tokens.pre[0].shape
        out = torch.empty(len(self.columns), count, dtype=t.x.dtype, device=t.x.device)
        # every step is per token: chunks bound the [tokens, d_ff] temporaries (and keep
        # them in cache on a CPU)
        chunks = -(-count // chunk_tokens(d_ff, t.x.device))
        step = -(-count // chunks)  # even chunks
        for start in range(0, count, step):
            out[:, start : start + step] = _ratios(tokens.rows(start, start + step), p)
        out = out.view(len(self.columns), *batch.valid.shape)  # [measure, batch, seq]
        return out.masked_fill(batch.no_context.unsqueeze(0), 0.0)

    def check(self, t: BlockTensors, p: BlockParams, batch: BatchInfo) -> list[Residual]:
        from mixscope.mixing.block_tensors import centre, norm_scale, project
        from mixscope.mixing.exactness import attention_sum, relative_error
        from mixscope.mixing.ff_parts import split_output

        ff, n2 = p.ff, p.ff_norm
        assert ff is not None and n2 is not None and t.ff_pre is not None
        assert t.ff_out is not None and t.ff_norm_in is not None and t.ff_norm_out is not None
        attn = attention_sum(t, p)  # Σ_j a_ij from α and the per-head vectors
        if ff.placement == "parallel":
            assert ff.input_norm is not None
            n_in = ff.input_norm
            y_sum = n_in.gamma * centre(t.x, n_in.norm_kind) / norm_scale(t.x, n_in)
            y_bias = n_in.beta.expand_as(y_sum)
        else:
            s = norm_scale(t.z, p)  # [batch, seq, 1]
            y_sum = p.gamma * centre(attn + t.x, p.norm_kind) / s  # Σ_j y_ij
            y_bias = p.gamma * centre(p.b_out, p.norm_kind) / s + p.beta
        sum_pre = tuple(project(y_sum, w, ff.transposed) for w in ff.inputs)
        bias_pre = tuple(
            project(y_bias, w, ff.transposed) + b
            for w, b in zip(ff.inputs, ff.input_biases, strict=True)
        )
        parts = split_output(ff, t.ff_pre, [sum_pre, bias_pre])  # [2, batch, seq, hidden]
        ff_rebuilt = parts[0] + parts[1] + ff.b_out  # Σ_j FF_ij + the FF's bias part
        if ff.placement == "post":  # the residual carries the FF input's parts
            stream = y_sum + y_bias + ff_rebuilt
        else:  # Σ_j r_ij + b_O (+ the FF output, a parallel residual's too)
            stream = attn + t.x + p.b_out + ff_rebuilt
        s2 = norm_scale(t.ff_norm_in, n2)  # the real input's
        rebuilt = n2.gamma * centre(stream, n2.norm_kind) / s2 + n2.beta
        return [
            Residual(
                "Σ_j FF_ij + bias − FF output",
                relative_error(ff_rebuilt, t.ff_out, batch.valid),
                norm=True,  # the FF reads a norm's output (float32 in Llama's RMSNorm)
            ),
            Residual(
                "Σ_j N(FF_ij + res_ij) + bias − the norm after the FF",
                relative_error(rebuilt, t.ff_norm_out, batch.valid),
                norm=True,
            ),
        ]


@dataclass(frozen=True)
class _Tokens:
    """One block's per-token inputs of the group, flattened: [tokens, ·] each."""

    x: torch.Tensor  # block input                            [tokens, hidden]
    attn_out: torch.Tensor  # Σ_j a_ij + b_O                  [tokens, hidden]
    z: torch.Tensor  # the block norm's input                 [tokens, hidden]
    a_self: torch.Tensor  # a_ii                              [tokens, hidden]
    pre: tuple[torch.Tensor, ...]  # the FF's pre-activations [tokens, d_ff] each
    ff_out: torch.Tensor  # the FF's real output FF(y)       [tokens, hidden]

    def rows(self, start: int, stop: int) -> _Tokens:
        return _Tokens(
            self.x[start:stop],
            self.attn_out[start:stop],
            self.z[start:stop],
            self.a_self[start:stop],
            tuple(h[start:stop] for h in self.pre),
            self.ff_out[start:stop],
        )


def _ratios(tok: _Tokens, p: BlockParams) -> torch.Tensor:
    """ff_n, ffres_n, ffresln_n of some tokens: [measure, tokens]."""
    import torch

    from mixscope.mixing.block_tensors import centre_
    from mixscope.mixing.ratios import norm_ratio

    assert p.ff_norm is not None
    norm = lambda v: torch.linalg.vector_norm(v, dim=-1)  # noqa: E731  [tokens]
    ff_own, ff_context, res_own, res_context = _parts(tok, p)
    # ff_context None: a parallel residual, whose FF reads the token alone
    n_ff_own = norm(ff_own)
    if ff_context is None:
        ff_n = torch.zeros_like(n_ff_own)
    else:
        ff_n = norm_ratio(norm(ff_context), n_ff_own)
        res_context.add_(ff_context)  # Σ_{j≠i} (FF_ij + res_ij)       [tokens, hidden]
    res_own.add_(ff_own)  # FF_ii + res_ii                              [tokens, hidden]
    n2 = p.ff_norm
    return torch.stack(
        [
            ff_n,
            norm_ratio(norm(res_context), norm(res_own)),
            # N(·) = γ ⊙ centre(·) / s: the shared s of the real norm input cancels
            norm_ratio(
                norm(centre_(res_context, n2.norm_kind).mul_(n2.gamma)),
                norm(centre_(res_own, n2.norm_kind).mul_(n2.gamma)),
            ),
        ]
    )


def _parts(
    tok: _Tokens, p: BlockParams
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """(FF_ii, Σ_{j≠i} FF_ij, res_ii, Σ_{j≠i} res_ij), each [tokens, hidden]; the FF's
    context part is None where the FF reads the token alone (a parallel residual)."""
    import torch

    from mixscope.mixing.block_tensors import centre, centre_, norm_scale, project
    from mixscope.mixing.ff_parts import context_pre_activations, split_output

    ff = p.ff
    assert ff is not None
    a_context = torch.sub(tok.attn_out, p.b_out).sub_(tok.a_self)  # Σ_{j≠i} a_ij  [tokens, hidden]
    r_self = torch.add(tok.a_self, tok.x)  # r_ii = a_ii + x_i                [tokens, hidden]
    if ff.placement == "parallel":  # the FF reads N_in(x_i): its own part, and β_in
        assert ff.input_norm is not None
        n_in = ff.input_norm
        y_own = torch.mul(centre(tok.x, n_in.norm_kind), n_in.gamma).div_(norm_scale(tok.x, n_in))
        own_pre = tuple(project(y_own, w, ff.transposed) for w in ff.inputs)
        ff_own = split_output(ff, tok.pre, [own_pre])[0]
        return ff_own, None, r_self, a_context
    # the FF input is the output of the block's norm: y_ij = γ ⊙ centre(r_ij) / s(z_i)
    inv_s = norm_scale(tok.z, p).reciprocal_()  # [tokens, 1]
    # (out of place: RMSNorm's centre is the identity, and r_self is still needed)
    y_own = torch.mul(centre(r_self, p.norm_kind), p.gamma).mul_(inv_s)  # [tokens, hidden]
    own_pre = tuple(project(y_own, w, ff.transposed) for w in ff.inputs)  # [tokens, d_ff]
    if ff.bias_free:  # no bias part: the others' is the real output minus b₂ and the own
        ff_own = split_output(ff, tok.pre, [own_pre])[0]
        ff_context = torch.sub(tok.ff_out, ff.b_out.to(ff_own.dtype)).sub_(ff_own)
    else:  # the bias part y_bias = γ ⊙ centre(b_O) / s + β; the others' sum by subtraction
        context_pre = context_pre_activations(
            ff, tok.pre, own_pre, p.gamma * centre(p.b_out, p.norm_kind), inv_s, p.beta
        )
        ff_own, ff_context = split_output(ff, tok.pre, [own_pre, context_pre])
    if ff.placement == "post":  # the residual around the FF carries the LN1 output's parts
        y_context = centre_(a_context, p.norm_kind).mul_(p.gamma).mul_(inv_s)  # in place
        return ff_own, ff_context, y_own, y_context
    return ff_own, ff_context, r_self, a_context


GROUP = FeedForward()
