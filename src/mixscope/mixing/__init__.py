"""The norm-based decomposition of the attention block (docs/method.md), as tensor kernels."""

#: ``analysis.attention``: "fast" runs a fused kernel and reads α_ii from its log-sum-exp
#: (O(seq) memory per head, see fast_attention.py); "eager" materialises the weights
#: [batch, heads, seq, seq]; "auto" is fast unless a batch needs the full weights
#: (per-pair maps, the exactness check).
ATTENTION_MODES = ("auto", "fast", "eager")
