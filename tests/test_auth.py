"""Ray's token authentication as mixscope meets it (runtime/auth.py); against a real
cluster: tests/test_attach.py and tests/test_pipeline.py."""

from __future__ import annotations

import logging

import pytest

from mixscope.runtime.auth import NOTICE_LOGGER, quiet_default_token_notice


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
    yield setup, records.messages
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
