"""One candidate pool per question: k samples from every pool model, drawn once.

    START ─Send×m─▶ candidates ─▶ candidates_vote ─▶ END

``agora bench`` runs this graph per task (run ``<bench>:<task>:candidates``) before the protocols,
then hands each question's samples to every protocol that starts from independent samples, as the
graph input ``shared_candidates`` (:class:`agora.graphs.question.SharedCandidate`,
:func:`agora.graphs.question.take_shared`): ALIGN's agents, COMED's anchor, MoA's proposers and
debate's first round take them instead of drawing their own. Each model's k samples are one request
with the protocol-neutral solver prompt (:func:`agora.agents.prompts.solver_messages`, the prompt
every one of those first steps uses), seeded per question and model (:data:`CANDIDATE_SEED`),
traced as node ``candidates``, role ``candidate``: one ``model_calls`` row per sample, in this run
only.

Methods (all drawn from the pool, so their whole cost is shared): ``candidates`` (the plurality of
all m·k samples: the pool's self-consistency), ``single_agent`` (the first sample of
:attr:`CandidatesConfig.single_model`, the dev-chosen best model in a bench with a dev split, else
the first pool model) and ``sc:<model>`` per model (the plurality of its own k samples: each
model's self-consistency, free).

Not a registered protocol (no ``SPEC``): a bench's building block, not a method of its own.
"""

from __future__ import annotations

import operator
from dataclasses import field
from functools import partial
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import model_validator
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents._checks import MaxTokens, Seed, Shots, Temperature, TopP
from agora.agents.delegation import plurality
from agora.agents.prompts import solver_messages
from agora.agents.seeds import SeedNode, call_seed, sampling
from agora.graphs._calls import aask, ask, call_context, found, how_of
from agora.graphs.context import context_as, graph_context, pool_from, resolve_pool, settings_from
from agora.graphs.nodes import sync_async_node
from agora.graphs.question import as_problem, QuestionInput, shared_candidate, SharedCandidate
from agora.graphs.scoring import ProtocolGraph
from agora.models.pool import ModelPool
from agora.models.validation import Convert, Count, Name, Names, settings
from agora.traces.schema import MethodResult

#: Seeds of the shared draw: model ``i`` (its position in :attr:`CandidatesConfig.models`, else in
#: the pool) draws its k samples from ``item_seed + 700 + 1000·i`` (apart from every protocol's own
#: nodes in :data:`agora.agents.seeds.NODES`).
CANDIDATE_SEED = SeedNode(700, agent_stride=1000)


@settings
class CandidatesConfig:
    """Settings of the shared draw (``agora bench`` sets them from the protocols' own, which must agree)."""

    k: Annotated[int, Count(1)] = 3
    """Samples per model and question."""
    models: Annotated[tuple[str, ...], Names] = ()
    """Who draws (default: every pool model)."""
    single_model: Annotated[str | None, Name()] = None
    """The model whose first sample is ``single_agent`` (default: the first of ``models``)."""
    temperature: Temperature = 0.7
    top_p: TopP = 1.0
    max_tokens: MaxTokens = 256
    shots: Shots = 2
    """Worked exemplars in the solver prompt."""
    seed: Seed = 0

    @model_validator(mode="after")
    def _single_model_draws(self) -> CandidatesConfig:
        if self.single_model is not None and self.models and self.single_model not in self.models:
            raise InputError(f"CandidatesConfig.single_model {self.single_model!r} is not one of models {self.models}")
        return self


@graph_context
@settings(frozen=False, slots=False)
class CandidatesContext:
    """Run-time context: the pool and the draw's settings."""

    pool: Annotated[ModelPool | str | None, Convert(partial(resolve_pool, where="CandidatesContext"))] = None
    """The models (a ``ModelPool``, a built-in pool name or a pool file; ``None``: the embedded pool)."""
    config: Annotated[CandidatesConfig, Convert(partial(settings_from, cls=CandidatesConfig))] = field(
        default_factory=CandidatesConfig)


class CandidatesState(QuestionInput, total=False):
    """State of one question's draw."""

    drawn: Annotated[list[SharedCandidate], operator.add]
    """Every model's samples, appended by the draws in parallel."""
    calls: Annotated[list[dict[str, Any]], operator.add]
    methods: dict[str, MethodResult]
    answer: str | None


class DrawTask(QuestionInput, total=False):
    model: str
    index: int
    """The model's position (its seed stride)."""


def _config(runtime: Runtime) -> CandidatesConfig:
    return context_as(runtime.context, CandidatesContext).config


def models_of(config: CandidatesConfig, pool_names: list[str]) -> list[str]:
    """Who draws: ``config.models`` or the pool's members."""
    return list(config.models) or list(pool_names)


