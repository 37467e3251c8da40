"""The actor's throughput against the bare forward pass: what a job's worker keeps of its device.

Measured side by side in one run, on the same model, corpus, batches and device:

- **bare forward**: the model (``AutoModel``, SDPA attention, the job's dtype) over the
  job's own sequences (the worker's tokenization), longest first, in the batches the job
  forms (``runtime.batch_size`` sequences, ``runtime.batch_tokens`` tokens, per shard);
  nothing else.
- **the actor**: the in-process executor (``runtime.executor: local``, runtime/local.py:
  the shard worker a Ray actor runs, without Ray, with the same shards in flight: at 2 the
  next shard on the model while the last one's ``finish`` writes; ``--in-flight 2,4`` times
  each depth, side by side: above 2, several shards' files are written at once on host
  cores a fast device leaves idle) over the same shards,
  every measure group that applies, ``output.detail: sample``: the engine, the statistics
  accumulated on the device (torch, queued from the result thread), the detail sample, the
  shard's Parquet files. Its time runs from the first shard's event to the last one's:
  the first shard (model load) is left out of both sides.

The ratio is the actor's tokens/s over the bare forward's (goal ≥ 0.85 on a GPU). Repetitions
alternate which side runs first; the figure is the median of the per-repetition ratios.
Beside it, the result path's host CPU per token (``ShardResult.result_cpu_seconds``: the
result thread's CPU time, chunks and ``finish``, over the tokens; goal ≤ 0.1 µs where the
accumulation runs on a GPU, where what is left on the host is O(keys) per shard).
The models are random with real shapes (tests/shaped_models.py: BERT-base, a 1B Llama with
grouped-query heads), saved as a model directory the worker loads like any other; the
corpus is WikiText-2 (benchmarks/common.py: wikitext_path) repeated ``--repeat`` times.

    python benchmarks/actor.py --device cuda --dtype bfloat16 --save   # a lent GPU
    python benchmarks/actor.py --quick                                 # smoke test (CPU)
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from transformers.utils import logging as hf_logging

from common import HEADING, publish, source_state, tests_module, wikitext_path
from timing import synchronizer

GOAL = 0.85
#: the models timed: the shapes GPUs run, and their small siblings for ``--quick``
SHAPES = {False: ("bert-base", "llama-1b"), True: ("bert-small", "llama-small")}


def corpus(tmp: Path, repeat: int, limit: int | None) -> Path:
    """WikiText-2's paragraphs (headings dropped), ``repeat`` times over, as one text file."""
    import re

    heading = re.compile(HEADING)
    lines = wikitext_path().read_text(encoding="utf-8").splitlines()
    docs = [ln for ln in lines if ln.strip() and not heading.match(ln)][:limit]
    path = tmp / "corpus.txt"
    path.write_text("\n".join(docs * repeat) + "\n", encoding="utf-8")
    return path


def job_spec(
    model_dir: str, corpus_path: Path, out: Path, args: argparse.Namespace, in_flight: int
) -> Any:
    from mixscope.config import load_spec

    return load_spec(
        None,
        {
            "model": model_dir,
            "corpus.paths": [str(corpus_path)],
            "out": str(out),
            "analysis.dtype": args.dtype,
            "analysis.max_length": args.max_length,
            "analysis.measures": "all",
            "runtime.executor": "local",
            "runtime.device": args.device,
            "runtime.docs_per_shard": args.docs_per_shard,
            "runtime.shards_in_flight": in_flight,
            "output.detail": "sample",
        },
    )


#: the host CPU of the result path per token, where the statistics run on a GPU (µs)
HOST_GOAL_US = 0.1
HOST_CPU: dict[int, list[float]] = {}  # µs per token of each actor run, by shards in flight


def actor_seconds(prep: Any) -> tuple[float, int]:
    """Seconds from the first shard's event to the last one's, and the tokens of the shards
    after the first (runtime/local.py: one ShardWorker, ``runtime.shards_in_flight`` shards
    at once, as a Ray actor); the result path's host CPU per token goes to ``HOST_CPU``."""
    from mixscope.runtime.local import LocalExecutor

    stamps: list[float] = []
    tokens: list[int] = []
    cpu: list[float] = []
    executor = LocalExecutor(prep.spec, prep.run_id, prep.max_length)
    for event in executor.run(prep.plan.shards):
        if event.kind != "done" or event.result is None:
            raise SystemExit(f"shard {event.shard_id} {event.kind}: {event.error}")
        stamps.append(time.perf_counter())
        tokens.append(event.result.tokens)
        cpu.append(event.result.result_cpu_seconds)
    depth = prep.spec.runtime.shards_in_flight
    HOST_CPU.setdefault(depth, []).append(1e6 * sum(cpu[1:]) / max(sum(tokens[1:]), 1))
    return stamps[-1] - stamps[0], sum(tokens[1:])


