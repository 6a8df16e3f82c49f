"""DPO pairs from ALIGN traces for one target model: a correct candidate over the target's own
incorrect one, same question: the target learns from its own and from a stronger peer's traces.

An ALIGN run logs every candidate as a ``model_calls`` row (``node = "agent_sample"``, the
completion, the model, the prompt). For each recorded question with a gold answer this module
re-scores every successful candidate with the scoring policy (:func:`agora.tasks.find_answer`,
:func:`agora.tasks.is_correct`, ``docs/scoring.md``) and pairs

* **chosen**: a correct candidate that ended by itself (not cut at ``max_tokens``) and, by default,
  states its answer explicitly (``The answer is``, ``\\boxed{}``, ``####``: not a guessed
  ``fallback``), from the target model first (on-policy), then from its peers (the 1.5B's right
  answers teach the 0.5B);
* **rejected**: an incorrect candidate **of the target model** (what it actually does wrong), or of
  any model with ``rejected_from="any"``.

Texts are deduplicated within a question; at most ``max_pairs_per_question`` pairs are taken per
question, spreading over distinct chosen and rejected texts first (pair ``(i, j)`` of the sorted
lists is ranked by ``max(i, j)``, then ``i``, then ``j``), so a question with many samples does not
dominate the dataset. The prompt is the target's logged conversation for that question (else the
chosen candidate's). Rows have the ``preference_pairs`` columns (``source = "align"``, margin 1),
so :func:`agora.training.datasets.dpo_rows` turns them into TRL rows.

The trace DB is read through :class:`~agora.traces.store.TraceStore` readers only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Sequence

import sqlite_utils

from agora.models.validation import Rule, settings
from agora.tasks import find_answer, is_correct
from agora.traces.store import TraceStore

#: How an answer counts as stated explicitly (``docs/scoring.md``); ``fallback`` is a guess.
EXPLICIT = ("marker", "boxed", "####")


@settings
class AlignPairConfig:
    """Which ALIGN candidates become pairs for ``target``."""

    target: str
    """The model being trained (its incorrect candidates are the rejected side)."""
    rejected_from: Annotated[Literal["target", "any"], Rule(lambda v: v in ("target", "any"), "rejected_from must be 'target' or 'any', got {value!r}")] = "target"
    """``target``: only the target's incorrect candidates are rejected; ``any``: any model's."""
    peers_chosen: bool = True
    """Whether other models' correct candidates may be chosen (after the target's own)."""
    explicit_only: bool = True
    """A chosen candidate must state its answer explicitly (not a ``fallback`` guess)."""
    max_pairs_per_question: Annotated[int, Rule(lambda v: v >= 1, "max_pairs_per_question must be >= 1, got {value}")] = 2


@dataclass(frozen=True, slots=True)
class Candidate:
    """One scored ALIGN candidate read back from the trace."""

    call_id: str
    agent: int | None
    model: str
    text: str
    answer: str | None
    how: str | None
    correct: bool
    finished: bool
    """The model stopped by itself (``finish_reason`` is not ``length``)."""
    messages: list | None


def _decode(value: Any) -> Any:
    if value in (None, ""):
        return None
    return json.loads(value) if isinstance(value, str) else value


def question_candidates(store: TraceStore, question: dict[str, Any]) -> list[Candidate]:
    """The successful ``agent_sample`` candidates of one recorded ALIGN question, scored against its
    gold answer, in a stable order: agent, creation time, position among its request's samples
    (``sample_index``: the n samples of one request share their creation time), then the order the
    rows were written in (not the call id: a random id, which would order one request's samples, and
    so the pairs taken, differently in two identical seeded runs)."""
    kind = question.get("kind") or "math"
    rows = [c for c in store.calls(question["run_id"], question["question_id"])
            if c.get("node") == "agent_sample" and not c.get("error") and c.get("completion")]
    rows.sort(key=lambda c: (c.get("agent") if c.get("agent") is not None else -1, c.get("created_at") or "",
                             c.get("sample_index") if c.get("sample_index") is not None else -1))
    out = []
    for c in rows:
        found = find_answer(c["completion"], kind, question=question.get("question"))  # an echo is no answer
        out.append(Candidate(
            call_id=c["call_id"], agent=c.get("agent"), model=c["model"], text=c["completion"].strip(),
            answer=found.answer, how=found.how if found.answer is not None else None,
            correct=bool(is_correct(found.answer, question["gold"], kind)),
            finished=c.get("finish_reason") != "length", messages=_decode(c.get("messages"))))
    return out


def _distinct(cands: Sequence[Candidate]) -> list[Candidate]:
    seen, out = set(), []
    for c in cands:
        if c.text not in seen:
            seen.add(c.text)
            out.append(c)
    return out


def pairs_for_question(question: dict[str, Any], candidates: Sequence[Candidate],
                       cfg: AlignPairConfig) -> list[dict[str, Any]]:
    """The pairs one question gives (see the module docstring); ``[]`` without gold, without a usable
    correct candidate, or without an incorrect one."""
    if question.get("gold") is None:
        return []
    chosen = [c for c in candidates if c.correct and c.finished
              and (not cfg.explicit_only or c.how in EXPLICIT)
              and (c.model == cfg.target or cfg.peers_chosen)]
    chosen = _distinct(sorted(chosen, key=lambda c: c.model != cfg.target))  # the target's own first (stable)
    rejected = _distinct([c for c in candidates if not c.correct
                          and (cfg.rejected_from == "any" or c.model == cfg.target)])
    rejected = [r for r in rejected if r.text not in {c.text for c in chosen}]
    if not chosen or not rejected:
        return []
    order = sorted(((i, j) for i in range(len(chosen)) for j in range(len(rejected))),
                   key=lambda ij: (max(ij), ij[0], ij[1]))[: cfg.max_pairs_per_question]
    own = next((c.messages for c in candidates if c.model == cfg.target and c.messages), None)
    kind = question.get("kind") or "math"
    pairs = []
    for i, j in order:
        c, r = chosen[i], rejected[j]
        messages = own or c.messages
        if not messages:
            continue
        pairs.append({
            "pair_id": f"{question['run_id']}:{question['question_id']}:{c.call_id}>{r.call_id}",
            "run_id": question["run_id"], "duel_id": question["question_id"], "iteration": None,
            "prompt": question.get("question"), "prompt_messages": messages,
            "chosen": c.text, "rejected": r.text, "chosen_model": c.model, "rejected_model": r.model,
            "chosen_score": 1.0, "rejected_score": 0.0, "margin": 1.0, "judge_scores": {}, "reputations": {},
            "gold": question["gold"], "kind": kind, "created_at": question.get("finished_at"), "source": "align",
        })
    return pairs


def align_target_pairs(db: str | Path | TraceStore | sqlite_utils.Database, cfg: AlignPairConfig,
                       run_ids: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every pair the ALIGN runs ``run_ids`` (all ALIGN runs when empty) give for ``cfg.target``,
    by run and question order."""
    store = TraceStore.reading(db)
    pairs = []
    for q in store.protocol_questions("align", run_ids):
        if q.get("gold") is None:
            continue
        pairs += pairs_for_question(q, question_candidates(store, q), cfg)
    return pairs


