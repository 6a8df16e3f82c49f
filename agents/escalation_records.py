"""The record of one COMED question: what its steps found (:class:`RouteInfo`, :class:`AnchorInfo`,
:class:`ProbeInfo`, :class:`EscalationInfo`: the shapes the graph's state and output carry), its
outcome (:func:`comed_outcome`) and what the runner stores in ``questions.detail`` for calibration
(:func:`comed_detail`). Shapes and pure functions; the graph is :mod:`agora.graphs.escalation`, the
rules :mod:`agora.agents.escalation`.
"""

from __future__ import annotations

from typing import Any, NotRequired

from typing_extensions import TypedDict

from agora.agents.escalation import Decision, escalates
from agora.tasks.scoring import score_answer


class RouteInfo(TypedDict):
    anchor: str
    probe: str
    peers: list[str]
    routed: bool
    """True when the router chose the anchor."""
    scores: dict[str, float] | None
    margin: float | None
    """Router margin M; ``None`` without a router."""


class AnchorInfo(TypedDict):
    model: str
    answers: list[str | None]
    answer: str | None
    """Plurality answer of the N samples."""
    how: NotRequired[str | None]
    """How the plurality answer was found in the first sample that gives it."""
    sc: float
    """Self-consistency: the plurality answer's share of the N samples."""
    text: str
    """A sample carrying the plurality answer (shown to peers)."""
    first: dict[str, Any]
    """The first sample's answer, how it was found, and cost (the router-only baseline)."""


class ProbeInfo(TypedDict):
    model: str
    answer: str | None
    agrees: bool


class EscalationInfo(TypedDict):
    peers: list[dict[str, Any]]
    answer: str | None
    how: NotRequired[str | None]
    """How the vote's answer was found (the anchor's, else the first peer's that gives it)."""


def comed_outcome(decision: Decision, probe_agrees: bool | None) -> str:
    """``accept``, ``verify_accept``, ``verify_escalate`` or ``escalate``."""
    if decision == "verify":
        return "verify_accept" if probe_agrees else "verify_escalate"
    return decision


def comed_detail(values: dict[str, Any]) -> dict[str, Any]:
    """What the runner stores in ``questions.detail`` for a COMED question: the route, SC, the
    decision and branches (with each branch's correctness and calls, for calibration) and each
    method's model calls. The branches are scored with :func:`agora.tasks.scoring.score_answer`
    against ``values["gold"]``, which the runner puts beside the state
    (:func:`agora.graphs.runner.scored_values`; the graph's state holds no gold): ``None`` without.
    The calibration reads it back (:func:`agora.traces.bench_data.dev_outcome`)."""
    gold, kind = values.get("gold"), values.get("kind") or "math"
    costs = values.get("costs") or {}
    anchor_info, probe, esc = values.get("anchor") or {}, values.get("probe"), values.get("escalation")

    def correct(answer):
        return score_answer(answer, gold, kind)

    return {
        "route": values.get("route"), "decision": values.get("decision"), "outcome": values.get("outcome"),
        "escalated": escalates(values["decision"], (probe or {}).get("agrees")) if "decision" in values else None,
        "anchor": {k: anchor_info.get(k) for k in ("model", "answers", "answer", "sc")},
        "anchor_correct": correct(anchor_info.get("answer")),
        "probe": probe, "probe_calls": costs.get("verify", {}).get("calls"),
        "escalation": esc, "escalation_correct": correct(esc["answer"]) if esc else None,
        "escalation_calls": costs.get("escalate", {}).get("calls"),
        "method_calls": {m: r.get("calls") for m, r in (values.get("methods") or {}).items()},
    }
