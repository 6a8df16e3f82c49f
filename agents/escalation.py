"""COMED controlled escalation: settings, the decide rule, the escalation vote, and the peers' prompt;
the record of a question is :mod:`agora.agents.escalation_records`, the rescue–harm decomposition
and threshold calibration are :mod:`agora.agents.escalation_calibration`. The dense-collaboration baselines are
protocols of their own (:mod:`agora.agents.moa`, :mod:`agora.agents.debate`); COMED's settings carry
theirs (:meth:`EscalationConfig.moa_config`, :meth:`EscalationConfig.debate_config`).

Source: Alballa et al., "COMED: The Missing Middle Between Routing and Collaboration in Multi-LLM
Inference", arXiv 2609.26913 (``shared/docs/protocols.md`` §3). The paper's method text was not
available: the rules below are **reconstructed** (closest public work: Yue et al., mixture-of-thought
LLM cascades, ICLR 2024) and each is a parameter. Baselines: Wang et al., "Mixture-of-Agents
Enhances Large Language Model Capabilities", arXiv 2406.04692 (proposers + aggregator, the 2-layer
"MoA-Lite" shape); Du et al., "Improving Factuality and Reasoning in Language Models through
Multiagent Debate", arXiv 2305.14325 (agents answer, read each other's answers, answer again; 3
agents × 2 rounds).

No LangGraph here: :mod:`agora.graphs.escalation` wires these pieces into a graph.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Annotated, Callable, Literal, Sequence

from pydantic import model_validator

from agora.tasks.errors import InputError
from agora.agents._checks import EachOnce, MaxTokens, Samples, Seed, Shots, Temperature, TopP
from agora.agents.debate import MAX_DEBATE_AGENTS, MAX_DEBATE_ROUNDS, DebateConfig
from agora.agents.moa import PROPOSERS_ONCE, MoAConfig
from agora.agents.prompts import finish_instruction, with_question
from agora.models.validation import Check, Count, Flag, Instance, Name, Names, Number, settings
from agora.tasks.problem import Problem

Decision = Literal["accept", "verify", "escalate"]
BASELINES = ("moa", "debate")
"""COMED's default dense baselines. Which names ``EscalationConfig.baselines`` accepts is not a
list kept here: every protocol whose registry spec declares a dense baseline
(:func:`agora.graphs.registry.dense_baselines`) is one; :func:`baseline_names` says which."""

_baseline_source: Callable[[], Sequence[str]] | None = None


def use_baseline_source(source: Callable[[], Sequence[str]] | None) -> None:
    """Where :func:`baseline_names` reads the dense baselines from. :mod:`agora.graphs.escalation`
    sets it to the protocol registry when it loads (this layer may not import ``graphs``)."""
    global _baseline_source
    _baseline_source = source


def baseline_names() -> tuple[str, ...]:
    """The dense baselines COMED can run: the registry's (once :mod:`agora.graphs.escalation` is
    loaded), else :data:`BASELINES`."""
    return tuple(_baseline_source()) if _baseline_source is not None else BASELINES


#: A threshold: a number in [0, 1] (its message says "number", as it always has).
_UNIT = Number(0.0, 1.0, expected="a number in [0, 1]")


@settings
class EscalationThresholds:
    """The three thresholds of the decide rule (protocols.md §3), each in [0, 1].

    Raises:
        ValueError: a threshold outside [0, 1] or ``tau_lo > tau_hi`` (the message names the field).
    """

    tau_hi: Annotated[float, _UNIT] = 0.67
    """Accept when the anchor's self-consistency SC >= tau_hi (and the router margin allows).
    SC takes the values k/N only; with the default N = 3 the default (just above 2/3) accepts a
    unanimous anchor and sends a 2-of-3 majority to verify (see :func:`decision_grid`)."""
    tau_lo: Annotated[float, _UNIT] = 0.34
    """Escalate when SC < tau_lo; between the two, verify with a peer probe. The default (just
    above 1/3) escalates, at N = 3, when no two samples agree."""
    m_min: Annotated[float, _UNIT] = 0.0
    """Least router margin M = score₁ − score₂ for a direct accept (ignored without a router)."""

    @model_validator(mode="after")
    def _ordered(self) -> EscalationThresholds:
        if self.tau_lo > self.tau_hi:
            raise InputError(f"EscalationThresholds.tau_lo ({self.tau_lo}) must be <= tau_hi ({self.tau_hi})")
        return self


@settings
class EscalationConfig:
    """Settings of one COMED run and its baselines (defaults sized for CPU pools).

    Raises:
        ValueError: a bad value; the message names the field.
    """

    thresholds: Annotated[EscalationThresholds, Instance(EscalationThresholds, "an EscalationThresholds")] = field(default_factory=EscalationThresholds)
    n_anchor: Samples = 3
    """Samples N drawn from the anchor (one request, N samples) for self-consistency."""
    anchor: Annotated[str | None, Name()] = None
    """Fixed anchor model; ``None`` = the router's pick, or the first pool model without a router."""
    probe: Annotated[str | None, Name()] = None
    """Peer-probe model; ``None`` = the router's runner-up, or the first non-anchor pool model."""
    peers: Annotated[tuple[str, ...], Names] = ()
    """Models asked on escalation (each sees the anchor's answer); empty = every non-anchor model."""
    temperature: Temperature = 0.7
    """Sampling temperature of the anchor, peers and baselines (the probe is greedy)."""
    top_p: TopP = 0.95
    max_tokens: MaxTokens = 128
    """Generated-token cap of every sample but the probe's."""
    probe_max_tokens: MaxTokens = 64
    """Generated-token cap of the probe's one short answer."""
    shots: Shots = 2
    """Worked exemplars in each solver prompt."""
    seed: Seed = 0
    explore: Annotated[bool, Flag] = False
    """Run the probe and the escalation on every question, whatever the decision (calibration);
    COMED's answer and cost still follow the decision."""
    baselines: Annotated[tuple[str, ...], Names] = BASELINES
    """Dense-collaboration baselines run in the same pool: ``moa``, ``debate``, or any registered dense
    baseline (``council``; :func:`baseline_names`)."""
    moa_proposers: Annotated[tuple[str, ...], Names, EachOnce("EscalationConfig", "moa_proposers", PROPOSERS_ONCE)] = ()
    """MoA proposer models (one answer each); empty = every pool model."""
    moa_aggregator: Annotated[str | None, Name()] = None
    """MoA aggregator; ``None`` = the anchor."""
    debate_agents: Annotated[int, Count(1), Check(lambda v: v <= MAX_DEBATE_AGENTS, f"at most {MAX_DEBATE_AGENTS} (as DebateConfig.agents)")] = 3
    """Debate agents; agent i plays pool model i mod |pool|."""
    debate_rounds: Annotated[int, Count(1), Check(lambda v: v <= MAX_DEBATE_ROUNDS, f"at most {MAX_DEBATE_ROUNDS} (as DebateConfig.rounds)")] = 2
    """Debate rounds including the first, independent one (Du et al.: 3 agents, 2 rounds)."""

    @model_validator(mode="after")
    def _known_baselines(self) -> EscalationConfig:
        known = baseline_names()
        unknown = [b for b in self.baselines if b not in known]
        if unknown:
            raise InputError(f"EscalationConfig.baselines: unknown {unknown}; choose from {', '.join(known)}")
        return self

    def moa_config(self, aggregator: str | None = None) -> MoAConfig:
        """The Mixture-of-Agents baseline's settings (aggregator: ``moa_aggregator``, else ``aggregator``,
        which COMED's graph sets to the anchor)."""
        return MoAConfig(proposers=self.moa_proposers, aggregator=self.moa_aggregator or aggregator,
                         temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens,
                         shots=self.shots, seed=self.seed)

    def debate_config(self) -> DebateConfig:
        """The debate baseline's settings (agents play the pool's models in turn)."""
        return DebateConfig(agents=self.debate_agents, rounds=self.debate_rounds, temperature=self.temperature,
                            top_p=self.top_p, max_tokens=self.max_tokens, shots=self.shots, seed=self.seed)


