"""The measure registry: every measure group's metadata, in one torch-free module.

A *group* is the unit of computation, selection and storage (its tensor code is
``mixing/measures/<group>.py``, which reads its metadata from here). What every layer
needs to know of a group is stated here as data:

- its ``name`` (what ``analysis.measures`` / ``--measures`` select) and its ``columns``
  (names, labels, plot colours; a column may be *derived*: exactly a factor times another
  column of the group, computed by the engine and re-derived by the readers, not stored;
  or one bucket of a ``profile``, drawn with its siblings as one heatmap);
- where it applies (:meth:`Group.unsupported` gives the reason it does not, for an
  architecture adapter), so a group that does not apply is refused before any work;
- what the figures call its values (``axis_label``), and its own report section, if it has
  one (:class:`Section`: the report draws it from here, report/group_sections.py).

``GROUPS`` is in registry order, append-only: a stored measure's ``code`` (its index among
every group's stored columns) is what the histogram files store, so old runs read the same.
Selection resolves group names (or ``all``) into a :class:`MeasureSet`, the columns a run
computes and stores. Storage, statistics, SQL, the report and the CLI read this module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mixscope.errors import SpecError


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
class Section:
    """A group's own report section: one figure per run that has the group, drawn from a
    named query's rows (report/group_sections.py builds it; ``Results.plot(id)`` too)."""

    id: str  # the section's anchor, its plot name and its figures' file-name prefix
    heading: str
    query: str  # the named query whose rows the figure draws (one run's at a time)
    figure: str  # "module:function" of report/, ``(rows, title) -> Figure``
    title: str  # the figure's first title line (the run's label follows)
    intro: str  # the paragraph above the figures


def _everywhere(adapter: Any) -> str | None:  # noqa: ARG001 - the contract
    return None


@dataclass(frozen=True)
class Group:
    """One measure group's metadata (its tensor code: ``mixing/measures/<name>.py``)."""

    name: str
    #: one line: what the group measures and its source (paper, year)
    title: str
    columns: tuple[Column, ...]
    #: what the group's values are, as a figure's y axis (the per-layer figure's panel)
    axis_label: str = "mixing ratio (%)"
    #: the group reads α^h_i0, the weights on the first real position (the fast kernel
    #: computes them only for a batch whose groups read them; its panel keeps weight and
    #: norm together)
    first_position: bool = False
    #: the group reads every pair's weight α^h_ij: the eager path keeps the full weights,
    #: the fast kernel keeps q, k and its LSE to recompute them block by block
    pair_weights: bool = False
    #: the group measures something only some families have (learned sinks): ``all``
    #: skipping it on another family is expected, so it is recorded (run.json, the table's
    #: metadata) but not announced
    feature_of_some_families: bool = False
    #: why the group does not apply to an architecture adapter; None where it does
    applies: Callable[[Any], str | None] = _everywhere
    #: its own report section (None: its columns are drawn in the shared figures only)
    section: Section | None = None

    def unsupported(self, adapter: Any) -> str | None:
        """Why the group does not apply to this architecture; None when it does."""
        return self.applies(adapter)

    @property
    def stored(self) -> tuple[str, ...]:
        """The columns written to disk (derived ones are re-derived by the readers)."""
        return tuple(c.name for c in self.columns if c.derived is None)


def _post_ln(adapter: Any) -> str | None:
    if adapter.placement != "post" or adapter.ff_norm is None:
        return (
            f"it needs a post-LN block (LN2 after the feed-forward); {adapter.family} "
            "is pre-LN, where the paper's ATTNRESLN-N already reads LN2"
        )
    return None


def _feed_forward(adapter: Any) -> str | None:
    dense = adapter.ff_in and adapter.ff_act and adapter.ff_out
    if not (dense or adapter.moe_experts):
        return f"the {adapter.family} adapter names no feed-forward modules"
    if adapter.ff_norm is None and not adapter.final_norm:
        return f"the {adapter.family} adapter names no norm after the feed-forward"
    return None


def _learned_sinks(adapter: Any) -> str | None:
    if not adapter.learned_sinks:
        return f"{adapter.family} has no learned attention sinks"
    return None


#: the distance group's buckets (its stored columns: fixed, so their codes are stable);
#: ``analysis.distance_buckets`` by default and at most (at least 2)
DISTANCE_BUCKETS = 12
#: a sequential ramp per side, near to far (a profile is drawn as a heatmap, not as lines:
#: its buckets' colours are steps of one colour map, viridis for norms, inferno for weights)
_NORM_RAMP = (
    "#440154", "#481b6d", "#46327e", "#3f4788", "#375b8d", "#2e6d8e",
    "#277e8e", "#21908d", "#1fa188", "#2cb17e", "#48c16e", "#6ece58",
)  # fmt: skip
_WEIGHT_RAMP = (
    "#1e0c45", "#360961", "#4d0d6c", "#64156e", "#7a1d6d", "#902568",
    "#a62d60", "#bc3754", "#cf4446", "#e05536", "#ed6925", "#f68013",
)  # fmt: skip


