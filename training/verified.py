"""Verified training data from a member's own scored samples (:mod:`agora.training.own_samples`):
rejection-sampling SFT rows and right-over-wrong DPO pairs, both checked by the audited scorer.

Sources: STaR (Zelikman et al., arXiv 2203.14465) and RFT (Yuan et al., arXiv 2308.01825) fine-tune
a model on its own sampled answers that reach the gold answer; iterative RPO (Pang et al., arXiv
2404.19733) trains DPO on pairs of the model's own right and wrong answers to the same question.

**Groups.** Samples are grouped by question text and prompt (the exact messages the member saw),
so a pair's two answers answer the same prompt, and the same question asked the same way in two
runs (an ALIGN run and a bench) forms one group. A group's rows and statistics count under the task
of its first sample (the same question read from a bench's ``gsm8k`` run and from an ALIGN run
without a source counts once, under ``gsm8k``).

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

Both are deduplicated (SFT by prompt and completion; pairs by prompt, chosen and rejected texts;
texts that differ only in whitespace are one text, :func:`same_text`)
and every row names the runs its samples came from; :func:`verified_stats` counts questions,
samples, rows, and pairs before and after the length filter, per task (a bench run's task, else the
questions' ``source``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from agora.training.own_samples import OwnSample, VerifiedConfig, normalise_question

#: How an answer counts as stated explicitly (``docs/scoring.md``); ``fallback`` is a guess.
EXPLICIT = ("marker", "boxed", "####")

def _groups(samples: Sequence[OwnSample]) -> dict[str, list[OwnSample]]:
    groups: dict[str, list[OwnSample]] = defaultdict(list)
    for s in samples:
        groups[s.group].append(s)
    return groups


def same_text(text: str) -> str:
    """A completion's text with whitespace collapsed: two samples that differ only in spacing or line
    breaks are one answer (deduplicated, and never paired against each other)."""
    return " ".join(text.split())


def _distinct(samples: Sequence[OwnSample]) -> list[OwnSample]:
    seen, out = set(), []
    for s in samples:
        if same_text(s.text) not in seen:
            seen.add(same_text(s.text))
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
    texts = {same_text(c.text) for c in chosen}
    rejected = [r for r in _distinct([s for s in group if not s.correct]) if same_text(r.text) not in texts]
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
            key = (c.group, same_text(c.text), same_text(r.text))
            if key in seen:
                continue
            seen.add(key)
            pairs.append({
                "pair_id": f"{c.run_id}:{c.question_id}:{c.call_id}>{r.call_id}",
                "run_id": c.run_id, "source_runs": sorted({c.run_id, r.run_id}), "duel_id": c.question_id,
                "iteration": None, "prompt": c.question, "prompt_messages": [dict(m) for m in c.messages],
                "chosen": c.text, "rejected": r.text, "chosen_model": cfg.model, "rejected_model": cfg.model,
                "chosen_score": 1.0, "rejected_score": 0.0, "margin": 1.0, "judge_scores": {}, "reputations": {},
                "gold": c.gold, "kind": c.kind, "task": group[0].task, "created_at": None, "source": "own",
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
            key = (s.group, same_text(s.text))
            if key in seen:
                continue
            seen.add(key)
            rows.append({"prompt": [dict(m) for m in s.messages],
                         "completion": [{"role": "assistant", "content": s.text}],
                         "instruction": s.question, "question_id": s.question_id, "task": group[0].task,
                         "gold": s.gold,
                         "kind": s.kind, "model": cfg.model, "run_id": s.run_id, "call_id": s.call_id})
    return rows


def verified_stats(samples: Sequence[OwnSample], cfg: VerifiedConfig, skipped: dict[str, int] | None = None
                   ) -> dict[str, Any]:
    """What the data holds, overall and per task: questions (distinct texts; the totals count a
    question asked under two tasks once), samples, right samples, SFT rows, questions with a pair,
    pairs before the length filter, after it, and kept
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
    total = {k: sum(t[k] for t in per.values()) for k in ("samples", "correct", "sft_rows",
                                                           "pairs_before_length_filter",
                                                           "pairs_after_length_filter", "pairs")}
    # (a question asked under two tasks, with two prompts, counts under each task and once in the totals)
    total["questions"] = len({normalise_question(s.question) for s in samples})
    total["pair_questions"] = len({normalise_question(p["prompt"]) for p in pairs})
    total = {k: total[k] for k in ("questions", "samples", "correct", "sft_rows", "pair_questions",
                                   "pairs_before_length_filter", "pairs_after_length_filter", "pairs")}
    return {"model": cfg.model, "settings": cfg.describe(), **total,
            "length_filtered": total["pairs_before_length_filter"] - total["pairs_after_length_filter"],
            "sft_runs": sorted({r["run_id"] for r in sft}),
            "pair_runs": sorted({run for p in pairs for run in p["source_runs"]}),
            "skipped_calls": dict(skipped or {}), "per_task": dict(sorted(per.items()))}


def empty_note(stats: dict[str, Any], pairs: bool) -> str:
    """Why a member's own data (``stats``: :func:`verified_stats`) holds no row, in one clause: its
    samples read and right, the pairs before and after the length filter (``pairs``), the calls left
    out by reason; e.g. ``2 of its samples read (0 right), 0 right-over-wrong pairs before the length
    filter and 0 after it; calls not read: not_solver 1``."""
    said = f"{stats['samples']} of its samples read ({stats['correct']} right"
    if pairs:
        said += (f"), {stats['pairs_before_length_filter']} right-over-wrong pairs before the length filter "
                 f"and {stats['pairs_after_length_filter']} after it")
    else:
        said += ", none of them finished and stating its answer)" if stats["correct"] else ")"
    return said + calls_not_read(stats.get("skipped_calls"))


def calls_not_read(skipped: dict[str, int] | None) -> str:
    """The clause an empty-dataset warning ends with: ``; calls not read: no_gold 2, held_out 1`` (the
    reasons of ``skipped``, reason → calls, that left any out), or ``""`` when none did."""
    left = ", ".join(f"{why} {n}" for why, n in (skipped or {}).items() if n)
    return f"; calls not read: {left}" if left else ""


def source_runs(pairs: Sequence[dict[str, Any]], pair_ids: Sequence[str] | None = None) -> list[str]:
    """The runs the pairs ``pair_ids`` (all when ``None``) came from: their ``source_runs``, else their
    ``run_id`` (duel and ALIGN pairs)."""
    wanted = None if pair_ids is None else set(pair_ids)
    return sorted({run for p in pairs if wanted is None or p["pair_id"] in wanted
                   for run in (p.get("source_runs") or [p["run_id"]])})
