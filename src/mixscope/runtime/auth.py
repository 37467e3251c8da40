"""Ray's token authentication, for every path of mixscope that reaches a Ray cluster.

Ray (2.5x on) runs a cluster in token mode by default: ``ray start --head`` does when a
token exists (``~/.ray/auth_token``, ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``), and
``ray.init()`` of a new local instance always does. A process that attaches with an
explicit address (``--address``, ``RAY_ADDRESS``) or calls the Jobs API sends its token
only when it runs in token mode itself, which Ray turns on for it only when it finds the
cluster on its own. So ``use_local_token`` puts this process in token mode where this shell
has a token and ``RAY_AUTH_MODE`` does not say otherwise; ``ensure_ray`` (``run``,
``checkpoints sync/watch``, ``run_job``) and ``submit`` call it before attaching.
A refused token looks to the driver like a cluster that is not there ("Failed to connect"),
so their errors add ``auth_hint``: what this process used, and where a token goes.

Ray's notice that a new local instance enabled token mode is the first line of every
``mixscope run`` on its embedded instance, about a cluster the user never started nor
addresses: ``quiet_default_token_notice`` drops that one record while it starts (every
other line of Ray's stays, and so does the notice of a ``ray start`` the user runs).

No Ray import at load: the CLI loads this module.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

#: an explicit mode (``token`` or ``disabled``) always wins over what is found here
MODE = "RAY_AUTH_MODE"
TOKEN = "RAY_AUTH_TOKEN"
TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
#: where ``ray start`` and ``ray.init()`` keep the token they use
DEFAULT_TOKEN_FILE = "~/.ray/auth_token"

#: how Ray's notice begins (``_warn_token_auth_enabled`` in Ray's authentication setup)
DEFAULT_TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"
#: the logger Ray logs it on
NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


class _DropDefaultTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(DEFAULT_TOKEN_NOTICE)


@contextmanager
def quiet_default_token_notice() -> Iterator[None]:
    """Within: Ray's notice that a new local instance enabled token mode is not logged."""
    logger = logging.getLogger(NOTICE_LOGGER)
    notice_filter = _DropDefaultTokenNotice()
    logger.addFilter(notice_filter)
    try:
        yield
    finally:
        logger.removeFilter(notice_filter)


def token_source(environ: Mapping[str, str] | None = None) -> str | None:
    """Where Ray takes this shell's token from, as a user reads it (``RAY_AUTH_TOKEN``, the
    file of ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``); None without one."""
    env = os.environ if environ is None else environ
    if env.get(TOKEN):
        return TOKEN
    named, file = _token_file(env)
    return named if file.is_file() else None


def token_sent(environ: Mapping[str, str] | None = None) -> str | None:
    """The token Ray sends from this shell, as it sends it (surrounding blanks dropped, as
    Ray's loader does): the one ``token_source`` names, unless ``RAY_AUTH_MODE`` turns
    tokens off; None without one."""
    env = os.environ if environ is None else environ
    if _mode_off(env) is not None:
        return None
    if env.get(TOKEN):
        return env[TOKEN].strip() or None
    file = _token_file(env)[1]
    return (file.read_text().strip() or None) if file.is_file() else None


def _mode_off(env: Mapping[str, str]) -> str | None:
    """``RAY_AUTH_MODE`` where it is set to anything but ``token`` (no token is sent)."""
    mode = env.get(MODE)
    return mode if mode is not None and mode.lower() != "token" else None


def _token_file(env: Mapping[str, str]) -> tuple[str, Path]:
    """The token file as a user names it, and where it is for this environment's HOME
    (which Ray reads, not this process's)."""
    named = env.get(TOKEN_PATH) or DEFAULT_TOKEN_FILE
    home = env.get("HOME")
    local = home + named[1:] if named.startswith("~/") and home else named
    return named, Path(local).expanduser()


def use_local_token() -> None:
    """Token mode for this process (and what it starts) when this shell has a token and
    ``RAY_AUTH_MODE`` is not set; before Ray reads its settings, or they are re-read."""
    if MODE in os.environ or token_source() is None:
        return
    os.environ[MODE] = "token"
    _reread_ray_settings()


def _reread_ray_settings() -> None:
    """Ray reads ``RAY_AUTH_MODE`` once, when ``ray._raylet`` is imported. Where that has
    happened (``ensure_ray`` imports Ray to see whether it is connected already) and no
    driver is connected, re-read it, as Ray does when it turns token mode on itself."""
    raylet = sys.modules.get("ray._raylet")
    if raylet is None:
        return
    import ray

    if not ray.is_initialized():
        raylet.Config.initialize("")


def auth_hint(environ: Mapping[str, str] | None = None, *, refused: bool = False) -> str:
    """What to check when a cluster may have refused this process's authentication (a
    failed ``ray.init``), or, ``refused``, what to fix where it did (its GCS or Jobs API
    said so: ``gcs_probe.py``, ``submit.py``): the token sent, named by where it came from,
    or why none was."""
    env = os.environ if environ is None else environ
    mode = _mode_off(env)
    source = token_source(env)
    head = "the head's token is its ~/.ray/auth_token"
    lead = (
        "it uses token authentication and "
        if refused
        else "if it uses token authentication (Ray's default), "
    )
    if mode is not None:
        return f"{lead}{MODE}={mode} sends none: unset it"
    if source is None:
        return (
            f"{lead}this shell has no token: put it in {DEFAULT_TOKEN_FILE}, {TOKEN} or "
            f"{TOKEN_PATH} ({head})"
        )
    if refused:
        return f"it refused the token in {source} ({head})"
    return f"if it uses token authentication, is its token the one in {source}?"
