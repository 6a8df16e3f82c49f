"""Several workers on one run (Postgres): the ``claims`` table (schema ``agora_claims``) shares a run's questions out.

Each question of a run has one ``claims`` row (``run_id, question_id``: ``idx``, ``worker``,
``token``, ``sitting``, ``lease_until``, ``done``, ``attempts``). A worker takes the next free
question with Postgres's own row locking, ``SELECT … FOR UPDATE SKIP LOCKED`` (free: not done, and no
lease or an expired one), gives the claim a token of its own, and holds it by a lease it renews
while it works (:attr:`Claims.lease_s`, renewed every third of it). A killed worker renews nothing:
once its lease expires another worker takes the question over (from the question's last
checkpoint, shared in the same database), with a new token. A question is recorded only under the
claim's current token, checked in the transaction that writes it and marks the claim done
(:meth:`Claims.record`, :meth:`Claims.holding`): a slow worker whose lease was taken over writes
nothing (its result, or its failed calls, are discarded and logged), even when the same worker's
other thread claimed the question again. The run's final status is written from every worker's
records, the same whichever worker ends last (:meth:`Claims.finish`).

Sittings: the workers present on a run at once make one sitting. A worker joining while another is
present (each holds a shared advisory lock on the run while it works, released with its
connection, ``kill -9`` included) joins that sitting; one that finds none starts a new one
(``agora_claims.sittings``). Each claim records its sitting, so a question that failed in this
sitting stays done for every worker of it (attempted once, as one process attempts it), while a
later sitting (a rerun) retries it.

SQLite stores have no claims: one process runs a run (:meth:`agora.traces.store.TraceStore.run_lock`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import threading
import time
import uuid
from typing import Any, Iterator, Mapping, Sequence

from agora.models.environment import env_value

log = logging.getLogger(__name__)

#: Seconds a claimed question stays a worker's without a renewal (``AGORA_LEASE_S`` overrides).
LEASE_S = 60.0

#: Where the claims live: a schema of their own, apart from the trace tables (work-sharing state, not
#: traces: bundles and reports do not carry it).
TABLE = "agora_claims.claims"

_TABLE = """
CREATE SCHEMA IF NOT EXISTS agora_claims;
CREATE TABLE IF NOT EXISTS agora_claims.claims (
    run_id TEXT NOT NULL, question_id TEXT NOT NULL, idx BIGINT, worker TEXT,
    lease_until TIMESTAMPTZ, done BOOLEAN NOT NULL DEFAULT false, attempts BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, question_id));
ALTER TABLE agora_claims.claims ADD COLUMN IF NOT EXISTS token TEXT;
ALTER TABLE agora_claims.claims ADD COLUMN IF NOT EXISTS sitting TEXT;
CREATE TABLE IF NOT EXISTS agora_claims.sittings (
    run_id TEXT PRIMARY KEY, sitting TEXT NOT NULL, started_at TIMESTAMPTZ NOT NULL DEFAULT now())
