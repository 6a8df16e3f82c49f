"""Exchanges from a trace DB: every response, with the model whose answer it was shown (its partner).

Rows are read from ``model_calls`` (successful calls only) in the shape
:func:`agora.agents.panel.analyse` takes. Which answer a response saw:

1. The ``partner`` column (nullable text, :mod:`agora.traces.schema`): the name of the model
   whose answer was shown, or several names separated by commas. Graphs that show one model
   another's answer set it (``agora converse``, COMED escalation, duels).
2. Rows without it (older DBs, graphs that leave it empty) fall back to the evidence in the
   prompt rather than to role names, which differ between graphs: the partner is the other model
   of the same question whose completion (at least ``min_shared_chars`` characters, stripped)
   appears verbatim in this call's messages. One such model is the partner; several leave the row
   without a single partner (it still counts for its speaker).

Absent tables are tolerated: without ``questions`` answers are not extracted (agreement is left
out), without ``runs`` no family labels are known. Only ``model_calls`` with ``model`` and
``completion`` columns is required. The database is opened read-only: a SQLite file, or a
``postgresql://`` URL (the Postgres trace store's tables, read through its store).
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.tasks.answers import extract_answer
from agora.traces.store import TraceStore, readonly_uri, store_backend

_OPTION_LINE = re.compile(r"^\s*\(?([A-J])[.)]\s", re.MULTILINE)


@dataclass
class Exchanges:
    """What :func:`read_exchanges` found."""

    rows: list[dict[str, Any]]
    """One row per successful response (keys in :mod:`agora.agents.panel`, plus ``call_id``,
    ``run_id``, ``question_id``, ``protocol``, ``node``, ``partners`` (how many models' answers
    were shown) and ``partner_source`` (``column``, ``content`` or ``None``))."""
    families: dict[str, str | None]
    """Model → ``family`` from the runs' stored pool JSON."""
    model_order: list[str]
    """Models in pool order (runs by start time), for stable tables."""
    runs: list[dict[str, Any]] = field(default_factory=list)
    """``{"run_id", "protocol", "responses"}`` per run read."""
    notes: list[str] = field(default_factory=list)


class _Reader:
    """A trace DB opened read-only: a SQLite file (``sqlite3``, read-only URI) or a ``postgresql://``
    URL (:class:`~agora.traces.store.TraceStore` with ``readonly=True``, which opens the Postgres store).

    Raises:
        FileNotFoundError: a SQLite path that is not a file.
        TraceStoreError: a Postgres database that cannot be reached or holds no trace tables.
    """

    def __init__(self, path: str | Path):
        self.store: TraceStore | None = None
        self.conn: sqlite3.Connection | None = None
        if store_backend(path) is not None:
            self.store = TraceStore(str(path), readonly=True)
            return
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such trace database")
        self.conn = sqlite3.connect(readonly_uri(p), uri=True)
        self.conn.row_factory = sqlite3.Row

    def tables(self) -> set[str]:
        if self.store is not None:
            return set(self.store.db.table_names())
        return {r[0] for r in self.conn.execute("select name from sqlite_master where type = 'table'")}

    def columns(self, table: str) -> list[str]:
        if self.store is not None:
            return list(self.store.db[table].columns_dict)
        return [r[1] for r in self.conn.execute(f"pragma table_info({table})")]

    def rows(self, sql: str) -> list[dict[str, Any]]:
        if self.store is not None:
            return list(self.store.db.query(sql))
        return [dict(r) for r in self.conn.execute(sql)]

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
        else:
            self.conn.close()


def _prompt_text(messages: Any) -> str:
    if not messages:
        return ""
    try:
        chat = json.loads(messages)
    except (TypeError, ValueError):
        return str(messages)
    if isinstance(chat, list):
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in chat)
    return str(chat)


def _n_choices(question: str) -> int:
    letters = _OPTION_LINE.findall(question or "")
    return len(set(letters)) or 4


def _selected(run_id: str | None, wanted: Sequence[str]) -> bool:
    """A run is selected by its exact id or by a base id it extends (``<base>:...``)."""
    return not wanted or any(run_id == w or (run_id or "").startswith(w + ":") for w in wanted)


