"""The environment variables this shell passes on to the processes a job runs in elsewhere:
the Ray actors (``ray_executor.py``: each actor's ``runtime_env``) and the driver of a Ray
Jobs submission (``submit.py``), so a cluster's processes see the hub, object store and
mixscope settings of the shell that started the job. One list for both.

Only variables that are set travel. ``LOCAL_PATHS`` name a folder of this machine: they go
to the actors (an embedded local Ray, or a cluster that shares this filesystem) but not to
a Ray Jobs submission, whose driver runs on the cluster where such a path rarely exists
(the job's own actors then take the cluster's value).
"""

from __future__ import annotations

from collections.abc import Mapping

from mixscope.runtime import faults

#: forwarded by name
FORWARDED_ENV: tuple[str, ...] = (
    faults.ENV,  # injected faults (tests/reliability) reach the process that runs the shard
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "HF_TOKEN",
    "HF_ENDPOINT",
    "TRANSFORMERS_VERBOSITY",
    "MIXSCOPE_PROGRESS_INTERVAL",
)
#: every variable with this prefix travels too (credentials, region, ``AWS_ENDPOINT_URL``,
#: profile), so an ``s3://`` output or corpus is reached from the cluster as from this shell
FORWARDED_PREFIXES: tuple[str, ...] = ("AWS_",)
#: paths of this machine: not carried by a Ray Jobs submission
LOCAL_PATHS: tuple[str, ...] = ("HF_HOME",)
#: what an actor gets where the shell does not say: no progress bars or warnings per actor
WORKER_DEFAULTS: Mapping[str, str] = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


def forwarded(environ: Mapping[str, str], *, local_paths: bool = True) -> dict[str, str]:
    """The variables of ``environ`` that travel (those set); ``local_paths=False``: without
    ``LOCAL_PATHS`` (a Ray Jobs submission)."""
    return {
        k: v
        for k, v in environ.items()
        if (k in FORWARDED_ENV or k.startswith(FORWARDED_PREFIXES))
        and (local_paths or k not in LOCAL_PATHS)
    }


def worker_env(environ: Mapping[str, str]) -> dict[str, str]:
    """A Ray actor's environment variables: the forwarded ones, then ``WORKER_DEFAULTS``."""
    return {**WORKER_DEFAULTS, **forwarded(environ)}


def job_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a Ray Jobs submission's ``runtime_env`` carries."""
    return forwarded(environ, local_paths=False)
