"""``mixscope submit``: a job spec to a Ray cluster through the Ray Jobs API.

The submission id is derived from the spec, so submitting the same job twice does not run
it twice: a pending, running or finished submission is reported instead. A failed or
stopped one may be submitted again (it resumes from its committed shards).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from mixscope.config import JobSpec
from mixscope.errors import MixscopeError, first_line
from mixscope.runtime.auth import auth_hint, use_local_token
from mixscope.runtime.environment import job_env

AGENT_WAIT_SECONDS = 300  # a freshly started head can take minutes on a busy machine


def submission_id(spec: JobSpec) -> str:
    d = spec.to_dict()
    d["runtime"]["address"] = None
    digest = hashlib.blake2b(json.dumps(d, sort_keys=True).encode(), digest_size=8).hexdigest()
    return f"mixscope-{digest}"


def submit_job(spec: JobSpec, *, address: str | None, wait: bool, echo: Callable[..., None]) -> int:
    import yaml

    if "://" not in spec.out and not os.path.isabs(spec.out):
        # a relative root would land in the job's temporary working directory
        spec = replace(spec, out=os.path.abspath(spec.out))
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise MixscopeError("submit needs --address http://HEAD:8265 (or RAY_ADDRESS)")
    client = _client(address)
    chosen, existing = _submission(client, submission_id(spec))
    if existing is not None:
        echo(f"already submitted as {chosen} ({existing}); not submitting it again", err=True)
        return _follow(client, chosen, echo) if wait else 0

    env = job_env(os.environ)
    with tempfile.TemporaryDirectory(prefix="mixscope-submit-") as tmp:
        (Path(tmp) / "job.yaml").write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
        deadline = time.time() + AGENT_WAIT_SECONDS
        waited = False
        while True:  # a head that has just started takes a moment to get its job agent
            try:
                client.submit_job(
                    # stderr of a Ray job is not a terminal: progress is one log line per
                    # MIXSCOPE_PROGRESS_INTERVAL seconds (runtime/progress.py)
                    entrypoint="mixscope run job.yaml",
                    submission_id=chosen,
                    runtime_env={"working_dir": tmp, "env_vars": env},
                    metadata={"mixscope_job": spec.name},
                )
                break
            except RuntimeError as exc:
                if "No available agent" not in str(exc) or time.time() > deadline:
                    raise
                if not waited:
                    echo("waiting for the cluster's job agent to come up…", err=True)
                    waited = True
                time.sleep(2)
    echo(f"submitted {chosen} to {address}", err=True)
    return _follow(client, chosen, echo) if wait else 0


def _client(address: str) -> Any:
    """A Jobs API client of ``address``, in the local token's mode; one line if it fails."""
    use_local_token()  # the Jobs SDK sends the token only in token mode (auth.py)
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except ValueError as exc:  # not an address of a Jobs API
        raise MixscopeError(f"cannot reach the Ray Jobs API at {address}: {exc}") from None
    except AuthenticationError:  # the API said so (401, 403): no guessing
        raise MixscopeError(
            f"cannot reach the Ray Jobs API at {address}: {auth_hint(refused=True)}"
        ) from None
    except ConnectionError as exc:  # nothing answered: a token cannot be the cause
        raise MixscopeError(
            f"cannot reach the Ray Jobs API at {address}: {first_line(exc)} (is it up?)"
        ) from None
    except RuntimeError as exc:
        raise MixscopeError(
            f"cannot reach the Ray Jobs API at {address}: {first_line(exc)} "
            f"(is it up? {auth_hint()})"
        ) from None


def _submission(client: Any, base: str) -> tuple[str, str | None]:
    """(submission id, the status of a live submission of it or None): the job's id, or
    its next retry id (``-r2``, …) after failed or stopped ones."""
    from ray.job_submission import JobStatus

    for k in range(1, 100):
        sid = base if k == 1 else f"{base}-r{k}"
        try:
            status = client.get_job_status(sid)
        except RuntimeError:  # no such submission
            return sid, None
        if status not in (JobStatus.FAILED, JobStatus.STOPPED):
            return sid, status.value
    raise MixscopeError(f"too many failed submissions of {base}")


def _follow(client, sid: str, echo: Callable[..., None]) -> int:
    import asyncio

    from ray.job_submission import JobStatus

    async def tail() -> None:
        async for lines in client.tail_job_logs(sid):
            echo(lines, nl=False)

    try:
        asyncio.run(tail())
    except Exception:  # log streaming is best effort; the status below is what counts
        pass
    while True:
        status = client.get_job_status(sid)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            break
        time.sleep(1)
    echo(f"{sid}: {status.value}", err=True)
    return 0 if status == JobStatus.SUCCEEDED else 1