def read_exchanges(path: str | Path, run_ids: Sequence[str] = (), *, min_shared_chars: int = 20) -> Exchanges:
    """Responses of a trace DB with their partners, question keys and extracted answers.

    Args:
        path: the trace DB: a SQLite file or a ``postgresql://`` URL.
        run_ids: keep only these runs (an id also selects runs named ``<id>:...``, as
            ``agora converse`` names its per-pair runs); empty = all.
        min_shared_chars: shortest completion that counts as content evidence of a partner.

    Raises:
        FileNotFoundError: no such file. TraceStoreError: a Postgres database that cannot be reached
            or holds no trace tables.
        ValueError: the DB has no ``model_calls`` table, or it lacks ``model``/``completion``, or
            a run id in ``run_ids`` selects no run of the DB.
    """
    conn = _Reader(path)
    try:
        tables = conn.tables()
        if "model_calls" not in tables:
            raise InputError(f"{path}: no model_calls table; is this an Agora trace database?")
        cols = conn.columns("model_calls")
        missing = [c for c in ("model", "completion") if c not in cols]
        if missing:
            raise InputError(f"{path}: model_calls lacks column(s) {', '.join(missing)}")
        notes: list[str] = []
        wanted = ("call_id", "run_id", "question_id", "protocol", "node", "role", "model", "messages",
                  "completion", "partner")
        select = ", ".join(c if c in cols else f"null as {c}" for c in wanted)
        where = "completion is not null" + (" and error is null" if "error" in cols else "")
        calls = conn.rows(f"select {select} from model_calls where {where} order by rowid")
        calls = [c for c in calls if _selected(c["run_id"], run_ids)]
        if run_ids:  # a run the database does not hold is said so, not reported as one without calls
            known = {r["run_id"] for r in conn.rows("select distinct run_id from "
                                                     + ("runs" if "runs" in tables else "model_calls"))}
            absent = [w for w in run_ids if not any(_selected(k, [w]) for k in known)]
            if absent:
                raise InputError(f"{shown_url(str(path))}: no successful model calls in run(s) {', '.join(run_ids)}: "
                                 f"the database holds no run {absent[0]!r} (`agora report runs` lists them)")
        if "partner" not in cols:
            notes.append("model_calls has no partner column: partners inferred from prompt contents")

        questions: dict[tuple[str, str], dict[str, Any]] = {}
        if "questions" in tables and {"run_id", "question_id", "kind", "question"} <= set(conn.columns("questions")):
            for q in conn.rows("select run_id, question_id, kind, question from questions"):
                questions[(q["run_id"], q["question_id"])] = q
        else:
            notes.append("no questions table: answers not extracted, agreement left out")

        families: dict[str, str | None] = {}
        order: list[str] = []
        runs: list[dict[str, Any]] = []
        if "runs" in tables and {"run_id", "pool"} <= set(run_cols := conn.columns("runs")):
            by = "started_at" if "started_at" in run_cols else "rowid"
            proto = "protocol" if "protocol" in run_cols else "null as protocol"
            for run in conn.rows(f"select run_id, {proto}, pool from runs order by {by}"):
                if not _selected(run["run_id"], run_ids):
                    continue
                runs.append({"run_id": run["run_id"], "protocol": run["protocol"]})
                try:
                    pool = json.loads(run["pool"] or "[]")
                except ValueError:
                    notes.append(f"run {run['run_id']}: pool JSON unreadable, no family labels from it")
                    continue
                for spec in pool if isinstance(pool, list) else []:
                    if isinstance(spec, dict) and spec.get("name"):
                        order.append(spec["name"])
                        families.setdefault(spec["name"], spec.get("family"))
        else:
            notes.append("no runs table: no family labels")
    finally:
        conn.close()

    by_question: dict[tuple[Any, Any], list[dict]] = {}
    for c in calls:
        by_question.setdefault((c["run_id"], c["question_id"]), []).append(c)
    rows: list[dict[str, Any]] = []
    for c in calls:
        partners, source = [], None
        if c["partner"]:
            partners, source = [p.strip() for p in str(c["partner"]).split(",") if p.strip()], "column"
        else:
            prompt = _prompt_text(c["messages"])
            shown = {o["model"] for o in by_question[(c["run_id"], c["question_id"])]
                     if o["model"] != c["model"] and len(o["completion"].strip()) >= min_shared_chars
                     and o["completion"].strip() in prompt}
            if shown:
                partners, source = sorted(shown), "content"
        q = questions.get((c["run_id"], c["question_id"]))
        kind = q["kind"] if q else None
        answer = (extract_answer(c["completion"], kind, _n_choices(q["question"]), question=q["question"])
                  if kind in ("math", "mc") else None)
        rows.append({
            "call_id": c["call_id"], "run_id": c["run_id"], "question_id": c["question_id"],
            "protocol": c["protocol"], "node": c["node"], "role": c["role"], "speaker": c["model"],
            "partner": partners[0] if len(partners) == 1 else None, "partners": len(partners),
            "partner_source": source, "text": c["completion"],
            "question_key": (q["question"] if q and q["question"] else f"{c['run_id']}:{c['question_id']}"),
            "answer": answer,
        })
    for run in runs:
        run["responses"] = sum(r["run_id"] == run["run_id"] for r in rows)
    several = sum(r["partners"] > 1 for r in rows)
    if several:
        notes.append(f"{several} responses saw several models' answers: counted for their speaker only")
    return Exchanges(rows=rows, families=families, model_order=list(dict.fromkeys(order)), runs=runs, notes=notes)
