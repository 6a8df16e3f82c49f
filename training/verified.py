"""Verified training data from a member's own recorded samples: rejection-sampling SFT rows and
right-over-wrong DPO pairs, both checked by the audited scorer.

Sources: STaR (Zelikman et al., arXiv 2203.14465) and RFT (Yuan et al., arXiv 2308.01825) fine-tune
a model on its own sampled answers that reach the gold answer; iterative RPO (Pang et al., arXiv
2404.19733) trains DPO on pairs of the model's own right and wrong answers to the same question.

**Where the samples come from.** Every run that answers questions records each sample as a
``model_calls`` row (the prompt the member saw, its completion, ``finish_reason``, the extracted
``answer`` and ``how``) beside the question's ``questions`` row (gold, kind, source). That holds for
ALIGN (role ``agent``), a bench's shared draws (the ``<bench>:<task>:candidates`` run, role
``candidate``; COMED and the other protocols of the bench draw from it without calls of their
own), COMED (``anchor``, and the peer ``probe``), MoA proposers, council members and debate's
first round. :func:`own_samples` reads them through the store's readers (``run_ids``,
``questions``, ``calls``) and keeps a call when:

* it is ``model``'s, succeeded, and answered the question alone: role in :data:`SOLVER_ROLES`,
  ``partner`` NULL (no other model's answer in its prompt), no member recipe rewrote it (a
  ``recipe`` row's completion is the recipe's text, not the model's), and its prompt is recorded;
* its question has a gold answer and a checker (``math`` or ``mc``; ``open`` questions are not
  verifiable) and is not held out (:class:`HeldOut`: by question id or by question text).

Each kept sample is scored with :func:`agora.tasks.scoring.score_answer` on the answer recorded with
it (re-extracted with :func:`agora.tasks.find_answer` where the database predates that column).

**Groups.** Samples are grouped by question text and prompt (the exact messages the member saw),
so a pair's two answers answer the same prompt, and the same question asked the same way in two
runs (an ALIGN run and a bench) forms one group.

**SFT rows** (:func:`sft_rows`, TRL conversational prompt-completion): a group's right answers that
ended by themselves (not cut at ``max_tokens``) and, by default, state their answer explicitly
(``The answer is``, ``\\boxed{}``, ``####``; not a ``fallback`` guess), distinct texts, at most
``max_sft_per_question`` per group.

**DPO pairs** (:func:`own_pairs`, the ``preference_pairs`` columns, ``source = "own"``): chosen from
the same right answers, rejected from the group's wrong answers (no answer counts as wrong), distinct
texts. The **length filter** keeps a pair when ``max(len_c, len_r) / min(len_c, len_r) <=
length_ratio`` (lengths in recorded completion tokens, in characters where either count is
unknown; ``length_ratio`` 0 turns it off): a pair whose sides differ mostly in length teaches length
(benchmarks/README.md, "One round, three arms"). Of the pairs left, at most
``max_pairs_per_question`` per group, spreading over distinct chosen and rejected texts first (pair
``(i, j)`` ranked by ``max(i, j)``, then ``i``, then ``j``, as :mod:`agora.training.align_pairs`).

Both are deduplicated (SFT by prompt and completion; pairs by prompt, chosen and rejected texts)
and every row names the runs its samples came from; :func:`verified_stats` counts questions,
samples, rows, and pairs before and after the length filter, per task (a bench run's task, else the
questions' ``source``).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import sqlite_utils

from agora.tasks import find_answer
from agora.tasks.scoring import score_answer
from agora.traces.store import TraceStore

#: Roles whose calls answer the question from the solver prompt (see the module docstring).
SOLVER_ROLES = ("agent", "candidate", "anchor", "probe", "proposer", "member", "debater")
#: How an answer counts as stated explicitly (``docs/scoring.md``); ``fallback`` is a guess.
EXPLICIT = ("marker", "boxed", "####")


def normalise_question(text: str | None) -> str:
    """A question's text for matching held-out questions: whitespace collapsed, case kept."""
    return " ".join((text or "").split())


