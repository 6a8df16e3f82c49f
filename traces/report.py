"""Method tables from the trace store: accuracy with a bootstrap CI and cost per method."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np

from agora.agents.stats import bootstrap_ci  # noqa: F401 (its home is agents/, below traces)
from agora.traces.store import TraceStore, TraceStoreError, answer_fields, check_db_path, store_backend


MIN_QUESTIONS = 30
"""Fewest (paired) questions a cell, difference or claim needs before a report states it as a
finding; below it, or with a degenerate interval (low == high), it reads :data:`TOO_FEW`."""
TOO_FEW = "too few questions"


def too_few(questions: int, low: float, high: float) -> bool:
    """Whether an estimate on ``questions`` (paired) questions with interval ``[low, high]`` is too
    thin to report as a finding: fewer than :data:`MIN_QUESTIONS` questions, or a degenerate
    (``low == high``: every resample equal) or missing interval.

    >>> too_few(2, 0.0, 0.0), too_few(40, -0.1, 0.2), too_few(40, 0.0, 0.0)
    (True, False, True)
    """
    return questions < MIN_QUESTIONS or low != low or high != high or low == high


@dataclass(frozen=True, slots=True)
class MethodRow:
    method: str
    questions: int
    """Questions with a gold answer that this method answered (or failed to)."""
    accuracy: float
    ci_low: float
    ci_high: float
    samples_per_question: float
    """Mean model samples (calls) the method's answer was drawn from."""
    completion_tokens: int
    """Generated tokens of those samples, over all questions."""
    model_time_s: float
    """Sum of the model latencies of those samples, seconds."""
    failed: int = 0
    """Recorded questions on which this method failed: its answer drew on no sample (its model
    calls failed), so it is neither right nor wrong and not in ``questions`` or ``accuracy``.
    Questions that failed altogether are not recorded: :func:`failed_questions`."""
    guessed: int = 0
    """Scored questions whose answer came from the scorer's fallback (the last number or letter
    of an output without an explicit final answer: docs/scoring.md), not from a stated answer."""
    shared_samples_per_question: float = 0.0
    """Of ``samples_per_question``, the mean samples taken from a bench's shared candidate pool
    (drawn once per question by the bench's candidates run and counted there; 0 outside a bench)."""

    @property
    def too_few(self) -> bool:
        """Too few scored questions (or a degenerate interval) to read the accuracy as a finding."""
        return too_few(self.questions, self.ci_low, self.ci_high)


def method_table(store: TraceStore, run_id: str, order: Sequence[str] = ()) -> list[MethodRow]:
    """One row per method of a run, in ``order`` first, then alphabetically."""
    by_method: dict[str, list[dict]] = {}
    for row in store.results(run_id):
        by_method.setdefault(row["method"], []).append(row)
    names = [m for m in order if m in by_method] + sorted(m for m in by_method if m not in order)
    rows = []
    for m in names:
        rs = by_method[m]
        scored = [r["correct"] for r in rs if r["correct"] is not None and r["samples"] != 0]
        mean, lo, hi = bootstrap_ci(scored)
        rows.append(MethodRow(
            method=m, questions=len(scored), accuracy=mean, ci_low=lo, ci_high=hi,
            samples_per_question=float(np.mean([r["samples"] or 0 for r in rs])),
            completion_tokens=int(sum(r["completion_tokens"] or 0 for r in rs)),
            model_time_s=float(sum(r["latency_s"] or 0.0 for r in rs)),
            failed=sum(r["samples"] == 0 for r in rs),
            guessed=sum(r.get("how") == "fallback" for r in rs if r["correct"] is not None and r["samples"] != 0),
            shared_samples_per_question=float(np.mean([r.get("shared_samples") or 0 for r in rs])),
        ))
    return rows


def failed_questions(store: TraceStore, run_id: str) -> dict[str, str]:
    """Questions of a run with model calls but no recorded answer (failed, or aborted by an
    unreachable model; a rerun retries them), each with its last model-call error."""
    rows = store.db.query(
        "select c.question_id, c.error from model_calls c where c.run_id = ? and not exists "
        "(select 1 from questions q where q.run_id = c.run_id and q.question_id = c.question_id) "
        "order by c.created_at, c.attempt", [run_id])
    out: dict[str, str] = {}
    for r in rows:
        if r["error"] or r["question_id"] not in out:
            out[r["question_id"]] = r["error"] or ""
    return out


