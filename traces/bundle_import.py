"""Loading a bundle into a trace store (``agora import``; format: :mod:`agora.traces.bundle`): checked
whole first (:func:`agora.traces.bundle_reading.check_bundle`), then written in one transaction.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from agora.traces.bundle import BundleError, BundleSummary, shared_source
from agora.traces.bundle_reading import bundle_lines, check_footer, key_text, scan_bundle
from agora.traces.bundle_schema import sql_type
from agora.traces.pg_sql import is_postgres_url
from agora.tasks.problem import SAME_ID, id_clash
from agora.traces.store import TraceStore, TraceStoreError

def _same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("protocol", "started_at", "config"))


def _differing(cols: Sequence[str], old: Sequence[Any], new: Sequence[Any], postgres: bool = False) -> list[str]:
    """Columns whose stored value differs from the bundle's (``1`` and ``1.0`` are the same value; in a
    Postgres store (``postgres``), a bundle's NUL character is the U+FFFD the store wrote for it, so
    importing such a bundle twice adds nothing the second time)."""
    def same(a: Any, b: Any) -> bool:
        return a == b or (postgres and isinstance(b, str) and "\x00" in b and a == b.replace("\x00", "\ufffd"))
    return [c for c, a, b in zip(cols, old, new) if not same(a, b)]


def json_key(values: Sequence[Any]) -> str:
    """A row's primary key values as one comparable text (``1`` and ``1.0`` alike, as SQLite keys them)."""
    return json.dumps([float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in values],
                      ensure_ascii=False, default=str)


def import_bundle(path: str | Path, store: TraceStore, *, force: bool = False) -> BundleSummary:
    """Load the bundle ``path`` into ``store`` in one transaction: rows whose primary key is new are
    added; rows already there with the same content are skipped (importing twice adds nothing), and
    so is a row the bundle repeats identically (counted apart: :attr:`BundleSummary.repeated`).

    Refused, writing nothing: a row whose primary key exists in ``store`` with other content (the
    message names the table, the key and the columns that differ), and a new row for a run that
    already exists in ``store`` (a later state of that run), unless ``force``: the bundle's rows then
    replace the stored ones in place (their row order kept) and the new rows are added. Always
    refused, ``force`` or not: a run id that exists in ``store`` as another run (other protocol,
    start time or settings), a row whose key is a row of another run in ``store`` (``model_calls`` is
    keyed by ``call_id`` alone: ``--force`` would move that run's call into the bundle's), a run id
    :func:`agora.traces.store.check_run_id` refuses, and orphans:
    a ``results`` row of a question the bundle's ``questions`` do not hold for that run, or a
    question's ``model_calls`` rows in a run that has questions when that question is not among
    them and none of its calls failed (a failed question, recorded without a ``questions`` row,
    has at least one failed attempt; runs without questions, duels and training, are not checked).

    The whole bundle is checked first (:func:`agora.traces.bundle_reading.check_bundle`: row shapes,
    value types, runs, keys the bundle gives two contents, orphans), before ``store`` is touched.

    Not refused: a run that took shared candidates from a run neither the bundle nor ``store`` holds
    (matched by run id); it is imported and named in :attr:`agora.traces.bundle.BundleSummary.missing_shared`.

    Raises:
        BundleError: anything :func:`agora.traces.bundle_reading.check_bundle` refuses, a conflicting
            row or a new row of a run already in ``store`` without ``force``, or a run id that exists
            in ``store`` as another run.
        TraceStoreError: a read-only store.
    """
    path = Path(path)
    head, footer, read, digest, header_digest = scan_bundle(path)  # check_bundle; its footer counts last, after the store's own refusals
    if store.readonly:
        raise TraceStoreError(f"{store.path}: opened read-only; import needs to write")
    tables: dict[str, dict[str, Any]] = head["tables"]
    added = {t: 0 for t in tables}
    skipped = replaced = repeated = 0
    seen: set[tuple[str, str]] = set()  # (table, key) of every keyed row read so far: a bundle's own twins
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
                defs = [f"[{c}] {sql_type(ty)}" for c, ty in cols.items()]
                if pk:
                    defs.append(f"PRIMARY KEY ({', '.join(f'[{k}]' for k in pk)})")
                db.conn.execute(f"CREATE TABLE [{t}] ({', '.join(defs)})")
            have = {r[1] for r in db.conn.execute(f"PRAGMA table_info([{t}])")}
            for c, ty in cols.items():
                if c not in have:
                    db.conn.execute(f"ALTER TABLE [{t}] ADD COLUMN [{c}] {sql_type(ty)}")
        bundle_runs: dict[str, bool] = {}
        lines = bundle_lines(path)
        next(lines)
        for i, line in lines:
            if "end" in line:
                break
            t = line["t"]  # (shape, types, runs, keys and orphans: checked by scan_bundle above)
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
            if t == "questions" and cur.rowcount and bundle_runs.get(rid) and isinstance(row.get("question_id"), str):
                other = id_clash(store.question_ids(rid), row["question_id"])  # (--force: a new question of the run)
                if other is not None:
                    raise BundleError(f"{path}:{i}: questions: question id {row['question_id']!r} of run {rid!r} and "
                                      f"its question id {other!r} in {store.path} are {SAME_ID}; nothing was imported")
            key = (t, json_key([row[k] for k in pk])) if pk else None
            if not cur.rowcount and key in seen:  # the bundle's own twin of a row read above (checked identical)
                repeated += 1
                continue
            if key is not None:
                seen.add(key)
            if not cur.rowcount and pk:
                where = " and ".join(f"[{k}] = ?" for k in pk)
                stored = db.conn.execute(f"select {names} from [{t}] where {where}", [row[k] for k in pk]).fetchone()
                owner = dict(zip(cols, stored)).get("run_id") if stored is not None else None
                if "run_id" in cols and "run_id" not in pk and owner != rid:  # (model_calls: keyed by call_id alone)
                    raise BundleError(f"{path}:{i}: {t}: the row {key_text(pk, row)} belongs to run {owner!r} in "
                                      f"{store.path}, not to the bundle's run {rid!r}; nothing was imported, --force "
                                      "or not (import into another database)")
                differ = _differing(cols, stored, line["v"], is_postgres_url(store.path)) if stored is not None else []
                if differ and not force:
                    raise BundleError(f"{path}:{i}: {t}: the row {key_text(pk, row)} already exists in {store.path} "
                                      f"with other content ({', '.join(differ[:6])} differ); nothing was imported "
                                      "(--force replaces such rows with the bundle's)")
                if differ:
                    sets = ", ".join(f"[{c}] = ?" for c in cols if c not in pk)
                    db.conn.execute(f"update [{t}] set {sets} where {where}",
                                    [row[c] for c in cols if c not in pk] + [row[k] for k in pk])
                    replaced += 1
            added[t] += cur.rowcount
            skipped += 1 - cur.rowcount
        check_footer(path, footer, read, digest, header_digest)
        missing = {rid: src for rid in bundle_runs if (src := shared_source(store, rid)) and store.get_run(src) is None}
    return BundleSummary(path, tuple(head.get("runs") or ()), tuple(head.get("benches") or ()), added,
                         path.stat().st_size, skipped - replaced, replaced, missing_shared=missing, repeated=repeated)
