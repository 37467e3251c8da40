"""The run lease through an object-store outage longer than the client's own retries.

A driver's run lease on S3 is renewed by a heartbeat thread (store/lease.py). Found while
looking at what the chaos run's outages do to it (issue 41): a renewal that failed past
botocore's retries raised in that thread and ended it, so the lease was never renewed again
once the store was back; it expired under a driver still running, and a second driver
could take the run. Against moto's real HTTP server, stopped and started on the same port.
"""

from __future__ import annotations

import time

import pytest

from mixscope.store.lease import Lease
from s3_server import AWS_ENV, free_port, new_bucket, s3_client

TTL = 3.0
#: past botocore's retries of one request (5 attempts, backoff at most 1 + 2 + 4 + 8 s)
OUTAGE = 20.0


def _server(port: int):
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server


@pytest.mark.scenario(
    "S3 outage under a held run lease",
    injected=f"the S3 endpoint stopped for {OUTAGE:g} s (longer than the client's retries) "
    f"while a lease of {TTL:g} s is held and renewed, then started again",
    checked="the heartbeat lives through it and renews the lease once the store answers; "
    "a second taker is refused",
)
def test_the_heartbeat_renews_again_after_an_outage(monkeypatch):
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    for k, v in {**AWS_ENV, "AWS_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(k, v)
    server = _server(port)
    try:
        folder = f"s3://{new_bucket(s3_client(endpoint))}/_mixscope/runs/r"
        lease = Lease(folder, "driver", TTL)
        assert lease.acquire()
        server.stop()
        time.sleep(OUTAGE)
        server = _server(port)
        deadline = time.time() + 30  # a renewal in its client's backoff finishes first
        while time.time() < deadline:
            record = lease.holder_record()
            if record is not None and record.expires_at > time.time() + TTL / 3:
                break
            time.sleep(0.5)
        assert lease._thread is not None and lease._thread.is_alive()
        record = lease.holder_record()
        assert record is not None and record.owner == lease.owner and not record.expired
        assert lease.held
        assert not Lease(folder, "driver", TTL).acquire()  # still ours
        lease.release()
        assert lease.holder_record() is None
    finally:
        server.stop()
