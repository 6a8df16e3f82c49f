"""The runs of a trace DB as ``agora report runs`` and ``agora report run`` show them: one row a run
(status, accuracy, last activity, stale), a run at a glance, and opening a file as a trace store
with a clear refusal when it is not one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.traces.pg_sql import db_argument
from agora.traces.resume import lookalike_note
from agora.traces.report import method_table, run_totals
from agora.traces.shared_candidates import shared_totals
from agora.traces.store import TraceStore, TraceStoreError, check_db_path, store_backend


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run of a trace DB, as ``agora report runs`` lists it."""

    run_id: str
    protocol: str
    status: str
    """As stored: ``running``, ``finished``, ``partial`` (a bench waiting for its next round),
    ``interrupted`` (Ctrl-C or a drain: rerun to resume), ``failed``."""
    questions: int
    """Items recorded (answered questions; duels and sessions count their recorded questions)."""
    accuracy: float | None
    """Share of recorded questions with gold whose main answer is right (``None`` without any)."""
    started_at: str
    finished_at: str | None
    last_activity: str | None
    """When the run last recorded anything: the latest of its start, its questions' ``finished_at``,
    the end of its model requests (``created_at``, when a request began, plus its samples'
    ``latency_s`` shares, which add up to its wall time; in UTC) and its own ``finished_at``
    (:func:`latest_time`); stored stamps are shown as stored."""
    host: str | None
    stale: bool
    """``running`` with nothing recorded for over ``stale_after_s``: probably killed (``kill -9``,
    a crash, a machine gone) rather than running; rerun it to resume."""


def _moment(stamp: str) -> datetime | None:
    """``stamp`` (ISO 8601) as an aware datetime (a naive one is taken as UTC), or ``None``."""
    try:
        t = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _from_julian(day: float) -> str:
    """An SQLite Julian day number as an ISO 8601 UTC stamp to the millisecond."""
    t = datetime.fromtimestamp(round((day - 2440587.5) * 86400.0, 3), tz=timezone.utc)  # to the ms, not below
    return t.isoformat(timespec="milliseconds")


def latest_time(*stamps: str | None) -> str | None:
    """The latest of the ISO 8601 timestamps ``stamps``, as given (``None`` and blanks skipped).

    Compared as times, not as text: the store writes ``...:05+00:00`` (seconds) and the pool
    ``...:04.900+00:00`` (milliseconds). A stamp that is not ISO 8601 counts only when none is.

    >>> latest_time("2026-01-01T10:00:05+00:00", None, "2026-01-01T10:00:04.900+00:00")
    '2026-01-01T10:00:05+00:00'
    """
    given = [s for s in stamps if s]
    timed = [(t, s) for s in given if (t := _moment(s)) is not None]
    if timed:
        return max(timed, key=lambda ts: ts[0])[1]
    return max(given) if given else None


RUN_COLUMNS = ("run_id", "protocol", "status", "started_at")
"""Columns of ``runs`` that every Agora trace database has (:data:`agora.traces.schema.TABLES`)."""


def not_a_trace_store(store: TraceStore) -> str | None:
    """Why ``store`` holds no Agora traces to read, as one line naming its file, or ``None``.

    Read-only (table and column names). Refused: no ``runs`` table (an empty SQLite file, or one of
    another tool: its first four tables are named), or a ``runs`` table without Agora's columns
    :data:`RUN_COLUMNS` (another tool's, e.g. MLflow's). An Agora database with no runs passes.
    """
    names = store.db.table_names()
    if "runs" not in names:
        other = sorted(n for n in names if not n.startswith("sqlite_"))
        held = ("its tables: " + ", ".join(other[:4]) + (f" and {len(other) - 4} more" if len(other) > 4 else "")
                if other else "an empty database, or one a run is creating right now")
        return f"{store.path}: holds no Agora traces (no runs table; {held})"
    missing = [c for c in RUN_COLUMNS if c not in store.db["runs"].columns_dict]
    if missing:
        return (f"{store.path}: holds no Agora traces (its runs table lacks {', '.join(missing)}: "
                "a database of another tool)")
    return None


def open_trace_store(path: str | Path) -> TraceStore:
    """``path`` opened read-only for a report (:class:`TraceStore` with ``readonly=True``): nothing is
    created or written in it or beside it.

    Raises:
        TraceStoreError: one line naming ``path``: a folder, no such file, not an SQLite database,
            or one that holds no Agora traces (:func:`not_a_trace_store`).
    """
    if store_backend(path) is None:  # a SQLite file (a postgresql:// URL is checked by its store)
        check_db_path(path)
        if not Path(path).is_file():
            raise TraceStoreError(f"{path}: no such trace database")
    store = TraceStore(path, readonly=True)
    problem = not_a_trace_store(store)
    if problem:
        store.close()
        raise TraceStoreError(problem)
    return store


