"""Model calls with their cost, shared by COMED, Mixture-of-Agents and debate (not public).

A node asks a model with :func:`ask` (or :func:`aask` in its async twin) and gets the samples, their
trace records and one :class:`Cost`; costs add up per step with :func:`add_costs` (the reducer of a
``costs`` state key) and :func:`total_cost`. A method's row is :func:`method_result`, unscored.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from agora.models.pool import ModelPool, Sample, SamplingParams
from agora.tasks.answers import find_answer
from agora.tasks.problem import Problem
from agora.traces.schema import SHARED_COST_FIELDS, CallRecord, Cost, MethodResult  # noqa: F401 (the one declaration of each)


_BASE_COST = ("calls", "samples", "completion_tokens", "latency_s")


def total_cost(costs: Iterable[Cost]) -> Cost:
    """The sum of ``costs`` field by field (all zero for none); the shared part
    (:data:`~agora.traces.schema.SHARED_COST_FIELDS`) only when some cost has one."""
    costs = list(costs)
    out = Cost(**{k: sum(c[k] for c in costs) for k in _BASE_COST})
    if any(f in c for c in costs for f in SHARED_COST_FIELDS):
        out.update({f: sum(c.get(f) or 0 for c in costs) for f in SHARED_COST_FIELDS})  # type: ignore[misc]
    return out


def shared_cost(samples: list[Sample], calls: int = 1) -> Cost:
    """The cost of samples taken from the shared candidate pool (:func:`agora.graphs.question.take_shared`):
    counted in full (``calls`` requests, default one: a model's samples of a question are one
    request) and all of it shared, none added."""
    tokens, latency = sum(s.completion_tokens for s in samples), sum(s.latency_s for s in samples)
    return Cost(calls=calls, samples=len(samples), completion_tokens=tokens, latency_s=latency,
                shared_calls=calls, shared_samples=len(samples), shared_completion_tokens=tokens,
                shared_latency_s=latency)


def add_costs(a: dict[str, Cost] | None, b: dict[str, Cost] | None) -> dict[str, Cost]:
    """Reducer of ``costs``: per-step costs add up."""
    out = dict(a or {})
    for key, c in (b or {}).items():
        out[key] = total_cost([out[key], c]) if key in out else c
    return out


def _cost(samples: list[Sample]) -> Cost:
    return Cost(calls=1, samples=len(samples), completion_tokens=sum(s.completion_tokens for s in samples),
                latency_s=sum(s.latency_s for s in samples))


def ask(pool: ModelPool, model: str, messages: list[dict], params: SamplingParams,
        context: dict[str, Any]) -> tuple[list[Sample], list[CallRecord], Cost]:
    """One request; its samples, trace records and cost."""
    samples, records = pool.sample(model, messages, params, context=context)
    return samples, records, _cost(samples)


async def aask(pool: ModelPool, model: str, messages: list[dict], params: SamplingParams,
               context: dict[str, Any]) -> tuple[list[Sample], list[CallRecord], Cost]:
    """:func:`ask` for async nodes (awaits :meth:`ModelPool.asample`)."""
    samples, records = await pool.asample(model, messages, params, context=context)
    return samples, records, _cost(samples)


def found(text: str | None, problem: Problem) -> tuple[str | None, str | None]:
    """``(answer, how)`` of one output (``docs/scoring.md``); ``(None, None)`` without an answer,
    or for an output whose answer only repeats the question's text (an echo)."""
    if text is None:
        return None, None
    result = find_answer(text, problem.kind, problem.n_choices or 4, question=problem.question)
    return result.answer, result.how if result.answer is not None else None


def how_of(answer: str | None, pairs: Iterable[tuple[str | None, str | None]]) -> str | None:
    """How ``answer`` was found: the mark of the first ``(answer, how)`` pair that gives it."""
    return next((how for a, how in pairs if answer is not None and a == answer), None)


def call_context(problem: Problem, node: str, role: str, **extra: Any) -> dict[str, Any]:
    """The trace context of one call: question, node, role, no partner unless given."""
    return {"question_id": problem.id, "node": node, "role": role, "partner": None, **extra}


def partner(models: Iterable[str]) -> str | None:
    """Distinct models, in order, comma-separated: who the speaker was shown."""
    return ",".join(dict.fromkeys(models)) or None


def method_result(answer: str | None, how: str | None, cost: Cost) -> MethodResult:
    """A method's row: its answer, cost and mark, ``correct`` left ``None`` (graphs do not score:
    the runner does, :func:`agora.tasks.scoring.score_results`)."""
    return MethodResult(answer=answer, correct=None, **cost, how=how if answer is not None else None)


class Request(NamedTuple):
    """One model request a node makes: :func:`ask`'s arguments."""

    pool: ModelPool
    model: str
    messages: list[dict]
    params: SamplingParams
    context: dict[str, Any]


def first_answer(samples: list[Sample], problem: Problem) -> dict[str, Any] | None:
    """``{"answer", "how", "text"}`` of the first sample (``found``), ``None`` without one (the call failed)."""
    if not samples:
        return None
    answer, how = found(samples[0].text, problem)
    return {"answer": answer, "how": how, "text": samples[0].text}
