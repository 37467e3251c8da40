"""The measure-group contract's tensor side: a group is the unit of computation, selection
and storage.

A *group* computes a few measures that share their work: the paper's five share one pass
over the attention block's vectors, in place, which is what makes them cheap. Its metadata
(name, columns, labels, colours, where it applies, its report section) is data in the
torch-free registry (``mixscope/registry.py``), which every layer reads; its file here
(one per group) holds what only the engine needs:

- what it needs captured from the forward pass (``needs``: names of
  :mod:`mixscope.mixing.points`; ``verify_needs``: more for its exactness check);
- its tensor code: :meth:`MeasureGroup.compute` returns ``[measure, batch, seq]`` in the
  order of its columns (the engine checks the shape), and :meth:`MeasureGroup.check` its
  exactness identity's residuals. Both read the block through its chain
  (:class:`mixscope.mixing.chain.BlockChain`): the named scopes (attention, attention +
  residual, its norm; the FF's input and stream) are computed there once per block and
  shared, so no group re-derives a residual or a norm's split.

This module and the group files import no torch at module load; the tensor code imports
it where it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mixscope.registry import GROUPS, Column, Group

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.chain import BlockChain


@dataclass(frozen=True)
class BatchInfo:
    """What every block of one batch shares (the padding layout, [batch, seq] tensors)."""

    valid: torch.Tensor  # [batch, seq] bool: a real token
    no_context: torch.Tensor  # [batch, seq] bool: a real token with no other token to mix in
    first_position: torch.Tensor  # [batch] long: each sequence's first real position
    #: the distance profile's bucket count (``analysis.distance_buckets``, the run's setting)
    buckets: int = 12


@dataclass(frozen=True)
class Residual:
    """One exactness residual: ``what`` rebuilt vs real, its largest relative error, and
    whether it is held to the norm's dtype (a norm that computes in float32) or the model's."""

    what: str
    error: float
    norm: bool = False


class MeasureGroup:
    """Subclassed once per group file; instances are stateless. ``name`` links it to its
    registry entry (:attr:`info`), whence its columns and the rest of its metadata."""

    name: str = ""
    needs: frozenset[str] = frozenset()
    verify_needs: frozenset[str] = frozenset()

    @property
    def info(self) -> Group:
        """The group's metadata (registry.py)."""
        return GROUPS[self.name]

    @property
    def title(self) -> str:
        return self.info.title

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.info.columns

    @property
    def stored(self) -> tuple[str, ...]:
        """The columns written to disk (derived ones are re-derived by the readers)."""
        return self.info.stored

    @property
    def first_position(self) -> bool:
        """The group reads α^h_i0 (registry: ``Group.first_position``)."""
        return self.info.first_position

    @property
    def pair_weights(self) -> bool:
        """The group reads every pair's weight α^h_ij (registry: ``Group.pair_weights``)."""
        return self.info.pair_weights

    def unsupported(self, adapter: Any) -> str | None:
        """Why the group does not apply to this architecture; None when it does."""
        return self.info.unsupported(adapter)

    def compute(self, block: BlockChain, batch: BatchInfo) -> torch.Tensor:
        """The group's measures of every token of one block: [measure, batch, seq]."""
        raise NotImplementedError

    def check(
        self, exact: BlockChain, batch: BatchInfo
    ) -> list[Residual]:  # pragma: no cover - every group overrides it
        """The residuals of the group's exactness identity: ``exact`` is the block's chain
        with Σ_j a_ij rebuilt from the full α and the per-head vectors (eager path)."""
        raise NotImplementedError
