"""User-facing errors: one clear line, no traceback in the CLI (unless --debug)."""


class MixscopeError(Exception):
    """Bad input or configuration that the user can fix; the message is the whole story.
    ``exit_code`` is what the CLI exits with (README: exit codes)."""

    exit_code = 1


class SpecError(MixscopeError):
    """A job spec or flag that is not valid: unknown key, wrong type, bad value. Exit 2,
    like a usage error."""

    exit_code = 2


class SqlError(MixscopeError):
    """A DuckDB error as one line (``sql/readonly.py``); ``cause`` the error itself, so a
    caller can tell a read failure of a damaged file (``store/unreadable.py``) from a
    mistake in the query."""

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause


class CorruptRecordError(MixscopeError):
    """A record (commit, run, plan, consolidation) that no longer parses."""


class UnsupportedArchitectureError(MixscopeError):
    """The model's family has no adapter."""


class ExactnessError(MixscopeError):
    """The decomposition does not rebuild the model's real output (docs/method.md §2)."""


def first_line(text: object) -> str:
    """The first non-empty line of ``text`` (a message, an exception, a record's error
    field; ``None`` is empty): what a status line or a record keeps of a long error."""
    for line in str(text if text is not None else "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``: an exception as one line of a status, a
    failure record or the CLI; the type alone when the message is empty."""
    first = first_line(exc)
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
