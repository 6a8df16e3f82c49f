"""Phase bookkeeping for long, resumable experiments (``benchmarks/self_improvement.py``).

A :class:`PhaseBook` is one JSON file per run id: the settings the run was started with, and one
entry per finished phase (its result, wall and CPU seconds, when it finished). ``book.run(name,
fn)`` returns the stored result of a finished phase without calling ``fn``; otherwise it calls
``fn()``, measures it, and records it **only when it returns** (an exception or Ctrl-C leaves the
phase unfinished, with the cost of the attempt kept under ``unfinished`` and added to the phase's
total when it finishes, so a rerun redoes it; phases that checkpoint themselves, such as
:func:`agora.graphs.runner.run_problems`, then resume inside). Each write replaces the file
atomically. Reopening a run id with other settings is refused (it would mix two experiments),
unless the differing keys are listed as ``mutable`` (sizes a rerun may change, e.g. which phases
to run).

``record=`` names a second copy of the book, written with every write (e.g. inside a git checkout,
so a run outlives the machine it ran on). A book whose file is missing starts from that copy: the
finished phases' results and costs, and the cost of interrupted attempts, come back; what a phase
left only on the old machine (trace databases, adapters) does not, and the caller checks for it.

Each finished phase also records the ``machine`` it ran on (:func:`machine`: CPU model, widest
x86 vector extension, core count), because greedy decoding on llama.cpp is reproducible only
between machines of one kind: float summation order differs between AVX2 and AVX-512 kernels, and
near-ties flip, so a paired comparison across kinds carries a machine effect.

``read_only=True`` opens a book to read it (a report while the run goes on): nothing is written, not
even at open, so a reader cannot put back an older state over a phase the running process just
finished; :meth:`PhaseBook.run` then refuses any phase that has not finished.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping
from agora.tasks.errors import InputError


class PhaseBookError(InputError):
    """A run id reopened with other settings."""


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (all threads: llama.cpp and torch)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class PhaseBook:
    """Which phases of a run are done, with their results and costs (module docstring)."""

    def __init__(self, path: str | Path, settings: dict[str, Any], *, mutable: Iterable[str] = (),
                 record: str | Path | None = None, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        self.record = Path(record) if record is not None else None
        self.settings = json.loads(json.dumps(settings, default=str))
        self.mutable = set(mutable)
        lost = not self.path.is_file() and self.record is not None and self.record.is_file()
        source = self.record if lost else self.path  # a new machine: start from the copy
        if source.is_file():
            data = json.loads(source.read_text(encoding="utf-8"))
            before = data.get("settings", {})
            changed = sorted(k for k in set(before) | set(self.settings)
                             if k not in self.mutable and before.get(k) != self.settings.get(k))
            if changed:
                raise PhaseBookError(
                    f"{source}: this run was started with other settings ("
                    + "; ".join(f"{k} {before.get(k)!r} → {self.settings.get(k)!r}" for k in changed)
                    + "); rerun with the same options to resume it, or pick a new --run-id")
            self.phases: dict[str, dict[str, Any]] = data.get("phases", {})
            self.attempts: dict[str, dict[str, Any]] = data.get("unfinished", {})
            self.created_at = data.get("created_at")
            if self.record is not None:  # both copies in step from the start
                self._write()
        else:
            self.phases, self.attempts, self.created_at = {}, {}, _now()
            self._write()

    def done(self, name: str) -> bool:
        return name in self.phases

    def result(self, name: str) -> Any:
        """The stored result of a finished phase.

        Raises:
            KeyError: the phase has not finished.
        """
        return self.phases[name]["result"]

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        """``fn()``'s result, computed once: a finished phase returns its stored result (JSON round-trip)."""
        if name in self.phases:
            return self.phases[name]["result"]
        if self.read_only:
            raise PhaseBookError(f"{self.path}: phase {name!r} has not finished and this book is open read-only")
        start_wall, start_cpu = time.perf_counter(), cpu_seconds()
        earlier = self.attempts.get(name, {"wall_s": 0.0, "cpu_s": 0.0, "attempts": 0})
        try:
            result = fn()
        except BaseException:
            # An interrupted attempt's cost still counts: the phase's total includes every attempt.
            self.attempts[name] = {"wall_s": earlier["wall_s"] + time.perf_counter() - start_wall,
                                   "cpu_s": earlier["cpu_s"] + cpu_seconds() - start_cpu,
                                   "attempts": earlier["attempts"] + 1}
            self._write()
            raise
        self.phases[name] = {"result": json.loads(json.dumps(result, default=str)),
                             "wall_s": earlier["wall_s"] + time.perf_counter() - start_wall,
                             "cpu_s": earlier["cpu_s"] + cpu_seconds() - start_cpu,
                             "attempts": earlier["attempts"] + 1, "finished_at": _now(),
                             "machine": machine()}
        self.attempts.pop(name, None)
        self._write()
        return self.phases[name]["result"]

    def redo(self, name: str) -> bool:
        """Mark the finished phase ``name`` unfinished, so the next :meth:`run` computes it again (e.g.
        its answers re-read after a fix to how they are read; a phase that keeps its own work, such as
        an evaluation's answer file, redoes only what it must). Its cost so far is kept as an earlier
        attempt's, so the phase's total still counts it.

        Returns:
            False when ``name`` has not finished (nothing changed), else True.
        """
        if name not in self.phases or self.read_only:
            return False
        entry = self.phases.pop(name)
        earlier = self.attempts.get(name, {"wall_s": 0.0, "cpu_s": 0.0, "attempts": 0})
        self.attempts[name] = {"wall_s": earlier["wall_s"] + entry["wall_s"], "cpu_s": earlier["cpu_s"] + entry["cpu_s"],
                               "attempts": earlier["attempts"] + entry.get("attempts", 1)}
        self._write()
        return True

    def adopt(self, name: str, other: str | Path, *,
              same: Iterable[str] | Mapping[str, Any] = (), source: str | None = None) -> bool:
        """Copy the finished phase ``name`` from another run's book (its phases.json path), so this
        run pairs with it instead of recomputing it (e.g. one base-model evaluation shared by runs).

        The copy keeps the other run's result, costs and machine and gains ``"adopted_from"``
        (that book's path; with ``source``, ``"book#phase"``). ``same`` names settings both runs must
        share for the copy to mean the same thing (e.g. the evaluation data and size); as a mapping,
        its values are the defaults of settings a book leaves out. ``source``: the other book's phase
        to copy as ``name`` (default ``name``; e.g. a first round's arm evaluation as a second
        round's base).

        Returns:
            False when this book already has ``name`` (nothing copied), else True.

        Raises:
            PhaseBookError: the other book cannot be read, has not finished ``name``, or differs from
                this one in a ``same`` setting.
        """
        if name in self.phases:
            return False
        path = Path(other)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            other_settings, other_phases = data.get("settings", {}), data.get("phases", {})
        except (OSError, ValueError, AttributeError) as exc:
            raise PhaseBookError(f"{path}: not a readable phase book ({exc})") from None
        source = source or name
        if source not in other_phases:
            raise PhaseBookError(f"{path}: phase {source!r} has not finished there")
        defaults = dict(same) if isinstance(same, Mapping) else {}
        there = {k: other_settings.get(k, defaults.get(k)) for k in same}
        here = {k: self.settings.get(k, defaults.get(k)) for k in same}
        differ = sorted(k for k in same if there[k] != here[k])
        if differ:
            raise PhaseBookError(f"{path}: phase {source!r} ran with other settings ("
                                 + "; ".join(f"{k} {there[k]!r} there, {here[k]!r} here" for k in differ) + ")")
        self.phases[name] = {**other_phases[source],
                             "adopted_from": str(path) if source == name else f"{path}#{source}"}
        self._write()
        return True

    def costs(self) -> dict[str, dict[str, float]]:
        """``{phase: {"wall_s", "cpu_s"}}`` of the finished phases, in the order they finished."""
        return {k: {"wall_s": v["wall_s"], "cpu_s": v["cpu_s"]} for k, v in self.phases.items()}

    def _write(self) -> None:
        if self.read_only:
            return
        text = json.dumps({"settings": self.settings, "created_at": self.created_at,
                           "phases": self.phases, "unfinished": self.attempts}, indent=2)
        for path in (self.path, self.record) if self.record is not None else (self.path,):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
            tmp.write_text(text + "\n", encoding="utf-8")
            tmp.replace(path)


def machine(cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, Any]:
    """The kind of machine this process runs on: ``{"cpu", "isa", "cores"}``.

    ``cpu`` is the model name from ``cpuinfo`` (``platform.processor()`` elsewhere); ``isa``
    the widest x86 vector extension the CPU reports (``"amx"``, ``"avx512"``, ``"avx2"``, ``"avx"``),
    else the architecture (``platform.machine()``); ``cores`` the CPUs this process may use.
    """
    import platform

    model, flags = "", set()
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    isa = next((name for name, flag in (("amx", "amx_tile"), ("avx512", "avx512f"), ("avx2", "avx2"),
                                        ("avx", "avx")) if flag in flags), platform.machine())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {"cpu": model or platform.processor(), "isa": isa, "cores": cores}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
