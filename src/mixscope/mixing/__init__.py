"""The norm-based decomposition of the attention block (METHOD.md), as tensor kernels."""
