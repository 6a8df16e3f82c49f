"""Trace bundles: one or more runs (or a whole bench) as one compressed, versioned file that any trace
database can import (``agora export`` / ``agora import``, issue 30; format: ``docs/traces.md``).

A bundle is gzip-compressed JSON Lines (``*.agora.jsonl.gz``):

1. a header object: ``format`` (:data:`FORMAT`), ``version`` (:data:`VERSION`), ``created_at``,
   ``code_revision`` (of the exporting tree), ``runs`` (run ids), ``benches`` (bench ids), and
   ``tables``: per table its ``columns`` (name → SQLite type, in row order) and ``primary_key``;
2. one line per row: ``{"t": table, "v": [values in the header's column order]}``, tables in the
   header's order (``runs`` first), rows in their database order (model calls keep their call
   order, which sample indices and "first call" readers rely on);
3. a footer ``{"end": true, "rows": {table: count}}``: an import without it, or with other
   counts, is a truncated file and writes nothing.

Tables: the core ones (:data:`agora.traces.schema.TABLES`) and every other table with a ``run_id``
column and a primary key (duels, reputation and leader snapshots, preference pairs, ...), each
restricted to the bundle's runs; with a bench, its ``benches`` and ``bench_cells`` rows. The gzip
header carries no time stamp or file name (only the JSON header's ``created_at`` differs between two
exports of the same rows).

Import (:func:`import_bundle`) inserts rows whose primary key is new and skips identical ones, in
one transaction: importing a bundle twice adds nothing. Refused, writing nothing: a row whose key
exists with other content and a new row for a run already there (both unless ``force``: the
bundle's rows win), a run id that already exists as another run (other protocol, start time or
settings) rather than mixed, and orphan ``results`` or ``model_calls`` rows (a question the
bundle's ``questions`` lack for that run; a failed question's calls are not orphans). Before the
database is touched, the whole bundle is checked (:func:`check_bundle`): each row's table, shape and
value types (:data:`SCHEMA_TYPES`), its run among the header's, and no key given two contents.

Export carries along the shared candidates run of a bench run that took its samples from one
(:data:`SHARED_CANDIDATES_KEY`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from agora.traces import schema
from agora.traces.bench import BENCH_CELLS, BENCHES
from agora.traces.store import TraceStore, TraceStoreError, check_run_id, code_revision, now

FORMAT = "agora-trace-bundle"
VERSION = 1
"""Bundle format version; an importer reads versions up to its own and refuses newer ones."""
SUFFIX = ".agora.jsonl.gz"
BENCH_TABLES = ("benches", "bench_cells")
_TYPES = {"TEXT": str, "INTEGER": int, "REAL": float, "FLOAT": float, "BLOB": bytes, "NUMERIC": float, "": str}
SHARED_CANDIDATES_KEY = "shared_candidates"
"""The key of a run's recorded settings (``runs.config``) naming the run it took its shared candidate
samples from (:data:`agora.runs.shared.SHARED_KEY`; spelled here because traces may not import runs):
an export of that run carries the candidates run along."""
#: Column → Python type of every table :mod:`agora.traces.schema` documents; a bundle's values are
#: checked against these (other tables: against the SQLite types of the bundle's header).
SCHEMA_TYPES: dict[str, dict[str, type]] = {
    **schema.TABLES, "duels": schema.DUELS, "reputation_snapshots": schema.REPUTATION_SNAPSHOTS,
    "leader_snapshots": schema.LEADER_SNAPSHOTS, "preference_pairs": schema.PREFERENCE_PAIRS,
    "benches": BENCHES, "bench_cells": BENCH_CELLS}
_TYPE_NAMES = {int: "an integer", float: "a real number", str: "text", bytes: "bytes"}


class BundleError(ValueError):
    """A bundle that cannot be written or read; the message names the file and what is wrong."""


@dataclass(frozen=True, slots=True)
class BundleSummary:
    path: Path
    runs: tuple[str, ...]
    benches: tuple[str, ...]
    rows: dict[str, int]
    """Rows written (export) or added (import) per table."""
    bytes: int
    """Size of the bundle file."""
    skipped: int = 0
    """Rows already in the database with the same content (import)."""
    replaced: int = 0
    """Rows whose primary key existed with other content, replaced by the bundle's (import ``force``)."""
    carried: dict[str, str] = field(default_factory=dict)
    """Export: runs added because a requested run took its shared candidates from them (candidates
    run → the run that named it in its settings, :data:`SHARED_CANDIDATES_KEY`)."""
    missing_shared: dict[str, str] = field(default_factory=dict)
    """Import: runs of the bundle that took shared candidates from a run that is neither in the bundle
    nor in the database (run → its candidates run). They are imported, but their report and replay
    are refused (:func:`agora.traces.report.shared_takes`) until that run is imported too."""


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
    with ``<bench>:``) from ``store`` to the bundle ``out``. A bench still in its dev phase (runs, but no
    recorded spec yet) gives its runs only; importing them and rerunning the bench resumes it. A run
    whose recorded settings name a shared candidates run (:data:`SHARED_CANDIDATES_KEY`: a bench protocol run that took its first samples from
    ``<bench>:<task>:candidates``) brings that run along, since its samples live there
    (:attr:`BundleSummary.carried`).

    Raises:
        BundleError: nothing to export, a run or bench that is not in ``store``, a run whose shared
            candidates run is not in ``store``, or an unwritable ``out``.
    """
    out = Path(out)
    check_out_path(out)
    if out.exists() and store.path and Path(str(store.path)).exists() and out.samefile(str(store.path)):
        raise BundleError(f"{out}: that is the trace database being exported; pick another --out")
    runs = list(dict.fromkeys(run_ids))
    known = set(store.run_ids())
    missing = [r for r in runs if r not in known]
    if missing:
        raise BundleError(f"{store.path}: no run {', '.join(map(repr, missing))} (`agora report runs` lists them)")
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
    if not runs:
        raise BundleError("nothing to export: give --run-id or --bench-id")
    carried: dict[str, str] = {}
    for r in runs:  # (grows while read: a carried run may name its own)
        source = _shared_source(store, r)
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
                     "then {\"end\": true, \"rows\": {table: count}}; see docs/traces.md"}
    counts: dict[str, int] = {}
    tmp = out.with_name(f".{out.name}.{os.getpid()}.part")  # written whole, then renamed over --out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz, \
                io.TextIOWrapper(gz, encoding="utf-8") as f:
            f.write(json.dumps(header, ensure_ascii=False) + "\n")
            for t, where, params in plan:
                cols = list(tables[t]["columns"])
                names = ", ".join(f"[{c}]" for c in cols)
                n = 0
                for row in store.db.execute(f"select {names} from [{t}] where {where} order by rowid", params):
                    f.write(json.dumps({"t": t, "v": list(row)}, ensure_ascii=False) + "\n")
                    n += 1
                counts[t] = n
            f.write(json.dumps({"end": True, "rows": counts}) + "\n")
        os.replace(tmp, out)
    except OSError as exc:
        raise BundleError(f"{out}: cannot write the bundle ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return BundleSummary(out, tuple(runs), tuple(benches), counts, out.stat().st_size, carried=carried)


_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_out_path(out: str | Path) -> None:
    """Refuse an ``out`` path that exists as anything but a regular file or a symbolic link (a
    folder, a FIFO, a device such as ``/dev/full``, a socket): writing a bundle replaces the path
    whole, which must never turn a device or a pipe into a plain file. A symbolic link is replaced
    itself, not its target.

    Raises:
        BundleError: one line naming the path and what it is.
    """
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BundleError(f"--out {out}: cannot be examined ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    what = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    raise BundleError(f"--out {out}: {what}, not a regular file; a bundle replaces only a regular file or a "
                      "symbolic link (--force or not): pick a file path")


def _shared_source(store: TraceStore, run_id: str) -> str | None:
    """The candidates run whose samples ``run_id`` took (its config's :data:`SHARED_CANDIDATES_KEY`), or None."""
    config = (store.get_run(run_id) or {}).get("config")
    try:
        config = json.loads(config) if isinstance(config, str) else config
    except json.JSONDecodeError:
        return None
    source = config.get(SHARED_CANDIDATES_KEY) if isinstance(config, dict) else None
    return source if isinstance(source, str) and source else None


#: Longest line a bundle may hold, in characters (a row with its texts: prompts and replies; the
#: longest Agora stores are far below it). A longer line is refused before it is read whole.
MAX_LINE_CHARS = 32 * 2**20
#: Deepest nesting of JSON arrays and objects in a line (a row is 2 deep, the header 4).
MAX_NESTING = 16
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _too_deep(line: str) -> bool:
    """Whether ``line``'s JSON nests arrays and objects deeper than :data:`MAX_NESTING` (brackets in
    strings are not counted); read without recursion, so a line nested 100,000 deep is refused
    rather than overflowing the parser's stack."""
    if line.count("[") + line.count("{") <= MAX_NESTING:
        return False
    depth = 0
    for ch in _BRACKET.findall(_JSON_STRING.sub("", line)):
        depth += 1 if ch in "[{" else -1
        if depth > MAX_NESTING:
            return True
    return False


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed JSON)`` of each non-blank line; each line is bounded in length
    (:data:`MAX_LINE_CHARS`, read no further) and nesting (:data:`MAX_NESTING`) before it is parsed.

    Raises:
        BundleError: naming the file and line: not gzip, cut short, not UTF-8, too long, too deep, not JSON.
    """
    i = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            while True:
                line = f.readline(MAX_LINE_CHARS + 1)
                if not line:
                    break
                i += 1
                if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
                    raise BundleError(f"{path}:{i}: a line longer than {MAX_LINE_CHARS:,} characters (no bundle row is "
                                      "that long); nothing was imported")
                if not line.strip():
                    continue
                if _too_deep(line):
                    raise BundleError(f"{path}:{i}: JSON nested deeper than {MAX_NESTING} arrays or objects (a row is "
                                      "2 deep); nothing was imported")
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BundleError(f"{path}:{i}: not JSON ({exc.msg})") from None
                except RecursionError:  # pragma: no cover - _too_deep refuses these first
                    raise BundleError(f"{path}:{i}: JSON nested too deep; nothing was imported") from None
                yield i, value
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}:{i + 1}: not UTF-8 text ({exc.reason} at byte {exc.start} of a chunk); "
                          "nothing was imported") from None
    except (OSError, EOFError) as exc:  # not gzip, or cut short
        raise BundleError(f"{path}: not a readable gzip bundle ({exc})") from None


def _footer_first(path: Path) -> tuple[dict[str, Any], int]:
    """Read the bundle once as bytes, fast, before any row is parsed: its line count, that no line
    is longer than :data:`MAX_LINE_CHARS` (in bytes here: at least as many as characters) and its
    footer (the last line). So a truncated or miscounted bundle is refused in seconds, not after
    every row was checked.

    Returns:
        The footer (checked by :func:`_footer_shape`) and the number of lines.

    Raises:
        BundleError: not gzip or cut short, a line too long, no footer, a footer of the wrong shape.
    """
    lines, run, tail, too_long = 0, 0, b"", False  # run: bytes since the last newline
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                first = chunk.find(b"\n")
                if first < 0:
                    run += len(chunk)
                elif run + first > MAX_LINE_CHARS * 4:  # (UTF-8: at most 4 bytes a character)
                    too_long = True
                else:
                    lines += chunk.count(b"\n")
                    run = len(chunk) - chunk.rfind(b"\n") - 1
                if too_long or run > MAX_LINE_CHARS * 4:
                    too_long = True
                    break
                tail = (tail + chunk)[-65536:]
    except (OSError, EOFError) as exc:
        raise BundleError(f"{path}: not a readable gzip bundle ({exc})") from None
    if too_long:
        raise BundleError(f"{path}:{lines + 1}: a line longer than {MAX_LINE_CHARS:,} characters (no bundle row is "
                          "that long); nothing was imported")
    last = tail.rstrip().rsplit(b"\n", 1)[-1]
    try:
        footer = json.loads(last) if last and not _too_deep(last.decode("utf-8")) else None
    except (ValueError, RecursionError):
        footer = None
    if not (isinstance(footer, dict) and "end" in footer):
        raise BundleError(f"{path}: no footer: the file is truncated; nothing was imported")
    return _footer_shape(path, lines, footer), lines


def _footer_shape(path: Path, line: int, footer: dict[str, Any]) -> dict[str, Any]:
    """The footer ``{"end": true, "rows": {table: count}}``, or a refusal naming the field."""
    if footer.get("end") is not True:
        raise BundleError(f"{path}:{line}: footer.end: {_short(footer.get('end'))} is not true; nothing was imported")
    rows = footer.get("rows")
    if not isinstance(rows, dict):
        raise BundleError(f"{path}:{line}: footer.rows: {_short(rows)} is not an object of row counts per table; "
                          "nothing was imported")
    for t, n in rows.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise BundleError(f"{path}:{line}: footer.rows.{t}: {_short(n)} is not a row count (an integer from 0); "
                              "nothing was imported")
    return footer


def read_header(path: str | Path) -> dict[str, Any]:
    """The bundle's header (first line), checked.

    Raises:
        BundleError: not a bundle, or a newer format version than this Agora reads.
    """
    path = Path(path)
    if not path.is_file():
        try:
            mode = os.stat(path).st_mode
        except OSError:
            raise BundleError(f"{path}: no such bundle file") from None
        what = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
        raise BundleError(f"{path}: {what}, not a bundle file; give the path of an {SUFFIX} file")
    for i, first in _lines(path):
        return _check_header(path, first)
    raise BundleError(f"{path}: empty file, not a bundle")


def check_bundle(path: str | Path) -> dict[str, Any]:
    """Read and check the whole bundle without a database: everything :func:`import_bundle` refuses
    that does not depend on the target database.

    Returns:
        The header. Used before creating or touching a target database, so a bad bundle creates nothing.

    Raises:
        BundleError: not a bundle, a newer version, a damaged header, a truncated file, a run id
            :func:`agora.traces.store.check_run_id` refuses, a row of an unknown table, after the
            footer, whose ``v`` is not a list or has another number of values than its table has
            columns, a value of the wrong type (:func:`_check_values`), a row of a run the header does not
            list or before that run's ``runs`` row, two rows with one primary key and different content
            (a self-contradicting bundle), or an orphan row (:func:`import_bundle`); each names the line.
    """
    path = Path(path)
    head, footer, read = _scan(path)
    _check_footer(path, footer, read)
    return head


def _check_footer(path: Path, footer: dict[str, Any] | None, read: dict[str, int]) -> None:
    if footer is None:
        raise BundleError(f"{path}: no footer: the file is truncated; nothing was imported")
    expected = {t: n for t, n in (footer.get("rows") or {}).items() if n}
    if expected != {t: n for t, n in read.items() if n}:
        raise BundleError(f"{path}: the footer counts rows {expected}, the file holds {read}; nothing was imported")


def _scan(path: Path) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, int]]:
    """:func:`check_bundle` but the footer's counts: (header, footer or None, rows read per table)."""
    head = read_header(path)
    footer_first, n_lines = _footer_first(path)
    counted = sum(footer_first["rows"].values())
    if counted > n_lines - 2:  # rows missing: refused now (more lines than counted: the scan names the extra row)
        raise BundleError(f"{path}: the footer counts {counted} rows, the file holds {max(0, n_lines - 2)} lines "
                          "between its header and footer: rows are missing; nothing was imported")
    _check_runs(path, head)
    tables: dict[str, dict[str, Any]] = head["tables"]
    head_runs = {r for r in head.get("runs") or () if isinstance(r, str)}
    runs_seen: set[str] = set()
    keys: dict[tuple[str, str], tuple[int, bytes]] = {}  # (table, key) -> (first line, digest of its values)
    read: dict[str, int] = {}
    footer = None
    orphans = _Orphans()
    for i, line in _lines(path):
        if i == 1:
            continue
        if footer is not None:
            raise BundleError(f"{path}:{i}: a row after the footer; nothing was imported")
        if not isinstance(line, dict):
            raise BundleError(f"{path}:{i}: not a row object {{\"t\": table, \"v\": [values]}}; nothing was imported")
        if "end" in line:
            footer = _footer_shape(path, i, line)
            continue
        t = line.get("t")
        if t not in tables:
            raise BundleError(f"{path}:{i}: a row of unknown table {t!r} (the header's tables: "
                              f"{', '.join(tables)}); nothing was imported")
        values = line.get("v")
        if not isinstance(values, list):
            raise BundleError(f"{path}:{i}: {t}: the row's values \"v\" are not a list ({type(values).__name__} "
                              f"{_short(values)}); nothing was imported")
        cols = list(tables[t]["columns"])
        if len(values) != len(cols):
            raise BundleError(f"{path}:{i}: {t}: {len(values)} values for {len(cols)} columns; nothing was imported")
        row = dict(zip(cols, values))
        pk = list(tables[t].get("primary_key") or [])
        _check_values(path, i, t, tables[t], row, pk)
        rid = row.get("run_id")
        if t == "runs" or rid is not None:  # (bench_cells of a whole bench carry no run id)
            if rid not in head_runs:
                raise BundleError(f"{path}:{i}: {t}: run_id {rid!r} is not one of the bundle header's runs ("
                                  f"{', '.join(map(repr, head.get('runs') or ())) or 'none'}); nothing was imported")
            if t == "runs":
                runs_seen.add(rid)
            elif rid not in runs_seen:
                raise BundleError(f"{path}:{i}: {t}: run {rid!r} has no runs row before this line in the bundle; "
                                  "nothing was imported")
        if pk:
            key = json.dumps([row[k] for k in pk])
            digest = hashlib.sha1(json.dumps(values, sort_keys=True).encode()).digest()
            first = keys.setdefault((t, key), (i, digest))
            if first[1] != digest:
                raise BundleError(f"{path}:{i}: {t}: the row {_key_text(pk, row)} is also on line {first[0]} with "
                                  f"other content: the bundle contradicts itself (lines {first[0]} and {i}); "
                                  "nothing was imported, --force or not")
        read[t] = read.get(t, 0) + 1
        orphans.see(t, row, i)
    orphans.check(path)
    return head, footer, read


