"""The rows the store writes, built from trace records: ``model_calls`` rows with their answers,
the batched upsert, and the cleaning of values a database cannot store (lone surrogates, integers
beyond 64 bits)."""

from __future__ import annotations

import json
import logging
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from agora.tasks.answers import find_answer

log = logging.getLogger(__name__)


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



def call_rows(calls: Iterable[dict[str, Any]], run_id: str, question_id: str, protocol: str, *,
              kind: str | None = None, n_choices: int | None = None,
              question: str | None = None) -> list[dict[str, Any]]:
    """The ``model_calls`` rows of trace records (:meth:`ModelPool.sample` records), with the
    messages of records that share their request's prompt (``messages_of``) filled back in, each
    sample's ``sample_index`` and ``request_id`` (from ``messages_of``: a request's first sample has
    none, its others point at it), and, when the question's ``kind`` is given, each sample's
    extracted ``answer`` and ``how`` (:func:`answer_fields`; ``question``: its text, so an echo of
    it is no answer, as the graphs read it)."""
    calls = list(calls)
    encoded: dict[str, str] = {}
    for c in calls:
        if c.get("messages") is not None:
            encoded[c["call_id"]] = _json(c["messages"])
    rows, taken = [], {}
    for c in calls:
        row = call_row(c, run_id, question_id, protocol,
                       messages=encoded.get(c["call_id"]) or encoded.get(c.get("messages_of")))
        if not c.get("error"):
            request = c.get("messages_of") or c["call_id"]
            row["request_id"], row["sample_index"] = request, taken.get(request, 0)
            taken[request] = row["sample_index"] + 1
            if kind is not None:
                row["answer"], row["how"] = answer_fields(c.get("completion"), kind, n_choices, question)
        rows.append(row)
    return rows


#: An option line of a multiple-choice question as the loaders write it (``A. text``).
_OPTION_LINE = re.compile(r"^[A-J]\. ", re.MULTILINE)


def option_count(question: str | None, kind: str | None) -> int | None:
    """The option count of an ``mc`` question read from its text (its ``A. ...`` lines, as the
    loaders write them), ``None`` for other kinds or a text without option lines."""
    if kind != "mc" or not question:
        return None
    return len(_OPTION_LINE.findall(question)) or None


def answer_fields(completion: str | None, kind: str | None, n_choices: int | None,
                  question: str | None = None) -> tuple[str | None, str | None]:
    """``(answer, how)`` of one sample for the ``model_calls`` columns: the scorer's reading
    (:func:`agora.tasks.answers.find_answer` with ``kind``, ``n_choices`` (4 options when unknown)
    and the ``question`` text when known, as the graphs read it: an echo of the question is no
    answer); ``how`` is ``"echo"`` for an output that only repeats the question (flagged, so a
    report can say so), ``"none"`` for another output without an answer, and ``(None, None)`` for
    no completion or no kind (not extracted)."""
    if completion is None or kind is None:
        return None, None
    found = find_answer(completion, kind, n_choices or 4, question=question)  # type: ignore[arg-type]
    if found.answer is None:
        return None, "echo" if found.reason == "echo" else "none"
    return found.answer, found.how



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
        "answer": None, "how": None, "sample_index": None, "request_id": None,
        "recipe": c.get("recipe"), "program_run": program_run(c),
    }


def program_run(c: dict[str, Any]) -> str | None:
    """``model_calls.program_run`` of a trace record: JSON ``{"program", "output", "error",
    "seconds"}`` when a program-of-thought recipe ran (or tried to run) a program, else ``None``."""
    if not any(k in c for k in ("program", "program_error")):
        return None
    return _json({"program": c.get("program"), "output": c.get("program_output"), "error": c.get("program_error"),
                  "seconds": c.get("program_s")})


def _upsert(conn: Any, table: str, rows: list[dict[str, Any]], pk: tuple[str, ...]) -> None:
    """Insert ``rows`` (all with the first row's keys) into ``table``, updating those columns of
    rows whose primary key ``pk`` exists: sqlite-utils' ``upsert_all`` in one ``executemany``.
    Lists and dicts are stored as JSON, as sqlite-utils does."""
    if not rows:
        return
    cols = list(rows[0])
    names = ", ".join(f"[{c}]" for c in cols)
    updates = ", ".join(f"[{c}] = excluded.[{c}]" for c in cols if c not in pk)
    sql = (f"INSERT INTO [{table}] ({names}) VALUES ({', '.join('?' * len(cols))}) "
           f"ON CONFLICT ({', '.join(f'[{c}]' for c in pk)}) DO UPDATE SET {updates}")
    params = [tuple(_json(v) if isinstance(v, (dict, list, tuple)) else v for v in (r[c] for c in cols)) for r in rows]
    try:
        conn.executemany(sql, params)
    except (UnicodeEncodeError, OverflowError):  # a lone surrogate (a model's reply, a gold answer) or an
        # integer past SQLite's 64 bits (a server's token count): the rows again, made valid
        conn.executemany(sql, _clean_rows(table, rows, params))  # upserts: rows written before are rewritten



#: A lone UTF-16 surrogate (``\ud800``–``\udfff``): valid in a Python string, not in UTF-8 or SQLite.
_SURROGATE = re.compile("[\ud800-\udfff]")


#: The integers SQLite stores (64-bit signed); :func:`_clean_text` makes others NULL.
_INT_RANGE = (-(2**63), 2**63 - 1)


def _clean_text(value: Any) -> Any:
    """``value`` with lone surrogates replaced by U+FFFD (a surrogate pair becomes its character),
    ``None`` for an integer SQLite cannot store; anything else unchanged."""
    if isinstance(value, int) and not isinstance(value, bool) and not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
        return None
    if not isinstance(value, str) or not _SURROGATE.search(value):
        return value
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _clean_rows(table: str, rows: list[dict[str, Any]], params: list[tuple]) -> list[tuple]:
    """``params`` with lone surrogates replaced (:func:`_clean_text`), one warning per row changed."""
    cols = list(rows[0])
    out = []
    for row, values in zip(rows, params):
        cleaned = tuple(_clean_text(v) for v in values)
        changed = [c for c, a, b in zip(cols, values, cleaned) if a is not b]
        if changed:
            key = row.get("call_id") or row.get("question_id") or row.get("run_id")
            log.warning("%s row %s: lone UTF-16 surrogates (not valid UTF-8) in %s recorded as U+FFFD, or an "
                        "integer beyond 64 bits as NULL",
                        table, key, ", ".join(changed))
        out.append(cleaned)
    return out


def clean_rows(table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (dicts) made storable: lone surrogates as U+FFFD, integers beyond 64 bits as NULL
    (:func:`_clean_text`), one logged warning per row changed. For writers that do not go through
    :meth:`TraceStore.record_question` (duels, sessions)."""
    if not rows:
        return rows
    cleaned = []
    for row in rows:
        [values] = _clean_rows(table, [row], [tuple(row.values())])
        cleaned.append(dict(zip(row, values)))
    return cleaned


def _bool(value: Any) -> int | None:
    return None if value is None else int(bool(value))
