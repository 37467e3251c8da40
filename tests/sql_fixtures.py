"""Results directories for the SQL tests: one from real jobs, one synthetic in the real schema.

The synthetic directory is written through the store's own primitives (``Layout``,
``write_parquet``, ``commit_shard``, ``write_run``), so its files, commit records and run
records are exactly what a job writes; only the numbers are chosen, to hit edge cases:

- measures quantized to multiples of 1/8 (exact in float32 and in every sum), so values,
  per-token means and frequencies tie, and ties are exact in DuckDB and numpy alike;
- three runs of one model (``name``) at steps 100/200/300 and one of another model, for
  ``checkpoint_trend``;
- an ``edge`` run with 3 layers, a constant measure (``attnres_w``), ``[UNK]`` marked
  special (category ``other_special``), sequences without a [MASK] or without an [UNK],
  a document split into two segments, pairs (token_type 1), and frequencies split over
  two shards (the view sums them).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from mixscope.store.layout import Layout
from mixscope.store.manifest import commit_shard
from mixscope.store.runs import now, write_run
from mixscope.store.schema import MEASURE_COLUMNS, SCHEMA_VERSION, TOKENS_SCHEMA
from mixscope.store.writer import write_parquet

MEASURES = MEASURE_COLUMNS

#: the per-shard frequency files a job writes (token_id, token, count of unmasked tokens)
FREQUENCY_SCHEMA = pa.schema(
    [("token_id", pa.int32()), ("token", pa.string()), ("count", pa.int64())]
)

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
    return {CLS[0]: CLS[1], SEP[0]: SEP[1], MASK[0]: MASK[1], UNK[0]: UNK[1], **WORDS}[token_id]


def tokens_table(
    seqs: list[dict[str, Any]],
    layers: int,
    rng: np.random.Generator,
    constant: dict[str, float] | None = None,
    step_shift: int = 0,
) -> pa.Table:
    """One row per (sequence, position, layer) in TOKENS_SCHEMA; measures in {0, 1/8, …, 1}."""
    cols: dict[str, list] = {f.name: [] for f in TOKENS_SCHEMA}
    for s in seqs:
        for layer in range(1, layers + 1):
            for pos, tid in enumerate(s["token_id"]):
                cols["doc_id"].append(s["doc_id"])
                cols["segment"].append(s["segment"])
                cols["position"].append(pos)
                cols["token_id"].append(tid)
                cols["token"].append(token_string(tid))
                cols["token_type"].append(s["token_type"][pos])
                cols["is_special"].append(s["is_special"][pos])
                cols["is_masked"].append(s["is_masked"][pos])
                cols["layer"].append(layer)
    n = len(cols["doc_id"])
    layer_arr = np.asarray(cols["layer"])
    for m in MEASURES:
        if constant and m in constant:
            cols[m] = np.full(n, constant[m], np.float32)
        else:
            # mixing grows with depth (and with the training step) plus quantized noise
            k = rng.integers(0, 6, n) + np.minimum(layer_arr - 1 + step_shift, 3)
            cols[m] = (np.clip(k, 0, 8) / 8.0).astype(np.float32)
    arrays = []
    for f in TOKENS_SCHEMA:
        if f.name == "token":
            arrays.append(pa.array(cols["token"], pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(cols[f.name], f.type))
    return pa.Table.from_arrays(arrays, schema=TOKENS_SCHEMA)


def frequency_table(seqs: list[dict[str, Any]]) -> pa.Table:
    ids = np.concatenate([np.asarray(s["original_ids"]) for s in seqs])
    uniq, counts = np.unique(ids, return_counts=True)
    return pa.Table.from_arrays(
        [
            pa.array(uniq.astype(np.int32)),
            pa.array([token_string(int(t)) for t in uniq]),
            pa.array(counts.astype(np.int64)),
        ],
        schema=FREQUENCY_SCHEMA,
    )


# -- a run written through the store ---------------------------------------------------


def write_synthetic_run(
    layout: Layout,
    run_id: str,
    shards: list[tuple[pa.Table, pa.Table | None]],
    *,
    name: str,
    step: int | None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Files, commit records, plan and run record of a complete run, as the driver writes them."""
    created = now()
    plan = {
        "files": [f"/synthetic/{name}.txt"],
        "n_docs": sum(int(np.unique(t["doc_id"].to_numpy()).size) for t, _ in shards),
        "bad": {},
        "bad_examples": [],
        "fingerprint": f"corpus-{name}",
        "shards": [
            {"shard_id": k, "file": f"/synthetic/{name}.txt", "start": k, "stop": k + 1}
            for k in range(len(shards))
        ],
    }
    layout.write_json(f"{layout.run_dir(run_id)}/plan.json", plan)
    rows = tokens = 0
    for shard_id, (table, freqs) in enumerate(shards):
        files = {
            "tokens": write_parquet(layout, layout.data_file("tokens", run_id, shard_id), table)
        }
        if freqs is not None:
            files["frequencies"] = write_parquet(
                layout, layout.data_file("frequencies", run_id, shard_id), freqs
            )
        n_layers = int(np.unique(table["layer"].to_numpy()).size)
        commit_shard(
            layout,
            run_id,
            {
                "run_id": run_id,
                "shard_id": shard_id,
                "docs": int(np.unique(table["doc_id"].to_numpy()).size),
                "sequences": 0,
                "tokens": table.num_rows // max(1, n_layers),
                "rows": table.num_rows,
                "files": files,
                "attempt": 1,
                "committed_at": now(),
            },
        )
        rows += table.num_rows
        tokens += table.num_rows // max(1, n_layers)
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
            "paths": [f"/synthetic/{name}.txt"],
            "files": plan["files"],
            "fingerprint": plan["fingerprint"],
            "n_docs": plan["n_docs"],
            "bad": {},
            "bad_examples": [],
        },
        "options": options or {"analysis": {"mask_rate": 0.3}, "schema_version": SCHEMA_VERSION},
        "spec": {"model": f"/models/{name}/step-{step}", "name": name},
        "shards_total": len(shards),
        "shards_done": len(shards),
        "shards_failed": 0,
        "status": "complete",
        "rows": rows,
        "tokens": tokens,
        "errors": {},
    }
    write_run(layout, record)
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
            (
                tokens_table(part, 2, shard_rng, step_shift=k),
                frequency_table(part),
            )
            for part in (ckpt_seqs[:half], ckpt_seqs[half:])
        ]
        write_synthetic_run(layout, run_id, shards, name=CKPT_MODEL, step=step)
    other = make_sequences(rng, 4)
    write_synthetic_run(
        layout,
        OTHER_RUN,
        [(tokens_table(other, 1, rng), frequency_table(other))],
        name=OTHER_MODEL,
        step=50,
    )
    # the edge run: pairs, [UNK] specials, a split document, a constant measure, 2 shards
    edge_a = make_sequences(rng, 5, pairs=True, unk_every=2, split_doc=3)
    edge_b = make_sequences(rng, 4, first_doc=5, pairs=True, unk_every=2)
    constant = {"attnres_w": 0.25}
    write_synthetic_run(
        layout,
        EDGE_RUN,
        [
            (tokens_table(edge_a, 3, rng, constant), frequency_table(edge_a)),
            (tokens_table(edge_b, 3, rng, constant), frequency_table(edge_b)),
        ],
        name=EDGE_MODEL,
        step=None,
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