def run_rows(store: TraceStore, stale_after_s: float = 3600.0, now: str | None = None) -> list[RunRow]:
    """Every run of ``store``, oldest first, with its recorded questions and last activity
    (:attr:`RunRow.last_activity`, which staleness is judged by).

    ``now``: an ISO timestamp to judge staleness against (default: the current UTC time).

    Raises:
        TraceStoreError: ``store`` holds no Agora traces (:func:`not_a_trace_store`).
    """
    problem = not_a_trace_store(store)
    if problem:
        raise TraceStoreError(problem)
    names = store.db.table_names()
    counts: dict[str, tuple[int, int, int, str | None]] = {}
    if "questions" in names:
        for r in store.db.query("select run_id, count(*) as n, sum(correct is not null) as scored, "
                                "sum(coalesce(correct, 0)) as right, max(finished_at) as last "
                                "from questions group by run_id"):
            counts[r["run_id"]] = (r["n"], r["scored"] or 0, r["right"] or 0, r["last"])
    calls: dict[str, str | None] = {}
    if "model_calls" in names:
        # a call's created_at is when its request began; the request ended when its samples' latency
        # shares (they add up to its wall time) had passed: the latest such end is the run's last
        # activity (julianday reads ISO 8601 with a zone; a stamp it cannot read falls back to the
        # latest as text)
        columns = store.db["model_calls"].columns_dict
        latency = "coalesce(latency_s, 0)" if "latency_s" in columns else "0"
        request = "coalesce(request_id, call_id)" if "request_id" in columns else "call_id"
        for r in store.db.query(
                f"select run_id, max(last) as last, max(ended) as ended from (select run_id, max(created_at) as last, "
                f"min(julianday(created_at)) + sum({latency}) / 86400.0 as ended from model_calls "
                f"group by run_id, {request}) as requests group by run_id"):
            calls[r["run_id"]] = r["last"] if r["ended"] is None else _from_julian(r["ended"])
    moment = datetime.fromisoformat(now) if now else datetime.now(timezone.utc)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    rows = []
    for run in store.db.query("select * from runs order by rowid"):
        n, scored, right, asked = counts.get(run["run_id"], (0, 0, 0, None))
        last = latest_time(run["started_at"], asked, calls.get(run["run_id"]), run.get("finished_at"))
        stale = False
        if run["status"] == "running" and last and (seen := _moment(last)) is not None:
            stale = (moment - seen).total_seconds() > stale_after_s
        rows.append(RunRow(run["run_id"], run["protocol"], run["status"], n, right / scored if scored else None,
                           run["started_at"], run.get("finished_at"), last, run.get("host"), stale))
    return rows


def run_summary(store: TraceStore, run_id: str) -> dict[str, object]:
    """A run at a glance (``agora report run``): its row (protocol, status, times, host, code),
    questions recorded and failed, model calls and tokens, each method's accuracy with its CI (and
    ``too_few``: fewer than :data:`agora.traces.report.MIN_QUESTIONS` scored questions or a degenerate interval), how the samples' answers were found (``marker``, ``boxed``, ``####``,
    ``fallback``, ``echo``, ``none``; ``unknown`` in an old database not backfilled; ``failed question``:
    the samples of questions that failed, which are not read for an answer), on how many
    questions the methods disagree, and ``shared``: the cost of the samples it took from a bench's
    shared candidates, whose rows are the candidates run's (:func:`agora.traces.shared_candidates.shared_totals`; ``totals`` counts
    the run's own rows only).

    Raises:
        ValueError: no such run, or shared samples whose mapping cannot be rebuilt (:func:`agora.traces.shared_candidates.shared_takes`).
    """
    run = store.get_run(run_id) if "runs" in store.db.table_names() else None
    if run is None:
        db, note = db_argument(store.path)  # without a password: libpq reads it from PGPASSWORD or ~/.pgpass
        raise InputError(f"{shown_url(str(store.path))}: no run {run_id!r} "
                         f"(`agora report runs --db {db}` lists them{' ' + note if note else ''})"
                         + lookalike_note(run_id, store.run_ids()))
    totals = run_totals(store, run_id)
    hows: dict[str, int] = {}
    if "how" in store.db["model_calls"].columns_dict:
        # a failed question's samples are not read for an answer (it has no questions row): they are
        # counted apart, as "failed question", not as an unknown way of finding one
        failed = ("when c.how is null and not exists (select 1 from questions q where q.run_id = c.run_id and "
                  "q.question_id = c.question_id) then 'failed question' " if "questions" in store.db.table_names()
                  else "")
        for r in store.db.query(f"select case {failed}else coalesce(c.how, 'unknown') end as how, count(*) as n "
                                "from model_calls c where c.run_id = ? and c.error is null group by 1 order by 2 desc",
                                [run_id]):
            hows[r["how"]] = r["n"]
    answers: dict[str, set] = {}
    for r in store.results(run_id):
        answers.setdefault(r["question_id"], set()).add(r["answer"])
    return {
        "run_id": run_id, "protocol": run["protocol"], "status": run["status"], "started_at": run["started_at"],
        "finished_at": run["finished_at"], "host": run.get("host"), "code_revision": run.get("code_revision"),
        "totals": totals, "shared": shared_totals(store, run_id), "methods": method_table(store, run_id),
        "sample_answers": hows,
        "questions_methods_disagree": sum(len(a) > 1 for a in answers.values()),
    }
