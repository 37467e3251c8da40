"""The ``sink`` group's textbook formula (docs/method.md §5b), float64, from the materialised
per-source vectors: each token's weight and norm share of the first real token, by a loop.

Shared by the encoder and decoder references (tests/reference.py, reference_decoder.py):
the formula is the same whatever the layout, only the parts ``a_ij`` differ.
"""

from __future__ import annotations

import numpy as np


def sink_measures(alpha: np.ndarray, a: np.ndarray) -> dict[str, np.ndarray]:
    """sink_w, sink_n of every token from α [H, n, n] and the parts a_ij [n, n, d] of the
    real tokens only (index 0 = the first real token): ᾱ_i0 and
    ‖a_i0‖ / (‖a_i0‖ + ‖Σ_{j≠0} a_ij‖), by the textbook formula."""
    n = a.shape[0]
    sink_n = np.empty(n)
    for i in range(n):
        own = np.linalg.norm(a[i, 0])
        rest = np.linalg.norm(sum((a[i, j] for j in range(1, n)), np.zeros(a.shape[2])))
        sink_n[i] = own / (own + rest)
    return {"sink_w": alpha[:, :, 0].mean(axis=0), "sink_n": sink_n}
