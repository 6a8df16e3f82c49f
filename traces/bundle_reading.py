"""Reading a bundle file and checking it whole before any database is touched (format:
:mod:`agora.traces.bundle`): each line bounded in length and nesting before it is parsed, the
footer's counts read first, the header (format, version, tables against Agora's schemas:
:mod:`agora.traces.bundle_schema`), every row's table, shape, value types and run, keys given two
contents, and orphan rows.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from agora.traces.bundle import DIGEST_KEY, FILE_KINDS, FORMAT, HEADER_DIGEST_KEY, SUFFIX, VERSION, BundleError
from agora.traces.bundle_schema import SCHEMA_TYPES, check_known_table, check_values, plain_name, short
from agora.tasks.problem import SAME_ID, id_key
from agora.traces.store import MAX_STORED_RUN_ID_CHARS, check_run_id

#: Longest line a bundle may hold, in characters (a row with its texts: prompts and replies; the
#: longest Agora stores are far below it). A longer line is refused before it is read whole.
MAX_LINE_CHARS = 32 * 2**20
#: Deepest nesting of JSON arrays and objects in a line (a row is 2 deep, the header 4).
MAX_NESTING = 16
_SHA256 = re.compile(r"[0-9a-f]{64}")
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")
#: Bytes read at a time when a bundle's text turned out not to be UTF-8 and its first bad byte is looked for.
_UTF8_CHUNK = 1 << 20


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


def is_gzip(path: Path) -> bool:
    """Whether the bundle at ``path`` is read as gzip: its name ends in ``.gz`` (a file so named that is
    not gzip is refused as such), or it starts with gzip's magic bytes (a compressed bundle under a
    plain name, as Agora wrote every bundle before plain ``--out`` names gave plain JSON Lines). Any
    other file is read as plain JSON Lines text (:func:`agora.traces.bundle_export.export_bundle`)."""
    if path.name.lower().endswith(".gz"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def open_bundle(path: Path, mode: str = "rb"):
    """``path`` opened for reading (``mode`` ``"rb"`` or ``"rt"``, text as UTF-8): through gzip when
    :func:`is_gzip`, else as it is (text lines end in ``"\\n"`` either way: a CRLF line is read as gzip's
    text reader reads it)."""
    if is_gzip(path):
        return gzip.open(path, mode, encoding="utf-8") if "t" in mode else gzip.open(path, mode)
    return open(path, mode, encoding="utf-8") if "t" in mode else open(path, mode)


def bundle_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed JSON)`` of each non-blank line; each line is bounded in length
    (:data:`MAX_LINE_CHARS`, read no further) and nesting (:data:`MAX_NESTING`) before it is parsed.

    Raises:
        BundleError: naming the file and line: not gzip, cut short, not UTF-8, too long, too deep, not JSON.
    """
    for i, _, value in bundle_line_texts(path):
        yield i, value


def bundle_line_texts(path: Path) -> Iterator[tuple[int, str, Any]]:
    """:func:`bundle_lines` with each line's text as read (its line end included, when it has one):
    ``(line number, text, parsed JSON)``."""
    i = 0
    try:
        with open_bundle(path, "rt") as f:
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
                except ValueError:  # an integer longer than int() reads (sys.get_int_max_str_digits())
                    raise BundleError(f"{path}:{i}: a number of more than {sys.get_int_max_str_digits():,} digits (no "
                                      "bundle value is that long); nothing was imported") from None
                except RecursionError:  # pragma: no cover - _too_deep refuses these first
                    raise BundleError(f"{path}:{i}: JSON nested too deep; nothing was imported") from None
                yield i, line, value
    except UnicodeDecodeError:  # (found by a chunk read ahead of the line: find the line itself)
        raise _not_utf8(path) from None
    except (OSError, EOFError) as exc:  # not gzip, or cut short
        raise _unreadable(path, exc) from None


