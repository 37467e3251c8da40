"""The explicit, versioned Arrow schemas of everything a job writes, in one place.

Readers (pandas, polars, DuckDB, Spark) rely on these names and types; bump
``SCHEMA_VERSION`` (in ``mixscope/_version.py``) on any change and say here what changed.

- 1: one long row per token per layer (``TOKENS_SCHEMA``).
- 2: statistics first. Every shard writes sufficient statistics (``STATS``); per-token
  detail is optional (``output.detail``) and compact: one row per token, each stored
  measure a list over layers (``detail_schema``); a derived measure (exactly a factor
  times a stored one, ``Column.derived``) is not stored, the readers derive it.
- 3: ``token_hist`` is keyed by ``original_id`` too (token id as seen, original id,
  category, measure, bin), so a masked occurrence's histogram counts can be attributed to
  the token it replaced (the frequency queries rank it by that token). Readers of schema-2
  runs see ``original_id`` NULL there (``coalesce(original_id, token_id)``).
- 4: a shard's ``token_stats`` file leaves ``*_sumsq``, ``*_min`` and ``*_max`` NULL on
  rows with ``n = 1`` (more than half the rows of a shard: most keys occur once there),
  where they are functions of ``*_sum`` (Σ² = Σ·Σ, min = max = Σ as float32, exactly);
  ``StatsKind.singletons`` says how each is restored, and every reader restores it
  (``stats.singletons.restore``, the SQL views). Consolidated files are dense.
  ``token_stats`` and ``token_hist`` files no longer repeat the token string on every row
  (a fifth of their encoding time): the new ``token_strings`` (token id → string, one row
  per id a shard's statistics name) holds it once, and the views attach it by token id
  (``StatsKind.token_key``). Readers of older runs read the string from their files.

- Measure groups (``registry.py``; no new version: a run of the paper's group
  alone writes exactly what schema 4 wrote, so its files and run id stay). A run stores
  the columns of the groups it selected (``analysis.measures``): the detail lists, the
  statistics' ``<measure>_<stat>`` columns and the histograms' ``measure`` codes (each
  stored measure's stable code, ``registry.CODES``; the paper's four keep 0–3).
  The schemas below are functions of a run's stored measures; readers take the measures
  a file holds from its columns.

The measure names live in their groups' files only; the schemas, the SQL views, the named
queries and the report are generated from the registry (tests/test_structure.py checks
it), so adding a measure is one file and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from mixscope._version import SCHEMA_VERSION
from mixscope.registry import DEFAULT

#: the default selection's (the paper's group) columns: the measures of ``TOKENS_SCHEMA``
#: and of runs written before groups existed (a run's own: its ``RunRecord.measure_set``)
MEASURE_COLUMNS = DEFAULT.columns
#: the default selection's stored measures
STORED_MEASURES = DEFAULT.stored
#: the per-pair contribution norms of contribution maps
PAIR_MEASURES = DEFAULT.pair

#: token categories, stored as int8 codes (their index here)
CATEGORIES = ("normal", "mask", "cls", "sep", "other_special")
#: the category code of "every token of the sequence" in ``sequence_stats``
ALL_TOKENS = -1
#: special-token strings of the supported tokenizers, by role
CLS_TOKENS = ("[CLS]", "<s>", "<cls>", "<|begin_of_text|>", "<bos>")
SEP_TOKENS = ("[SEP]", "</s>", "<sep>", "<|endoftext|>", "<|end_of_text|>", "<eos>")

#: histogram grid: bin b of a measure holds values in [b / HIST_BINS, (b + 1) / HIST_BINS)
#: (1.0 falls in the last bin). Ranks from bin totals bound Spearman's error (METHOD in README).
HIST_BINS = 4096

from mixscope.choices import DETAIL_MODES, PRECISIONS  # noqa: E402, F401 (re-exported)


def category_codes(
    is_special: np.ndarray, is_masked: np.ndarray, strings: np.ndarray
) -> np.ndarray:
    """int8 category of each token: mask, normal, then cls / sep / other_special by the
    string of the token (``strings``: one per special token, in order)."""
    codes = np.zeros(len(is_special), dtype=np.int8)
    special = np.flatnonzero(is_special)
    codes[special] = np.where(
        np.isin(strings, CLS_TOKENS), 2, np.where(np.isin(strings, SEP_TOKENS), 3, 4)
    )
    codes[is_masked] = 1
    return codes


def category_sql(code: str) -> str:
    """A SQL expression turning the int8 ``code`` column into the category's name."""
    whens = " ".join(f"WHEN {k} THEN '{c}'" for k, c in enumerate(CATEGORIES))
    return f"CASE {code} WHEN {ALL_TOKENS} THEN 'all' {whens} END"


