"""The run store on real SQLite files: pragmas, migrations, idempotent creation, fenced lifecycle writes,
database-enforced invariants and several processes writing at once."""

import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from a3r.exceptions import IllegalTransition, LeaseHeld, NotFound, SchemaError
from a3r.states import RunState
from a3r.store import SCHEMA_VERSION, Store, migrate, schema_version
from a3r.store.db import make_engine, write_tx
from a3r.store.models import Attempt

from .conftest import make_bp


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "a3r.db")
    yield s
    s.close()


def _runs(store, seeds=(1, 2)):
    c = store.create_campaign("c")
    st = store.create_stage(c.id, "s0")
    return store.add_blueprint(st.id, make_bp("true", seeds=seeds))


def test_pragmas(store):
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_schema_versioned_and_migrations_apply_in_order(tmp_path):
    path = tmp_path / "m.db"
    Store(path).close()
    eng = make_engine(path)
    assert schema_version(eng) == SCHEMA_VERSION
    applied = []

    def v2(conn):
        applied.append(2)
        conn.exec_driver_sql("ALTER TABLE run ADD COLUMN note2 TEXT DEFAULT ''")

    assert migrate(eng, target=SCHEMA_VERSION + 1, migrations={SCHEMA_VERSION + 1: v2}) == SCHEMA_VERSION
    assert applied == [2] and schema_version(eng) == SCHEMA_VERSION + 1
    migrate(eng, target=SCHEMA_VERSION + 1, migrations={SCHEMA_VERSION + 1: v2})
    assert applied == [2], "migrations are applied once"
    with pytest.raises(SchemaError, match="upgrade a3r"):
        migrate(eng, target=SCHEMA_VERSION)
    with pytest.raises(SchemaError, match="no migration"):
        migrate(eng, target=SCHEMA_VERSION + 2, migrations={})


def test_foreign_file_refused(tmp_path):
    con = sqlite3.connect(tmp_path / "x.db")
    con.execute("create table stuff(a)")
    con.commit()
    with pytest.raises(SchemaError, match="not written by a3r"):
        Store(tmp_path / "x.db")
    with pytest.raises(SchemaError, match="no store"):
        Store(tmp_path / "missing.db", create=False)


def test_creation_is_idempotent_and_expands_seeds(store):
    runs = _runs(store, seeds=(3, 1, 2))
    assert [r.seed for r in runs] == [3, 1, 2] and all(r.state == RunState.PENDING for r in runs)
    assert _runs(store, seeds=(3, 1, 2)) == runs
    assert len(store.runs()) == 3 and len(store.campaigns()) == 1
    assert store.blueprint_of(runs[0]).seeds == [3, 1, 2]
    with pytest.raises(NotFound):
        store.get_run(999)


def test_lifecycle_is_fenced(store):
    r1, r2 = _runs(store)
    a = store.dispatch(r1.id, host="h", slot="0", run_dir="/x", config_json="{}")
    assert a.number == 1 and a.session == f"a3r-r{r1.id}-a1"
    assert store.dispatch(r1.id, host="h", slot="1", run_dir="/x", config_json="{}") is None, (
        "run already dispatched"
    )
    assert store.dispatch(r2.id, host="h", slot="0", run_dir="/y", config_json="{}") is None, "slot busy"
    assert store.mark_running(a.id, worker_pid=123) and not store.mark_running(a.id)
    assert store.heartbeat(a.id, job_pgid=77)
    assert store.finish_attempt(a.id, "stale", failure_kind="infrastructure", reason="lost")
    assert not store.heartbeat(a.id), "a stale attempt's worker is told to stop"
    assert not store.finish_attempt(a.id, "succeeded"), "a late result does not overwrite"
    assert store.get_attempt(a.id).job_pgid == 77
    assert [r.id for r, _ in store.unsettled()] == [r1.id]
    assert store.settle_run(
        r1.id, a.id, "pending", not_before=0, overrides={"training": {"lr": 1}}, next_fix="retry"
    )
    assert not store.settle_run(r1.id, a.id, "failed"), "settled once"
    b = store.dispatch(r1.id, host="h", slot="0", run_dir="/x", config_json="{}")
    assert (b.number, b.retry_of, b.fix) == (2, a.id, "retry")
    assert [x.number for x in store.attempts(r1.id)] == [1, 2]
    assert '"lr":1' in store.get_run(r1.id).overrides


def test_illegal_transitions_raise(store):
    r1, _ = _runs(store)
    with pytest.raises(IllegalTransition):
        store.retry_run(r1.id)  # pending -> pending
    a = store.dispatch(r1.id, host="h", slot="0", run_dir="/x", config_json="{}")
    assert not store.settle_run(r1.id, a.id, "succeeded"), "an active attempt cannot be settled"
    store.finish_attempt(a.id, "failed", failure_kind="infrastructure", reason="launch failed")
    with pytest.raises(IllegalTransition, match="dispatched -> succeeded"):
        store.settle_run(r1.id, a.id, "succeeded")


def test_database_enforces_one_active_attempt_per_run_and_slot(store):
    r1, r2 = _runs(store)
    store.dispatch(r1.id, host="h", slot="0", run_dir="/x", config_json="{}")
    with pytest.raises(IntegrityError), write_tx(store.engine) as s:
        s.add(
            Attempt(
                run_id=r1.id, number=9, host="h", slot="1", session="x", attempt_dir="/x", dispatched_at=0
            )
        )
    with pytest.raises(IntegrityError), write_tx(store.engine) as s:
        s.add(
            Attempt(
                run_id=r2.id, number=1, host="h", slot="0", session="y", attempt_dir="/y", dispatched_at=0
            )
        )