def _unreadable(path: Path, exc: BaseException) -> BundleError:
    """The refusal of a bundle gzip could not read (``exc``: its error): not gzip, cut short, damaged,
    or, said apart, a gzip bundle followed by bytes that are not gzip (appended to after export, or
    two files joined), which gzip reports as 'Not a gzipped file' although the file starts as one."""
    if isinstance(exc, gzip.BadGzipFile) and str(exc).startswith("Not a gzipped file"):
        try:
            with open(path, "rb") as f:
                starts_as_gzip = f.read(2) == b"\x1f\x8b"
        except OSError:
            starts_as_gzip = False
        if starts_as_gzip:
            return BundleError(f"{path}: bytes that are not gzip data after the end of its gzip stream (the file was "
                               "appended to or damaged after export); nothing was imported")
    return BundleError(f"{path}: not a readable gzip bundle ({exc})")


def _not_utf8(path: Path) -> BundleError:
    """The refusal of a bundle that is not UTF-8 text, naming the line of its first bad byte and that
    byte's place in the line (1 for the first): the text reader decodes ahead of the line it returns,
    so its error tells neither. Read as bytes, :data:`_UTF8_CHUNK` at a time; a character cut by a
    chunk's end is read whole with the next chunk."""
    line, column, carry = 1, 0, b""  # column: bytes of the current line before the data read next
    with open_bundle(path, "rb") as f:
        while True:
            chunk = f.read(_UTF8_CHUNK)
            data = carry + chunk
            try:
                data.decode("utf-8")
                good, carry = len(data), b""
            except UnicodeDecodeError as exc:
                if not (chunk and exc.end == len(data) and exc.reason == "unexpected end of data"):
                    head = data[:exc.start]
                    lines = head.count(b"\n")
                    at = exc.start - head.rfind(b"\n") - 1 if lines else column + exc.start
                    return BundleError(f"{path}:{line + lines}: not UTF-8 text (byte {at + 1} of the line); "
                                       "nothing was imported")
                good, carry = exc.start, data[exc.start:]  # a character the chunk cut: read on
            head = data[:good]
            lines = head.count(b"\n")
            line, column = line + lines, (good - head.rfind(b"\n") - 1 if lines else column + good)
            if not chunk:
                return BundleError(f"{path}: not UTF-8 text; nothing was imported")  # pragma: no cover - found above


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
        with open_bundle(path, "rb") as f:
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
        raise _unreadable(path, exc) from None
    if too_long:
        raise BundleError(f"{path}:{lines + 1}: a line longer than {MAX_LINE_CHARS:,} characters (no bundle row is "
                          "that long); nothing was imported")
    last = tail.rstrip().rsplit(b"\n", 1)[-1]
    try:
        footer = json.loads(last) if last and not _too_deep(last.decode("utf-8")) else None
    except (ValueError, RecursionError):
        footer = None
    if not (isinstance(footer, dict) and "end" in footer):
        _refuse_data_after_footer(path, lines, tail)
        raise BundleError(f"{path}: no footer: the file is truncated; nothing was imported")
    return _footer_shape(path, lines, footer), lines


def _refuse_data_after_footer(path: Path, lines: int, tail: bytes) -> None:
    """Refuse a bundle whose footer is followed by more lines (within the last 64 KiB read), naming
    the first line after it and the footer's line; return quietly when no footer is found there.

    ``lines`` is the file's newline count, ``tail`` its last bytes: the last piece of
    ``tail.split(b"\n")`` is line ``lines + 1`` (empty when the file ends in a newline)."""
    pieces = tail.split(b"\n")
    first_line = lines + 2 - len(pieces)  # the line number of pieces[0] (cut short unless the tail is whole)
    for k in range(len(pieces) - 1, 0, -1):
        piece = pieces[k].strip()
        if not piece.startswith(b"{") or b'"end"' not in piece:
            continue
        try:
            found = json.loads(piece) if not _too_deep(piece.decode("utf-8")) else None
        except (ValueError, RecursionError):
            continue
        if isinstance(found, dict) and "end" in found:
            after = next(first_line + j for j in range(k + 1, len(pieces)) if pieces[j].strip())
            raise BundleError(f"{path}:{after}: data after the footer (line {first_line + k}); "
                              "nothing was imported")