def run_totals(store: TraceStore, run_id: str) -> dict[str, float]:
    """Model calls, tokens and failed attempts of a run, from ``model_calls``, question wall time,
    and ``failed_questions`` (:func:`failed_questions`; meaningful for benchmark runs only, whose
    model calls belong to questions). ``calls_unknown_usage``: samples whose model reported no
    token usage (NULL tokens, not in the token sums: :func:`unknown_tokens_note`)."""
    q = store.db.query(
        "select count(*) as questions, coalesce(sum(wall_s), 0) as wall_s from questions where run_id = ?",
        [run_id])
    c = store.db.query(
        "select sum(error is null) as calls, sum(error is not null) as failed, "
        "coalesce(sum(prompt_tokens), 0) as prompt_tokens, coalesce(sum(completion_tokens), 0) as completion_tokens, "
        "sum(error is null and completion_tokens is null) as calls_unknown_usage "
        "from model_calls where run_id = ?", [run_id])
    out = {**next(q), **next(c), "failed_questions": len(failed_questions(store, run_id))}
    return {k: (v or 0) for k, v in out.items()}


def disagreements(store: TraceStore, run_id: str, a: str, b: str) -> list[dict[str, object]]:
    """The questions of run ``run_id`` on which methods ``a`` and ``b`` answered differently, in
    question order: ``{"question_id", "gold", a: {"answer", "correct"}, b: {...}}`` (``correct``
    ``None``: unscored, or a method whose answer drew on no sample). A question one method has no
    result for is left out.

    Raises:
        ValueError: ``a`` or ``b`` is not a method of the run (one line naming the run's methods).
    """
    by_q: dict[str, dict[str, dict]] = {}
    for r in store.results(run_id):
        by_q.setdefault(r["question_id"], {})[r["method"]] = r
    methods = sorted({m for ms in by_q.values() for m in ms})
    for m in (a, b):
        if m not in methods:
            raise ValueError(f"{store.path}: run {run_id!r} has no method {m!r} (its methods: "
                             f"{', '.join(methods) or 'none recorded'})")
    gold = {q["question_id"]: q["gold"] for q in store.questions(run_id)}
    out: list[dict[str, object]] = []
    for qid, ms in by_q.items():
        if a in ms and b in ms and ms[a]["answer"] != ms[b]["answer"]:
            out.append({"question_id": qid, "gold": gold.get(qid),
                        **{m: {"answer": ms[m]["answer"], "correct": None if ms[m]["correct"] is None
                               else bool(ms[m]["correct"])} for m in (a, b)}})
    return out


