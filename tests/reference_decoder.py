"""A brute-force float64 reference of the context-mixing measures for pre-LN decoders.

Independent of ``mixscope`` (no import of it) and of its adapters: its own per-family weight
table, its own forward pass from the embeddings (layer norms, RMSNorms, queries, keys,
rotary embeddings, causal / sliding-window masks, grouped-query heads, MLPs), one unpadded
sequence at a time, every per-source vector ``a_ij``, ``r_ij`` and ``F_i(x_j)`` materialized
as an ``[n, n, d]`` array and the ratios taken from those arrays by the textbook formula.

Definitions (README, "Pre-LN decoders"):

- the attention reads ``LN1(x_j)``: ``f^h(x_j) = (LN1(x_j) W_V^g + b_V^g) W_O^h`` with ``g`` the
  key/value head of query head ``h`` (grouped-query attention);
- ``a_ij = Σ_h α^h_ij f^h(x_j)`` (α = 0 for j > i), ``r_ij = a_ij + δ_ij x_i``;
- the norm N after the block: LN2 (post-attention RMSNorm) applied to ``z = x + attn``; with a
  parallel residual (GPT-NeoX ``use_parallel_residual``) the next block's input norm (the final
  norm after the last block) applied to ``z = x + attn + m``, ``m = MLP(LN2(x))``, where
  ``m_i`` is part of the token's own term;
- ``F_i(x_j) = γ_N ⊙ c(a_ij + δ_ij (x_i + m_i)) / s(z_i)``, c = centring (none for RMSNorm).

The reference validates itself against the real model (tests/test_decoders.py): its layer
inputs, α, z and norm outputs must match what the model computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from reference_distance import distance_measures
from reference_ff import ff_measures, moe_measures
from reference_sink import sink_measures

MEASURES = ("attn_w", "attn_n", "attnres_w", "attnres_n", "attnresln_n")

_LLAMA = {
    "layers": "layers",
    "embed": "embed_tokens",
    "ln1": "input_layernorm",
    "ln2": "post_attention_layernorm",
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "mlp": "gated",  # down(act(gate(h)) * up(h))
    "mlp_paths": ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"),
    "act": "hidden_act",
    "norm": "rms",
    "eps": "variance_epsilon",
    "rotary": True,
    "final": "norm",
}

#: where each family keeps its weights (paths relative to a block unless said otherwise)
LAYOUTS = {
    "gpt2": {
        "layers": "h",
        "embed": "wte",
        "positions": "wpe",  # learned absolute positions, index = position
        "ln1": "ln_1",
        "ln2": "ln_2",
        "qkv": "attn.c_attn",  # Conv1D, [q | k | v] along the output axis
        "o": "attn.c_proj",  # Conv1D, weight [in, out]
        "conv1d": True,
        "mlp": "plain",  # c_proj(act(c_fc(h)))
        "mlp_paths": ("mlp.c_fc", "mlp.c_proj"),
        "act": "activation_function",
        "norm": "layer",
        "eps": "eps",
        "rotary": False,
        "final": "ln_f",
    },
    "gpt_neox": {
        "layers": "layers",
        "embed": "embed_in",
        "ln1": "input_layernorm",
        "ln2": "post_attention_layernorm",
        "qkv_per_head": "attention.query_key_value",  # per head [q_h | k_h | v_h]
        "o": "attention.dense",
        "mlp": "plain",
        "mlp_paths": ("mlp.dense_h_to_4h", "mlp.dense_4h_to_h"),
        "act": "hidden_act",
        "norm": "layer",
        "eps": "eps",
        "rotary": True,
        "parallel": "use_parallel_residual",
        "final": "final_layer_norm",
    },
    "llama": _LLAMA,
    "mistral": {**_LLAMA, "window": "sliding_window"},
    "qwen2": _LLAMA,
    # per-head RMSNorms on queries and keys, before the rotary embedding
    "qwen3": {**_LLAMA, "qk_norm": "head"},
    # sandwich norms: the attention's and the FF's outputs normed inside their branches,
    # the FF reads its own input norm; RMSNorm scales by 1 + weight; embeddings times √d;
    # scores scaled by query_pre_attn_scalar^-½; windows and rotary bases per layer type
    "gemma3_text": {
        **_LLAMA,
        "ln2": "pre_feedforward_layernorm",
        "attn_post": "post_attention_layernorm",
        "ff_post": "post_feedforward_layernorm",
        "eps": "eps",
        "gamma_offset": 1.0,
        "qk_norm": "head",
        "act": "hidden_activation",
        "embed_scale": True,
        "query_scalar": "query_pre_attn_scalar",
        "window": "sliding_window",
        # EmbeddingGemma attends both ways: full layers see every key, sliding layers
        # |i − j| < w (exclusive)
        "bidirectional": "use_bidirectional_attention",
    },
    # Gemma-2: Gemma-3's sandwich without q/k norms, scores soft-capped c · tanh(s / c)
    "gemma2": {
        **_LLAMA,
        "ln2": "pre_feedforward_layernorm",
        "attn_post": "post_attention_layernorm",
        "ff_post": "post_feedforward_layernorm",
        "eps": "eps",
        "gamma_offset": 1.0,
        "act": "hidden_activation",
        "embed_scale": True,
        "query_scalar": "query_pre_attn_scalar",
        "window": "sliding_window",
        "softcap": "attn_logit_softcapping",
    },
    # SmolLM3: Llama's block, some layers without rotary embeddings (NoPE)
    "smollm3": {**_LLAMA, "nope": "no_rope_layers"},
    # Phi-3: fused [q | k | v] with grouped-query heads, fused [gate | up]
    "phi3": {
        **_LLAMA,
        "qkv_gqa": "self_attn.qkv_proj",
        "mlp": "gated_fused",
        "mlp_paths": ("mlp.gate_up_proj", "mlp.down_proj"),
    },
    # GPT-J: attention and MLP in parallel on one shared ln_1; interleaved partial rotary
    "gptj": {
        "layers": "h",
        "embed": "wte",
        "ln1": "ln_1",
        "ln2": "ln_1",  # the MLP reads the same norm
        "q": "attn.q_proj",
        "k": "attn.k_proj",
        "v": "attn.v_proj",
        "o": "attn.out_proj",
        "mlp": "plain",
        "mlp_paths": ("mlp.fc_in", "mlp.fc_out"),
        "act": "activation_function",
        "norm": "layer",
        "eps": "eps",
        "rotary": "interleaved",
        "always_parallel": True,
        "final": "ln_f",
    },
    # StableLM: Llama's names with LayerNorm, partial rotary; the parallel variant's MLP
    # reads the shared input_layernorm (there is no post-attention norm then)
    "stablelm": {
        **_LLAMA,
        "norm": "layer",
        "eps": "eps",
        "parallel": "use_parallel_residual",
        "parallel_ln2": "input_layernorm",
    },
    # Granite: each branch's output times residual_multiplier before the residual add,
    # embeddings times embedding_multiplier, scores times attention_multiplier
    "granite": {
        **_LLAMA,
        "branch_multiplier": "residual_multiplier",
        "embedding_multiplier": "embedding_multiplier",
        "score_multiplier": "attention_multiplier",
    },
    # ModernBERT: a pre-LN *encoder* (no causal mask; bidirectional windows |i − j| <= w on
    # its local layers), embeddings normed, LayerNorms without bias, layer 0's attention norm
    # the identity, fused [q | k | v] and GeGLU [input | gate], rotary bases per layer type
    "modernbert": {
        "layers": "layers",
        "embed": "embeddings.tok_embeddings",
        "embed_norm": "embeddings.norm",
        "ln1": "attn_norm",
        "ln2": "mlp_norm",
        "qkv": "attn.Wqkv",
        "o": "attn.Wo",
        "mlp": "gated_fused",
        "mlp_paths": ("mlp.Wi", "mlp.Wo"),
        "act": "hidden_activation",
        "norm": "layer",
        "eps": "eps",
        "rotary": True,
        "causal": False,
        "window": "sliding_window",
        "final": "final_norm",
    },
    # no input norms: attention and FF read the stream raw, their outputs normed inside the
    # branches; q/k RMSNorms over the whole projection (all heads at once)
    "olmo2": {
        **_LLAMA,
        "ln1": None,
        "ln2": None,
        "attn_post": "post_attention_layernorm",
        "ff_post": "post_feedforward_layernorm",
        "qk_norm": "full",
    },
    # mixtures of experts: Llama's attention, a router choosing the top-k experts per token
    # (softmax over every expert, then the top k, renormalised where the config says so),
    # each expert a SwiGLU with [gate | up] in one [E, 2F, d] tensor; Qwen3-MoE's dense
    # layers (mlp_only_layers) keep Llama's MLP
    "qwen3_moe": {**_LLAMA, "qk_norm": "head", "moe": "softmax_topk", "router": "mlp.gate"},
    "olmoe": {**_LLAMA, "qk_norm": "full", "moe": "softmax_topk", "router": "mlp.gate"},
    "mixtral": {
        **_LLAMA,
        "window": "sliding_window",
        "moe": "softmax_topk",
        "router": "mlp.gate",
        "renorm": True,  # Mixtral always renormalises its top-k
    },
    # gpt-oss: learned sinks (a per-head logit joining the softmax with no value), q/k/v/o
    # biases, sliding and full layers; a router with a bias whose top-k logits are softmaxed;
    # experts [E, d, 2F] with gate and up interleaved (even columns gate), biases, and the
    # clamped SwiGLU (up + 1) · g σ(α g), g = min(g, L), up clipped to ±L
    "gpt_oss": {
        **_LLAMA,
        "window": "sliding_window",
        "sinks": "self_attn.sinks",
        "moe": "topk_softmax",
        "router": "mlp.router",
    },
    "opt": {
        "layers": "decoder.layers",
        "embed": "decoder.embed_tokens",
        "positions": "decoder.embed_positions",  # index = position + 2
        "position_offset": 2,
        "project_in": "decoder.project_in",
        "ln1": "self_attn_layer_norm",
        "ln2": "final_layer_norm",
        "q": "self_attn.q_proj",
        "k": "self_attn.k_proj",
        "v": "self_attn.v_proj",
        "o": "self_attn.out_proj",
        "mlp": "plain",
        "mlp_paths": ("fc1", "fc2"),
        "act": "activation_function",
        "norm": "layer",
        "eps": "eps",
        "rotary": False,
        "pre_ln": "do_layer_norm_before",  # False: post-LN (OPT-350m)
        "final": "decoder.final_layer_norm",
    },
}


def _np(t) -> np.ndarray:
    return t.detach().to(torch.float64).cpu().numpy()


def _act(name: str, x: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(x)
    if name == "gelu_new":
        return torch.nn.functional.gelu(t, approximate="tanh").numpy()
    if name == "gelu":
        return torch.nn.functional.gelu(t).numpy()
    if name == "silu":
        return torch.nn.functional.silu(t).numpy()
    if name == "gelu_pytorch_tanh":
        return torch.nn.functional.gelu(t, approximate="tanh").numpy()
    if name == "relu":
        return np.maximum(x, 0.0)
    raise ValueError(f"activation {name!r} not in the reference")


def _llama3_frequencies(inv_freq: np.ndarray, rope: dict) -> np.ndarray:
    """Llama-3's scaled rotary frequencies (Meta's reference): wavelengths longer than the
    original context / low_freq_factor divided by ``factor``, shorter than it /
    high_freq_factor kept, those between interpolated linearly in context / wavelength."""
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    context = rope["original_max_position_embeddings"]
    out = []
    for f in inv_freq:
        wavelength = 2 * np.pi / f
        if wavelength < context / high:
            out.append(f)
        elif wavelength > context / low:
            out.append(f / factor)
        else:
            smooth = (context / wavelength - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return np.array(out)


def _rotary_interleaved(t: np.ndarray, rot: int, theta: float = 10000.0) -> np.ndarray:
    """GPT-J's rotary embedding of t [heads, n, dh]: pair (2i, 2i + 1) of the first ``rot``
    dims rotated by position · θ^(−2i / rot)."""
    n = t.shape[1]
    inv_freq = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)  # [rot / 2]
    angle = np.arange(n, dtype=np.float64)[:, None] * inv_freq[None, :]  # [n, rot / 2]
    cos, sin = np.cos(angle), np.sin(angle)
    even, odd = t[..., 0:rot:2], t[..., 1:rot:2]
    out = t.copy()
    out[..., 0:rot:2] = even * cos - odd * sin
    out[..., 1:rot:2] = odd * cos + even * sin
    return out


def _whole(t: np.ndarray, norm: Norm) -> np.ndarray:
    """``norm`` over all heads of t [heads, n, dh] at once (OLMo-2's q/k norms)."""
    heads, n, dh = t.shape
    return (
        norm(t.transpose(1, 0, 2).reshape(n, heads * dh)).reshape(n, heads, dh).transpose(1, 0, 2)
    )


@dataclass
class Norm:
    gamma: np.ndarray
    beta: np.ndarray
    eps: float
    kind: str  # "layer" | "rms"

    def centre(self, v: np.ndarray) -> np.ndarray:
        return v if self.kind == "rms" else v - v.mean(axis=-1, keepdims=True)

    def scale(self, z: np.ndarray) -> np.ndarray:
        """s(z) [.., 1]: sqrt(var + ε) (biased) or sqrt(mean(z²) + ε)."""
        if self.kind == "rms":
            return np.sqrt((z**2).mean(axis=-1, keepdims=True) + self.eps)
        return np.sqrt(z.var(axis=-1, keepdims=True) + self.eps)

    def __call__(self, z: np.ndarray) -> np.ndarray:
        return self.gamma * self.centre(z) / self.scale(z) + self.beta


@dataclass
class Layer:
    """One block's weights in float64, row-vector convention (y = x W + b), per head.
    A norm the family does not have at that place is None."""

    ln1: Norm | None  # the attention's input norm
    ln2: Norm | None  # the norm after the attention's residual sum (the FF's input norm)
    wq: np.ndarray  # [H, d, dh]
    bq: np.ndarray  # [H, dh]
    wk: np.ndarray  # [KV, d, dh]
    bk: np.ndarray  # [KV, dh]
    wv: np.ndarray  # [KV, d, dh]
    bv: np.ndarray  # [KV, dh]
    wo: np.ndarray  # [H, dh, d]   W_O^h
    bo: np.ndarray  # [d]
    mlp: list  # [(W [in, out], b [out])...]
    mlp_kind: str
    act: str
    q_norm: Norm | None = None  # on queries (per head, or the whole projection)
    k_norm: Norm | None = None
    attn_post: Norm | None = None  # inside the attention branch, before the residual add
    ff_post: Norm | None = None  # inside the FF branch, before the residual add
    window: int | None = None  # this layer's sliding window
    rope_theta: float | None = None  # this layer's rotary base, where it has its own
    rotary: bool = True  # this layer rotates q and k (SmolLM3's NoPE layers do not)
    sinks: np.ndarray | None = None  # [H] learned sink logits σ_h (gpt-oss)
    moe: Moe | None = None  # a mixture of experts in place of ``mlp``


@dataclass
class Moe:
    """A router and its experts, float64, row-vector convention (y = x W + b)."""

    router_w: np.ndarray  # [d, E]
    router_b: np.ndarray  # [E]
    top_k: int
    kind: str  # "softmax_topk" | "topk_softmax" (gpt-oss)
    renorm: bool  # the top-k softmax probabilities renormalised to sum to 1
    experts: list  # per expert: (wg [d, F], bg [F], wu [d, F], bu [F], wd [F, d], bd [d])
    act: str  # "silu", or "gpt_oss" (the clamped SwiGLU)
    alpha: float = 1.702
    limit: float = 7.0

    def gates(self, h: np.ndarray) -> list[dict[int, float]]:
        """Per token: {expert: gate} of its top-k experts."""
        logits = h @ self.router_w + self.router_b  # [n, E]
        out = []
        for row in logits:
            if self.kind == "topk_softmax":
                top = np.argsort(-row, kind="stable")[: self.top_k]
                w = np.exp(row[top] - row[top].max())
                w = w / w.sum()
            else:
                p = np.exp(row - row.max())
                p = p / p.sum()
                top = np.argsort(-p, kind="stable")[: self.top_k]
                w = p[top] / (p[top].sum() if self.renorm else 1.0)
            out.append({int(e): float(g) for e, g in zip(top, w, strict=True)})
        return out

    def expert_act(self, g: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The expert's elementwise f(g, u) before its down projection."""
        if self.act == "gpt_oss":
            g = np.minimum(g, self.limit)
            u = np.clip(u, -self.limit, self.limit)
            return (u + 1) * g / (1 + np.exp(-self.alpha * g))
        return _act(self.act, g) * u

    def __call__(self, h: np.ndarray) -> np.ndarray:
        out = np.zeros_like(h)
        for i, chosen in enumerate(self.gates(h)):
            for e, gate in chosen.items():
                wg, bg, wu, bu, wd, bd = self.experts[e]
                inner = self.expert_act(h[i] @ wg + bg, h[i] @ wu + bu)
                out[i] += gate * (inner @ wd + bd)
        return out


class Reference:
    """The decoder of one tiny model, rebuilt in float64 from its weights."""

    def __init__(self, model) -> None:
        self.model = model
        cfg = model.config
        self.cfg = cfg
        self.lay = LAYOUTS[cfg.model_type]
        lay = self.lay
        self.H = cfg.num_attention_heads
        self.KV = getattr(cfg, "num_key_value_heads", None) or self.H
        self.d = cfg.hidden_size
        self.dh = getattr(cfg, "head_dim", None) or self.d // self.H
        self.parallel = bool(
            lay.get("always_parallel") or getattr(cfg, lay.get("parallel", ""), False)
        )
        self.branch_multiplier = float(getattr(cfg, lay.get("branch_multiplier", ""), 1.0))
        self.pre_ln = bool(getattr(cfg, lay.get("pre_ln", ""), True))
        self.window = getattr(cfg, lay["window"], None) if "window" in lay else None
        self.blocks = list(model.get_submodule(lay["layers"]))
        self._seen: list = []
        self.layers = [self._layer(b) for b in self.blocks]
        final = self._module(model, lay["final"])
        self.final = self._norm(final) if final is not None else None

    # ---------------------------------------------------------------- weights

    @staticmethod
    def _module(root, path):
        try:
            return root.get_submodule(path)
        except AttributeError:
            return None

    def _norm(self, mod) -> Norm | None:
        if isinstance(mod, torch.nn.Identity):  # ModernBERT's first attention norm
            return None
        d = self.d
        w = getattr(mod, "weight", None)
        b = getattr(mod, "bias", None)
        eps = getattr(mod, self.lay["eps"])
        width = w.shape[0] if w is not None else d
        return Norm(
            gamma=_np(w) + self.lay.get("gamma_offset", 0.0) if w is not None else np.ones(width),
            beta=_np(b) if b is not None else np.zeros(width),
            eps=float(eps),
            kind=self.lay["norm"],
        )

    def _linear(self, mod) -> tuple[np.ndarray, np.ndarray]:
        """(W [in, out], b [out]) of a Linear or a Conv1D."""
        w = _np(mod.weight)
        w = w if self.lay.get("conv1d") else w.T
        b = _np(mod.bias) if getattr(mod, "bias", None) is not None else np.zeros(w.shape[1])
        return w, b

    def _layer(self, block) -> Layer:
        lay, H, KV, d, dh = self.lay, self.H, self.KV, self.d, self.dh
        if "qkv_gqa" in lay:  # Phi-3: [q (H·dh) | k (KV·dh) | v (KV·dh)]
            w, b = self._linear(block.get_submodule(lay["qkv_gqa"]))
            cuts = np.cumsum([H * dh, KV * dh])
            parts = list(zip(np.split(w, cuts, axis=1), np.split(b, cuts), strict=True))
        elif "qkv" in lay:  # GPT-2: [q | k | v], each d wide, heads contiguous inside
            w, b = self._linear(block.get_submodule(lay["qkv"]))
            parts = [(w[:, c * d : (c + 1) * d], b[c * d : (c + 1) * d]) for c in range(3)]
        elif "qkv_per_head" in lay:  # GPT-NeoX: output index h·3dh + c·dh + e
            w, b = self._linear(block.get_submodule(lay["qkv_per_head"]))
            w3 = w.reshape(d, H, 3, dh)
            b3 = b.reshape(H, 3, dh)
            parts = [
                (w3[:, :, c, :].reshape(d, H * dh), b3[:, c, :].reshape(H * dh)) for c in range(3)
            ]
        else:
            parts = [self._linear(block.get_submodule(lay[k])) for k in ("q", "k", "v")]
        (wq, bq), (wk, bk), (wv, bv) = parts

        def heads(w, b, n):
            return w.reshape(d, n, dh).transpose(1, 0, 2), b.reshape(n, dh)

        wq, bq = heads(wq, bq, H)
        wk, bk = heads(wk, bk, KV)
        wv, bv = heads(wv, bv, KV)
        wo, bo = self._linear(block.get_submodule(lay["o"]))  # [H·dh, d]
        moe = self._moe(block) if "moe" in lay else None
        mlp = [] if moe else [self._linear(block.get_submodule(p)) for p in lay["mlp_paths"]]
        if lay["mlp"] == "gated_fused":  # [gate | up] in one matrix, gate first
            (w, b), down = mlp
            half = w.shape[1] // 2
            mlp = [(w[:, :half], b[:half]), (w[:, half:], b[half:]), down]
        if self.parallel and "parallel_ln2" in lay:  # the MLP reads the shared input norm
            lay = {**lay, "ln2": lay["parallel_ln2"]}
        norm = lambda key: self._norm(block.get_submodule(lay[key])) if lay.get(key) else None  # noqa: E731
        qk = lay.get("qk_norm")
        layer_type = (getattr(self.cfg, "layer_types", None) or [None] * 999)[len(self._seen)]
        self._seen.append(block)
        rope = getattr(self.cfg, "rope_parameters", None) or {}
        return Layer(
            ln1=norm("ln1"),
            ln2=norm("ln2"),
            wq=wq,
            bq=bq,
            wk=wk,
            bk=bk,
            wv=wv,
            bv=bv,
            wo=wo.reshape(H, dh, d),
            bo=bo,
            mlp=mlp,
            mlp_kind="gated" if lay["mlp"] == "gated_fused" else lay["mlp"],
            act=getattr(self.cfg, lay["act"]),
            q_norm=self._norm(block.get_submodule("self_attn.q_norm")) if qk else None,
            k_norm=self._norm(block.get_submodule("self_attn.k_norm")) if qk else None,
            attn_post=norm("attn_post"),
            ff_post=norm("ff_post"),
            window=self.window if layer_type in (None, "sliding_attention") else None,
            rope_theta=rope[layer_type]["rope_theta"] if layer_type in rope else None,
            rotary=bool(lay["rotary"])
            and bool(
                getattr(self.cfg, lay["nope"])[len(self._seen) - 1] if "nope" in lay else True
            ),
            sinks=_np(block.get_submodule(lay["sinks"].rsplit(".", 1)[0]).sinks)
            if "sinks" in lay
            else None,
            moe=moe,
        )

    def _moe(self, block) -> Moe | None:
        """The block's router and experts; None for a dense layer (Qwen3-MoE's
        mlp_only_layers keep Llama's MLP)."""
        lay, cfg = self.lay, self.cfg
        experts = self._module(block, "mlp.experts")
        if experts is None:
            return None
        router = block.get_submodule(lay["router"])
        bias = getattr(router, "bias", None)
        router_b = _np(bias) if bias is not None else np.zeros(router.weight.shape[0])
        gate_up, down = _np(experts.gate_up_proj), _np(experts.down_proj)
        gpt_oss = lay["moe"] == "topk_softmax"
        out = []
        for e in range(gate_up.shape[0]):
            if gpt_oss:  # [d, 2F], gate the even columns, up the odd; biases
                w, b = gate_up[e], _np(experts.gate_up_proj_bias)[e]
                wg, bg, wu, bu = w[:, ::2], b[::2], w[:, 1::2], b[1::2]
                wd, bd = down[e], _np(experts.down_proj_bias)[e]  # [F, d]
            else:  # [2F, d]: the gate's rows, then the up's; no biases
                f = gate_up.shape[1] // 2
                wg, wu = gate_up[e, :f].T, gate_up[e, f:].T
                bg = bu = np.zeros(f)
                wd, bd = down[e].T, np.zeros(down.shape[1])  # down [d, F] → [F, d]
            out.append((wg, bg, wu, bu, wd, bd))
        return Moe(
            router_w=_np(router.weight).T,
            router_b=router_b,
            top_k=int(cfg.num_experts_per_tok),
            kind=lay["moe"],
            renorm=bool(lay.get("renorm") or getattr(cfg, "norm_topk_prob", False)),
            experts=out,
            act="gpt_oss" if gpt_oss else getattr(cfg, lay["act"]),
            alpha=float(getattr(cfg, "swiglu_alpha", 1.702) or 1.702),
            limit=float(getattr(cfg, "swiglu_limit", 7.0) or 7.0),
        )

    # ---------------------------------------------------------------- forward pieces

    def embed(self, ids: list[int]) -> np.ndarray:
        lay = self.lay
        x = _np(self.model.get_submodule(lay["embed"]).weight)[np.asarray(ids)]
        project_in = self._module(self.model, lay["project_in"]) if "project_in" in lay else None
        if project_in is not None:
            x = x @ _np(project_in.weight).T
        if "positions" in lay:
            table = _np(self.model.get_submodule(lay["positions"]).weight)
            x = x + table[np.arange(len(ids)) + lay.get("position_offset", 0)]
        if "embed_norm" in lay:  # ModernBERT normalizes its embeddings
            norm = self._norm(self.model.get_submodule(lay["embed_norm"]))
            assert norm is not None
            x = norm(x)
        if lay.get("embed_scale"):  # Gemma: embeddings times √hidden
            x = x * np.sqrt(self.d)
        if "embedding_multiplier" in lay:  # Granite
            x = x * getattr(self.cfg, lay["embedding_multiplier"])
        return x

    def _rotary(self, t: np.ndarray, theta: float | None = None) -> np.ndarray:
        """Rotary embedding (rotate-half convention) of t [heads, n, dh] at positions 0..n-1;
        GPT-J's rotates interleaved pairs (2i, 2i + 1) of its first ``rotary_dim`` dims."""
        if self.lay["rotary"] == "interleaved":
            return _rotary_interleaved(t, int(self.cfg.rotary_dim or self.dh))
        rope = getattr(self.cfg, "rope_parameters", None) or {}
        if theta is None:
            theta = float(rope.get("rope_theta", getattr(self.cfg, "rope_theta", 10000.0)))
        partial = float(rope.get("partial_rotary_factor", 1.0))
        rot = int(self.dh * partial)
        n = t.shape[1]
        inv_freq = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
        if rope.get("rope_type") == "llama3":
            inv_freq = _llama3_frequencies(inv_freq, rope)
        freqs = np.arange(n, dtype=np.float64)[:, None] * inv_freq[None, :]  # [n, rot/2]
        emb = np.concatenate([freqs, freqs], axis=-1)  # [n, rot]
        cos, sin = np.cos(emb), np.sin(emb)
        t_rot, t_pass = t[..., :rot], t[..., rot:]
        half = rot // 2
        rotated = np.concatenate([-t_rot[..., half:], t_rot[..., :half]], axis=-1)
        return np.concatenate([t_rot * cos + rotated * sin, t_pass], axis=-1)

    def attention_weights(self, L: Layer, h_in: np.ndarray) -> np.ndarray:
        """α [H, n, n]: causal (j <= i), sliding window when the family has one."""
        n = h_in.shape[0]
        group = self.H // self.KV
        q = np.einsum("nd,hde->hne", h_in, L.wq) + L.bq[:, None, :]  # [H, n, dh]
        k = np.einsum("nd,gde->gne", h_in, L.wk) + L.bk[:, None, :]  # [KV, n, dh]
        if self.lay.get("qk_norm") == "head":  # over each head's dh
            q, k = L.q_norm(q), L.k_norm(k)
        elif self.lay.get("qk_norm") == "full":  # over the whole projection, heads at once
            q, k = _whole(q, L.q_norm), _whole(k, L.k_norm)
        if L.rotary:
            q, k = self._rotary(q, L.rope_theta), self._rotary(k, L.rope_theta)
        k = np.repeat(k, group, axis=0)  # query head h reads key/value head h // group
        scalar = (
            getattr(self.cfg, self.lay["query_scalar"]) if "query_scalar" in self.lay else self.dh
        )
        scores = np.einsum("hie,hje->hij", q, k) / np.sqrt(scalar)
        if "score_multiplier" in self.lay:  # Granite's scale replaces 1 / √d_h
            scores = np.einsum("hie,hje->hij", q, k) * getattr(
                self.cfg, self.lay["score_multiplier"]
            )
        cap = getattr(self.cfg, self.lay["softcap"], None) if "softcap" in self.lay else None
        if cap is not None:
            scores = cap * np.tanh(scores / cap)
        i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        both_ways = bool(getattr(self.cfg, self.lay.get("bidirectional", ""), False))
        if both_ways:  # EmbeddingGemma: |i − j| < w on sliding layers (exclusive)
            allowed = np.ones((n, n), dtype=bool)
            if L.window is not None:
                allowed &= np.abs(i - j) < L.window
        elif self.lay.get("causal", True):
            allowed = j <= i
            if L.window is not None:
                allowed &= j > i - L.window
        else:  # an encoder: every key, within a bidirectional window on local layers
            allowed = np.ones((n, n), dtype=bool)
            if L.window is not None:
                allowed &= np.abs(i - j) <= L.window
        scores = np.where(allowed[None], scores, -np.inf)
        if L.sinks is not None:  # a learned sink: one more logit per row, with no value
            sink = np.broadcast_to(L.sinks[:, None, None], (self.H, n, 1))
            both = np.concatenate([scores, sink], axis=-1)
            both = both - both.max(axis=-1, keepdims=True)
            e = np.exp(both)
            return (e / e.sum(axis=-1, keepdims=True))[..., :n]  # rows sum to 1 − π
        scores = scores - scores.max(axis=-1, keepdims=True)
        e = np.exp(scores)  # exactly 0 where masked
        return e / e.sum(axis=-1, keepdims=True)

    def mlp(self, L: Layer, h: np.ndarray) -> np.ndarray:
        if L.moe is not None:
            return L.moe(h)
        if L.mlp_kind == "gated":
            (wg, bg), (wu, bu), (wd, bd) = L.mlp
            return (_act(L.act, h @ wg + bg) * (h @ wu + bu)) @ wd + bd
        (w1, b1), (w2, b2) = L.mlp
        return _act(L.act, h @ w1 + b1) @ w2 + b2


@dataclass
class BlockReference:
    x: np.ndarray  # [n, d]     layer input (own forward)
    alpha: np.ndarray  # [H, n, n]
    a: np.ndarray  # [n, n, d]  a_ij
    r: np.ndarray  # [n, n, d]  r_ij = a_ij + δ_ij x_i
    F: np.ndarray  # [n, n, d]  F_i(x_j)
    m: np.ndarray  # [n, d]     the token's own extra term (parallel MLP output; else 0)
    z: np.ndarray  # [n, d]     input of the norm after the block
    y: np.ndarray  # [n, d]     that norm applied to z (own float64 norm)
    rebuilt: np.ndarray  # [n, d]  Σ_j F_i(x_j) + γ ⊙ c(b_O) / s + β
    measures: dict = field(default_factory=dict)  # name → [n]
    pairs: dict = field(default_factory=dict)  # name → [n, n]


def _ratio(P: np.ndarray) -> np.ndarray:
    """‖Σ_{j≠i} P_ij‖ / (‖Σ_{j≠i} P_ij‖ + ‖P_ii‖) for P [n, n, d] → [n]."""
    n = P.shape[0]
    out = np.empty(n)
    for i in range(n):
        context = sum((P[i, j] for j in range(n) if j != i), np.zeros(P.shape[2]))
        c = np.linalg.norm(context)
        o = np.linalg.norm(P[i, i])
        out[i] = c / (c + o)
    return out


@dataclass
class SequenceReference:
    layers: list[BlockReference]
    final_hidden: np.ndarray  # [n, d] output of the last block (before any final norm)

    def measures(self, names: tuple[str, ...] = MEASURES) -> np.ndarray:
        """[layer, measure (``names`` order), n]."""
        return np.stack([np.stack([b.measures[k] for k in names]) for b in self.layers])

    def pairs(self, name: str) -> np.ndarray:
        """[layer, n, n]."""
        return np.stack([b.pairs[name] for b in self.layers])


def reference(
    model, input_ids, *, layer_inputs=None, mlp_in_self: bool = True
) -> SequenceReference:
    """Every layer of one unpadded sequence, from the weights alone.

    ``layer_inputs``: start each block from these [n, d] inputs (the model's real ones, from
    :func:`capture`) instead of the reference's own previous block. transformers computes
    softmax, rotary tables and LlamaRMSNorm in float32 even in a float64 model, so its layer
    inputs drift from an exact float64 forward by ~1e-6; feeding them in keeps the
    comparison about the decomposition. Everything inside a block is still the reference's.

    ``mlp_in_self=False`` is a deliberately WRONG variant for a parallel residual (the MLP
    output left out of the token's own part): a negative control of the exactness identity.
    """
    ref = model if isinstance(model, Reference) else Reference(model)
    x = ref.embed(list(input_ids))
    n, d = x.shape
    eye = np.eye(n)[:, :, None]  # δ_ij
    out: list[BlockReference] = []
    for li, L in enumerate(ref.layers):
        if layer_inputs is not None:
            x = np.asarray(layer_inputs[li], dtype=np.float64)
        h = L.ln1(x) if ref.pre_ln and L.ln1 is not None else x
        alpha = ref.attention_weights(L, h)  # [H, n, n]
        group = ref.H // ref.KV
        v = np.einsum("nd,gde->gne", h, L.wv) + L.bv[:, None, :]  # [KV, n, dh], b_V inside f
        v = np.repeat(v, group, axis=0)  # [H, n, dh]
        f = np.einsum("hje,hed->hjd", v, L.wo)  # f^h(x_j) [H, n, d]
        a = np.einsum("hij,hjd->ijd", alpha, f)  # [n, n, d]
        attn = a.sum(axis=1) + L.bo  # the attention branch's output [n, d]
        if L.attn_post is not None:  # a norm inside the branch, with its real s(o_i)
            post = L.attn_post
            s_post = post.scale(attn)  # [n, 1]
            a_res = post.gamma * post.centre(a) / s_post[:, :, None]  # ã_ij
            bias = post.gamma * post.centre(L.bo) / s_post + post.beta  # [n, d]
            branch = post(attn)
        else:
            a_res, bias, branch = a, np.broadcast_to(L.bo, (n, d)), attn
        mult = ref.branch_multiplier  # Granite: the branch times m before the residual add
        a_res, bias, branch = a_res * mult, bias * mult, branch * mult
        r = a_res + eye * x[None, :, :]
        m = np.zeros((n, d))
        if ref.parallel:
            m = ref.mlp(L, L.ln2(x))
            z = x + branch + m
            norm = ref.layers[li + 1].ln1 if li + 1 < len(ref.layers) else ref.final
        else:
            z = x + branch
            norm = L.ln2 if ref.pre_ln else L.ln1  # None: the FF reads z raw (OLMo-2)
        own = m if mlp_in_self else np.zeros((n, d))
        if norm is None:
            s = np.ones((n, 1))
            F = r + eye * own[None, :, :]
            rebuilt = F.sum(axis=1) + bias
            y = z
        else:
            s = norm.scale(z)  # [n, 1]
            F = norm.gamma * norm.centre(r + eye * own[None, :, :]) / s[:, :, None]
            rebuilt = F.sum(axis=1) + norm.gamma * norm.centre(bias) / s + norm.beta
            y = norm(z)
        if ref.parallel:
            x_next = z
        elif ref.pre_ln:
            ff_out = ref.mlp(L, y)
            x_next = z + mult * (L.ff_post(ff_out) if L.ff_post is not None else ff_out)
        else:  # post-LN (OPT-350m): LN1 after attention, LN2 after the MLP
            x_next = L.ln2(y + ref.mlp(L, y))
        # ATTN-W: the weight on other tokens; a learned sink's mass π = 1 − Σ_j α_ij is none's
        sink_mass = 1.0 - alpha.sum(axis=-1)  # [H, n]: 0 without learned sinks
        attn_w = np.array([alpha[:, i, :].sum(-1).mean() - alpha[:, i, i].mean() for i in range(n)])
        measures = {
            "attn_w": attn_w,
            "attn_n": _ratio(a),
            "attnres_w": attn_w / 2,
            "attnres_n": _ratio(r),
            "attnresln_n": _ratio(F),
            **sink_measures(alpha, a),
            **distance_measures(alpha, a),
        }
        if L.sinks is not None:
            measures["lsink_w"] = sink_mass.mean(axis=0)
        measures.update(_ff(ref, li, L, x, F, r, s, norm, bias))
        if not ref.pre_ln:  # post-LN (OPT-350m): GlobEnc carries F through LN2
            s2 = L.ln2.scale(y + ref.mlp(L, y))  # [n, 1] the real LN2 input's
            measures["globenc_n"] = _ratio(L.ln2.gamma * L.ln2.centre(F) / s2[:, :, None])
        pairs = {
            "attn_n": np.linalg.norm(a, axis=2),
            "attnres_n": np.linalg.norm(r, axis=2),
            "attnresln_n": np.linalg.norm(F, axis=2),
        }
        out.append(BlockReference(x, alpha, a, r, F, m, z, y, rebuilt, measures, pairs))
        x = x_next
    return SequenceReference(out, x)


def _ff(ref: Reference, li: int, L: Layer, x, F, r, s, norm, bias) -> dict[str, np.ndarray]:
    """The ``ff`` group of one block (tests/reference_ff.py): the FF input's parts and the
    residual's, by placement, the norm inside the FF branch, and the norm after the FF's
    residual sum (``bias``: the residual sum's bias part, [n, d])."""
    n, d = x.shape
    act = "gelu_new" if L.act in ("gelu_new", "gelu_pytorch_tanh") else L.act
    bias = np.broadcast_to(bias, (n, d))
    following = ref.layers[li + 1].ln1 if li + 1 < len(ref.layers) else ref.final
    if ref.parallel:  # the FF reads LN2(x_i): its own part, and β₂
        own = L.ln2.gamma * L.ln2.centre(x) / L.ln2.scale(x)
        y_parts = np.eye(n)[:, :, None] * own[None, :, :]
        y_bias = np.broadcast_to(L.ln2.beta, (n, d))
        res_parts, res_bias = r, bias
    else:  # the FF reads the block's norm output (the sum itself where none): F_i(x_j)
        y_parts = F
        y_bias = bias if norm is None else norm.gamma * norm.centre(bias) / s + norm.beta
        if ref.pre_ln:
            res_parts, res_bias = r, bias
        else:  # post-LN (OPT-350m): the residual carries the LN1 output, LN2 follows
            res_parts, res_bias, following = F, y_bias, L.ln2
    gamma = None if following is None else following.gamma  # None: no norm (OLMo-2)
    centred = following is not None and following.kind != "rms"
    if L.moe is not None:
        out = moe_measures(
            y_parts, y_bias, res_parts, res_bias, L.moe, gamma, centred,
            branch=L.ff_post, multiplier=ref.branch_multiplier,
        )  # fmt: skip
        return {k: v for k, v in out.items() if not k.startswith("_")}
    out = ff_measures(
        y_parts,
        y_bias,
        res_parts,
        res_bias,
        L.mlp,
        act,
        gamma,
        centred,
        branch=L.ff_post,
        multiplier=ref.branch_multiplier,
    )
    return {k: v for k, v in out.items() if not k.startswith("_")}


@dataclass
class Captured:
    """What the real model computes for one sequence (hooks + output_attentions)."""

    x: list[np.ndarray]  # block inputs
    alpha: list[np.ndarray]  # [H, n, n]
    z: list[np.ndarray]  # real input of the norm after each block
    y: list[np.ndarray]  # its real output


@torch.no_grad()
def capture(model, input_ids) -> Captured:
    """Run the real model once (eager attention) and record the tensors the reference rebuilds."""
    ref = Reference(model)
    lay = ref.lay
    identity = False  # no norm after the sum (OLMo-2): the MLP reads z, which is also y
    if ref.parallel:
        norms = [b.get_submodule(lay["ln1"]) for b in ref.blocks[1:]]
        norms.append(model.get_submodule(lay["final"]))
    else:
        path = lay["ln2" if ref.pre_ln else "ln1"]
        identity = path is None
        norms = [b.get_submodule(path or "mlp") for b in ref.blocks]
    L = len(ref.blocks)
    xs: list = [None] * L
    zs: list = [None] * L
    ys: list = [None] * L
    handles = []
    for idx, (block, norm) in enumerate(zip(ref.blocks, norms, strict=True)):

        def pre(_m, args, kwargs, idx=idx):
            xs[idx] = _np((args[0] if args else kwargs["hidden_states"])[0])

        def post(_m, inp, out, idx=idx):
            n = xs[idx].shape[0]
            zs[idx] = _np(inp[0].reshape(n, -1))
            ys[idx] = _np((inp[0] if identity else out).reshape(n, -1))

        handles.append(block.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(norm.register_forward_hook(post))
    try:
        out = model(
            input_ids=torch.tensor([list(input_ids)]), output_attentions=True, use_cache=False
        )
    finally:
        for h in handles:
            h.remove()
    return Captured(xs, [_np(a[0]) for a in out.attentions], zs, ys)