class BareForward:
    """The model alone over the job's sequences, batched as the job batches them."""

    def __init__(self, prep: Any, device: torch.device, dtype: torch.dtype) -> None:
        from transformers import AutoModel

        from mixscope.corpus.plan import read_shard
        from mixscope.models.resolve import load_tokenizer

        spec = prep.spec
        self.runtime = spec.runtime
        if device.type == "cpu":  # the threads the worker runs on (runtime/worker.py)
            torch.set_num_threads(max(1, int(spec.runtime.cpus_per_worker)))
        self.tokenizer = load_tokenizer(spec.model)
        self.model = AutoModel.from_pretrained(spec.model, attn_implementation="sdpa", dtype=dtype)
        self.model = self.model.to(device).eval()
        self.device = device
        # a Llama takes no token types, whatever the (BERT) tokenizer returns
        self.types = "token_type_ids" in inspect.signature(self.model.forward).parameters
        self.shards = [self._encode(read_shard(s, spec.corpus), prep) for s in prep.plan.shards]

    def _encode(self, docs: list, prep: Any) -> list:
        """The shard's sequences, tokenized as the worker does (the same lengths: each
        repetition checks the token counts agree; masking changes ids, not lengths)."""
        from mixscope.corpus.encode import encode_documents

        texts = [d.text for d in docs]
        return encode_documents(self.tokenizer, texts, max_length=prep.max_length)

    @torch.inference_mode()
    def seconds(self) -> tuple[float, int]:
        """Seconds of the shards after the first, and their tokens."""
        from mixscope.corpus.encode import pad_batch
        from mixscope.mixing.batches import batch_size_for

        sync = synchronizer(self.device)
        pad_id = self.tokenizer.pad_token_id
        tokens = 0
        sync()
        start = time.perf_counter()
        for seqs in self.shards[1:]:
            order = sorted(seqs, key=len, reverse=True)
            k = 0
            while k < len(order):
                width = len(order[k])
                size = batch_size_for(
                    width, self.runtime.batch_size, self.runtime.batch_tokens, None
                )
                ids, mask, types = pad_batch(order[k : k + size], pad_id)
                inputs = {"input_ids": ids, "attention_mask": mask}
                if self.types:
                    inputs["token_type_ids"] = types
                self.model(**{n: torch.from_numpy(v).to(self.device) for n, v in inputs.items()})
                k += size
            tokens += sum(len(s) for s in seqs)
        sync()
        return time.perf_counter() - start, tokens


def measure(shape: str, args: argparse.Namespace, tmp: Path, text: Path) -> list[dict[str, Any]]:
    """The paired repetitions of one model: bare forward and the actor at each depth
    (``--in-flight``), their order turned round every repetition; a row per depth."""
    from mixscope.runtime.prepare import prepare

    shaped_models = tests_module("shaped_models")
    dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    model_dir = shaped_models.save(shape, str(tmp / shape), dtype, device, args.max_length)
    preps = {
        n: prepare(job_spec(model_dir, text, tmp / f"out-{shape}-{n}", args, n), write=False)
        for n in args.in_flight
    }
    prep = preps[args.in_flight[0]]
    if len(prep.plan.shards) < 2:
        raise SystemExit("the corpus makes fewer than 2 shards: raise --repeat")
    bare = BareForward(prep, device, dtype)
    bare.seconds()  # warm-up: kernels chosen, allocator grown
    runs: list[dict[str, float]] = []
    HOST_CPU.clear()
    for rep in range(args.reps):
        sides: dict[str, Any] = {"bare": bare.seconds}
        for n, p in preps.items():
            sides[f"actor{n}"] = lambda p=p: actor_seconds(p)
        order = list(sides) if rep % 2 == 0 else list(sides)[::-1]
        got = {name: sides[name]() for name in order}
        b_s, b_tok = got["bare"]
        run = {"bare": b_tok / b_s}
        for n in preps:
            a_s, a_tok = got[f"actor{n}"]
            if a_tok != b_tok:
                raise SystemExit(f"{shape}: the actor counted {a_tok} tokens, the bare {b_tok}")
            run[f"actor{n}"] = a_tok / a_s
        runs.append(run)
        actors = ", ".join(f"actor ({n} in flight) {run[f'actor{n}']:,.0f}" for n in preps)
        print(f"  {shape} rep {rep + 1}: bare {run['bare']:,.0f} tok/s, {actors} tok/s",
              file=sys.stderr, flush=True)  # fmt: skip
    del bare
    return [
        {
            "shape": shape,
            "in_flight": n,
            "shards": len(prep.plan.shards) - 1,
            "tokens": b_tok,
            "bare": statistics.median(r["bare"] for r in runs),
            "actor": statistics.median(r[f"actor{n}"] for r in runs),
            "ratio": statistics.median(r[f"actor{n}"] / r["bare"] for r in runs),
            "host_us": statistics.median(HOST_CPU[n]),
        }
        for n in preps
    ]


