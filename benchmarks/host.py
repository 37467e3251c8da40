"""Host ceiling: precomputed measures replayed through the worker's result path, no model.

What the host side of a shard costs per core, without the model: synthetic sequences
(``SEQ_LEN`` tokens starting with [CLS] and ending with [SEP], token ids Zipf-distributed
over the 30,522-word MiniLM vocabulary, ``LAYERS`` layers, measures uniform in [0, 1] with
``attnres_w = attn_w / 2`` as the engine gives) go through ``ShardAccumulator`` exactly as the
worker feeds it: shards of ``--shard-seqs`` sequences in chunks of
``max(64, 4 * batch_size)`` sequences (the worker's chunks until they became 256k
characters of text, about a whole default shard: fewer ``add`` calls now, so these figures
are an upper bound of the per-call cost), ``add`` per chunk, then ``finish`` (statistics
merged, detail rows, documents, every Parquet file written to a temporary directory).
Synchronous (``host=None``) on one thread (numpy, Arrow and BLAS pools set to 1).

Prints tokens/s per core for each output mode (detail none, sample at 1%, full at float32
and at float16) for the code here and, side by side in the same run, for a baseline git
revision (``--baseline``, default the last commit before the vectorized statistics path):
``git archive`` of its ``src/`` into a temporary directory. Each side runs in a server
process of its own (this file, with that side's ``src`` first on the path), fed the same
synthetic shard; the parent interleaves the repetitions (current none, baseline none,
current sample, …), so load drifts hit both sides alike. For reference, the schema-1 path
(``mixscope.api.to_table`` + ``parquet_bytes``: the long table and its Parquet encoding,
no statistics) runs in the current server too.

tokens/s per core is tokens over the process CPU time of the shard (one thread, so one
core: the figure a loaded machine does not dilute); wall-clock figures are printed beside
it. Each figure is the median of ``--reps`` repetitions after one warm-up of each.
Goal: >= 500k tokens/s per core with detail none and sample.

    python benchmarks/host.py                # 600-sequence shards, 5 repetitions
    python benchmarks/host.py --quick        # a smoke run (small shard, 1 repetition)
    python benchmarks/host.py --reps 7 --save  # also write benchmarks/results/host.md
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from common import REPO, offline_tokenizer, source_state  # noqa: E402

pa.set_cpu_count(1)
pa.set_io_thread_count(1)

LAYERS = 12
SEQ_LEN = 128
VOCAB = 30522
ZIPF_A = 1.07
CLS, SEP = 101, 102
GOAL = 500_000  # tokens/s per core, detail none and sample, the paper's group
GOAL_ALL = 1_000_000  # tokens/s per core, detail none and sample, every group (issue 39)
#: the baseline revision: the last commit of the numpy/numba statistics (before they moved
#: to torch on the engine's device)
BASELINE = "0844ca9"
HERE = REPO / "benchmarks"
#: this benchmark's README section (``--save``; benchmarks/readme.py splices it in)
RESULTS = REPO / "benchmarks" / "results" / "host.md"

#: name → (detail, sample_rate, precision); the schema-1 path runs as mode "old"
MODES: dict[str, tuple[str, float, str]] = {
    "none": ("none", 0.01, "float32"),
    "sample": ("sample", 0.01, "float32"),
    "full32": ("full", 0.01, "float32"),
    "full16": ("full", 0.01, "float16"),
}
#: every group that applies to MiniLM (paper + globenc + sink + ff: eleven columns, ten
#: stored) instead of the paper's five; both sides (the baseline has measure groups)
GROUP_MODES: dict[str, tuple[str, float, str]] = {
    "none-all": ("none", 0.01, "float32"),
    "sample-all": ("sample", 0.01, "float32"),
}
ALL_GROUPS = ("paper", "globenc", "sink", "ff")


def zipf_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` word-piece ids (>= 1000, the real MiniLM word pieces), Zipf by a random rank."""
    words = np.arange(1000, VOCAB)
    by_rank = np.random.default_rng(0).permutation(words)  # id of frequency rank r + 1
    weights = 1.0 / np.arange(1, len(words) + 1) ** ZIPF_A
    cdf = np.cumsum(weights / weights.sum())
    ranks = np.searchsorted(cdf, rng.random(n), side="right")
    return by_rank[np.minimum(ranks, len(by_rank) - 1)]