# ---------------------------------------------------------------------------- the decide rule


def decide(sc: float, margin: float | None, thresholds: EscalationThresholds) -> Decision:
    """COMED's decide step (protocols.md §3).

    ``SC >= tau_hi`` and (``M >= m_min`` or no router, ``margin is None``) → ``accept``;
    ``SC < tau_lo`` → ``escalate``; otherwise → ``verify``.

    >>> decide(1.0, None, EscalationThresholds(0.67, 0.34))
    'accept'
    >>> decide(1.0, 0.05, EscalationThresholds(0.67, 0.34, m_min=0.1))
    'verify'
    """
    if sc >= thresholds.tau_hi and (margin is None or margin >= thresholds.m_min):
        return "accept"
    if sc < thresholds.tau_lo:
        return "escalate"
    return "verify"


def decision_grid(n_anchor: int, thresholds: EscalationThresholds) -> list[tuple[int, Decision]]:
    """The decide rule on every value SC can take with ``n_anchor`` samples, most confident first:
    ``(k, decision)`` for SC = k/N, k = N … 0, without a router margin (with one, an ``accept``
    becomes ``verify`` when M < m_min). The comparison is exact: a threshold between two grid
    values splits them, so at N = 3 the defaults give 3/3 accept, 2/3 verify, 1/3 and 0/3 escalate.

    >>> decision_grid(3, EscalationThresholds())
    [(3, 'accept'), (2, 'verify'), (1, 'escalate'), (0, 'escalate')]

    Raises:
        ValueError: ``n_anchor < 1``.
    """
    if isinstance(n_anchor, bool) or not isinstance(n_anchor, int) or n_anchor < 1:
        raise InputError(f"decision_grid: n_anchor must be an integer >= 1, got {n_anchor!r}")
    return [(k, decide(k / n_anchor, None, thresholds)) for k in range(n_anchor, -1, -1)]


