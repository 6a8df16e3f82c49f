"""``agora traces backfill``: the answer-level columns of a trace database written before they
existed, filled once."""

from __future__ import annotations

from typing import Any, Sequence

from agora.traces.errors import TraceStoreError
from agora.traces.rows import answer_fields, option_count


def backfill(store: Any, run_ids: Sequence[str] = ()) -> dict[str, int]:
    """Fill the answer-level columns of an older database (``agora traces backfill``), once:
    ``questions.n_choices`` from the question text, and, for model calls of recorded questions
    that lack them, ``answer``/``how`` (:func:`answer_fields`) and ``sample_index``/``request_id``.
    The samples of one request share their ``created_at``, node, agent and model (the pool stamps a
    request's start on each), so they are grouped on those and numbered in write order (rowid).
    Rows already filled are left alone, so a second backfill changes nothing. Returns counts:
    ``questions`` and ``calls`` updated.

    Raises:
        TraceStoreError: a read-only store.
    """
    if store.readonly:
        raise TraceStoreError(f"{store.path}: opened read-only; backfill needs to write")
    where, params = "", []
    if run_ids:
        where = f" and q.run_id in ({', '.join('?' for _ in run_ids)})"
        params = list(run_ids)
    db = store.db
    counts = {"questions": 0, "calls": 0}
    with store._lock, db.conn:
        qs = list(db.query(f"select run_id, question_id, kind, question, n_choices from questions q where 1 = 1{where}",
                           params))
        meta = {}
        for q in qs:
            n = q["n_choices"] or option_count(q["question"], q["kind"])
            meta[q["run_id"], q["question_id"]] = (q["kind"], n)
            if q["n_choices"] is None and n is not None:
                db.execute("update questions set n_choices = ? where run_id = ? and question_id = ?",
                           [n, q["run_id"], q["question_id"]])
                counts["questions"] += 1
        rows = db.query(
            "select c.rowid as rid, c.call_id, c.run_id, c.question_id, c.node, c.agent, c.model, c.created_at, "
            "c.completion, c.how, c.sample_index from model_calls c join questions q using (run_id, question_id) "
            f"where c.error is null{where} order by c.rowid", params)
        firsts: dict[tuple, tuple[str, int]] = {}
        updates = []
        for r in rows:
            key = (r["run_id"], r["question_id"], r["node"], r["agent"], r["model"], r["created_at"])
            request, index = firsts.get(key, (r["call_id"], -1))
            firsts[key] = (request, index + 1)
            if r["how"] is not None and r["sample_index"] is not None:
                continue
            kind, n = meta[r["run_id"], r["question_id"]]
            answer, how = answer_fields(r["completion"], kind, n)
            updates.append((answer, how, index + 1, request, r["call_id"]))
        db.conn.executemany("update model_calls set answer = ?, how = ?, sample_index = ?, request_id = ? "
                            "where call_id = ?", updates)
        counts["calls"] = len(updates)
    return counts
