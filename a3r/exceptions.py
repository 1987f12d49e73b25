"""A3R's exception hierarchy.

Every class inherits `A3RError` plus the stdlib type it stands in for, so callers can catch either the
precise A3R error or the familiar builtin (`except KeyError` still catches `RunNotFound`).
"""

from __future__ import annotations

__all__ = [
    "A3RError",
    "BenchError",
    "BlueprintError",
    "ConfigError",
    "HostError",
    "HostUnreachable",
    "IllegalTransition",
    "LeaseHeld",
    "NotFound",
    "SchemaError",
]


class A3RError(Exception):
    """Base class of every A3R error."""


class ConfigError(A3RError, ValueError):
    """A workspace, inventory or scheduler setting is invalid; the message says what to change."""


class BlueprintError(A3RError, ValueError):
    """A blueprint failed validation or could not be read or rendered."""


class IllegalTransition(A3RError, RuntimeError):
    """A run or attempt was asked for a state change its transition table does not allow."""


class NotFound(A3RError, KeyError):
    """No campaign, stage, run or attempt has this id."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly
        return str(self.args[0]) if self.args else "not found"


class SchemaError(A3RError, RuntimeError):
    """The store file's schema is newer than this code, or a migration failed."""


class LeaseHeld(A3RError, RuntimeError):
    """Another live monitor already holds this workspace's scheduler lease."""


class HostError(A3RError, RuntimeError):
    """A host command failed (tmux refused, a remote command exited non-zero)."""


class HostUnreachable(HostError, ConnectionError):
    """A host could not be reached at all (ssh connection refused or timed out)."""


class BenchError(A3RError, RuntimeError):
    """A regression-benchmark step failed outside a run: git, a checkout or an environment."""