def _span(b: int) -> str:
    """The distances of bucket b, as a label: 1, 2–3, …, ≥2048."""
    lo, hi = 2**b, 2 ** (b + 1) - 1
    if b == DISTANCE_BUCKETS - 1:
        return f"≥{lo}"
    return str(lo) if lo == hi else f"{lo}–{hi}"


def _distance_columns() -> tuple[Column, ...]:
    norms = tuple(
        Column(f"dist_n_{b}", f"DIST-N {_span(b)}", _NORM_RAMP[b], profile="dist_n")
        for b in range(DISTANCE_BUCKETS)
    )
    weights = tuple(
        Column(f"dist_w_{b}", f"DIST-W {_span(b)}", _WEIGHT_RAMP[b], dashed=True, profile="dist_w")
        for b in range(DISTANCE_BUCKETS)
    )
    return norms + weights


# ---- the groups, in registry order (append new groups at the end: stored codes follow it)

_GROUPS = (
    Group(
        "paper",
        "ATTN-W, ATTN-N, ATTNRES-W, ATTNRES-N, ATTNRESLN-N (Kobayashi et al., EMNLP 2021)",
        (
            Column("attn_w", "ATTN-W", "#17becf", dashed=True),
            Column("attn_n", "ATTN-N", "#3182bd", pair=True),
            Column("attnres_w", "ATTNRES-W", "#e7ba52", derived=("attn_w", 0.5), dashed=True),
            Column("attnres_n", "ATTNRES-N", "#e6550d", pair=True),
            Column("attnresln_n", "ATTNRESLN-N", "#31a354", pair=True),
        ),
    ),
    Group(
        "globenc",
        "N-Enc, the whole encoder layer up to LN2 (GlobEnc, Modarressi et al., NAACL 2022)",
        (Column("globenc_n", "GLOBENC-N", "#9467bd"),),
        applies=_post_ln,
    ),
    Group(
        "sink",
        "weight and norm drawn from the first position (attention sinks; Kobayashi 2020)",
        (
            Column("sink_w", "SINK-W", "#c49c94", dashed=True),
            Column("sink_n", "SINK-N", "#01665e"),
        ),
        axis_label="drawn from the first position (%)",
        first_position=True,
        section=Section(
            "sink",
            "The first position: attention weight and norm",
            "sink_profile",
            "mixscope.report.plots:sink_profile",
            "The first position",
            "Mean attention weight on the first position ([CLS], BOS or the first token; "
            "dashed) and the share of the attention output's norm that comes from it "
            "(solid), per layer and token category: where the weight is high and the norm "
            "share low, the first position is a sink that contributes little.",
        ),
    ),
    Group(
        "ff",
        "ATBFF, ATBFFRES, ATBFFRESLN: the feed-forward block, its residual and the norm "
        "after it (Kobayashi et al., ICLR 2024)",
        (
            Column("ff_n", "FF-N", "#f768a1"),
            Column("ffres_n", "FFRES-N", "#000000"),
            Column("ffresln_n", "FFRESLN-N", "#393b79"),
        ),
        applies=_feed_forward,
    ),
    Group(
        "learned_sink",
        "the learned attention sinks' mass (gpt-oss: a per-head logit with no value)",
        (Column("lsink_w", "LSINK-W", "#8c564b", dashed=True),),
        axis_label="the learned sinks' mass (%)",
        feature_of_some_families=True,
        applies=_learned_sinks,
    ),
    Group(
        "distance",
        "share of the context by distance, by norm and by weight (Kobayashi 2020's norms)",
        _distance_columns(),
        axis_label="share of the context (%)",
        pair_weights=True,
        section=Section(
            "distance",
            "How far each layer reaches: distance by norm and by weight",
            "distance_profile",
            "mixscope.report.distance:distance_figure",
            "How far each layer reaches",
            "Share of each token's context that comes from each distance (tokens, buckets "
            "1, 2–3, 4–7, …; the last open-ended), per layer, over the tokens with context: "
            "by the per-pair norms of the attention's parts (Kobayashi et al. 2020), by the "
            "attention weights, and norm − weight. Right: the mean reach in tokens by each "
            "(bucket midpoints; the open-ended bucket at its lower edge).",
        ),
    ),
)
#: every group, in registry order
GROUPS: dict[str, Group] = {g.name: g for g in _GROUPS}
#: what a job computes when it names no groups (runs written before groups existed)
DEFAULT_GROUPS = ("paper",)
#: the selection word for every group that applies to the model
ALL = "all"


def all_columns() -> tuple[Column, ...]:
    """Every group's columns, in registry order."""
    return tuple(c for g in GROUPS.values() for c in g.columns)


def column(name: str) -> Column:
    """A column by name (any group)."""
    for c in all_columns():
        if c.name == name:
            return c
    raise KeyError(name)


#: the stable code of every stored measure (histogram files' ``measure`` column)
CODES: dict[str, int] = {
    c.name: k for k, c in enumerate(c for c in all_columns() if c.derived is None)
}