def synthetic_shard(
    rng: np.random.Generator, first_doc: int, n_seqs: int, columns: int = 5
) -> tuple[list, list]:
    """``n_seqs`` one-segment documents: EncodedSequences and their [layer, ``columns``, seq]
    measures (the paper's five first)."""
    from mixscope.corpus.encode import EncodedSequence

    ids = zipf_ids(rng, n_seqs * SEQ_LEN).reshape(n_seqs, SEQ_LEN).astype(np.int64)
    ids[:, 0], ids[:, -1] = CLS, SEP
    special = np.zeros(SEQ_LEN, dtype=bool)
    special[[0, -1]] = True
    seqs, measures = [], []
    for k in range(n_seqs):
        row = ids[k].copy()
        seqs.append(
            EncodedSequence(
                doc_id=first_doc + k,
                segment=0,
                input_ids=row,
                token_type_ids=np.zeros(SEQ_LEN, dtype=np.int64),
                special=special.copy(),
                masked=np.zeros(SEQ_LEN, dtype=bool),
                original_ids=row,
            )
        )
        m = rng.random((LAYERS, columns, SEQ_LEN), dtype=np.float32)
        m[:, 2, :] = m[:, 0, :] / 2  # attnres_w = attn_w / 2, as the engine gives
        measures.append(m)
    return seqs, measures


def documents(seqs: list) -> list:
    from mixscope.corpus.plan import Document

    return [Document(s.doc_id, "", "synthetic.txt", 100 * s.doc_id) for s in seqs]


def _shard_results() -> Any:
    """``ShardAccumulator`` of the code on ``sys.path``: the current name, or a baseline
    revision's (``ShardResults``, in runtime/host_path.py or, earlier, runtime/results.py)."""
    import importlib

    for module, name in (
        ("mixscope.runtime.host_path", "ShardAccumulator"),
        ("mixscope.runtime.host_path", "ShardResults"),
        ("mixscope.runtime.results", "ShardResults"),
    ):
        try:
            return getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("mixscope"):  # e.g. numba for 0844ca9's baseline
                raise SystemExit(
                    f"this side's code needs {e.name!r}, which is not installed: "
                    f"pip install {e.name} (or pass --baseline HEAD)"
                ) from None
        except AttributeError:
            continue
    raise ImportError("no shard accumulator in this revision")


def _vocabulary() -> Any:
    """``Vocabulary`` of the code on ``sys.path`` (stats/block.py before the rename)."""
    try:
        from mixscope.stats.token_block import Vocabulary
    except ModuleNotFoundError:  # a baseline revision
        from mixscope.stats.block import Vocabulary  # type: ignore[no-redef]
    return Vocabulary


def _measure_set(groups: tuple[str, ...]) -> Any:
    """``measure_set`` of the code on ``sys.path``: the registry's, or a baseline revision's
    (mixing/measures before the registry)."""
    try:
        from mixscope.registry import measure_set
    except ModuleNotFoundError:  # a baseline revision
        from mixscope.mixing.measures import measure_set  # type: ignore[no-redef]
    return measure_set(groups)


