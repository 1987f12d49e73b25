"""The worker that executes one attempt inside its tmux pane (`a3r.worker.runner`), and the pieces it
shares with the monitor: attempt spec and files, metric parsing, failure classification.

Deliberately imports nothing: the remote probe imports `a3r.worker.metrics` on every monitor tick."""
