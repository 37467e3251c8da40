"""The closed sets of values that spec fields take, in a low module (it imports only the
measure registry, itself torch-free).

They belong to the modules that act on them (storage, masking, the engine, the executors,
the measure registry), which take them from here; living here lets config/ validate a spec
and the CLI build its flags from it (cli/options.py) without importing the runtime or the
tensor code, so the layering stays one-way and ``mixscope --help`` stays fast.
"""

from __future__ import annotations

from mixscope.registry import (  # DISTANCE_BUCKETS re-exported: config/ reads them here
    ALL,
    DEFAULT_GROUPS,
    DISTANCE_BUCKETS,  # noqa: F401
    GROUPS,
    parse_names,
)

#: ``output.detail``: per-token rows of every document, a sample of them, or none
DETAIL_MODES = ("full", "sample", "none")

#: ``output.precision``: the stored precision of the detail's measures
PRECISIONS = ("float32", "float16")

#: ``analysis.mask_count``: how the number of masked tokens is counted from ``rate · m``
MASK_COUNTS = ("round", "floor")

#: ``analysis.attention``: "fast" runs a fused kernel and reads α_ii from its log-sum-exp
#: (O(seq) memory per head, see mixing/fast_attention.py); "eager" materialises the weights
#: [batch, heads, seq, seq]; "auto" is fast unless a batch needs the full weights
#: (per-pair maps, the exactness check).
ATTENTION_MODES = ("auto", "fast", "eager")

#: ``runtime.executor``: in-process (debugging) or Ray (runtime/executor.py maps each to
#: its class)
EXECUTOR_NAMES = ("local", "ray")

#: ``analysis.measures``: the measure groups, in registry order, the default selection, the
#: word for every group and ``analysis.distance_buckets``' maximum: the registry's own
#: (registry.py), named here beside the other closed sets for config/
MEASURE_GROUPS = tuple(GROUPS)
DEFAULT_MEASURE_GROUPS = DEFAULT_GROUPS
ALL_GROUPS = ALL
parse_measure_groups = parse_names
