"""Client side of a collaboration group's sample exchange (specs/hacpo.md step 4; server side in
engine.training.exchange): every agent's own samples of the step go to every other agent.

Safe to repeat: exporting reads the pool, and a learner skips samples it already holds. So a server that
dies mid-exchange is simply retried until it is back (it replays its journal, imported samples included)
and the exchange completes with nothing lost and nothing twice.
"""

from __future__ import annotations

import time
from typing import Any

from engine.client.client import SwarmClient, until_available


def exchange_samples(clients: dict[str, SwarmClient], timeout_s: float = 300.0) -> dict[str, dict[str, Any]]:
    """Give every agent the others' samples; returns agent -> {exported, imported, duplicates, ...}."""
    deadline = time.monotonic() + timeout_s
    exported = {name: until_available(c.export_samples, deadline) for name, c in clients.items()}
    report: dict[str, dict[str, Any]] = {}
    for name, c in clients.items():
        peers = [s for other, samples in exported.items() if other != name for s in samples]
        counts = until_available(lambda c=c, peers=peers: c.import_samples(peers), deadline)
        report[name] = {"exported": len(exported[name]), **counts}
    return report
