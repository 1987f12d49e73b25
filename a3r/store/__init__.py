"""The run store: SQLModel tables on one SQLite file (WAL), migrations and fenced state changes."""

from a3r.store.attempts import session_name
from a3r.store.db import SCHEMA_VERSION, migrate, schema_version
from a3r.store.models import (
    Attempt,
    BenchResult,
    BlueprintRecord,
    Campaign,
    Event,
    Host,
    MetricPoint,
    MonitorLease,
    Run,
    Stage,
)
from a3r.store.store import Store

__all__ = [
    "SCHEMA_VERSION",
    "Attempt",
    "BenchResult",
    "BlueprintRecord",
    "Campaign",
    "Event",
    "Host",
    "MetricPoint",
    "MonitorLease",
    "Run",
    "Stage",
    "Store",
    "migrate",
    "schema_version",
    "session_name",
]