def _footer_shape(path: Path, line: int, footer: dict[str, Any]) -> dict[str, Any]:
    """The footer ``{"end": true, "rows": {table: count}}`` (with ``"sha256"`` and ``"header_sha256"``,
    :data:`DIGEST_KEY` and :data:`HEADER_DIGEST_KEY`, hex digests, since bundles carry them), or a
    refusal naming the field."""
    if footer.get("end") is not True:
        raise BundleError(f"{path}:{line}: footer.end: {short(footer.get('end'))} is not true; nothing was imported")
    rows = footer.get("rows")
    if not isinstance(rows, dict):
        raise BundleError(f"{path}:{line}: footer.rows: {short(rows)} is not an object of row counts per table; "
                          "nothing was imported")
    for t, n in rows.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise BundleError(f"{path}:{line}: footer.rows.{t}: {short(n)} is not a row count (an integer from 0); "
                              "nothing was imported")
    for key in (DIGEST_KEY, HEADER_DIGEST_KEY):
        digest = footer.get(key, "0" * 64)
        if not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
            raise BundleError(f"{path}:{line}: footer.{key}: {short(digest)} is not a SHA-256 digest (64 hexadecimal "
                              "digits); nothing was imported")
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
        what = next((name for test, name in FILE_KINDS if test(mode)), "not a regular file")
        raise BundleError(f"{path}: {what}, not a bundle file; give the path of an {SUFFIX} file")
    for i, first in bundle_lines(path):
        return _check_header(path, first)
    raise BundleError(f"{path}: empty file, not a bundle")


def check_bundle(path: str | Path) -> dict[str, Any]:
    """Read and check the whole bundle without a database: everything
    :func:`agora.traces.bundle_import.import_bundle` refuses that does not depend on the target database.

    Returns:
        The header. Used before creating or touching a target database, so a bad bundle creates nothing.

    Raises:
        BundleError: not a bundle, a newer version, a damaged header, a truncated file, a run id
            :func:`agora.traces.store.check_run_id` refuses, a row of an unknown table, after the
            footer, whose ``v`` is not a list or has another number of values than its table has
            columns, a value of the wrong type (:func:`agora.traces.bundle_schema.check_values`), a row
            of a run the header does not list or before that run's ``runs`` row, two rows with one
            primary key and different content (a self-contradicting bundle), or an orphan row
            (:func:`agora.traces.bundle_import.import_bundle`); each names the line. A header line
            that does not give the footer's ``header_sha256`` (line 1), or rows that do not give its
            ``sha256`` (the file): altered since export.
    """
    path = Path(path)
    head, footer, read, digest, header_digest = scan_bundle(path)
    check_footer(path, footer, read, digest, header_digest)
    return head


def check_header_digest(path: Path, footer: dict[str, Any] | None, header_digest: str | None) -> None:
    """Refuse a bundle whose footer holds a ``header_sha256`` (:data:`agora.traces.bundle.HEADER_DIGEST_KEY`)
    other than ``header_digest`` (the header line's, as :func:`scan_bundle` computed it); no footer,
    a footer without one, or ``header_digest`` ``None`` leave it unchecked.

    Raises:
        BundleError: one line naming the file's line 1."""
    if (footer is not None and HEADER_DIGEST_KEY in footer and header_digest is not None
            and footer[HEADER_DIGEST_KEY] != header_digest):
        raise BundleError(f"{path}:1: the header does not match the footer's checksum (header_sha256): it was "
                          "altered or damaged after export; nothing was imported")


