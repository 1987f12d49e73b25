"""The engine's exception hierarchy. Domain code raises these; only the HTTP layer maps them to status codes."""


class SwarmError(Exception):
    """Base class of every engine error."""


class ConfigError(SwarmError, ValueError):
    """A configuration value is invalid or inconsistent; the message says how to fix it."""


class IllegalTransition(SwarmError, RuntimeError):
    """A state machine was asked for a transition its table does not allow."""


class AuthenticationFailed(SwarmError):
    """A request's credentials are missing, unknown or forged (HTTP 401).

    Deliberately not a `PermissionError`: an OS permission error raised while serving a request is a
    server fault and must never be reported to the client as bad credentials.
    """


class EpisodeNotFound(SwarmError, KeyError):
    """The key belongs to an episode this server issued that is no longer live (ended, aborted or expired)."""


class EpisodeRejected(SwarmError, RuntimeError):
    """The server cannot take a new episode now (not rolling, or the client is throttled)."""

    def __init__(self, reason: str, retry_after: float = 1.0):
        super().__init__(reason)
        self.retry_after = retry_after


class BadRequest(SwarmError, ValueError):
    """A request is malformed in a way the client can fix."""


class JournalCorrupt(SwarmError):
    """The pool journal cannot be replayed (a damaged line before its end, or an unknown record)."""


class ServerExited(SwarmError, RuntimeError):
    """A server subprocess exited before it answered /health (`code`: its exit status, negative for a signal)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class ServerLost(SwarmError, RuntimeError):
    """A job's own server kept dying: it was restarted as often as the job allows and died again."""


class EvaluationIncomplete(SwarmError, RuntimeError):
    """An evaluation did not score every held-out item; its partial accuracy is not recorded."""


class ModelLoadError(SwarmError, RuntimeError):
    """A model could not be found or loaded."""


class GroupConflict(SwarmError, RuntimeError):
    """An episode group's two-phase commit was asked for a step its state forbids (commit after abort...)."""


class GroupNotFound(SwarmError, KeyError):
    """No episode of this group was prepared on this server."""


class GroupInDoubt(SwarmError, RuntimeError):
    """Every server prepared a group but some did not confirm the commit in time.

    The prepared episodes are durable on those servers; committing the group again (same id) finishes it.
    """

    def __init__(self, group_id: str, pending: list[str], reason: str):
        super().__init__(
            f"group {group_id!r} is prepared everywhere but not yet committed on {', '.join(pending)} "
            f"({reason}); retry EpisodeGroup.finish() or POST /swarm/groups/{group_id}/commit there"
        )
        self.group_id = group_id
        self.pending = pending
