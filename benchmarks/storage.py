"""Storage benchmark: bytes on disk per token-layer, per output mode, on a real job.

Runs the real job (``run_job``: MiniLM, the WikiText-2 test split without its heading
lines, ``analysis.max_length`` 128, the in-process executor, batch size 32, 256 documents
per shard) once per configuration on the first ``--docs`` paragraphs:

  detail none, sample 1%, sample 10%, full float32, full float16.

Each run writes to a root of its own under a temporary directory. Printed per configuration:
token-layer rows analysed (all of them are in the statistics), token-layer rows kept as
detail, bytes of the detail files per detail token-layer (goal: <= 16 B at float32,
<= 9 B at float16), bytes of the consolidated statistics in total and per token-layer (and
the per-shard partials the workers wrote before consolidation), the documents files, and
the total per token-layer analysed; also every byte under the root (JSON records too).

Then the float16 error: the full float16 and full float32 detail read back and compared
value by value (max |float16 - float32|, and the same relative to the value), and a check
that the statistics path answers the same in every mode (``summary``: max |diff| of the
means against full float32; the statistics are computed from the float32 values).

The model forward is the same in every configuration: the runs differ only in what the
host writes. Seconds per run are printed for reference (one run each, not a benchmark of
speed; see benchmarks/host.py and benchmarks/pipeline.py for that).

    python benchmarks/storage.py                  # 600 paragraphs
    python benchmarks/storage.py --docs 0         # every paragraph (about 2,185)
    python benchmarks/storage.py --quick          # 40 paragraphs
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from common import HEADING, source_state, wikitext_path

CORPUS = wikitext_path()
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
GOALS = {"float32": 16.0, "float16": 9.0}  # detail bytes per token-layer
#: this benchmark's README section (``--save``; benchmarks/readme.py splices it in)
RESULTS = Path(__file__).resolve().parent / "results" / "storage.md"

#: name → (detail, sample_rate, precision)
CONFIGS: dict[str, tuple[str, float, str]] = {
    "none": ("none", 0.01, "float32"),
    "sample 1%": ("sample", 0.01, "float32"),
    "sample 10%": ("sample", 0.1, "float32"),
    "full float32": ("full", 0.01, "float32"),
    "full float16": ("full", 0.01, "float16"),
}


def run_config(root: str, args: argparse.Namespace, config: str) -> dict[str, Any]:
    from mixscope.config import load_spec
    from mixscope.runtime.driver import run_job
    from mixscope.store import manifest
    from mixscope.store.generations import latest
    from mixscope.store.layout import Layout

    detail, rate, precision = CONFIGS[config]
    overrides: dict[str, Any] = {
        "model": args.model,
        "corpus.paths": [args.corpus],
        "corpus.skip_regex": HEADING,
        "out": root,
        "analysis.max_length": args.max_length,
        "runtime.executor": "local",
        "runtime.batch_size": args.batch_size,
        "runtime.docs_per_shard": args.docs_per_shard,
        "runtime.cpus_per_worker": args.threads,
        "output.detail": detail,
        "output.sample_rate": rate,
        "output.precision": precision,
    }
    if args.docs:
        overrides["corpus.limit"] = args.docs
    spec = load_spec(None, overrides)
    start = time.perf_counter()
    summary = run_job(spec, show_progress=False)
    seconds = time.perf_counter() - start
    if summary.status != "complete":
        sys.exit(f"{config}: the run did not complete: {summary}")
    layout = Layout.open(root)
    commits = manifest.commits(layout, summary.run_id)

    def shard_bytes(kinds: Any) -> int:
        return sum(
            entry.bytes
            for rec in commits.values()
            for kind, entry in rec.files.items()
            if kind in kinds
        )

    from mixscope.store.schema import STATS

    gen = latest(layout, summary.run_id)
    on_disk = sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())
    return {
        "run_id": summary.run_id,
        "seconds": seconds,
        "shards": len(commits),
        "docs": sum(r.docs for r in commits.values()),
        "tokens": sum(r.tokens for r in commits.values()),
        "rows": sum(r.rows for r in commits.values()),
        "detail_rows": sum(r.detail_rows for r in commits.values()),
        "detail_bytes": shard_bytes({"tokens"}),
        "documents_bytes": shard_bytes({"documents"}),
        "partial_bytes": shard_bytes(set(STATS)),
        "stats_bytes": sum(int(e["bytes"]) for e in gen.files.values()),
        "stats_by_kind": {k: int(e["bytes"]) for k, e in gen.files.items()},
        "generation": gen.generation,
        "on_disk": on_disk,
    }


def detail_values(root: str) -> tuple[dict[str, np.ndarray], Any]:
    """Every stored measure of the detail rows, in (doc, segment, position) order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mixscope.store.layout import Layout
    from mixscope.store.manifest import committed_files
    from mixscope.store.schema import STORED_MEASURES

    layout = Layout.open(root)
    table = pa.concat_tables([pq.read_table(p) for p in committed_files(layout, "tokens")])
    table = table.sort_by(
        [("doc_id", "ascending"), ("segment", "ascending"), ("position", "ascending")]
    )
    values = {
        m: table[m].combine_chunks().flatten().to_numpy(zero_copy_only=False).astype(np.float32)
        for m in STORED_MEASURES
    }
    keys = np.stack([table[c].to_numpy() for c in ("doc_id", "segment", "position")])
    return values, keys


