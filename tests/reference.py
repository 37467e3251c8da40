"""A brute-force float64 reference of the context-mixing measures (docs/method.md §1–2).

Deliberately plain and independent of ``mixscope.mixing`` and of the package's adapters:
one sequence at a time, weights read straight from the modules, every per-source vector
``a_ij``, ``r_ij`` and ``F_i(x_j)`` materialized as an ``[n, n, d]`` array, and the ratios
taken from those arrays by the textbook formula. Slow (O(H·n²·d) memory) and obvious.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from reference_distance import distance_measures
from reference_ff import ff_measures
from reference_sink import sink_measures

#: where each family keeps the pieces of one attention block (paths relative to the block)
_BERT_LIKE = {
    "layers": "encoder.layer",
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "out": "attention.output.dense",
    "ln": "attention.output.LayerNorm",
    "ln2": "output.LayerNorm",  # after the feed-forward's residual (GlobEnc)
    "ff": ("intermediate.dense", "output.dense"),  # W₁, W₂ (nn.Linear)
    "act": "hidden_act",
    "heads": "num_attention_heads",
}
LAYOUTS = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "xlm-roberta": _BERT_LIKE,
    "electra": _BERT_LIKE,
    "distilbert": {
        "layers": "transformer.layer",
        "query": "attention.q_lin",
        "key": "attention.k_lin",
        "value": "attention.v_lin",
        "out": "attention.out_lin",
        "ln": "sa_layer_norm",
        "ln2": "output_layer_norm",
        "ff": ("ffn.lin1", "ffn.lin2"),
        "act": "activation",
        "heads": "n_heads",
    },
}

MEASURES = ("attn_w", "attn_n", "attnres_w", "attnres_n", "attnresln_n")


def layout(model) -> dict:
    return LAYOUTS[model.config.model_type]


def blocks(model) -> list:
    return list(model.get_submodule(layout(model)["layers"]))


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).cpu().numpy()


@dataclass
class LayerWeights:
    """One block's weights in float64, row-vector convention (y = x W + b)."""

    wq: np.ndarray  # [d, d]
    bq: np.ndarray  # [d]
    wk: np.ndarray
    bk: np.ndarray
    wv: np.ndarray
    bv: np.ndarray
    wo_torch: np.ndarray  # [d_out, d_in]  PyTorch layout of attention.output.dense.weight
    bo: np.ndarray  # [d]
    gamma: np.ndarray  # [d]
    beta: np.ndarray  # [d]
    eps: float
    heads: int
    gamma2: np.ndarray  # [d]  LN2 (after the feed-forward's residual)
    eps2: float
    ff: list  # [(W₁ [d, f], b₁), (W₂ [f, d], b₂)]  row convention
    act: str  # the FF's activation (config name)


def layer_weights(model, layer: int) -> LayerWeights:
    lay = layout(model)
    block = blocks(model)[layer]
    q, k, v, o = (block.get_submodule(lay[name]) for name in ("query", "key", "value", "out"))
    ln = block.get_submodule(lay["ln"])
    ln2 = block.get_submodule(lay["ln2"])
    return LayerWeights(
        wq=_np(q.weight).T,
        bq=_np(q.bias),
        wk=_np(k.weight).T,
        bk=_np(k.bias),
        wv=_np(v.weight).T,
        bv=_np(v.bias),
        wo_torch=_np(o.weight),
        bo=_np(o.bias),
        gamma=_np(ln.weight),
        beta=_np(ln.bias),
        eps=float(ln.eps),
        heads=int(getattr(model.config, lay["heads"])),
        gamma2=_np(ln2.weight),
        eps2=float(ln2.eps),
        ff=[(_np(m.weight).T, _np(m.bias)) for m in (block.get_submodule(p) for p in lay["ff"])],
        act=getattr(model.config, lay["act"]),
    )


@dataclass
class ModelRun:
    """One unbatched forward pass: layer inputs and the real LN1 input/output per layer."""

    hidden: list[np.ndarray]  # hidden[l] = input of layer l, [n, d]
    ln_in: list[np.ndarray]  # real input of LN1 of layer l (captured by a hook), [n, d]
    ln_out: list[np.ndarray]  # real output of LN1 of layer l, [n, d]
    ln2_in: list[np.ndarray]  # real input of LN2 of layer l (FF output + LN1 output), [n, d]


