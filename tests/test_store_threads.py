"""The trace store's one connection, shared by the threads of the questions in flight.

sqlite-utils runs every ``Database.query`` inside a savepoint named ``sqlite_utils_query``. A writer's
commit on the same connection released a reader's savepoint, and the reader's RELEASE then failed with
"no such savepoint: sqlite_utils_query": a bench with 8 questions in flight stopped on it. The store's
``query`` and ``execute`` now hold its lock.
"""
from __future__ import annotations

import itertools
import threading

from agora.traces.store import TraceStore


def test_reads_and_writes_from_many_threads_on_one_store_do_not_break_each_other(tmp_path):
    store = TraceStore(tmp_path / "t.db")
    ids = itertools.count()
    errors: list[str] = []
    rounds = 1500

    def read() -> None:
        try:
            for _ in range(rounds):
                assert list(store.db.query("select count(*) as n from runs"))[0]["n"] >= 0
                store.db.execute("select count(*) from questions").fetchone()
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(repr(exc))

    def write() -> None:  # as the store's own writes: its lock, one transaction
        try:
            for _ in range(rounds):
                with store._lock, store.db.conn:
                    store.db.conn.execute("insert into runs (run_id, protocol) values (?, 'align')", [f"r{next(ids)}"])
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=f) for f in (read, write) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.db["runs"].count == 4 * rounds


def test_the_store_database_is_still_a_sqlite_utils_database(tmp_path):
    import sqlite_utils

    store = TraceStore(tmp_path / "t.db")
    assert isinstance(store.db, sqlite_utils.Database)
    assert store.db.lock is store._lock
    assert list(store.db.query("select 1 as one")) == [{"one": 1}]
    readonly = TraceStore(tmp_path / "t.db", readonly=True)
    assert readonly.db.lock is readonly._lock and readonly.db["runs"].count == 0