def to_models(state: CandidatesState, runtime: Runtime[CandidatesContext]) -> list[Send]:
    problem = as_problem(state)
    base = {k: state[k] for k in ("question", "kind", "n_choices") if k in state} | {"question_id": problem.id}
    models = models_of(_config(runtime), pool_from(runtime.context, CandidatesContext).names)
    return [Send("candidates", DrawTask(**base, model=m, index=i)) for i, m in enumerate(models)]


def _request(task: DrawTask, runtime: Runtime[CandidatesContext]) -> tuple[Any, ...]:
    problem = as_problem(task)
    cfg = _config(runtime)
    params = sampling(cfg, n=cfg.k, seed=call_seed(cfg.seed, problem.id, CANDIDATE_SEED, agent=task["index"]))
    return (pool_from(runtime.context, CandidatesContext), task["model"], solver_messages(problem, cfg.shots), params,
            call_context(problem, "candidates", "candidate", agent=task["index"]))


def _drawn(task: DrawTask, samples: list, records: list[dict], _cost: Any) -> dict[str, Any]:
    problem = as_problem(task)
    drawn = [shared_candidate(s, i, *found(s.text, problem)) for i, s in enumerate(samples)]
    return {"drawn": drawn, "calls": records}


def candidates(task: DrawTask, runtime: Runtime[CandidatesContext]) -> dict[str, Any]:
    """One model's k samples of the question (one request, the neutral solver prompt)."""
    return _drawn(task, *ask(*_request(task, runtime)))


async def acandidates(task: DrawTask, runtime: Runtime[CandidatesContext]) -> dict[str, Any]:
    return _drawn(task, *await aask(*_request(task, runtime)))


def _result(answer: str | None, used: list[SharedCandidate]) -> MethodResult:
    tokens, latency = sum(c["completion_tokens"] for c in used), sum(c["latency_s"] for c in used)
    calls = len({c["model"] for c in used})
    return MethodResult(answer=answer, correct=None, samples=len(used), completion_tokens=tokens, latency_s=latency,
                        calls=calls, how=how_of(answer, [(c.get("answer"), c.get("how")) for c in used]),
                        shared_calls=calls, shared_samples=len(used), shared_completion_tokens=tokens,
                        shared_latency_s=latency)


def candidates_vote(state: CandidatesState, runtime: Runtime[CandidatesContext]) -> dict[str, Any]:
    """The free methods of the pool: its plurality, the single model's first sample, each model's
    self-consistency (``correct`` left ``None``: the runner scores)."""
    cfg = _config(runtime)
    models = models_of(cfg, pool_from(runtime.context, CandidatesContext).names)
    by = {m: sorted((c for c in state.get("drawn") or [] if c["model"] == m), key=lambda c: c["sample_index"])
          for m in models}
    everything = [c for m in models for c in by[m]]
    single = cfg.single_model or models[0]
    first = by.get(single, [])[:1]
    methods = {"candidates": _result(plurality([c.get("answer") for c in everything])[0], everything),
               "single_agent": _result(first[0].get("answer") if first else None, first)}
    for m in models:
        methods[f"sc:{m}"] = _result(plurality([c.get("answer") for c in by[m]])[0], by[m])
    return {"methods": methods, "answer": methods["candidates"]["answer"]}


def build_candidates_graph() -> StateGraph:
    """The shared draw, uncompiled. Input: :class:`~agora.graphs.question.QuestionInput`; context:
    :class:`CandidatesContext`."""
    builder = ProtocolGraph(CandidatesState, context_schema=CandidatesContext, input_schema=QuestionInput)
    builder.add_node("candidates", sync_async_node(candidates, acandidates))
    builder.add_node("candidates_vote", sync_async_node(candidates_vote))
    builder.add_conditional_edges(START, to_models, ["candidates"])
    builder.add_edge("candidates", "candidates_vote")
    builder.add_edge("candidates_vote", END)
    return builder


def shared_from_rows(rows: list[dict[str, Any]]) -> dict[str, list[SharedCandidate]]:
    """``shared_candidates`` (model → its samples, in sample order) from the draw's ``model_calls``
    rows of one question (successful ones: ``error`` NULL; ``params`` as stored, JSON or a dict)."""
    import json

    out: dict[str, list[SharedCandidate]] = {}
    for r in sorted(rows, key=lambda r: (r["model"], r.get("sample_index") or 0)):
        if r.get("error"):
            continue
        params = r.get("params")
        params = json.loads(params) if isinstance(params, str) else (params or {})
        mine = out.setdefault(r["model"], [])
        mine.append(SharedCandidate(model=r["model"], text=r.get("completion") or "", call_id=r["call_id"],
                                    sample_index=len(mine), seed=params.get("seed"),
                                    prompt_tokens=r.get("prompt_tokens") or 0,
                                    completion_tokens=r.get("completion_tokens") or 0,
                                    latency_s=r.get("latency_s") or 0.0, finish_reason=r.get("finish_reason"),
                                    answer=r.get("answer"), how=r.get("how")))
    return out
