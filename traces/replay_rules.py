"""Replay's selection rules: the registry (:func:`selection_rule`, :data:`RULES`), how a rule's
parameters are read (:func:`parse_params`), and the built-in rules (ALIGN, best-of-n, plurality,
first sample, a vote weighted by dev accuracy, COMED, SLM-MUX and its best-member baseline), each a function
``(question, params, context) -> Choice`` over a recorded question's samples
(:class:`agora.traces.run_trace.QuestionTrace`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from agora.tasks.errors import InputError
from agora.agents.delegation import UTILITIES, plurality, principal_choice, principal_select
from agora.agents.delegation import principal_utility, propose
from agora.agents.reliability import dev_accuracy_pairs
from agora.agents.escalation import EscalationThresholds, decide, escalates
from agora.agents.escalation_calibration import DevOutcome
from agora.agents.slm_mux import MemberConfidence, MemberVote, member_confidence, mux_select, top_member
from agora.tasks.scoring import score_answer
from agora.traces.bench_data import dev_outcome
from agora.traces.reliability import reliabilities

from agora.traces.run_trace import QuestionTrace, RunTrace


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
    optional: dict[str, Any] = field(default_factory=dict)
    """Parameter → its value on a run that recorded none (the type ``--param`` values are read as;
    ``agora replay``'s listing shows it as the default): parameters ``--param`` also takes, left out
    of :func:`parse_params`' result unless given (the rule then reads the run's own setting)."""

    def applies_to(self, protocol: str) -> bool:
        return not self.protocols or protocol in self.protocols


#: Every registered rule, by name.
RULES: dict[str, Rule] = {}


def selection_rule(name: str, *, params: dict[str, Any] | None = None, help: str = "",
                   from_config: Callable[[RunTrace], dict[str, Any]] | None = None,
                   reproduces: dict[str, str] | None = None, needs_dev: bool = False,
                   protocols: Sequence[str] = (), optional: dict[str, Any] | None = None) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn(question, params, context) -> Choice`` as rule ``name`` (a plug-in: a new rule
    is one decorated function). ``params``: name → default; ``from_config``: the run's own values;
    ``reproduces``: protocol → the recorded method it equals under those; ``needs_dev``: the rule
    reads per-model accuracy from a dev run; ``protocols``: the protocols whose runs it applies to
    (default: any; :func:`check_rule` refuses the others); ``optional``: parameters taken only when
    given (:attr:`Rule.optional`). Raise :class:`Unavailable` for a question
    whose trace lacks what the rule needs.

    Raises:
        ValueError: ``name`` is taken.
    """
    def register(fn: RuleFn) -> RuleFn:
        if name in RULES:
            raise InputError(f"selection rule {name!r} is already registered")
        RULES[name] = Rule(name, fn, dict(params or {}), help or (fn.__doc__ or "").strip().split("\n")[0],
                           from_config, dict(reproduces or {}), needs_dev, tuple(protocols), dict(optional or {}))
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
    known = {**rule.params, **rule.optional}
    if run is not None and rule.from_config is not None:
        out.update({k: v for k, v in rule.from_config(run).items() if k in out and v is not None})
    given: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise InputError(f"--param {item!r}: expected key=value")
        if key not in known:
            raise InputError(f"--param {key}: rule {rule.name} has no such parameter; it takes "
                             f"{', '.join(known) or 'none'}")
        if key in given:
            raise InputError(f"--param {key}: given twice ({key}={given[key]} and {key}={value}); give it once")
        given[key] = value
        if not value.strip(" ,"):
            default = rule.params.get(key, "")
            raise InputError(f"--param {key}={value}: an empty value; give one, or leave --param {key} out for "
                             + ("the run's own setting" if key in rule.optional
                                else f"its default {default!r}" if default != "" else "the protocol's default")
                             + (f" ({default_roles(run)} on this {run.protocol} run)" if key == "roles" and run else ""))
        kind = type(known[key])
        try:
            if kind is bool:
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                out[key] = value.lower() in ("true", "1")
            else:
                out[key] = kind(value)
        except ValueError:
            raise InputError(f"--param {key}={value}: not a {kind.__name__}") from None
    return out


