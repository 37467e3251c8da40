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

from typing import TYPE_CHECKING

from mixscope.mixing.measures.base import BatchInfo, MeasureGroup, Residual

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.block_tensors import FFParams
    from mixscope.mixing.chain import BlockChain, Parts


class FeedForward(MeasureGroup):
    name = "ff"
    needs = frozenset(
        {"block_input", "values", "attention", "attn_out", "attn_norm", "ff_in", "ff_out"}
    )
    verify_needs = frozenset({"ff_norm"})

    def compute(self, block: BlockChain, batch: BatchInfo) -> torch.Tensor:
        import torch

        from mixscope.mixing.ff_parts import chunk_tokens

        t, p = block.t, block.p
        flat = lambda v: v.reshape(-1, v.shape[-1])  # noqa: E731  [tokens, ·]
        inputs, stream = block.ff_input, block.ff_stream
        if p.moe is not None:  # a mixture of experts: the router's gates held constant
            assert t.ff_route is not None and t.ff_out is not None
            from mixscope.mixing.moe_parts import moe_parts

            count = flat(t.y).shape[0]
            ff_out = flat(t.ff_out)
            ff, _ = moe_parts(p.moe, inputs.rows(0, count), flat(t.y), t.ff_route, ff_out)
            moe = _ratios(block, ff, stream.rows(0, count), ff_out)
            moe = moe.view(len(self.columns), *batch.valid.shape)  # [measure, batch, seq]
            return moe.masked_fill(batch.no_context.unsqueeze(0), 0.0)
        assert p.ff is not None and t.ff_pre is not None and t.ff_out is not None
        pre, ff_out = tuple(map(flat, t.ff_pre)), flat(t.ff_out)
        count, d_ff = pre[0].shape
        out = torch.empty(len(self.columns), count, dtype=t.x.dtype, device=t.x.device)
        # every step is per token: chunks bound the [tokens, d_ff] temporaries (and keep
        # them in cache on a CPU)
        chunks = -(-count // chunk_tokens(d_ff, t.x.device))
        step = -(-count // chunks)  # even chunks
        for a in range(0, count, step):
            b = a + step
            rows = tuple(h[a:b] for h in pre)
            ff = ff_parts(p.ff, inputs.rows(a, b), rows, ff_out[a:b])
            out[:, a:b] = _ratios(block, ff, stream.rows(a, b), ff_out[a:b])
        out = out.view(len(self.columns), *batch.valid.shape)  # [measure, batch, seq]
        return out.masked_fill(batch.no_context.unsqueeze(0), 0.0)

    def check(self, exact: BlockChain, batch: BatchInfo) -> list[Residual]:
        from mixscope.mixing.block_tensors import norm_scale, project
        from mixscope.mixing.chain import Parts, ff_residual
        from mixscope.mixing.exactness import relative_error
        from mixscope.mixing.ff_parts import split_output

        t, p = exact.t, exact.p
        ff, n2 = p.ff, p.ff_norm
        assert t.ff_out is not None
        if p.moe is not None:  # the experts' parts, with the bias part as computed
            ff_parts = _moe_check_parts(exact)
        else:
            assert ff is not None and t.ff_pre is not None
            # the FF input's parts rebuilt from α (every token's summed, and the bias part)
            y = exact.ff_input.applied()
            y_sum = y.own if y.context is None else y.own + y.context
            sum_pre = tuple(project(y_sum, w, ff.transposed) for w in ff.inputs)
            bias_pre = tuple(
                project(y.bias.expand_as(y_sum), w, ff.transposed) + b
                for w, b in zip(ff.inputs, ff.input_biases, strict=True)
            )
            summed, bias = split_output(ff, t.ff_pre, [sum_pre, bias_pre])  # [b, seq, hidden]
            ff_parts = Parts(summed, None, bias + ff.b_out)
        residuals = [
            Residual(
                "Σ_j FF_ij + bias − FF output",
                relative_error(ff_parts.total(), t.ff_out, batch.valid),
                norm=True,  # the FF reads a norm's output (float32 in Llama's RMSNorm)
            )
        ]
        assert t.ff_norm_in is not None and t.ff_norm_out is not None
        ffres = ff_residual(p, exact.ff_stream, ff_parts, t.ff_out)
        after = ffres if n2 is None else ffres.through_norm(n2, norm_scale(t.ff_norm_in, n2))
        residuals.append(
            Residual(
                "Σ_j N(FF_ij + res_ij) + bias − the norm after the FF",
                relative_error(after.total(), t.ff_norm_out, batch.valid),
                norm=True,
            )
        )
        return residuals


def _moe_check_parts(exact: BlockChain) -> Parts:
    """The experts' output split from the parts rebuilt from α, every token's summed,
    with the bias part as computed (not the remainder): [batch, seq, hidden] each."""
    from mixscope.mixing.chain import Parts
    from mixscope.mixing.moe_parts import moe_parts

    t, p = exact.t, exact.p
    assert p.moe is not None and t.ff_route is not None and t.ff_out is not None
    shape = t.ff_out.shape
    flat = lambda v: v.reshape(-1, v.shape[-1])  # noqa: E731  [tokens, ·]
    count = flat(t.y).shape[0]
    parts, bias = moe_parts(
        p.moe, exact.ff_input.rows(0, count), flat(t.y), t.ff_route, flat(t.ff_out), explicit=True
    )
    assert parts.context is not None
    return Parts((parts.own + parts.context).view(shape), None, bias.view(shape))


def _ratios(block: BlockChain, ff: Parts, stream: Parts, ff_out: torch.Tensor) -> torch.Tensor:
    """ff_n, ffres_n, ffresln_n of some tokens: [measure, tokens]."""
    import torch

    from mixscope.mixing.chain import ff_residual

    p = block.p
    ffres = ff_residual(p, stream, ff, ff_out)
    after = ffres.ratio() if p.ff_norm is None else ffres.ratio_after(p.ff_norm)
    return torch.stack([ff.ratio(), ffres.ratio(), after])


def ff_parts(ff: FFParams, y: Parts, pre: tuple[torch.Tensor, ...], ff_out: torch.Tensor) -> Parts:
    """The FF output of some tokens split like its input ``y`` (rows [tokens, ·]): own
    FF_ii, context Σ_{j≠i} FF_ij (None where the FF reads the token alone), and the bias
    part, by exact integrated gradients (mixing/ff_parts.py). ``pre``: the real
    pre-activations; ``ff_out``: the real output, which the bias part completes."""
    import torch

    from mixscope.mixing.block_tensors import project
    from mixscope.mixing.chain import Parts
    from mixscope.mixing.ff_parts import context_pre_activations, split_output

    y_scale = y.scale_tensor()
    y_own = y.own if y_scale is None else y.own * y_scale  # the own part, scaled
    own_pre = tuple(project(y_own, w, ff.transposed) for w in ff.inputs)  # [tokens, d_ff]
    b_out = ff.b_out.to(y_own.dtype)
    if y.context is None or ff.bias_free:
        ff_own = split_output(ff, pre, [own_pre])[0]  # [tokens, hidden]
        if y.context is None:  # a parallel residual's FF reads x_i alone
            return Parts(ff_own, None, torch.sub(ff_out, ff_own))
        # no bias part reaches the FF: the others' is the real output minus b₂ and the own
        return Parts(ff_own, torch.sub(ff_out, b_out).sub_(ff_own), b_out)
    if y.bias.dim() == 1:  # the bias part γ ⊙ centre(b) · scale + β: two matrix–vector products
        ones = torch.ones(*y_own.shape[:-1], 1, dtype=y_own.dtype, device=y_own.device)
        scale = ones if y_scale is None else y_scale
        shift = torch.zeros_like(y.bias) if y.shift is None else y.shift
        context_pre = context_pre_activations(ff, pre, own_pre, y.bias, scale, shift)
    else:  # a per-token bias part (a norm inside the branch): projected as it is
        y_bias = y.applied().bias
        context_pre = tuple(
            torch.sub(h, own).sub_(project(y_bias, w, ff.transposed)).sub_(b.to(h.dtype))
            for h, own, w, b in zip(pre, own_pre, ff.inputs, ff.input_biases, strict=True)
        )
    ff_own, ff_context = split_output(ff, pre, [own_pre, context_pre])
    return Parts(ff_own, ff_context, torch.sub(ff_out, ff_own).sub_(ff_context))


GROUP = FeedForward()