@dataclass(frozen=True, slots=True)
class HeldOut:
    """Questions no training row may come from: by id, or by text (whitespace-insensitive), so an
    evaluation set stays unseen whatever ids the runs gave its questions."""

    question_ids: frozenset[str] = frozenset()
    questions: frozenset[str] = frozenset()
    """Normalised question texts (:func:`normalise_question`)."""

    def excludes(self, question_id: str, question: str | None) -> bool:
        return question_id in self.question_ids or normalise_question(question) in self.questions

    def __len__(self) -> int:
        return len(self.question_ids | self.questions)

    @classmethod
    def from_problems(cls, problems: Sequence[Any]) -> "HeldOut":
        """Held-out set of :class:`~agora.tasks.Problem` objects (their ids and texts)."""
        return cls(frozenset(p.id for p in problems), frozenset(normalise_question(p.question) for p in problems))

    @classmethod
    def from_file(cls, path: str | Path, fmt: str | None = None) -> "HeldOut":
        """A problem file (JSONL in any format :func:`agora.tasks.loaders.load_problems` reads: ids and
        texts) or a text file of question ids, one a line (``.txt``).

        Raises:
            FileNotFoundError: no such file. TaskFormatError: a malformed problem file (one line
            naming file, line and field).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such held-out question file")
        if path.suffix == ".txt":
            ids = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
            return cls(frozenset(i for i in ids if i))
        from agora.tasks.loaders import detect_format, load_problems

        return cls.from_problems(load_problems(path, fmt or detect_format(path)))


@dataclass(frozen=True, slots=True)
class VerifiedConfig:
    """Whose samples, from which runs, and how they become rows."""

    model: str
    """The pool member whose own answers are read (and who is trained on them)."""
    run_ids: tuple[str, ...] = ()
    """Runs to read; empty reads every run of the database."""
    held_out: HeldOut = field(default_factory=HeldOut)
    length_ratio: float = 1.5
    """Longest side over shortest side a pair may have (0: no length filter)."""
    max_pairs_per_question: int = 4
    max_sft_per_question: int = 4
    explicit_only: bool = True
    """A chosen / SFT answer must state its answer explicitly (not a ``fallback`` guess)."""

    def __post_init__(self):
        if self.length_ratio != 0 and self.length_ratio < 1:
            raise ValueError(f"length_ratio must be >= 1 (or 0: no filter), got {self.length_ratio}")
        for name in ("max_pairs_per_question", "max_sft_per_question"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def describe(self) -> dict[str, Any]:
        """JSON-ready settings (the held-out set by size), for the dataset record."""
        d = asdict(self)
        d["held_out"] = {"question_ids": len(self.held_out.question_ids), "questions": len(self.held_out.questions)}
        d["run_ids"] = list(self.run_ids)
        return d


@dataclass(frozen=True, slots=True)
class OwnSample:
    """One scored sample of the member, as read back from the trace."""

    call_id: str
    model: str
    run_id: str
    question_id: str
    task: str
    """The bench task of a bench's run (``<bench>:<task>:...``), else the question's source (dataset
    name), else its kind."""
    question: str
    gold: str
    kind: str
    messages: tuple[dict[str, str], ...]
    text: str
    answer: str | None
    how: str | None
    correct: bool
    finished: bool
    """The model stopped by itself (``finish_reason`` is not ``length``)."""
    tokens: int | None
    """Completion tokens as recorded (None: unknown)."""
    n_choices: int = 4
    """Options of an ``mc`` question."""

    @property
    def group(self) -> str:
        """Question text and prompt: the samples that answer the same prompt."""
        blob = json.dumps([normalise_question(self.question), list(self.messages)], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    @property
    def usable(self) -> bool:
        return self.correct and self.finished


def _decode(value: Any) -> Any:
    if value in (None, ""):
        return None
    return json.loads(value) if isinstance(value, str) else value


def _messages(value: Any) -> tuple[dict[str, str], ...] | None:
    try:
        messages = _decode(value)
    except ValueError:
        return None
    if not isinstance(messages, list) or not messages:
        return None
    out = []
    for m in messages:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            return None
        out.append({"role": m["role"], "content": m["content"]})
    return tuple(out) if out[-1]["role"] == "user" else None


def _bench_task(store: TraceStore, run_id: str) -> str | None:
    """The task of a bench's run (ids ``<bench>:<task>:<protocol>``, its dataset naming the bench), else ``None``."""
    row = store.get_run(run_id) or {}
    try:
        dataset = json.loads(row.get("dataset") or "null")
    except (TypeError, ValueError):
        return None
    parts = run_id.split(":")
    if isinstance(dataset, dict) and dataset.get("bench") and len(parts) >= 3 and parts[0] == dataset["bench"]:
        return parts[1]
    return None