def run_new(root: str, mode: str, vocab: Any, seqs: list, measures: list, chunk: int) -> dict:
    """One shard through ShardAccumulator (synchronous): wall and CPU seconds, of which finish,
    bytes."""
    from mixscope.config import OutputSpec
    from mixscope.store.layout import Layout

    measure_set = _measure_set
    ShardAccumulator = _shard_results()
    detail, rate, precision = {**MODES, **GROUP_MODES}[mode]
    layout = Layout.open(root)
    out = OutputSpec(detail=detail, sample_rate=rate, precision=precision)
    if mode in GROUP_MODES:
        groups = measure_set(ALL_GROUPS)
        results = ShardAccumulator(layout, f"bench-{mode}", 0, vocab, out, None, measures=groups)
    else:
        results = ShardAccumulator(
            layout, f"bench-{mode}", 0, vocab, out, None, measures=measure_set(("paper",))
        )
    chunks = [(seqs[i : i + chunk], measures[i : i + chunk]) for i in range(0, len(seqs), chunk)]
    try:  # what the worker hands over: the chunk's tensor, as the engine left it
        from mixscope.stats.token_block import chunk_values

        chunks = [(s, chunk_values(m)) for s, m in chunks]  # type: ignore[misc]
    except ImportError:  # a baseline of per-sequence arrays
        pass
    start, cpu = time.perf_counter(), time.process_time()
    for part, values in chunks:
        results.add(part, values)
    mid = time.process_time()
    files = results.finish(documents(seqs))
    end, cpu_end = time.perf_counter(), time.process_time()
    return {
        "seconds": end - start,
        "cpu": cpu_end - cpu,
        "finish": cpu_end - mid,
        "tokens": results.tokens,
        "bytes": sum(f["bytes"] for f in files.values()),
    }


def run_old(tok: Any, seqs: list, measures: list, chunk: int) -> dict:
    """The schema-1 path: the long table per chunk and its Parquet encoding."""
    from mixscope.api import to_table
    from mixscope.store.writer import parquet_bytes

    start, cpu = time.perf_counter(), time.process_time()
    tables = [
        to_table(seqs[i : i + chunk], measures[i : i + chunk], tok)
        for i in range(0, len(seqs), chunk)
    ]
    mid = time.process_time()
    data = parquet_bytes(pa.concat_tables(tables))
    end, cpu_end = time.perf_counter(), time.process_time()
    return {
        "seconds": end - start,
        "cpu": cpu_end - cpu,
        "finish": cpu_end - mid,
        "tokens": sum(len(s) for s in seqs),
        "bytes": len(data),
    }


def floor(vocab: Any, seqs: list, wide: list, chunk: int, reps: int) -> dict:
    """What the every-group statistics tables of the shard cost to encode, and nothing else:
    the tables built once (untimed), then each encoded as ``finish`` writes it
    (``parquet_buffer`` with the partial statistics' options), CPU seconds (one thread),
    the median of ``reps``; the raw bytes of its non-null values. However fast the
    accumulation, the statistics path cannot beat this with the tables as they are."""
    from mixscope.stats.accumulate import ShardStatistics
    from mixscope.stats.token_block import chunk_values, token_block
    from mixscope.store.writer import parquet_buffer

    groups = _measure_set(ALL_GROUPS)
    acc = ShardStatistics(vocab, groups)
    for i in range(0, len(seqs), chunk):
        acc.add(token_block(seqs[i : i + chunk], chunk_values(wide[i : i + chunk]), vocab, groups))
    tables = acc.tables()
    cpu: dict[str, list[float]] = {k: [] for k in tables}
    for _ in range(reps):
        for kind, table in tables.items():
            start = time.process_time()
            parquet_buffer(table, stats=True, partial=True)
            cpu[kind].append(time.process_time() - start)

    def value_bytes(c: pa.ChunkedArray) -> int:  # fixed-width values that are not null
        fixed = pa.types.is_integer(c.type) or pa.types.is_floating(c.type)
        return (len(c) - c.null_count) * c.type.bit_width // 8 if fixed else 0

    values = {k: sum(map(value_bytes, t.columns)) for k, t in tables.items()}
    return {
        "tokens": len(seqs) * SEQ_LEN,
        "cpu": {k: statistics.median(v) for k, v in cpu.items()},
        "rows": {k: t.num_rows for k, t in tables.items()},
        "value_bytes": values,
    }


