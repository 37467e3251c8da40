"""The measure names, in the one order every tensor, table and query uses.

A module of its own, importing nothing, so that the package root (``mixscope.MEASURES``),
the engine (torch) and the Arrow schemas (``store/schema.py``, pyarrow) share one list
without the CLI paying for pyarrow at start-up.
"""

from __future__ import annotations

#: the five measures of the paper, in the order every table and query uses
MEASURE_COLUMNS = ("attn_w", "attn_n", "attnres_w", "attnres_n", "attnresln_n")
#: measures derived exactly from a stored one: name → (source, factor)
DERIVED_MEASURES = {"attnres_w": ("attn_w", 0.5)}
#: the measures written to disk (detail lists, statistics, histograms)
STORED_MEASURES = tuple(m for m in MEASURE_COLUMNS if m not in DERIVED_MEASURES)
#: the per-pair contribution norms (‖a_ij‖, ‖r_ij‖, ‖F_i(x_j)‖) of contribution maps
PAIR_MEASURES = ("attn_n", "attnres_n", "attnresln_n")