def _check_header(path: Path, head: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise BundleError(f"{path}:1: format: not an {FORMAT} file")
    version = head.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BundleError(f"{path}:1: version: {json.dumps(version)} is not a version number (an integer from 1); "
                          f"this Agora reads versions up to {VERSION}")
    if version > VERSION:
        raise BundleError(f"{path}:1: version: {version!r}; this Agora reads versions up to {VERSION}")
    if not isinstance(head.get("tables"), dict):
        raise BundleError(f"{path}:1: tables: missing")
    for t, info in head["tables"].items():
        if not _plain_name(t) or t.lower().startswith("sqlite_"):
            raise BundleError(f"{path}:1: tables: {t!r} is not a plain table name (letters, digits, _; not sqlite_...); "
                              "the header is damaged or tampered with")
        cols = info.get("columns") if isinstance(info, dict) else None
        if not isinstance(cols, dict) or not cols:
            raise BundleError(f"{path}:1: tables.{t}.columns: missing or not a mapping of column names to types")
        for c in cols:
            if not _plain_name(c):
                raise BundleError(f"{path}:1: tables.{t}.columns: {c!r} is not a plain column name "
                                  "(letters, digits, _); the header is damaged or tampered with")
        pk = info.get("primary_key") or []
        if not isinstance(pk, list) or any(k not in cols for k in pk):
            raise BundleError(f"{path}:1: tables.{t}.primary_key: {pk!r} names columns the table does not have")
    if "runs" in head["tables"] and "run_id" not in head["tables"]["runs"]["columns"]:
        raise BundleError(f"{path}:1: tables.runs.columns: no run_id column; the header is damaged or tampered with")
    seen: dict[str, str] = {}
    for t, info in head["tables"].items():
        # SQLite's table names ignore case: "QUESTIONS" is the questions table
        if t.lower() in seen:
            raise BundleError(f"{path}:1: tables: {t!r} and {seen[t.lower()]!r} name one table (SQLite ignores the "
                              "case of table names); the header is damaged or tampered with")
        seen[t.lower()] = t
        known = next((k for k in SCHEMA_TYPES if k == t.lower()), None)
        if known is not None and known != t:
            raise BundleError(f"{path}:1: tables: {t!r} is Agora's {known} table spelled in another case; the header "
                              "is damaged or tampered with")
        if t in SCHEMA_TYPES:
            _check_known_table(path, t, info)
    return head


#: Primary key of every table :data:`SCHEMA_TYPES` documents (the core tables' from :mod:`agora.traces.schema`).
KNOWN_PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    **schema.PRIMARY_KEYS, "duels": ("duel_id",), "reputation_snapshots": ("duel_id", "model"),
    "leader_snapshots": ("duel_id",), "preference_pairs": ("pair_id",), "benches": ("bench_id",),
    "bench_cells": ("bench_id", "task", "method")}
