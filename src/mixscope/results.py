"""``mixscope.open(out)``: the results under one output root, for notebooks and scripts.

Everything goes through the surfaces the CLI uses, so a notebook and ``mixscope query``
give the same answer: the read-only DuckDB views of ``sql.views.connect`` (committed
shards only), the named queries of ``sql.named``, the read-only statement check of
``sql.readonly``, the run listing of ``mixscope status`` (``mixscope.status``) and the
report's own figures (``report.build``, drawn by ``report.plots``). Tables are pyarrow
(DuckDB's column types, as ``mixscope query --format parquet`` writes them);
``.to_pandas()`` and ``polars.from_arrow`` convert them (the ``pandas`` / ``polars``
extras). Local paths and ``s3://`` roots alike.

The views see what was committed when the root was opened (or last ``refresh()``-ed): a
job still writing adds shards that a refresh shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mixscope.errors import MixscopeError


class Results:
    """The runs of one output root and the questions they answer. See :func:`open`."""

    def __init__(
        self,
        root: str | Path,
        *,
        runs: list[str] | tuple[str, ...] | None = None,
        threads: int | None = None,
        memory_limit: str | None = None,
    ) -> None:
        from mixscope.store.layout import Layout
        from mixscope.store.runs import resolve_run_ids

        self.root = str(root)
        if "://" not in self.root and not Path(self.root).is_dir():
            raise MixscopeError(f"results root {self.root} does not exist")
        self._layout = Layout.open(self.root)
        self.run_ids = resolve_run_ids(self._layout, list(runs)) if runs else None
        self._threads, self._memory_limit = threads, memory_limit
        self._con: Any = None
        self.refresh()

    # -- the connection ----------------------------------------------------------------

    def refresh(self) -> Results:
        """See what has been committed since: the views are rebuilt from the records."""
        from mixscope.sql.views import connect

        self.close()
        self._con = connect(
            self.root,
            run_ids=self.run_ids,
            threads=self._threads,
            memory_limit=self._memory_limit,
        )
        return self

    @property
    def con(self) -> Any:
        """The read-only DuckDB connection (views ``tokens``, ``runs``, ``layer_stats``, …)."""
        if self._con is None:
            raise MixscopeError("these results are closed (mixscope.open them again)")
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self) -> Results:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._con is None else f"{len(self._run_list())} run(s)"
        return f"<mixscope.Results {self.root}: {state}>"

    # -- the questions -----------------------------------------------------------------

    def _run_list(self) -> list[dict[str, Any]]:
        from mixscope.status import run_status

        rows = run_status(self.root)
        return [r for r in rows if self.run_ids is None or r["run_id"] in self.run_ids]

    @property
    def runs(self) -> Any:
        """One row per run, as ``mixscope status`` lists them (same keys): status, shards
        done / failed / pending, rows, throughput, errors per shard, damage, bad input."""
        import pyarrow as pa

        from mixscope.status import RUN_STATUS_SCHEMA

        schema = RUN_STATUS_SCHEMA  # the keys and types of `mixscope status` rows
        rows = []
        for r in self._run_list():
            row = {f.name: r.get(f.name) for f in schema}
            row["step"] = None if r.get("step") in ("", None) else int(r["step"])
            row["errors"] = [(int(k), v) for k, v in (r.get("errors") or {}).items()]
            row["bad_input"] = list((r.get("bad_input") or {}).items())
            row["pairs"] = list((r.get("pairs") or {}).items())
            rows.append(row)
        return pa.Table.from_pylist(rows, schema=schema)

    def query(self, name: str, **params: Any) -> Any:
        """The named query ``name`` (``mixscope queries`` lists them) as a pyarrow Table;
        ``params`` as ``--param key=value`` (strings are converted as on the CLI)."""
        from mixscope.sql.named import run_query
        from mixscope.sql.output import to_arrow
        from mixscope.store.unreadable import naming_unreadable

        with naming_unreadable(self.root, self.run_ids):  # a damaged file: named, as the CLI
            return to_arrow(run_query(self.con, name, params))

    def sql(self, text: str, **params: Any) -> Any:
        """One read-only statement (``SELECT``, ``WITH``, ``DESCRIBE``, ``SHOW``), as
        ``mixscope sql``; ``$name`` placeholders bound from ``params``."""
        from mixscope.sql.output import to_arrow
        from mixscope.sql.readonly import execute
        from mixscope.store.unreadable import naming_unreadable

        with naming_unreadable(self.root, self.run_ids):
            return to_arrow(execute(self.con, text, params or None))

    def plot(
        self,
        name: str,
        *,
        run: str | None = None,
        reference: str | None = None,
        a: str | None = None,
        b: str | None = None,
    ) -> list[Any]:
        """The report's figures of one section as matplotlib ``Figure`` objects.

        ``name``: ``layers`` (per-layer curves), ``token-types`` (category × layer
        heatmaps), ``frequency`` (rank vs ratio), ``sink`` (the first position, runs with
        the sink group), ``components`` (the scopes through the block and the FF's change,
        runs with the ff group), ``trend`` (checkpoint trend, one per model with several
        steps), ``compare`` (runs ``a`` and ``b``: per layer, and per
        token type) or ``contributions`` (loads each run's model). One figure per run, in
        the report's run order, or only ``run``'s (an id or a unique prefix).
        """
        from mixscope.report.figures import figures, plot_names
        from mixscope.store.runs import resolve_run_ids

        if name not in plot_names():
            raise MixscopeError(f"no plot named {name!r}; plots: {', '.join(plot_names())}")
        if name == "compare" and not (a and b):
            raise MixscopeError("plot('compare') needs both runs: a=RUN_A, b=RUN_B")
        wanted = [x for x in (run, a, b) if x is not None]
        chosen = resolve_run_ids(self._layout, wanted) if wanted else []
        outside = [r for r in chosen if self.run_ids is not None and r not in self.run_ids]
        if outside:
            raise MixscopeError(f"run {outside[0]} is not among the runs opened: {self.run_ids}")
        only = chosen[:1] if run is not None else None
        return figures(
            self.root,
            self.con,
            name,
            run_ids=only or self.run_ids,
            reference=reference,
            compare=(a, b) if a and b else None,
        )


def open(  # shadows the builtin here only, as gzip.open does
    root: str | Path,
    *,
    runs: list[str] | tuple[str, ...] | None = None,
    threads: int | None = None,
    memory_limit: str | None = None,
) -> Results:
    """The results under ``root`` (a directory or ``s3://bucket/prefix``).

    ``runs``: only these runs (ids or unique prefixes) in every view. ``threads`` and
    ``memory_limit`` size DuckDB, as the CLI's ``--threads`` / ``--memory-limit``. Use it
    as a context manager, or call ``close()``.
    """
    return Results(root, runs=runs, threads=threads, memory_limit=memory_limit)