def breakdown(root: str, tok: Any, seqs: list, measures: list, chunk: int, mode: str):
    """One shard of ``mode`` under cProfile: the functions with the most self time, and the
    rows and bytes of each file ``finish`` wrote (its manifest entries)."""
    import cProfile
    import pstats

    from mixscope.config import OutputSpec
    from mixscope.store.layout import Layout

    measure_set = _measure_set
    ShardAccumulator, Vocabulary = _shard_results(), _vocabulary()
    detail, rate, precision = MODES[mode]
    out = OutputSpec(detail=detail, sample_rate=rate, precision=precision)
    results = ShardAccumulator(
        Layout.open(root),
        "profile",
        0,
        Vocabulary(tok),
        out,
        None,
        measures=measure_set(("paper",)),
    )
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(0, len(seqs), chunk):
        results.add(seqs[i : i + chunk], measures[i : i + chunk])
    files = results.finish(documents(seqs))
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (path, line, func), (_, _, self_s, cum_s, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = path.split("/src/", 1)[-1] if "/src/mixscope/" in path else path.rsplit("/", 1)[-1]
        label = f"{where}:{line}({func})" if line else func
        rows.append((self_s, cum_s, label))
    rows.sort(reverse=True)
    sizes = {k: (int(e.get("rows", 0)), int(e["bytes"])) for k, e in files.items()}
    return total, rows[:14], sizes


def serve(args: argparse.Namespace) -> int:
    """A server of one side: reads ``mode rep`` lines, answers one JSON line each (the
    shard's figures), ``profile`` answers the cProfile breakdowns; ends at end of input."""
    import json

    Vocabulary = _vocabulary()
    tok = offline_tokenizer()
    seqs, measures = synthetic_shard(np.random.default_rng(0), 0, args.shard_seqs)
    try:  # the current code: the same shard with every group's columns
        width = len(_measure_set(ALL_GROUPS).columns)
        _, wide = synthetic_shard(np.random.default_rng(0), 0, args.shard_seqs, width)
    except ImportError:  # a baseline from before measure groups
        wide = []
    chunk = max(64, 4 * args.batch_size)
    base = tempfile.mkdtemp(prefix="mixscope-host-bench-", dir=args.dir)
    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            mode, rep = line.split()
            root = f"{base}/{mode}-{rep}"
            if mode == "profile":
                result: Any = {
                    m: breakdown(f"{root}-{m}", tok, seqs, measures, chunk, m)
                    for m in ("none", "full32")
                }
            elif mode == "old":
                result = run_old(tok, seqs, measures, chunk)
            elif mode == "floor":  # "floor REPS SEQS": a shard of SEQS sequences of its own
                reps, n_seqs = (int(x) for x in rep.split(","))
                sized = (seqs, wide)
                if n_seqs != len(seqs):  # the same Zipf draw, longer or shorter
                    width = wide[0].shape[1]  # [layer, column, seq]
                    sized = synthetic_shard(np.random.default_rng(0), 0, n_seqs, width)
                result = floor(Vocabulary(tok), *sized, chunk, reps)
                del sized
            elif mode in GROUP_MODES:
                result = run_new(root, mode, Vocabulary(tok), seqs, wide, chunk)
            else:
                # a fresh Vocabulary per shard, as a worker's first shard has (its cache
                # fills on the first chunk; later shards of a worker are a bit faster)
                result = run_new(root, mode, Vocabulary(tok), seqs, measures, chunk)
            shutil.rmtree(root, ignore_errors=True)
            print(json.dumps(result), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


class Side:
    """A server process running one side's code (``src``: the mixscope sources to import)."""

    def __init__(self, src: str, args: argparse.Namespace) -> None:
        import json
        import subprocess

        self._json = json
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(HERE)])}
        flags = ["--shard-seqs", str(args.shard_seqs), "--batch-size", str(args.batch_size)]
        flags += ["--dir", args.dir] if args.dir else []
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "host.py"), "--serve", *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.ask_line()  # ready

    def ask_line(self, line: str | None = None) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if line is not None:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise SystemExit(f"benchmark server {self.proc.args} ended early")
        return self._json.loads(answer)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def baseline_src(rev: str, into: str) -> str:
    """``src/`` of git revision ``rev`` extracted under ``into``; the path of its src."""
    import subprocess

    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return f"{into}/src"


