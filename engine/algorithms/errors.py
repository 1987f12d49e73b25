"""Errors of the algorithm package. Each also inherits the stdlib type it replaces, so callers may catch
either (`except KeyError` keeps working for lookups)."""

from __future__ import annotations

from engine.errors import SwarmError


class AlgorithmError(SwarmError):
    """Base class of the algorithm package's errors."""


class UnknownName(AlgorithmError, KeyError):
    """A registry key or an agent id that is not known; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


class DuplicateAlgorithm(AlgorithmError, ValueError):
    """A different function was registered under a name that is already taken."""


class SignatureMismatch(AlgorithmError, TypeError):
    """A registered function does not have the one signature of its kind."""