"""


def create_claims_table(db: Any) -> None:
    """Create the ``claims`` table in a Postgres trace database (:class:`agora.traces.postgres.PostgresDatabase`),
    where it or one of its columns is missing (a role without the CREATE right opens a complete one)."""
    have = {(r["table_name"], r["column_name"]) for r in db.query(
        "select table_name, column_name from information_schema.columns where table_schema = 'agora_claims'")}
    if not {("claims", "token"), ("claims", "sitting"), ("sittings", "sitting")} <= have:
        db.executescript(_TABLE)  # (its IF NOT EXISTS still needs the CREATE right: run only when something is missing)


def run_ending(questions: int, recorded: int, failed: Mapping[str, str | None], later: int) -> tuple[str, dict[str, Any]]:
    """A benchmark run's final status and summary at the end of a sitting: the one rule for one
    process (:func:`agora.graphs.runner.run_problems`) and for several workers (:meth:`Claims.finish`).

    Args:
        questions: every question of the run.
        recorded: questions of this sitting's scope (all of the run's, or a round's) recorded, in
            this sitting or an earlier one.
        failed: this sitting's failed questions (no answer recorded), in the run's order → the
            error of its last failed model call (``None``: no call was made).
        later: the run's questions neither recorded nor failed in this sitting (left for a later
            round, or failed in an earlier one).

    Returns:
        ``(status, summary)``: ``failed`` when a question failed, else ``partial`` while ``later``,
        else ``finished``; the summary ``{"questions"}``, with failures ``recorded``, ``failed`` and
        ``failed_questions`` (the first 50, errors cut to 200 characters), and ``later`` when non-zero.
    """
    summary: dict[str, Any] = {"questions": questions}
    if failed:
        summary.update(recorded=recorded, failed=len(failed), failed_questions={
            q: (error or "no model call was made")[:200] for q, error in list(failed.items())[:50]})
    if later:
        summary["later"] = later
    return "failed" if failed else "partial" if later else "finished", summary


def lease_s() -> float:
    """The lease in seconds: ``AGORA_LEASE_S`` when set (a positive number), else :data:`LEASE_S`.

    Raises:
        EnvironmentVariableError: ``AGORA_LEASE_S`` is not a positive number (the CLI prints it as one
            ``error:`` line, as its check of every variable does).
    """
    raw = env_value("AGORA_LEASE_S")  # empty is unset, as for every AGORA_* variable; nan, 0, -1 refused
    return LEASE_S if raw is None else float(raw)


class Claims:
    """One worker's claims on one run's questions (see the module docstring).

    A thread works on one claim at a time: :meth:`next` (or :meth:`claim_next`) gives the calling
    thread its claim, and :meth:`holding`, :meth:`record` and :meth:`holds` called from that thread
    check that claim's token. :meth:`seed` joins (or starts) the run's sitting; :meth:`leave` ends
    this worker's part in it.

    Args:
        store: a Postgres trace store (its ``db``).
        run_id: the run.
        lease: seconds a claim lasts without renewal (default :func:`lease_s`).
    """

    def __init__(self, store: Any, run_id: str, *, lease: float | None = None):
        self.store, self.db, self.run_id = store, store.db, run_id
        self.lease_s = lease if lease is not None else lease_s()
        self.worker = f"{platform.node()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.sitting: str | None = None
        """The sitting this worker is part of (set by :meth:`seed`)."""
        self.held: dict[str, str] = {}
        """Claims held, token → question id (their leases are renewed)."""
        self._held_lock = threading.Lock()
        self._thread = threading.local()  # .claims: question id → token, the calling thread's
        self._presence: Any = None  # the connection holding this worker's share of the run's sitting lock
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.taken_over = 0
        """Questions this worker took from a worker whose lease had expired."""
        self.discarded = 0
        """Questions whose result this worker discarded: its claim had been taken over meanwhile."""

    def seed(self, questions: Sequence[tuple[int, str]]) -> None:
        """Join the run's sitting (or start one), add a claims row for each ``(idx, question_id)`` not
        yet there, and free the ones done without a recorded answer in an earlier sitting (a failed
        question: this sitting retries it, as a rerun does; one that failed in this sitting stays done).

        One transaction under the run's advisory lock (the one ``start_run`` and :meth:`finish` take),
        so two workers joining at once see one sitting."""
        ids = [q for _, q in questions]
        try:
            with self.store._lock, self.db.conn:
                self.db.execute("select pg_advisory_xact_lock(hashtext(?))", [f"agora-run:{self.run_id}"])
                self.sitting = self._join_sitting()
                with self.db._connection() as conn, conn.cursor() as cur:
                    cur.executemany("INSERT INTO agora_claims.claims (run_id, question_id, idx) VALUES (%s, %s, %s) "
                                    "ON CONFLICT DO NOTHING", [(self.run_id, q, i) for i, q in questions])
                self.db.execute("UPDATE agora_claims.claims SET done = false, worker = NULL, token = NULL, lease_until = NULL "
                                "WHERE run_id = ? AND done AND sitting IS DISTINCT FROM ? AND question_id = ANY(?) AND "
                                "NOT EXISTS (SELECT 1 FROM questions q WHERE q.run_id = agora_claims.claims.run_id AND "
                                "q.question_id = agora_claims.claims.question_id)", [self.run_id, self.sitting, ids])
        except BaseException:
            self.leave()
            raise

    def _join_sitting(self) -> str:
        """This worker's sitting (called under the run's advisory lock): the current one when another
        worker of the run is present (holds its share of the run's sitting lock), else a new one."""
        import psycopg

        if self._presence is None:
            self._presence = psycopg.connect(self.store.path, autocommit=True)
            with contextlib.suppress(psycopg.Error):  # held idle by design: not ended by an admin's idle timeout
                self._presence.execute("set idle_session_timeout = 0")  # (Postgres 14+)
        key = [f"agora-run-sitting:{self.run_id}"]
        alone = self._presence.execute("select pg_try_advisory_lock(hashtext(%s))", key).fetchone()[0]
        if alone:
            self._presence.execute("select pg_advisory_unlock(hashtext(%s))", key)
        self._presence.execute("select pg_advisory_lock_shared(hashtext(%s))", key)
        rows = list(self.db.query("SELECT sitting FROM agora_claims.sittings WHERE run_id = ?", [self.run_id]))
        if rows and not alone:
            return rows[0]["sitting"]
        sitting = uuid.uuid4().hex
        self.db.execute("INSERT INTO agora_claims.sittings (run_id, sitting) VALUES (?, ?) ON CONFLICT (run_id) DO UPDATE "
                        "SET sitting = excluded.sitting, started_at = now()", [self.run_id, sitting])
        return sitting

    def leave(self) -> None:
        """End this worker's part in the sitting (its share of the sitting lock goes with the
        connection). A worker that joins after every worker left starts a new sitting."""
        presence, self._presence = self._presence, None
        if presence is not None:
            with contextlib.suppress(Exception):
                presence.close()

    def start(self) -> "Claims":
        """Start renewing this worker's leases (a daemon thread)."""
        self._beat = threading.Thread(target=self._renew, name="agora-claims-lease", daemon=True)
        self._beat.start()
        return self

    def stop(self) -> None:
        """Stop renewing and free the questions still held (a drain, an error: others take them at once)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=10)
        with self._held_lock:
            tokens = sorted(self.held)
        if tokens:
            with contextlib.suppress(Exception):
                self.db.execute("UPDATE agora_claims.claims SET worker = NULL, token = NULL, lease_until = NULL WHERE "
                                "run_id = ? AND token = ANY(?) AND NOT done", [self.run_id, tokens])

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            with self._held_lock:
                tokens = sorted(self.held)
            if tokens:  # (a claim taken over has a new token: its lease is not this worker's to renew)
                with contextlib.suppress(Exception):  # a connection blip: the next beat tries again
                    self.db.execute("UPDATE agora_claims.claims SET lease_until = now() + make_interval(secs => ?) WHERE "
                                    "run_id = ? AND token = ANY(?)", [self.lease_s, self.run_id, tokens])

    def _mine(self) -> dict[str, str]:
        """The calling thread's claims: question id → token."""
        claims = getattr(self._thread, "claims", None)
        if claims is None:
            claims = self._thread.claims = {}
        return claims

    def _drop(self, question_id: str) -> None:
        token = self._mine().pop(question_id, None)
        with self._held_lock:
            self.held.pop(token, None)

    def claim_next(self, ids: Sequence[str]) -> str | None:
        """Claim the first free question among ``ids`` (by ``idx``) for the calling thread, under a
        new token and this worker's sitting; its id, or ``None`` when none is free now (done, or
        leased by a live worker)."""
        token = uuid.uuid4().hex
        with self.db.conn:
            rows = list(self.db.query(
                "SELECT question_id, worker FROM agora_claims.claims WHERE run_id = ? AND question_id = ANY(?) AND NOT done AND "
                "(lease_until IS NULL OR lease_until < now()) ORDER BY idx LIMIT 1 FOR UPDATE SKIP LOCKED",
                [self.run_id, list(ids)]))
            if not rows:
                return None
            qid = rows[0]["question_id"]
            self.db.execute("UPDATE agora_claims.claims SET worker = ?, token = ?, sitting = ?, "
                            "lease_until = now() + make_interval(secs => ?), attempts = attempts + 1 "
                            "WHERE run_id = ? AND question_id = ?",
                            [self.worker, token, self.sitting, self.lease_s, self.run_id, qid])
        if rows[0]["worker"] is not None:
            self.taken_over += 1
        self._drop(qid)  # (an earlier claim of this thread on it: taken over, then freed and claimed again)
        self._mine()[qid] = token
        with self._held_lock:
            self.held[token] = qid
        return qid

    def remaining(self, ids: Sequence[str]) -> int:
        """Questions among ``ids`` not done yet (claimed by someone or free)."""
        row = next(self.db.query("SELECT count(*) AS n FROM agora_claims.claims WHERE run_id = ? AND question_id = ANY(?) AND NOT done",
                                 [self.run_id, list(ids)]))
        return int(row["n"])

    def done(self, ids: Sequence[str]) -> list[str]:
        """The questions among ``ids`` that are done (recorded, or failed in this sitting), by any
        worker, in the run's order: their checkpoint threads are nobody's to resume."""
        return [r["question_id"] for r in self.db.query(
            "SELECT question_id FROM agora_claims.claims WHERE run_id = ? AND question_id = ANY(?) AND done ORDER BY idx",
            [self.run_id, list(ids)])]

    def next(self, ids: Sequence[str], stopped: Any = lambda: False) -> str | None:
        """The next question to work on: claimed at once when one is free; while all the rest are
        leased by other workers, wait (a fifth of the lease between looks) for one to free up or
        expire. ``None`` when every question among ``ids`` is done, or ``stopped()`` says so."""
        while not stopped():
            qid = self.claim_next(ids)
            if qid is not None:
                return qid
            if self.remaining(ids) == 0:
                return None
            time.sleep(min(1.0, self.lease_s / 5))
        return None

    def holds(self, question_id: str) -> bool:
        """Whether the calling thread's claim on ``question_id`` is still its own (same token, not done)."""
        token = self._mine().get(question_id)
        rows = list(self.db.query("SELECT token, done FROM agora_claims.claims WHERE run_id = ? AND question_id = ?",
                                  [self.run_id, question_id]))
        return token is not None and bool(rows) and rows[0]["token"] == token and not rows[0]["done"]

    @contextlib.contextmanager
    def holding(self, question_id: str, what: str = "result") -> Iterator[bool]:
        """One transaction in which to write for ``question_id``: yields whether the calling thread's
        claim on it is still its own (the row locked, its token compared: write only then). A claim
        taken over meanwhile (this worker's lease expired and another worker, or another thread,
        claimed it) yields ``False`` and logs that this worker's ``what`` is discarded."""
        token = self._mine().get(question_id)
        with self.store._lock, self.db.conn:
            rows = list(self.db.query("SELECT worker, token, done FROM agora_claims.claims WHERE run_id = ? AND "
                                      "question_id = ? FOR UPDATE", [self.run_id, question_id]))
            mine = token is not None and bool(rows) and rows[0]["token"] == token and not rows[0]["done"]
            if not mine:
                self.discarded += 1
                state = ("not claimed" if not rows else "done by " + str(rows[0]["worker"]) if rows[0]["done"]
                         else "claimed by " + str(rows[0]["worker"]))
                log.warning("run %r, question %s: this worker's claim was taken over (its lease expired; now %s): "
                            "this worker's %s discarded", self.run_id, question_id, state, what)
            yield mine

    @contextlib.contextmanager
    def record(self, question_id: str) -> Iterator[bool]:
        """One transaction in which to record ``question_id`` (:meth:`holding`): yields whether the
        claim is still the calling thread's (record only then), and marks it done when the block ends
        without error. The thread's claim on it ends either way."""
        with self.holding(question_id) as mine:
            yield mine
            if mine:
                self.db.execute("UPDATE agora_claims.claims SET done = true, lease_until = NULL WHERE run_id = ? AND "
                                "question_id = ?", [self.run_id, question_id])
        self._drop(question_id)

    def abandon(self, question_id: str) -> None:
        """Forget the calling thread's claim on ``question_id`` (taken over by another: nothing to free)."""
        self._drop(question_id)

    def others_working(self, ids: Sequence[str]) -> bool:
        """Whether a question among ``ids`` is held by another worker under a live lease (it is still
        working on the run)."""
        row = next(self.db.query(
            "SELECT count(*) AS n FROM agora_claims.claims WHERE run_id = ? AND question_id = ANY(?) AND NOT done AND "
            "worker IS DISTINCT FROM ? AND lease_until >= now()", [self.run_id, list(ids), self.worker]))
        return int(row["n"]) > 0

    def others_working_apart(self, ids: Sequence[str], timeout_s: float = 2.0) -> bool:
        """:meth:`others_working`, asked through a connection of its own that waits at most about
        ``timeout_s`` to connect: for a signal handler about to end the process, whose store
        connection may be in the middle of a query. ``False`` when the database does not answer;
        never raises."""
        try:
            import psycopg

            with psycopg.connect(self.store.path, connect_timeout=max(1, int(timeout_s)), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM agora_claims.claims WHERE run_id = %s AND question_id = ANY(%s) AND NOT done "
                    "AND worker IS DISTINCT FROM %s AND lease_until >= now()",
                    [self.run_id, list(ids), self.worker]).fetchone()
            return bool(row and row[0] > 0)
        except Exception:  # noqa: BLE001 - never raises (a signal handler)
            return False

    def finish(self, problem_ids: Sequence[str], ids: Sequence[str]) -> tuple[str, dict[str, Any]] | None:
        """Write the run's final status and summary from what every worker recorded, so that it is the
        same whichever worker ends last; nothing while another worker still holds a question of ``ids``
        under a live lease (that worker writes it when it ends).

        The rule of a one-process run, :func:`run_ending`, over every worker's records: failed
        questions are those of ``ids`` done without a recorded answer; ``recorded`` counts the
        questions of ``ids`` recorded (by any worker, in any sitting); ``later`` the run's questions
        neither recorded nor failed (outside ``ids``, or failed in an earlier round); a failed
        question's error is its last failed model call's.
        Computed and written in one transaction under the run's advisory lock (the one
        ``start_run`` takes), so a worker joining meanwhile sees it before or after, whole.

        Args:
            problem_ids: every question of the run, in order.
            ids: the questions this sitting ran (all of ``problem_ids``, or the runner's ``only``).

        Returns:
            ``(status, summary)`` written, or ``None`` (another worker is still working).
        """
        wanted, every = set(ids), list(problem_ids)
        with self.store._lock, self.db.conn:
            self.db.execute("select pg_advisory_xact_lock(hashtext(?))", [f"agora-run:{self.run_id}"])
            if self.others_working(ids):
                return None
            recorded = {r["question_id"] for r in self.db.query(
                "SELECT question_id FROM questions WHERE run_id = ? AND question_id = ANY(?)", [self.run_id, every])}
            failed = [r["question_id"] for r in self.db.query(
                "SELECT question_id FROM agora_claims.claims WHERE run_id = ? AND question_id = ANY(?) AND done "
                "ORDER BY idx", [self.run_id, list(ids)]) if r["question_id"] not in recorded]
            errors = {r["question_id"]: r["error"] for r in self.db.query(
                "SELECT question_id, error FROM model_calls WHERE run_id = ? AND question_id = ANY(?) AND "
                "error IS NOT NULL ORDER BY rowid", [self.run_id, failed])} if failed else {}
            status, summary = run_ending(len(every), len(recorded & wanted), {q: errors.get(q) for q in failed},
                                         sum(q not in recorded and q not in failed for q in every))
            self.store.finish_run(self.run_id, summary=summary, status=status)
        return status, summary
