"""Random models with the shapes people run: BERT-base, a 1B Llama with grouped-query heads.

The GPU check (benchmarks/gpu_check.sh) runs where no weights can be downloaded and no model
package is installed, so its tests and benchmarks build these from configs, with the
offline WordPiece tokenizer of tests/tiny_models.py. Speed and memory depend on the shape,
not on the weights; numbers checked on them (fast against eager, bfloat16 against float32)
hold for the arithmetic whatever the weights (transformers' own initialisation).

The small shapes keep the family and its layout (GQA, RMSNorm, rotary, SwiGLU) at a size a
CPU runs in seconds: the check's ``--dry-run`` and the CPU benchmarks use them.
"""

from __future__ import annotations

from typing import Any

import torch

#: name → (family, config fields); vocabularies cover the WordPiece tokenizer's 30,522 ids
SHAPES: dict[str, tuple[str, dict[str, int]]] = {
    "bert-base": ("bert", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                               intermediate_size=3072, vocab_size=30522)),
    "bert-small": ("bert", dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=512, vocab_size=30522)),
    "llama-1b": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                               num_attention_heads=32, num_key_value_heads=8, vocab_size=32000)),
    "llama-small": ("llama", dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                  num_attention_heads=8, num_key_value_heads=2,
                                  vocab_size=32000)),
    "llama-memory": ("llama", dict(hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   vocab_size=32000)),
    # a small mixture of experts: Qwen3-MoE's block, 8 experts, top-2
    "moe-small": ("qwen3_moe", dict(hidden_size=256, moe_intermediate_size=344,
                                    intermediate_size=688, num_hidden_layers=4,
                                    num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                                    num_experts=8, num_experts_per_tok=2, vocab_size=32000)),
}  # fmt: skip

#: what each shape's name says in a table
LABELS = {
    "bert-base": "BERT-base (random)",
    "bert-small": "BERT-small (random)",
    "llama-1b": "Llama-1b (random, GQA, SwiGLU)",
    "llama-small": "Llama-small (random, GQA, SwiGLU)",
    "llama-memory": "Llama-memory (random, GQA, SwiGLU)",
    "moe-small": "MoE-small (random Qwen3-MoE, 8 experts, top-2)",
}


def config(shape: str, positions: int = 512) -> Any:
    """The transformers config of ``shape`` (``positions``: the longest sequence it takes)."""
    from transformers import BertConfig, LlamaConfig, Qwen3MoeConfig

    family, fields = SHAPES[shape]
    if family == "bert":
        return BertConfig(**fields, max_position_embeddings=max(positions, 512))
    if family == "qwen3_moe":
        return Qwen3MoeConfig(**fields, max_position_embeddings=positions, rope_theta=1e4)
    return LlamaConfig(**fields, max_position_embeddings=positions, rope_theta=1e4)


def build(
    shape: str,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    positions: int = 512,
    attn: str = "eager",
) -> tuple[Any, Any]:
    """(model, tokenizer): ``shape`` with seeded random weights, built on ``device`` (a 1B
    model is initialised there, not copied over from the host) and in eval mode."""
    from transformers import AutoModel

    from tiny_models import tokenizer

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModel.from_config(
            config(shape, positions), attn_implementation=attn, dtype=dtype
        )
    return model.eval(), tokenizer()


def save(
    shape: str,
    path: str,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    positions: int = 512,
) -> str:
    """``shape`` written as a model directory (safetensors, config, tokenizer) that
    ``mixscope`` loads like any local model: what a job (a worker process) reads. Built on
    ``device`` (a 1B model's random initialisation takes seconds on a GPU, more on a CPU)."""
    model, tok = build(shape, dtype, device, positions)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
