"""The weights each block's chain steps need, read from the model through its adapter.

The capture points ask once per block (mixing/points.py): the attention branch's W_O and
b_O, norm inside the branch and multiplier always; the norm after the attention's residual
sum, the feed-forward's projections and activation, the norm inside the FF branch and the
norm after the FF's residual sum with the points that read them. Norms come in the
statistics dtype with the adapter's γ offset. Everything family-specific here is adapter
data; nothing branches on a family.
"""

from __future__ import annotations

from typing import Any

import torch

from mixscope.mixing.block_tensors import BlockParams, FFParams, MoEParams, NormParams, centre
from mixscope.mixing.ff_parts import slope_at_zero
from mixscope.models.loading import LoadedModel


def ff_bias_free(ff: FFParams, p: BlockParams) -> bool:
    """No bias part reaches the FF: its input projections have no bias, and no step of the
    chain before it adds one (b_O after centring, a norm's β; with a parallel residual the
    FF input's bias part is β_in alone)."""
    if any(bool(b.any()) for b in ff.input_biases):
        return False
    if ff.placement == "parallel":
        assert ff.input_norm is not None
        return not bool(ff.input_norm.beta.any())
    kinds = [n for n in (p.attn_branch_norm, p.norm) if n is not None]
    kind = kinds[0].norm_kind if kinds else "rms"
    if bool(centre(p.b_out.detach().float(), kind).any()):
        return False
    return not any(bool(n.beta.any()) for n in kinds)


