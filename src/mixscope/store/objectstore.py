"""S3 (and S3-compatible) output roots: conditional writes and DuckDB access.

An object store has no rename and no O_EXCL, but every PUT is atomic (a reader sees the
old object or the whole new one, never a part) and S3 has conditional writes: a PUT with
``If-None-Match: *`` creates an object only if none exists (412 otherwise), a PUT or
DELETE with ``If-Match: <etag>`` changes it only if it is unchanged since it was read.
mixscope builds its commit, consolidation and lease protocols on exactly these (see
docs/storage.md). Servers that ignore the headers (older MinIO, Ceph releases) silently
degrade exclusive creates to last-writer-wins; AWS S3 (since 2024), moto, MinIO and R2
honour them.

Configuration comes from the usual AWS variables and profiles (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_PROFILE``) or from pyarrow's URI options (``s3://b/p?endpoint_override=h:9000&
scheme=http&region=eu-west-1``), the same for pyarrow, botocore, s3fs and DuckDB.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mixscope.errors import MixscopeError

#: ``auto`` (httpfs if loadable, else s3fs), ``httpfs`` or ``fsspec``: how DuckDB reads S3
DUCKDB_S3_ENV = "MIXSCOPE_DUCKDB_S3"


def split(path: str) -> tuple[str, str]:
    """``bucket/key`` (a pyarrow S3 path, or an s3:// URI) → (bucket, key)."""
    if "://" in path:
        path = path.split("://", 1)[1]
    bucket, _, key = path.lstrip("/").partition("/")
    return bucket, key


def options(uri: str) -> dict[str, str | None]:
    """endpoint URL and region: the URI's query options, else the AWS environment."""
    query = {k: v[-1] for k, v in parse_qs(urlsplit(uri).query).items()}
    endpoint = None
    if query.get("endpoint_override"):
        host = query["endpoint_override"]
        endpoint = host if "://" in host else f"{query.get('scheme', 'https')}://{host}"
    endpoint = (
        endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    region = (
        query.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    )
    return {"endpoint": endpoint, "region": region}


def client(uri: str) -> Any:
    """A botocore S3 client for ``uri`` (cached per endpoint and region; thread-safe)."""
    o = options(uri)
    return _client(o["endpoint"], o["region"], os.environ.get("AWS_PROFILE"))


@functools.lru_cache(maxsize=8)
def _client(endpoint: str | None, region: str | None, profile: str | None) -> Any:
    try:
        import botocore.session
        from botocore.config import Config
    except ImportError:
        raise MixscopeError(
            "S3 output roots need botocore for conditional writes: pip install 'mixscope[s3]'"
        ) from None
    session = botocore.session.Session(profile=profile)
    return session.create_client(
        "s3",
        endpoint_url=endpoint,
        region_name=region or "us-east-1",
        config=Config(retries={"max_attempts": 5, "mode": "standard"}),
    )


def _code(exc: Exception) -> tuple[str, int]:
    resp = getattr(exc, "response", None) or {}
    err = resp.get("Error", {})
    return str(err.get("Code", "")), int(resp.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _unsupported(code: str, status: int) -> bool:
    return status == 501 or code in ("NotImplemented", "InvalidArgument")


def put_if_absent(uri: str, path: str, data: bytes, attempts: int = 8) -> bool:
    """Create ``path`` holding ``data`` unless it exists (``If-None-Match: *``); False if it
    did. A 409 (a concurrent conditional write in flight) is retried, as AWS advises."""
    from botocore.exceptions import ClientError

    bucket, key = split(path)
    for attempt in range(attempts):
        try:
            client(uri).put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            code, status = _code(exc)
            if status == 412 or code == "PreconditionFailed":
                return False
            if (status == 409 or code == "ConditionalRequestConflict") and attempt + 1 < attempts:
                time.sleep(0.05 * 2**attempt)
                continue
            if _unsupported(code, status):
                raise MixscopeError(
                    f"the S3 endpoint refuses conditional writes (If-None-Match) for {path}: "
                    "exactly-once commits need them (see docs/storage.md)"
                ) from None
            raise
    return False


def get(uri: str, path: str) -> tuple[bytes, str] | None:
    """The object's bytes and ETag, or None if it does not exist."""
    from botocore.exceptions import ClientError

    bucket, key = split(path)
    try:
        resp = client(uri).get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        code, status = _code(exc)
        if status == 404 or code in ("NoSuchKey", "404"):
            return None
        raise
    return resp["Body"].read(), resp["ETag"]


def put_if_match(uri: str, path: str, data: bytes, etag: str) -> bool:
    """Replace ``path`` with ``data`` only if its ETag is still ``etag`` (compare-and-swap)."""
    from botocore.exceptions import ClientError

    bucket, key = split(path)
    try:
        client(uri).put_object(Bucket=bucket, Key=key, Body=data, IfMatch=etag)
        return True
    except ClientError as exc:
        code, status = _code(exc)
        if status in (404, 409, 412) or code in ("PreconditionFailed", "NoSuchKey"):
            return False
        if _unsupported(code, status):
            raise MixscopeError(
                f"the S3 endpoint refuses conditional writes (If-Match) for {path}: "
                "leases on object stores need them (see docs/storage.md)"
            ) from None
        raise


def delete(uri: str, path: str) -> None:
    """Delete ``path`` if it exists (an absent key is no error on S3)."""
    bucket, key = split(path)
    client(uri).delete_object(Bucket=bucket, Key=key)


def delete_if_match(uri: str, path: str, etag: str) -> bool:
    """Delete ``path`` only if its ETag is still ``etag``; False if it changed or is gone.

    Endpoints without conditional deletes answer 501: the caller falls back."""
    from botocore.exceptions import ClientError

    bucket, key = split(path)
    try:
        client(uri).delete_object(Bucket=bucket, Key=key, IfMatch=etag)
        return True
    except ClientError as exc:
        code, status = _code(exc)
        if status in (404, 409, 412) or code in ("PreconditionFailed", "NoSuchKey"):
            return False
        if _unsupported(code, status):
            raise NotImplementedError("conditional delete") from None
        raise


# -- DuckDB ------------------------------------------------------------------------------


def duckdb_attach(con: Any, uri: str) -> str:
    """Make ``s3://`` paths readable by ``con``; returns the way used: ``httpfs`` (the
    DuckDB extension, if it is installed: nothing is downloaded) or ``fsspec`` (s3fs
    registered as a Python filesystem). ``MIXSCOPE_DUCKDB_S3`` forces one."""
    mode = os.environ.get(DUCKDB_S3_ENV, "auto").lower()
    if mode not in ("auto", "httpfs", "fsspec"):
        raise MixscopeError(f"{DUCKDB_S3_ENV}={mode}: expected auto, httpfs or fsspec")
    if mode in ("auto", "httpfs"):
        try:
            _httpfs(con, uri)
            return "httpfs"
        except Exception as exc:  # not installed (no network to fetch it), or too old
            if mode == "httpfs":
                raise MixscopeError(f"DuckDB's httpfs extension is not usable: {exc}") from None
    _fsspec(con, uri)
    return "fsspec"


def _httpfs(con: Any, uri: str) -> None:
    con.execute("LOAD httpfs")
    o = options(uri)
    parts = ["TYPE s3"]
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        parts += [f"KEY_ID {_q(key)}", f"SECRET {_q(secret)}"]
        if os.environ.get("AWS_SESSION_TOKEN"):
            parts.append(f"SESSION_TOKEN {_q(os.environ['AWS_SESSION_TOKEN'])}")
    else:  # profiles, SSO, instance roles: the aws extension's credential chain
        con.execute("LOAD aws")
        parts.append("PROVIDER credential_chain")
    if o["region"]:
        parts.append(f"REGION {_q(o['region'])}")
    if o["endpoint"]:
        ep = urlsplit(o["endpoint"])
        parts += [
            f"ENDPOINT {_q(ep.netloc)}",
            f"USE_SSL {'true' if ep.scheme == 'https' else 'false'}",
            "URL_STYLE 'path'",
        ]
    con.execute(f"CREATE OR REPLACE SECRET mixscope_s3 ({', '.join(parts)})")


def _fsspec(con: Any, uri: str) -> None:
    try:
        import s3fs
    except ImportError:
        raise MixscopeError(
            "SQL over s3:// needs DuckDB's httpfs extension installed or s3fs: "
            "pip install 'mixscope[s3]'"
        ) from None
    o = options(uri)
    fs = s3fs.S3FileSystem(
        endpoint_url=o["endpoint"],
        client_kwargs={"region_name": o["region"]} if o["region"] else {},
        profile=os.environ.get("AWS_PROFILE"),
        skip_instance_cache=True,  # fresh listings: files named by commit records only
        use_listings_cache=False,
    )
    con.register_filesystem(fs)


def _q(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
