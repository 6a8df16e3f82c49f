"""GRPO reward functions in TRL's calling convention.

TRL calls ``reward(prompts=..., completions=..., completion_ids=..., **columns)`` with one entry
per completion; the ``G = num_generations`` completions of one prompt are consecutive
(``trl.GRPOTrainer``'s ``RepeatSampler``), and every dataset column (``gold``, ``kind``,
``instruction``, ``judge_scores``, see :mod:`agora.training.datasets`) arrives as a list. A reward
returns one float per completion, or ``None`` where it does not apply (TRL treats it as missing).

* :func:`correctness_reward`: 1 when the completion's extracted answer equals the gold answer
  (:func:`agora.tasks.extract_answer`, :func:`agora.tasks.is_correct`), else 0.
* :class:`PeerJudgeReward`: the pool's judges score each completion online (1–10,
  :class:`agora.agents.judge.Judge`), scores are reputation-weighted
  (:func:`agora.agents.reputation.aggregate_score`, Sparta Eq. 8) and min–max normalised per group
  (:func:`minmax_per_group`, protocols.md §2, Stackelberg GRPO).
* :func:`stored_judge_reward`: the stored aggregated score of an already judged answer with the
  same final answer (no model calls), ``None`` otherwise.

GRPO's advantage is ``r − mean(group)`` (over the group's std): a group whose rewards are all equal
has zero advantage and gives **no gradient**. Every reward here finds such groups
(:func:`constant_groups`), logs them (``log_metric("<name>/constant_groups", fraction)`` and the
``agora.training.rewards`` logger) and, for the peer-judge reward, returns 0 for each of them.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Mapping, Sequence

from agora.tasks.errors import InputError
from agora.agents.judge import Judge, JudgeConfig, judge_means
from agora.models.pool import ModelPool
from agora.agents.reputation import ReputationConfig, aggregate_score
from agora.tasks import answer_key, extract_answer, is_correct

log = logging.getLogger("agora.training.rewards")


def completion_text(completion: Any) -> str:
    """A TRL completion (conversational ``[{"role": "assistant", "content": ...}]`` or plain text) → text."""
    if isinstance(completion, list):
        return "".join(m["content"] for m in completion if m.get("role") == "assistant")
    return str(completion)


def prompt_question(prompt: Any) -> str | None:
    """The question a TRL prompt asks: a plain-text prompt itself, or the last user message of a
    conversational one (``None`` for neither). Read so that a completion that only repeats it (an
    echo, ``docs/scoring.md``) earns nothing."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return users[-1] if users and isinstance(users[-1], str) else None
    return None


def group_bounds(prompts: Sequence[Any]) -> list[tuple[int, int]]:
    """``[start, end)`` of each group: a run of consecutive completions of the same prompt.

    >>> group_bounds(["a", "a", "b", "b"])
    [(0, 2), (2, 4)]
    """
    bounds, start = [], 0
    for i in range(1, len(prompts) + 1):
        if i == len(prompts) or prompts[i] != prompts[start]:
            bounds.append((start, i))
            start = i
    return bounds


def constant_groups(values: Sequence[float | None], bounds: Sequence[tuple[int, int]]) -> list[bool]:
    """Per group: True when its defined rewards are all equal (or fewer than two are defined)."""
    out = []
    for a, b in bounds:
        defined = [v for v in values[a:b] if v is not None]
        out.append(len(defined) < 2 or max(defined) == min(defined))
    return out


def minmax_per_group(values: Sequence[float], bounds: Sequence[tuple[int, int]]) -> list[float]:
    """Min–max normalise each group to [0, 1]: ``(s − min_g) / (max_g − min_g)``; a constant group → 0.

    protocols.md §2 (Stackelberg GRPO: "reward = min–max normalised reputation-weighted peer score").

    >>> minmax_per_group([2.0, 6.0, 4.0, 5.0, 5.0], [(0, 3), (3, 5)])
    [0.0, 1.0, 0.5, 0.0, 0.0]
    """
    out = [0.0] * len(values)
    for a, b in bounds:
        lo, hi = min(values[a:b]), max(values[a:b])
        for i in range(a, b):
            out[i] = (values[i] - lo) / (hi - lo) if hi > lo else 0.0
    return out


def _report_constant(name: str, values: Sequence[float | None], prompts: Sequence[Any],
                     log_metric: Callable[[str, float], None] | None) -> list[tuple[int, int]]:
    bounds = group_bounds([json.dumps(p, sort_keys=True) if not isinstance(p, str) else p for p in prompts])
    flat = constant_groups(values, bounds)
    if any(flat):
        log.info("%s: %d of %d groups have a constant reward (zero advantage, no gradient)",
                 name, sum(flat), len(flat))
    if log_metric is not None and bounds:
        log_metric(f"{name}/constant_groups", sum(flat) / len(flat))
    return bounds


def correctness_reward(prompts: Sequence[Any], completions: Sequence[Any], gold: Sequence[str | None],
                       kind: Sequence[str], log_metric: Callable[[str, float], None] | None = None,
                       **_: Any) -> list[float | None]:
    """1.0 when the completion's answer is correct, 0.0 when not, ``None`` for rows without gold.

    Answers are extracted with :func:`agora.tasks.extract_answer` (``math``: math-verify, ``mc``:
    option letter) and compared with :func:`agora.tasks.is_correct`, under the scoring policy of
    ``docs/scoring.md``: no answer, a hedge naming several values, a negated, refused or unfinished
    answer, and an echo of the prompt's question (:func:`prompt_question`) all score 0.
    """
    rewards: list[float | None] = []
    for prompt, completion, g, k in zip(prompts, completions, gold, kind, strict=True):
        if g is None or k not in ("math", "mc"):
            rewards.append(None)
            continue
        answer = extract_answer(completion_text(completion), k, question=prompt_question(prompt))
        rewards.append(float(is_correct(answer, g, k)))
    _report_constant("correctness", rewards, prompts, log_metric)
    return rewards


