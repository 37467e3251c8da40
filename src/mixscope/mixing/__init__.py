"""The norm-based decomposition of the attention block (docs/method.md), as tensor kernels."""

from mixscope.choices import ATTENTION_MODES

__all__ = ["ATTENTION_MODES"]