#: SQLite types a header may declare for a column of each Python type of :data:`SCHEMA_TYPES`.
_SQL_NAMES = {str: "TEXT", int: "INTEGER", float: "FLOAT"}
_DECLARED = {str: {"TEXT", ""}, int: {"INTEGER", "INT", ""}, float: {"FLOAT", "REAL", "NUMERIC", "DOUBLE", ""}}


def _check_known_table(path: Path, table: str, info: dict[str, Any]) -> None:
    """A table of Agora's own name holds Agora's schema: its primary key, every column it has had
    since its first release (:data:`agora.traces.schema.ADDED_COLUMNS` may be missing: an older
    database), and each known column declared with its own type. Columns this Agora does not know
    (a newer one's) are allowed. So a crafted ``questions`` table cannot create a look-alike with
    another key or types in the target database."""
    types = SCHEMA_TYPES[table]
    cols: dict[str, Any] = info["columns"]
    pk = tuple(info.get("primary_key") or ())
    want_pk = KNOWN_PRIMARY_KEYS.get(table)
    if want_pk is not None and pk != want_pk:
        raise BundleError(f"{path}:1: tables.{table}.primary_key: {list(pk)!r}, but Agora's {table} table has "
                          f"{list(want_pk)!r}; the header is damaged or tampered with; nothing was imported")
    optional = set(schema.ADDED_COLUMNS.get(table, ()))
    required = [c for c in types if c not in optional] if table in schema.TABLES else list(want_pk or ())
    missing = [c for c in required if c not in cols]
    if missing:
        raise BundleError(f"{path}:1: tables.{table}.columns: no {', '.join(missing[:4])} column"
                          f"{'s' if len(missing) > 1 else ''}, which Agora's {table} table has; the header is "
                          "damaged or tampered with; nothing was imported")
    for c, declared in cols.items():
        want = types.get(c)
        if want is not None and str(declared or "").upper() not in _DECLARED[want]:
            raise BundleError(f"{path}:1: tables.{table}.columns.{c}: declared {_short(declared)}, but Agora's "
                              f"{table}.{c} is {_TYPE_NAMES[want]} ({_SQL_NAMES[want]}); the header "
                              "is damaged or tampered with; nothing was imported")