def report(med: dict, tokens: int, args: argparse.Namespace, load: tuple, code: str) -> str:
    """The results as markdown (what ``--save`` writes for the README)."""
    out: list[str] = []
    say = out.append
    say(
        f"Host path ({tokens:,} tokens per shard: {args.shard_seqs} sequences of {SEQ_LEN}, "
        f"{LAYERS} layers, chunks of {max(64, 4 * args.batch_size)}; one thread; median of "
        f"{args.reps} interleaved repetitions; code {code} vs baseline `{args.baseline}`; "
        f"load average {load[0]:.2f} → {load[1]:.2f}; `python benchmarks/host.py"
        f"{' --quick' if args.quick else ''}`):"
    )
    say("")
    say(
        "| `output.detail` | tokens/s per core | baseline | × baseline | wall tokens/s "
        "| finish share | finish µs per token | bytes per token-layer (all files) | goal |"
    )
    say("|---|---|---|---|---|---|---|---|---|")
    labels = {
        "none": "`none`",
        "sample": "`sample` (1%)",
        "full32": "`full`, float32",
        "full16": "`full`, float16",
    }
    for mode in MODES:
        cur, base = med["current"][mode], med["baseline"][mode]
        rate, base_rate = tokens / cur["cpu"], tokens / base["cpu"]
        paired = cur["paired"]
        goal = ""
        if mode in ("none", "sample"):
            goal = f"≥ {GOAL // 1000}k: " + ("met" if rate >= GOAL else "**NOT met**")
        say(
            f"| {labels[mode]} | **{rate:,.0f}** | {base_rate:,.0f} | {paired:.2f}× "
            f"| {tokens / cur['seconds']:,.0f} | {cur['finish'] / cur['cpu']:.0%} "
            f"| {cur['finish'] / tokens * 1e6:.2f} "
            f"| {cur['bytes'] / (tokens * LAYERS):.2f} "
            f"(baseline {base['bytes'] / (tokens * LAYERS):.2f}) "
            f"| {goal} |"
        )
    from mixscope.registry import measure_set

    stored = len(measure_set(ALL_GROUPS).stored)
    for mode, (detail, _, _) in GROUP_MODES.items():
        cur, base = med["current"][mode], med["baseline"][mode]
        rate = tokens / cur["cpu"]
        goal = f"≥ {GOAL_ALL // 1000:,}k: " + ("met" if rate >= GOAL_ALL else "**NOT met**")
        say(
            f"| {labels[detail]}, groups {' + '.join(ALL_GROUPS)} ({stored} stored measures) "
            f"| **{rate:,.0f}** | {tokens / base['cpu']:,.0f} | {cur['paired']:.2f}× "
            f"| {tokens / cur['seconds']:,.0f} | {cur['finish'] / cur['cpu']:.0%} "
            f"| {cur['finish'] / tokens * 1e6:.2f} "
            f"| {cur['bytes'] / (tokens * LAYERS):.2f} "
            f"(baseline {base['bytes'] / (tokens * LAYERS):.2f}) | {goal} |"
        )
    old = med["current"]["old"]
    say(
        f"| schema 1 (long rows, no statistics), for reference | {tokens / old['cpu']:,.0f} "
        f"| | | {tokens / old['seconds']:,.0f} | {old['finish'] / old['cpu']:.0%} "
        f"| {old['finish'] / tokens * 1e6:.2f} | {old['bytes'] / (tokens * LAYERS):.2f} | |"
    )
    say("")
    say(
        "× baseline: the median over repetitions of the paired ratio (baseline CPU time over "
        "current, the two run back to back). "
        "tokens/s per core: tokens over the shard's process CPU time (one thread); wall: over "
        "its wall-clock time; finish: the share of the CPU time in `finish()` (tables, "
        "Parquet, writes) and its host CPU µs per token: what the host still pays per token "
        "when the per-chunk accumulation runs on a GPU (issue 39's goal: ≤ 0.1)."
    )
    return "\n".join(out) + "\n"