def escalates(decision: Decision, probe_agrees: bool | None) -> bool:
    """Whether COMED's answer comes from escalation: a direct ``escalate``, or a ``verify`` whose
    probe disagreed with the anchor (a probe with no answer counts as disagreeing)."""
    return decision == "escalate" or (decision == "verify" and not probe_agrees)


def escalation_vote(anchor_answer: str | None, sc: float, peer_answers: Sequence[str | None]) -> str | None:
    """The vote that replaces the anchor's answer on escalation (reconstructed).

    Weighted plurality: the anchor's answer weighs its self-consistency ``sc`` (≤ 1), each peer's
    answer (given after seeing the anchor's) weighs 1; missing answers do not vote. Ties go to
    the anchor's answer, then to the peer answer seen first. ``None`` when nobody answered.

    >>> escalation_vote("A", 0.33, ["B"])
    'B'
    >>> escalation_vote("A", 0.67, ["B", "A"])
    'A'
    """
    weights: dict[str, float] = {}
    order: list[str] = []
    for answer, weight in [(anchor_answer, sc)] + [(a, 1.0) for a in peer_answers]:
        if answer is None:
            continue
        if answer not in weights:
            order.append(answer)
        weights[answer] = weights.get(answer, 0.0) + weight
    if not weights:
        return None
    best = max(weights.values())
    return next(a for a in order if math.isclose(weights[a], best))


def check_pool(config: EscalationConfig, pool_names: Sequence[str]) -> None:
    """Refuse, before a run starts, a pool COMED cannot run ``config`` on: fewer than two models
    (an anchor and another model) or a model ``config`` names (anchor, probe, peers, MoA's) not in it.

    Raises:
        ValueError: naming the field and the pool's models.
    """
    names = list(pool_names)
    if len(names) < 2:
        raise InputError(f"COMED needs an anchor and at least one other model; the pool has only {', '.join(names)}")
    named = [("anchor", config.anchor), ("probe", config.probe), ("moa_aggregator", config.moa_aggregator),
             *(("peers", m) for m in config.peers), *(("moa_proposers", m) for m in config.moa_proposers)]
    for what, name in named:
        if name is not None and name not in names:
            raise InputError(f"EscalationConfig.{what}: {name!r} is not in the pool ({', '.join(names)})")


# ---------------------------------------------------------------------------- prompts

def peer_messages(problem: Problem, anchor_text: str, shots: int = 2) -> list[dict[str, str]]:
    """A peer's escalation prompt: the question and the anchor's answer, then its own answer."""
    return with_question(problem, shots, (
        f"{problem.question}\n\nAnother model answered:\n\"{anchor_text.strip()}\"\n\n"
        f"Check that answer. Agree only if it is right; otherwise give the correct one. {finish_instruction(problem)}"))