def own_samples(db: str | Path | TraceStore | sqlite_utils.Database, cfg: VerifiedConfig
                ) -> tuple[list[OwnSample], dict[str, int]]:
    """``cfg.model``'s verifiable samples in the runs ``cfg.run_ids`` (all runs when empty), scored,
    by run, question order and call, and how many calls were left out and why
    (``{"held_out", "no_gold", "not_solver", "recipe", "no_prompt"}``: the module docstring)."""
    return scored_samples(db, (cfg.model,), cfg.run_ids, cfg.held_out)


def scored_samples(db: str | Path | TraceStore | sqlite_utils.Database, models: Sequence[str] = (),
                   run_ids: Sequence[str] = (), held_out: HeldOut = HeldOut()
                   ) -> tuple[list[OwnSample], dict[str, int]]:
    """As :func:`own_samples`, for the samples of ``models`` (every model when empty)."""
    store = TraceStore.reading(db)
    tables = set(store.db.table_names())
    skipped = {"held_out": 0, "no_gold": 0, "not_solver": 0, "recipe": 0, "no_prompt": 0}
    if not {"runs", "questions", "model_calls"} <= tables:
        return [], skipped
    runs = list(run_ids) or store.run_ids()
    wanted = set(models)
    out: list[OwnSample] = []
    for run_id in runs:
        questions = {q["question_id"]: q for q in store.questions(run_id)}
        if not questions:
            continue
        order = {qid: n for n, qid in enumerate(questions)}
        bench_task = _bench_task(store, run_id)
        calls = [c for c in store.calls(run_id) if (not wanted or c.get("model") in wanted)
                 and c.get("error") is None and (c.get("completion") or "").strip()
                 and c.get("question_id") in questions]
        calls.sort(key=lambda c: (order[c["question_id"]], c.get("created_at") or "", c.get("sample_index") or 0,
                                  c["call_id"]))
        for c in calls:
            q = questions[c["question_id"]]
            kind = q.get("kind") or "math"
            if c.get("role") not in SOLVER_ROLES or c.get("partner"):
                skipped["not_solver"] += 1
                continue
            if c.get("recipe"):
                skipped["recipe"] += 1
                continue
            if q.get("gold") is None or kind not in ("math", "mc"):
                skipped["no_gold"] += 1
                continue
            if held_out.excludes(q["question_id"], q.get("question")):
                skipped["held_out"] += 1
                continue
            messages = _messages(c.get("messages"))
            if messages is None:
                skipped["no_prompt"] += 1
                continue
            text = c["completion"].strip()
            if c.get("how") is not None:  # extracted when the question was recorded
                answer, how = c.get("answer"), (None if c["how"] == "none" else c["how"])
            else:  # a database from before the answer columns
                found = find_answer(text, kind, q.get("n_choices") or 4, question=q.get("question"))
                answer, how = found.answer, (found.how if found.answer is not None else None)
            out.append(OwnSample(
                call_id=c["call_id"], model=c["model"], run_id=run_id, question_id=q["question_id"],
                task=bench_task or q.get("source") or kind,
                question=q.get("question") or "", gold=q["gold"], kind=kind, messages=messages, text=text,
                answer=answer, how=how, correct=bool(score_answer(answer, q["gold"], kind)),
                finished=c.get("finish_reason") != "length", tokens=c.get("completion_tokens"),
                n_choices=q.get("n_choices") or 4))
    return out, skipped


def _groups(samples: Sequence[OwnSample]) -> dict[str, list[OwnSample]]:
    groups: dict[str, list[OwnSample]] = defaultdict(list)
    for s in samples:
        groups[s.group].append(s)
    return groups


