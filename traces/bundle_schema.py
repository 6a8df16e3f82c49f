"""The table schemas a bundle is checked against: Agora's own tables (their column types and primary
keys, :mod:`agora.traces.schema`) and, for other tables, the SQLite types of the bundle's header;
each value a bundle row holds must be one the store would have written to its column.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from agora.tasks.loaders import SURROGATE
from agora.traces import schema
from agora.traces.bench_spec import BENCH_CELLS, BENCHES
from agora.traces.bundle import BundleError

_TYPES = {"TEXT": str, "INTEGER": int, "REAL": float, "FLOAT": float, "BLOB": bytes, "NUMERIC": float, "": str}
#: Column → Python type of every table :mod:`agora.traces.schema` documents; a bundle's values are
#: checked against these (other tables: against the SQLite types of the bundle's header).
SCHEMA_TYPES: dict[str, dict[str, type]] = {
    **schema.TABLES, "duels": schema.DUELS, "reputation_snapshots": schema.REPUTATION_SNAPSHOTS,
    "leader_snapshots": schema.LEADER_SNAPSHOTS, "preference_pairs": schema.PREFERENCE_PAIRS,
    "benches": BENCHES, "bench_cells": BENCH_CELLS}
_TYPE_NAMES = {int: "an integer", float: "a real number", str: "text", bytes: "bytes"}
#: Primary key of every table :data:`SCHEMA_TYPES` documents (the core tables' from :mod:`agora.traces.schema`).
KNOWN_PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    **schema.PRIMARY_KEYS, "duels": ("duel_id",), "reputation_snapshots": ("duel_id", "model"),
    "leader_snapshots": ("duel_id",), "preference_pairs": ("pair_id",), "benches": ("bench_id",),
    "bench_cells": ("bench_id", "task", "method")}
#: Columns the store writes as 0 or 1 (NULL where unknown): a bundle's 5 in ``results.correct`` would
#: be read as five right answers (an accuracy of 500 %).
FLAGS: dict[str, tuple[str, ...]] = {
    "questions": ("correct",), "results": ("correct",), "duels": ("correct_a", "correct_b", "tie"),
    "benches": ("complete",)}
#: Counts and seconds the store writes (tokens, samples, calls, latencies): never negative; a negative
#: one would lower a run's reported cost or time.
COUNTS: dict[str, tuple[str, ...]] = {
    "questions": ("model_calls", "prompt_tokens", "completion_tokens", "wall_s"),
    "results": ("samples", "completion_tokens", "calls", "shared_calls", "shared_samples", "shared_tokens",
                "latency_s", "shared_latency_s"),
    "model_calls": ("prompt_tokens", "completion_tokens", "attempt", "sample_index", "latency_s")}
#: SQLite types a header may declare for a column of each Python type of :data:`SCHEMA_TYPES`.
_SQL_NAMES = {str: "TEXT", int: "INTEGER", float: "FLOAT"}
_DECLARED = {str: {"TEXT", ""}, int: {"INTEGER", "INT", ""}, float: {"FLOAT", "REAL", "NUMERIC", "DOUBLE", ""}}


def check_known_table(path: Path, table: str, info: dict[str, Any]) -> None:
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
            raise BundleError(f"{path}:1: tables.{table}.columns.{c}: declared {short(declared)}, but Agora's "
                              f"{table}.{c} is {_TYPE_NAMES[want]} ({_SQL_NAMES[want]}); the header "
                              "is damaged or tampered with; nothing was imported")


def sql_type(declared: Any) -> str:
    """The SQLite column type for a header's declared type (TEXT when unknown)."""
    name = str(declared or "").upper()
    return name if name in _TYPES and name else "TEXT"


def plain_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and name.isascii() and name.replace("_", "").isalnum()


def short(value: Any, width: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _column_type(table: str, info: dict[str, Any], column: str) -> type | None:
    """The Python type of ``table.column``: :data:`SCHEMA_TYPES`, else the header's SQLite type (None: any)."""
    known = SCHEMA_TYPES.get(table, {}).get(column)
    if known is not None:
        return known
    declared = str(info["columns"].get(column) or "").upper()
    return {"TEXT": str, "INTEGER": int, "REAL": float, "FLOAT": float}.get(declared)


def check_values(path: Path, line: int, table: str, info: dict[str, Any], row: dict[str, Any],
                  pk: Sequence[str]) -> None:
    """Refuse a value the store would not have written to its column: text in an integer or real
    column, a number in a text column, a list or object anywhere, a NULL primary key column. Integer
    columns take integers (a JSON ``true``/``false`` or a whole real such as ``3.0`` is stored as the
    integer SQLite makes of it); real columns take integers and reals (not NaN or infinite); any
    other column may be NULL. A yes/no column (:data:`FLAGS`) holds 0 or 1 and a count or a
    number of seconds (:data:`COUNTS`) is not negative. Text holding a lone surrogate (a JSON ``"\\ud800"`` escape without
    its pair) is refused: no database stores it."""
    for column, value in row.items():
        if value is None:
            if column in pk:
                raise BundleError(f"{path}:{line}: {table}.{column}: null in a primary key column; nothing was imported")
            continue
        want = _column_type(table, info, column)
        if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
            raise BundleError(f"{path}:{line}: {table}.{column}: {short(value)} is beyond SQLite's 64-bit integers; "
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
            raise BundleError(f"{path}:{line}: {table}.{column}: {short(value)} is not {what}; "
                              "nothing was imported")
        if column in FLAGS.get(table, ()) and value not in (0, 1):
            raise BundleError(f"{path}:{line}: {table}.{column}: {short(value)} is not 0 or 1 (a yes/no column); "
                              "nothing was imported")
        if column in COUNTS.get(table, ()) and value < 0:
            raise BundleError(f"{path}:{line}: {table}.{column}: {short(value)} is negative (a count or seconds); "
                              "nothing was imported")
        if isinstance(value, str) and (bad := SURROGATE.search(value)):
            raise BundleError(f"{path}:{line}: {table}.{column}: a lone surrogate (\\u{ord(bad.group()):04x} at character "
                              f"{bad.start()}: half of a UTF-16 pair, not a character; no database can store it); "
                              "nothing was imported")
        if table == "model_calls" and column == "program_run":
            _check_program_run(path, line, value)


def _check_program_run(path: Path, line: int, value: str) -> None:
    """``model_calls.program_run`` is the JSON the store writes: an object whose ``program``,
    ``output`` and ``error`` are text or null and ``seconds`` a finite number or null."""
    where = f"{path}:{line}: model_calls.program_run"
    try:
        run = json.loads(value)
    except ValueError:
        raise BundleError(f"{where}: {short(value)} is not JSON; nothing was imported") from None
    if not isinstance(run, dict):
        raise BundleError(f"{where}: {short(value)} is not a JSON object; nothing was imported")
    for key in ("program", "output", "error"):
        if not isinstance(run.get(key), (str, type(None))):
            raise BundleError(f"{where}: {key} {short(run[key])} is not a text or null; nothing was imported")
    seconds = run.get("seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not math.isfinite(seconds) or seconds < 0):
        raise BundleError(f"{where}: seconds {short(seconds)} is not a number of seconds or null; "
                          "nothing was imported")
