"""Whether an object store's endpoint answers: a bounded probe and its one-line error.

Without it, an S3 root whose endpoint cannot be reached fails with the client library's
own text after its retries ("AWS Error NETWORK_CONNECTION during ListObjectsV2 operation:
curlCode: 7, …" from pyarrow, "Could not connect to the endpoint URL" from botocore), a
different one per request. Opening an S3 root (``Layout.open``) probes its endpoint first:
one unsigned HEAD of the bucket (any HTTP answer, 403 and 404 included, means the endpoint
is there), tried again for :data:`PROBE_SECONDS` (``MIXSCOPE_STORE_PROBE_SECONDS``)
while the connection is refused or times out, so a store that restarts meanwhile is
waited for, and one that does not answer is reported in one line naming the endpoint and
the time tried. A success is remembered for the process; an endpoint lost later (a
command's request failing on the network) is probed again by the CLI's error handler
(:func:`explain`), which then prints the same line instead of the client's.
"""

from __future__ import annotations

import os
import threading
import time

from mixscope.errors import MixscopeError

#: how long the probe tries an endpoint that does not answer (the last try at its end)
PROBE_SECONDS = 5.0
PROBE_ENV = "MIXSCOPE_STORE_PROBE_SECONDS"
#: what the client libraries say of a request that reached no endpoint
NETWORK_MARKERS = (
    "NETWORK_CONNECTION",  # pyarrow (the AWS C++ SDK)
    "Could not connect to the endpoint URL",  # botocore
    "Connect timeout on endpoint URL",
    "Read timeout on endpoint URL",
    "Connection was closed before we received a valid response",
)

_reached: set[str] = set()  # endpoints that answered in this process
_opened: dict[str, str] = {}  # endpoint → a root of it this process opened
_lock = threading.Lock()


class StoreUnreachableError(MixscopeError):
    """The object store's endpoint did not answer within the probe's time."""


def probe_seconds() -> float:
    raw = os.environ.get(PROBE_ENV)
    try:
        return float(raw) if raw else PROBE_SECONDS
    except ValueError:
        raise MixscopeError(f"{PROBE_ENV}={raw}: expected a number of seconds") from None


def endpoint_of(uri: str) -> str:
    """The URL requests for ``uri`` go to (its endpoint option, AWS_ENDPOINT_URL, else AWS's
    regional endpoint)."""
    from mixscope.store import objectstore

    o = objectstore.options(uri)
    return o["endpoint"] or f"https://s3.{o['region'] or 'us-east-1'}.amazonaws.com"


def _head(uri: str, timeout: float) -> str | None:
    """One unsigned HEAD of the bucket: None if any HTTP answer came, else why not."""
    import botocore.session
    from botocore import UNSIGNED
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    from mixscope.store import objectstore

    bucket, _ = objectstore.split(uri)
    config = Config(
        signature_version=UNSIGNED,
        connect_timeout=timeout,
        read_timeout=timeout,
        retries={"total_max_attempts": 1},
    )
    client = botocore.session.Session().create_client(
        "s3", endpoint_url=endpoint_of(uri), region_name="us-east-1", config=config
    )
    try:
        client.head_bucket(Bucket=bucket or "mixscope-probe")
    except ClientError:
        return None  # 403, 404, 301: the endpoint answered
    except BotoCoreError as exc:
        text = str(exc)
        if "refused" in text.lower() or "Could not connect" in text:
            return "could not connect"
        return text.splitlines()[0] if text else type(exc).__name__
    finally:
        client.close()
    return None


def unreachable(uri: str, seconds: float | None = None) -> str | None:
    """Why ``uri``'s endpoint gave no answer for ``seconds`` (default
    :func:`probe_seconds`), or None as soon as it answers. Tried every 0.5 s until the
    time has passed (the last try at the deadline): the message says it tried that long."""
    seconds = probe_seconds() if seconds is None else seconds
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        why = _head(uri, max(0.5, min(left, 5.0)))
        if why is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            return why
        time.sleep(min(0.5, left))


def message(uri: str, why: str, seconds: float) -> str:
    return (
        f"cannot reach the object store at {endpoint_of(uri)} ({why}; tried for "
        f"{seconds:g} s): check the endpoint (AWS_ENDPOINT_URL or the root's "
        "endpoint_override) and the network"
    )


def require(uri: str) -> None:
    """Return once ``uri``'s endpoint has answered (once per process); else
    :class:`StoreUnreachableError` in one line, after :func:`probe_seconds`."""
    endpoint = endpoint_of(uri)
    with _lock:
        _opened.setdefault(endpoint, uri)
        if endpoint in _reached:
            return
    seconds = probe_seconds()
    why = unreachable(uri, seconds)
    if why is not None:
        raise StoreUnreachableError(message(uri, why, seconds))
    with _lock:
        _reached.add(endpoint)


def network_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a request that reached no endpoint."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(m in str(current) for m in NETWORK_MARKERS):
            return True
        current = current.__cause__ or current.__context__
    return False


def explain(exc: BaseException) -> str | None:
    """The one line for ``exc`` when it is a network error and an object store this process
    opened does not answer now (probed again); None otherwise (the error is something else)."""
    if not network_error(exc):
        return None
    with _lock:
        roots = list(_opened.values())
    seconds = probe_seconds()
    for uri in roots:
        why = unreachable(uri, seconds)
        if why is not None:
            return message(uri, why, seconds)
    return None


def _reset() -> None:
    """Forget what this process probed (tests)."""
    with _lock:
        _reached.clear()
        _opened.clear()