def check_footer(path: Path, footer: dict[str, Any] | None, read: dict[str, int], digest: str | None = None,
                 header_digest: str | None = None) -> None:
    """Refuse a bundle whose footer is missing, counts other rows than ``read`` (table → rows), or
    holds a ``header_sha256`` (:data:`agora.traces.bundle.HEADER_DIGEST_KEY`) other than
    ``header_digest`` or a ``sha256`` (:data:`agora.traces.bundle.DIGEST_KEY`) other than ``digest``,
    the header line's and the rows' as :func:`scan_bundle` computed them (a footer without one,
    written before bundles carried it, leaves that part unchecked; so does a digest given as ``None``).

    Raises:
        BundleError: one line naming the file (and line 1 for the header)."""
    if footer is None:
        raise BundleError(f"{path}: no footer: the file is truncated; nothing was imported")
    expected = {t: n for t, n in (footer.get("rows") or {}).items() if n}
    if expected != {t: n for t, n in read.items() if n}:
        raise BundleError(f"{path}: the footer counts rows {expected}, the file holds {read}; nothing was imported")
    check_header_digest(path, footer, header_digest)
    if DIGEST_KEY in footer and digest is not None and footer[DIGEST_KEY] != digest:
        raise BundleError(f"{path}: its rows do not match the footer's checksum (sha256): a line was altered or "
                          "damaged after export; nothing was imported")


def scan_bundle(path: Path) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, int], str, str]:
    """:func:`check_bundle` but the footer's counts and checksums: (header, footer or None, rows read per
    table, the rows' :data:`agora.traces.bundle.DIGEST_KEY` and the header line's
    :data:`agora.traces.bundle.HEADER_DIGEST_KEY`, each as hex)."""
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
    benches_seen: set[Any] = set()
    keys: dict[tuple[str, str], tuple[int, bytes]] = {}  # (table, key) -> (first line, digest of its values)
    read: dict[str, int] = {}
    footer = None
    orphans = _Orphans()
    rows_digest = hashlib.sha256()
    header_digest = ""
    for i, text, line in bundle_line_texts(path):
        if i == 1:
            header_digest = hashlib.sha256((text if text.endswith("\n") else text + "\n").encode("utf-8")).hexdigest()
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
                              f"{short(values)}); nothing was imported")
        cols = list(tables[t]["columns"])
        if len(values) != len(cols):
            raise BundleError(f"{path}:{i}: {t}: {len(values)} values for {len(cols)} columns; nothing was imported")
        row = dict(zip(cols, values))
        pk = list(tables[t].get("primary_key") or [])
        check_values(path, i, t, tables[t], row, pk)
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
                raise BundleError(f"{path}:{i}: {t}: the row {key_text(pk, row)} is also on line {first[0]} with "
                                  f"other content: the bundle contradicts itself (lines {first[0]} and {i}); "
                                  "nothing was imported, --force or not")
        if t == "benches":
            benches_seen.add(row.get("bench_id"))
        read[t] = read.get(t, 0) + 1
        orphans.see(t, row, i)
        rows_digest.update((text if text.endswith("\n") else text + "\n").encode("utf-8"))
    orphans.check(path)
    # every run and bench the header names has its row: else an import would report it as imported
    for table, kind, seen in (("runs", "run", runs_seen), ("benches", "bench", benches_seen)):
        if missing := [x for x in head.get(table) or () if x not in seen]:
            check_header_digest(path, footer, header_digest)  # an edited header: said as such first
            raise BundleError(f"{path}:1: {table}: the header names {kind} {missing[0]!r}, but the bundle holds no "
                              f"{table} row of it (rows were removed, or the header altered); nothing was imported")
    return head, footer, read, rows_digest.hexdigest(), header_digest


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
        if not plain_name(t) or t.lower().startswith("sqlite_"):
            raise BundleError(f"{path}:1: tables: {t!r} is not a plain table name (letters, digits, _; not sqlite_...); "
                              "the header is damaged or tampered with")
        cols = info.get("columns") if isinstance(info, dict) else None
        if not isinstance(cols, dict) or not cols:
            raise BundleError(f"{path}:1: tables.{t}.columns: missing or not a mapping of column names to types")
        for c in cols:
            if not plain_name(c):
                raise BundleError(f"{path}:1: tables.{t}.columns: {c!r} is not a plain column name "
                                  "(letters, digits, _); the header is damaged or tampered with")
        pk = info.get("primary_key") or []
        if not isinstance(pk, list) or any(k not in cols for k in pk):
            raise BundleError(f"{path}:1: tables.{t}.primary_key: {pk!r} names columns the table does not have")
    for field, kind in (("runs", "run"), ("benches", "bench")):
        ids = head.get(field)
        if ids is None:
            continue
        if not isinstance(ids, list) or (field == "benches" and not all(isinstance(x, str) for x in ids)):
            # (a string was read a character at a time, an object by its keys; a run id's type: _check_runs)
            raise BundleError(f"{path}:1: {field}: {short(ids)} is not a list of {kind} ids; nothing was imported")
        keys = [json.dumps(x) for x in ids]
        if len(set(keys)) < len(keys):  # (a run named twice was counted twice: 'imported ...: 2 runs')
            twice = next(x for n, x in enumerate(ids) if keys[n] in keys[:n])
            raise BundleError(f"{path}:1: {field}: {kind} {twice!r} is named twice; nothing was imported")
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
            check_known_table(path, t, info)
        if not info.get("primary_key"):  # (export writes only tables with one; without it each import adds the rows again)
            raise BundleError(f"{path}:1: tables.{t}.primary_key: none; a bundle's tables each have one (else a "
                              "second import would add their rows again); nothing was imported")
    return head


