"""The measure-group contract: a group is the unit of computation, selection and storage.

A *group* (one file in this package) computes a few measures that share their work: the
paper's five share one pass over the attention block's vectors, in place, which is what
makes them cheap. It states, as data, everything the rest of mixscope needs to know:

- its ``name`` (what ``analysis.measures`` / ``--measures`` select) and its ``columns``
  (names, labels, plot colours; a column may be *derived*: exactly a factor times another
  column of the group, computed by the engine and re-derived by the readers, not stored);
- where it applies (:meth:`MeasureGroup.unsupported` gives the reason it does not, for an
  architecture adapter), so a group that does not apply is refused before any work;
- what it needs captured from the forward pass (``needs``: names of
  :mod:`mixscope.mixing.points`; ``verify_needs``: more for its exactness check);
- its tensor code: :meth:`MeasureGroup.compute` returns ``[measure, batch, seq]`` in the
  order of its columns (the engine checks the shape), and :meth:`MeasureGroup.check` its
  exactness identity's residuals. Both read the block through its chain
  (:class:`mixscope.mixing.chain.BlockChain`): the named scopes (attention, attention +
  residual, its norm; the FF's input and stream) are computed there once per block and
  shared, so no group re-derives a residual or a norm's split.

This module and the group files import no torch at module load (the CLI, the Arrow schemas
and the SQL views read the metadata); the tensor code imports it where it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from mixscope.mixing.chain import BlockChain
    from mixscope.models.adapters import Adapter


@dataclass(frozen=True)
class Column:
    """One measure: its column name everywhere (tensors, Parquet, SQL, plots)."""

    name: str
    label: str  # the name in figures and tables (the paper's name where there is one)
    color: str  # its colour in every figure
    #: derived exactly from another column of the group: (source, factor); not stored
    derived: tuple[str, float] | None = None
    #: the column has per-pair contribution maps ‖P_ij‖ (``contribution_maps``)
    pair: bool = False
    #: dashed in figures (attention weights, as opposed to norms)
    dashed: bool = False
    #: one bucket of a profile (the ``distance`` group's shares by distance): drawn with
    #: the profile's other buckets as one heatmap, not as a line of its own
    profile: str | None = None


@dataclass(frozen=True)
class BatchInfo:
    """What every block of one batch shares (the padding layout, [batch, seq] tensors)."""

    valid: torch.Tensor  # [batch, seq] bool: a real token
    no_context: torch.Tensor  # [batch, seq] bool: a real token with no other token to mix in
    first: torch.Tensor  # [batch] long: the sequence's first real position (padding aside)
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
    """Subclassed once per group file; instances are stateless."""

    name: str = ""
    #: one line: what the group measures and its source (paper, year)
    title: str = ""
    columns: tuple[Column, ...] = ()
    #: what the group's values are, as a figure's y axis (the per-layer figure's panel)
    axis_label: str = "mixing ratio (%)"
    needs: frozenset[str] = frozenset()
    verify_needs: frozenset[str] = frozenset()
    #: the group reads α^h_i0, the weights on the first real position (the fast kernel
    #: computes them only for a batch whose groups read them)
    first_position: bool = False
    #: the group reads every pair's weight α^h_ij: the eager path keeps the full weights,
    #: the fast kernel keeps q, k and its LSE to recompute them block by block
    pair_weights: bool = False
    #: the group measures something only some families have (learned sinks): ``all``
    #: skipping it on another family is expected, so it is recorded (run.json, the table's
    #: metadata) but not announced
    feature_of_some_families: bool = False

    def unsupported(self, adapter: Adapter) -> str | None:  # noqa: ARG002 - the contract
        """Why the group does not apply to this architecture; None when it does."""
        return None

    def compute(self, block: BlockChain, batch: BatchInfo) -> torch.Tensor:
        """The group's measures of every token of one block: [measure, batch, seq]."""
        raise NotImplementedError

    def check(
        self, exact: BlockChain, batch: BatchInfo
    ) -> list[Residual]:  # pragma: no cover - every group overrides it
        """The residuals of the group's exactness identity: ``exact`` is the block's chain
        with Σ_j a_ij rebuilt from the full α and the per-head vectors (eager path)."""
        raise NotImplementedError

    @property
    def stored(self) -> tuple[str, ...]:
        """The columns written to disk (derived ones are re-derived by the readers)."""
        return tuple(c.name for c in self.columns if c.derived is None)
