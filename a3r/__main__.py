"""`python -m a3r ...` is the `a3r` CLI (the worker and the monitor are started this way)."""

from a3r.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
