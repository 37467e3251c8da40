"""The closed sets of values that spec fields take, in a leaf module that imports nothing.

They belong to the modules that act on them (storage, masking), which re-export them from
here; living here lets the CLI build its flags from the spec (cli/options.py) without
loading numpy or pyarrow, so ``mixscope --help`` stays fast.
"""

#: ``output.detail``: per-token rows of every document, a sample of them, or none
DETAIL_MODES = ("full", "sample", "none")

#: ``output.precision``: the stored precision of the detail's measures
PRECISIONS = ("float32", "float16")

#: ``analysis.mask_count``: how the number of masked tokens is counted from ``rate · m``
MASK_COUNTS = ("round", "floor")
