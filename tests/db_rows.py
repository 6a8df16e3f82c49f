"""Read a trace database in a test: :func:`rows`, the rows of one SQL query on a SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def rows(db: str | Path, sql: str, *params: Any) -> list[tuple]:
    """The rows of ``sql`` (with ``params``) on the SQLite file ``db``, the connection closed after."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()