@torch.no_grad()
def run_model(model, input_ids, token_type_ids=None, attention_mask=None) -> ModelRun:
    """Forward one sequence (lists of ints); eager attention, hooks on every LN1."""
    ids = torch.tensor([list(input_ids)], dtype=torch.long)
    inputs = {"input_ids": ids}
    if attention_mask is not None:
        inputs["attention_mask"] = torch.tensor([list(attention_mask)], dtype=torch.long)
    if token_type_ids is not None and model.config.model_type != "distilbert":
        inputs["token_type_ids"] = torch.tensor([list(token_type_ids)], dtype=torch.long)
    lns = [b.get_submodule(layout(model)["ln"]) for b in blocks(model)]
    ln_in: list = [None] * len(lns)
    ln_out: list = [None] * len(lns)
    ln2_in: list = [None] * len(lns)
    handles = []
    for idx, (ln, block) in enumerate(zip(lns, blocks(model), strict=True)):

        def hook(_m, inp, out, idx=idx):
            ln_in[idx] = _np(inp[0][0])
            ln_out[idx] = _np(out[0])

        def hook2(_m, inp, _out, idx=idx):
            ln2_in[idx] = _np(inp[0][0])

        handles.append(ln.register_forward_hook(hook))
        handles.append(block.get_submodule(layout(model)["ln2"]).register_forward_hook(hook2))
    try:
        out = model(**inputs, output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    hidden = [_np(h[0]) for h in out.hidden_states[: len(lns)]]
    return ModelRun(hidden=hidden, ln_in=ln_in, ln_out=ln_out, ln2_in=ln2_in)


@dataclass
class BlockReference:
    alpha: np.ndarray  # [H, n, n]
    a: np.ndarray  # [n, n, d]   a_ij
    r: np.ndarray  # [n, n, d]   r_ij
    F: np.ndarray  # [n, n, d]   F_i(x_j)
    z: np.ndarray  # [n, d]      pre-LN vector
    s: np.ndarray  # [n]         s(z_i)
    rebuilt: np.ndarray  # [n, d]   Σ_j F_i(x_j) + γ⊙(b − mean b)/s + β
    ln_of_z: np.ndarray  # [n, d]   torch layer_norm(z) in float64
    measures: dict  # name → [n]
    pairs: dict  # "attn_n" | "attnres_n" | "attnresln_n" → [n, n] norms


def _ratio(P: np.ndarray) -> np.ndarray:
    """‖Σ_{j≠i} P_ij‖ / (‖Σ_{j≠i} P_ij‖ + ‖P_ii‖) for P [n, n, d] → [n]."""
    n = P.shape[0]
    out = np.empty(n)
    for i in range(n):
        context = sum(P[i, j] for j in range(n) if j != i)
        c = np.linalg.norm(context)
        o = np.linalg.norm(P[i, i])
        out[i] = c / (c + o)
    return out


def block_reference(
    x: np.ndarray,
    w: LayerWeights,
    mask=None,
    *,
    bias_v_inside: bool = True,
    ln2_in: np.ndarray | None = None,
) -> BlockReference:
    """All measures of one block for one sequence. ``x`` [n, d]; ``mask`` [n] 1 = real token;
    ``ln2_in`` [n, d] the real LN2 input (its s₂ divides GlobEnc's parts).

    ``bias_v_inside=False`` is a deliberately WRONG variant (b_V moved outside f, i.e. folded
    into the output bias) used as a negative control.
    """
    x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    H = w.heads
    dh = d // H
    valid = np.ones(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)

    q = x @ w.wq + w.bq
    k = x @ w.wk + w.bk
    v = x @ w.wv + w.bv if bias_v_inside else x @ w.wv

    # α^h_ij = softmax_j(q^h_i · k^h_j / √d_h), padded keys excluded
    alpha = np.zeros((H, n, n))
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        scores = q[:, sl] @ k[:, sl].T / np.sqrt(dh)
        scores = np.where(valid[None, :], scores, -np.inf)
        scores = scores - scores.max(axis=1, keepdims=True)
        e = np.exp(scores)
        alpha[h] = e / e.sum(axis=1, keepdims=True)

    # f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h, W_O^h = dense.weight[:, h*dh:(h+1)*dh]
    f = np.zeros((H, n, d))
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        f[h] = v[:, sl] @ w.wo_torch[:, sl].T
    bias_out = w.bo if bias_v_inside else w.bo + w.bv @ w.wo_torch.T

    a = np.zeros((n, n, d))
    for i in range(n):
        for j in range(n):
            a[i, j] = sum(alpha[h, i, j] * f[h, j] for h in range(H))
    r = a.copy()
    for i in range(n):
        r[i, i] += x[i]
    z = a.sum(axis=1) + bias_out + x  # padded sources carry α = 0
    s = np.sqrt(z.var(axis=1) + w.eps)  # biased variance
    F = w.gamma * (r - r.mean(axis=2, keepdims=True)) / s[:, None, None]
    rebuilt = (
        F.sum(axis=1) + w.gamma * (bias_out - bias_out.mean()) / s[:, None] + w.beta  # [n, d]
    )
    ln_of_z = (
        torch.nn.functional.layer_norm(
            torch.from_numpy(z), (d,), torch.from_numpy(w.gamma), torch.from_numpy(w.beta), w.eps
        )
        .numpy()
        .copy()
    )

    # restrict the per-token measures to real tokens and real sources
    idx = np.flatnonzero(valid)
    sub = np.ix_(idx, idx)
    attn_w = 1.0 - np.array([alpha[:, i, i].mean() for i in range(n)])
    # GlobEnc: G_ij = γ₂ ⊙ centre(F_i(x_j)) / s₂(i), s₂ the std of the real LN2 input
    z2 = ln2_in if ln2_in is not None else z
    s2 = np.sqrt(np.asarray(z2).var(axis=1) + w.eps2)
    G = w.gamma2 * (F - F.mean(axis=2, keepdims=True)) / s2[:, None, None]
    # the feed-forward (ICLR 2024): its input's parts are F_i(x_j), and so are the residual's
    y_bias = w.gamma * (bias_out - bias_out.mean()) / s[:, None] + w.beta  # [n, d]
    ff = ff_measures(F[sub], y_bias[idx], F[sub], y_bias[idx], w.ff, w.act, w.gamma2, True)
    if ln2_in is not None:  # the reference's own stream is the model's real LN2 input
        np.testing.assert_allclose(ff["_stream"], np.asarray(ln2_in)[idx], atol=1e-9)
    measures = {
        "attn_w": attn_w[idx],
        "attn_n": _ratio(a[sub]),
        "attnres_w": attn_w[idx] / 2,
        "attnres_n": _ratio(r[sub]),
        "attnresln_n": _ratio(F[sub]),
        "globenc_n": _ratio(G[sub]),
        **sink_measures(alpha[np.ix_(range(H), idx, idx)], a[sub]),
        **distance_measures(alpha[np.ix_(range(H), idx, idx)], a[sub]),
        **{k: v for k, v in ff.items() if not k.startswith("_")},
    }
    pairs = {
        "attn_n": np.linalg.norm(a, axis=2)[sub],
        "attnres_n": np.linalg.norm(r, axis=2)[sub],
        "attnresln_n": np.linalg.norm(F, axis=2)[sub],
    }
    return BlockReference(alpha, a, r, F, z, s, rebuilt, ln_of_z, measures, pairs)


@dataclass
class SequenceReference:
    run: ModelRun
    layers: list[BlockReference]

    def measures(self, names: tuple[str, ...] = MEASURES) -> np.ndarray:
        """[layer, measure (``names`` order), n_valid]."""
        return np.stack([np.stack([b.measures[m] for m in names]) for b in self.layers])

    def pairs(self, name: str) -> np.ndarray:
        """[layer, n, n] per-pair norms of one measure."""
        return np.stack([b.pairs[name] for b in self.layers])


def reference(
    model, input_ids, token_type_ids=None, attention_mask=None, *, bias_v_inside: bool = True
) -> SequenceReference:
    """Every layer of one sequence; the model runs once for its layer inputs."""
    run = run_model(model, input_ids, token_type_ids, attention_mask)
    layers = [
        block_reference(
            run.hidden[li],
            layer_weights(model, li),
            attention_mask,
            bias_v_inside=bias_v_inside,
            ln2_in=run.ln2_in[li],
        )
        for li in range(len(run.hidden))
    ]
    return SequenceReference(run, layers)
