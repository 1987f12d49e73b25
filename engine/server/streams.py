"""Per-episode sampling streams: the seed of each LLM call, from who asks, never from when.

A call's seed is a hash of (run seed, task id, episode index, call index): the run seed is
`model.seed`, the episode index is the client's number for this episode among its episodes of the same
task (0..N-1 for a GRPO group), and the call index counts the episode's calls. The seed is therefore the
same in every run of the same config and data, whatever order concurrent episodes arrive in, and distinct
for every episode and call (a 63-bit BLAKE2b digest: collisions are negligible). The inference engine
draws each row's noise from its own generator seeded with it, so what a call samples does not depend on
the other requests that share its batch (engine.backends.torch.sampling).
"""

from __future__ import annotations

import hashlib

SEED_BITS = 63  # torch.Generator.manual_seed takes a non-negative int64


def call_seed(run_seed: int, task_id: str, episode_index: int, call_index: int) -> int:
    """The sampling seed of one call of one episode (module docstring)."""
    key = f"{run_seed}\x1f{task_id}\x1f{episode_index}\x1f{call_index}".encode()
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)