def _sql_type(declared: Any) -> str:
    """The SQLite column type for a header's declared type (TEXT when unknown)."""
    name = str(declared or "").upper()
    return name if name in _TYPES and name else "TEXT"


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and name.isascii() and name.replace("_", "").isalnum()


def _short(value: Any, width: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _column_type(table: str, info: dict[str, Any], column: str) -> type | None:
    """The Python type of ``table.column``: :data:`SCHEMA_TYPES`, else the header's SQLite type (None: any)."""
    known = SCHEMA_TYPES.get(table, {}).get(column)
    if known is not None:
        return known
    declared = str(info["columns"].get(column) or "").upper()
    return {"TEXT": str, "INTEGER": int, "REAL": float, "FLOAT": float}.get(declared)


def _check_values(path: Path, line: int, table: str, info: dict[str, Any], row: dict[str, Any],
                  pk: Sequence[str]) -> None:
    """Refuse a value the store would not have written to its column: text in an integer or real
    column, a number in a text column, a list or object anywhere, a NULL primary key column. Integer
    columns take integers (a JSON ``true``/``false`` or a whole real such as ``3.0`` is stored as the
    integer SQLite makes of it); real columns take integers and reals (not NaN or infinite); any
    other column may be NULL."""
    for column, value in row.items():
        if value is None:
            if column in pk:
                raise BundleError(f"{path}:{line}: {table}.{column}: null in a primary key column; nothing was imported")
            continue
        want = _column_type(table, info, column)
        if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
            raise BundleError(f"{path}:{line}: {table}.{column}: {_short(value)} is beyond SQLite's 64-bit integers; "
                              "nothing was imported")
        if want is None:
            ok = isinstance(value, (str, int, float))
        elif want is int:
            ok = (isinstance(value, int) and -2**63 <= value < 2**63) or \
                (isinstance(value, float) and value.is_integer() and abs(value) < 2**63)
        elif want is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        elif want is str:
            ok = isinstance(value, str)
        else:
            ok = isinstance(value, (str, int, float))
        if not ok:
            what = _TYPE_NAMES.get(want, "a text or number")
            raise BundleError(f"{path}:{line}: {table}.{column}: {_short(value)} is not {what}; "
                              "nothing was imported")


def _same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("protocol", "started_at", "config"))


