"""State types the benchmark protocols share, declared once with their reducers, as LangGraph's
``MessagesState`` is (not public): a member's answer, and the keys a per-question protocol writes for
the runner (``answer``, ``how``, ``costs``, ``calls``, ``methods``).

    class MoAState(MoAInput, MethodsState, total=False):
        proposals: Annotated[list[MemberAnswer], operator.add]

A protocol's own output names what its ``answer`` is: ``@studio_schema(docs={"answer": "The
aggregator's answer."})`` over ``class MoAOutput(MethodsOutput)``.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict

from agora.graphs._calls import add_costs
from agora.models.studio_schema import studio_schema
from agora.traces.schema import Cost, MethodResult


@studio_schema()
class MemberAnswer(TypedDict):
    """One member's answer to the question."""

    agent: int
    """The member's position among the protocol's agents (proposers, debaters)."""
    model: str
    """The pool member that answered."""
    answer: str | None
    """The answer found in ``text`` (``docs/scoring.md``); ``None`` without one."""
    how: str | None
    """How the answer was found in ``text`` (``marker``, ``boxed``, ...)."""
    text: str
    """What the member replied."""


@studio_schema()
class MethodsOutput(TypedDict):
    """What every per-question protocol returns beside its own keys."""

    answer: str | None
    """The protocol's answer (its main method's)."""
    how: str | None
    """How the answer was found in the text that gives it (``marker``, ``boxed``, ...)."""
    costs: dict[str, Cost]
    """Cost of each step."""
    methods: dict[str, MethodResult]
    """Each method's answer, correctness (``None`` until scored) and cost."""


class MethodsState(TypedDict, total=False):
    """The state keys a per-question protocol writes for the runner."""

    costs: Annotated[dict[str, Cost], add_costs]
    """Cost of each step; the steps' updates add up (reducer :func:`agora.graphs._calls.add_costs`)."""
    calls: Annotated[list[dict[str, Any]], operator.add]
    """Trace records of every model call (written to the trace store by the runner); appended."""
    methods: dict[str, MethodResult]
    """Each method's answer and cost (``correct`` left ``None``: the runner scores)."""
    answer: str | None
    """The protocol's answer."""
    how: str | None
    """How the answer was found."""
