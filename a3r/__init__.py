"""A3R: autonomous research. This package is the execution plane (store, blueprints, hosts, tmux
workers, scheduler, recovery, CLI); `a3r.leader` plans campaigns on top of `a3r.api.Workspace`."""

from a3r.states import AttemptState, FailureKind, RunState

__all__ = ["AttemptState", "FailureKind", "RunState"]
