"""Trace DB → TRL datasets: pure builders, no trainer state (the shape of TRL's ``data_utils``).

Two formats, both TRL's *conversational* ones (``trl.data_utils.is_conversational`` is true):

* **Preference (DPO)**: one row per non-tied pair::

      {"prompt":   [{"role": "system", ...}, {"role": "user", "content": x}],
       "chosen":   [{"role": "assistant", "content": winner}],
       "rejected": [{"role": "assistant", "content": loser}],
       "pair_id", "source", "instruction", "chosen_model", "rejected_model", "margin"}

  from the ``preference_pairs`` table written by the duel graph (protocols.md §2: chosen = the
  winner's answer, rejected = the loser's, with margin, judge scores and reputations), or from ALIGN
  runs (:func:`align_pairs`: a correct proposal over an incorrect one to the same question).

* **Prompt-only (GRPO)**: one row per distinct instruction::

      {"prompt": [...messages...], "instruction", "gold", "kind", "judge_scores"}

  from the ``duels`` table (tied duels too) or from problems with gold answers. ``gold``/``kind``
  feed the correctness reward; ``judge_scores`` (JSON: the stored aggregated judge score of every
  answer duelled on the instruction) feeds the stored-judge reward
  (:mod:`agora.training.rewards`).

Filters (:class:`PairFilter`): ties out (always), a minimum margin, dedupe by prompt + answers,
pairs one model took part in. :func:`split_by_instruction` makes a train/validation split that
never puts one instruction on both sides. Exports: JSONL (opens with
``datasets.load_dataset("json", data_files=...)``), Parquet, and ``datasets.Dataset``.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from pathlib import Path
from typing import Annotated, Any, Iterable, Sequence

import sqlite_utils

from agora.tasks.errors import InputError
from agora.agents.prompts import solver_messages
from agora.models.validation import Rule, settings
from agora.tasks import Problem, is_correct
from agora.traces.store import TraceStore

#: Metadata columns kept beside TRL's own; TRL drops them before batching.
DPO_COLUMNS = ("prompt", "chosen", "rejected", "pair_id", "source", "instruction", "chosen_model",
               "rejected_model", "margin")
GRPO_COLUMNS = ("prompt", "instruction", "gold", "kind", "judge_scores")


@settings
class PairFilter:
    """Which preference pairs become DPO rows."""

    min_margin: Annotated[float, Rule(lambda v: v >= 0, "PairFilter.min_margin must be >= 0, got {value}")] = 0.0
    """Keep pairs with ``margin >= min_margin``; ties (margin 0, equal scores or identical texts)
    are always dropped: they carry no preference (protocols.md §2)."""
    model: str | None = None
    """Keep only pairs this model took part in (as chosen or rejected); ``None`` keeps all."""
    dedupe: bool = True
    """Keep the first of the pairs with the same prompt, chosen and rejected texts."""
    run_ids: tuple[str, ...] = ()
    """Keep pairs of these runs; empty keeps all."""
    iterations: tuple[int, ...] = ()
    """Keep pairs of these duel iterations; empty keeps all."""


# ----------------------------------------------------------------------------- reading the DB


def _store(db: str | Path | TraceStore | sqlite_utils.Database) -> TraceStore:
    """The trace store to read (:meth:`TraceStore.reading`: a path opens read-only)."""
    return TraceStore.reading(db)


def _loads(value: Any, default: Any) -> Any:
    if value is None or value == "":
        return default
    return json.loads(value) if isinstance(value, str) else value


class PairRowError(InputError):
    """A ``preference_pairs`` row that cannot become a DPO pair, in one line:
    ``DB: table preference_pairs, row pair_id='p1': column 'chosen': expected text, got NULL``."""


def _sql_value(value: Any) -> str:
    return "NULL" if value is None else f"{type(value).__name__} {value!r:.40}"


def _pair_row(r: dict[str, Any], where: str) -> dict[str, Any]:
    """One ``preference_pairs`` row checked and its JSON columns decoded (``where`` names the row).

    Raises:
        PairRowError: a column of the wrong type (``chosen`` NULL or a number, ``margin`` text, ...),
        a JSON column that is not JSON or not of its shape (``prompt_messages``: a list of
        ``{"role", "content"}`` texts; ``judge_scores``, ``reputations``: objects).
    """
    def bad(column: str, what: str) -> PairRowError:
        return PairRowError(f"{where}: column {column!r}: {what}")

    for column in ("pair_id", "run_id", "chosen", "rejected", "chosen_model", "rejected_model"):
        if not isinstance(r.get(column), str):
            raise bad(column, f"expected text, got {_sql_value(r.get(column))}")
    for column in ("prompt",):
        if r.get(column) is not None and not isinstance(r[column], str):
            raise bad(column, f"expected text or NULL, got {_sql_value(r[column])}")
    for column, required in (("margin", True), ("chosen_score", False), ("rejected_score", False)):
        value = r.get(column)
        if value is None and not required:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise bad(column, f"expected a finite number{'' if required else ' or NULL'}, got {_sql_value(value)}")
    if r.get("iteration") is not None and (not isinstance(r["iteration"], int) or isinstance(r["iteration"], bool)):
        raise bad("iteration", f"expected an integer or NULL, got {_sql_value(r['iteration'])}")
    decoded = {}
    for column, default in (("prompt_messages", []), ("judge_scores", {}), ("reputations", {})):
        try:
            value = _loads(r.get(column), default)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            what = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
            raise bad(column, f"not JSON ({what}): {r.get(column)!r:.40}") from None
        if not isinstance(value, type(default)):
            raise bad(column, f"expected a JSON {'list' if isinstance(default, list) else 'object'}, got {value!r:.40}")
        decoded[column] = value
    for i, m in enumerate(decoded["prompt_messages"]):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise bad("prompt_messages", f"message {i} is not a {{\"role\": text, \"content\": text}} object: {m!r:.40}")
    return {**r, **decoded}


def load_preference_pairs(db: str | Path | TraceStore | sqlite_utils.Database) -> list[dict[str, Any]]:
    """Every row of ``preference_pairs``, JSON columns decoded, ordered by run, iteration, time, id.

    Returns ``[]`` when the table does not exist (a DB without duels).

    Raises:
        PairRowError: a malformed row (a ``ValueError`` whose one line names the database, the
        table, the row by its ``pair_id`` and the column; see :func:`_pair_row`).
    """
    store = _store(db)
    rows = []
    for n, r in enumerate(store.preference_pairs(), start=1):
        pid = r.get("pair_id")
        row = f"pair_id={pid!r}" if isinstance(pid, str) else f"{n} (by run, iteration, time; pair_id {_sql_value(pid)})"
        rows.append(_pair_row(r, f"{store.path}: table preference_pairs, row {row}"))
    return rows


def align_pairs(db: str | Path | TraceStore | sqlite_utils.Database, run_ids: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Preference pairs from ALIGN runs: a correct proposal over an incorrect one, same question.

    For each recorded question with a gold answer, every proposal whose answer is correct
    (:func:`agora.tasks.is_correct`) is paired with every proposal that is not (no answer counts
    as incorrect). The prompt is the chosen agent's logged ``agent_sample`` conversation. Scores are
    correctness (1 vs 0), so ``margin`` is 1. Rows have the ``preference_pairs`` columns
    (``source = "align"``), so :func:`dpo_rows` reads both alike.
    """
    store = _store(db)
    pairs = []
    for q in store.protocol_questions("align", run_ids):
        if q["gold"] is None:
            continue
        kind = q["kind"] or "math"
        proposals = [p for p in _loads(q["detail"], {}).get("proposals", []) if p.get("text")]
        good = [p for p in proposals if is_correct(p.get("answer"), q["gold"], kind)]
        bad = [p for p in proposals if not is_correct(p.get("answer"), q["gold"], kind)]
        for c in good:
            messages = store.first_call_messages(q["run_id"], q["question_id"], "agent_sample", c["agent"])
            if messages is None:
                messages = solver_messages(Problem(q["question_id"], q["question"], q["gold"], kind))
            for r in bad:
                pairs.append({
                    "pair_id": f"{q['run_id']}:{q['question_id']}:{c['agent']}>{r['agent']}",
                    "run_id": q["run_id"], "duel_id": q["question_id"], "iteration": None,
                    "prompt": q["question"], "prompt_messages": messages,
                    "chosen": c["text"], "rejected": r["text"],
                    "chosen_model": c["model"], "rejected_model": r["model"],
                    "chosen_score": 1.0, "rejected_score": 0.0, "margin": 1.0,
                    "judge_scores": {}, "reputations": {}, "gold": q["gold"], "kind": kind,
                    "created_at": q["finished_at"], "source": "align",
                })
    return pairs


