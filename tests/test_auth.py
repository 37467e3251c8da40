"""Ray's token authentication as mixscope meets it (runtime/auth.py); against a real
cluster: tests/test_attach.py and tests/test_pipeline.py."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from mixscope.runtime.auth import (
    NOTICE_LOGGER,
    auth_hint,
    quiet_default_token_notice,
    token_source,
)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def ray_log():
    """What Ray's authentication setup logs, seen on its own logger (Ray's loggers do not
    propagate to pytest's)."""
    from ray._private.authentication import authentication_token_setup as setup

    logger = logging.getLogger(NOTICE_LOGGER)
    assert setup.logger is logger
    records = _Records()
    logger.addHandler(records)
    # a Ray started earlier in the session (logging_level="ERROR") may have raised the
    # level of Ray's loggers: the warnings this test emits must reach the handler
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield setup, records.messages
    logger.setLevel(level)
    logger.removeHandler(records)


def test_only_the_default_token_notice_is_quieted(ray_log):
    setup, messages = ray_log  # Ray's own emitters, so a change in Ray shows here
    with quiet_default_token_notice():
        setup._warn_token_auth_enabled()  # what ray.init() logs for a new local instance
        setup._warn_token_auth_disabled()  # another warning of the same logger stays
    assert len(messages) == 1 and messages[0].startswith("Token authentication is disabled")

    messages.clear()
    setup._warn_token_auth_enabled()  # outside: shown as Ray shows it
    assert len(messages) == 1
    assert messages[0].startswith("Token authentication is enabled for this Ray cluster.")


def _home(tmp_path, token: str | None = None):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    if token is not None:
        (home / ".ray" / "auth_token").write_text(token)
    return home


def test_the_token_is_found_where_ray_looks(tmp_path):
    with_file = {"HOME": str(_home(tmp_path, "t" * 64))}
    named = tmp_path / "named-token"
    named.write_text("n" * 64)
    assert token_source(with_file) == "~/.ray/auth_token"
    assert token_source({**with_file, "RAY_AUTH_TOKEN": "x"}) == "RAY_AUTH_TOKEN"
    assert token_source({**with_file, "RAY_AUTH_TOKEN_PATH": str(named)}) == str(named)
    # a named file that is not there: no token (Ray reads that path, not the default one)
    assert token_source({**with_file, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "no")}) is None
    assert token_source({"HOME": str(tmp_path / "empty")}) is None


def _mode_after_use_local_token(home, **env: str) -> str:
    """RAY_AUTH_MODE and Ray's own view of the mode in a fresh process that imported Ray
    first (as ``ensure_ray`` does) and then called ``use_local_token``."""
    code = (
        "import os, ray\n"
        "from ray._raylet import AuthenticationMode, get_authentication_mode\n"
        "from mixscope.runtime.auth import use_local_token\n"
        "use_local_token()\n"
        "token = get_authentication_mode() == AuthenticationMode.TOKEN\n"
        "print(os.environ.get('RAY_AUTH_MODE'), token)"
    )
    shell = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**shell, "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.split("\n")[-2]


def test_token_mode_when_this_shell_has_a_token_and_no_explicit_mode(tmp_path):
    with_token = _home(tmp_path, "t" * 64)
    # Ray had read its settings already: token mode is what Ray itself sees, not only the env
    assert _mode_after_use_local_token(with_token) == "token True"
    assert _mode_after_use_local_token(with_token, RAY_AUTH_MODE="disabled") == "disabled False"
    without = tmp_path / "bare"
    without.mkdir()
    assert _mode_after_use_local_token(without) == "None False"
    assert _mode_after_use_local_token(without, RAY_AUTH_TOKEN="x" * 64) == "token True"


def test_the_hint_names_what_this_shell_used(tmp_path):
    home = str(_home(tmp_path, "t" * 64))
    assert auth_hint({"HOME": home}).endswith("is its token the one in ~/.ray/auth_token?")
    disabled = {"HOME": home, "RAY_AUTH_MODE": "disabled"}
    assert auth_hint(disabled) == (
        "if it uses token authentication (Ray's default), RAY_AUTH_MODE=disabled sends none: "
        "unset it"
    )
    bare = {"HOME": str(tmp_path / "nowhere")}
    assert auth_hint(bare).startswith("if it uses token authentication (Ray's default), ")
    assert "no token: put it in ~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH" in (
        auth_hint(bare)
    )
    # where the cluster did refuse: said, not asked
    head = " (the head's token is its ~/.ray/auth_token)"
    refused = auth_hint({"HOME": home}, refused=True)
    assert refused == f"it refused the token in ~/.ray/auth_token{head}"
    assert auth_hint({**bare, "RAY_AUTH_TOKEN": "t"}, refused=True).startswith(
        "it refused the token in RAY_AUTH_TOKEN"
    )
    assert auth_hint(disabled, refused=True) == (
        "it uses token authentication and RAY_AUTH_MODE=disabled sends none: unset it"
    )
    assert auth_hint(bare, refused=True).startswith(
        "it uses token authentication and this shell has no token: put it in "
    )
