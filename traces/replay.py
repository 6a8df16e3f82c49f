"""Replay: re-decide a recorded run under another selection rule or other parameters, with zero
model calls (``agora replay``).

Every candidate a run drew is a ``model_calls`` row with its extracted answer (schema
:mod:`agora.traces.schema`), so any rule that picks an answer from recorded candidates can be
re-applied to a finished run: ALIGN under another τ or proposal rule, best-of-n, plurality, a vote
weighted by each model's accuracy on a dev run, COMED under other thresholds. A rule is one function
registered by name (:func:`agora.traces.replay_rules.selection_rule`); :func:`replay` applies it to every recorded question and
scores the answers with the task's scorer (:func:`agora.tasks.scoring.score_answer`, the one the
runner records with, against the question's stored gold), never by re-running a graph; :func:`paired_table` compares the replayed
answers with every method the run recorded, on the same questions (paired bootstrap CI and exact
McNemar from :mod:`agora.agents.stats`).

A question whose recorded trace lacks what a rule needs (COMED thresholds that would verify a
question the run accepted: its probe was never asked) is *unavailable*: left out of the pairs and
counted, never guessed. Under the run's own settings each built-in rule reproduces the method it
names (``Rule.reproduces``) answer for answer.

Usage::

    from agora.traces.replay import replay, paired_table
    from agora.traces.run_trace import load_run
    run = load_run(store, "b1:arith:align")
    result = replay(run, "align", {"tau": 0.9})
    rows = paired_table(run, result)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agora.tasks.errors import InputError
from agora.tasks.scoring import score_answer
from agora.agents.stats import bootstrap_ci, mcnemar_exact, paired_bootstrap_ci
from agora.traces.report import too_few
from agora.traces.replay_rules import (RULES, ReplayContext, Rule, Unavailable, default_roles, model_accuracy,
                                       parse_params)
from agora.traces.run_trace import QuestionTrace, RunTrace


# ---------------------------------------------------------------------------- replay and its table


@dataclass(frozen=True, slots=True)
class Replayed:
    """One question under a replayed rule."""

    question_id: str
    answer: str | None
    correct: bool | None
    """``None`` without gold, when unavailable, or when the rule had no sample (failed)."""
    why: str
    samples: int
    unavailable: str | None = None
    members: list[dict[str, Any]] = field(default_factory=list)
    """The question's recorded members, one per (role, agent, model, recipe) in call order:
    ``{"role", "agent", "model", "recipe"}``, ``recipe`` the one that rewrote its calls (``pot``...)
    or ``None`` (no recipe, or a database from before recipes)."""


def recorded_members(q: QuestionTrace) -> list[dict[str, Any]]:
    """:attr:`Replayed.members` of one recorded question."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for s in q.samples:
        seen.setdefault((s.role, s.agent, s.model, s.recipe),
                        {"role": s.role, "agent": s.agent, "model": s.model, "recipe": s.recipe})
    return list(seen.values())


