"""Ray's token authentication, as it meets mixscope's own embedded Ray.

Ray (2.5x on) starts a new local instance in token mode unless ``RAY_AUTH_MODE`` says
otherwise, and logs a notice that it did. For the embedded instance of ``mixscope run``
that notice is the first line of every run, before any of mixscope's own, about a cluster
the user never started nor addresses. ``quiet_default_token_notice`` drops that one record
while the embedded instance starts; every other line of Ray's stays, and so does the same
notice from a ``ray start`` the user runs. No Ray import here: the CLI loads this module.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

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