def _distinct(samples: Sequence[OwnSample]) -> list[OwnSample]:
    seen, out = set(), []
    for s in samples:
        if s.text not in seen:
            seen.add(s.text)
            out.append(s)
    return out


def _chosen(group: Sequence[OwnSample], cfg: VerifiedConfig) -> list[OwnSample]:
    return _distinct([s for s in group if s.usable and (not cfg.explicit_only or s.how in EXPLICIT)])


def length_ratio(a: OwnSample, b: OwnSample) -> float:
    """Longer over shorter of two samples' lengths: recorded completion tokens when both are known,
    else characters (an empty side counts as length 1)."""
    if a.tokens is not None and b.tokens is not None:
        x, y = a.tokens, b.tokens
    else:
        x, y = len(a.text), len(b.text)
    x, y = max(x, 1), max(y, 1)
    return max(x, y) / min(x, y)


def length_matched(a: OwnSample, b: OwnSample, ratio: float) -> bool:
    """The length filter: ``ratio`` 0 keeps every pair."""
    return ratio == 0 or length_ratio(a, b) <= ratio


def _group_pairs(group: Sequence[OwnSample], cfg: VerifiedConfig) -> tuple[list[tuple[OwnSample, OwnSample]], int, int]:
    """``(pairs kept, pairs before the length filter, pairs after it)`` of one group."""
    chosen = _chosen(group, cfg)
    texts = {c.text for c in chosen}
    rejected = [r for r in _distinct([s for s in group if not s.correct]) if r.text not in texts]
    every = [(i, j) for i in range(len(chosen)) for j in range(len(rejected))]
    matched = [(i, j) for i, j in every if length_matched(chosen[i], rejected[j], cfg.length_ratio)]
    ranked = sorted(matched, key=lambda ij: (max(ij), ij[0], ij[1]))[: cfg.max_pairs_per_question]
    return [(chosen[i], rejected[j]) for i, j in ranked], len(every), len(matched)


def own_pairs(samples: Sequence[OwnSample], cfg: VerifiedConfig) -> list[dict[str, Any]]:
    """Right-over-wrong pairs of the member's own answers (rows with the ``preference_pairs``
    columns, ``source = "own"``, margin 1, plus ``source_runs``), deduplicated, in sample order.
    :func:`agora.training.datasets.dpo_rows` turns them into TRL rows."""
    pairs, seen = [], set()
    for group in _groups(samples).values():
        for c, r in _group_pairs(group, cfg)[0]:
            key = (c.group, c.text, r.text)
            if key in seen:
                continue
            seen.add(key)
            pairs.append({
                "pair_id": f"{c.run_id}:{c.question_id}:{c.call_id}>{r.call_id}",
                "run_id": c.run_id, "source_runs": sorted({c.run_id, r.run_id}), "duel_id": c.question_id,
                "iteration": None, "prompt": c.question, "prompt_messages": [dict(m) for m in c.messages],
                "chosen": c.text, "rejected": r.text, "chosen_model": cfg.model, "rejected_model": cfg.model,
                "chosen_score": 1.0, "rejected_score": 0.0, "margin": 1.0, "judge_scores": {}, "reputations": {},
                "gold": c.gold, "kind": c.kind, "task": c.task, "created_at": None, "source": "own",
            })
    return pairs


def sft_rows(samples: Sequence[OwnSample], cfg: VerifiedConfig) -> list[dict[str, Any]]:
    """Rejection-sampling SFT rows (TRL conversational prompt-completion)::

        {"prompt": [...messages...], "completion": [{"role": "assistant", "content": text}],
         "instruction", "question_id", "task", "gold", "kind", "model", "run_id", "call_id"}

    the member's right answers (see the module docstring), deduplicated by prompt and completion."""
    rows, seen = [], set()
    for group in _groups(samples).values():
        for s in _chosen(group, cfg)[: cfg.max_sft_per_question]:
            key = (s.group, s.text)
            if key in seen:
                continue
            seen.add(key)
            rows.append({"prompt": [dict(m) for m in s.messages],
                         "completion": [{"role": "assistant", "content": s.text}],
                         "instruction": s.question, "question_id": s.question_id, "task": s.task, "gold": s.gold,
                         "kind": s.kind, "model": cfg.model, "run_id": s.run_id, "call_id": s.call_id})
    return rows


