"""COMED's analysis from the trace store: the run report (per-method accuracy and cost, decisions,
the rescue–harm accounting) and the calibration of a dev run's thresholds. ``agora run comed`` and
``agora calibrate comed`` print these; nothing here prints."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from agora.agents.escalation import EscalationThresholds
from agora.agents.escalation_calibration import (
    DevOutcome,
    PolicyScore,
    RescueHarm,
    calibrate,
    rescue_harm,
    score_policy,
)
from agora.traces.replay import ReplayResult, replay
from agora.traces.replay_rules import dev_outcomes
from agora.traces.run_trace import load_run
from agora.traces.report import MethodRow, method_table
from agora.traces.store import TraceStore


@dataclass(frozen=True, slots=True)
class ComedSummary:
    """The COMED report of one run (:func:`comed_summary`)."""

    rows: list[MethodRow]
    """One row per method (:func:`agora.traces.report.method_table`)."""
    calls_per_question: dict[str, float]
    """Mean model calls (requests) per question, per method."""
    tokens_per_question: dict[str, float]
    """Mean decoded tokens per question, per method."""
    decisions: dict[str, int]
    """Questions per decision of the decide step: ``accept``, ``verify``, ``escalate``."""
    outcomes: dict[str, int]
    """Questions per outcome: ``accept``, ``verify_accept``, ``verify_escalate``, ``escalate``."""
    rescue_harm: RescueHarm
    """Over questions with a gold answer; the identity is checked on each of them."""


def comed_summary(store: TraceStore, run_id: str, order: Sequence[str] = ()) -> ComedSummary:
    """The COMED report of run ``run_id``, from its ``results`` and ``questions.detail`` rows;
    ``order``: the methods listed first in ``rows`` (the rest follow alphabetically), e.g.
    :data:`agora.graphs.escalation.METHODS`.

    Raises:
        ValueError: the rescue–harm identity fails on some question (see
            :func:`agora.agents.escalation_calibration.rescue_harm`).
    """
    details = {q["question_id"]: json.loads(q["detail"] or "{}") for q in store.questions(run_id)}
    calls: dict[str, list[int]] = {}
    by_q: dict[str, dict[str, Any]] = {}
    tokens: dict[str, list[int]] = {}
    for r in store.results(run_id):
        by_q.setdefault(r["question_id"], {})[r["method"]] = r
        tokens.setdefault(r["method"], []).append(r["completion_tokens"] or 0)
        n = r.get("calls")  # results.calls; databases from before it keep the count in the detail JSON
        if n is None:
            n = (details.get(r["question_id"], {}).get("method_calls") or {}).get(r["method"])
        calls.setdefault(r["method"], []).append(n or 0)
    scored = [q for q, ms in by_q.items() if ms.get("comed", {}).get("correct") is not None]
    rh = rescue_harm([bool(by_q[q]["anchor"]["correct"]) for q in scored],
                     [bool(by_q[q]["comed"]["correct"]) for q in scored],
                     [bool(details[q].get("escalated")) for q in scored])
    return ComedSummary(
        rows=method_table(store, run_id, order=order),
        calls_per_question={m: sum(v) / len(v) for m, v in calls.items()},
        tokens_per_question={m: sum(v) / len(v) for m, v in tokens.items()},
        decisions=dict(Counter(d.get("decision") for d in details.values())),
        outcomes=dict(Counter(d.get("outcome") for d in details.values())), rescue_harm=rh)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Thresholds chosen on a dev run and the policies they are compared with (:func:`calibrate_run`)."""

    outcomes: list[DevOutcome]
    """The dev questions calibrated on (gold answer and every branch recorded)."""
    chosen: PolicyScore
    """The thresholds maximising rescue − harm − λ·cost within the budget."""
    policies: list[tuple[str, PolicyScore]]
    """``("chosen", chosen)``, ``("defaults", ...)`` (:class:`EscalationThresholds` defaults) and,
    with a budget, ``("without the budget", ...)``, each scored on ``outcomes``."""
    replayed: ReplayResult | None = None
    """The dev run re-decided under the chosen thresholds (``agora replay --rule comed``): each
    question's answer and why, as the test run will decide it."""


def calibrate_run(store: TraceStore, run_id: str, lam: float, max_calls: float | None = None) -> Calibration:
    """Calibrate COMED's thresholds on the ``explore`` run ``run_id``, as a replay over its traces:
    the run is read once (:func:`agora.traces.run_trace.load_run`), every candidate policy is scored on
    its recorded branches (:func:`agora.traces.replay_rules.dev_outcomes`, then
    :func:`agora.agents.escalation_calibration.calibrate` with cost weight ``lam``, accuracy fraction per extra
    model call per question, and the optional budget ``max_calls``, mean model calls per
    question), and the chosen thresholds are replayed over the run (the ``comed`` rule), with no
    model call.

    Raises:
        ValueError: no dev outcomes, a bad ``lam``, or a budget no thresholds fit (from ``calibrate``).
    """
    run = load_run(store, run_id)
    outcomes = dev_outcomes(run)
    chosen = calibrate(outcomes, lam, max_calls)
    policies = [("chosen", chosen), ("defaults", score_policy(outcomes, EscalationThresholds(), lam))]
    if max_calls is not None:
        policies.append(("without the budget", calibrate(outcomes, lam)))
    t = chosen.thresholds
    return Calibration(outcomes, chosen, policies,
                       replay(run, "comed", {"tau_hi": t.tau_hi, "tau_lo": t.tau_lo, "m_min": t.m_min}))
