"""Results directories for the SQL tests: one from real jobs, one synthetic in the real schema.

The synthetic directory is written through the worker's own result path (``ShardAccumulator``:
statistics, detail, documents) and the store's primitives (``commit_shard``,
``consolidate``, ``write_run``), so its files, commit records and run records are exactly
what a job writes; only the numbers are chosen, to hit edge cases:

- measures quantized to multiples of 1/8 (exact in float32 and in every sum), so values,
  per-token means and frequencies tie, and ties are exact in DuckDB and numpy alike;
- three runs of one model (``name``) at steps 100/200/300 and one of another model, for
  ``checkpoint_trend``;
- an ``edge`` run with 3 layers, constant measures (``attn_w``, ``attnres_w``), ``[UNK]`` marked
  special (category ``other_special``), sequences without a [MASK] or without an [UNK],
  a document split into two segments, pairs (token_type 1), and frequencies split over
  two shards (the view sums them), its statistics left unconsolidated (per-shard partials).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from mixscope.config import OutputSpec
from mixscope.corpus.encode import EncodedSequence
from mixscope.corpus.plan import Document
from mixscope.registry import measure_set
from mixscope.runtime.host_path import ShardAccumulator
from mixscope.runtime.shard_result import ShardResult
from mixscope.stats.consolidate import consolidate
from mixscope.stats.token_block import Vocabulary
from mixscope.store.layout import Layout
from mixscope.store.manifest import commit_shard
from mixscope.store.run_record import RunRecord
from mixscope.store.runs import now, write_run
from mixscope.store.schema import SCHEMA_VERSION

#: the synthetic runs' measure set (the paper's group: what runs before groups stored), passed
#: explicitly to every writer: storage and statistics assume none
MEASURE_SET = measure_set(("paper",))
MEASURES = MEASURE_SET.columns

CLS, SEP, MASK, UNK = (101, "[CLS]"), (102, "[SEP]"), (103, "[MASK]"), (100, "[UNK]")
#: word pieces of the synthetic corpus (ids of the MiniLM vocabulary; any ids would do)
WORDS = {
    1996: "the",
    1037: "a",
    4937: "cat",
    3899: "dog",
    2006: "on",
    1012: ".",
    2003: "is",
    6809: "mixing",
    13523: "mat",
    2924: "bank",
    1010: ",",
    2000: "to",
}

#: run ids of the synthetic directory
CKPT_RUNS = {100: "ckpt-100", 200: "ckpt-200", 300: "ckpt-300"}
CKPT_MODEL = "tiny-ckpt"
OTHER_RUN, OTHER_MODEL = "other-50", "other-model"
EDGE_RUN, EDGE_MODEL = "edge", "edge-model"


# -- sequences and tables ------------------------------------------------------------------


def make_sequences(
    rng: np.random.Generator,
    n_docs: int,
    *,
    first_doc: int = 0,
    pairs: bool = False,
    unk_every: int = 0,
    mask_rate: float = 0.3,
    split_doc: int | None = None,
) -> list[dict[str, Any]]:
    """Sequences as dicts of per-position lists (tokens as the model saw them + originals)."""
    word_ids = np.array(sorted(WORDS))
    # a skewed draw so counts differ, and a small vocabulary so many of them tie
    p = 1.0 / np.arange(1, len(word_ids) + 1)
    p /= p.sum()
    seqs = []
    for doc in range(first_doc, first_doc + n_docs):
        for segment in range(2 if doc == split_doc else 1):
            n_a = int(rng.integers(2, 7))
            a = [int(x) for x in rng.choice(word_ids, n_a, p=p)]
            b = (
                [int(x) for x in rng.choice(word_ids, int(rng.integers(2, 5)), p=p)]
                if pairs
                else []
            )
            if unk_every and doc % unk_every == 0:
                a[len(a) // 2] = UNK[0]
            ids = [CLS[0], *a, SEP[0]] + ([*b, SEP[0]] if b else [])
            token_type = [0] * (n_a + 2) + [1] * (len(b) + 1 if b else 0)
            special = [i in (CLS[0], SEP[0], UNK[0]) for i in ids]
            maskable = [k for k, s in enumerate(special) if not s]
            # as the job's protocol: max(1, round(r * m)) of the m non-special tokens, except
            # that every third document gets none (a category missing from some sequences)
            n_mask = 0 if doc % 3 == 1 else max(1, round(mask_rate * len(maskable)))
            masked = set(rng.choice(maskable, n_mask, replace=False).tolist()) if n_mask else set()
            seqs.append(
                {
                    "doc_id": doc,
                    "segment": segment,
                    "original_ids": ids,
                    "token_id": [MASK[0] if k in masked else t for k, t in enumerate(ids)],
                    "token_type": token_type,
                    "is_special": special,
                    "is_masked": [k in masked for k in range(len(ids))],
                }
            )
    return seqs


def token_string(token_id: int) -> str:
    known = {CLS[0]: CLS[1], SEP[0]: SEP[1], MASK[0]: MASK[1], UNK[0]: UNK[1], **WORDS}
    return known.get(token_id, f"w{token_id}")


class SyntheticTokenizer:
    """The one tokenizer method the result path needs: token strings by id."""

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [token_string(int(i)) for i in ids]


def shard_arrays(
    seqs: list[dict[str, Any]],
    layers: int,
    rng: np.random.Generator,
    constant: dict[str, float] | None = None,
    step_shift: int = 0,
) -> tuple[list[EncodedSequence], list[np.ndarray]]:
    """Engine-shaped results: sequences and [layer, measure, seq] arrays in {0, 1/8, …, 1}.

    attnres_w is attn_w / 2, as the engine makes it (``constant`` sets attn_w).
    """
    encoded, measures = [], []
    for s in seqs:
        n = len(s["token_id"])
        encoded.append(
            EncodedSequence(
                doc_id=s["doc_id"],
                segment=s["segment"],
                input_ids=np.asarray(s["token_id"], np.int64),
                token_type_ids=np.asarray(s["token_type"], np.int64),
                special=np.asarray(s["is_special"], bool),
                masked=np.asarray(s["is_masked"], bool),
                original_ids=np.asarray(s["original_ids"], np.int64),
            )
        )
        m = np.zeros((layers, len(MEASURES), n), np.float32)
        for k, name in enumerate(MEASURES):
            if name == "attnres_w":
                continue
            if constant and name in constant:
                m[:, k] = constant[name]
                continue
            # mixing grows with depth (and with the training step) plus quantized noise
            layer = np.arange(layers)[:, None]
            q = rng.integers(0, 6, (layers, n)) + np.minimum(layer + step_shift, 3)
            m[:, k] = np.clip(q, 0, 8) / 8.0
        m[:, MEASURES.index("attnres_w")] = m[:, MEASURES.index("attn_w")] / 2
        measures.append(m)
    return encoded, measures


def result_tables(
    seqs: list[dict[str, Any]], layers: int, rng: np.random.Generator
) -> tuple[pa.Table, dict[str, pa.Table]]:
    """The detail table and the statistics tables a worker would write for ``seqs``."""
    from mixscope.stats.accumulate import statistics
    from mixscope.stats.detail import detail_table
    from mixscope.stats.token_block import token_block

    vocab = Vocabulary(SyntheticTokenizer())
    block = token_block(*shard_arrays(seqs, layers, rng), vocab, MEASURE_SET)
    return (
        detail_table(block, vocab, stored=MEASURE_SET.stored),
        statistics(block, vocab, MEASURE_SET),
    )


# -- a run written through the store ---------------------------------------------------


def write_synthetic_run(
    layout: Layout,
    run_id: str,
    shards: list[tuple[list[EncodedSequence], list[np.ndarray]]],
    *,
    name: str,
    step: int | None,
    options: dict[str, Any] | None = None,
    consolidated: bool = True,
    corpus: str | None = None,
) -> dict[str, Any]:
    """Files (through the worker's result path), commit records, plan and run record of a
    complete run, as a job writes them; ``consolidated``: the statistics merged, or left as
    per-shard partials; ``corpus``: the corpus's name (default the job's ``name``)."""
    created = now()
    corpus = corpus or name
    docs_per_shard = [sorted({s.doc_id for s in seqs}) for seqs, _ in shards]
    plan = {
        "files": [f"/synthetic/{corpus}.txt"],
        "n_docs": sum(len(d) for d in docs_per_shard),
        "bad": {},
        "bad_examples": [],
        "fingerprint": f"corpus-{corpus}",
        "shards": [
            {
                "shard_id": k,
                "file": f"/synthetic/{corpus}.txt",
                "start": k,
                "first_doc": docs[0],
                "n_docs": len(docs),
            }
            for k, docs in enumerate(docs_per_shard)
        ],
    }
    layout.write_json(layout.plan_path(run_id), plan)
    rows = tokens = 0
    vocab = Vocabulary(SyntheticTokenizer())
    for shard_id, (seqs, measures) in enumerate(shards):
        results = ShardAccumulator(
            layout, run_id, shard_id, vocab, OutputSpec(detail="full"), measures=MEASURE_SET
        )
        results.add(seqs, measures)
        docs = [
            Document(d, f"text {d}", f"/synthetic/{corpus}.txt", d)
            for d in docs_per_shard[shard_id]
        ]
        files = results.finish(docs)
        result = ShardResult(
            run_id=run_id,
            shard_id=shard_id,
            docs=len(docs),
            sequences=len(seqs),
            tokens=results.tokens,
            rows=results.rows,
            detail_rows=results.detail_rows,
            files=ShardResult.entries(files),
            seconds=0.0,
        )
        commit_shard(layout, run_id, result.commit_record(1, now()))
        rows += results.rows
        tokens += results.tokens
    if consolidated:
        consolidate(layout, run_id)
    record = {
        "run_id": run_id,
        "name": name,
        "created_at": created,
        "invocations": [],
        "model": {
            "kind": "local",
            "source": f"/models/{name}/step-{step}",
            "revision": None,
            "fingerprint": f"fp-{run_id}",
            "step": step,
        },
        "step": step,
        "corpus": {
            "paths": [f"/synthetic/{corpus}.txt"],
            "files": plan["files"],
            "fingerprint": plan["fingerprint"],
            "n_docs": plan["n_docs"],
            "bad": {},
            "bad_examples": [],
        },
        "options": options
        or {
            "analysis": {"mask_rate": 0.3},
            "output": {"detail": "full"},
            "schema_version": SCHEMA_VERSION,
        },
        "spec": {"model": f"/models/{name}/step-{step}", "name": name},
        "shards_total": len(shards),
        "shards_done": len(shards),
        "shards_failed": 0,
        "status": "complete",
        "rows": rows,
        "tokens": tokens,
        "errors": {},
    }
    write_run(layout, RunRecord.from_json(record, "synthetic run record"))
    return record


def build_synthetic(root: str | Path, *, seed: int = 0) -> dict[str, Any]:
    """The edge-case results directory; returns what it wrote (run ids by role)."""
    layout = Layout.open(str(root))
    rng = np.random.default_rng(seed)
    # one corpus for every checkpoint of the model, analysed at three steps
    ckpt_seqs = make_sequences(rng, 8, pairs=False, unk_every=0)
    half = len(ckpt_seqs) // 2
    for k, (step, run_id) in enumerate(sorted(CKPT_RUNS.items())):
        shard_rng = np.random.default_rng(seed + 10 + k)
        shards = [
            shard_arrays(part, 2, shard_rng, step_shift=k)
            for part in (ckpt_seqs[:half], ckpt_seqs[half:])
        ]
        write_synthetic_run(layout, run_id, shards, name=CKPT_MODEL, step=step)
    other = make_sequences(rng, 4)
    write_synthetic_run(
        layout,
        OTHER_RUN,
        [shard_arrays(other, 1, rng)],
        name=OTHER_MODEL,
        step=50,
    )
    # the edge run: pairs, [UNK] specials, a split document, a constant measure, 2 shards
    edge_a = make_sequences(rng, 5, pairs=True, unk_every=2, split_doc=3)
    edge_b = make_sequences(rng, 4, first_doc=5, pairs=True, unk_every=2)
    constant = {"attn_w": 0.5}  # attnres_w = 0.25 throughout
    write_synthetic_run(
        layout,
        EDGE_RUN,
        [shard_arrays(edge_a, 3, rng, constant), shard_arrays(edge_b, 3, rng, constant)],
        name=EDGE_MODEL,
        step=None,
        consolidated=False,  # read from the per-shard partials
    )
    return {
        "ckpt": dict(CKPT_RUNS),
        "other": OTHER_RUN,
        "edge": EDGE_RUN,
        "runs": sorted([*CKPT_RUNS.values(), OTHER_RUN, EDGE_RUN]),
    }


# -- a results directory from real jobs ------------------------------------------------

REAL_CORPUS = [
    "The cat sat on the mat.",
    "A dog barked at the cat.",
    "The quick brown fox jumps over the lazy dog near the river bank today.",
    "Mixing is the ratio of context to self.",
    "The the the cat cat, the dog.",
    "Numbers 1 2 3 and the words of the corpus.",
    "A much longer document that goes on and on, so that it is split into more than one "
    "segment by the tokenizer at the maximum length of the model.",
    "Short.",
    "The mat is on the cat, said the dog to the cat.",
    "Another pair partner.",
]

#: the two real runs: (pairs, seed, max_length, step)
REAL_RUNS = ((True, 0, 24, 1000), (False, 1, 16, 2000))


def build_real(model_dir: str, root: str | Path, corpus_dir: str | Path) -> list[str]:
    """Two real runs of ``mixscope run`` (in-process executor) on a small corpus."""
    from mixscope.config import load_spec
    from mixscope.runtime.driver import run_job

    corpus = Path(corpus_dir) / "corpus.txt"
    corpus.write_text("\n".join(REAL_CORPUS) + "\n", encoding="utf-8")
    run_ids = []
    for pairs, seed, max_length, step in REAL_RUNS:
        spec = load_spec(
            None,
            {
                "name": "real-job",
                "step": step,
                "model": model_dir,
                "corpus.paths": [str(corpus)],
                "corpus.pairs": pairs,
                "out": str(root),
                "analysis.mask_rate": 0.3,
                "analysis.seed": seed,
                "analysis.max_length": max_length,
                "runtime.executor": "local",
                "runtime.docs_per_shard": 3,
                "runtime.batch_size": 4,
                "output.detail": "full",
            },
        )
        summary = run_job(spec, show_progress=False)
        assert summary.status == "complete", summary
        run_ids.append(summary.run_id)
    return run_ids


# -- reference frequency files ---------------------------------------------------------


def reference_counts(tokens: dict[int, str], skip_every: int = 4) -> dict[int, int]:
    """Made-up reference counts for most of ``tokens`` (every ``skip_every``-th left out),
    with ties: the count depends on the token id modulo 5."""
    out = {}
    for k, tid in enumerate(sorted(tokens)):
        if skip_every and k % skip_every == skip_every - 1:
            continue
        out[tid] = 10 + 7 * (tid % 5)
    return out


def write_reference_files(folder: Path, tokens: dict[int, str]) -> dict[str, tuple[Path, dict]]:
    """A 'count token' text file, a 'rank,count,token_id' CSV and a Parquet file.

    Returns name → (path, key → count), keyed by token string (text) or token id (others).
    """
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    counts = reference_counts(tokens)
    by_token = {tokens[t]: c for t, c in counts.items()}
    text = folder / "ref.txt"
    # the shape of `sort | uniq -c | sort -rn`: right-aligned counts, one space, the token
    lines = sorted(by_token.items(), key=lambda kv: (-kv[1], kv[0]))
    text.write_text("".join(f"{c:7d} {tok}\n" for tok, c in lines if "," not in tok))
    text_counts = {tok: c for tok, c in by_token.items() if "," not in tok}

    csv = folder / "ref.csv"
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    csv.write_text(
        "rank,count,token_id\n"
        + "".join(f"{k + 1},{c},{tid}\n" for k, (tid, c) in enumerate(ranked))
    )
    # the Parquet file counts differently (all tokens, count = id % 7 + 1) to tell them apart
    par_counts = {tid: tid % 7 + 1 for tid in tokens}
    par = folder / "ref.parquet"
    pq.write_table(
        pa.table(
            {
                "token_id": pa.array(list(par_counts), pa.int64()),
                "token": [tokens[t] for t in par_counts],
                "count": pa.array(list(par_counts.values()), pa.int64()),
            }
        ),
        par,
    )
    return {
        "ref_text": (text, text_counts),
        "ref_csv": (csv, dict(counts)),
        "ref_parquet": (par, par_counts),
    }


def competition_ranks(counts: dict[Any, int]) -> dict[Any, int]:
    """rank 1 = most frequent; ties share the lowest rank (1 + how many are more frequent)."""
    values = sorted(counts.values(), reverse=True)
    first = {}
    for k, v in enumerate(values):
        first.setdefault(v, k + 1)
    return {key: first[c] for key, c in counts.items()}


def log_bin(rank: int, per_decade: int) -> int:
    """Bin b holds ranks in [10^(b/k), 10^((b+1)/k)): 10^b <= rank^k < 10^(b+1), exactly."""
    return len(str(rank**per_decade)) - 1


def nan_or_none(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))
