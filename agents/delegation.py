"""ALIGN delegation: agents' proposal rules, the principal's utility and committed selection rule,
and the fair baselines computed from the same candidate pool.

Source: Zhu et al., "ALIGN: Aligned Delegation with Performance Guarantees for Multi-Agent LLM
Reasoning", arXiv 2602.00127 (2026); theory from Kleinberg & Kleinberg (EC 2018) and
Hajiaghayi et al. (arXiv 2305.03203). The paper's method text was not available: the rules
below are **reconstructed** (``shared/docs/protocols.md`` §1) and each is a parameter.

Records are plain dicts (TypedDicts) so graph state serialises and shows in Studio as is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import field
from functools import partial
from typing import Annotated, Literal, NotRequired, Sequence

from pydantic import model_validator

from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents._checks import Agents, MaxTokens, Samples, Seed, Shots, Temperature, TopP
from agora.agents.reliability import DevAccuracy, dev_accuracy_pairs
from agora.models.validation import UNSET_UNRECORDED, Choice, Convert, Name, Names, Number, settings

ProposalRule = Literal["plurality", "first"]
UtilityName = Literal["agreement", "calibrated"]
UTILITIES = ("agreement", "calibrated")


class Candidate(TypedDict):
    """One sample of one agent."""

    agent: int
    """Agent index, 0..n-1."""
    model: str
    index: int
    """Sample index within the agent, 0..k-1."""
    text: str
    answer: str | None
    """Extracted canonical answer (``None`` when none could be extracted)."""
    how: NotRequired[str | None]
    """How the answer was found (:func:`agora.tasks.find_answer`: ``marker``, ``boxed``, ``####``,
    ``fallback``); ``None`` without an answer."""
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    """Seconds the model took for this sample."""
    call_id: str


class Proposal(TypedDict):
    """What an agent submits to the principal."""

    agent: int
    model: str
    answer: str | None
    candidate_index: int
    """Index (within the agent's samples) of the proposed candidate; -1 if the agent has none."""
    text: str
    signal: float
    """The agent's confidence signal: vote share of the proposed answer among its k samples."""


@settings
class DelegationConfig:
    """Settings of one ALIGN delegation (defaults: protocols.md §1, sized for CPU pools).

    Raises:
        ValueError: a bad value (a wrong type, ``True`` for a count, NaN, out of range); the message
            names the field and the value (:mod:`agora.models.validation`).
    """

    n_agents: Agents = 2
    """Number of agents n (at most :data:`~agora.agents._checks.MAX_AGENTS`); agent i uses pool model ``models[i % len(models)]``."""
    k_samples: Samples = 3
    """Candidates each agent samples privately (k, at most :data:`~agora.agents._checks.MAX_SAMPLES`)."""
    tau: Annotated[float, Number(0.0, 1.0)] = 0.5
    """Committed acceptance threshold on the principal's utility U, in [0, 1]."""
    proposal_rule: Annotated[ProposalRule, Choice("plurality", "first")] = "plurality"
    """``plurality``: the agent's plurality answer (signal = its vote share); ``first``: first sample."""
    utility: Annotated[UtilityName, Choice(*UTILITIES)] = "agreement"
    """Principal utility: ``agreement`` = signal-weighted agreement with all pooled proposals;
    ``calibrated`` = the same, each proposal also weighted by its member's accuracy on dev questions
    (``dev_accuracy``, ``dev_run``)."""
    temperature: Temperature = 0.7
    top_p: TopP = 0.95
    max_tokens: MaxTokens = 256
    shots: Shots = 2
    """Worked exemplars in each agent's prompt."""
    seed: Seed = 0
    models: Annotated[tuple[str, ...], Names] = ()
    """Pool members acting as agents, in order; empty = every pool member."""
    dev_accuracy: Annotated[DevAccuracy, Convert(partial(dev_accuracy_pairs, "DelegationConfig", "dev_accuracy"))] = ()
    """The ``calibrated`` utility's member reliabilities: each member's accuracy on dev questions
    (``member=accuracy`` entries, or a mapping); members not given take theirs from ``dev_run``."""
    dev_run: Annotated[str | None, Name()] = None
    """A dev run in the trace DB ``dev_db`` whose samples give each member's accuracy (``None``: none read)."""
    dev_db: Annotated[str | None, Name()] = None
    """The trace DB holding ``dev_run`` (a SQLite file or a postgresql:// URL); ``None``: ``agora.db``."""
    principal: Annotated[str | None, Name()] = field(default=None, metadata=UNSET_UNRECORDED)
    """A pool member acting as the principal (a trained aggregator, :mod:`agora.training.aggregator`):
    it reads the question and the agents' proposals (:func:`agora.agents.moa.aggregator_prompt`) and
    its answer is ALIGN's, in place of the committed rule over ``utility``; ``None`` (the default):
    the rule, and no model call. Left out of a run's recorded settings while ``None``
    (:func:`agora.models.validation.recorded`), so runs recorded before it existed still resume."""

    @model_validator(mode="after")
    def _calibrated_needs_reliabilities(self) -> DelegationConfig:
        if self.utility == "calibrated" and not self.dev_accuracy and not self.dev_run:
            raise InputError("DelegationConfig.utility 'calibrated' needs member reliabilities: set dev_accuracy "
                             "(member=accuracy entries) or dev_run (a dev run in the trace DB dev_db)")
        return self


def plurality(answers: Sequence[str | None]) -> tuple[str | None, float]:
    """Plurality answer and its share of *all* votes (abstentions count in the denominator).

    Ties go to the answer seen first. ``None`` (no extractable answer) never wins unless every
    vote is ``None``, which returns ``(None, 0.0)``.

    >>> plurality(["3", "5", "3", None])
    ('3', 0.5)
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None, 0.0
    best = max(counts.values())
    winner = next(a for a in answers if a is not None and counts[a] == best)
    return winner, best / len(answers)


def propose(agent: int, model: str, candidates: Sequence[Candidate], rule: ProposalRule = "plurality") -> Proposal:
    """An agent's proposal from its own k candidates.

    ``plurality``: the first candidate carrying the agent's plurality answer; signal = that
    answer's vote share among the k samples. ``first``: the first candidate, signal = the share
    of samples agreeing with it.
    """
    own = sorted((c for c in candidates if c["agent"] == agent), key=lambda c: c["index"])
    if not own:
        return Proposal(agent=agent, model=model, answer=None, candidate_index=-1, text="", signal=0.0)
    answers = [c["answer"] for c in own]
    if rule == "first":
        chosen = own[0]
        share = (sum(a == chosen["answer"] for a in answers) / len(answers)) if chosen["answer"] is not None else 0.0
    else:
        answer, share = plurality(answers)
        chosen = next((c for c in own if c["answer"] == answer), own[0])
    return Proposal(agent=agent, model=model, answer=chosen["answer"], candidate_index=chosen["index"],
                    text=chosen["text"], signal=share)


def agreement_utility(answers: Sequence[str | None], proposals: Sequence[Proposal]) -> list[float]:
    """Principal utility U(a) = Σ_p s_p·[a = a_p] / Σ_p s_p over pooled proposals p with signal s_p.

    In [0, 1]; an answer of ``None`` has U = 0; if every signal is 0, U = 0 for all.

    >>> props = [{"answer": "4", "signal": 1.0}, {"answer": "5", "signal": 0.5}]
    >>> agreement_utility(["4", "5", None], props)
    [0.6666666666666666, 0.3333333333333333, 0.0]
    """
    total = sum(p["signal"] for p in proposals)
    if total <= 0:
        return [0.0 for _ in answers]
    return [0.0 if a is None else sum(p["signal"] for p in proposals if p["answer"] == a) / total for a in answers]


def calibrated_utility(answers: Sequence[str | None], proposals: Sequence[Proposal],
                       reliability: Mapping[str, float]) -> list[float]:
    """Calibrated principal utility: agreement weighted by each proposer's reliability,
    ``U(a) = Σ_p r_p·s_p·[a = a_p] / Σ_p r_p·s_p`` over pooled proposals ``p`` with signal ``s_p``
    and ``r_p`` = the accuracy of ``p``'s member on dev questions (``reliability[model]``).

    With every ``r_p`` equal it is :func:`agreement_utility`. In [0, 1]; ``None`` has U = 0; if
    every weight ``r_p·s_p`` is 0, U = 0 for all. Weights are the accuracies themselves, not their
    log-odds (the optimal weights of a weighted majority of independent voters, Nitzan & Paroush
    1982), which turn negative below 50 % accuracy and would take U out of [0, 1], where ``tau`` lives.

    >>> props = [{"model": "a", "answer": "4", "signal": 1.0}, {"model": "b", "answer": "5", "signal": 1.0}]
    >>> calibrated_utility(["4", "5"], props, {"a": 0.75, "b": 0.25})
    [0.75, 0.25]

    Raises:
        KeyError: a proposal whose model has no reliability (the message names it).
    """
    missing = sorted({p["model"] for p in proposals} - set(reliability))
    if missing:
        raise KeyError(f"no dev accuracy for member(s) {', '.join(missing)}")
    weights = [reliability[p["model"]] * p["signal"] for p in proposals]
    total = sum(weights)
    if total <= 0:
        return [0.0 for _ in answers]
    return [0.0 if a is None else sum(w for w, p in zip(weights, proposals) if p["answer"] == a) / total
            for a in answers]


def principal_utility(name: UtilityName, answers: Sequence[str | None], proposals: Sequence[Proposal],
                      reliability: Mapping[str, float] | None = None) -> list[float]:
    """``U`` of each answer under the configured utility (``DelegationConfig.utility``):
    :func:`agreement_utility` or :func:`calibrated_utility` (which needs ``reliability``)."""
    if name == "calibrated":
        return calibrated_utility(answers, proposals, reliability or {})
    return agreement_utility(answers, proposals)


class Selection(TypedDict):
    agent: int | None
    """Index of the selected proposal's agent (-1 when there is none). With a model principal
    (``DelegationConfig.principal``): the one agent whose proposal's answer is the principal's;
    ``None`` when no proposal's answer is, or when several agents' are (a tie: no one agent chosen)."""
    answer: str | None
    utility: float
    """U of the selected answer under the configured utility (0 for an answer no agent proposed)."""
    accepted: bool
    """True when U >= tau (the committed rule accepted it), False for the argmax fallback. With a
    model principal: whether its answer's U reaches tau (its answer stands either way)."""
    principal: NotRequired[str]
    """The pool member that answered as the principal (only with ``DelegationConfig.principal``)."""


def principal_choice(proposals: Sequence[Proposal], answer: str | None, utilities: Sequence[float],
                     tau: float, member: str) -> Selection:
    """The bookkeeping of a model principal's answer ``answer``: the agent whose proposal carries it
    (``None`` unless exactly one agent's does), and that answer's U (``utilities``: U of each
    proposal, in ``proposals``' order; 0 when no proposal carries it).

    >>> props = [{"agent": 0, "answer": "4"}, {"agent": 1, "answer": "5"}]
    >>> principal_choice(props, "5", [0.5, 0.5], 0.5, "agg")["agent"]
    1
    >>> principal_choice(props, "6", [0.5, 0.5], 0.5, "agg")["agent"] is None
    True
    """
    matches = [i for i, p in enumerate(proposals) if answer is not None and p["answer"] == answer]
    utility = float(utilities[matches[0]]) if matches else 0.0
    agent = proposals[matches[0]]["agent"] if len(matches) == 1 else None
    return Selection(agent=agent, answer=answer, utility=utility, accepted=utility >= tau and bool(matches),
                     principal=member)


def principal_select(proposals: Sequence[Proposal], utilities: Sequence[float], tau: float) -> Selection:
    """The committed rule: argmax U among proposals with U >= tau; if none, argmax U over all.

    Ties on U go to the higher signal, then the lower agent index.
    """
    if not proposals:
        return Selection(agent=-1, answer=None, utility=0.0, accepted=False)
    order = sorted(range(len(proposals)),
                   key=lambda i: (-utilities[i], -proposals[i]["signal"], proposals[i]["agent"]))
    accepted = [i for i in order if utilities[i] >= tau]
    best = accepted[0] if accepted else order[0]
    return Selection(agent=proposals[best]["agent"], answer=proposals[best]["answer"],
                     utility=float(utilities[best]), accepted=bool(accepted))


# ------------------------------------------------------------------ fair baselines, same pool


def single_agent(candidates: Sequence[Candidate]) -> str | None:
    """Single-agent baseline: agent 0's first sample."""
    first = [c for c in candidates if c["agent"] == 0 and c["index"] == 0]
    return first[0]["answer"] if first else None


def self_consistency(candidates: Sequence[Candidate]) -> tuple[str | None, float]:
    """Majority vote over all n·k candidates (ordered by agent, then sample)."""
    ordered = sorted(candidates, key=lambda c: (c["agent"], c["index"]))
    return plurality([c["answer"] for c in ordered])


def best_of_n(candidates: Sequence[Candidate], proposals: Sequence[Proposal], utility: UtilityName = "agreement",
              reliability: Mapping[str, float] | None = None) -> tuple[str | None, float]:
    """Best-of-n·k: the candidate with the highest principal utility U (the same U as ALIGN:
    :func:`principal_utility` of ``utility``)."""
    ordered = sorted(candidates, key=lambda c: (c["agent"], c["index"]))
    if not ordered:
        return None, 0.0
    utilities = principal_utility(utility, [c["answer"] for c in ordered], proposals, reliability)
    best = max(range(len(ordered)), key=lambda i: (utilities[i], -i))
    return ordered[best]["answer"], utilities[best]
