"""Replay: re-decide a recorded run under another selection rule or other parameters, with zero
model calls (``agora replay``, issue 30).

Every candidate a run drew is a ``model_calls`` row with its extracted answer (schema
:mod:`agora.traces.schema`), so any rule that picks an answer from recorded candidates can be
re-applied to a finished run: ALIGN under another τ or proposal rule, best-of-n, plurality, a vote
weighted by each model's accuracy on a dev run, COMED under other thresholds. A rule is one function
registered by name (:func:`selection_rule`); :func:`replay` applies it to every recorded question and
scores the answers with the task's scorer (:func:`agora.tasks.scoring.score_answer`, the one the
runner records with, against the question's stored gold), never by re-running a graph; :func:`paired_table` compares the replayed
answers with every method the run recorded, on the same questions (paired bootstrap CI and exact
McNemar from :mod:`agora.agents.stats`).

A question whose recorded trace lacks what a rule needs (COMED thresholds that would verify a
question the run accepted: its probe was never asked) is *unavailable*: left out of the pairs and
counted, never guessed. Under the run's own settings each built-in rule reproduces the method it
names (``Rule.reproduces``) answer for answer.

Usage::

    from agora.traces.replay import load_run, replay, paired_table
    run = load_run(store, "b1:arith:align")
    result = replay(run, "align", {"tau": 0.9})
    rows = paired_table(run, result)
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from agora.agents.delegation import agreement_utility, plurality, principal_select, propose
from agora.agents.escalation import EscalationThresholds, decide, escalates
from agora.agents.escalation_calibration import DevOutcome
from agora.tasks.scoring import score_answer
from agora.agents.stats import bootstrap_ci, mcnemar_exact, paired_bootstrap_ci
from agora.traces.bench import dev_outcome, too_few
from agora.traces.report import SHARED_KEY, shared_takes  # noqa: F401 (SHARED_KEY re-exported)
from agora.traces.store import TraceStore, answer_fields, option_count

# ---------------------------------------------------------------------------- a recorded run, read once


@dataclass(frozen=True, slots=True)
class SampleRow:
    """One successful sample of a recorded question (a ``model_calls`` row)."""

    call_id: str
    node: str | None
    role: str | None
    agent: int | None
    model: str | None
    sample_index: int | None
    """Position among its request's samples (0 first)."""
    answer: str | None
    how: str | None
    """``marker``, ``boxed``, ``####``, ``fallback`` or ``none`` (no answer)."""
    completion_tokens: int
    latency_s: float
    partner: str | None
    completion: str | None
    shared_from: str | None = None
    """The bench's candidates run whose row this is, for a sample the run took from the shared pool
    (:func:`agora.traces.report.shared_takes`: ``node`` and ``role`` are then the taker's); ``None``: the
    run's own row."""
    recipe: str | None = None
    """The member's recipe when it rewrote this call (``model_calls.recipe``: ``pot``...); ``None``
    without one, and in databases from before recipes."""


@dataclass(slots=True)
class QuestionTrace:
    """One recorded question: its row, its recorded method results and its samples in call order."""

    question_id: str
    idx: int | None
    kind: str
    n_choices: int | None
    gold: str | None
    question: str | None
    detail: dict[str, Any]
    results: dict[str, dict[str, Any]]
    """method → ``results`` row."""
    samples: list[SampleRow]

    def of(self, *roles: str) -> list[SampleRow]:
        """Samples whose role is one of ``roles`` (all without), in call order."""
        return [s for s in self.samples if not roles or s.role in roles]


@dataclass(slots=True)
class RunTrace:
    """A recorded run read for replay (:func:`load_run`)."""

    run_id: str
    protocol: str
    config: dict[str, Any]
    """The protocol's settings as the run stored them (``runs.config``)."""
    questions: list[QuestionTrace]


