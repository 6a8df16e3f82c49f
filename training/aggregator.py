"""A trained aggregator: a member taught to read a question and k candidate solutions and write the
answer, with the audited scorer as its reward.

Source: Zhao et al., "The Majority is not always right: RL training for solution aggregation"
(AggLM, arXiv 2509.06870): k sampled solutions per problem are shown to an aggregator trained with
a verifiable reward (GRPO); training mixes *hard* candidate sets (the majority answer is wrong, so
voting cannot recover the answer) with a share of *easy* ones (the majority is right), which keeps
the aggregator from learning to distrust majorities.

Pieces, each a pure function over recorded traces (:mod:`agora.training.verified` reads them):

* :func:`aggregator_prompt` (defined in :mod:`agora.agents.moa`): the question and the k candidates,
  shuffled with a seed, in the Mixture-of-Agents aggregator's prompt
  (:func:`agora.agents.moa.aggregator_messages`), so that a member trained on it meets the same prompt
  when it serves as MoA's aggregator or as ALIGN's principal;
* :func:`candidate_sets`: up to ``sets_per_question`` sets of k recorded samples per question (distinct
  samples; two samples with the same text both count, as votes do)
  (any model, any run; the bench's shared draws hold k samples of every pool model per question),
  each labelled hard or easy by its plurality answer, then every hard set and at most
  ``easy_per_hard`` easy sets per hard one (seeded draw);
* :func:`aggregator_rows`: GRPO prompt-only rows (TRL conversational) with ``gold`` and ``kind``;
* :func:`aggregator_sft_rows`: the cheaper recipe, rejection-sampling SFT (STaR/RFT applied to
  aggregation): each set that holds a right candidate, its prompt as :func:`aggregator_rows` writes it
  and, as the completion, a right candidate's text (``target="text"``) or only the sentence naming
  its answer (``target="answer"``); sets without a right candidate give no row;
* :func:`aggregation_reward`: TRL reward 1.0 / 0.0 by :func:`agora.tasks.scoring.score_answer` on the
  answer :func:`agora.tasks.find_answer` reads from the completion (``None`` for rows without gold).

The trained adapter is a pool member like any other (``agora train grpo --aggregate K --name NAME``
writes ``OUT/pool.toml`` with it beside the untouched pool), pointed at by each protocol's role
setting: MoA's ``aggregator``, the council's ``chair``, COMED's ``probe`` and ``moa_aggregator``,
ALIGN's ``principal``.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from typing import Annotated, Any, Callable, Sequence

from agora.agents.moa import aggregator_prompt  # noqa: F401 (its home is agents: ALIGN's model principal uses it too)
from agora.models.validation import Rule, settings
from agora.tasks import find_answer
from agora.tasks.scoring import score_answer
from agora.training.rewards import completion_text
from agora.training.own_samples import OwnSample, normalise_question
from agora.training.verified import EXPLICIT


@settings
class AggregatorDataConfig:
    """How candidate sets are drawn from recorded samples (AggLM §3: k solutions a set, hard and easy mixed)."""

    k: Annotated[int, Rule(lambda v: v >= 2, "AggregatorDataConfig.k must be >= 2 (one candidate is nothing to aggregate), got {value}")] = 4
    """Candidates shown per prompt."""
    sets_per_question: Annotated[int, Rule(lambda v: v >= 1, "AggregatorDataConfig.sets_per_question must be >= 1, got {value}")] = 2
    """Distinct candidate sets drawn per question, at most."""
    easy_per_hard: Annotated[float, Rule(lambda v: v >= 0, "AggregatorDataConfig.easy_per_hard must be >= 0, got {value}")] = 1.0
    """Easy sets kept per hard set (AggLM keeps every hard set and a share of the easy ones)."""
    shots: int = 2
    """Worked exemplars in the prompt (MoA's default)."""
    seed: int = 0


def plurality_answer(answers: Sequence[str | None]) -> str | None:
    """The most frequent non-empty answer (ties: the first seen), ``None`` without any: majority vote."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    top = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == top)


def candidate_sets(samples: Sequence[OwnSample], cfg: AggregatorDataConfig = AggregatorDataConfig()
                   ) -> list[dict[str, Any]]:
    """Candidate sets per question (see the module docstring), in question order, as
    ``{"question_id", "question", "gold", "kind", "n_choices", "task", "candidates": [OwnSample],
    "majority", "majority_correct", "any_correct", "difficulty": "hard" | "easy"}``."""
    by_question: dict[str, list[OwnSample]] = defaultdict(list)
    for s in samples:
        by_question[normalise_question(s.question)].append(s)
    rng = random.Random(cfg.seed)
    hard, easy = [], []
    for group in by_question.values():
        distinct = list({s.call_id: s for s in group}.values())  # repeated texts stay: they are votes
        if len(distinct) < cfg.k:
            continue
        seen: set[tuple[str, ...]] = set()
        for _ in range(cfg.sets_per_question * 4):  # a few tries for distinct sets
            if len(seen) >= cfg.sets_per_question:
                break
            picked = rng.sample(distinct, cfg.k)
            key = tuple(sorted(s.call_id for s in picked))
            if key in seen:
                continue
            seen.add(key)
            first = picked[0]
            majority = plurality_answer([s.answer for s in picked])
            right = bool(score_answer(majority, first.gold, first.kind))
            entry = {"question_id": first.question_id, "question": first.question, "gold": first.gold,
                     "kind": first.kind, "n_choices": first.n_choices, "task": first.task, "candidates": picked,
                     "majority": majority, "majority_correct": right,
                     "any_correct": any(s.correct for s in picked), "difficulty": "easy" if right else "hard"}
            (easy if right else hard).append(entry)
    keep_easy = min(len(easy), round(cfg.easy_per_hard * len(hard)))
    kept_easy = set(map(id, rng.sample(easy, keep_easy)))
    order = {id(e): n for n, e in enumerate(hard + easy)}
    chosen = hard + [e for e in easy if id(e) in kept_easy]
    return sorted(chosen, key=lambda e: order[id(e)])


def aggregator_rows(sets: Sequence[dict[str, Any]], cfg: AggregatorDataConfig = AggregatorDataConfig()
                    ) -> list[dict[str, Any]]:
    """GRPO prompt-only rows (the columns :func:`aggregation_reward` and
    :func:`agora.training.rewards.correctness_reward` read)::

        {"prompt": [...messages...], "instruction", "gold", "kind", "n_choices", "judge_scores": "[]",
         "question_id", "task", "difficulty", "majority", "majority_correct", "candidates": JSON
         [{"model", "run_id", "call_id", "answer", "correct"}]}

    Each set's shuffle seed is ``cfg.seed`` plus its position, so the order differs between sets."""
    rows = []
    for n, s in enumerate(sets):
        texts = [c.text for c in s["candidates"]]
        rows.append({
            "prompt": aggregator_prompt(s["question"], texts, kind=s["kind"], n_choices=s["n_choices"],
                                        seed=cfg.seed + n, shots=cfg.shots, question_id=s["question_id"]),
            "instruction": s["question"], "gold": s["gold"], "kind": s["kind"], "n_choices": s["n_choices"],
            "judge_scores": "[]", "question_id": s["question_id"], "task": s["task"],
            "difficulty": s["difficulty"], "majority": s["majority"], "majority_correct": s["majority_correct"],
            "candidates": json.dumps([{"model": c.model, "run_id": c.run_id, "call_id": c.call_id,
                                       "answer": c.answer, "correct": c.correct} for c in s["candidates"]]),
        })
    return rows


#: What an SFT aggregator row teaches it to write (:func:`aggregator_sft_rows`'s ``target``).
SFT_TARGETS = ("text", "answer")


def aggregation_problem(problem: Any, candidates: Sequence[str], *, seed: int) -> Any:
    """``problem`` (a :class:`agora.tasks.Problem`) as one greedy evaluation item of an aggregator: the
    same id, gold, kind and choices, its question the user turn of :func:`aggregator_prompt` showing
    ``candidates`` (shuffled with ``seed``, no exemplars), as the trained aggregators saw it."""
    from agora.tasks import Problem

    prompt = aggregator_prompt(problem.question, candidates, kind=problem.kind, n_choices=problem.n_choices or 4,
                               seed=seed, shots=0, question_id=problem.id)
    return Problem(problem.id, prompt[-1]["content"], problem.gold, problem.kind, n_choices=problem.n_choices)


def answer_statement(answer: str, kind: str) -> str:
    """The closing sentence every Agora prompt asks for (:mod:`agora.agents.prompts`):
    ``The answer is 18.`` for a math answer, ``The answer is B.`` for an option letter."""
    return f"The answer is {answer}."


def aggregator_sft_rows(sets: Sequence[dict[str, Any]], cfg: AggregatorDataConfig = AggregatorDataConfig(),
                        *, model: str | None = None, target: str = "text") -> list[dict[str, Any]]:
    """SFT rows (TRL conversational prompt-completion) for an aggregator: for each set with a right
    candidate, the prompt :func:`aggregator_rows` gives the set (same position, same shuffle seed, so
    the same prompt GRPO and the evaluation show) and, as the completion, with ``target="text"``, the
    text of the set's first right candidate in recorded order that finished and states its answer
    explicitly (``####``, a marker, a box: as :func:`agora.training.verified.sft_rows` chooses); with
    ``target="answer"``, only the sentence naming the right answer of the set's first right candidate
    (:func:`answer_statement`, ``The answer is 18.``), so that the loss falls on the choice between the
    candidates and not on copying one's wording. Sets without such a candidate give no row (there is no
    verified answer to imitate)::

        {"prompt": [...messages...], "completion": [{"role": "assistant", "content": text}],
         "instruction", "question_id", "task", "gold", "kind", "n_choices", "difficulty",
         "majority_correct", "model", "run_id", "call_id"}

    ``model``, ``run_id`` and ``call_id`` are the chosen candidate's (``model`` overrides the model
    recorded: the member being trained, when it is not the candidates' author). Rows repeating an
    earlier row's prompt and completion are dropped.

    Raises:
        ValueError: ``target`` is not one of :data:`SFT_TARGETS`."""
    if target not in SFT_TARGETS:
        raise ValueError(f"aggregator SFT target must be one of {', '.join(SFT_TARGETS)}, got {target!r}")
    rows, seen = [], set()
    for s, row in zip(sets, aggregator_rows(sets, cfg), strict=True):
        if target == "text":
            right = next((c for c in s["candidates"] if c.usable and c.how in EXPLICIT), None)
        else:
            right = next((c for c in s["candidates"] if c.correct and c.answer is not None), None)
        if right is None:
            continue
        content = right.text if target == "text" else answer_statement(right.answer, s["kind"])
        key = (json.dumps(row["prompt"], sort_keys=True), content)
        if key in seen:
            continue
        seen.add(key)
        rows.append({"prompt": row["prompt"], "completion": [{"role": "assistant", "content": content}],
                     "instruction": s["question"], "question_id": s["question_id"], "task": s["task"],
                     "gold": s["gold"], "kind": s["kind"], "n_choices": s["n_choices"],
                     "difficulty": s["difficulty"], "majority_correct": s["majority_correct"],
                     "model": model or right.model, "run_id": right.run_id, "call_id": right.call_id})
    return rows


def aggregation_reward(prompts: Sequence[Any], completions: Sequence[Any], gold: Sequence[str | None],
                       kind: Sequence[str], n_choices: Sequence[int] | None = None,
                       instruction: Sequence[str] | None = None,
                       log_metric: Callable[[str, float], None] | None = None, **_: Any) -> list[float | None]:
    """1.0 when the aggregator's answer is right, 0.0 when not, ``None`` without gold: the answer read
    by :func:`agora.tasks.find_answer` (the scoring policy of ``docs/scoring.md``; a reply that only
    repeats the question, ``instruction``, has none) and judged by
    :func:`agora.tasks.scoring.score_answer`, as every protocol's answer is."""
    choices = list(n_choices) if n_choices is not None else [4] * len(completions)
    questions = list(instruction) if instruction is not None else [None] * len(completions)
    rewards: list[float | None] = []
    for completion, g, k, n, q in zip(completions, gold, kind, choices, questions, strict=True):
        if g is None or k not in ("math", "mc"):
            rewards.append(None)
            continue
        answer = find_answer(completion_text(completion), k, n or 4, question=q).answer
        rewards.append(float(bool(score_answer(answer, g, k))))
    return rewards


def aggregator_stats(sets: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sets, hard / easy, majority vote's accuracy on them (the baseline the aggregator must beat on
    the same candidates), and the share with a right candidate (its ceiling as a selector), per task."""
    per: dict[str, dict[str, int]] = {}
    for s in sets:
        t = per.setdefault(s["task"], {"sets": 0, "hard": 0, "easy": 0, "majority_correct": 0, "any_correct": 0})
        t["sets"] += 1
        t[s["difficulty"]] += 1
        t["majority_correct"] += s["majority_correct"]
        t["any_correct"] += s["any_correct"]
    total = {k: sum(t[k] for t in per.values()) for k in ("sets", "hard", "easy", "majority_correct", "any_correct")}
    return {**total, "questions": len({normalise_question(s["question"]) for s in sets}),
            "source_runs": sorted({c.run_id for s in sets for c in s["candidates"]}),
            "models": sorted({c.model for s in sets for c in s["candidates"]}), "per_task": per}
