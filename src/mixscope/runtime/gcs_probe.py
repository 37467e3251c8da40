"""Ask a Ray cluster's GCS whether it answers, and accepts this shell's token, before
``ray.init`` attaches to it.

Why: ``ray.init(address=...)`` has no useful answer for either failure. A cluster that
refuses the token gets a warning line from Ray's C++ client every second for 20 s, then
"Failed to connect", which reads like a cluster that is not there. An address where
nothing listens (a head not started, a mistyped port) retries for as long as the driver
lives: measured here, still waiting after 13 minutes with a line every 40 s. One gRPC call
tells these apart in milliseconds: ``GetClusterId`` (the first call Ray's own client
makes), with the token Ray would send in the header Ray's GCS checks. A server that does
not speak gRPC at all (the dashboard's port, given to ``run`` as ``submit`` takes it) is
named too. Any other answer (a Ray that renamed the call, a gRPC server that is not a
GCS) is left to ``ray.init``, so the probe never refuses a cluster Ray would reach.

No Ray import: only grpc (a dependency of ``ray[default]``), imported when called.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from mixscope.errors import MixscopeError
from mixscope.runtime.auth import auth_hint, token_sent

#: the first call Ray's GCS client makes (``NodeInfoGcsService`` in gcs_service.proto); its
#: request has no fields, so an empty message is a valid one
CALL = "/ray.rpc.NodeInfoGcsService/GetClusterId"
#: how long an address where nothing answers is retried (a head still starting), unless
#: ``MIXSCOPE_ATTACH_WAIT_SECONDS`` says otherwise (the tests shorten it that way)
WAIT_SECONDS = 10.0

#: how grpc begins a name it could not resolve (not a head still starting: no wait)
UNRESOLVED = "errors resolving"
#: how grpc says the server answered in something else than HTTP/2 (an HTTP/1 server)
NOT_GRPC = "Failed parsing HTTP/2"
#: Ray's GCS reads the token from this header (``authentication_constants.py``)
HEADER = "authorization"


def probed(address: str) -> bool:
    """Whether ``address`` is one this probe can ask: ``host:port`` of a GCS, not a Ray
    Client (``ray://``), a URL, nor ``auto`` (Ray looks that up itself)."""
    host, _, port = address.rpartition(":")
    return "://" not in address and bool(host) and port.isdigit()


def check_gcs(
    address: str, environ: Mapping[str, str] | None = None, *, named: str | None = None
) -> None:
    """Raise one line when the GCS at ``address`` cannot be attached to: nothing answers
    within :data:`WAIT_SECONDS` (or ``MIXSCOPE_ATTACH_WAIT_SECONDS``), or it refuses this
    process's authentication. Returns when it answered or answered something only Ray can
    judge. ``named``: the address as the user
    gave it, where that is not ``address`` (``auto``)."""
    import grpc

    at = f"cannot reach the Ray cluster at {named or address}"
    env = os.environ if environ is None else environ
    wait = float(env.get("MIXSCOPE_ATTACH_WAIT_SECONDS", WAIT_SECONDS))
    token = token_sent(env)
    metadata = [(HEADER, f"Bearer {token}")] if token else None
    # Ray's own channels bypass an HTTP proxy (its grpc_enable_http_proxy is off)
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(address, options=options) as channel:
        call = channel.unary_unary(
            CALL, request_serializer=lambda m: m, response_deserializer=lambda m: m
        )
        try:
            call(b"", timeout=wait, metadata=metadata, wait_for_ready=False)
            return
        except grpc.RpcError as first:
            failure = first
        details = failure.details() or ""
        unavailable = failure.code() == grpc.StatusCode.UNAVAILABLE
        if unavailable and UNRESOLVED in details:
            raise MixscopeError(f"{at}: {_reason(details)}")
        if unavailable and NOT_GRPC in details:  # an HTTP server: the dashboard's port?
            raise MixscopeError(
                f"{at}: what answers there is not a Ray GCS (it does not speak gRPC: "
                "a dashboard port? `run` takes the GCS port, 6379 unless `ray start "
                "--port` said otherwise; `submit` takes the dashboard's http://HEAD:8265)"
            )
        if unavailable:
            reason = _reason(details)
            try:  # a head still starting: wait for it to listen, as long as ``wait``
                call(b"", timeout=wait, metadata=metadata, wait_for_ready=True)
                return
            except grpc.RpcError as second:
                failure = second
            if failure.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise MixscopeError(
                    f"{at}: nothing answered there in "
                    f"{wait:g} s ({reason}); is it up? (`ray status --address {address}`)"
                )
    code = failure.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        raise MixscopeError(
            f"{at}: no answer in {wait:g} s (is it up, and is the port open to this machine?)"
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        raise MixscopeError(f"{at}: {auth_hint(env, refused=True)}")


def _reason(details: str) -> str:
    """grpc's last word on a failed connection ("Connection refused", "Domain name not
    found"), not its whole chain."""
    last = details.rstrip("] ").rsplit(": ", 1)[-1]
    return last or "no connection"