class _Orphans:
    """Finds orphan rows while a bundle is read (see :func:`import_bundle`)."""

    def __init__(self) -> None:
        self.questions: set[tuple[Any, Any]] = set()
        self.runs_with_questions: set[Any] = set()
        self.results: dict[tuple[Any, Any], int] = {}
        self.calls: dict[tuple[Any, Any], list[Any]] = {}  # (run, question) -> [first line, any failed attempt]

    def see(self, table: str, row: dict[str, Any], line: int) -> None:
        rid, qid = row.get("run_id"), row.get("question_id")
        if table == "questions":
            self.questions.add((rid, qid))
            self.runs_with_questions.add(rid)
        elif table == "results":
            self.results.setdefault((rid, qid), line)
        elif table == "model_calls" and rid is not None and qid is not None:
            seen = self.calls.setdefault((rid, qid), [line, False])
            seen[1] = seen[1] or row.get("error") is not None

    def check(self, path: Path) -> None:
        """Raises BundleError naming the first orphan's line, table, run and question."""
        for (rid, qid), i in self.results.items():
            if (rid, qid) not in self.questions:
                raise BundleError(f"{path}:{i}: results: run {rid!r} has results for question {qid!r}, which is not "
                                  "among the bundle's questions of that run (an orphan); nothing was imported")
        for (rid, qid), (i, any_failed) in self.calls.items():
            if rid in self.runs_with_questions and (rid, qid) not in self.questions and not any_failed:
                raise BundleError(f"{path}:{i}: model_calls: run {rid!r} has model calls for question {qid!r}, which "
                                  "is not among the bundle's questions of that run and has no failed attempt (an "
                                  "orphan, not a failed question); nothing was imported")