def floor_report(encoding: dict, tokens: int, sizes: list[dict]) -> str:
    """The encoding floor (``floor``) as a paragraph of the saved section, then the same at
    each shard size of ``--floor-seqs`` (``sizes``): which tables' cost per token falls with
    the shard (keys that recur: token types, the dense layer grid) and which does not."""
    cpu, rows, raw = encoding["cpu"], encoding["rows"], encoding["value_bytes"]
    total = sum(cpu.values())
    parts = ", ".join(
        f"`{k}` {rows[k]:,} rows, {1e6 * cpu[k] / tokens:.2f} µs"
        for k in sorted(cpu, key=cpu.get, reverse=True)  # type: ignore[arg-type]
    )
    ceiling = tokens / total
    return (
        f"Encoding alone: the every-group statistics tables of this shard cost "
        f"**{1e6 * total / tokens:.2f} µs per token** to encode as `finish` writes them (one "
        f"thread, nothing else timed: {parts}), {sum(raw.values()) / tokens:,.0f} bytes of "
        f"non-null values per token: with the tables as they are, the statistics path "
        f"cannot pass **{ceiling:,.0f} tokens/s per core** however fast the accumulation "
        f"(the goal with every group: {GOAL_ALL:,}).\n" + sizes_report(sizes)
    )


#: the tables the shard-size table names (the rest are summed as "other")
SIZED = ("token_stats", "token_hist", "layer_hist")


def sizes_report(sizes: list[dict]) -> str:
    """The encoding floor by shard size: µs per token of each large table, their rows per
    token, and the ceiling it sets; then how much each table's cost per token fell from the
    smallest shard to the largest (a table whose rows grow with the tokens barely falls)."""
    if len(sizes) < 2:
        return ""
    out = [
        "",
        "By shard size (the same Zipf ids drawn for larger shards; encoding only, µs per token;"
        " rows per token in brackets):",
        "",
        "| tokens per shard | all tables | "
        + " | ".join(f"`{k}`" for k in SIZED)
        + " | other | ceiling, tokens/s per core |",
        "|---|---|" + "---|" * len(SIZED) + "---|---|",
    ]
    for r in sizes:
        n, cpu, rows = r["tokens"], r["cpu"], r["rows"]
        cells = [f"{1e6 * cpu[k] / n:.3f} ({rows[k] / n:.2f})" for k in SIZED]
        other = sum(v for k, v in cpu.items() if k not in SIZED)
        total = sum(cpu.values())
        out.append(
            f"| {n:,} | {1e6 * total / n:.3f} | "
            + " | ".join(cells)
            + f" | {1e6 * other / n:.3f} | {n / total:,.0f} |"
        )
    first, last = sizes[0], sizes[-1]
    grew = last["tokens"] / first["tokens"]

    def fell(k: str) -> float:  # cost per token, smallest shard over largest
        return (first["cpu"][k] / first["tokens"]) / (last["cpu"][k] / last["tokens"])

    hist_rows = last["rows"]["token_hist"] / last["tokens"]
    out += [
        "",
        f"From {first['tokens']:,} to {last['tokens']:,} tokens per shard ({grew:.0f}× the "
        "tokens), the cost per token fell "
        + ", ".join(f"{fell(k):.1f}× for `{k}`" for k in SIZED)
        + f". `token_hist` keeps {hist_rows:.1f} rows per token at the largest size"
        + (
            ": its 4,096-bin histogram per token type and measure has a cell of its own for "
            "most occurrences until a shard holds far more occurrences per type, so its "
            "encoding grows with the tokens, not the keys, and so does the host work of a "
            "shard's statistics, whatever device accumulates them."
            if hist_rows >= 1
            else "."
        ),
        "",
    ]
    return "\n".join(out)


