"""SQLite trace store on sqlite-utils (schema: :mod:`agora.traces.schema`)."""

from __future__ import annotations

import contextlib
import json
import platform
import sqlite3
import subprocess
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import sqlite_utils

from agora.traces import schema


#: Seconds a write waits for a lock held by another connection or process (SQLite's busy
#: timeout) before it fails with "database is locked".
BUSY_TIMEOUT_S = 30.0

#: ``pool`` fields that say how a model is reached, not which model answers: a resumed run may
#: change them (a server restarted on another port), unlike any other field of the pool.
TRANSPORT_FIELDS = ("base_url", "endpoints", "timeout_s", "max_retries", "api_key")


class TraceStoreError(ValueError):
    """A trace database (or its checkpoints file) that cannot be opened or written; the message is
    one line naming the file and what is wrong."""


def describe_sqlite_error(path: str | Path, exc: BaseException) -> str:
    """One line for an SQLite (or file-system) error on the database ``path``."""
    msg = str(exc)
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return (f"{path}: the database is locked by another process (waited {BUSY_TIMEOUT_S:g} s); "
                "try again once it is done")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return f"{path}: not an SQLite database, or a corrupt one ({msg})"
    if "readonly" in low or "read-only" in low or isinstance(exc, PermissionError):
        return f"{path}: not writable ({msg})"
    if "unable to open" in low:
        return f"{path}: cannot open the database file (does its folder exist, and is it writable?)"
    return f"{path}: {msg}"


