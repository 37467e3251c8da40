"""The transformers release each supported model type needs: data, read by the refusal of
a family newer than the installed transformers and by the README's architecture table.

Every model type needs at least the project's own floor (pyproject's ``transformers>=``,
checked equal by tests/test_config_file.py); a type that transformers added after that
floor names the release that added it (its model page's "added to Hugging Face
Transformers on …", against the release dates).
"""

from __future__ import annotations

#: pyproject's ``transformers>=``: every supported model type is known from it on
FLOOR = "4.56"

#: model types added to transformers after :data:`FLOOR`, and the release that added them
ADDED_AFTER_FLOOR: dict[str, str] = {
    "olmo3": "4.57",  # added 2025-09-16; 4.56 was released 2025-08-29, 4.57 on 2025-10-03
}


def needed(model_type: str) -> str:
    """The oldest transformers release that knows ``model_type`` and that mixscope runs on."""
    return ADDED_AFTER_FLOOR.get(model_type, FLOOR)