def encodings(root: str) -> dict[str, tuple[int, float]]:
    """The detail files re-encoded shard by shard: bytes and seconds per Parquet option set.

    Each shard's rows are re-encoded as one row group: with ``store.writer.parquet_bytes``
    (zstd, dictionary on every column), then with the same options except for how the
    measure lists are encoded. The job's own files (first row of the table) may differ in
    their row groups.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mixscope.store.layout import Layout
    from mixscope.store.manifest import committed_files
    from mixscope.store.schema import STORED_MEASURES
    from mixscope.store.writer import parquet_bytes

    tables = [pq.read_table(p) for p in committed_files(Layout.open(root), "tokens")]
    plain = [f.name for f in tables[0].schema if f.name not in STORED_MEASURES]
    elements = [f"{m}.list.element" for m in STORED_MEASURES]

    def encode(table: pa.Table, **options: Any) -> int:
        sink = pa.BufferOutputStream()
        pq.write_table(
            table,
            sink,
            compression="zstd",
            write_statistics=True,
            row_group_size=1 << 20,
            **options,
        )
        return sink.getvalue().size

    variants: dict[str, Any] = {
        "parquet_bytes (dictionary on all)": parquet_bytes,
        "no dictionary on the measures": lambda t: encode(t, use_dictionary=plain),
        "BYTE_STREAM_SPLIT measures": lambda t: encode(
            t, use_dictionary=plain, use_byte_stream_split=elements
        ),
    }
    out = {}
    for name, fn in variants.items():
        start = time.perf_counter()
        sizes = [fn(t) for t in tables]
        seconds = time.perf_counter() - start
        out[name] = (sum(len(x) if isinstance(x, bytes) else x for x in sizes), seconds)
    return out


def summary_means(root: str) -> np.ndarray:
    from mixscope.sql.named import run_query
    from mixscope.sql.views import connect

    con = connect(root)
    cur = run_query(con, "summary", {})
    k = [d[0] for d in cur.description].index("mean")
    return np.array([r[k] for r in cur.fetchall()], dtype=np.float64)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=600, help="paragraphs (0: all of them)")
    parser.add_argument("--quick", action="store_true", help="40 paragraphs")
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--docs-per-shard", type=int, default=256)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the results directories")
    parser.add_argument("--save", action="store_true", help=f"also write {RESULTS}")
    args = parser.parse_args()
    if args.quick:
        args.docs = 40
    if not Path(args.corpus).is_file():
        sys.exit(f"no corpus at {args.corpus} (--corpus PATH)")

    base = tempfile.mkdtemp(prefix="mixscope-storage-bench-", dir=args.dir)
    results: dict[str, dict[str, Any]] = {}
    load_before = os.getloadavg()
    roots = {c: f"{base}/{c.replace(' ', '-').replace('%', 'pc')}" for c in CONFIGS}
    try:
        for config in CONFIGS:
            print(f"running {config} …", file=sys.stderr, flush=True)
            results[config] = run_config(roots[config], args, config)
            print(f"  {results[config]['seconds']:.1f}s", file=sys.stderr, flush=True)
        v32, k32 = detail_values(roots["full float32"])
        v16, k16 = detail_values(roots["full float16"])
        same_rows = k32.shape == k16.shape and bool((k32 == k16).all())
        errors = {}
        for m in v32:
            diff = np.abs(v16[m].astype(np.float64) - v32[m].astype(np.float64))
            rel = diff / np.maximum(np.abs(v32[m].astype(np.float64)), 1e-30)
            nonzero = v32[m] != 0
            errors[m] = (
                float(diff.max()),
                float(rel[nonzero].max()) if nonzero.any() else 0.0,
                float(v32[m].min()),
                float(v32[m].max()),
            )
        encoded = {c: encodings(roots[c]) for c in ("full float32", "full float16")}
        reference = summary_means(roots["full float32"])
        stats_diff = {c: float(np.abs(summary_means(roots[c]) - reference).max()) for c in CONFIGS}
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    import pyarrow as pa

    import mixscope

    first = results["none"]
    print(
        f"mixscope storage benchmark: {args.model}, {Path(args.corpus).name} "
        f"({first['docs']:,} paragraphs, headings skipped), max_length {args.max_length}, "
        f"{first['shards']} shards of <= {args.docs_per_shard} docs, "
        f"{first['tokens']:,} tokens x {first['rows'] // first['tokens']} layers = "
        f"{first['rows']:,} token-layer rows; "
        f"mixscope {mixscope.__version__}, pyarrow {pa.__version__}"
    )
    print(f"code: {source_state()}")
    print(
        "load average (1/5/15 min) before: "
        + " ".join(f"{x:.2f}" for x in load_before)
        + ", after: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    header = (
        f"{'config':<13} {'rows':>10} {'detail rows':>11} {'detail B':>11} {'B/d-row':>8} "
        f"{'stats B':>10} {'B/row':>6} {'partials B':>11} {'docs B':>7} {'total B/row':>11} "
        f"{'on disk':>10} {'s':>6}  goal"
    )
    print(header)
    print("-" * len(header))
    for config, r in results.items():
        detail, _, precision = CONFIGS[config]
        per_detail = r["detail_bytes"] / r["detail_rows"] if r["detail_rows"] else float("nan")
        total = r["detail_bytes"] + r["stats_bytes"] + r["documents_bytes"]
        goal = ""
        if detail == "full":
            target = GOALS[precision]
            goal = f"detail <= {target:g} B: " + ("met" if per_detail <= target else "NOT met")
        print(
            f"{config:<13} {r['rows']:>10,} {r['detail_rows']:>11,} {r['detail_bytes']:>11,} "
            f"{per_detail:>8.2f} {r['stats_bytes']:>10,} {r['stats_bytes'] / r['rows']:>6.2f} "
            f"{r['partial_bytes']:>11,} {r['documents_bytes']:>7,} "
            f"{total / r['rows']:>11.2f} {r['on_disk']:>10,} {r['seconds']:>6.1f}  {goal}"
        )
    print(
        "rows: token-layer rows analysed (all in the statistics); B/d-row: detail bytes per "
        "detail token-layer row; stats B: consolidated statistics (generation "
        f"{first['generation']}); partials B: the per-shard statistics before consolidation "
        "(deleted by it); total B/row: detail + statistics + documents per row analysed; "
        "on disk: every file under the root after the run (JSON records included)"
    )
    kinds = first["stats_by_kind"]
    print(
        "consolidated statistics by kind (detail none): "
        + ", ".join(f"{k} {b:,} B ({b / first['rows']:.2f} B/row)" for k, b in kinds.items())
    )
    print()
    print(
        f"float16 detail vs float32 detail ({len(next(iter(v32.values()))):,} values per measure,"
        f" same rows in the same order: {same_rows})"
    )
    print(f"{'measure':<12} {'max |f16-f32|':>14} {'max rel':>9} {'min':>9} {'max':>9}")
    for m, (abs_err, rel_err, lo, hi) in errors.items():
        print(f"{m:<12} {abs_err:>14.3e} {rel_err:>9.2e} {lo:>9.4f} {hi:>9.4f}")
    worst = max(e[0] for e in errors.values())
    print(
        f"max |float16 - float32| over all detail values: {worst:.3e} "
        f"(float16 rounding: half an ulp, <= 2^-12 = {2**-12:.3e} for values in [0.5, 1))"
    )
    print()
    print("the same detail rows re-encoded (per shard, one row group, zstd; measures' encoding)")
    print(f"{'config':<13} {'encoding':<36} {'bytes':>11} {'B/d-row':>8} {'encode s':>9}")
    for config, variants in encoded.items():
        rows = results[config]["detail_rows"]
        job = results[config]["detail_bytes"]
        print(f"{config:<13} {'as the job wrote it':<36} {job:>11,} {job / rows:>8.2f}")
        for name, (nbytes, seconds) in variants.items():
            print(f"{config:<13} {name:<36} {nbytes:>11,} {nbytes / rows:>8.2f} {seconds:>9.3f}")
    print()
    print(
        "statistics path, summary means max |diff| vs full float32: "
        + ", ".join(f"{c} {d:.1e}" for c, d in stats_diff.items())
    )
    if args.save:
        RESULTS.write_text(markdown(args, results, errors, stats_diff), encoding="utf-8")
        print(f"wrote {RESULTS} (python benchmarks/readme.py puts it into the README)")
    return 0


def markdown(
    args: argparse.Namespace,
    results: dict[str, dict[str, Any]],
    errors: dict[str, tuple[float, float, float, float]],
    stats_diff: dict[str, float],
) -> str:
    """The README's storage section, from this run's figures."""
    first = results["none"]
    layers = first["rows"] // first["tokens"]
    lines = [
        f"**Storage** (`benchmarks/storage.py`: the WikiText-2 job, {first['docs']:,} paragraphs, "
        f"MiniLM, {layers} layers, {first['rows']:,} token-layer rows, {first['shards']} shards of "
        f"<= {args.docs_per_shard} documents, one run per configuration; code {source_state()}):",
        "",
        "| configuration | detail bytes per detail row | statistics bytes per row "
        "| total bytes per row |",
        "|---|---|---|---|",
    ]
    for config, r in results.items():
        detail, _, precision = CONFIGS[config]
        total = (r["detail_bytes"] + r["stats_bytes"] + r["documents_bytes"]) / r["rows"]
        per_detail = "—"
        if r["detail_rows"]:
            per_detail = f"{r['detail_bytes'] / r['detail_rows']:.2f}"
            if detail == "full":
                per_detail = f"**{per_detail}** (goal ≤ {GOALS[precision]:g})"
        name = f"`{config.split()[0]}` {' '.join(config.split()[1:])}".strip()
        lines.append(
            f"| {name} | {per_detail} | {r['stats_bytes'] / r['rows']:.2f} | {total:.2f} |"
        )
    kinds = first["stats_by_kind"]
    stats_total = sum(kinds.values())
    biggest = max(kinds, key=lambda k: kinds[k])
    worst_abs = max(e[0] for e in errors.values())
    worst_rel = max(e[1] for e in errors.values())
    lines += [
        "",
        f"Statistics: {stats_total / 1e6:.1f} MB consolidated ({kinds[biggest] / stats_total:.0%} "
        f"of it `{biggest}`); they grow with the vocabulary, not the corpus (see the SQL "
        f"benchmark below for 10M–100M rows). float16 detail: max |float16 − float32| = "
        f"{worst_abs:.3g}, max relative error {worst_rel:.2g}. Every configuration gives the "
        "same `summary` means as full float32 (max |Δ| "
        f"{max(stats_diff.values()):.1g}).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