def check_db_path(path: str | Path) -> None:
    """Refuse a database path that is a folder or not a regular file (``/dev/null``) before SQLite
    opens it.

    Raises:
        TraceStoreError: naming the path.
    """
    p = Path(path)
    if p.is_dir():
        raise TraceStoreError(f"{path}: is a folder, not a database file")
    if p.exists() and not p.is_file():
        raise TraceStoreError(f"{path}: not a regular file (a database needs one)")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def code_revision() -> str:
    """The git commit of the installed source tree, else the package version."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5, check=False)
        if out.returncode == 0 and out.stdout.strip():
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                   capture_output=True, text=True, timeout=5, check=False).stdout.strip()
            return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "agora-llm " + version("agora-llm")
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"


class TraceStore:
    """The trace database. Thread-safe for writers in one process (one lock around writes).

    Args:
        path: SQLite file (created with its tables if missing). ``":memory:"`` for tests.
        readonly: open an existing file for reading only: nothing is created or written, not
            even the schema (reports).

    Raises:
        TraceStoreError: the path is a folder or not a regular file, not an SQLite database (or a
            corrupt one), cannot be created or written, stays locked by another process for
            :data:`BUSY_TIMEOUT_S`, or (``readonly``) does not exist.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = str(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        if self.path == ":memory:":
            self.db = sqlite_utils.Database(memory=True)
            self._create()
            return
        check_db_path(self.path)
        try:
            self.db = self._open()
        except (sqlite3.Error, OSError) as exc:
            raise TraceStoreError(describe_sqlite_error(self.path, exc)) from None

    def _open(self) -> sqlite_utils.Database:
        if self.readonly:
            if not Path(self.path).is_file():
                raise TraceStoreError(f"{self.path}: no such trace database")
            conn = sqlite3.connect(f"{Path(self.path).resolve().as_uri()}?mode=ro", uri=True,
                                   timeout=BUSY_TIMEOUT_S, check_same_thread=False)
            conn.execute("select count(*) from sqlite_master").fetchone()  # not a database: fails here
            return sqlite_utils.Database(conn)
        parent = Path(self.path).parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceStoreError(f"{self.path}: cannot create its folder {parent} ({exc.strerror})") from None
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        db = sqlite_utils.Database(conn)
        # WAL without an fsync per commit, as the runner's checkpointer (runner.open_checkpointer):
        # ≈ 0.5 ms less per recorded question here. A crashed process loses nothing; a crashed
        # OS at most the last questions, which the rerun redoes (their checkpoints or a fresh run).
        db.enable_wal()
        db.execute("PRAGMA synchronous=NORMAL")
        self.db = db
        self._create()
        return db

    def _create(self) -> None:
        db = self.db
        db["runs"].create(schema.RUNS, pk="run_id", if_not_exists=True)
        db["questions"].create(schema.QUESTIONS, pk=("run_id", "question_id"), if_not_exists=True)
        db["results"].create(schema.RESULTS, pk=("run_id", "question_id", "method"), if_not_exists=True)
        db["model_calls"].create(schema.MODEL_CALLS, pk="call_id", if_not_exists=True)
        if "partner" not in db["model_calls"].columns_dict:  # databases written before the column existed
            db["model_calls"].add_column("partner", str)
        if "how" not in db["results"].columns_dict:  # nor before results.how (issue 15)
            db["results"].add_column("how", str)
        if "calls" not in db["results"].columns_dict:  # nor before results.calls (issue 17)
            db["results"].add_column("calls", int)
        db["model_calls"].create_index(["run_id", "question_id"], if_not_exists=True)
        db["results"].create_index(["run_id", "method"], if_not_exists=True)

    # ------------------------------------------------------------------ runs

    def start_run(self, run_id: str, protocol: str, *, config: Any, pool: Any, dataset: Any,
                  pool_may_change: bool = False) -> bool:
        """Create the run, or mark an existing one running again. Returns True when resuming.

        ``pool_may_change``: a run whose members change between resumes by design (``agora
        evolve``'s duel run: each iteration's members carry newly trained adapters) stores the new
        pool instead of refusing it.

        Raises:
            ValueError: the run id exists for another protocol, or with other settings, another
                pool (its models and their settings; how they are reached, :data:`TRANSPORT_FIELDS`,
                may change) or another dataset (path and format): resuming would mix two
                experiments in one run.
        """
        with self._lock, self.db.conn:
            existing = self.get_run(run_id)
            if existing is not None:
                if existing["protocol"] != protocol:
                    raise ValueError(f"run id {run_id!r} already holds a {existing['protocol']} run in {self.path}")
                before = json.loads(existing["dataset"] or "null") or {}
                now_ds = json.loads(_json(dataset)) or {}
                changed = [k for k in ("path", "format") if isinstance(before, dict) and isinstance(now_ds, dict)
                           and before.get(k) != now_ds.get(k)]
                if existing["config"] != _json(config):
                    changed.append("settings")
                if (not pool_may_change
                        and _models(json.loads(existing["pool"] or "null")) != _models(json.loads(_json(pool)))):
                    changed.append("pool")
                if changed:
                    raise ValueError(f"run id {run_id!r} in {self.path} was started with other {', '.join(changed)}; "
                                     "rerun with the same options to resume it, or pick a new --run-id")
                update = {"status": "running", "finished_at": None}
                if pool_may_change:
                    update["pool"] = _json(pool)
                self.db["runs"].update(run_id, update)
                return True
            self.db["runs"].insert({
                "run_id": run_id, "protocol": protocol, "status": "running", "started_at": now(),
                "finished_at": None, "config": _json(config), "pool": _json(pool), "dataset": _json(dataset),
                "code_revision": code_revision(), "host": platform.node(), "summary": None,
            })
            return False

    def finish_run(self, run_id: str, summary: Any = None, status: str = "finished") -> None:
        """Mark the run ``status`` (``finished``, ``failed``, ``interrupted``) with its summary."""
        with self._lock, self.db.conn:
            self.db["runs"].update(run_id, {"status": status, "finished_at": now(), "summary": _json(summary)})

    def get_run(self, run_id: str) -> dict | None:
        rows = list(self.db["runs"].rows_where("run_id = ?", [run_id]))
        return rows[0] if rows else None

    # ------------------------------------------------------------------ questions

    def run_ids(self, prefix: str = "") -> list[str]:
        """The ids of the runs in this DB that start with ``prefix`` (all by default), oldest first."""
        if not self._has("runs"):
            return []
        return [r["run_id"] for r in self.db.query("select run_id from runs order by rowid")
                if r["run_id"].startswith(prefix)]

    def question_times(self, run_ids: Sequence[str]) -> dict[str, tuple[int, float]]:
        """Run id → (questions recorded, their mean wall seconds), for the runs that have any."""
        if not run_ids or not self._has("questions"):
            return {}
        marks = ",".join("?" * len(run_ids))
        rows = self.db.query(f"select run_id, count(*) as n, avg(wall_s) as wall from questions "
                             f"where run_id in ({marks}) group by run_id", list(run_ids))
        return {r["run_id"]: (r["n"], float(r["wall"] or 0.0)) for r in rows}

    def finished_questions(self, run_id: str) -> set[str]:
        """Ids of questions already recorded for ``run_id`` (a rerun skips them; failed questions
        are not recorded, so a rerun retries them)."""
        return {r["question_id"] for r in self.db.query(
            "select question_id from questions where run_id = ?", [run_id])}

    def record_question(
        self,
        run_id: str,
        protocol: str,
        question: dict[str, Any],
        results: dict[str, dict[str, Any]],
        calls: Iterable[dict[str, Any]],
    ) -> None:
        """Write one finished question, its per-method results and its model calls, atomically.

        Upserts on primary keys, so writing the same question twice leaves one copy. A method
        whose answer drew on no sample (``samples == 0``: its model calls failed) is stored with
        ``correct`` NULL: failed, not wrong (:func:`agora.traces.report.method_table` counts it
        as failed).
        """
        qid = question["question_id"]
        rows = call_rows(calls, run_id, qid, protocol)
        ok = [c for c in rows if not c["error"]]
        row = {
            "run_id": run_id, "question_id": qid, "idx": question.get("idx"), "source": question.get("source"),
            "kind": question.get("kind"), "question": question.get("question"), "gold": question.get("gold"),
            "answer": question.get("answer"), "correct": _bool(question.get("correct")),
            "wall_s": question.get("wall_s"), "model_calls": len(ok),
            "prompt_tokens": sum(c["prompt_tokens"] or 0 for c in ok),
            "completion_tokens": sum(c["completion_tokens"] or 0 for c in ok),
            "detail": _json(question.get("detail")), "finished_at": now(),
        }
        result_rows = [{"run_id": run_id, "question_id": qid, "method": method, "answer": r.get("answer"),
                        "correct": None if r.get("samples") == 0 else _bool(r.get("correct")),
                        "samples": r.get("samples"),
                        "completion_tokens": r.get("completion_tokens"),
                        "latency_s": r.get("latency_s"), "how": r.get("how"), "calls": r.get("calls")}
                       for method, r in results.items()]
        with self._lock, self.db.conn:
            # One statement per table, not sqlite-utils' two per row (33 → 3 statements for an
            # ALIGN question: ≈ 2.2 → 0.7 ms, the runner's per-question cost; orchestration.py).
            _upsert(self.db.conn, "model_calls", rows, ("call_id",))
            _upsert(self.db.conn, "results", result_rows, ("run_id", "question_id", "method"))
            _upsert(self.db.conn, "questions", [row], ("run_id", "question_id"))

    def record_calls(self, run_id: str, protocol: str, question_id: str, calls: Iterable[dict[str, Any]]) -> None:
        """Write model-call records without a question row: the attempts of a question that failed
        (no answer recorded, retried by a rerun) or was aborted by an unreachable model."""
        rows = call_rows(calls, run_id, question_id, protocol)
        with self._lock, self.db.conn:
            _upsert(self.db.conn, "model_calls", rows, ("call_id",))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """Hold the write lock and one SQLite transaction (committed on exit, rolled back on error);
        for protocol tables written together with their model calls (:func:`call_row`)."""
        with self._lock, self.db.conn:
            yield self.db

    def results(self, run_id: str) -> list[dict]:
        return list(self.db.query(
            "select r.*, q.idx from results r join questions q using (run_id, question_id) "
            "where r.run_id = ? order by q.idx, r.method", [run_id]))

    def questions(self, run_id: str) -> list[dict]:
        return list(self.db["questions"].rows_where("run_id = ?", [run_id], order_by="idx"))

    def calls(self, run_id: str, question_id: str | None = None) -> list[dict]:
        if question_id is None:
            return list(self.db["model_calls"].rows_where("run_id = ?", [run_id]))
        return list(self.db["model_calls"].rows_where("run_id = ? and question_id = ?", [run_id, question_id]))

    # ------------------------------------------------------------------ readers for training and reports

    @classmethod
    def reading(cls, db: str | Path | TraceStore | sqlite_utils.Database) -> TraceStore:
        """A store to read ``db``: a store as is, an open ``sqlite_utils.Database`` wrapped (nothing
        created or migrated in it), a path opened ``readonly``.

        Raises:
            FileNotFoundError: a path that is not a file.
            TraceStoreError: as :class:`TraceStore` with ``readonly=True``.
        """
        if isinstance(db, TraceStore):
            return db
        if isinstance(db, sqlite_utils.Database):
            store = cls.__new__(cls)
            store.path, store.readonly, store._lock, store.db = "<database>", True, threading.RLock(), db
            return store
        if not Path(db).is_file():
            raise FileNotFoundError(f"{db}: trace database not found")
        return cls(db, readonly=True)

    def _has(self, table: str) -> bool:
        return table in self.db.table_names()

    def protocol_questions(self, protocol: str, run_ids: Sequence[str] = ()) -> list[dict]:
        """Recorded questions of the runs of ``protocol`` (of ``run_ids`` when given), by run and index;
        ``[]`` when the DB has no questions."""
        if not self._has("questions") or not self._has("runs"):
            return []
        where, params = "r.protocol = ?", [protocol]
        if run_ids:
            where += f" and q.run_id in ({', '.join('?' for _ in run_ids)})"
            params += list(run_ids)
        return list(self.db.query(
            f"select q.* from questions q join runs r using (run_id) where {where} order by q.run_id, q.idx", params))

    def first_call_messages(self, run_id: str, question_id: str, node: str, agent: int | None = None) -> list | None:
        """The prompt (messages, decoded) of the first successful call ``node`` made for a question
        (by ``agent`` when given), or ``None``."""
        if not self._has("model_calls"):
            return None
        where, params = "run_id = ? and question_id = ? and node = ? and error is null", [run_id, question_id, node]
        if agent is not None:
            where += " and agent = ?"
            params.append(agent)
        rows = list(self.db.query(f"select messages from model_calls where {where} limit 1", params))
        if not rows or rows[0]["messages"] in (None, ""):
            return None
        value = rows[0]["messages"]
        return json.loads(value) if isinstance(value, str) else value

    def preference_pairs(self) -> list[dict]:
        """Every ``preference_pairs`` row (JSON columns as stored), by run, iteration, time and id;
        ``[]`` without the table (a DB without duels)."""
        if not self._has("preference_pairs"):
            return []
        return list(self.db.query("select * from preference_pairs order by run_id, iteration, created_at, pair_id"))

    def duel_rows(self, run_ids: Sequence[str] = (), iterations: Sequence[int] = ()) -> list[dict]:
        """``duels`` rows (ties included) of ``run_ids`` / ``iterations`` (all when empty), in play order;
        ``[]`` without the table."""
        if not self._has("duels"):
            return []
        where, params = ["1 = 1"], []
        if run_ids:
            where.append(f"run_id in ({', '.join('?' for _ in run_ids)})")
            params += list(run_ids)
        if iterations:
            where.append(f"iteration in ({', '.join('?' for _ in iterations)})")
            params += list(iterations)
        return list(self.db.query(f"select * from duels where {' and '.join(where)} order by run_id, duel_number", params))

    def close(self) -> None:
        self.db.close()


def call_rows(calls: Iterable[dict[str, Any]], run_id: str, question_id: str, protocol: str) -> list[dict[str, Any]]:
    """The ``model_calls`` rows of trace records (:meth:`ModelPool.sample` records), with the
    messages of records that share their request's prompt (``messages_of``) filled back in."""
    calls = list(calls)
    encoded: dict[str, str] = {}
    for c in calls:
        if c.get("messages") is not None:
            encoded[c["call_id"]] = _json(c["messages"])
    return [call_row(c, run_id, question_id, protocol,
                     messages=encoded.get(c["call_id"]) or encoded.get(c.get("messages_of"))) for c in calls]


def call_row(c: dict[str, Any], run_id: str, question_id: str, protocol: str, *,
             messages: str | None = None) -> dict[str, Any]:
    """The ``model_calls`` row of one trace record ``c`` (a :meth:`ModelPool.sample` record);
    ``question_id`` is used when the record has none; ``messages``: the messages as JSON, when
    known (a record with ``messages_of`` has none of its own: use :func:`call_rows`)."""
    return {
        "call_id": c["call_id"], "run_id": run_id, "question_id": c.get("question_id", question_id),
        "protocol": protocol, "node": c.get("node"), "role": c.get("role"), "agent": c.get("agent"),
        "partner": c.get("partner"),
        "model": c.get("model"), "messages": messages if messages is not None else _json(c.get("messages")), "completion": c.get("completion"),
        "params": _json(c.get("params")), "prompt_tokens": c.get("prompt_tokens", 0),
        "completion_tokens": c.get("completion_tokens", 0), "latency_s": c.get("latency_s"),
        "finish_reason": c.get("finish_reason"), "attempt": c.get("attempt", 0),
        "error": c.get("error"), "created_at": c.get("created_at") or now(),
    }


def _upsert(conn: Any, table: str, rows: list[dict[str, Any]], pk: tuple[str, ...]) -> None:
    """Insert ``rows`` (all with the first row's keys) into ``table``, updating those columns of
    rows whose primary key ``pk`` exists: sqlite-utils' ``upsert_all`` in one ``executemany``.
    Lists and dicts are stored as JSON, as sqlite-utils does."""
    if not rows:
        return
    cols = list(rows[0])
    names = ", ".join(f"[{c}]" for c in cols)
    updates = ", ".join(f"[{c}] = excluded.[{c}]" for c in cols if c not in pk)
    conn.executemany(
        f"INSERT INTO [{table}] ({names}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT ({', '.join(f'[{c}]' for c in pk)}) DO UPDATE SET {updates}",
        [tuple(_json(v) if isinstance(v, (dict, list, tuple)) else v for v in (r[c] for c in cols)) for r in rows])


def _bool(value: Any) -> int | None:
    return None if value is None else int(bool(value))


def _models(pool: Any) -> Any:
    """A pool description without :data:`TRANSPORT_FIELDS` (what a resume compares)."""
    if isinstance(pool, list):
        return [{k: v for k, v in m.items() if k not in TRANSPORT_FIELDS} if isinstance(m, dict) else m for m in pool]
    return pool