def _candidates(q: QuestionTrace, roles: str) -> list[dict[str, Any]]:
    """The question's samples of ``roles`` (comma-separated) as ALIGN candidates, ordered by agent
    (``None`` as 0) then sample index."""
    wanted = [r.strip() for r in roles.split(",") if r.strip()]
    rows = [s for s in q.samples if s.role in wanted]
    cands = [{"agent": s.agent or 0, "model": s.model, "index": s.sample_index or 0, "text": "", "answer": s.answer,
              "how": s.how, "recipe": getattr(s, "recipe", None)} for s in rows]
    return sorted(cands, key=lambda c: (c["agent"], c["index"]))


def member_label(model: str | None, recipe: str | None) -> str:
    """A member as ``agora report question`` names it: its model, then its recipe in brackets when a
    recipe rewrote its calls (``m [pot]``); the model alone without one.

    >>> member_label("m", "pot"), member_label("m", None)
    ('m [pot]', 'm')
    """
    return (model or "-") + (f" [{recipe}]" if recipe else "")


def default_roles(run: RunTrace) -> str:
    return {"comed": "anchor", "candidates": "candidate", "slm-mux": "member"}.get(run.protocol, "agent")


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
        raise InputError(f"--param {name}={value}: choose from {', '.join(allowed)}")


def model_principal(run: RunTrace, rule: str) -> str | None:
    """The pool member that answered for ALIGN in ``run`` (its recorded setting ``principal``,
    ``agora run align --principal`` / ``agora bench --principal``) when replaying it under ``rule``
    gives that member's answers (rule ``align`` on an ALIGN run); ``None`` otherwise (ALIGN's
    committed rule answered, or another rule is replayed)."""
    if rule != "align" or run.protocol != "align":
        return None
    return run.config.get("principal") or None


def model_principal_choice(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext, cands: Sequence[dict[str, Any]],
                           proposals: Sequence[dict[str, Any]], utilities: Sequence[float] | None, shown: str) -> Choice:
    """ALIGN's answer on a run with a model principal: the answer of the recorded ``principal`` call
    (its first sample; ``None`` when the call has no successful row), which is what the run
    answered; never asked again. The bookkeeping is :func:`agora.agents.delegation.principal_choice`'s
    (the one agent whose proposal carries the answer, its U against ``tau``: the answer stands either
    way, so ``tau`` changes the why, never the answer). ``samples``: the candidates and the
    principal's rows, as the run counted them.

    Raises:
        ValueError: ``proposal_rule`` other than the run's own: other proposals would need the
            principal asked about them, and replay calls no model.
    """
    principal = model_principal(ctx.run, "align")
    own = ctx.run.config.get("proposal_rule") or "plurality"
    if p["proposal_rule"] != own:
        raise InputError(f"--param proposal_rule={p['proposal_rule']}: run {ctx.run.run_id!r}'s ALIGN answers come "
                         f"from its model principal {principal}, which read the proposals made under "
                         f"proposal_rule={own}; other proposals would need it asked again, and replay calls no "
                         "model")
    rows = sorted(q.of("principal"), key=lambda s: s.sample_index or 0)
    if not rows:
        return Choice(None, f"the model principal {principal} has no recorded answer (its call failed); "
                      f"proposals: {shown}", len(cands))
    answer = rows[0].answer
    sel = principal_choice(proposals, answer, utilities or [0.0] * len(proposals), p["tau"], principal)
    who = (f"agent {sel['agent']}'s proposal" if sel["agent"] is not None
           else "no single agent's proposal")
    verdict = (f"U {sel['utility']:.2f} {'>=' if sel['accepted'] else '<'} τ {p['tau']:g}" if utilities is not None
               else "calibrated U not recomputed: the run's member reliabilities cannot be read")
    verdict += ", its answer stands either way"
    return Choice(answer, f"the model principal {principal} answered {answer!r} (recorded, not asked again; {who}, "
                  f"{verdict}); proposals: {shown}", len(cands) + len(rows))