def _check_runs(path: Path, head: dict[str, Any]) -> None:
    for r in head.get("runs") or ():
        try:
            check_run_id(r, "run id")
        except ValueError as exc:
            raise BundleError(f"{path}:1: runs: {exc}; nothing was imported") from None


def _key_text(pk: Sequence[str], row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={row.get(k)!r}" for k in pk)


def _differing(cols: Sequence[str], old: Sequence[Any], new: Sequence[Any]) -> list[str]:
    """Columns whose stored value differs from the bundle's (``1`` and ``1.0`` are the same value)."""
    return [c for c, a, b in zip(cols, old, new) if a != b]


def import_bundle(path: str | Path, store: TraceStore, *, force: bool = False) -> BundleSummary:
    """Load the bundle ``path`` into ``store`` in one transaction: rows whose primary key is new are
    added; rows already there with the same content are skipped (importing twice adds nothing).

    Refused, writing nothing: a row whose primary key exists in ``store`` with other content (the
    message names the table, the key and the columns that differ), and a new row for a run that
    already exists in ``store`` (a later state of that run), unless ``force``: the bundle's rows then
    replace the stored ones in place (their row order kept) and the new rows are added. Always
    refused, ``force`` or not: a run id that exists in ``store`` as another run (other protocol,
    start time or settings), a run id :func:`agora.traces.store.check_run_id` refuses, and orphans:
    a ``results`` row of a question the bundle's ``questions`` do not hold for that run, or a
    question's ``model_calls`` rows in a run that has questions when that question is not among
    them and none of its calls failed (a failed question, recorded without a ``questions`` row,
    has at least one failed attempt; runs without questions, duels and training, are not checked).

    The whole bundle is checked first (:func:`check_bundle`: row shapes, value types, runs, keys
    the bundle gives two contents, orphans), before ``store`` is touched.

    Not refused: a run that took shared candidates from a run neither the bundle nor ``store`` holds
    (matched by run id); it is imported and named in :attr:`BundleSummary.missing_shared`.

    Raises:
        BundleError: anything :func:`check_bundle` refuses, a conflicting row or a new row of a run
            already in ``store`` without ``force``, or a run id that exists in ``store`` as another run.
        TraceStoreError: a read-only store.
    """
    path = Path(path)
    head, footer, read = _scan(path)  # check_bundle; its footer counts last, after the store's own refusals
    if store.readonly:
        raise TraceStoreError(f"{store.path}: opened read-only; import needs to write")
    tables: dict[str, dict[str, Any]] = head["tables"]
    added = {t: 0 for t in tables}
    skipped = replaced = 0
    db = store.db
    with store.transaction():
        # Plain SQL inside one explicit transaction: SQLite's DDL is transactional, so a refusal further
        # down rolls back the tables and columns made here too (sqlite-utils' helpers commit on their own).
        if not db.conn.in_transaction:
            db.conn.execute("BEGIN")
        for t, info in tables.items():
            cols = dict(info["columns"])
            pk = list(info.get("primary_key") or [])
            if t not in db.table_names():
                defs = [f"[{c}] {_sql_type(ty)}" for c, ty in cols.items()]
                if pk:
                    defs.append(f"PRIMARY KEY ({', '.join(f'[{k}]' for k in pk)})")
                db.conn.execute(f"CREATE TABLE [{t}] ({', '.join(defs)})")
            have = {r[1] for r in db.conn.execute(f"PRAGMA table_info([{t}])")}
            for c, ty in cols.items():
                if c not in have:
                    db.conn.execute(f"ALTER TABLE [{t}] ADD COLUMN [{c}] {_sql_type(ty)}")
        bundle_runs: dict[str, bool] = {}
        lines = _lines(path)
        next(lines)
        for i, line in lines:
            if "end" in line:
                break
            t = line["t"]  # (shape, types, runs, keys and orphans: checked by _scan above)
            cols = list(tables[t]["columns"])
            pk = list(tables[t].get("primary_key") or [])
            row = dict(zip(cols, line["v"]))
            if t == "runs":
                old = store.get_run(row["run_id"])
                if old is not None and not _same_run(old, row):
                    raise BundleError(f"{path}:{i}: run_id: {row['run_id']!r} already exists in {store.path} as "
                                      f"another run (started {old.get('started_at')}); import into another database")
            rid = row.get("run_id")
            names = ", ".join(f"[{c}]" for c in cols)
            cur = db.conn.execute(f"INSERT OR IGNORE INTO [{t}] ({names}) VALUES ({', '.join('?' * len(cols))})",
                                  line["v"])
            if t == "runs":
                bundle_runs.setdefault(rid, cur.rowcount == 0)  # True: the run already existed in the store
            elif rid is not None and bundle_runs.get(rid) and cur.rowcount and not force:
                raise BundleError(f"{path}:{i}: {t}: a new row for run {rid!r}, which already exists in "
                                  f"{store.path}; a re-import may only repeat identical rows; nothing was imported "
                                  "(--force adds it: the bundle holds a later state of the run)")
            if not cur.rowcount and pk:
                where = " and ".join(f"[{k}] = ?" for k in pk)
                stored = db.conn.execute(f"select {names} from [{t}] where {where}", [row[k] for k in pk]).fetchone()
                differ = _differing(cols, stored, line["v"]) if stored is not None else []
                if differ and not force:
                    raise BundleError(f"{path}:{i}: {t}: the row {_key_text(pk, row)} already exists in {store.path} "
                                      f"with other content ({', '.join(differ[:6])} differ); nothing was imported "
                                      "(--force replaces such rows with the bundle's)")
                if differ:
                    sets = ", ".join(f"[{c}] = ?" for c in cols if c not in pk)
                    db.conn.execute(f"update [{t}] set {sets} where {where}",
                                    [row[c] for c in cols if c not in pk] + [row[k] for k in pk])
                    replaced += 1
            added[t] += cur.rowcount
            skipped += 1 - cur.rowcount
        _check_footer(path, footer, read)
        missing = {rid: src for rid in bundle_runs if (src := _shared_source(store, rid)) and store.get_run(src) is None}
    return BundleSummary(path, tuple(head.get("runs") or ()), tuple(head.get("benches") or ()), added,
                         path.stat().st_size, skipped - replaced, replaced, missing_shared=missing)
