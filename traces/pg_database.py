"""The part of ``sqlite_utils.Database`` the trace store and its readers use, on Postgres (psycopg 3
and a ``psycopg_pool`` connection pool): what lets :class:`agora.traces.postgres.PostgresTraceStore`
run the SQLite store's own code.

:class:`PostgresDatabase` offers ``query``, ``execute``, ``table_names``, ``db[table]`` (with
``create``, ``columns``, ``columns_dict``, ``rows_where``, ``insert``, ``upsert``, ``update``...) and
``db.conn`` as a transaction, and writes the SQL it is given in Postgres's dialect: ``?`` placeholders
become ``%s``, ``[name]`` quoting ``"name"``, ``INSERT OR IGNORE`` ``ON CONFLICT DO NOTHING``, and
``PRAGMA table_info`` reads the column list. Every table gets a hidden ``rowid`` identity column
(insertion order, as SQLite's), left out of ``select *`` rows and of ``columns_dict``; the database
gets ``julianday(text)`` and ``sum(boolean)``, the two SQLite functions the reports use
(:data:`SETUP`). Values Postgres refuses where SQLite stores them (a NUL character, an integer beyond
64 bits) are stored as SQLite's store stores the ones it refuses (:func:`_storable`).
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Any, Iterable, Iterator, Sequence

from agora.models.urls import shown_url
from agora.traces.errors import TraceStoreError
from agora.traces.pg_sql import (
    _CREATE_TABLE,
    _PRAGMA_TABLE_INFO,
    SCHEMES,
    _params,
    _row,
    _stored,
    _value,
    check_url,
    is_postgres_url,
    to_postgres,
    without_password,
)

__all__ = ["PostgresDatabase", "PostgresTable", "SCHEMES", "SETUP", "is_postgres_url", "to_postgres"]

#: Connections per store: enough for a run's questions in flight (its threads share them).
POOL_MAX_SIZE = 16

#: Seconds a statement waits for a lock another session holds on the trace tables (an admin's ``LOCK
#: TABLE``, a ``VACUUM FULL``) before it fails: Postgres's ``lock_timeout``, as SQLite's busy timeout
#: (30 s). Set on the store's connections where the role or database sets none of its own.
LOCK_TIMEOUT_S = 30.0

_TYPES = {str: "TEXT", int: "BIGINT", float: "DOUBLE PRECISION", bytes: "BYTEA", bool: "BIGINT",
          dict: "TEXT", list: "TEXT"}
_PY = {"text": str, "bigint": int, "integer": int, "smallint": int, "double precision": float, "real": float,
       "bytea": bytes, "numeric": float, "boolean": int}

_SQLITE_TYPES = {str: "TEXT", int: "INTEGER", float: "FLOAT", bytes: "BLOB"}

#: What every Postgres trace database gets (idempotent): the SQLite functions the reports use.
SETUP = """
CREATE OR REPLACE FUNCTION julianday(stamp text) RETURNS double precision LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN extract(epoch from stamp::timestamptz) / 86400.0 + 2440587.5;
EXCEPTION WHEN others THEN
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION agora_bool_sum(acc bigint, value boolean) RETURNS bigint LANGUAGE sql IMMUTABLE AS
    'SELECT acc + coalesce(value::int, 0)';
DO $$ BEGIN
    CREATE AGGREGATE sum(boolean) (sfunc = agora_bool_sum, stype = bigint, initcond = '0');
EXCEPTION WHEN duplicate_function THEN NULL;
END $$;
"""


def _needs_driver() -> Any:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401 - (checked here: the pool is imported where it is made)
    except ImportError:
        raise TraceStoreError("a postgresql:// trace store needs psycopg and psycopg-pool: "
                              "pip install 'agora-llm[postgres]' (or -e '.[postgres]' in a checkout)") from None
    return psycopg



def _configure(conn: Any) -> None:
    """A new pooled connection's settings: :data:`LOCK_TIMEOUT_S` as its ``lock_timeout`` unless the
    role or database set one (a refusal, such as an admin's tiny ``statement_timeout``, leaves the
    connection as it is: its next statement says why)."""
    import psycopg

    with contextlib.suppress(psycopg.Error):
        conn.execute("select set_config('lock_timeout', %s, false) where current_setting('lock_timeout') = '0'",
                     [f"{int(LOCK_TIMEOUT_S * 1000)}ms"])


def pg_reason(exc: BaseException, url: str) -> str:
    """A driver's error about ``url`` as one line for a message: its lines joined (less the statement
    it quotes and the caret under it), ``url``'s password
    left out (:func:`~agora.traces.pg_sql.without_password`), at most 300 characters (its class name
    when it says nothing)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not re.match(r"LINE \d+:|\^$", line)]  # the statement quoted, a caret under it
    reason = without_password(" ".join(lines), url)
    return reason[:300] or type(exc).__name__