def candidate_stats(db: str | Path | TraceStore | sqlite_utils.Database, run_ids: Sequence[str] = ()
                    ) -> dict[str, dict[str, float]]:
    """Per model: candidates, share correct, share capped at ``max_tokens``, and the share of
    questions where at least one of its candidates is correct (what the traces can teach)."""
    store = TraceStore.reading(db)
    acc: dict[str, dict[str, float]] = {}
    for q in store.protocol_questions("align", run_ids):
        if q.get("gold") is None:
            continue
        by_model: dict[str, list[Candidate]] = {}
        for c in question_candidates(store, q):
            by_model.setdefault(c.model, []).append(c)
        for model, cands in by_model.items():
            s = acc.setdefault(model, {"questions": 0, "candidates": 0, "correct": 0, "capped": 0, "any_correct": 0})
            s["questions"] += 1
            s["candidates"] += len(cands)
            s["correct"] += sum(c.correct for c in cands)
            s["capped"] += sum(not c.finished for c in cands)
            s["any_correct"] += any(c.correct for c in cands)
    return {m: {"questions": s["questions"], "candidates": s["candidates"],
                "correct_share": s["correct"] / max(1, s["candidates"]),
                "capped_share": s["capped"] / max(1, s["candidates"]),
                "any_correct_share": s["any_correct"] / max(1, s["questions"])} for m, s in acc.items()}


def solved_questions(db: str | Path | TraceStore | sqlite_utils.Database, run_ids: Sequence[str] = (),
                     models: Sequence[str] = ()) -> set[str]:
    """Ids of the ALIGN questions on which some candidate (of ``models``, all when empty) is correct:
    GRPO prompts whose groups can vary (a question no sample gets right gives constant zero rewards)."""
    store = TraceStore.reading(db)
    return {q["question_id"] for q in store.protocol_questions("align", run_ids) if q.get("gold") is not None
            and any(c.correct and (not models or c.model in models) for c in question_candidates(store, q))}
