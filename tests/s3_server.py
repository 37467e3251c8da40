"""A real S3 HTTP endpoint for tests: moto's standalone server on 127.0.0.1, a free port."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_server() -> Iterator[str]:
    """Start ``moto.server.ThreadedMotoServer``; yield its endpoint URL; stop it."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "mixscope-test",
    "AWS_SECRET_ACCESS_KEY": "mixscope-test-secret",
    "AWS_REGION": "us-east-1",
}


def s3_client(endpoint: str):
    import botocore.session

    return botocore.session.Session().create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=AWS_ENV["AWS_REGION"],
        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def new_bucket(client) -> str:
    name = f"mixscope-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name


def objects(client, bucket: str, prefix: str = "") -> dict[str, str]:
    """key → ETag of every object under ``prefix``."""
    out: dict[str, str] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = obj["ETag"]
    return out