def load_run(store: TraceStore, run_id: str, question_ids: Sequence[str] | None = None) -> RunTrace:
    """Read run ``run_id`` (its recorded questions, ``question_ids`` only when given) with every
    successful sample. Databases without the answer-level columns (older than issue 30, not
    backfilled) are read as well: answers and sample indices are then worked out here the way
    :func:`agora.traces.store.backfill` would store them.

    Raises:
        ValueError: no such run in ``store``.
    """
    run = store.get_run(run_id) if "runs" in store.db.table_names() else None
    if run is None:
        raise ValueError(f"{store.path}: no run {run_id!r} (`agora report runs --db {store.path}` lists them)")
    keep = None if question_ids is None else set(question_ids)
    questions: dict[str, QuestionTrace] = {}
    for q in store.questions(run_id):
        if keep is not None and q["question_id"] not in keep:
            continue
        kind = q.get("kind") or "math"
        questions[q["question_id"]] = QuestionTrace(
            question_id=q["question_id"], idx=q.get("idx"), kind=kind,
            n_choices=q.get("n_choices") or option_count(q.get("question"), kind), gold=q.get("gold"),
            question=q.get("question"), detail=json.loads(q.get("detail") or "{}") or {}, results={}, samples=[])
    for r in store.results(run_id):
        if r["question_id"] in questions:
            questions[r["question_id"]].results[r["method"]] = r
    have = set(store.db["model_calls"].columns_dict)
    cols = ["call_id", "question_id", "node", "role", "agent", "model", "completion", "completion_tokens",
            "latency_s", "created_at"] + [c for c in ("partner", "answer", "how", "sample_index", "recipe") if c in have]
    counter: dict[tuple, int] = {}
    for c in store.db.query(f"select {', '.join(cols)} from model_calls where run_id = ? and error is null "
                            "order by rowid", [run_id]):
        q = questions.get(c["question_id"])
        if q is None:
            continue
        key = (c["question_id"], c["node"], c["agent"], c["model"], c["created_at"])
        counter[key] = counter.get(key, -1) + 1
        answer, how, index = c.get("answer"), c.get("how"), c.get("sample_index")
        if how is None:  # not extracted: an old database
            answer, how = answer_fields(c["completion"], q.kind, q.n_choices, q.question)
        if index is None:
            index = counter[key]
        q.samples.append(SampleRow(c["call_id"], c["node"], c["role"], c["agent"], c["model"], index, answer, how,
                                   c["completion_tokens"] or 0, c["latency_s"] or 0.0, c.get("partner"),
                                   c["completion"], recipe=c.get("recipe")))
    # samples taken from the bench's shared candidates (issue 32): their rows are the candidates run's
    takes = shared_takes(store, run_id, {q.question_id: q.detail for q in questions.values()})
    for qid, got in takes.items():
        q = questions[qid]
        q.samples[:0] = [SampleRow(s["call_id"], s["node"], s["role"], s["agent"], s["model"], s["sample_index"],
                                   s["answer"], s["how"], s["completion_tokens"], s["latency_s"], None,
                                   s["completion"], s["shared_from"]) for s in got]
    config = json.loads(run["config"] or "{}") or {}
    return RunTrace(run_id, run["protocol"], config if isinstance(config, dict) else {},
                    sorted(questions.values(), key=lambda q: (q.idx is None, q.idx or 0, q.question_id)))


# ---------------------------------------------------------------------------- rules


@dataclass(frozen=True, slots=True)
class Choice:
    """What a rule picked on one question."""

    answer: str | None
    why: str
    """One line: how the rule reached the answer (votes, utilities, decision)."""
    samples: int
    """Recorded samples the answer drew on (0: none, the method failed on this question)."""


class Unavailable(Exception):
    """The question's recorded trace lacks what the rule needs (the message says what)."""


@dataclass(frozen=True, slots=True)
class ReplayContext:
    """What a rule may read besides the question: the run and, for weighted votes, model weights."""

    run: RunTrace
    model_accuracy: dict[str, tuple[int, int]] = field(default_factory=dict)
    """model → (right, scored) samples on the dev run (``--dev-run-id``); empty without one."""


RuleFn = Callable[[QuestionTrace, dict[str, Any], ReplayContext], Choice]


@dataclass(frozen=True, slots=True)
class Rule:
    """A registered selection rule (:func:`selection_rule`)."""

    name: str
    decide: RuleFn
    params: dict[str, Any]
    """Parameter → default (its type is the type ``--param`` values are read as)."""
    help: str
    from_config: Callable[[RunTrace], dict[str, Any]] | None = None
    """The run's own settings for these parameters (override the defaults)."""
    reproduces: dict[str, str] = field(default_factory=dict)
    """protocol → the recorded method this rule computes under the run's own settings."""
    needs_dev: bool = False
    protocols: tuple[str, ...] = ()
    """The protocols whose runs the rule applies to (their traces hold what it reads); empty: any
    protocol (a rule over the samples of ``roles``)."""

    def applies_to(self, protocol: str) -> bool:
        return not self.protocols or protocol in self.protocols