def group_of(measure: str) -> str:
    """The group a column belongs to."""
    for g in GROUPS.values():
        if any(c.name == measure for c in g.columns):
            return g.name
    raise KeyError(measure)


def parse_names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"paper,sink"``, ``["paper", "sink"]`` or None → the names, checked against
    :data:`GROUPS` (``all`` kept as it is); duplicates dropped, registry order. A bad name
    is a :class:`~mixscope.errors.SpecError` (exit 2 from the CLI)."""
    if value is None:
        return DEFAULT_GROUPS
    items = [value] if isinstance(value, str) else list(value)
    wanted = [n.strip() for item in items for n in str(item).split(",") if n.strip()]
    groups = ", ".join(GROUPS)
    if not wanted:
        raise SpecError(f"measures: name at least one group ({groups}) or all")
    unknown = [n for n in wanted if n != ALL and n not in GROUPS]
    if unknown:
        raise SpecError(f"measures: unknown group {unknown[0]!r}; groups: {groups}, or all")
    if ALL in wanted:
        return (ALL,)
    return tuple(n for n in GROUPS if n in wanted)


@dataclass(frozen=True)
class Selection:
    """Groups resolved for one model: those that run, and those ``all`` skipped (why)."""

    groups: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def noteworthy_skips(self) -> dict[str, str]:
        """The skipped groups a user is told of: not those that measure a feature only some
        families have (``learned_sink`` on a model without learned sinks)."""
        return {n: r for n, r in self.skipped if not GROUPS[n].feature_of_some_families}

    @property
    def measures(self) -> MeasureSet:
        return measure_set(self.groups)


def select(value: str | Iterable[str] | None, adapter: Any) -> Selection:
    """The groups of ``value`` for the model ``adapter`` describes. A group named
    explicitly that does not apply is refused (one line naming it and why); ``all``
    skips it and says so in ``skipped``."""
    names = parse_names(value)
    if names == (ALL,):
        reasons = {n: g.unsupported(adapter) for n, g in GROUPS.items()}
        return Selection(
            tuple(n for n, r in reasons.items() if r is None),
            tuple((n, r) for n, r in reasons.items() if r is not None),
        )
    for n in names:
        reason = GROUPS[n].unsupported(adapter)
        if reason is not None:
            raise SpecError(f"measures: group {n!r} does not apply to this model: {reason}")
    return Selection(names)


@dataclass(frozen=True)
class MeasureSet:
    """The columns of a set of groups, in registry order: what a run computes and stores."""

    groups: tuple[str, ...]
    columns: tuple[str, ...] = field(init=False)
    stored: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        cols = [c for n in self.groups for c in GROUPS[n].columns]
        object.__setattr__(self, "columns", tuple(c.name for c in cols))
        object.__setattr__(self, "stored", tuple(c.name for c in cols if c.derived is None))

    @property
    def derived(self) -> dict[str, tuple[str, float]]:
        """Derived column → (its stored source, factor)."""
        return {c: d for c in self.columns if (d := column(c).derived) is not None}

    @property
    def pair(self) -> tuple[str, ...]:
        """The columns with per-pair contribution maps."""
        return tuple(c for c in self.columns if column(c).pair)

    @property
    def codes(self) -> tuple[int, ...]:
        """The stable code of each stored column (histogram files)."""
        return tuple(CODES[m] for m in self.stored)

    def stored_index(self) -> list[int]:
        """Where each stored column sits in ``columns`` (the engine's measure axis)."""
        return [self.columns.index(m) for m in self.stored]


@functools.cache
def measure_set(groups: tuple[str, ...]) -> MeasureSet:
    """The (cached) :class:`MeasureSet` of ``groups``, put in registry order."""
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise SpecError(f"unknown measure group {unknown[0]!r}; groups: {', '.join(GROUPS)}")
    return MeasureSet(tuple(n for n in GROUPS if n in groups))


#: the default selection's columns (the package root's ``MEASURES``; what a job computes
#: when it names no groups)
DEFAULT = measure_set(DEFAULT_GROUPS)


def measure_groups() -> dict[str, tuple[str, ...]]:
    """Every measure group (``analysis.measures``) and its columns, in registry order
    (``mixscope.measure_groups()``)."""
    return {name: tuple(c.name for c in g.columns) for name, g in GROUPS.items()}


def stored_measures_of(names: Iterable[str]) -> tuple[str, ...]:
    """The stored measures among column names such as ``<measure>_sum`` or ``<measure>`` (a
    file's schema), in registry order: what a file written by any run holds."""
    present = set(names)
    out = []
    for m in CODES:
        if m in present or any(
            n.startswith(m + "_") and n[len(m) + 1 :] in _STATS for n in present
        ):
            out.append(m)
    return tuple(out)


#: the suffixes of a stored measure's statistics columns (store/schema.py)
_STATS = frozenset({"sum", "sumsq", "min", "max", "seq_sum", "seq_sumsq"})