# -- what analyze() returns (and schema 1 stored) ----------------------------------------


def tokens_schema(columns: tuple[str, ...]) -> pa.Schema:
    """What ``analyze()`` returns: one long row per token and layer, one float32 column per
    measure of the selected groups (``columns``)."""
    return pa.schema(
        [*_TOKEN_FIELDS, *[pa.field(m, pa.float32(), nullable=False) for m in columns]],
        metadata={"mixscope.schema_version": "1"},
    )


_TOKEN_FIELDS = pa.schema(
    [
        pa.field("doc_id", pa.int64(), nullable=False),  # index of the document in its corpus
        pa.field("segment", pa.int32(), nullable=False),  # 0-based piece of a long document
        pa.field("position", pa.int32(), nullable=False),  # 0-based, special tokens included
        pa.field("token_id", pa.int32(), nullable=False),  # the id the model saw ([MASK] if masked)
        pa.field("token", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("token_type", pa.int8(), nullable=False),  # segment id of a (text, text_pair)
        pa.field("is_special", pa.bool_(), nullable=False),
        pa.field("is_masked", pa.bool_(), nullable=False),
        pa.field("layer", pa.int16(), nullable=False),  # 1-based, as in the paper
    ]
)
#: the default selection's (the paper's group) ``analyze()`` schema
TOKENS_SCHEMA = tokens_schema(MEASURE_COLUMNS)

# -- per-token detail (output.detail = full | sample) ------------------------------------

_META = {"mixscope.schema_version": str(SCHEMA_VERSION)}


def detail_schema(precision: str = "float32", *, stored: tuple[str, ...]) -> pa.Schema:
    """One row per token; each stored measure (``stored``: the run's) is the list of its
    values at layers 1..L."""
    value = pa.float16() if precision == "float16" else pa.float32()
    return pa.schema(
        [
            pa.field("doc_id", pa.int64(), nullable=False),
            pa.field("segment", pa.int32(), nullable=False),
            pa.field("position", pa.int32(), nullable=False),
            pa.field("token_id", pa.int32(), nullable=False),  # as the model saw it
            pa.field("original_id", pa.int32(), nullable=False),  # before masking
            pa.field("token", pa.dictionary(pa.int32(), pa.string()), nullable=False),
            pa.field("token_type", pa.int8(), nullable=False),
            pa.field("is_special", pa.bool_(), nullable=False),
            pa.field("is_masked", pa.bool_(), nullable=False),
            pa.field("category", pa.int8(), nullable=False),  # index into CATEGORIES
            *[pa.field(m, pa.list_(value), nullable=False) for m in stored],
        ],
        metadata=_META,
    )


# -- sufficient statistics ----------------------------------------------------------------


#: a consolidated file's exact twin of each float sum (sums of measures are >= 0): the
#: fixed-point integer q = round(s · 2^70) in two int64 limbs, ``<sum>_hi`` = q >> 50 and
#: ``<sum>_lo`` = q mod 2^50. Limbs add exactly (carries normalized after each merge), so a
#: run's consolidated statistics are the same bits whatever order its shards were merged in
#: (generations, retries, resumes); resolution 2^-70 (1e-21) per shard sum, below 2^43.
EXACT_SCALE_BITS = 70
EXACT_LO_BITS = 50
EXACT_LIMBS = ("_hi", "_lo")


@dataclass(frozen=True)
class StatsKind:
    """One statistics table: its key columns and how each value column merges."""

    name: str
    keys: tuple[tuple[str, pa.DataType], ...]
    #: value columns not per measure: (column, type, merge: sum | min | max)
    shared: tuple[tuple[str, pa.DataType, str], ...]
    doc: str
    #: per stored measure m, the columns ``<m>_<stat>``: (stat, type, merge)
    moments: tuple[tuple[str, pa.DataType, str], ...] = ()
    #: the stored measures whose moments this kind holds: a run's, never assumed (none in
    #: the base kinds of ``STATS``; :meth:`with_measures`, :meth:`for_columns`, :func:`stats_kinds`)
    measures: tuple[str, ...] = ()
    #: moments a shard's file leaves NULL where ``n = 1`` (restored from ``<m>_sum``:
    #: ``sumsq`` squared, the others the same); see :data:`SCHEMA_VERSION` 4
    singleton_stats: tuple[str, ...] = ()
    #: the id column whose string (``token_strings``) the views attach as ``token``
    token_key: str = ""

    @property
    def values(self) -> tuple[tuple[str, pa.DataType, str], ...]:
        """Every value column: (column, type, merge: sum | min | max)."""
        per_measure = tuple(
            (f"{m}_{stat}", t, op) for m in self.measures for stat, t, op in self.moments
        )
        return self.shared + per_measure

    @property
    def singletons(self) -> tuple[tuple[str, str, str], ...]:
        """Columns a shard's file leaves NULL where ``n = 1``: (column, the ``*_sum``
        column it is restored from, "square" | "same")."""
        return tuple(
            (f"{m}_{stat}", f"{m}_sum", "square" if stat == "sumsq" else "same")
            for m in self.measures
            for stat in self.singleton_stats
        )

    def with_measures(self, stored: tuple[str, ...]) -> StatsKind:
        """This kind for a run that stores ``stored``."""
        return replace(self, measures=tuple(stored)) if self.moments else self

    def for_columns(self, names: list[str] | tuple[str, ...]) -> StatsKind:
        """This kind for a file with these columns (the measures it holds)."""
        from mixscope.registry import stored_measures_of

        return self.with_measures(stored_measures_of(names)) if self.moments else self

    @property
    def singleton_columns(self) -> frozenset[str]:
        """The columns a shard's file leaves NULL where ``n = 1``."""
        return frozenset(c for c, _, _ in self.singletons)

    @property
    def schema(self) -> pa.Schema:
        """A shard's file: float64 sums; the ``singletons`` columns nullable."""
        nullable = self.singleton_columns
        fields = [pa.field(k, t, nullable=False) for k, t in self.keys]
        fields += [pa.field(v, t, nullable=v in nullable) for v, t, _ in self.values]
        return pa.schema(fields, metadata=_META)

    @property
    def dense_schema(self) -> pa.Schema:
        """What readers see (and consolidated files hold before their limbs): no NULLs."""
        fields = [pa.field(f.name, f.type, nullable=False) for f in self.schema]
        return pa.schema(fields, metadata=_META)

    @property
    def exact_columns(self) -> tuple[str, ...]:
        """The float sums, which consolidated files also keep exactly (``EXACT_LIMBS``)."""
        return tuple(v for v, t, op in self.values if op == "sum" and pa.types.is_floating(t))

    @property
    def consolidated_schema(self) -> pa.Schema:
        """A consolidated file: the shard schema plus the exact limbs of each float sum."""
        extra = [
            pa.field(v + limb, pa.int64(), False)
            for v in self.exact_columns
            for limb in EXACT_LIMBS
        ]
        return pa.schema([*self.dense_schema, *extra], metadata=_META)

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.keys)


