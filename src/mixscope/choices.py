"""The closed sets of values that spec fields take, in a leaf module (it imports only the
error types).

They belong to the modules that act on them (storage, masking, the engine, the executors,
the measure registry), which take them from here; living here lets config/ validate a spec
and the CLI build its flags from it (cli/options.py) without importing the runtime or the
tensor code, so the layering stays one-way and ``mixscope --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Iterable

from mixscope.errors import SpecError

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

#: ``analysis.measures``: the measure groups, in registry order (mixing/measures/ checks
#: that its ``GROUPS`` are exactly these)
MEASURE_GROUPS = ("paper", "globenc", "sink", "ff", "learned_sink", "distance")
#: what a job computes when it names no groups (runs written before groups existed)
DEFAULT_MEASURE_GROUPS = ("paper",)
#: ``analysis.distance_buckets``: the distance group's bucket count, by default and at most
#: (its stored columns are fixed, so their codes are stable); at least 2
DISTANCE_BUCKETS = 12
#: the selection word for every group that applies to the model
ALL_GROUPS = "all"


def parse_measure_groups(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"paper,sink"``, ``["paper", "sink"]`` or None → the names, checked against
    :data:`MEASURE_GROUPS` (``all`` kept as it is); duplicates dropped, registry order. A
    bad name is a :class:`~mixscope.errors.SpecError` (exit 2 from the CLI)."""
    if value is None:
        return DEFAULT_MEASURE_GROUPS
    items = [value] if isinstance(value, str) else list(value)
    wanted = [n.strip() for item in items for n in str(item).split(",") if n.strip()]
    groups = ", ".join(MEASURE_GROUPS)
    if not wanted:
        raise SpecError(f"measures: name at least one group ({groups}) or all")
    unknown = [n for n in wanted if n != ALL_GROUPS and n not in MEASURE_GROUPS]
    if unknown:
        raise SpecError(f"measures: unknown group {unknown[0]!r}; groups: {groups}, or all")
    if ALL_GROUPS in wanted:
        return (ALL_GROUPS,)
    return tuple(n for n in MEASURE_GROUPS if n in wanted)
