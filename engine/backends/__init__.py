"""Backends behind one interface: `torch` (embedded default) and `verl` (clusters, lazy import)."""