def _moments(per_measure: tuple[str, ...]) -> tuple[tuple[str, pa.DataType, str], ...]:
    kinds = {
        "sum": (pa.float64(), "sum"),
        "sumsq": (pa.float64(), "sum"),
        "min": (pa.float32(), "min"),
        "max": (pa.float32(), "max"),
        "seq_sum": (pa.float64(), "sum"),
        "seq_sumsq": (pa.float64(), "sum"),
    }
    return tuple((k, kinds[k][0], kinds[k][1]) for k in per_measure)


_N = (("n", pa.int64(), "sum"),)
_HIST = (("count", pa.int64(), "sum"),)

LAYER_STATS = StatsKind(
    "layer_stats",
    (("layer", pa.int16()), ("category", pa.int8()), ("token_type", pa.int8())),
    _N,
    "per layer × category × pair segment: token count, Σ, Σ², min, max of each measure",
    _moments(("sum", "sumsq", "min", "max")),
)
SEQUENCE_STATS = StatsKind(
    "sequence_stats",
    (("layer", pa.int16()), ("category", pa.int8())),
    (("sequences", pa.int64(), "sum"),),
    "per layer × category (-1: all tokens): sequences with such tokens, Σ and Σ² of their "
    "per-sequence means (the paper's macro means)",
    _moments(("seq_sum", "seq_sumsq")),
)
TOKEN_STATS = StatsKind(
    "token_stats",
    (
        ("layer", pa.int16()),
        ("token_id", pa.int32()),
        ("original_id", pa.int32()),
        ("token_type", pa.int8()),
        ("category", pa.int8()),
    ),
    _N,
    "per layer × token id (as seen) × original id × pair segment × category: count, Σ, Σ², "
    "min, max",
    _moments(("sum", "sumsq", "min", "max")),
    singleton_stats=("sumsq", "min", "max"),
    token_key="token_id",
)
TOKEN_HIST = StatsKind(
    "token_hist",
    (
        ("token_id", pa.int32()),
        ("original_id", pa.int32()),
        ("category", pa.int8()),
        ("measure", pa.int8()),
        ("bin", pa.int16()),
    ),
    _HIST,
    "per token id (as seen) × original id (before masking) × category × stored measure: "
    "histogram of the layer-averaged occurrence value",
    token_key="token_id",
)
LAYER_HIST = StatsKind(
    "layer_hist",
    (("layer", pa.int16()), ("category", pa.int8()), ("measure", pa.int8()), ("bin", pa.int16())),
    _HIST,
    "per layer × category × stored measure: histogram of the token-layer values",
)

