"""Writing a bundle (``agora export``; format: :mod:`agora.traces.bundle`): the runs and benches asked
for, with the shared candidates runs they took samples from, written whole to a temporary file and
renamed over the target.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import stat
from pathlib import Path
from typing import Any, Sequence

from agora.traces import schema
from agora.traces.bundle import (BENCH_TABLES, DIGEST_KEY, FILE_KINDS, FORMAT, HEADER_DIGEST_KEY, VERSION, BundleError,
                                 BundleSummary, shared_source)
from agora.traces.resume import lookalike_note
from agora.traces.store import TraceStore, code_revision, now

def _table_info(store: TraceStore, table: str) -> tuple[list[tuple[str, str]], list[str]]:
    cols = store.db[table].columns
    pk = [c.name for c in sorted((c for c in cols if c.is_pk), key=lambda c: c.is_pk)]
    return [(c.name, (c.type or "").upper()) for c in cols], pk


def _plan(store: TraceStore, run_ids: Sequence[str], bench_ids: Sequence[str]) -> list[tuple[str, str, list[Any]]]:
    """(table, where clause, parameters) for each table the bundle carries, in file order."""
    names = store.db.table_names()
    marks = ", ".join("?" for _ in run_ids)
    out = [(t, f"run_id in ({marks})", list(run_ids)) for t in schema.TABLES if t in names]
    for t in sorted(names):
        if t in schema.TABLES or t in BENCH_TABLES or t.startswith("sqlite_") or t.startswith("checkpoint"):
            continue
        cols, pk = _table_info(store, t)
        if pk and any(c == "run_id" for c, _ in cols):
            out.append((t, f"run_id in ({marks})", list(run_ids)))
    if bench_ids:
        bmarks = ", ".join("?" for _ in bench_ids)
        out += [(t, f"bench_id in ({bmarks})", list(bench_ids)) for t in BENCH_TABLES if t in names]
    return out


def export_bundle(store: TraceStore, out: str | Path, run_ids: Sequence[str] = (),
                  bench_ids: Sequence[str] = ()) -> BundleSummary:
    """Write the runs ``run_ids`` and the benches ``bench_ids`` (each with every run whose id starts
    with ``<bench>:``) from ``store`` to the bundle ``out``: gzip-compressed when its name ends in
    ``.gz`` (:func:`compressed`), else plain JSON Lines. A bench still in its dev phase (runs, but no
    recorded spec yet) gives its runs only; importing them and rerunning the bench resumes it. A run
    whose recorded settings name a shared candidates run (:data:`agora.traces.bundle.SHARED_CANDIDATES_KEY`: a bench protocol run that took its first samples from
    ``<bench>:<task>:candidates``) brings that run along, since its samples live there
    (:attr:`agora.traces.bundle.BundleSummary.carried`).

    Every row is read in one snapshot of ``store`` (:meth:`agora.traces.store.TraceStore.snapshot`): a
    run another process is still writing is exported as it stood when the export began, whole.

    Raises:
        BundleError: nothing to export, a run or bench that is not in ``store``, a run whose shared
            candidates run is not in ``store``, or an unwritable ``out``.
    """
    out = Path(out)
    check_out_path(out)
    if out.exists() and store.path and Path(str(store.path)).exists() and out.samefile(str(store.path)):
        raise BundleError(f"{out}: that is the trace database being exported; pick another --out")
    with store.snapshot():  # a run still being written: its rows as of one moment, never a question's calls without it
        return _export(store, out, run_ids, bench_ids)


def _export(store: TraceStore, out: Path, run_ids: Sequence[str], bench_ids: Sequence[str]) -> BundleSummary:
    """:func:`export_bundle`, inside its snapshot of ``store``."""
    runs = list(dict.fromkeys(run_ids))
    known = set(store.run_ids())
    missing = [r for r in runs if r not in known]
    if missing:
        notes = "".join(lookalike_note(r, known, name_it=len(missing) > 1) for r in missing)  # a look-alike typed
        raise BundleError(f"{store.path}: no run {', '.join(map(repr, missing))} (`agora report runs` lists them)"
                          + notes)
    benches = []
    for b in dict.fromkeys(bench_ids):
        recorded = "benches" in store.db.table_names() and bool(list(store.db.query(
            "select 1 from benches where bench_id = ?", [b])))
        started = store.run_ids(f"{b}:")
        if not recorded and not started:
            raise BundleError(f"{store.path}: no bench {b!r}")
        if recorded:  # (a bench in its dev phase has runs but no spec yet: its runs alone are exported)
            benches.append(b)
        runs += [r for r in started if r not in runs]
    if not runs and benches:  # (benches recorded, their runs gone: the bench rows alone import as nothing)
        raise BundleError(f"{store.path}: bench {benches[0]!r} has no run in the database (runs {benches[0]}:...); "
                          "nothing to export")
    if not runs:
        raise BundleError("nothing to export: give --run-id or --bench-id")
    carried: dict[str, str] = {}
    for r in runs:  # (grows while read: a carried run may name its own)
        source = shared_source(store, r)
        if source is None or source in runs:
            continue
        if source not in known:
            raise BundleError(f"{store.path}: run {r!r} took its shared candidates from run {source!r}, which is not "
                              "in the database; its samples cannot be exported")
        runs.append(source)
        carried[source] = r
    plan = _plan(store, runs, benches)
    tables = {}
    for t, _, _ in plan:
        cols, pk = _table_info(store, t)
        tables[t] = {"columns": dict(cols), "primary_key": pk}
    header = {"format": FORMAT, "version": VERSION, "created_at": now(), "code_revision": code_revision(),
              "runs": runs, "benches": benches, "tables": tables,
              "doc": "gzip JSON Lines: this header, one {\"t\": table, \"v\": [values in columns order]} per row, "
                     "then {\"end\": true, \"rows\": {table: count}, \"sha256\": hex digest of the row lines, "
                     "\"header_sha256\": hex digest of this header line}; "
                     "see docs/traces.md"}
    counts: dict[str, int] = {}
    digest = hashlib.sha256()  # over the row lines as written (DIGEST_KEY)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.part")  # written whole, then renamed over --out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as raw, (gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") if compressed(out)
                                      else contextlib.nullcontext(raw)) as gz, \
                io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as f:
            head_line = json.dumps(header, ensure_ascii=False) + "\n"
            f.write(head_line)
            for t, where, params in plan:
                cols = list(tables[t]["columns"])
                names = ", ".join(f"[{c}]" for c in cols)
                n = 0
                for row in store.db.execute(f"select {names} from [{t}] where {where} order by rowid", params):
                    line = json.dumps({"t": t, "v": list(row)}, ensure_ascii=False) + "\n"
                    f.write(line)
                    digest.update(line.encode("utf-8"))
                    n += 1
                counts[t] = n
            f.write(json.dumps({"end": True, "rows": counts, DIGEST_KEY: digest.hexdigest(),
                                HEADER_DIGEST_KEY: hashlib.sha256(head_line.encode("utf-8")).hexdigest()}) + "\n")
        os.replace(tmp, out)
    except OSError as exc:
        raise BundleError(f"{out}: cannot write the bundle ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return BundleSummary(out, tuple(runs), tuple(benches), counts, out.stat().st_size, carried=carried)


def compressed(out: str | Path) -> bool:
    """Whether a bundle written to ``out`` is gzip-compressed: its name ends in ``.gz``
    (``*.agora.jsonl.gz``, :data:`agora.traces.bundle.SUFFIX`). Any other name gets the same lines as
    plain JSON Lines text, which ``agora import`` reads as well
    (:func:`agora.traces.bundle_reading.open_bundle`)."""
    return Path(out).name.lower().endswith(".gz")


def check_out_path(out: str | Path) -> None:
    """Refuse an ``out`` path that exists as anything but a regular file or a symbolic link (a
    folder, a FIFO, a device such as ``/dev/full``, a socket): writing a bundle replaces the path
    whole, which must never turn a device or a pipe into a plain file. A symbolic link is replaced
    itself, not its target.

    ``-`` (standard output, by the usual convention) is refused too: a bundle is a file.

    Raises:
        BundleError: one line naming the path and what it is.
    """
    if str(out) == "-":
        raise BundleError("--out -: a bundle is written to a file, not to standard output; give a file name (for a "
                          "file named '-', give its full path)")
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BundleError(f"--out {out}: cannot be examined ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    what = next((name for test, name in FILE_KINDS if test(mode)), "not a regular file")
    raise BundleError(f"--out {out}: {what}, not a regular file; a bundle replaces only a regular file or a "
                      "symbolic link (--force or not): pick a file path")