def verified_stats(samples: Sequence[OwnSample], cfg: VerifiedConfig, skipped: dict[str, int] | None = None
                   ) -> dict[str, Any]:
    """What the data holds, overall and per task: questions (distinct texts), samples, right
    samples, SFT rows, questions with a pair, pairs before the length filter, after it, and kept
    (after the per-question cap and dedupe); the runs the rows came from; the calls left out."""
    per: dict[str, dict[str, Any]] = {}
    pairs = own_pairs(samples, cfg)
    sft = sft_rows(samples, cfg)
    for group in _groups(samples).values():
        t = per.setdefault(group[0].task, {"questions": set(), "samples": 0, "correct": 0, "sft_rows": 0,
                                           "pair_questions": 0, "pairs_before_length_filter": 0,
                                           "pairs_after_length_filter": 0, "pairs": 0})
        t["questions"].add(normalise_question(group[0].question))
        t["samples"] += len(group)
        t["correct"] += sum(s.correct for s in group)
        _kept, before, after = _group_pairs(group, cfg)
        t["pairs_before_length_filter"] += before
        t["pairs_after_length_filter"] += after
    for p in pairs:
        per[p["task"]]["pairs"] += 1
    for task in per:
        per[task]["pair_questions"] = len({normalise_question(p["prompt"]) for p in pairs if p["task"] == task})
    for r in sft:
        per[r["task"]]["sft_rows"] += 1
    for t in per.values():
        t["questions"] = len(t["questions"])
    total = {k: sum(t[k] for t in per.values()) for k in ("questions", "samples", "correct", "sft_rows",
                                                           "pair_questions", "pairs_before_length_filter",
                                                           "pairs_after_length_filter", "pairs")}
    return {"model": cfg.model, "settings": cfg.describe(), **total,
            "length_filtered": total["pairs_before_length_filter"] - total["pairs_after_length_filter"],
            "sft_runs": sorted({r["run_id"] for r in sft}),
            "pair_runs": sorted({run for p in pairs for run in p["source_runs"]}),
            "skipped_calls": dict(skipped or {}), "per_task": dict(sorted(per.items()))}


def source_runs(pairs: Sequence[dict[str, Any]], pair_ids: Sequence[str] | None = None) -> list[str]:
    """The runs the pairs ``pair_ids`` (all when ``None``) came from: their ``source_runs``, else their
    ``run_id`` (duel and ALIGN pairs)."""
    wanted = None if pair_ids is None else set(pair_ids)
    return sorted({run for p in pairs if wanted is None or p["pair_id"] in wanted
                   for run in (p.get("source_runs") or [p["run_id"]])})


def duel_samples(duels: Sequence[dict[str, Any]], model: str) -> list[OwnSample]:
    """``model``'s answers in duel rows (:func:`agora.training.datasets.load_duels`: ``prompt_messages``
    decoded) as scored samples: the rows with a gold answer and a checker, each side the model played,
    scored by :func:`agora.tasks.scoring.score_answer` on the extracted answer the duel recorded.

    The duels table keeps no token counts or ``finish_reason``: lengths are characters and every
    answer counts as finished. Samples group by instruction and prompt as :func:`own_samples`' do."""
    out = []
    for d in duels:
        kind = d.get("kind") or "math"
        if d.get("gold") is None or kind not in ("math", "mc"):
            continue
        messages = _messages(d.get("prompt_messages"))
        if messages is None:
            continue
        for side in ("a", "b"):
            text = (d.get(f"answer_{side}") or "").strip()
            if d.get(f"model_{side}") != model or not text:
                continue
            answer = d.get(f"extracted_{side}")
            how = find_answer(text, kind).how if answer is not None else None
            out.append(OwnSample(
                call_id=f"{d['duel_id']}:{side}", model=model, run_id=d["run_id"],
                question_id=d.get("instruction_id") or d["duel_id"], task=kind, question=d.get("instruction") or "",
                gold=d["gold"], kind=kind, messages=messages, text=text, answer=answer, how=how,
                correct=bool(score_answer(answer, d["gold"], kind)), finished=True, tokens=None))
    return out