# ----------------------------------------------------------------------------- filters


def is_tie(pair: dict[str, Any]) -> bool:
    """A pair with no preference: zero margin, equal scores, or identical answer texts."""
    return (not pair.get("margin") or pair.get("chosen_score") == pair.get("rejected_score")
            or pair["chosen"].strip() == pair["rejected"].strip())


def _pair_key(pair: dict[str, Any]) -> str:
    blob = json.dumps([pair["prompt_messages"], pair["chosen"].strip(), pair["rejected"].strip()],
                      sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def filter_pairs(pairs: Iterable[dict[str, Any]], flt: PairFilter = PairFilter()) -> list[dict[str, Any]]:
    """The pairs that pass ``flt``, in input order (see :class:`PairFilter`)."""
    out, seen = [], set()
    for p in pairs:
        if is_tie(p) or abs(p["margin"]) < flt.min_margin:
            continue
        if flt.model is not None and flt.model not in (p["chosen_model"], p["rejected_model"]):
            continue
        if flt.run_ids and p["run_id"] not in flt.run_ids:
            continue
        if flt.iterations and p.get("iteration") not in flt.iterations:
            continue
        if flt.dedupe:
            key = _pair_key(p)
            if key in seen:
                continue
            seen.add(key)
        out.append(p)
    return out


# ----------------------------------------------------------------------------- row builders


def _instruction(pair: dict[str, Any]) -> str:
    if pair.get("prompt"):
        return pair["prompt"]
    users = [m["content"] for m in pair["prompt_messages"] if m["role"] == "user"]
    return users[-1] if users else ""


def dpo_rows(pairs: Iterable[dict[str, Any]], flt: PairFilter = PairFilter()) -> list[dict[str, Any]]:
    """TRL conversational preference rows (columns :data:`DPO_COLUMNS`) from the pairs passing ``flt``.

    Raises:
        ValueError: a pair whose prompt messages are empty or do not end with a user turn.
    """
    rows = []
    for p in filter_pairs(pairs, flt):
        messages = [{"role": m["role"], "content": m["content"]} for m in p["prompt_messages"]]
        if not messages or messages[-1]["role"] != "user":
            raise InputError(f"preference pair {p['pair_id']}: prompt_messages must end with a user message")
        rows.append({
            "prompt": messages,
            "chosen": [{"role": "assistant", "content": p["chosen"].strip()}],
            "rejected": [{"role": "assistant", "content": p["rejected"].strip()}],
            "pair_id": p["pair_id"], "source": p.get("source") or "duel", "instruction": _instruction(p),
            "chosen_model": p["chosen_model"], "rejected_model": p["rejected_model"], "margin": float(p["margin"]),
        })
    return rows


def load_duels(db: str | Path | TraceStore | sqlite_utils.Database, run_ids: Sequence[str] = (),
               iterations: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Rows of the ``duels`` table (ties included), ``prompt_messages`` decoded, in play order.

    Returns ``[]`` when the table does not exist.
    """
    return [{**r, "prompt_messages": _loads(r["prompt_messages"], [])} for r in _store(db).duel_rows(run_ids, iterations)]


def grpo_rows_from_duels(duels: Iterable[dict[str, Any]], model: str | None = None) -> list[dict[str, Any]]:
    """Prompt-only rows (columns :data:`GRPO_COLUMNS`), one per distinct instruction, tied duels included.

    ``judge_scores`` is a JSON list ``[{"text", "model", "score"}]``: every answer duelled on the
    instruction with its reputation-weighted judge score ``s̄`` (first occurrence of a text kept).
    ``model`` set: only instructions that model answered. Prompt messages are the first duel's.
    """
    by_instruction: dict[str, dict[str, Any]] = {}
    for d in duels:
        if model is not None and model not in (d["model_a"], d["model_b"]):
            continue
        row = by_instruction.setdefault(d["instruction"], {
            "prompt": [{"role": m["role"], "content": m["content"]} for m in d["prompt_messages"]],
            "instruction": d["instruction"], "gold": d.get("gold"), "kind": d.get("kind") or "open", "_answers": {}})
        for side in ("a", "b"):
            text = (d[f"answer_{side}"] or "").strip()
            row["_answers"].setdefault(text, {"text": text, "model": d[f"model_{side}"], "score": float(d[f"score_{side}"])})
    rows = []
    for row in by_instruction.values():
        answers = row.pop("_answers")
        rows.append({**row, "judge_scores": json.dumps(list(answers.values()), ensure_ascii=False)})
    return rows


def grpo_rows_from_problems(problems: Iterable[Problem], shots: int = 2) -> list[dict[str, Any]]:
    """Prompt-only rows for problems with gold answers (the solver prompt of :mod:`agora.agents.prompts`)."""
    return [{"prompt": solver_messages(p, shots), "instruction": p.question, "gold": p.gold, "kind": p.kind,
             "judge_scores": "[]"} for p in problems]


# ----------------------------------------------------------------------------- split and export


def split_by_instruction(rows: Sequence[dict[str, Any]], validation_fraction: float = 0.1,
                         seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train/validation split by instruction: all rows of an instruction land on the same side
    (instructions that differ only in whitespace or Unicode form are one instruction, as the held-out
    checks count them, :func:`agora.training.own_samples.normalise_question`: the same question asked
    under two prompts never lands on both sides).

    ``round(validation_fraction × instructions)`` instructions (at least one when the fraction is
    positive and there are two or more) are drawn with a seeded shuffle of the sorted instructions.

    Raises:
        ValueError: ``validation_fraction`` outside ``[0, 1)``.
    """
    if not 0.0 <= validation_fraction < 1.0:
        raise InputError(f"validation_fraction must be in [0, 1), got {validation_fraction}")

    from agora.training.own_samples import normalise_question

    def key(row: dict[str, Any]) -> str:
        return normalise_question(str(row["instruction"]))

    instructions = sorted({key(r) for r in rows})
    random.Random(seed).shuffle(instructions)
    n_val = round(validation_fraction * len(instructions))
    if validation_fraction > 0 and n_val == 0 and len(instructions) >= 2:
        n_val = 1
    held = set(instructions[:n_val])
    return [r for r in rows if key(r) not in held], [r for r in rows if key(r) in held]


def export_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write rows as JSON lines (``datasets.load_dataset("json", data_files=str(path))`` reads them)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def to_dataset(rows: Sequence[dict[str, Any]]):
    """Rows → ``datasets.Dataset`` (needs the ``train`` extra).

    Raises:
        ValueError: no rows (TRL cannot train on an empty dataset).
    """
    if not rows:
        raise InputError("no rows: the filters left an empty dataset")
    from datasets import Dataset

    return Dataset.from_list(list(rows))


def export_parquet(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write rows as Parquet (via ``datasets``; ``load_dataset("parquet", ...)`` reads them)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    to_dataset(rows).to_parquet(str(path))
    return path