def test_metrics_ingest_is_idempotent_and_series_merge_attempts(store):
    r1, _ = _runs(store)
    a = store.dispatch(r1.id, host="h", slot="0", run_dir="/x", config_json="{}")
    pts = [(0, "reward", 0.1), (1, "reward", 0.2), (2, "reward", float("nan"))]
    assert store.ingest_metrics(a.id, pts, expected_offset=0, new_offset=50, corrupt=2)
    assert not store.ingest_metrics(a.id, pts, expected_offset=0, new_offset=50), (
        "compare-and-set on the offset"
    )
    assert store.ingest_metrics(a.id, pts, expected_offset=50, new_offset=60), "replayed points are ignored"
    store.finish_attempt(a.id, "stale", failure_kind="infrastructure")
    store.settle_run(r1.id, a.id, "pending")
    b = store.dispatch(r1.id, host="h", slot="0", run_dir="/x", config_json="{}")
    store.ingest_metrics(b.id, [(2, "reward", 0.3), (3, "reward", 0.4)], expected_offset=0, new_offset=10)
    assert store.metric_series(r1.id, "reward") == [(0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4)], (
        "the retry wins step 2"
    )
    assert store.final_metrics(r1.id) == {"reward": 0.4}
    assert store.latest_steps() == {r1.id: 3}
    assert store.get_attempt(a.id).metrics_corrupt == 2
    assert [e.kind for e in store.events(run_id=r1.id, kinds=["metrics_corrupt"])] == ["metrics_corrupt"]


def test_a_later_value_of_a_step_supersedes_the_earlier_one(store):
    """A job writes a step's metric again only to supersede it: an evaluation a server crash cut short
    (27 of 64 items) is re-measured after the restart, and the complete value must be the one kept."""
    r1, _ = _runs(store)
    a = store.dispatch(r1.id, host="h", slot="0", run_dir="/x", config_json="{}")
    assert store.ingest_metrics(a.id, [(12, "eval_accuracy", 0.11)], expected_offset=0, new_offset=40)
    assert store.ingest_metrics(a.id, [(12, "eval_accuracy", 0.42), (12, "eval_items", 64.0)], expected_offset=40, new_offset=90)
    assert store.metric_series(r1.id, "eval_accuracy") == [(12, 0.42)]


def test_cancel_and_explicit_retry(store):
    r1, r2 = _runs(store)
    a = store.dispatch(r1.id, host="h", slot="0", run_dir="/x", config_json="{}")
    killed = store.cancel_runs([r1.id, r2.id])
    assert [k.id for k in killed] == [a.id]
    assert {r.state for r in store.runs()} == {"cancelled"}
    assert store.get_attempt(a.id).state == "cancelled"
    with pytest.raises(IllegalTransition):
        store.retry_run(r1.id)


def test_dispatch_order_priority_then_fifo(store):
    c = store.create_campaign("c")
    st = store.create_stage(c.id, "s")
    low = store.add_blueprint(st.id, make_bp("true", seeds=(1, 2)))
    high = store.add_blueprint(st.id, make_bp("true", seeds=(3,), task="hi"), priority=5)
    assert [r.id for r in store.dispatchable_runs(now=1e12, limit=10)] == [high[0].id, low[0].id, low[1].id]


def test_lease(store):
    store.acquire_lease(ttl_s=5, pid=1)  # pid 1 exists on this machine: a live holder
    with pytest.raises(LeaseHeld, match="holds this store"):
        store.acquire_lease(ttl_s=5)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.acquire_lease(ttl_s=5, pid=dead.pid, now=time.time() + 60)  # expired holder: taken over
    store.acquire_lease(ttl_s=5)  # dead holder: taken over at once
    assert store.renew_lease() and not store.renew_lease(pid=dead.pid)
    store.release_lease()
    assert store.lease() is None


def test_many_processes_write_concurrently(tmp_path):
    path = tmp_path / "c.db"
    store = Store(path)
    c = store.create_campaign("c")
    st = store.create_stage(c.id, "s")
    runs = store.add_blueprint(st.id, make_bp("true", seeds=range(3)))
    atts = [
        store.dispatch(r.id, host="h", slot=str(i), run_dir="/x", config_json="{}")
        for i, r in enumerate(runs)
    ]
    code = textwrap.dedent(
        """
        import sys
        from a3r.store import Store
        s = Store(sys.argv[1], create=False, busy_timeout_s=30)
        aid = int(sys.argv[2])
        s.mark_running(aid)
        off = 0
        for i in range(40):
            assert s.heartbeat(aid)
            assert s.ingest_metrics(aid, [(i, "reward", i * 1.0), (i, "loss", 1.0)], expected_offset=off, new_offset=off + 1)
            off += 1
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path), str(a.id)], stderr=subprocess.PIPE)
        for a in atts
    ]
    # the controller keeps writing at the same time
    for _ in range(30):
        store.record_event("tick", "controller write")
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
    with store.engine.connect() as conn:
        assert conn.execute(text("select count(*) from metric_point")).scalar() == 3 * 40 * 2
    assert all(store.get_attempt(a.id).heartbeat_seq == 40 for a in atts)
    store.close()


def test_backup(store, tmp_path):
    _runs(store)
    store.backup(tmp_path / "copy.db")
    copy = Store(tmp_path / "copy.db")
    assert len(copy.runs()) == 2
    copy.close()