class _Result:
    """What ``PostgresDatabase.execute`` returns: the rows (tuples) read at once, ``rowcount``."""

    def __init__(self, rows: list[tuple], rowcount: int, description: Any):
        self._rows, self.rowcount, self.description = rows, rowcount, description

    def fetchone(self) -> tuple | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[tuple]:
        rows, self._rows = self._rows, []
        return rows

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.fetchall())


class _Transaction:
    """``db.conn``: ``with db.conn:`` is one transaction on one pooled connection for this thread
    (nested blocks join it; committed when the outermost ends, rolled back on an error), as
    ``with sqlite3_connection:`` is for the SQLite store. ``execute``/``executemany`` run on that
    transaction, or on a connection of their own (committed at once) outside one."""

    def __init__(self, db: "PostgresDatabase"):
        self.db = db

    def __enter__(self) -> "_Transaction":
        local = self.db._local
        if getattr(local, "depth", 0) == 0:
            local.cm = self.db.pool.connection()
            local.conn = local.cm.__enter__()
            local.tx = local.conn.transaction()
            local.tx.__enter__()
        local.depth = getattr(local, "depth", 0) + 1
        return self

    def __exit__(self, *exc: Any) -> None:
        local = self.db._local
        local.depth -= 1
        if local.depth == 0:
            try:
                local.tx.__exit__(*exc)
            finally:
                tx_conn_cm, local.cm, local.conn, local.tx = local.cm, None, None, None
                tx_conn_cm.__exit__(*exc)

    @property
    def in_transaction(self) -> bool:
        return getattr(self.db._local, "depth", 0) > 0

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> _Result:
        return self.db.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.db._connection() as conn, conn.cursor() as cur:
            cur.executemany(to_postgres(sql), [tuple(_stored(v) for v in r) for r in rows])

    def commit(self) -> None:  # statements outside a ``with db.conn:`` block are committed already
        pass


