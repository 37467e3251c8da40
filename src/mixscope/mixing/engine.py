"""Runs a stock transformers model once and decomposes every attention block on the fly.

The forward pass stops once the last block's measures are computed (``ForwardDone``):
nothing after it (a post-LN model's last feed-forward, a pooler) is read.

Forward hooks (module paths from the adapter) capture the block's input, values, attention
weights, output projection and norm; when the norm fires, the block's measures are computed
and every large tensor is dropped, so memory stays at what the forward pass itself needs
plus O(batch · seq) per layer.

The attention weights come from one of two implementations (``attention``): the fast one
(fast_attention.py, a fused kernel whose module output carries only α_ii [batch, heads,
seq], so memory is O(seq)) or eager (the full [batch, heads, seq, seq] weights, which the
per-pair maps and the exactness check read whole).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mixscope.errors import MixscopeError
from mixscope.mixing import ATTENTION_MODES
from mixscope.mixing.block_weights import BlockWeights
from mixscope.mixing.capture import Capture, ForwardDone
from mixscope.mixing.chain import BlockChain
from mixscope.mixing.distance import DEFAULT_BUCKETS, check_buckets
from mixscope.mixing.exactness import attention_sum, check_residuals
from mixscope.mixing.fast_attention import FAST_ATTENTION, forward_state, register
from mixscope.mixing.measures import GROUPS, MeasureSet, Selection, select
from mixscope.mixing.measures.base import BatchInfo
from mixscope.mixing.pairs import pair_norms
from mixscope.mixing.points import BASE, ModelPoints
from mixscope.models.loading import LoadedModel


@dataclass
class EngineOutput:
    measures: torch.Tensor  # [batch, layer, measure, seq] float32 on the model's device (columns)
    pairs: torch.Tensor | None  # [batch, layer, measure, seq, seq] float32 (PAIR_MEASURES)
    max_exactness_error: float | None  # largest identity residual seen (verify only)


def _stat_dtype(model_dtype: torch.dtype) -> torch.dtype:
    """Statistics are float32 (float64 when the model runs in float64)."""
    return torch.float64 if model_dtype == torch.float64 else torch.float32


@contextlib.contextmanager
def attention_implementation(model: Any, name: str) -> Iterator[None]:
    """Temporarily switch a model's attention implementation ("eager" or the fast one)."""
    current = getattr(model.config, "_attn_implementation", "eager")
    if current == name:
        yield
        return
    model.set_attn_implementation(name)
    try:
        yield
    finally:
        model.set_attn_implementation(current)


