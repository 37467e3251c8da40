"""User-facing errors: one clear line, no traceback in the CLI (unless --debug)."""


class MixscopeError(Exception):
    """Bad input or configuration that the user can fix; the message is the whole story."""


class UnsupportedArchitectureError(MixscopeError):
    """The model's family has no adapter."""


class ExactnessError(MixscopeError):
    """The decomposition does not rebuild the model's real output (docs/method.md §2)."""
