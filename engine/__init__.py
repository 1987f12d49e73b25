"""The swarm training engine: one trainable model per server, agents anywhere, token-level tracking."""

import os

# Before torch loads OpenMP: spinning worker threads collapse throughput 5-10x when the cores are shared
# with the server's HTTP threads or other processes (measured, docs/benchmarks/generation.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
