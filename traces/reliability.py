"""Member reliabilities read from a dev run: each member's per-sample accuracy on the run's questions
(:func:`agora.traces.members.member_rows`: every successful sample of a recorded question with gold,
scored by :func:`agora.tasks.scoring.score_answer`).

What SLM-MUX's tie-breaker and ALIGN's ``calibrated`` utility read when their settings name a
``dev_run`` (:mod:`agora.agents.reliability`). A dev run answers dev questions only: the bench's dev
split, or ``benchmarks/member_table.py``'s run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agora.tasks.errors import InputError
from agora.traces.bundle import FILE_KINDS
from agora.traces.members import member_rows
from agora.traces.store import TraceStore, store_backend

_CACHE: dict[tuple[Any, ...], dict[str, float]] = {}
_LOCK = threading.Lock()


class DevRunError(InputError):
    """A dev run that cannot give reliabilities: no such database or run, or no scored sample. One line.

    ``field``: the setting at fault, ``"dev_db"`` (no such database file, or not a file) or
    ``"dev_run"`` (no such run in the database, or no scored sample of it)."""

    def __init__(self, message: str, field: str = "dev_run") -> None:
        super().__init__(message)
        self.field = field


def dev_accuracy(db: str | Path | TraceStore, run_id: str) -> dict[str, float]:
    """Member → per-sample accuracy (correct / scored samples) in the dev run ``run_id`` of ``db``,
    for every member with at least one scored sample, in the order of :func:`~agora.traces.members.member_rows`.

    A SQLite file's result is kept per process until the file changes (a graph reads it once per
    question).

    Raises:
        DevRunError: no such database file, no run ``run_id`` in it, or no sample of it scored.
    """
    key: tuple[Any, ...] | None = None
    if not isinstance(db, TraceStore) and store_backend(db) is None:
        path = Path(db)
        if not path.is_file():
            if path.exists():  # a folder, a FIFO, a device: say what it is, as `agora import` does
                mode = path.stat().st_mode
                what = next((name for test, name in FILE_KINDS if test(mode)), "not a regular file")
                raise DevRunError(f"dev run {run_id!r}: trace database {db} is {what}, not a database file",
                                  "dev_db")
            raise DevRunError(f"dev run {run_id!r}: trace database {db} not found", "dev_db")
        stat = path.stat()
        key = (os.path.abspath(path), stat.st_mtime_ns, stat.st_size, run_id)
        with _LOCK:
            if key in _CACHE:
                return dict(_CACHE[key])
    store = TraceStore.reading(db)
    try:
        if store.get_run(run_id) is None:
            raise DevRunError(f"dev run {run_id!r}: no such run in {db}")
        rows = member_rows(store, run_id)
    finally:
        if store is not db:
            store.close()
    out = {r.model: r.correct / r.scored for r in rows if r.scored}
    if not out:
        raise DevRunError(f"dev run {run_id!r} in {db}: no sample of a question with a gold answer")
    if key is not None:
        with _LOCK:
            _CACHE[key] = out
    return dict(out)


def reliabilities(given: Mapping[str, float] | tuple[tuple[str, float], ...], dev_db: str | Path | None,
                  dev_run: str | None) -> dict[str, float]:
    """The settings' member accuracies: those ``given`` (``dev_accuracy``), the others from the dev
    run ``dev_run`` of ``dev_db`` when one is named.

    Raises:
        DevRunError: as :func:`dev_accuracy`.
    """
    out = dict(given)
    if dev_run:
        out = {**dev_accuracy(dev_db or "agora.db", dev_run), **out}
    return out
