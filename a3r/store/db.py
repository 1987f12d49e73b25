"""SQLite engine, transactions and schema migrations for the run store.

Every connection gets `journal_mode=WAL` (readers never block the writer), `busy_timeout` (writers queue
instead of failing with "database is locked"), `synchronous=NORMAL` (durable at checkpoints, safe with
WAL) and `foreign_keys=ON`. The pysqlite driver's own transaction handling is switched off so we issue
BEGIN ourselves: `write_tx` uses BEGIN IMMEDIATE, taking the write lock up front, so a read-then-write
transaction cannot deadlock or lose an update against another process; `read_tx` uses a plain BEGIN
(a consistent snapshot). Keep write transactions short: they serialise every writer of the file.

Schema versioning: the `schema_version` table holds one row per applied version. A fresh file is created
from the current models and stamped `SCHEMA_VERSION`; an older file is upgraded by the functions in
`MIGRATIONS` (version -> callable(connection) that brings version-1 to version), each in the same
transaction as its version row. A file newer than the code is refused rather than misread.
Never put the store on NFS: SQLite's locks are not reliable there.
"""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event, inspect, select
from sqlalchemy.pool import QueuePool
from sqlmodel import Session, SQLModel

from a3r.exceptions import SchemaError
from a3r.store import models  # noqa: F401  (registers the tables on SQLModel.metadata)
from a3r.store.models import SchemaVersion

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "make_engine", "migrate", "read_tx", "schema_version", "write_tx"]

SCHEMA_VERSION = 2


def _v2_bench_tables(conn: Connection) -> None:
    """Version 2: the regression-benchmark tables (bench_measurement, bench_schedule)."""
    SQLModel.metadata.create_all(
        conn, tables=[models.BenchMeasurement.__table__, models.BenchSchedule.__table__]
    )


# version -> function upgrading a file at version-1 to version. Append, never edit released entries.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {2: _v2_bench_tables}


def make_engine(path: str | Path, *, busy_timeout_s: float = 30.0, read_only: bool = False) -> Engine:
    """A SQLAlchemy engine on `path` with the pragmas above applied to every new connection.

    `read_only` opens the file with SQLite's `mode=ro`: any write through it fails with "attempt to write
    a readonly database" (what the dashboard uses, so it cannot change the store whatever its code does).
    """
    path = Path(path)
    if read_only:
        # connect through sqlite3 directly: a URI inside a SQLAlchemy URL would be decoded twice, and a
        # '#', '?' or '%' in the path would then open another file
        uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
        engine = create_engine(
            "sqlite://",
            creator=lambda: sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, check_same_thread=False),
            poolclass=QueuePool,  # as for a file URL ("sqlite://" alone would mean one in-memory database)
        )
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            f"sqlite:///{path}", connect_args={"timeout": busy_timeout_s, "check_same_thread": False}
        )
    busy_ms = int(busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # driver autocommit: BEGIN comes from _on_begin below
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("a3r_write") else "BEGIN")

    return engine


@contextmanager
def _tx(engine: Engine, write: bool) -> Iterator[Session]:
    with engine.connect() as conn:
        conn.execution_options(a3r_write=write)
        with Session(bind=conn, expire_on_commit=False) as session, session.begin():
            yield session


def write_tx(engine: Engine) -> AbstractContextManager[Session]:
    """A session in a BEGIN IMMEDIATE transaction, committed on exit (rolled back on error)."""
    return _tx(engine, True)


def read_tx(engine: Engine) -> AbstractContextManager[Session]:
    """A session in a deferred (snapshot) transaction; use for reads only."""
    return _tx(engine, False)


def schema_version(engine: Engine) -> int:
    """The file's applied schema version (0 for an empty file)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("schema_version"):
            return 0
        return (
            conn.execute(select(SchemaVersion.version).order_by(SchemaVersion.version.desc())).scalar() or 0
        )


def migrate(
    engine: Engine,
    *,
    target: int = SCHEMA_VERSION,
    migrations: Mapping[int, Callable[[Connection], None]] | None = None,
) -> int:
    """Bring the file to `target`; returns the version it was at. Idempotent and safe to race."""
    migrations = MIGRATIONS if migrations is None else migrations
    with engine.connect() as conn:
        conn.execution_options(a3r_write=True)
        with conn.begin():  # BEGIN IMMEDIATE: two processes opening a fresh file cannot both create it
            insp = inspect(conn)
            tables = set(insp.get_table_names())
            if "schema_version" not in tables:
                if tables:
                    raise SchemaError(
                        f"store has tables {sorted(tables)} but no schema_version table; it was not written "
                        "by a3r. Point the workspace at a new file."
                    )
                SQLModel.metadata.create_all(conn)
                conn.execute(SchemaVersion.__table__.insert().values(version=target, applied_at=time.time()))
                return 0
            current = conn.execute(
                select(SchemaVersion.version).order_by(SchemaVersion.version.desc())
            ).scalar()
            current = current or 0
            if current > target:
                raise SchemaError(
                    f"store schema is version {current} but this a3r understands up to {target}; upgrade a3r"
                )
            for version in range(current + 1, target + 1):
                if version not in migrations:
                    raise SchemaError(
                        f"no migration to schema version {version}; cannot upgrade from {current}"
                    )
                migrations[version](conn)
                conn.execute(SchemaVersion.__table__.insert().values(version=version, applied_at=time.time()))
            return current
