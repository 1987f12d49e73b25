"""Regression benchmarks across commits (`a3r bench`): a suite of small training jobs run per commit through
the A3R execution plane, stored per (commit, benchmark, seed, host, versions), compared with noise-aware
tests, tracked for change points, scheduled and reported. See docs/a3r-bench.md.

Deliberately imports nothing: `a3r.cli` registers the `bench` commands on every start, including the
worker's, which must start fast.
"""
