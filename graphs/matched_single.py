"""One member's extra samples of a question, so that its own vote can match a method's sample count.

    START ─▶ matched_draw ─▶ END

``agora bench --matched-single`` compares the best multi-member method with the dev-chosen best
single member *at matched samples*: that member's plurality over as many of its own samples as the
method used in total on the question. The member's first ``k`` samples are its share of the bench's
shared candidate pool (the graph input ``shared_candidates``); this graph draws the rest,
``matched_extra`` more (a per-question input the bench computes from the other runs), in one
request with the same prompt and sampling as the shared draw (:func:`agora.agents.prompts.solver_messages`;
the member's recipe applies, role ``candidate``). Its seed continues the member's shared-draw
stream: the shared request's seed plus ``k`` (on llama.cpp sample ``i`` of a request draws from its
seed + ``i``, so the extra samples are the ones a shared draw with a larger ``k`` would have added).
Traced as node ``matched_draw``, role ``candidate``.

Method (the run's own, for the runner's bookkeeping): ``matched-single``, the member's plurality over
its shared samples and the extra ones (``samples`` = both, ``shared_*`` = the shared part). The bench's
claim re-reads the samples from the trace rows and votes over the first ``n`` of them per question
(:mod:`agora.traces.matched_single`).

Not a registered protocol (no ``SPEC``): a bench's building block, as the shared draw is.
"""

from __future__ import annotations

import operator
from functools import partial
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from pydantic import model_validator
from typing_extensions import NotRequired

from agora.tasks.errors import InputError
from agora.agents._checks import MaxTokens, Seed, Shots, Temperature, TopP
from agora.agents.delegation import plurality
from agora.agents.prompts import solver_messages
from agora.agents.seeds import call_seed, sampling
from agora.graphs._calls import aask, ask, call_context, found, how_of
from agora.graphs.candidates import CANDIDATE_SEED
from agora.graphs.context import context_as, graph_context, pool_from, resolve_pool
from agora.graphs.nodes import sync_async_node
from agora.graphs.question import QuestionInput, SharedCandidate, as_problem, shared_candidate
from agora.graphs.scoring import ProtocolGraph
from agora.models.pool import ModelPool
from agora.models.validation import Convert, Count, Name, settings
from agora.traces.schema import MethodResult

#: The run's protocol name and its one method.
PROTOCOL = "matched-single"


@settings
class MatchedSingleConfig:
    """The member and the shared draw's settings (``agora bench`` copies them from the shared draw's)."""

    member: Annotated[str, Name(optional=False)]
    """The pool member whose extra samples are drawn (the bench's dev-chosen best member)."""
    index: Annotated[int, Count(0)] = 0
    """The member's position in the shared draw (its seed stride, :data:`~agora.graphs.candidates.CANDIDATE_SEED`)."""
    k_shared: Annotated[int, Count(0)] = 3
    """Samples per member in the shared draw: the extra samples' seeds start after them."""
    temperature: Temperature = 0.7
    top_p: TopP = 1.0
    max_tokens: MaxTokens = 256
    shots: Shots = 2
    seed: Seed = 0


@graph_context
@settings(frozen=False, slots=False)
class MatchedSingleContext:
    """Run-time context: the pool and the draw's settings."""

    pool: Annotated[ModelPool | str | None, Convert(partial(resolve_pool, where="MatchedSingleContext"))] = None
    config: MatchedSingleConfig | None = None

    @model_validator(mode="after")
    def _has_config(self) -> MatchedSingleContext:
        if not isinstance(self.config, MatchedSingleConfig):
            raise InputError(f"MatchedSingleContext.config: expected MatchedSingleConfig, got {type(self.config).__name__}")
        return self


class MatchedSingleInput(QuestionInput, total=False):
    matched_extra: NotRequired[int]
    """How many samples to draw beyond the member's shared ones (0 or absent: none)."""


class MatchedSingleState(MatchedSingleInput, total=False):
    drawn: Annotated[list[SharedCandidate], operator.add]
    calls: Annotated[list[dict[str, Any]], operator.add]
    methods: dict[str, MethodResult]
    answer: str | None


def _config(runtime: Runtime) -> MatchedSingleConfig:
    return context_as(runtime.context, MatchedSingleContext).config


def _shared(state: MatchedSingleState, member: str) -> list[SharedCandidate]:
    return sorted((state.get("shared_candidates") or {}).get(member) or [], key=lambda c: c["sample_index"])


def _request(state: MatchedSingleState, runtime: Runtime, extra: int) -> tuple[Any, ...]:
    problem = as_problem(state)
    cfg = _config(runtime)
    seed = call_seed(cfg.seed, problem.id, CANDIDATE_SEED, agent=cfg.index) + cfg.k_shared
    params = sampling(cfg, n=extra, seed=seed)
    return (pool_from(runtime.context, MatchedSingleContext), cfg.member, solver_messages(problem, cfg.shots), params,
            call_context(problem, "matched_draw", "candidate", agent=cfg.index))


def _finish(state: MatchedSingleState, runtime: Runtime, samples: list, records: list[dict]) -> dict[str, Any]:
    problem = as_problem(state)
    cfg = _config(runtime)
    shared = _shared(state, cfg.member)
    drawn = [shared_candidate(s, len(shared) + i, *found(s.text, problem)) for i, s in enumerate(samples)]
    every = shared + drawn
    answer = plurality([c.get("answer") for c in every])[0]
    tokens = sum(c["completion_tokens"] for c in every)
    latency = sum(c["latency_s"] for c in every)
    shared_tokens = sum(c["completion_tokens"] for c in shared)
    result = MethodResult(answer=answer, correct=None, samples=len(every), completion_tokens=tokens,
                          latency_s=latency, calls=(1 if shared else 0) + (1 if records else 0),
                          how=how_of(answer, [(c.get("answer"), c.get("how")) for c in every]),
                          shared_calls=1 if shared else 0, shared_samples=len(shared),
                          shared_completion_tokens=shared_tokens,
                          shared_latency_s=sum(c["latency_s"] for c in shared))
    return {"drawn": drawn, "calls": records, "methods": {PROTOCOL: result}, "answer": answer}


def _extra(state: MatchedSingleState) -> int:
    extra = state.get("matched_extra") or 0
    if isinstance(extra, bool) or not isinstance(extra, int) or extra < 0:
        raise InputError(f"matched_extra must be an integer >= 0, got {extra!r}")
    return extra


def matched_draw(state: MatchedSingleState, runtime: Runtime[MatchedSingleContext]) -> dict[str, Any]:
    """The member's ``matched_extra`` extra samples (one request; none when 0), and its vote over all its samples."""
    extra = _extra(state)
    samples, records = (ask(*_request(state, runtime, extra))[:2]) if extra else ([], [])
    return _finish(state, runtime, samples, records)


async def amatched_draw(state: MatchedSingleState, runtime: Runtime[MatchedSingleContext]) -> dict[str, Any]:
    extra = _extra(state)
    samples, records = (await aask(*_request(state, runtime, extra)))[:2] if extra else ([], [])
    return _finish(state, runtime, samples, records)


def build_matched_single_graph() -> StateGraph:
    """The extra draw, uncompiled. Input: :class:`MatchedSingleInput`; context: :class:`MatchedSingleContext`."""
    builder = ProtocolGraph(MatchedSingleState, context_schema=MatchedSingleContext, input_schema=MatchedSingleInput)
    builder.add_node("matched_draw", sync_async_node(matched_draw, amatched_draw))
    builder.add_edge(START, "matched_draw")
    builder.add_edge("matched_draw", END)
    return builder
