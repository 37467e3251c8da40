"""Whether a model hub id can be answered: the hub reachable, or the model in the cache.

Without this, a hub id on a machine that cannot reach the Hugging Face Hub spends tens of
seconds in huggingface_hub's retries (printed line by line) before transformers says it
could not connect. One probe of the hub endpoint (through the same HTTP session, so
proxies count), bounded by :data:`PROBE_SECONDS`, answers first: reachable, the calls go
on as usual; unreachable, a model in the local cache loads from it (``local_files_only``)
and one that is not is refused in one line. ``HF_HUB_OFFLINE=1`` skips the probe.
"""

from __future__ import annotations

import functools
from typing import Any

from mixscope.errors import MixscopeError

#: how long the probe of the hub waits for an answer
PROBE_SECONDS = 5.0


@functools.cache
def hub_unreachable() -> str | None:
    """Why the hub's endpoint does not answer within :data:`PROBE_SECONDS` (None: it
    answers). Asked once per process."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=PROBE_SECONDS)
    except Exception as exc:  # the HTTP client's connection errors, timeouts, TLS
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"cannot reach the Hugging Face Hub at {constants.ENDPOINT} ({reason})"
    return None


def _cached(repo_id: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    return isinstance(found, str)


def hub_options(repo_id: str, revision: str | None = None) -> dict[str, Any]:
    """Keyword arguments for transformers' ``from_pretrained`` on hub id ``repo_id``:
    none where the hub answers; ``local_files_only`` where it does not but the model is
    cached; a one-line :class:`MixscopeError` where it is neither."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return {}
    why = hub_unreachable()
    if why is None:
        return {}
    if _cached(repo_id, revision):
        return {"local_files_only": True}
    raise MixscopeError(
        f"{why}, and {repo_id!r} is not in the local cache: use a local model directory "
        "(the packaged one: --model minilm), or download it where the hub is reachable"
    )