@dataclass(frozen=True, slots=True)
class ReplayResult:
    run_id: str
    rule: str
    params: dict[str, Any]
    rows: list[Replayed]
    dev_run_id: str | None = None

    @property
    def unavailable(self) -> int:
        return sum(r.unavailable is not None for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_rule(run: RunTrace, rule: str, rules: dict[str, Rule] | None = None) -> Rule:
    """The registered rule ``rule``, if it applies to ``run``'s protocol.

    Raises:
        ValueError: an unknown rule (the message lists them), or one for other protocols (the
            message names the run's protocol and the rules that apply to it).
    """
    registry = RULES if rules is None else rules
    if rule not in registry:
        raise InputError(f"--rule {rule}: unknown; choose from {', '.join(sorted(registry))}")
    spec = registry[rule]
    if not spec.applies_to(run.protocol):
        fits = sorted(r.name for r in registry.values() if r.applies_to(run.protocol))
        raise InputError(f"--rule {rule}: applies to {', '.join(spec.protocols)} runs only; run {run.run_id!r} has "
                         f"protocol {run.protocol}, whose rules are {', '.join(fits) or 'none'}")
    return spec


def run_roles(run: RunTrace) -> list[str]:
    """The roles of the run's recorded samples (``agent``, ``anchor``, ``probe``, ``peer`` ...), sorted."""
    return sorted({s.role for q in run.questions for s in q.samples if s.role})


def check_roles(run: RunTrace, roles: str, option: str = "--param roles") -> None:
    """Refuse ``roles`` (comma-separated) naming a role none of ``run``'s samples has, which would
    replay every question on no candidate (a run without samples is not checked).

    Raises:
        ValueError: naming the unknown roles, the run and the roles it has.
    """
    known = run_roles(run)
    wanted = [r.strip() for r in roles.split(",") if r.strip()]
    if not known:
        return
    unknown = [r for r in wanted if r not in known] if wanted else [roles]
    if unknown:
        raise InputError(f"{option}={roles}: run {run.run_id!r} has no samples of role(s) "
                         f"{', '.join(map(repr, unknown))}; its roles: {', '.join(known)}")


def replay(run: RunTrace, rule: str, params: dict[str, Any] | None = None, *, dev: RunTrace | None = None,
           rules: dict[str, Rule] | None = None) -> ReplayResult:
    """Apply rule ``rule`` to every question of ``run`` and score it against the stored gold with
    :func:`agora.tasks.scoring.score_answer`. ``params``: as :func:`parse_params` returns them (the
    rule's defaults and the run's settings when ``None``); ``dev``: the run whose per-model
    accuracy weighs ``weighted_vote``. No model is called.

    Raises:
        ValueError: an unknown rule (the message lists them), a rule for other protocols than
            ``run``'s (:func:`check_rule`), a rule needing ``dev`` without one, ``dev`` being ``run``
            itself, a role none of the
            run's samples has (:func:`check_roles`), or a bad parameter value.
    """
    spec = check_rule(run, rule, rules)
    if params is None:
        params = parse_params(spec, [], run)
    if spec.needs_dev and dev is None:
        raise InputError(f"rule {rule} weighs models by their accuracy on a dev run: give --dev-run-id")
    if dev is not None and dev.run_id == run.run_id:
        raise InputError(f"--dev-run-id {dev.run_id}: the replayed run itself; weights measured on the questions "
                         "they then score would count each answer's own correctness; give a run on other "
                         "(dev) questions")
    if "roles" in params:
        check_roles(run, params["roles"] or default_roles(run))
        if dev is not None:
            check_roles(dev, params["roles"] or default_roles(dev), "--param roles (on the dev run)")
    ctx = ReplayContext(run, model_accuracy(dev, params.get("roles") or default_roles(dev)) if dev else {})
    rows = []
    for q in run.questions:
        try:
            c = spec.decide(q, params, ctx)
        except Unavailable as exc:
            rows.append(Replayed(q.question_id, None, None, f"unavailable: {exc}", 0, str(exc), recorded_members(q)))
            continue
        correct = None if c.samples == 0 else score_answer(c.answer, q.gold, q.kind)
        rows.append(Replayed(q.question_id, c.answer, correct, c.why, c.samples, members=recorded_members(q)))
    return ReplayResult(run.run_id, rule, dict(params), rows, dev.run_id if dev else None)


def reproduced(run: RunTrace, result: ReplayResult, method: str) -> tuple[int, int]:
    """(questions whose replayed answer and correctness equal the recorded ``method``'s, questions
    compared): a replay under the run's own rule and settings gives ``(n, n)``."""
    same = n = 0
    by_q = {q.question_id: q for q in run.questions}
    for r in result.rows:
        rec = by_q[r.question_id].results.get(method)
        if rec is None or r.unavailable is not None:
            continue
        n += 1
        recorded_correct = None if rec["correct"] is None else bool(rec["correct"])
        same += int(rec["answer"] == r.answer and recorded_correct == r.correct)
    return same, n


def stale_scores(run: RunTrace) -> tuple[int, str | None]:
    """(recorded results whose stored correctness is not what their answer scores against the
    question's stored gold now, the first such question id): a gold edited after the run. The
    replay scores its answers against the gold as it is, the paired table compares them with the
    recorded correctness: such a question counts as a win or a loss of the rule that is the edit's."""
    n, first = 0, None
    for q in run.questions:
        for rec in q.results.values():
            if rec["correct"] is None or rec["samples"] == 0:
                continue
            if bool(score_answer(rec["answer"], q.gold, q.kind)) != bool(rec["correct"]):
                n += 1
                first = first or q.question_id
    return n, first


def paired_table(run: RunTrace, result: ReplayResult, *, seed: int = 0) -> list[dict[str, Any]]:
    """The replayed rule against every recorded method of the run, on the questions both were
    scored on (gold, neither failed, replay available): accuracies, the difference (replay − method)
    with its 95 % paired-bootstrap CI, wins/losses, the exact McNemar p-value, and ``too_few``
    (fewer than :data:`agora.traces.report.MIN_QUESTIONS` pairs or a degenerate interval: report
    "too few questions", no verdict)."""
    mine = {r.question_id: r for r in result.rows}
    methods = sorted({m for q in run.questions for m in q.results})
    out = []
    for m in methods:
        x, y = [], []
        for q in run.questions:
            r, rec = mine.get(q.question_id), q.results.get(m)
            if (r is None or rec is None or r.correct is None or rec["correct"] is None or rec["samples"] == 0):
                continue
            x.append(int(r.correct))
            y.append(int(rec["correct"]))
        if not x:
            continue
        diff, lo, hi = paired_bootstrap_ci(x, y, seed=seed)
        wins = sum(u > v for u, v in zip(x, y))
        losses = sum(u < v for u, v in zip(x, y))
        out.append({"method": m, "questions": len(x), "replay_accuracy": bootstrap_ci(x, seed=seed)[0],
                    "method_accuracy": sum(y) / len(y), "diff": diff, "ci_low": lo, "ci_high": hi, "wins": wins,
                    "losses": losses, "p_mcnemar": mcnemar_exact(wins, losses), "too_few": too_few(len(x), lo, hi)})
    return out