def floors(side: Side, reps: int, seqs: list[int], timed: dict[int, dict]) -> list[dict]:
    """The encoding floor at each shard size of ``seqs`` (sequences), from ``side``'s
    server; a size in ``timed`` (the shard's own, timed already) is not timed again."""
    out = []
    for n_seqs in seqs:
        if n_seqs not in timed:
            print(f"  encoding floor: {n_seqs} sequences", file=sys.stderr)
            timed[n_seqs] = side.ask_line(f"floor {reps},{n_seqs}")
        out.append(timed[n_seqs])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shard-seqs", type=int, default=600, help="sequences per shard")
    parser.add_argument("--batch-size", type=int, default=16, help="chunk = max(64, 4 * this)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 128 sequences, 1 rep")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    parser.add_argument("--baseline", default=BASELINE, help="git revision to compare with")
    parser.add_argument("--save", action="store_true", help=f"also write {RESULTS}")
    parser.add_argument(
        "--floor-seqs",
        default="600,2400,9600",
        help="shard sizes (sequences, comma-separated) of the encoding floor's table",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.shard_seqs, args.reps, args.floor_seqs = 128, 1, "128,256"
    floor_seqs = [int(x) for x in args.floor_seqs.split(",") if x]
    if args.serve:
        return serve(args)

    tmp = tempfile.mkdtemp(prefix="mixscope-host-baseline-", dir=args.dir)
    load_before = os.getloadavg()
    try:
        sides = {
            "current": Side(str(REPO / "src"), args),
            "baseline": Side(baseline_src(args.baseline, tmp), args),
        }
        order = [(side, mode) for mode in (*MODES, *GROUP_MODES) for side in sides]
        order += [("current", "old")]
        times: dict[str, dict[str, list[dict]]] = {s: {} for s in sides}
        for side, mode in order:  # warm-up: imports, tokenizer caches, allocator
            sides[side].ask_line(f"{mode} -1")
        for rep in range(args.reps):
            for side, mode in order:
                t = sides[side].ask_line(f"{mode} {rep}")
                times[side].setdefault(mode, []).append(t)
                print(
                    f"  rep {rep + 1}/{args.reps} {side} {mode}: {t['cpu']:.3f}s CPU, "
                    f"{t['seconds']:.3f}s wall",
                    file=sys.stderr,
                )
        profiles = sides["current"].ask_line("profile 0")
        floor_reps = max(3, args.reps)
        encoding = sides["current"].ask_line(f"floor {floor_reps},{args.shard_seqs}")
        by_size = floors(sides["current"], floor_reps, floor_seqs, {args.shard_seqs: encoding})
        for side in sides.values():
            side.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()

    tokens = times["current"]["none"][0]["tokens"]
    med = {
        side: {
            m: {k: statistics.median(r[k] for r in rs) for k in ("seconds", "cpu", "finish")}
            | {"bytes": rs[-1]["bytes"]}
            for m, rs in by_mode.items()
        }
        for side, by_mode in times.items()
    }
    for mode in (*MODES, *GROUP_MODES):  # paired: each repetition's two sides back to back
        pairs = zip(times["baseline"][mode], times["current"][mode], strict=True)
        med["current"][mode]["paired"] = statistics.median(b["cpu"] / c["cpu"] for b, c in pairs)
    text = report(med, tokens, args, (load_before[0], load_after[0]), source_state())
    text += "\n" + floor_report(encoding, tokens, by_size)
    print(f"mixscope host benchmark; pyarrow {pa.__version__}, numpy {np.__version__}\n\n" + text)
    for mode, (total, top, sizes) in profiles.items():
        print()
        print(
            f"where the time goes: one shard, detail {MODES[mode][0]} {MODES[mode][2]}, under "
            f"cProfile ({total:.3f}s with its overhead); functions by self time"
        )
        print(f"{'self s':>7} {'share':>6} {'cum s':>7}  function")
        for self_s, cum_s, label in top:
            print(f"{self_s:>7.3f} {self_s / total:>6.1%} {cum_s:>7.3f}  {label}")
        print(
            "files: "
            + ", ".join(
                f"{k} {r:,} rows {b:,} B ({b / tokens:.1f} B/token)" for k, (r, b) in sizes.items()
            )
        )
    if args.save:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text, encoding="utf-8")
        print(f"wrote {RESULTS} (python benchmarks/readme.py puts it in the README)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