FREQUENCIES = StatsKind(
    "frequencies",
    (("token_id", pa.int32()),),
    (("token", pa.string(), "min"), ("count", pa.int64(), "sum")),
    "per token id: occurrences in the corpus before masking (the run's own frequency counts)",
)

TOKEN_STRINGS = StatsKind(
    "token_strings",
    (("token_id", pa.int32()),),
    (("token", pa.string(), "min"),),
    "per token id the statistics name (as seen or before masking): its string",
)

#: the statistics tables of the default selection (the paper's group), by name; a run's
#: own are ``stats_kinds(its stored measures)``
STATS = {
    k.name: k
    for k in (
        LAYER_STATS,
        SEQUENCE_STATS,
        TOKEN_STATS,
        TOKEN_HIST,
        LAYER_HIST,
        FREQUENCIES,
        TOKEN_STRINGS,
    )
}


def stats_kinds(stored: tuple[str, ...]) -> dict[str, StatsKind]:
    """The statistics tables of a run that stores ``stored``, by name."""
    return {name: kind.with_measures(stored) for name, kind in STATS.items()}


DOCUMENT_SCHEMA = pa.schema(
    [
        ("doc_id", pa.int64()),
        ("file", pa.string()),
        ("offset", pa.int64()),
        ("external_id", pa.string()),
        ("segments", pa.int32()),
        ("tokens", pa.int32()),
        ("in_detail", pa.bool_()),  # its per-token rows are in the detail files
    ],
    metadata=_META,
)