class BlockWeights:
    """Reads the chain's weights of any block of one loaded model."""

    def __init__(self, loaded: LoadedModel, stat_dtype: torch.dtype) -> None:
        self.loaded = loaded
        self.stat_dtype = stat_dtype

    def norm(self, norm: Any, hidden: int, device: torch.device) -> NormParams:
        """A norm's weights in statistics dtype (ones / zeros where it has none)."""
        sd = self.stat_dtype
        gamma = getattr(norm, "weight", None)  # None: a norm without elementwise affine
        beta = getattr(norm, "bias", None)
        zeros = torch.zeros(hidden, dtype=sd, device=device)
        offset = self.loaded.adapter.gamma_offset  # Gemma's RMSNorm scales by 1 + weight
        return NormParams(
            gamma=gamma.detach().to(sd) + offset if gamma is not None else torch.ones_like(zeros),
            beta=beta.detach().to(sd) if beta is not None else zeros,
            eps=float(getattr(norm, self.loaded.adapter.norm_eps_attr)),
            norm_kind=self.loaded.adapter.norm_kind,
        )

    def ff(self, block: Any, hidden: int, device: torch.device) -> FFParams:
        """The feed-forward's weights (model dtype, shared, not copied) and activation."""
        a = self.loaded.adapter
        assert a.ff_in and a.ff_act and a.ff_out
        inputs = [block.get_submodule(a.ff_in)]
        if a.ff_up:
            inputs.append(block.get_submodule(a.ff_up))
        out = block.get_submodule(a.ff_out)
        sd = self.stat_dtype

        def bias(module: Any, width: int) -> torch.Tensor:
            b = getattr(module, "bias", None)
            return (
                b.detach().to(sd) if b is not None else torch.zeros(width, dtype=sd, device=device)
            )

        d_ff = out.weight.shape[0 if a.ff_transposed else 1]
        act = block.get_submodule(a.ff_act)
        parallel = a.parallel_residual
        weights = [m.weight.detach() for m in inputs]
        biases = [bias(m, 2 * d_ff if a.ff_fused_gate_up else d_ff) for m in inputs]
        if a.ff_fused_gate_up:  # one [2 · d_ff, hidden] matrix: the gate's rows, the up's
            weights, biases = list(weights[0].chunk(2, dim=0)), list(biases[0].chunk(2))
        return FFParams(
            inputs=tuple(weights),
            input_biases=tuple(biases),
            w_out=out.weight.detach(),
            b_out=bias(out, hidden),
            transposed=a.ff_transposed,
            act=act,
            slope0=slope_at_zero(act),
            placement="parallel" if parallel else a.placement,
            input_norm=(
                self.norm(block.get_submodule(a.norm_after), hidden, device) if parallel else None
            ),
        )

    def norm_of(self, norm: Any, p: BlockParams) -> NormParams:
        """:meth:`norm` on the hidden width and device of the block ``p`` describes."""
        return self.norm(norm, p.w_out.shape[0], p.w_out.device)

    def attention(self, block: Any, *, heads: int, kv_heads: int) -> BlockParams:
        """The attention branch's own weights: W_O and b_O, the norm inside the branch, the
        branch multiplier. The norms after the residual sums and the feed-forward come
        with the capture points that read them (mixing/points.py)."""
        a = self.loaded.adapter
        out_proj = block.get_submodule(a.out_proj)
        sd = self.stat_dtype
        w_out = out_proj.weight.detach()
        if a.out_proj_transposed:  # Conv1D keeps [in, out]
            w_out = w_out.t()
        w_out = w_out.to(sd).contiguous()  # [hidden, heads * head_dim]
        hidden, device = w_out.shape[0], w_out.device
        b_out = getattr(out_proj, "bias", None)
        branch_norm = a.attn_branch_norm
        config = self.loaded.model.config
        return BlockParams(
            w_out=w_out,
            b_out=(
                b_out.detach().to(sd)
                if b_out is not None
                else torch.zeros(hidden, dtype=sd, device=device)
            ),
            norm=None,  # the attn_norm point's
            heads=heads,
            kv_heads=kv_heads,
            attn_branch_norm=(
                None
                if branch_norm is None
                else self.norm(block.get_submodule(branch_norm), hidden, device)
            ),
            branch_scale=(
                float(getattr(config, a.branch_multiplier_attr))
                if a.branch_multiplier_attr
                else 1.0
            ),
        )

    def moe(self, experts: Any) -> MoEParams:
        """A mixture of experts' weights (``Adapter.moe_layout``), in → out views of the
        model's tensors; zeros for the biases a layout has none of."""
        a = self.loaded.adapter
        gate_up, down = experts.gate_up_proj.detach(), experts.down_proj.detach()
        if a.moe_layout == "interleaved":  # [E, hidden, 2F]: gate even columns, up odd
            bias = experts.gate_up_proj_bias.detach()
            return MoEParams(
                gate_up=gate_up,
                interleaved=True,
                gate_b=bias[:, ::2],
                up_b=bias[:, 1::2],
                down=down,  # [E, F, hidden]
                down_b=experts.down_proj_bias.detach(),
                act=None,
                alpha=float(experts.alpha),
                limit=float(experts.limit),
            )
        d_ff = gate_up.shape[1] // 2  # [E, 2F, hidden]: the gate's rows, then the up's
        zeros = torch.zeros(gate_up.shape[0], d_ff, dtype=gate_up.dtype, device=gate_up.device)
        return MoEParams(
            gate_up=gate_up.transpose(1, 2),  # [E, hidden, 2F]: the gate's columns first
            interleaved=False,
            gate_b=zeros,
            up_b=zeros,
            down=down.transpose(1, 2),  # [E, hidden, F] → [E, F, hidden]
            down_b=torch.zeros(down.shape[0], down.shape[1], dtype=down.dtype, device=down.device),
            act=experts.act_fn,
            slope0=slope_at_zero(experts.act_fn),
        )

    def add_moe(self, block: Any, experts: Any, p: BlockParams) -> None:
        """The experts' weights and the norm inside the FF branch, into ``p``."""
        a = self.loaded.adapter
        p.moe = self.moe(experts)
        if a.ff_branch_norm is not None:
            p.ff_branch_norm = self.norm_of(block.get_submodule(a.ff_branch_norm), p)

    def add_ff(self, block: Any, p: BlockParams) -> None:
        """The feed-forward's weights and the norm inside its branch, into ``p`` (whose
        attention norms are read already: whether a bias part reaches the FF)."""
        a = self.loaded.adapter
        hidden, device = p.w_out.shape[0], p.w_out.device
        p.ff = self.ff(block, hidden, device)
        if a.ff_branch_norm is not None:
            p.ff_branch_norm = self.norm(block.get_submodule(a.ff_branch_norm), hidden, device)
        p.ff.bias_free = ff_bias_free(p.ff, p)
