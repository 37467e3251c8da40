"""A read-only DuckDB connection whose views see committed shards only.

The file lists come from the commit records and the newest consolidation record (never a
glob over data folders), so a file that is half-written, renamed but not committed, or left
by a crashed attempt is invisible, and every committed shard counts exactly once.

Views: the statistics (``layer_stats``, ``sequence_stats``, ``token_stats``,
``token_hist``, ``layer_hist``: consolidated files and partials merged at read time, long
by measure, the derived measures added; ``token_stats`` and ``token_hist`` with the
``token`` string of ``token_strings``, ``token_stats_by_id`` and ``token_hist_by_id``
without it), ``tokens`` (the detail as one row per token per layer, with ``run_id`` and a
``category``: normal, mask, cls, sep, other_special) and ``occurrences`` (one row per
token, layer-averaged) — both refuse to answer, saying what each run kept, when no
selected run kept detail; ``sql/detail_views.py`` — ``documents`` (one row per document:
source file, offset, tokens, ``in_detail``), ``runs`` (one row per run), ``frequencies``
(per run and per imported reference: token_id, token, count, rank; rank 1 = most frequent,
ties share the lowest rank), the helper ``measures`` (the selected runs' measures) and the
macros ``ranked``, ``ranked_occurrences`` and
``spearman``. Everything is generated from ``store.schema``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from mixscope.errors import MixscopeError
from mixscope.registry import MeasureSet
from mixscope.sql.detail_views import (
    DUCK_TYPES,
    HIVE,
    create_detail_views,
    create_documents_view,
    detail_source,
    measure_expr,
    no_rows_message,
)
from mixscope.sql.macros import create_macros
from mixscope.sql.measure_tables import create_measure_tables, measures_of_runs, runs_in
from mixscope.sql.runs_table import create_runs_table
from mixscope.stats.singletons import sql_value
from mixscope.store import generations, manifest
from mixscope.store.layout import Layout
from mixscope.store.references import reference_files
from mixscope.store.runs import load_runs
from mixscope.store.schema import STATS, StatsKind, category_sql

#: the first schema whose token_stats / token_hist files leave the token string to
#: ``token_strings`` (store/schema.py); older runs' files still carry it
STRINGS_APART = 4


def _stats_view(
    con: Any, base: StatsKind, files: generations.StatsFiles, runs: dict[str, MeasureSet]
) -> None:
    """The view ``kind.name``: the statistics of every committed shard once; long by measure.

    A consolidated run's file has one row per key and is read as it is; the files of a run
    with partials not yet consolidated are merged here (sums, mins, maxes by key). Moment
    tables get one row per key and measure (``n``, ``sum``, ``sumsq``, ``min``, ``max``,
    or ``sequences``, ``seq_sum``, ``seq_sumsq``); histograms one row per key, measure and
    bin, where a derived measure has its source's bins (the same ranks). A kind with a
    ``token_key`` gets its ``token`` from ``token_strings``. The measures are those of the
    runs whose files are read (``runs``: run id → its measures; NULL where a run has not
    the measure, and UNPIVOT leaves those rows out).
    """
    present = runs_in(files.consolidated + files.merging)
    ms = measures_of_runs([runs[r] for r in present if r in runs])
    kind = base.with_measures(ms.stored)
    keys = ", ".join(kind.key_names)
    columns = ", ".join((*kind.key_names, *(v for v, _, _ in kind.values)))
    merged = ", ".join(
        f"{op}({sql_value(kind, v)})::{DUCK_TYPES[t]} AS {v}" for v, t, op in kind.values
    )
    parts = []
    if files.consolidated:
        parts.append(
            # union_by_name: a column added by a later schema (token_hist.original_id, 3)
            # reads NULL in an older run's files
            f"SELECT run_id, {columns} FROM read_parquet({_sql_list(files.consolidated)}, "
            f"{HIVE}, union_by_name = true)"
        )
    if files.merging:
        parts.append(
            f"SELECT run_id, {keys}, {merged} "
            f"FROM read_parquet({_sql_list(files.merging)}, {HIVE}, union_by_name = true) "
            f"GROUP BY run_id, {keys}"
        )
    if not parts:  # no statistics yet: the right columns, no rows
        cols = ["NULL::VARCHAR AS run_id"]
        cols += [f"NULL::{DUCK_TYPES[t]} AS {n}" for n, t in kind.keys]
        cols += [f"NULL::{DUCK_TYPES[t]} AS {n}" for n, t, _ in kind.values]
        parts.append(f"SELECT {', '.join(cols)} WHERE false")
    union = " UNION ALL ".join(parts)
    prefixes = tuple(f"{m}_" for m in ms.stored)
    shared = [v for v, _, _ in kind.values if not v.startswith(prefixes)]
    # a kind named by token id: the view without strings first (``<kind>_by_id``, what the
    # named queries read: joining every row to its string costs them a third), then the
    # view with ``token`` (once per id in token_strings)
    view = f"{kind.name}_by_id" if kind.token_key else kind.name
    moments = [v[len(prefixes[0]) :] for v, _, _ in kind.values if v.startswith(prefixes[0])]
    key_cols = [category_sql(k) + " AS category" if k == "category" else k for k in kind.key_names]
    if "measure" in kind.key_names:  # histograms: a derived measure has its source's bins
        from mixscope.registry import CODES

        codes = [CODES[ms.derived.get(m, (m,))[0]] for m in ms.columns]
        pairs = zip(codes, ms.columns, strict=True)
        values = ", ".join(f"({c}, {_quote(m)})" for c, m in pairs)
        key_cols = ["m.measure" if k == "measure" else k for k in key_cols]
        con.execute(
            f"CREATE VIEW {view} AS SELECT run_id, {', '.join(key_cols)}, "
            f"{', '.join(shared)} FROM ({union}) b JOIN (VALUES {values}) m(code, measure) "
            "ON b.measure = m.code"
        )
        after_keys = shared
    else:
        power = lambda stat: 2 if stat.endswith("sumsq") else 1  # noqa: E731  Σ (f v)² = f² Σ v²
        floats = {v for v, t, _ in kind.values if t == pa.float32()}  # min, max: stay float32
        cast = {st: "FLOAT" if f"{ms.stored[0]}_{st}" in floats else "" for st in moments}
        wide = ", ".join(
            f"{measure_expr(ms, m, '{m}_' + st, cast[st], power(st))} AS {m}_{st}"
            for m in ms.columns
            for st in moments
        )
        on = ", ".join(
            "(" + ", ".join(f"{m}_{st}" for st in moments) + f") AS {m}" for m in ms.columns
        )
        con.execute(
            f"CREATE VIEW {view} AS UNPIVOT (SELECT run_id, {', '.join(key_cols)}, "
            f"{', '.join(shared)}, {wide} FROM ({union})) ON {on} "
            f"INTO NAME measure VALUE {', '.join(moments)}"
        )
        after_keys = [*shared, "measure", *moments]
    if kind.token_key:
        _with_strings(con, kind, view, after_keys)


def _with_strings(con: Any, kind: StatsKind, by_id: str, after_keys: list[str]) -> None:
    """The view ``kind.name``: ``by_id`` (run_id, the keys, then ``after_keys``) with
    ``token`` after its keys."""
    select = [f"v.{c}" for c in ("run_id", *kind.key_names)] + ["s.token"]
    select += [f"v.{c}" for c in after_keys]
    con.execute(
        f"CREATE VIEW {kind.name} AS SELECT {', '.join(select)} FROM {by_id} v "
        f"LEFT JOIN token_strings s ON s.run_id = v.run_id AND s.token_id = v.{kind.token_key}"
    )


def _token_strings_view(
    con: Any, strings: generations.StatsFiles, legacy: generations.StatsFiles
) -> None:
    """``token_strings``: each token id's string, per run; runs before schema 4 (``legacy``:
    their token_stats files, which carry the string on every row) included."""
    parts = []
    files = strings.consolidated + strings.merging
    if files:
        parts.append(
            f"SELECT run_id, token_id, token FROM read_parquet({_sql_list(files)}, {HIVE})"
        )
    old = legacy.consolidated + legacy.merging
    if old:
        parts.append(f"SELECT run_id, token_id, token FROM read_parquet({_sql_list(old)}, {HIVE})")
    if not parts:
        parts.append(
            "SELECT NULL::VARCHAR AS run_id, NULL::INTEGER AS token_id, NULL::VARCHAR AS token "
            "WHERE false"
        )
    con.execute(
        "CREATE VIEW token_strings AS SELECT run_id, token_id, min(token) AS token "
        f"FROM ({' UNION ALL '.join(parts)}) GROUP BY run_id, token_id"
    )


def _sql_list(paths: list[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _refuse_damaged(layout: Layout, run_ids: list[str]) -> None:
    """Never answer from part of a run: a committed file missing or truncated (or a commit
    record that no longer parses) is an error naming it (``store/verify.py``)."""
    from mixscope.store.verify import check_run_cached

    for run_id in run_ids:
        damage = check_run_cached(layout, run_id)  # once per state of its records
        if damage:
            more = f" and {len(damage) - 1} more" if len(damage) > 1 else ""
            raise MixscopeError(
                f"run {run_id} has damaged results ({damage[0]}{more}): queries would "
                "miss part of it; `mixscope run … --repair` redoes the affected shards"
            )


def connect(
    root: str,
    *,
    run_ids: list[str] | None = None,
    threads: int | None = None,
    memory_limit: str | None = None,
    read_only: bool = True,
) -> Any:
    """An in-memory DuckDB connection with the views over ``root``.

    ``read_only`` (the default) forbids file access outside ``root`` and locks the settings;
    statements are further restricted by :func:`mixscope.sql.readonly.execute`.
    """
    import duckdb

    layout = Layout.open(root)
    if not (layout.is_local or layout.is_s3):
        raise MixscopeError(
            "SQL over this kind of root is not supported: use a local path or s3://"
        )
    con = duckdb.connect(":memory:")
    if layout.is_s3:  # before the settings lock: httpfs if installed, else s3fs
        from mixscope.store import objectstore

        objectstore.duckdb_attach(con, root)
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    if memory_limit:
        con.execute(f"SET memory_limit = {_quote(memory_limit)}")
    runs = [r for r in load_runs(layout) if run_ids is None or r.run_id in run_ids]
    _refuse_damaged(layout, [r.run_id for r in runs])
    stats = generations.sources(layout, run_ids)
    # runs before schema 4 keep token strings in their token_stats (and token_hist) files
    older = [r.run_id for r in runs if int(r.options.get("schema_version") or 0) < STRINGS_APART]
    legacy = generations.sources(layout, older, kinds=("token_stats",))["token_stats"]
    for files in [*stats.values(), legacy]:  # as DuckDB names them (s3://… on S3 roots)
        files.consolidated = [layout.uri(p) for p in files.consolidated]
        files.merging = [layout.uri(p) for p in files.merging]
    data = manifest.committed_files_by_kind(layout, ("tokens", "documents"), run_ids)
    detail = [layout.uri(p) for p in data["tokens"]]
    per_run = {r.run_id: r.measure_set for r in runs}
    # the columns of every selected run's measures, whether or not its files have them
    view_ms = measures_of_runs(per_run.values())
    with_rows = [per_run[r] for r in runs_in(detail) if r in per_run]
    source = detail_source(detail, measures_of_runs(with_rows), view_ms, len(set(with_rows)) > 1)
    missing = no_rows_message(runs) if not detail and runs else None
    create_detail_views(con, source, missing, view_ms)
    create_documents_view(con, [layout.uri(p) for p in data["documents"]])
    _token_strings_view(con, stats["token_strings"], legacy)
    for name, kind in STATS.items():
        if name not in ("frequencies", "token_strings"):
            _stats_view(con, kind, stats[name], per_run)

    parts = []
    counts = stats["frequencies"].consolidated + stats["frequencies"].merging
    if counts:
        parts.append(
            "SELECT run_id, NULL::VARCHAR AS reference, token_id, min(token) AS token, "
            f"sum(count)::BIGINT AS count FROM read_parquet({_sql_list(counts)}, "
            f"{HIVE}, union_by_name = true) GROUP BY run_id, token_id"
        )
    for name, path in reference_files(layout).items():
        parts.append(
            f"SELECT NULL::VARCHAR AS run_id, {_quote(name)} AS reference, token_id, token, "
            f"count FROM read_parquet({_quote(layout.uri(path))})"
        )
    if not parts:
        parts.append(
            "SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS reference, NULL::INTEGER AS "
            "token_id, NULL::VARCHAR AS token, NULL::BIGINT AS count WHERE false"
        )
    con.execute(
        "CREATE VIEW frequencies AS SELECT *, rank() OVER (PARTITION BY run_id, reference "
        f"ORDER BY count DESC) AS rank FROM ({' UNION ALL '.join(parts)})"
    )
    create_macros(con)
    create_runs_table(con, runs)
    create_measure_tables(con, per_run)
    if read_only:
        con.execute(f"SET allowed_directories = [{_quote(layout.uri(layout.base) + '/')}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET autoload_known_extensions = false")
        con.execute("SET lock_configuration = true")
    return con