class PostgresTable:
    """``db[name]``: the part of ``sqlite_utils.Table`` the store and its readers use."""

    def __init__(self, db: "PostgresDatabase", name: str):
        self.db, self.name = db, name

    @property
    def _q(self) -> str:
        return '"' + self.name.replace('"', '""') + '"'

    @property
    def columns_dict(self) -> dict[str, type]:
        rows = self.db.query("select column_name, data_type from information_schema.columns where table_schema = "
                             "current_schema() and table_name = ? order by ordinal_position", [self.name])
        return {r["column_name"]: _PY.get(r["data_type"], str) for r in rows if r["column_name"] != "rowid"}

    @property
    def columns(self) -> list[Any]:
        """As sqlite-utils' ``Table.columns``: ``cid, name, type`` (SQLite's type names: TEXT,
        INTEGER, FLOAT, BLOB), ``notnull``, ``default_value``, ``is_pk`` (1-based position in the
        primary key, 0 outside it)."""
        from collections import namedtuple

        Column = namedtuple("Column", "cid name type notnull default_value is_pk")
        pk = self._pk(None)
        return [Column(i, n, _SQLITE_TYPES.get(t, "TEXT"), 0, None, pk.index(n) + 1 if n in pk else 0)
                for i, (n, t) in enumerate(self.columns_dict.items())]

    @property
    def count(self) -> int:
        return next(iter(self.db.query(f"select count(*) as n from {self._q}")))["n"]

    def create(self, columns: dict[str, Any], pk: str | Sequence[str] | None = None, *, if_not_exists: bool = False,
               **_: Any) -> "PostgresTable":
        keys = [pk] if isinstance(pk, str) else list(pk or [])
        defs = [f'"{c}" {_TYPES.get(t, "TEXT")}' + (" NOT NULL" if c in keys else "") for c, t in columns.items()]
        defs.append("rowid BIGINT GENERATED BY DEFAULT AS IDENTITY")
        if keys:
            defs.append(f"PRIMARY KEY ({', '.join(chr(34) + k + chr(34) for k in keys)})")
        if if_not_exists and self.name in self.db.table_names():
            return self
        self._ddl(f"CREATE TABLE {'IF NOT EXISTS ' if if_not_exists else ''}{self._q} ({', '.join(defs)})")
        return self

    def _ddl(self, sql: str) -> None:
        """Run a schema change one process at a time (an advisory lock held to the end of its
        transaction): two workers' ``CREATE TABLE IF NOT EXISTS`` at once would otherwise collide in
        Postgres's catalog (a unique violation on ``pg_type``)."""
        with self.db.conn:
            self.db.execute("select pg_advisory_xact_lock(hashtext('agora-ddl'))")
            self.db.execute(sql)

    def add_column(self, name: str, kind: Any = str) -> None:
        self._ddl(f'ALTER TABLE {self._q} ADD COLUMN IF NOT EXISTS "{name}" {_TYPES.get(kind, "TEXT")}')

    def create_index(self, columns: Sequence[str], *, if_not_exists: bool = False, unique: bool = False,
                     index_name: str | None = None, **_: Any) -> None:
        name = index_name or f"idx_{self.name}_{'_'.join(columns)}"
        if if_not_exists and self.db.execute("select to_regclass(?) is not null", [name]).fetchone()[0]:
            return  # (CREATE INDEX IF NOT EXISTS needs the table's owner even when the index exists)
        self._ddl(f"CREATE {'UNIQUE ' if unique else ''}INDEX {'IF NOT EXISTS ' if if_not_exists else ''}"
                  f"\"{name}\" ON {self._q} ({', '.join(chr(34) + c + chr(34) for c in columns)})")

    def rows_where(self, where: str | None = None, where_args: Sequence[Any] | None = None, *,
                   order_by: str | None = None, select: str = "*", limit: int | None = None) -> Iterator[dict]:
        sql = f"select {select} from {self._q}" + (f" where {where}" if where else "")
        sql += f" order by {order_by}" if order_by else " order by rowid"
        sql += f" limit {int(limit)}" if limit is not None else ""
        return iter(self.db.query(sql, list(where_args or [])))

    @property
    def rows(self) -> Iterator[dict]:
        return self.rows_where()

    def _pk(self, pk: str | Sequence[str] | None) -> list[str]:
        if pk is not None:
            return [pk] if isinstance(pk, str) else list(pk)
        rows = self.db.query(
            "select a.attname as name from pg_index i join pg_attribute a on a.attrelid = i.indrelid and "
            "a.attnum = any(i.indkey) where i.indrelid = ?::regclass and i.indisprimary order by "
            "array_position(i.indkey::int2[], a.attnum)", [self.name])
        return [r["name"] for r in rows]

    def _write(self, rows: Sequence[dict[str, Any]], pk: Sequence[str], on_conflict: str) -> None:
        if not rows:
            return
        cols = list(dict.fromkeys(c for r in rows for c in r))
        have = self.columns_dict
        for c in cols:  # sqlite-utils' alter=True for new keys: add the column (text)
            if c not in have:
                self.add_column(c, type(next((r[c] for r in rows if r.get(c) is not None), "")))
        names = ", ".join(f'"{c}"' for c in cols)
        sql = f"INSERT INTO {self._q} ({names}) VALUES ({', '.join('%s' for _ in cols)})"
        if on_conflict == "update" and pk:
            updates = ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in cols if c not in pk)
            sql += f" ON CONFLICT ({', '.join(chr(34) + k + chr(34) for k in pk)}) " + (
                f"DO UPDATE SET {updates}" if updates else "DO NOTHING")
        elif on_conflict == "ignore":
            sql += " ON CONFLICT DO NOTHING"
        with self.db._connection() as conn, conn.cursor() as cur:
            cur.executemany(sql, [tuple(_stored(r.get(c)) for c in cols) for r in rows])

    def insert(self, row: dict[str, Any], pk: Any = None, *, replace: bool = False, ignore: bool = False,
               **_: Any) -> "PostgresTable":
        return self.insert_all([row], pk=pk, replace=replace, ignore=ignore)

    def insert_all(self, rows: Iterable[dict[str, Any]], pk: Any = None, *, replace: bool = False,
                   ignore: bool = False, **_: Any) -> "PostgresTable":
        rows = list(rows)
        self._write(rows, self._pk(pk) if replace else [], "update" if replace else "ignore" if ignore else "")
        return self

    def upsert(self, row: dict[str, Any], pk: Any = None, **_: Any) -> "PostgresTable":
        return self.upsert_all([row], pk=pk)

    def upsert_all(self, rows: Iterable[dict[str, Any]], pk: Any = None, **_: Any) -> "PostgresTable":
        self._write(list(rows), self._pk(pk), "update")
        return self

    def update(self, pk_values: Any, updates: dict[str, Any] | None = None, **_: Any) -> "PostgresTable":
        if not updates:
            return self
        keys = self._pk(None)
        values = list(pk_values) if isinstance(pk_values, (list, tuple)) else [pk_values]
        sets = ", ".join(f'"{c}" = %s' for c in updates)
        where = " and ".join(f'"{k}" = %s' for k in keys)
        with self.db._connection() as conn:
            conn.execute(f"UPDATE {self._q} SET {sets} WHERE {where}", [*map(_stored, updates.values()), *values])
        return self