def run_utility(p: dict[str, Any], run: RunTrace) -> str:
    """The principal utility an ALIGN replay uses: ``--param utility`` when given, else the run's own
    recorded ``utility`` (``agreement`` for runs that recorded none).

    Raises:
        ValueError: a utility not in :data:`agora.agents.delegation.UTILITIES`.
    """
    name = p.get("utility") or run.config.get("utility") or "agreement"
    _check_choice(name, UTILITIES, "utility")
    return name


class ReliabilitiesError(InputError):
    """The ``calibrated`` utility's member reliabilities of a run cannot be read (:func:`recorded_reliabilities`).
    ``reason``: why, one line without the advice (``dev run 'd1': trace database dev.db not found``)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def recorded_reliabilities(run: RunTrace, models: Sequence[str], asked: bool = False) -> dict[str, float]:
    """The ``calibrated`` utility's member reliabilities as ``run`` computed them: its recorded
    ``dev_accuracy``, the other members' accuracies from its recorded ``dev_run`` in ``dev_db``
    (:func:`agora.traces.reliability.reliabilities`, what the ALIGN graph reads), for every member in
    ``models``. ``asked``: ``--param utility=calibrated`` asked for them (the refusal says so).

    Raises:
        ReliabilitiesError: one line naming the run's ``utility = calibrated`` (or the ``--param``), why its reliabilities cannot
            be read (a bad recorded ``dev_accuracy``, the dev run's database or run gone, a member with
            none) and that ``--param utility=agreement`` replays it under the agreement utility.
    """
    config = run.config
    try:
        given = dev_accuracy_pairs(f"run {run.run_id!r}", "dev_accuracy", config.get("dev_accuracy") or ())
        found = reliabilities(given, config.get("dev_db"), config.get("dev_run"))
        missing = [m for m in dict.fromkeys(models) if m and m not in found]
        if missing:
            raise InputError(f"no dev accuracy for member(s) {', '.join(missing)} in its dev_accuracy"
                             + (f" or its dev run {config['dev_run']!r}" if config.get("dev_run") else ""))
    except InputError as exc:
        who = (f"--param utility=calibrated on run {run.run_id!r}:" if asked
               else f"run {run.run_id!r} was recorded with utility = calibrated, and")
        raise ReliabilitiesError(f"{who} replay cannot read its member reliabilities ({exc}); give "
                                 "--param utility=agreement to replay it under the agreement utility instead",
                                 str(exc)) from None
    return {**found, "": 0.0}  # "": an agent with no recorded sample (signal 0, so weight 0 either way)


def _utilities(p: dict[str, Any], ctx: ReplayContext, proposals: Sequence[dict[str, Any]]) -> list[float]:
    """U of each proposal under :func:`run_utility`, as the ALIGN graph computes it
    (:func:`agora.agents.delegation.principal_utility`; ``calibrated``: :func:`recorded_reliabilities`).

    Raises:
        ValueError: as :func:`run_utility` and :func:`recorded_reliabilities`.
    """
    name = run_utility(p, ctx.run)
    reliability = (recorded_reliabilities(ctx.run, [x["model"] for x in proposals], asked=bool(p.get("utility")))
                   if name == "calibrated" else None)
    return principal_utility(name, [x["answer"] for x in proposals], proposals, reliability)


@selection_rule("align", params={"tau": 0.5, "proposal_rule": "plurality"}, from_config=_align_config,
                reproduces={"align": "align"}, protocols=("align",), optional={"utility": "agreement"},
                help="ALIGN's principal: best proposal with utility U >= tau, else argmax U (agents' samples), U the "
                     "run's own utility (--param utility=agreement|calibrated to choose); on a run with a model "
                     "principal, that member's recorded answers.")
def align_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """ALIGN's committed rule (:func:`agora.agents.delegation.principal_select`) on the recorded
    agents' candidates, with each agent's proposal re-made under ``proposal_rule`` and U under the
    run's own ``utility`` (or ``--param utility``; ``calibrated`` weighs each proposal by its member's
    recorded dev accuracy, :func:`recorded_reliabilities`). A run with a model principal (its recorded
    ``principal``): that member's recorded answer (:func:`model_principal_choice`), as the run
    answered; when its calibrated U cannot be recomputed the why says so instead of showing a U.

    Raises:
        ValueError: a ``proposal_rule`` not ``plurality`` or ``first``, a ``tau`` outside [0, 1], a
            ``utility`` not ``agreement`` or ``calibrated``, a calibrated run whose reliabilities
            cannot be read (not on a model-principal run), or, on a model-principal run, a
            ``proposal_rule`` other than the run's own.
    """
    _check_choice(p["proposal_rule"], ("plurality", "first"), "proposal_rule")
    if not 0.0 <= p["tau"] <= 1.0:
        raise InputError(f"--param tau={p['tau']}: must be in [0, 1]")
    cands, proposals = _proposals(q, p["proposal_rule"], ctx)
    principal = model_principal(ctx.run, "align")
    run_utility(p, ctx.run)  # a bad --param utility is refused on every run
    try:
        utilities: list[float] | None = _utilities(p, ctx, proposals)
    except InputError:
        if principal is None:
            raise
        utilities = None  # the principal's answer needs no U: it stands, and the why says U was not recomputed
    shown = "; ".join(f"agent {x['agent']} {x['answer']!r} (share {x['signal']:.2f}"
                      + (f", U {utilities[i]:.2f})" if utilities is not None else ")")
                      for i, x in enumerate(proposals))
    if principal is not None:
        return model_principal_choice(q, p, ctx, cands, proposals, utilities, shown)
    assert utilities is not None  # (no principal: a failure to compute U was raised above)
    sel = principal_select(proposals, utilities, p["tau"])
    verdict = (f"U {sel['utility']:.2f} >= τ {p['tau']:g}" if sel["accepted"]
               else f"no U reached τ {p['tau']:g}: argmax U {sel['utility']:.2f}")
    return Choice(sel["answer"], f"agent {sel['agent']}'s proposal, {verdict}; proposals: {shown}", len(cands))


@selection_rule("best_of_n", params={"proposal_rule": "plurality", "utility": "agreement"},
                from_config=lambda run: {"proposal_rule": run.config.get("proposal_rule"),
                                         "utility": run.config.get("utility")},
                reproduces={"align": "best_of_n"}, protocols=("align",),
                help="The candidate with the highest principal utility U over all agents' samples.")
def best_of_n_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """Best-of-n·k (:func:`agora.agents.delegation.best_of_n`) under ``utility`` (the run's own;
    ``calibrated``: the run's member reliabilities, :func:`recorded_reliabilities`).

    Raises:
        ValueError: a ``proposal_rule`` or ``utility`` not known, or ``calibrated`` whose
            reliabilities cannot be read.
    """
    _check_choice(p["proposal_rule"], ("plurality", "first"), "proposal_rule")
    _check_choice(p["utility"], UTILITIES, "utility")
    cands, proposals = _proposals(q, p["proposal_rule"], ctx)
    if not cands:
        return Choice(None, "no candidate", 0)
    reliability = (recorded_reliabilities(ctx.run, [x["model"] for x in proposals],
                                          asked=ctx.run.config.get("utility") != "calibrated")
                   if p["utility"] == "calibrated" else None)
    utilities = principal_utility(p["utility"], [c["answer"] for c in cands], proposals, reliability)
    best = max(range(len(cands)), key=lambda i: (utilities[i], -i))
    return Choice(cands[best]["answer"], f"agent {cands[best]['agent']} sample {cands[best]['index']}: "
                  f"highest U {utilities[best]:.2f}; candidates {_votes([c['answer'] for c in cands])}", len(cands))


@selection_rule("plurality", params={"roles": ""}, reproduces={"align": "self_consistency", "comed": "anchor",
                                                                  "candidates": "candidates", "slm-mux": "mux_vote"},
                help="Majority vote over the first-stage samples (ALIGN agents', COMED anchor's, SLM-MUX members'; "
                     "--param roles=...).")
def plurality_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """Plurality (:func:`agora.agents.delegation.plurality`) over the samples of ``roles``
    (comma-separated; default: ``agent`` for ALIGN runs, ``anchor`` for COMED runs, ``candidate`` for a
    bench's candidates run, ``member`` for SLM-MUX runs), ties to the
    answer seen first (by agent, then sample)."""
    cands = _candidates(q, p["roles"] or default_roles(ctx.run))
    answer, share = plurality([c["answer"] for c in cands])
    return Choice(answer, f"{share:.2f} of {len(cands)} votes; {_votes([c['answer'] for c in cands])}", len(cands))


@selection_rule("first_sample", params={"roles": ""}, reproduces={"align": "single_agent", "comed": "router_only"},
                help="One sample: the first sample of the first agent (ALIGN agent 0, COMED's anchor).")
def first_sample_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """The first sample (lowest agent, sample 0) of ``roles``: the single-agent baseline."""
    cands = _candidates(q, p["roles"] or default_roles(ctx.run))
    first = [c for c in cands if c["agent"] == 0 and c["index"] == 0] if cands else []
    if not first:
        return Choice(None, "agent 0 has no first sample", 0)
    return Choice(first[0]["answer"], f"agent 0's first sample ({member_label(first[0]['model'], first[0]['recipe'])}, {first[0]['how']})", 1)


def model_accuracy(run: RunTrace, roles: str | None = None) -> dict[str, tuple[int, int]]:
    """Per model: (right, scored) samples of ``roles`` (default: the run's first-stage role) on the
    run's questions with gold, scored with :func:`agora.tasks.scoring.score_answer`."""
    out: dict[str, list[int]] = {}
    for q in run.questions:
        if q.gold is None:
            continue
        for c in _candidates(q, roles or default_roles(run)):
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
    if not 0 <= p["prior"] < math.inf:  # (nan and inf would make every weight nan)
        raise InputError(f"--param prior={p['prior']}: must be a finite number >= 0")
    cands = _candidates(q, p["roles"] or default_roles(ctx.run))

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


def _member_votes(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> dict[int, MemberVote]:
    """SLM-MUX's members' recorded samples (node ``mux_sample``, role ``member``: its own rows or,
    in a bench, the shared candidates each member took), member → its answers in sample order,
    each member's first ``k`` only when ``p["k"]`` > 0.

    Raises:
        ValueError: ``k`` < 0.
        Unavailable: a COMED question without SLM-MUX member samples (its run did not compute the
            SLM-MUX baseline).
    """
    if p["k"] < 0:
        raise InputError(f"--param k={p['k']}: must be >= 0 (0: every recorded sample)")
    rows = sorted((s for s in q.of("member") if s.node == "mux_sample"), key=lambda s: (s.agent or 0, s.sample_index or 0))
    votes: dict[int, MemberVote] = {}
    for s in rows:
        vote = votes.setdefault(s.agent or 0, MemberVote(member=s.agent or 0, model=s.model, answers=[]))
        if not p["k"] or len(vote["answers"]) < p["k"]:
            vote["answers"].append(s.answer)
    if not votes and ctx.run.protocol == "comed":
        raise Unavailable("no SLM-MUX member sample recorded (the run did not compute its SLM-MUX baseline here)")
    return votes


def _member_confidences(q: QuestionTrace, votes: dict[int, MemberVote]) -> list[MemberConfidence]:
    """Each member's plurality answer and confidence, with the dev accuracy the run recorded
    (``detail.confidences``; COMED's baseline has none)."""
    accuracy = {c["model"]: c["dev_accuracy"] for c in q.detail.get("confidences") or []
                if isinstance(c, dict) and c.get("dev_accuracy") is not None}
    return [member_confidence(v, accuracy) for v in votes.values()]


def _member_recipes(q: QuestionTrace) -> dict[int, str | None]:
    """SLM-MUX member → the recipe its recorded samples (node ``mux_sample``) ran under (``None``: none)."""
    return {s.agent or 0: s.recipe for s in q.of("member") if s.node == "mux_sample"}


def _named(c: Mapping[str, Any], recipes: dict[int, str | None]) -> str:
    """``member i (model [recipe])``."""
    return f"member {c['member']} ({member_label(c['model'], recipes.get(c['member']))})"


def _shown(confidences: Sequence[MemberConfidence], recipes: dict[int, str | None]) -> str:
    return "; ".join(f"{_named(c, recipes)} {c['answer']!r} at {c['confidence']:.2f}"
                     + (f", dev {c['dev_accuracy']:.2f}" if c["dev_accuracy"] is not None else "") for c in confidences)


@selection_rule("slm_mux", params={"k": 0}, reproduces={"slm-mux": "slm-mux", "comed": "slm-mux"},
                protocols=("slm-mux", "comed"),
                help="SLM-MUX: the member whose own samples agree most answers (ties: recorded dev accuracy, then "
                     "order); --param k=N uses each member's first N samples.")
def slm_mux_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """SLM-MUX's selection (:func:`agora.agents.slm_mux.mux_select`) on the recorded samples of its
    members (node ``mux_sample``: an SLM-MUX run's, or a COMED run's SLM-MUX baseline's, its own
    rows or the bench's shared candidates its members took): each
    member's plurality answer and confidence (the share of its samples on it), the most confident
    member answering, a tie going to the higher dev accuracy the run used (its recorded
    ``confidences``; COMED's baseline has none), then to the earlier member. ``k`` > 0 keeps each
    member's first ``k`` samples (0: all recorded).

    Raises:
        Unavailable: a COMED question whose run did not compute the SLM-MUX baseline.
    """
    votes = _member_votes(q, p, ctx)
    if not votes:
        return Choice(None, "no member sample recorded", 0)
    confidences = _member_confidences(q, votes)
    sel = mux_select(confidences)
    tie = " (a confidence tie: dev accuracy, then order)" if sel["tie"] else ""
    recipes = _member_recipes(q)
    return Choice(sel["answer"], f"{_named(sel, recipes)} is the most self-consistent{tie}; "
                  f"{_shown(confidences, recipes)}", sum(len(v["answers"]) for v in votes.values()))


@selection_rule("mux_top", params={"k": 0}, reproduces={"slm-mux": "mux_top"}, protocols=("slm-mux",),
                help="SLM-MUX's static baseline: the plurality answer of the member with the best recorded dev "
                     "accuracy (the first member without one); --param k=N uses its first N samples.")
def mux_top_rule(q: QuestionTrace, p: dict[str, Any], ctx: ReplayContext) -> Choice:
    """The member with the highest dev accuracy the run recorded (:func:`agora.agents.slm_mux.top_member`;
    the first member when none is measured) answers with its plurality answer over its recorded
    samples (the first ``k`` when ``k`` > 0): SLM-MUX's ``mux_top`` (a COMED run's SLM-MUX baseline
    records only ``slm-mux`` and ``mux_vote``)."""
    votes = _member_votes(q, p, ctx)
    top = top_member(_member_confidences(q, votes))
    if top is None:
        return Choice(None, "no member sample recorded", 0)
    dev = f"dev accuracy {top['dev_accuracy']:.2f}" if top["dev_accuracy"] is not None else "no dev accuracy: first member"
    return Choice(top["answer"], f"{_named(top, _member_recipes(q))}, {dev}: its plurality "
                  f"{top['answer']!r} at {top['confidence']:.2f}", len(votes[top["member"]]["answers"]))


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
    (:func:`agora.traces.bench_data.dev_outcome`)."""
    return [o for o in (dev_outcome(q.detail) for q in run.questions) if o is not None]
