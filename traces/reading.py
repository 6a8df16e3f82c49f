"""The trace store's readers: the queries the layers above (runner, reports, training, duels)
make, on the store's ``db`` (a ``sqlite_utils.Database``, or the Postgres store's database of the
same surface: :mod:`agora.traces.postgres`)."""

from __future__ import annotations

import json
from typing import Any, Sequence

from agora.traces.errors import TraceStoreError


class TraceReader:
    """The read side of :class:`~agora.traces.store.TraceStore`: every query on its ``db``, no write.
    Subclasses set ``path`` (for messages) and ``db``."""

    path: str
    db: Any

    def _run_json(self, row: dict[str, Any], column: str) -> Any:
        """The JSON column ``column`` of a ``runs`` row, decoded.

        Raises:
            TraceStoreError: the value is not JSON (the row was changed outside Agora): names the
                database, the run and the column.
        """
        try:
            return json.loads(row[column] or "null")
        except (TypeError, ValueError) as exc:
            raise TraceStoreError(f"{self.path}: runs row {row['run_id']!r}, column {column}: not valid JSON ({exc}); "
                                  "the row was changed outside Agora: repair it or pick a new --run-id") from None

    def get_run(self, run_id: str) -> dict | None:
        rows = list(self.db["runs"].rows_where("run_id = ?", [run_id]))
        return rows[0] if rows else None

    def run_config(self, run_id: str) -> dict[str, Any] | None:
        """The settings run ``run_id`` was started with (its ``runs`` row's ``config`` column),
        decoded: ``None`` when the database holds no such run, ``{}`` when the run recorded no
        settings (or a JSON value that is not an object).

        Raises:
            TraceStoreError: the column is not valid JSON: names the database and the run id.
        """
        row = self.get_run(run_id)
        if row is None:
            return None
        config = self._run_json(row, "config") if isinstance(row["config"], (str, type(None))) else row["config"]
        return dict(config) if isinstance(config, dict) else {}

    # ------------------------------------------------------------------ questions

    def run_ids(self, prefix: str = "") -> list[str]:
        """The ids of the runs in this DB that start with ``prefix`` (all by default), oldest first."""
        if not self._has("runs"):
            return []
        return [r["run_id"] for r in self.db.query("select run_id from runs order by rowid")
                if r["run_id"].startswith(prefix)]

    def question_times(self, run_ids: Sequence[str]) -> dict[str, tuple[int, float]]:
        """Run id → (questions recorded, their mean wall seconds), for the runs that have any."""
        if not run_ids or not self._has("questions"):
            return {}
        marks = ",".join("?" * len(run_ids))
        rows = self.db.query(f"select run_id, count(*) as n, avg(wall_s) as wall from questions "
                             f"where run_id in ({marks}) group by run_id", list(run_ids))
        return {r["run_id"]: (r["n"], float(r["wall"] or 0.0)) for r in rows}

    def finished_questions(self, run_id: str) -> set[str]:
        """Ids of questions already recorded for ``run_id`` (a rerun skips them; failed questions
        are not recorded, so a rerun retries them)."""
        return {r["question_id"] for r in self.db.query(
            "select question_id from questions where run_id = ?", [run_id])}

    def question_ids(self, run_id: str, prefix: str = "", *, answered: bool = False) -> set[str]:
        """Ids starting with ``prefix`` of the questions of ``run_id`` that have a ``questions`` row or
        a model call (failed questions too): the ids taken in the run; ``answered``: those with a
        ``questions`` row only."""
        sql = "select question_id from questions where run_id = ? and substr(question_id, 1, ?) = ?"
        if not answered:
            sql += " union select question_id from model_calls where run_id = ? and substr(question_id, 1, ?) = ?"
        return {r["question_id"] for r in self.db.query(sql, [run_id, len(prefix), prefix] * (1 if answered else 2))}

    def results(self, run_id: str) -> list[dict]:
        return list(self.db.query(
            "select r.*, q.idx from results r join questions q using (run_id, question_id) "
            "where r.run_id = ? order by q.idx, r.method", [run_id]))

    def questions(self, run_id: str) -> list[dict]:
        return list(self.db["questions"].rows_where("run_id = ?", [run_id], order_by="idx"))

    def calls(self, run_id: str, question_id: str | None = None) -> list[dict]:
        """The ``model_calls`` rows of ``run_id`` (of its question ``question_id`` when given), in a
        fixed order: by question, in dataset order (``questions.idx``; the calls of questions without
        a ``questions`` row, failed or not question-shaped such as duels, after them), then in the
        order they were written (``rowid``: a question's calls in the order its samples and failed
        attempts were recorded). Not the order a query plan happens to give, which changes with the
        indexes a database has."""
        if question_id is not None:
            return list(self.db["model_calls"].rows_where("run_id = ? and question_id = ?", [run_id, question_id],
                                                          order_by="rowid"))
        if not self._has("questions"):
            return list(self.db["model_calls"].rows_where("run_id = ?", [run_id], order_by="rowid"))
        return list(self.db.query(
            "select c.* from model_calls c left join questions q on q.run_id = c.run_id and q.question_id = c.question_id "
            "where c.run_id = ? order by q.idx is null, q.idx, c.rowid", [run_id]))

    def _has(self, table: str) -> bool:
        return table in self.db.table_names()

    def protocol_questions(self, protocol: str, run_ids: Sequence[str] = ()) -> list[dict]:
        """Recorded questions of the runs of ``protocol`` (of ``run_ids`` when given), by run and index;
        ``[]`` when the DB has no questions."""
        if not self._has("questions") or not self._has("runs"):
            return []
        where, params = "r.protocol = ?", [protocol]
        if run_ids:
            where += f" and q.run_id in ({', '.join('?' for _ in run_ids)})"
            params += list(run_ids)
        return list(self.db.query(
            f"select q.* from questions q join runs r using (run_id) where {where} order by q.run_id, q.idx", params))

    def first_call_messages(self, run_id: str, question_id: str, node: str, agent: int | None = None) -> list | None:
        """The prompt (messages, decoded) of the first successful call ``node`` made for a question
        (by ``agent`` when given), or ``None``."""
        if not self._has("model_calls"):
            return None
        where, params = "run_id = ? and question_id = ? and node = ? and error is null", [run_id, question_id, node]
        if agent is not None:
            where += " and agent = ?"
            params.append(agent)
        rows = list(self.db.query(f"select messages from model_calls where {where} limit 1", params))
        if not rows or rows[0]["messages"] in (None, ""):
            return None
        value = rows[0]["messages"]
        return json.loads(value) if isinstance(value, str) else value

    def preference_pairs(self) -> list[dict]:
        """Every ``preference_pairs`` row (JSON columns as stored), by run, iteration, time and id;
        ``[]`` without the table (a DB without duels)."""
        if not self._has("preference_pairs"):
            return []
        return list(self.db.query("select * from preference_pairs order by run_id, iteration, created_at, pair_id"))

    def duel_rows(self, run_ids: Sequence[str] = (), iterations: Sequence[int] = ()) -> list[dict]:
        """``duels`` rows (ties included) of ``run_ids`` / ``iterations`` (all when empty), in play order;
        ``[]`` without the table."""
        if not self._has("duels"):
            return []
        where, params = ["1 = 1"], []
        if run_ids:
            where.append(f"run_id in ({', '.join('?' for _ in run_ids)})")
            params += list(run_ids)
        if iterations:
            where.append(f"iteration in ({', '.join('?' for _ in iterations)})")
            params += list(iterations)
        return list(self.db.query(f"select * from duels where {' and '.join(where)} order by run_id, duel_number", params))

    def close(self) -> None:
        self.db.close()