class MixingEngine:
    """Decomposes every block of one loaded model; a plain class (no Ray), reused per batch."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        verify: bool = False,
        attention: str = "auto",
        measures: Any = None,
        distance_buckets: int = DEFAULT_BUCKETS,
    ) -> None:
        if attention not in ATTENTION_MODES:
            raise MixscopeError(
                f"attention must be one of {', '.join(ATTENTION_MODES)}, got {attention!r}"
            )
        if attention == "fast" and verify:
            raise MixscopeError(
                "the exactness check reads the full attention weights: use attention "
                "'auto' or 'eager' with verify"
            )
        self.loaded = loaded
        self.verify = verify
        self.distance_buckets = check_buckets(distance_buckets)
        self.attention = attention
        # the selected groups (``measures``: names, "all", or a resolved Selection); a
        # group named explicitly that does not apply to the model is refused here
        self.selection: Selection = (
            measures if isinstance(measures, Selection) else select(measures, loaded.adapter)
        )
        self.groups = [GROUPS[n] for n in self.selection.groups]
        if attention != "eager":
            register()
        # batch · width (tokens) that last ran out of device memory; run_batches keeps
        # later batches below it
        self.oom_token_limit: int | None = None
        model = loaded.model
        adapter = loaded.adapter
        self.model_dtype = next(model.parameters()).dtype
        self.stat_dtype = _stat_dtype(self.model_dtype)
        # the dtype the norm really computes in, for the exactness tolerance
        self.norm_dtype = (
            torch.float32
            if adapter.norm_in_float32 and self.model_dtype == torch.float64
            else self.model_dtype
        )
        config = model.config
        heads = int(getattr(config, adapter.heads_attr))
        kv_heads = (
            int(getattr(config, adapter.kv_heads_attr, heads)) if adapter.kv_heads_attr else heads
        )
        # each block's params: the attention's own weights and what the points the selected
        # groups read (computing, or checking under verify) bring (mixing/points.py)
        self.points = ModelPoints(loaded, BlockWeights(loaded, self.stat_dtype))
        reads = BASE.union(*(g.needs | g.verify_needs for g in self.groups))
        needs = self.points.expand(reads)
        self.params = [
            self.points.params(idx, needs, heads, kv_heads) for idx in range(self.num_layers)
        ]

    @property
    def num_layers(self) -> int:
        return self.points.num_layers

    @property
    def measure_set(self) -> MeasureSet:
        """The columns of the engine's output, in order."""
        return self.selection.measures

    def no_context(self, valid: torch.Tensor) -> torch.Tensor:
        """Real tokens with no other real token to attend to: [batch, seq] bool.

        Causal models: the first real token of each sequence (whatever the padding side);
        bidirectional ones: only a sequence of a single token.
        """
        if self.loaded.adapter.causal:
            seen = valid.long().cumsum(-1)  # real tokens at positions <= i
        else:
            seen = valid.long().sum(-1, keepdim=True).expand_as(valid)
        return valid & (seen == 1)

    def implementation(self, pairs: bool) -> str:
        """The attention implementation one batch runs with: eager where α is read whole."""
        if self.attention == "fast" and pairs:
            raise MixscopeError("per-pair maps read the full attention weights: not with 'fast'")
        if self.attention == "eager" or pairs or self.verify:
            return "eager"
        return FAST_ATTENTION

    def batch_info(self, valid: torch.Tensor) -> BatchInfo:
        """The padding layout every block of a batch shares (``valid`` [batch, seq] bool)."""
        return BatchInfo(
            valid=valid,
            no_context=self.no_context(valid),
            first_position=valid.long().argmax(dim=-1),  # [batch] the first real position
            buckets=self.distance_buckets,
        )

    def _finish(
        self, capture: Capture, idx: int, store: dict[str, Any], out: list[Any], pairs: bool
    ) -> None:
        """A block's measures from what its hooks kept (``out``: per-layer results)."""
        batch: BatchInfo = store["batch"]
        t = capture.tensors(store)
        p = self.params[idx]
        if self.verify:  # the scopes again, with Σ_j a_ij rebuilt from α and the values
            exact = BlockChain(t, p, attention_sum(t, p))
            residuals = [r for g in self.groups for r in g.check(exact, batch)]
            out[2].append(check_residuals(residuals, self.model_dtype, idx + 1, self.norm_dtype))
        block = BlockChain(t, p)
        parts = []
        for g in self.groups:
            got = g.compute(block, batch)
            expected = (len(g.columns), *batch.valid.shape)
            if tuple(got.shape) != expected:
                raise MixscopeError(
                    f"measure group {g.name!r} returned {tuple(got.shape)}, not "
                    f"{expected} (one row per declared column)"
                )
            parts.append(got)  # [k, batch, seq]
        out[0][idx] = torch.cat(parts).float()  # [measure, batch, seq]
        if pairs:
            out[1][idx] = pair_norms(block, causal=self.loaded.adapter.causal).float()

    @torch.inference_mode()
    def run(
        self,
        input_ids: torch.Tensor,  # [batch, seq]
        attention_mask: torch.Tensor,  # [batch, seq] 1 = token, 0 = padding
        token_type_ids: torch.Tensor | None = None,  # [batch, seq]
        *,
        pairs: bool = False,
    ) -> EngineOutput:
        """One forward pass; the selected groups' measures of every block for every position."""
        implementation = self.implementation(pairs)
        model = self.loaded.model
        a = self.loaded.adapter
        device = next(model.parameters()).device
        valid = attention_mask.to(device).bool()  # [batch, seq]
        batch = self.batch_info(valid)
        # the block's own tensors always (holding references costs nothing), then what
        # the groups read besides
        needs = BASE.union(*(g.needs for g in self.groups))
        if self.verify:
            needs |= frozenset().union(*(g.verify_needs for g in self.groups))
        # α_i0, the weights on the first real position, only where a group reads them
        needs_alpha_first = any(g.first_position for g in self.groups)
        # every pair's weight: eager keeps the full α, the fast kernel its q, k and LSE
        pair_weights = any(g.pair_weights for g in self.groups)
        capture = Capture(
            self.points,
            self.params,
            needs,
            stat_dtype=self.stat_dtype,
            full_alpha=pairs or self.verify or pair_weights,
            alpha_first=needs_alpha_first,
        )
        # per-layer measures, per-layer maps, exactness residuals
        out: list[Any] = [[None] * self.num_layers, [None] * self.num_layers, []]

        inputs: dict[str, Any] = {
            "input_ids": input_ids.to(device),
            "attention_mask": attention_mask.to(device),
            **dict(a.forward_kwargs),
        }
        if a.uses_token_type_ids and token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids.to(device)
        if a.position_ids:  # positions count real tokens only: left padding changes nothing
            inputs["position_ids"] = (valid.long().cumsum(-1) - 1).clamp_min(0)
        was_training = model.training
        model.eval()
        try:
            with (
                capture.hooks(batch, lambda i, store: self._finish(capture, i, store, out, pairs)),
                forward_state(
                    batch.first_position if needs_alpha_first else None, scores=pair_weights
                ),
                attention_implementation(model, implementation),
            ):
                model(**inputs)  # ends early: the model's output is never read
        except ForwardDone:
            pass
        finally:
            model.train(was_training)

        per_layer, per_layer_pairs, max_err = out
        ran = [m for m in per_layer if m is not None]
        if len(ran) != len(per_layer):
            raise MixscopeError("some blocks did not run; the adapter does not match this model")
        measures = torch.stack(ran, dim=1)  # [measure, layer, batch, seq]
        # on the model's device: the statistics are accumulated there (stats/accumulate.py)
        measures = measures.permute(2, 1, 0, 3).contiguous()  # [batch, layer, measure, seq]
        pair_out = None
        if pairs:
            maps = [m for m in per_layer_pairs if m is not None]
            stacked = torch.stack(maps, dim=1)  # [measure, layer, batch, seq, seq]
            pair_out = stacked.permute(2, 1, 0, 3, 4).contiguous()
        return EngineOutput(measures, pair_out, max(max_err) if max_err else None)