def stored_judge_reward(prompts: Sequence[Any], completions: Sequence[Any], judge_scores: Sequence[str],
                        kind: Sequence[str], log_metric: Callable[[str, float], None] | None = None,
                        **_: Any) -> list[float | None]:
    """The stored judge score (1–10) of a judged answer with the same final answer, else ``None``.

    ``judge_scores`` is the GRPO row's JSON list ``[{"text", "model", "score"}]``. ``math``/``mc``
    completions match on :func:`agora.tasks.answer_key` of the extracted answer (mean over matching
    stored answers); open ones on the exact stripped text. An offline stand-in for the peer judges.
    """
    rewards: list[float | None] = []
    for completion, scores_json, k in zip(completions, judge_scores, kind, strict=True):
        stored = json.loads(scores_json) if scores_json else []
        text = completion_text(completion).strip()
        if k in ("math", "mc"):
            key = answer_key(extract_answer(text, k), k)
            matches = [s["score"] for s in stored if key is not None
                       and answer_key(extract_answer(s["text"], k), k) == key]
        else:
            matches = [s["score"] for s in stored if s["text"].strip() == text]
        rewards.append(sum(matches) / len(matches) if matches else None)
    _report_constant("stored_judge", rewards, prompts, log_metric)
    return rewards


class PeerJudgeReward:
    """Online peer-judge reward: reputation-weighted judge score, min–max normalised per group.

    For each completion every judge scores it alone (``presentation="single"``, 1–10, greedy);
    ``s̄ = Σ_k R_k s^(k) / Σ_k R_k`` over the judges (Sparta Eq. 8,
    :func:`agora.agents.reputation.aggregate_score`); the reward is ``s̄`` min–max normalised within
    its group (:func:`minmax_per_group`). A constant group gets 0 everywhere and is logged.

    Args:
        pool: the model pool holding the judges.
        policy: name of the model being trained (recorded as the judged ``target``; never a judge).
        judges: judging pool members; default every member except ``policy``.
        ratings: judge → reputation ``R_k`` (a judge not listed has the initial reputation, 100);
            default equal weights.
        config: judge settings (``presentation`` must be ``single``).
        context: fields copied into every judge call's trace record (run_id, node, ...).

    Judge calls' trace records accumulate in :attr:`records` for the caller to store.

    Under several processes (``accelerate launch``) TRL spreads one group over processes; the raw
    scores are gathered (``accelerate.utils.gather_object``) so each group is normalised whole.

    Raises:
        ValueError: no judge, the policy among the judges, or a ``pair`` presentation.
        KeyError: a judge that is not in the pool.
    """

    __name__ = "peer_judge"

    def __init__(self, pool: ModelPool, policy: str, judges: Sequence[str] = (),
                 ratings: Mapping[str, float] | None = None, config: JudgeConfig = JudgeConfig(),
                 context: Mapping[str, Any] | None = None):
        judges = list(judges) or [m for m in pool.names if m != policy]
        if not judges:
            raise InputError(f"PeerJudgeReward needs at least one judge besides {policy!r}")
        if policy in judges:
            raise InputError(f"PeerJudgeReward: the policy {policy!r} cannot judge its own completions")
        if config.presentation != "single":
            raise InputError("PeerJudgeReward scores one completion at a time: JudgeConfig.presentation must be 'single'")
        self.judges = [Judge(pool, j, config) for j in judges]
        self.policy = policy
        initial = ReputationConfig().initial
        self.ratings = {j: float((ratings or {}).get(j, initial)) for j in judges}
        self.context = dict(context or {})
        self.records: list[dict[str, Any]] = []

    def score(self, instruction: str, text: str) -> float:
        """The reputation-weighted mean judge score ``s̄`` of one completion (1–10)."""
        scores: dict[str, float] = {}
        for judge in self.judges:
            judgements, records = judge.score(instruction, [(self.policy, text)],
                                              context={**self.context, "node": "grpo_reward"})
            self.records += records
            scores.update(judge_means(judgements)[0])
        return aggregate_score(scores, self.ratings)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], instruction: Sequence[str],
                 log_metric: Callable[[str, float], None] | None = None, **_: Any) -> list[float]:
        raw = [self.score(q, completion_text(c)) for q, c in zip(instruction, completions, strict=True)]
        keys = [json.dumps(p, sort_keys=True) if not isinstance(p, str) else p for p in prompts]
        all_raw, all_keys, offset = _gather(raw, keys)
        bounds = _report_constant("peer_judge", all_raw, all_keys, log_metric)
        return minmax_per_group(all_raw, bounds)[offset: offset + len(raw)]


def _gather(values: list[float], keys: list[str]) -> tuple[list[float], list[str], int]:
    """Every process's ``(values, keys)`` in process order, and where this process's slice starts."""
    try:
        from accelerate import PartialState
    except ImportError:  # without the train extra there is only this process
        return values, keys, 0
    state = PartialState()
    if state.num_processes == 1:
        return values, keys, 0
    from accelerate.utils import gather_object

    pairs = gather_object([(v, k) for v, k in zip(values, keys)])
    return [v for v, _ in pairs], [k for _, k in pairs], state.process_index * len(values)
