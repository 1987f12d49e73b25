"""The vibe exception hierarchy; each class also inherits the stdlib type it stands in for."""


class VibeError(Exception):
    """Base class of every vibe error; the message says what to do."""


class LayoutError(VibeError, ValueError):
    """A client folder does not follow the layout contract (vibe.layout)."""


class NoEndpointError(VibeError, RuntimeError):
    """An LLM endpoint is needed for this request and none is configured."""


class CheckFailed(VibeError, RuntimeError):
    """`vibe train` refuses a client whose check did not pass."""
