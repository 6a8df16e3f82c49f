"""What a bench ran and its record in the trace DB: :class:`BenchSpec` (its tasks, methods and runs,
enough to rebuild its report from the trace DB alone), the ``benches`` and ``bench_cells`` tables
(:func:`record_bench`, :func:`read_bench_spec`) and the text of ``bench.json`` (:func:`report_json`).

Tables (one transaction per report; a rerun of the bench id replaces its rows):

``benches``: one row per bench (``bench_id`` primary key): spec (JSON :class:`BenchSpec`), report
    (JSON, what ``bench.json`` holds), complete (0/1: every test question of every run answered or
    failed), created_at, updated_at.
``bench_cells``: one row per bench, task and method (primary key ``bench_id, task, method``), the
    task ``"macro"`` for the macro-average: run_id, questions (scored), failed (questions or method
    failures, not scored), accuracy, ci_low, ci_high, calls_per_q, samples_per_q, tokens_per_q,
    model_s_per_q, wall_s_per_q.

The report itself is :func:`agora.traces.bench.bench_report`'s.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agora.traces.store import TraceStore, now

BENCHES = {"bench_id": str, "spec": str, "report": str, "complete": int, "created_at": str, "updated_at": str}
BENCH_CELLS = {
    "bench_id": str, "task": str, "method": str, "run_id": str, "questions": int, "failed": int,
    "accuracy": float, "ci_low": float, "ci_high": float, "calls_per_q": float, "samples_per_q": float,
    "tokens_per_q": float, "model_s_per_q": float, "wall_s_per_q": float,
}


# ---------------------------------------------------------------------------- the spec of a bench


@dataclass(frozen=True, slots=True)
class BenchTask:
    """One task of a bench: its file and the runs that answered its test questions."""

    name: str
    path: str | None
    format: str
    question_ids: tuple[str, ...]
    """The test questions, in order (every run of the task answers these)."""
    runs: dict[str, str]
    """Protocol → run id (``align``, ``comed``)."""


@dataclass(frozen=True, slots=True)
class BenchSpec:
    """What a bench ran: enough to rebuild its report from the trace DB alone."""

    bench_id: str
    tasks: tuple[BenchTask, ...]
    methods: dict[str, str]
    """Method → the protocol whose run computes it, in report order."""
    sharing: dict[str, str]
    """Method → the samples it draws on (methods naming the same samples share them)."""
    calibration: tuple[dict[str, Any], ...] = ()
    """How COMED's thresholds were chosen, per scope (a task name, or ``*`` for all tasks):
    ``source`` (a sentence), ``thresholds``, ``n_anchor`` and, when calibrated here, the dev
    ``run_id``, ``questions``, ``objective``, ``rescues``, ``harms``, ``calls_per_question``,
    ``lambda``, ``max_calls``, ``dropped`` (dev questions dropped because they were test questions)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The protocols' settings and the pool (for the report's header)."""
    renames: dict[str, dict[str, str]] = field(default_factory=dict)
    """Protocol → {method as its run records it → method in this bench}: a run computing a method
    under another name (the routed COMED run's ``comed`` is the bench's ``comed_routed``)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BenchSpec":
        tasks = tuple(BenchTask(**{**t, "question_ids": tuple(t["question_ids"])}) for t in data["tasks"])
        return cls(**{**data, "tasks": tasks, "calibration": tuple(data.get("calibration") or ())})


# ---------------------------------------------------------------------------- JSON and the trace DB


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)


def _finite(value: Any) -> Any:
    """NaN as ``null``: JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def report_json(report: dict[str, Any]) -> str:
    """The text of ``bench.json``: ``report`` indented, NaN as ``null``, numpy numbers as numbers."""
    return json.dumps(_finite(report), indent=2, ensure_ascii=False, default=_json_default) + "\n"


def record_bench(store: TraceStore, spec: BenchSpec, report: dict[str, Any] | None = None) -> None:
    """Write the bench's spec (and, when given, its report and cells) to ``benches`` / ``bench_cells``."""
    with store.transaction() as db:
        db["benches"].create(BENCHES, pk="bench_id", if_not_exists=True)
        db["bench_cells"].create(BENCH_CELLS, pk=("bench_id", "task", "method"), if_not_exists=True)
        old = next(iter(db["benches"].rows_where("bench_id = ?", [spec.bench_id])), None)
        db["benches"].upsert({
            "bench_id": spec.bench_id, "spec": json.dumps(spec.to_json(), default=_json_default),
            "report": None if report is None else json.dumps(_finite(report), default=_json_default),
            "complete": None if report is None else int(report["complete"]),
            "created_at": old["created_at"] if old else now(), "updated_at": now()}, pk="bench_id")
        if report is None:
            return
        db.execute("delete from bench_cells where bench_id = ?", [spec.bench_id])
        rows = [{"bench_id": spec.bench_id, "failed": c["failed_questions"] + c["method_failed"],
                 **{k: c[k] for k in BENCH_CELLS if k in c and k not in ("bench_id", "failed")}} for c in report["cells"]]
        rows += [{"bench_id": spec.bench_id, "task": "macro", "method": m["method"], "run_id": None,
                  "questions": None, "failed": None,
                  **{k: m[k] for k in BENCH_CELLS if k in m and k not in ("bench_id", "task", "method")}}
                 for m in report["macro"]]
        if rows:
            db["bench_cells"].insert_all([{k: _finite(v) for k, v in r.items()} for r in rows], pk=("bench_id", "task", "method"))


def read_bench_spec(store: TraceStore, bench_id: str) -> BenchSpec | None:
    """The spec a bench recorded, or ``None``."""
    if "benches" not in store.db.table_names():
        return None
    row = next(iter(store.db["benches"].rows_where("bench_id = ?", [bench_id])), None)
    return None if row is None else BenchSpec.from_json(json.loads(row["spec"]))