#: Every registered rule, by name.
RULES: dict[str, Rule] = {}


def selection_rule(name: str, *, params: dict[str, Any] | None = None, help: str = "",
                   from_config: Callable[[RunTrace], dict[str, Any]] | None = None,
                   reproduces: dict[str, str] | None = None, needs_dev: bool = False,
                   protocols: Sequence[str] = ()) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn(question, params, context) -> Choice`` as rule ``name`` (a plug-in: a new rule
    is one decorated function). ``params``: name → default; ``from_config``: the run's own values;
    ``reproduces``: protocol → the recorded method it equals under those; ``needs_dev``: the rule
    reads per-model accuracy from a dev run; ``protocols``: the protocols whose runs it applies to
    (default: any; :func:`check_rule` refuses the others). Raise :class:`Unavailable` for a question
    whose trace lacks what the rule needs.

    Raises:
        ValueError: ``name`` is taken.
    """
    def register(fn: RuleFn) -> RuleFn:
        if name in RULES:
            raise ValueError(f"selection rule {name!r} is already registered")
        RULES[name] = Rule(name, fn, dict(params or {}), help or (fn.__doc__ or "").strip().split("\n")[0],
                           from_config, dict(reproduces or {}), needs_dev, tuple(protocols))
        return fn
    return register


def parse_params(rule: Rule, items: Sequence[str], run: RunTrace | None = None) -> dict[str, Any]:
    """The rule's parameters: its defaults, the run's own settings, then ``items`` (``k=v``), each
    read as its default's type (``true``/``false`` for booleans).

    Raises:
        ValueError: an item without ``=``, an unknown parameter (the message lists them), a
            parameter given twice, an empty value (``roles=``: leave the parameter out for its
            default) or a value that is not of the parameter's type.
    """
    out = dict(rule.params)
    if run is not None and rule.from_config is not None:
        out.update({k: v for k, v in rule.from_config(run).items() if k in out and v is not None})
    given: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--param {item!r}: expected key=value")
        if key not in rule.params:
            raise ValueError(f"--param {key}: rule {rule.name} has no such parameter; it takes "
                             f"{', '.join(rule.params) or 'none'}")
        if key in given:
            raise ValueError(f"--param {key}: given twice ({key}={given[key]} and {key}={value}); give it once")
        given[key] = value
        if not value.strip(" ,"):
            default = rule.params[key]
            raise ValueError(f"--param {key}={value}: an empty value; give one, or leave --param {key} out for "
                             + (f"its default {default!r}" if default != "" else "the protocol's default")
                             + (f" ({_default_roles(run)} on this {run.protocol} run)" if key == "roles" and run else ""))
        kind = type(rule.params[key])
        try:
            if kind is bool:
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                out[key] = value.lower() in ("true", "1")
            else:
                out[key] = kind(value)
        except ValueError:
            raise ValueError(f"--param {key}={value}: not a {kind.__name__}") from None
    return out


def _candidates(q: QuestionTrace, roles: str) -> list[dict[str, Any]]:
    """The question's samples of ``roles`` (comma-separated) as ALIGN candidates, ordered by agent
    (``None`` as 0) then sample index."""
    wanted = [r.strip() for r in roles.split(",") if r.strip()]
    rows = [s for s in q.samples if s.role in wanted]
    cands = [{"agent": s.agent or 0, "model": s.model, "index": s.sample_index or 0, "text": "", "answer": s.answer,
              "how": s.how} for s in rows]
    return sorted(cands, key=lambda c: (c["agent"], c["index"]))


def _default_roles(run: RunTrace) -> str:
    return {"comed": "anchor", "candidates": "candidate"}.get(run.protocol, "agent")


def _votes(answers: Sequence[str | None]) -> str:
    counts = Counter(a for a in answers if a is not None)
    none = sum(a is None for a in answers)
    return ", ".join(f"{a!r}×{n}" for a, n in counts.most_common()) + (f", no answer×{none}" if none else "")


def _align_config(run: RunTrace) -> dict[str, Any]:
    return {k: run.config.get(k) for k in ("tau", "proposal_rule")}


def _proposals(q: QuestionTrace, rule: str, ctx: ReplayContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cands = _candidates(q, "agent")
    agents = sorted({c["agent"] for c in cands} | set(range(int(ctx.run.config.get("n_agents") or 0))))
    models = {c["agent"]: c["model"] for c in cands}
    return cands, [propose(a, models.get(a, ""), cands, rule) for a in agents]


def _check_choice(value: str, allowed: Sequence[str], name: str) -> None:
    if value not in allowed:
        raise ValueError(f"--param {name}={value}: choose from {', '.join(allowed)}")


@selection_rule("align", params={"tau": 0.5, "proposal_rule": "plurality"}, from_config=_align_config,
                reproduces={"align": "align"}, protocols=("align",),
                help="ALIGN's principal: best proposal with utility U >= tau, else argmax U (agents' samples).")
def align_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """ALIGN's committed rule (:func:`agora.agents.delegation.principal_select`) on the recorded
    agents' candidates, with each agent's proposal re-made under ``proposal_rule``."""
    _check_choice(p["proposal_rule"], ("plurality", "first"), "proposal_rule")
    if not 0.0 <= p["tau"] <= 1.0:
        raise ValueError(f"--param tau={p['tau']}: must be in [0, 1]")
    cands, proposals = _proposals(q, p["proposal_rule"], ctx)
    utilities = agreement_utility([x["answer"] for x in proposals], proposals)
    sel = principal_select(proposals, utilities, p["tau"])
    shown = "; ".join(f"agent {x['agent']} {x['answer']!r} (share {x['signal']:.2f}, U {u:.2f})"
                      for x, u in zip(proposals, utilities))
    verdict = (f"U {sel['utility']:.2f} >= τ {p['tau']:g}" if sel["accepted"]
               else f"no U reached τ {p['tau']:g}: argmax U {sel['utility']:.2f}")
    return Choice(sel["answer"], f"agent {sel['agent']}'s proposal, {verdict}; proposals: {shown}", len(cands))


@selection_rule("best_of_n", params={"proposal_rule": "plurality", "utility": "agreement"},
                from_config=lambda run: {"proposal_rule": run.config.get("proposal_rule"),
                                         "utility": run.config.get("utility")},
                reproduces={"align": "best_of_n"}, protocols=("align",),
                help="The candidate with the highest principal utility U over all agents' samples.")
def best_of_n_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """Best-of-n·k (:func:`agora.agents.delegation.best_of_n`) under ``utility`` (``agreement``)."""
    _check_choice(p["proposal_rule"], ("plurality", "first"), "proposal_rule")
    _check_choice(p["utility"], ("agreement",), "utility")
    cands, proposals = _proposals(q, p["proposal_rule"], ctx)
    if not cands:
        return Choice(None, "no candidate", 0)
    utilities = agreement_utility([c["answer"] for c in cands], proposals)
    best = max(range(len(cands)), key=lambda i: (utilities[i], -i))
    return Choice(cands[best]["answer"], f"agent {cands[best]['agent']} sample {cands[best]['index']}: "
                  f"highest U {utilities[best]:.2f}; candidates {_votes([c['answer'] for c in cands])}", len(cands))


@selection_rule("plurality", params={"roles": ""}, reproduces={"align": "self_consistency", "comed": "anchor",
                                                                  "candidates": "candidates"},
                help="Majority vote over the first-stage samples (ALIGN agents', COMED anchor's; --param roles=...).")
def plurality_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """Plurality (:func:`agora.agents.delegation.plurality`) over the samples of ``roles``
    (comma-separated; default: ``agent`` for ALIGN runs, ``anchor`` for COMED runs, ``candidate`` for a
    bench's candidates run), ties to the
    answer seen first (by agent, then sample)."""
    cands = _candidates(q, p["roles"] or _default_roles(ctx.run))
    answer, share = plurality([c["answer"] for c in cands])
    return Choice(answer, f"{share:.2f} of {len(cands)} votes; {_votes([c['answer'] for c in cands])}", len(cands))


@selection_rule("first_sample", params={"roles": ""}, reproduces={"align": "single_agent", "comed": "router_only"},
                help="One sample: the first sample of the first agent (ALIGN agent 0, COMED's anchor).")
def first_sample_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """The first sample (lowest agent, sample 0) of ``roles``: the single-agent baseline."""
    cands = _candidates(q, p["roles"] or _default_roles(ctx.run))
    first = [c for c in cands if c["agent"] == 0 and c["index"] == 0] if cands else []
    if not first:
        return Choice(None, "agent 0 has no first sample", 0)
    return Choice(first[0]["answer"], f"agent 0's first sample ({first[0]['model']}, {first[0]['how']})", 1)


def model_accuracy(run: RunTrace, roles: str | None = None) -> dict[str, tuple[int, int]]:
    """Per model: (right, scored) samples of ``roles`` (default: the run's first-stage role) on the
    run's questions with gold, scored with :func:`agora.tasks.scoring.score_answer`."""
    out: dict[str, list[int]] = {}
    for q in run.questions:
        if q.gold is None:
            continue
        for c in _candidates(q, roles or _default_roles(run)):
            tally = out.setdefault(c["model"], [0, 0])
            tally[0] += int(bool(score_answer(c["answer"], q.gold, q.kind)))
            tally[1] += 1
    return {m: (r, n) for m, (r, n) in out.items()}


@selection_rule("weighted_vote", params={"weight": "log_odds", "prior": 1.0, "roles": ""}, needs_dev=True,
                help="A vote weighted by each model's accuracy on a dev run (--dev-run-id).")
def weighted_vote_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """Each sample votes for its answer with its model's weight, from the model's dev accuracy
    ``a = (right + prior) / (scored + 2·prior)`` (Laplace-smoothed): ``log_odds`` weighs
    ``log(a / (1 − a))`` (the optimal weights for independent binary voters, Nitzan & Paroush
    1982; negative for a model below 1/2, whose votes then count against their answer),
    ``accuracy`` weighs ``a``. Ties go to the answer seen first; a model absent from the dev run
    weighs as an unseen one (a = 1/2)."""
    _check_choice(p["weight"], ("log_odds", "accuracy"), "weight")
    if p["prior"] < 0:
        raise ValueError(f"--param prior={p['prior']}: must be >= 0")
    cands = _candidates(q, p["roles"] or _default_roles(ctx.run))

    def weight(model: str) -> float:
        right, n = ctx.model_accuracy.get(model, (0, 0))
        a = (right + p["prior"]) / (n + 2 * p["prior"]) if n + 2 * p["prior"] > 0 else 0.5
        a = min(max(a, 1e-6), 1 - 1e-6)
        return math.log(a / (1 - a)) if p["weight"] == "log_odds" else a

    tally: dict[str, float] = {}
    for c in cands:
        if c["answer"] is not None:
            tally[c["answer"]] = tally.get(c["answer"], 0.0) + weight(c["model"])
    if not tally:
        return Choice(None, "no candidate has an answer", len(cands))
    best = max(tally.values())
    answer = next(a for a in tally if math.isclose(tally[a], best))
    shown = ", ".join(f"{a!r} {w:.2f}" for a, w in sorted(tally.items(), key=lambda kv: -kv[1]))
    return Choice(answer, f"weighted votes ({p['weight']}): {shown}", len(cands))


def _comed_config(run: RunTrace) -> dict[str, Any]:
    return dict(run.config.get("thresholds") or {})


@selection_rule("comed", params={"tau_hi": EscalationThresholds().tau_hi, "tau_lo": EscalationThresholds().tau_lo,
                                 "m_min": EscalationThresholds().m_min},
                from_config=_comed_config, reproduces={"comed": "comed"}, protocols=("comed",),
                help="COMED's decide rule under other thresholds (needs the branches it takes recorded).")
def comed_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """COMED (:func:`agora.agents.escalation.decide`) on the recorded anchor SC and router margin:
    accept keeps the anchor's answer; verify reads the recorded probe (agrees: accept, else the
    recorded escalation); escalate takes the recorded escalation vote.

    Raises:
        Unavailable: the decision needs a probe or an escalation the run did not record (it took
            another branch under its own thresholds; an explore run records every branch).
    """
    t = EscalationThresholds(tau_hi=p["tau_hi"], tau_lo=p["tau_lo"], m_min=p["m_min"])
    d = q.detail
    anchor = d.get("anchor") or {}
    if "sc" not in anchor or anchor.get("sc") is None:
        raise Unavailable("no anchor recorded")
    margin = (d.get("route") or {}).get("margin")
    decision = decide(anchor["sc"], margin, t)
    base = f"SC {anchor['sc']:.2f}" + (f", margin {margin:.2f}" if margin is not None else "") + f" → {decision}"
    samples = len(q.of("anchor"))
    if decision == "accept":
        return Choice(anchor.get("answer"), f"{base}: the anchor's {anchor.get('answer')!r}", samples)
    probe = d.get("probe")
    if decision == "verify":
        if probe is None:
            raise Unavailable("verify needs the probe, which the run did not ask")
        samples += len(q.of("probe"))
        if not escalates(decision, probe.get("agrees")):
            return Choice(anchor.get("answer"), f"{base}: probe {probe.get('answer')!r} agrees, the anchor's "
                          f"{anchor.get('answer')!r}", samples)
    esc = d.get("escalation")
    if esc is None:
        raise Unavailable(f"{decision} needs the escalation, which the run did not run")
    samples += len(q.of("peer"))
    peers = ", ".join(repr(x.get("answer")) for x in esc.get("peers") or [])
    return Choice(esc.get("answer"), f"{base}" + (f" (probe {probe.get('answer')!r} disagrees)" if probe and
                                                 decision == "verify" else "")
                  + f": escalation vote of anchor {anchor.get('answer')!r} (weight SC) and peers {peers}", samples)


def dev_outcomes(run: RunTrace) -> list[DevOutcome]:
    """COMED calibration inputs from a recorded ``explore`` run, read through replay: one
    :class:`DevOutcome` per question with gold and every branch recorded
    (:func:`agora.traces.bench.dev_outcome`)."""
    return [o for o in (dev_outcome(q.detail) for q in run.questions) if o is not None]


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
        raise ValueError(f"--rule {rule}: unknown; choose from {', '.join(sorted(registry))}")
    spec = registry[rule]
    if not spec.applies_to(run.protocol):
        fits = sorted(r.name for r in registry.values() if r.applies_to(run.protocol))
        raise ValueError(f"--rule {rule}: applies to {', '.join(spec.protocols)} runs only; run {run.run_id!r} has "
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
        raise ValueError(f"{option}={roles}: run {run.run_id!r} has no samples of role(s) "
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
        raise ValueError(f"rule {rule} weighs models by their accuracy on a dev run: give --dev-run-id")
    if dev is not None and dev.run_id == run.run_id:
        raise ValueError(f"--dev-run-id {dev.run_id}: the replayed run itself; weights measured on the questions "
                         "they then score would count each answer's own correctness; give a run on other "
                         "(dev) questions")
    if "roles" in params:
        check_roles(run, params["roles"] or _default_roles(run))
        if dev is not None:
            check_roles(dev, params["roles"] or _default_roles(dev), "--param roles (on the dev run)")
    ctx = ReplayContext(run, model_accuracy(dev, params.get("roles") or _default_roles(dev)) if dev else {})
    rows = []
    for q in run.questions:
        try:
            c = spec.decide(q, params, ctx)
        except Unavailable as exc:
            rows.append(Replayed(q.question_id, None, None, f"unavailable: {exc}", 0, str(exc)))
            continue
        correct = None if c.samples == 0 else score_answer(c.answer, q.gold, q.kind)
        rows.append(Replayed(q.question_id, c.answer, correct, c.why, c.samples))
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


def paired_table(run: RunTrace, result: ReplayResult, *, seed: int = 0) -> list[dict[str, Any]]:
    """The replayed rule against every recorded method of the run, on the questions both were
    scored on (gold, neither failed, replay available): accuracies, the difference (replay − method)
    with its 95 % paired-bootstrap CI, wins/losses, the exact McNemar p-value, and ``too_few``
    (fewer than :data:`agora.traces.bench.MIN_QUESTIONS` pairs or a degenerate interval: report
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


# ---------------------------------------------------------------------------- one question, explained


_ERROR = re.compile(r"^([A-Za-z_][\w.]*): (.*)$", re.DOTALL)


def failed_attempts(store: TraceStore, run_id: str, question_id: str) -> list[dict[str, Any]]:
    """The failed model calls (``model_calls`` rows with an error) of one question, in call order:
    node, role, agent, model, attempt (0 first), ``error_class`` and ``message`` (the recorded
    ``"Class: message"`` split; ``None`` class when the error is not in that form), created_at."""
    if "model_calls" not in store.db.table_names():
        return []
    out = []
    for c in store.db.query("select node, role, agent, model, attempt, error, created_at from model_calls "
                            "where run_id = ? and question_id = ? and error is not null order by rowid",
                            [run_id, question_id]):
        m = _ERROR.match(c["error"] or "")
        out.append({"node": c["node"], "role": c["role"], "agent": c["agent"], "model": c["model"],
                    "attempt": c["attempt"], "error_class": m.group(1) if m else None,
                    "message": m.group(2) if m else c["error"], "created_at": c["created_at"]})
    return out


def question_report(store: TraceStore, run_id: str, question_id: str) -> dict[str, Any]:
    """One recorded question in full (``agora report question``): the question (kind, options, gold),
    every sample (node, role, agent, model, sample index, extracted answer, how it was found, whether
    it is right, how many samples of the question give the same answer), every recorded method
    (answer, correct, samples, how) with why it chose that answer: the ``why`` of the registered rule
    that reproduces it under the run's settings (and whether the replay agrees), else "recorded";
    and its failed attempts (:func:`failed_attempts`). A sample the run took from a bench's shared
    candidates carries ``shared_from`` (the candidates run holding its row; ``None`` for its own).

    A failed question (model calls but no recorded answer: ``failed`` True) has no question row:
    its report holds the failed attempts, ``successful_calls`` (its calls without an error), and
    ``None`` for the question's text, kind and gold.

    Raises:
        ValueError: no such run, or neither a recorded question nor model calls of that id in it.
    """
    run = load_run(store, run_id, [question_id])
    failures = failed_attempts(store, run_id, question_id)
    if not run.questions:
        ok = next(iter(store.db.query("select count(*) as n from model_calls where run_id = ? and question_id = ? "
                                      "and error is null", [run_id, question_id])))["n"]
        if not failures and not ok:
            raise ValueError(f"{store.path}: run {run_id!r} has no recorded question {question_id!r}")
        return {"run_id": run_id, "protocol": run.protocol, "question_id": question_id, "failed": True,
                "kind": None, "n_choices": None, "gold": None, "question": None, "samples": [], "methods": [],
                "detail": {}, "failed_attempts": failures, "successful_calls": ok}
    q = run.questions[0]
    votes = Counter(s.answer for s in q.samples if s.answer is not None)
    samples = [{"node": s.node, "role": s.role, "agent": s.agent, "model": s.model, "sample_index": s.sample_index,
                "answer": s.answer, "how": s.how, "votes": votes.get(s.answer, 0) if s.answer is not None else 0,
                "correct": score_answer(s.answer, q.gold, q.kind),
                "partner": s.partner, "completion_tokens": s.completion_tokens, "call_id": s.call_id,
                "completion": s.completion, "shared_from": s.shared_from, "recipe": s.recipe} for s in q.samples]
    explain = {}
    for spec in RULES.values():
        method = spec.reproduces.get(run.protocol)
        if method and method in q.results and not spec.needs_dev:
            result = replay(run, spec.name, rules={spec.name: spec})
            explain[method] = (spec.name, result.rows[0])
    methods = []
    for m, r in q.results.items():
        rule, row = explain.get(m, (None, None))
        why = "recorded (no replay rule reproduces this method)"
        if row is not None:
            agrees = row.unavailable is None and row.answer == r["answer"]
            why = f"rule {rule}: {row.why}" + ("" if agrees else f" [replay gives {row.answer!r}, recorded "
                                                                   f"{r['answer']!r}]")
        methods.append({"method": m, "answer": r["answer"], "correct": None if r["correct"] is None else bool(r["correct"]),
                        "how": r.get("how"), "samples": r["samples"], "calls": r.get("calls"), "why": why})
    return {"run_id": run_id, "protocol": run.protocol, "question_id": q.question_id, "failed": False,
            "kind": q.kind, "n_choices": q.n_choices, "gold": q.gold, "question": q.question, "samples": samples,
            "methods": methods, "detail": q.detail, "failed_attempts": failures,
            "successful_calls": len(q.samples)}