class PostgresDatabase:
    """The part of ``sqlite_utils.Database`` the trace store and its readers use, on a psycopg
    connection pool (see the module docstring). Thread-safe: each thread's ``with db.conn:`` block
    holds a pooled connection of its own.

    Args:
        url: a ``postgresql://`` URL (libpq's: ``postgresql://user:pw@host:5432/db``,
            ``postgresql:///db?host=/run/postgresql``).
        max_size: pooled connections at most.

    Raises:
        TraceStoreError: the URL does not parse, psycopg is missing, or the server cannot be reached
            (the URL shown without its password).
    """

    def __init__(self, url: str, *, max_size: int = POOL_MAX_SIZE):
        try:
            check_url(url)
        except ValueError as exc:
            raise TraceStoreError(str(exc)) from None
        psycopg = _needs_driver()
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self.url = url
        self._local = threading.local()
        self._dict_row = dict_row
        from psycopg.conninfo import conninfo_to_dict

        try:  # one connection first: a wrong URL, password or host fails here at once, with the server's reason
            # (with the URL's own connect_timeout when it gives one, as the pool's connections will: a bad
            # one fails here, not in the pool's background retries until its 30 s timeout)
            own_timeout = "connect_timeout" in conninfo_to_dict(url)
            psycopg.connect(url, **({} if own_timeout else {"connect_timeout": 10})).close()
        except psycopg.Error as exc:
            reason = pg_reason(exc, url)
            raise TraceStoreError(f"{shown_url(url)}: cannot connect to the Postgres trace store ({reason})") from None
        # check: a pooled connection the server ended while it sat idle (an admin's idle_session_timeout,
        # a proxy's idle limit, a restarted server) is replaced when taken, not handed to a write
        self.pool = ConnectionPool(url, min_size=1, max_size=max_size, open=True, check=ConnectionPool.check_connection,
                                   configure=_configure, kwargs={"autocommit": True}, name="agora-traces")
        self.conn = _Transaction(self)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """This thread's transaction connection, else a pooled one (autocommit) for one statement."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.pool.connection() as conn:
            yield conn

    def query(self, sql: str, params: Sequence[Any] | dict | None = None) -> Iterator[dict[str, Any]]:
        with self._connection() as conn, conn.cursor(row_factory=self._dict_row) as cur:
            cur.execute(to_postgres(sql, params is not None), _params(params))
            rows = cur.fetchall() if cur.description is not None else []
        return iter([_row(r) for r in rows])

    def execute(self, sql: str, params: Sequence[Any] | dict | None = None) -> _Result:
        info = _PRAGMA_TABLE_INFO.match(sql)
        if info:  # SQLite's column list: (cid, name, type, notnull, default, pk)
            return _Result([tuple(c) for c in PostgresTable(self, info.group(1)).columns], -1, None)
        create = _CREATE_TABLE.match(sql)
        if create and "rowid" not in sql:  # every table has SQLite's rowid (insertion order)
            sql = sql.rstrip().rstrip(";")
            sql = sql[:-1] + ", rowid BIGINT GENERATED BY DEFAULT AS IDENTITY)"
        with self._connection() as conn, conn.cursor() as cur:
            cur.execute(to_postgres(sql, params is not None), _params(params))
            rows = cur.fetchall() if cur.description is not None else []
            return _Result([tuple(_value(v) for v in r) for r in rows], cur.rowcount, cur.description)

    def executescript(self, sql: str) -> None:
        with self._connection() as conn:
            conn.execute(sql)

    def __getitem__(self, name: str) -> PostgresTable:
        return PostgresTable(self, name)

    def table_names(self) -> list[str]:
        return [r["table_name"] for r in self.query(
            "select table_name from information_schema.tables where table_schema = current_schema() "
            "and table_type = 'BASE TABLE' order by table_name")]

    def close(self) -> None:
        self.pool.close()
