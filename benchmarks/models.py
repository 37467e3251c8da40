"""Models and inputs shared by the engine and decoder benchmarks (engine.py, decoder.py).

Random configurations (no download needed) or the packaged MiniLM, loaded on the eager
attention path; batches of real WikiText-2 text, every sequence exactly ``n`` tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from common import offline_tokenizer

#: random BERT configurations for engine.py --random-config (no download needed)
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

#: random pre-LN decoder configurations for decoder.py --decoder (no download needed)
#: the CPU-sized decoder shape (~0.1B): grouped-query 16:4, the same for every family timed
_CPU_SHAPE: dict[str, Any] = {
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "max_position_embeddings": 4096,
    "vocab_size": 32000,
}

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
    "llama": {**_CPU_SHAPE, "model_type": "llama"},
    # the CPU-sized Llama's shape in the 2024–26 layouts: Gemma-3's sandwich norms (q/k
    # norms, γ = 1 + w, sliding and global layers), OLMo-2's norms inside the branches
    "gemma3": {
        **_CPU_SHAPE,
        "model_type": "gemma3_text",
        "head_dim": 64,
        "query_pre_attn_scalar": 64,
        "sliding_window": 256,
    },
    "olmo2": {**_CPU_SHAPE, "model_type": "olmo2"},
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


def resolve_device(spec: str) -> torch.device:
    """``auto`` is cuda if available, else cpu; anything else as torch spells it."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


def build_encoder(model_dir: str | None, random_config: str | None, device: torch.device) -> Any:
    """A ``LoadedModel`` (eager attention): the weights in ``model_dir`` or a random BERT."""
    from mixscope.models.loading import load

    if random_config is None:
        loaded = load(model_dir, device=device)
    else:
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        config = BertConfig(**RANDOM_CONFIGS[random_config])
        model = BertModel(config, add_pooling_layer=False)
        model.set_attn_implementation("eager")
        tokenizer = offline_tokenizer()  # BERT uncased vocabulary
        loaded = load((model, tokenizer), device=device)
    loaded.model.eval()
    impl = getattr(loaded.model.config, "_attn_implementation", None)
    if impl != "eager":
        raise SystemExit(f"expected the eager attention path, got {impl!r}")
    return loaded


def build_decoder(name: str, device: torch.device, dtype: str | None) -> Any:
    """A ``LoadedModel`` of a randomly initialized decoder (eager attention)."""
    from transformers import AutoConfig, AutoModel

    from mixscope.models.loading import load

    spec = dict(DECODER_CONFIGS[name])
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(0)
    model = AutoModel.from_config(config, attn_implementation="eager")
    # MiniLM's WordPiece ids (< 30522) are valid in every vocabulary above; with random
    # weights what matters is the shape, and real text keeps the attention non-uniform
    tokenizer = offline_tokenizer()
    tokenizer.model_max_length = config.max_position_embeddings  # not BERT's 512
    loaded = load((model, tokenizer), device=device, dtype=dtype)
    loaded.model.eval()
    return loaded


def wikitext_stream(tokenizer: Any, need: int, corpus: Path) -> list[int]:
    """WordPiece ids of consecutive real WikiText-2 lines (no headings), at least ``need``."""
    lines = []
    with Path(corpus).open(encoding="utf-8") as fh:
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
        raise SystemExit(f"no text lines in {corpus}")
    while len(ids) < need:  # a tiny corpus: wrap around (still real text)
        ids = ids + ids
    return ids


def real_batch(
    tokenizer: Any, batch: int, n: int, corpus: Path, *, offset_seqs: int = 0
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """``batch`` sequences of exactly ``n`` tokens ([CLS] text [SEP]) from ``corpus``.

    Each chunk starts and ends on a word boundary, so its decoded text re-encodes to the
    same ``n`` tokens (used for the end-to-end ``analyze`` run). Returns the tensors and
    the decoded texts.
    """
    body = n - 2
    vocab = tokenizer.convert_ids_to_tokens
    stream = wikitext_stream(tokenizer, (batch + offset_seqs + 4) * (body + 64), corpus)
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