def machine(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu, {torch.get_num_threads()} threads"


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    labels = tests_module("shaped_models").LABELS
    flags = f"--device {args.device} --dtype {args.dtype}" + (" --quick" if args.quick else "")
    flags += f" --in-flight {','.join(map(str, args.in_flight))}"
    lines = [
        f"The actor against the bare forward ({machine(torch.device(args.device))}, "
        f"{args.dtype}, every group, detail sample, max_length {args.max_length}; code "
        f"{source_state()}; `python benchmarks/actor.py {flags}`):",
        "",
        "| model | shards × tokens | shards in flight | bare forward | actor | actor / bare (goal) "
        "| result path's host CPU per token |",
        "|---|---|---|---|---|---|---|",
    ]
    on_gpu = args.device.startswith("cuda")
    for r in rows:
        ok = "met" if r["ratio"] >= GOAL else "NOT met"
        host = f"{r['host_us']:.2f} µs"
        if on_gpu:
            host += f" (≤ {HOST_GOAL_US}, {'met' if r['host_us'] <= HOST_GOAL_US else 'NOT met'})"
        lines.append(
            f"| {labels[r['shape']]} | {r['shards']} × {r['tokens'] / r['shards']:,.0f} "
            f"| {r['in_flight']} | {r['bare']:,.0f} tok/s | {r['actor']:,.0f} tok/s "
            f"| **{r['ratio']:.2f}** (≥ {GOAL}, {ok}) | {host} |"
        )
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--docs-per-shard", type=int, default=256)
    p.add_argument("--repeat", type=int, default=None, help="corpus repetitions (default 4)")
    p.add_argument("--reps", type=int, default=None, help="paired repetitions (default 3)")
    p.add_argument("--quick", action="store_true", help="small shapes, 120 documents, 1 rep")
    p.add_argument("--save", action="store_true", help="also write benchmarks/results/")
    p.add_argument("--shapes", default=None, help="models to time (default: by --quick)")
    p.add_argument(
        "--in-flight", default="2", help="runtime.shards_in_flight values to time, e.g. 2,4"
    )
    args = p.parse_args(argv)
    args.in_flight = [int(n) for n in args.in_flight.split(",")]
    args.shapes = args.shapes.split(",") if args.shapes else list(SHAPES[args.quick])
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    args.repeat = args.repeat or (1 if args.quick else 4)
    args.reps = args.reps or (1 if args.quick else 3)
    if args.quick:
        args.docs_per_shard = min(args.docs_per_shard, 40)
        args.max_length = min(args.max_length, 128)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    hf_logging.disable_progress_bar()  # the log keeps the figures, not weight-loading bars
    with tempfile.TemporaryDirectory(prefix="mixscope-actor-") as name:
        tmp = Path(name)
        text = corpus(tmp, args.repeat, 120 if args.quick else None)
        rows = [row for shape in args.shapes for row in measure(shape, args, tmp, text)]
    name = "actor" if args.device == "cpu" else "actor-gpu"
    publish(name, report(rows, args), args.save)


if __name__ == "__main__":
    main()