class _Orphans:
    """Finds orphan rows while a bundle is read (see :func:`agora.traces.bundle_import.import_bundle`)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[Any, str], tuple[Any, int]] = {}  # (run, id_key) -> (the id as written, its line)
        self.clash: tuple[int, Any, Any, Any, int] | None = None  # the first: line, run, id, other id, its line
        self.questions: set[tuple[Any, Any]] = set()
        self.runs_with_questions: set[Any] = set()
        self.results: dict[tuple[Any, Any], int] = {}
        self.calls: dict[tuple[Any, Any], list[Any]] = {}  # (run, question) -> [first line, any failed attempt]

    def see(self, table: str, row: dict[str, Any], line: int) -> None:
        rid, qid = row.get("run_id"), row.get("question_id")
        if table == "questions":
            self.questions.add((rid, qid))
            self.runs_with_questions.add(rid)
            if isinstance(qid, str) and self.clash is None:
                first = self.ids.setdefault((rid, id_key(qid)), (qid, line))
                if first[0] != qid:
                    self.clash = (line, rid, qid, first[0], first[1])
        elif table == "results":
            self.results.setdefault((rid, qid), line)
        elif table == "model_calls" and rid is not None and qid is not None:
            seen = self.calls.setdefault((rid, qid), [line, False])
            seen[1] = seen[1] or row.get("error") is not None

    def check(self, path: Path) -> None:
        """Raises BundleError naming the first orphan's line, table, run and question, or the first
        two question ids of one run that are one id spelled two ways (:func:`agora.tasks.problem.id_key`)."""
        if self.clash is not None:
            line, rid, qid, other, first = self.clash
            raise BundleError(f"{path}:{line}: questions: run {rid!r} has question ids {qid!r} and {other!r} (line "
                              f"{first}), {SAME_ID}; nothing was imported")
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
            check_run_id(r, "run id", max_chars=MAX_STORED_RUN_ID_CHARS)
        except ValueError as exc:
            raise BundleError(f"{path}:1: runs: {exc}; nothing was imported") from None


def key_text(pk: Sequence[str], row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={row.get(k)!r}" for k in pk)