def unknown_tokens_note(totals: dict[str, float]) -> str:
    """``" (+ unknown for N samples whose model reports no usage)"``, or ``""`` when every sample's
    tokens are known: printed after a token total so that a sum missing some samples says so."""
    unknown = int(totals.get("calls_unknown_usage") or 0)
    return f" (+ unknown for {unknown} sample{'s' * (unknown != 1)} whose model reports no usage)" if unknown else ""


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
    ``too_few``: fewer than :data:`MIN_QUESTIONS` scored questions or a degenerate interval), how the samples' answers were found (``marker``, ``boxed``, ``####``,
    ``fallback``, ``echo``, ``none``; ``unknown`` in an old database not backfilled), on how many
    questions the methods disagree, and ``shared``: the cost of the samples it took from a bench's
    shared candidates, whose rows are the candidates run's (:func:`shared_totals`; ``totals`` counts
    the run's own rows only).

    Raises:
        ValueError: no such run, or shared samples whose mapping cannot be rebuilt (:func:`shared_takes`).
    """
    run = store.get_run(run_id) if "runs" in store.db.table_names() else None
    if run is None:
        raise ValueError(f"{store.path}: no run {run_id!r} (`agora report runs --db {store.path}` lists them)")
    totals = run_totals(store, run_id)
    hows: dict[str, int] = {}
    if "how" in store.db["model_calls"].columns_dict:
        for r in store.db.query("select coalesce(how, 'unknown') as how, count(*) as n from model_calls "
                                "where run_id = ? and error is null group by 1 order by 2 desc", [run_id]):
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


# ---------------------------------------------------------------------------- shared candidates (issue 32)

#: The key a protocol run's recorded settings (``runs.config``) carry when it took ``agora bench``'s
#: shared candidates: the id of the candidates run they were drawn in (the same key as
#: :data:`agora.runs.shared.SHARED_KEY`, which lives above this layer).
SHARED_KEY = "shared_candidates"


def _config_of(row: dict | None) -> dict:
    import json

    if row is None:
        return {}
    config = row.get("config")
    config = json.loads(config or "{}") if isinstance(config, str) else (config or {})
    return config if isinstance(config, dict) else {}


def shared_takes(store: TraceStore, run_id: str, details: dict[str, dict] | None = None) -> dict[str, list[dict]]:
    """The shared candidates run ``run_id`` took, per question: question id → the samples its first
    stage took from the bench's candidates run (its recorded ``config[SHARED_KEY]``), mapped the way
    the protocol took them (:func:`agora.graphs.question.take_shared`), as dicts with the
    ``model_calls`` fields ``call_id``, ``model``, ``answer``, ``how``, ``completion``,
    ``prompt_tokens``, ``completion_tokens``, ``latency_s``, plus ``node`` and ``role`` as the
    protocol saw them, ``agent``, ``sample_index`` (0-based within the taker's share) and
    ``shared_from`` (the candidates run). Empty for a run that took none.

    - ALIGN: agent ``i`` plays ``models[i % len(models)]`` (``config.models``, else the candidates
      run's models, which are the pool's); the ``j``-th agent on a model takes that model's samples
      ``j·k .. j·k + k − 1`` (role ``agent``, node ``agent_sample``).
    - COMED: the anchor (``detail.route.anchor``) takes its model's first ``n_anchor`` samples
      (role ``anchor``, node ``anchor``). MoA's, debate's and the council's first steps, which take
      shared samples too, are not mapped (no replay rule reads them).

    An agent or anchor with rows of its own in ``run_id`` drew its own samples (the shared pool was
    too small, or missing for the question) and takes nothing here. ``details``: question id →
    its recorded ``detail`` (read from ``questions`` when ``None``).

    Raises:
        ValueError: (one line naming the run) the mapping cannot be rebuilt from what is stored: the
            candidates run is missing, the run's settings lack ``n_agents``/``k_samples``/``n_anchor``,
            the pool's models are unknown, a question has neither its own rows nor enough shared
            samples, or the shared samples no longer give the answers the run recorded.
    """
    import json

    run = store.get_run(run_id) if "runs" in store.db.table_names() else None
    config = _config_of(run)
    source = config.get(SHARED_KEY)
    if not source:
        return {}
    protocol = run["protocol"]

    def refuse(why: str) -> ValueError:
        return ValueError(f"run {run_id!r} took shared candidates from {source!r}, but {why}: its replay and "
                          "report would be wrong, so they are refused")

    if protocol not in ("align", "comed"):
        raise refuse(f"the trace tools map shared samples for align and comed runs only, not {protocol}")
    cand_run = store.get_run(source)
    if cand_run is None:
        raise refuse("that run is not in this database")
    if details is None:
        details = {q["question_id"]: json.loads(q.get("detail") or "{}") or {} for q in store.questions(run_id)}
    have = set(store.db["model_calls"].columns_dict)
    cols = ["call_id", "question_id", "model", "completion", "prompt_tokens", "completion_tokens", "latency_s",
            "error"] + [c for c in ("answer", "how", "sample_index") if c in have]
    pools: dict[str, dict[str, list[dict]]] = {}
    for r in store.db.query(f"select {', '.join(cols)} from model_calls where run_id = ? and node = 'candidates' "
                            "order by rowid", [source]):
        if r["question_id"] in details:
            pools.setdefault(r["question_id"], {}).setdefault(r["model"], []).append(r)
    for per in pools.values():  # as agora.graphs.candidates.shared_from_rows: successful rows, by sample index
        for m, rows in per.items():
            per[m] = [r for r in sorted(rows, key=lambda r: r.get("sample_index") or 0) if not r["error"]]
    own = {(r["question_id"], r["node"], r["agent"]) for r in store.db.query(
        "select distinct question_id, node, agent from model_calls where run_id = ?", [run_id])}
    own |= {(q, node, "any") for q, node, _agent in own}

    def take(qid: str, model: str, start: int, k: int, node: str, role: str, agent: int | None) -> list[dict]:
        mine = pools.get(qid, {}).get(model, [])
        if len(mine) < start + k:
            raise refuse(f"question {qid!r}: {node} ({model}) has no rows of its own and {source!r} holds "
                         f"{len(mine)} of the {start + k} samples of {model} it would have taken")
        out = []
        for i, r in enumerate(mine[start:start + k]):
            answer, how = r.get("answer"), r.get("how")
            if how is None:  # not extracted: an old database
                q = store.db.query("select kind, n_choices from questions where run_id = ? and question_id = ?",
                                   [run_id, qid])
                q = next(q, {}) or {}
                answer, how = answer_fields(r["completion"], q.get("kind") or "math", q.get("n_choices"))
            out.append({"call_id": r["call_id"], "node": node, "role": role, "agent": agent, "model": model,
                        "sample_index": i, "answer": answer, "how": how, "completion": r["completion"],
                        "prompt_tokens": r["prompt_tokens"] or 0, "completion_tokens": r["completion_tokens"] or 0,
                        "latency_s": r["latency_s"] or 0.0, "shared_from": source})
        return out

    takes: dict[str, list[dict]] = {}
    if protocol == "align":
        n, k = config.get("n_agents"), config.get("k_samples")
        models = list(config.get("models") or _config_of(cand_run).get("models") or [])
        if not n or not k:
            raise refuse("its recorded settings lack n_agents or k_samples")
        if not models:
            raise refuse(f"neither it nor {source!r} records the pool's models (which model each agent played)")
        for qid, detail in details.items():
            got: list[dict] = []
            for i in range(int(n)):
                model = models[i % len(models)]
                if (qid, "agent_sample", i) in own:
                    continue
                share = sum(1 for a in range(i) if models[a % len(models)] == model)
                got += take(qid, model, share * int(k), int(k), "agent_sample", "agent", i)
            by_agent = {}
            for s in got:
                by_agent.setdefault(s["agent"], []).append(s)
            for p in (detail or {}).get("proposals") or []:  # the answers the run proposed from them
                mine, idx = by_agent.get(p.get("agent")), p.get("candidate_index")
                if mine is not None and isinstance(idx, int) and 0 <= idx < len(mine) and \
                        mine[idx]["answer"] != p.get("answer"):
                    raise refuse(f"question {qid!r}: agent {p.get('agent')}'s sample {idx} in {source!r} answers "
                                 f"{mine[idx]['answer']!r}, the run recorded {p.get('answer')!r}")
            takes[qid] = got
    else:
        n = config.get("n_anchor")
        if not n:
            raise refuse("its recorded settings lack n_anchor")
        for qid, detail in details.items():
            if (qid, "anchor", "any") in own:
                continue
            model = ((detail or {}).get("route") or {}).get("anchor") or ((detail or {}).get("anchor") or {}).get("model")
            if not model:
                raise refuse(f"question {qid!r} records no anchor model")
            got = take(qid, model, 0, int(n), "anchor", "anchor", None)
            recorded = ((detail or {}).get("anchor") or {}).get("answers")
            if recorded is not None and list(recorded) != [s["answer"] for s in got]:
                raise refuse(f"question {qid!r}: the anchor's samples in {source!r} answer "
                             f"{[s['answer'] for s in got]}, the run recorded {list(recorded)}")
            takes[qid] = got
    return takes


def shared_totals(store: TraceStore, run_id: str) -> dict[str, object]:
    """The shared part of a run's cost (:func:`shared_takes`): ``shared_from`` (the candidates run,
    ``None`` for a run that took none), ``shared_calls`` (distinct shared ``model_calls`` rows, one per
    sample), ``shared_prompt_tokens``, ``shared_completion_tokens``. Not in :func:`run_totals`, which
    counts the run's own rows only; the shared rows are the candidates run's.

    Raises:
        ValueError: as :func:`shared_takes`.
    """
    source = _config_of(store.get_run(run_id) if "runs" in store.db.table_names() else None).get(SHARED_KEY)
    rows = {s["call_id"]: s for got in shared_takes(store, run_id).values() for s in got}
    return {"shared_from": source or None, "shared_calls": len(rows),
            "shared_prompt_tokens": sum(s["prompt_tokens"] for s in rows.values()),
            "shared_completion_tokens": sum(s["completion_tokens"] for s in rows.values())}
