"""COMED controlled escalation: settings, the decide rule, the escalation vote, the rescue–harm
decomposition, threshold calibration, and the peers' prompt. The dense-collaboration baselines are
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

import itertools
import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Literal, Sequence

from agora.agents._checks import check_count, check_flag, check_name, check_names, check_sampling
from agora.agents.debate import DebateConfig, debate_messages  # noqa: F401 (debate's own home)
from agora.agents.moa import MoAConfig, aggregator_messages  # noqa: F401 (MoA's own home)
from agora.agents.prompts import finish_instruction, with_question
from agora.tasks.loaders import Problem

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


@dataclass(frozen=True, slots=True)
class EscalationThresholds:
    """The three thresholds of the decide rule (protocols.md §3), each in [0, 1].

    Raises:
        ValueError: a threshold outside [0, 1] or ``tau_lo > tau_hi`` (the message names the field).
    """

    tau_hi: float = 0.67
    """Accept when the anchor's self-consistency SC >= tau_hi (and the router margin allows).
    SC takes the values k/N only; with the default N = 3 the default (just above 2/3) accepts a
    unanimous anchor and sends a 2-of-3 majority to verify (see :func:`decision_grid`)."""
    tau_lo: float = 0.34
    """Escalate when SC < tau_lo; between the two, verify with a peer probe. The default (just
    above 1/3) escalates, at N = 3, when no two samples agree."""
    m_min: float = 0.0
    """Least router margin M = score₁ − score₂ for a direct accept (ignored without a router)."""

    def __post_init__(self):
        for name in ("tau_hi", "tau_lo", "m_min"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"EscalationThresholds.{name} must be a number in [0, 1], got {value!r}")
        if self.tau_lo > self.tau_hi:
            raise ValueError(f"EscalationThresholds.tau_lo ({self.tau_lo}) must be <= tau_hi ({self.tau_hi})")


@dataclass(frozen=True, slots=True)
class EscalationConfig:
    """Settings of one COMED run and its baselines (defaults sized for CPU pools).

    Raises:
        ValueError: a bad value; the message names the field.
    """

    thresholds: EscalationThresholds = field(default_factory=EscalationThresholds)
    n_anchor: int = 3
    """Samples N drawn from the anchor (one request, N samples) for self-consistency."""
    anchor: str | None = None
    """Fixed anchor model; ``None`` = the router's pick, or the first pool model without a router."""
    probe: str | None = None
    """Peer-probe model; ``None`` = the router's runner-up, or the first non-anchor pool model."""
    peers: tuple[str, ...] = ()
    """Models asked on escalation (each sees the anchor's answer); empty = every non-anchor model."""
    temperature: float = 0.7
    """Sampling temperature of the anchor, peers and baselines (the probe is greedy)."""
    top_p: float = 0.95
    max_tokens: int = 128
    """Generated-token cap of every sample but the probe's."""
    probe_max_tokens: int = 64
    """Generated-token cap of the probe's one short answer."""
    shots: int = 2
    """Worked exemplars in each solver prompt."""
    seed: int = 0
    explore: bool = False
    """Run the probe and the escalation on every question, whatever the decision (calibration);
    COMED's answer and cost still follow the decision."""
    baselines: tuple[str, ...] = BASELINES
    """Dense-collaboration baselines run in the same pool: ``moa``, ``debate``, or any registered dense
    baseline (``council``; :func:`baseline_names`)."""
    moa_proposers: tuple[str, ...] = ()
    """MoA proposer models (one answer each); empty = every pool model."""
    moa_aggregator: str | None = None
    """MoA aggregator; ``None`` = the anchor."""
    debate_agents: int = 3
    """Debate agents; agent i plays pool model i mod |pool|."""
    debate_rounds: int = 2
    """Debate rounds including the first, independent one (Du et al.: 3 agents, 2 rounds)."""

    def __post_init__(self):
        if not isinstance(self.thresholds, EscalationThresholds):
            raise ValueError("EscalationConfig.thresholds must be an EscalationThresholds")
        owner = "EscalationConfig"
        for name in ("n_anchor", "debate_agents", "debate_rounds"):
            check_count(owner, name, getattr(self, name))
        check_sampling(owner, self, max_tokens=("max_tokens", "probe_max_tokens"))
        check_flag(owner, "explore", self.explore)
        for name in ("anchor", "probe", "moa_aggregator"):
            check_name(owner, name, getattr(self, name))
        for name in ("peers", "baselines", "moa_proposers"):
            check_names(owner, name, getattr(self, name))
        known = baseline_names()
        unknown = [b for b in self.baselines if b not in known]
        if unknown:
            raise ValueError(f"EscalationConfig.baselines: unknown {unknown}; choose from {', '.join(known)}")

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
        raise ValueError(f"decision_grid: n_anchor must be an integer >= 1, got {n_anchor!r}")
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


# ---------------------------------------------------------------------------- rescue–harm


@dataclass(frozen=True, slots=True)
class RescueHarm:
    """Counts of the rescue–harm decomposition over ``n`` questions."""

    n: int
    anchor_correct: int
    final_correct: int
    rescues: int
    """Escalated questions whose anchor answer was wrong and whose final answer is right."""
    harms: int
    """Escalated questions whose anchor answer was right and whose final answer is wrong."""
    escalated: int

    @property
    def gain(self) -> float:
        """Acc(COMED) − Acc(anchor) as a fraction (``nan`` for no questions)."""
        return (self.final_correct - self.anchor_correct) / self.n if self.n else float("nan")


def rescue_harm(anchor_correct: Sequence[bool], final_correct: Sequence[bool],
                escalated: Sequence[bool]) -> RescueHarm:
    """The rescue–harm decomposition (protocols.md §3), checked exactly on every question.

    ``Acc(COMED) − Acc(anchor) = P(esc ∧ anchor wrong ∧ final right) − P(esc ∧ anchor right ∧
    final wrong)``, which holds because only escalation replaces the anchor's answer: per question
    ``final_i − anchor_i = rescue_i − harm_i``. Inputs are per-question 0/1 outcomes of equal length.

    Raises:
        ValueError: lengths differ, or a question that was not escalated has a final correctness
            different from its anchor's (the identity cannot hold; the message gives its index).
    """
    if not len(anchor_correct) == len(final_correct) == len(escalated):
        raise ValueError(f"rescue_harm: lengths differ ({len(anchor_correct)}, {len(final_correct)}, {len(escalated)})")
    rescues = harms = 0
    for i, (a, f, e) in enumerate(zip(anchor_correct, final_correct, escalated)):
        rescue, harm = int(bool(e and not a and f)), int(bool(e and a and not f))
        if int(bool(f)) - int(bool(a)) != rescue - harm:
            raise ValueError(f"rescue_harm: question {i} was not escalated but its correctness changed "
                             f"(anchor {bool(a)}, final {bool(f)}); the identity does not hold")
        rescues, harms = rescues + rescue, harms + harm
    return RescueHarm(n=len(escalated), anchor_correct=sum(map(bool, anchor_correct)),
                      final_correct=sum(map(bool, final_correct)), rescues=rescues, harms=harms,
                      escalated=sum(map(bool, escalated)))


# ---------------------------------------------------------------------------- calibration


@dataclass(frozen=True, slots=True)
class DevOutcome:
    """One dev question with every branch computed (a run with ``explore=True``)."""

    sc: float
    margin: float | None
    anchor_correct: bool
    probe_agrees: bool
    escalation_correct: bool
    probe_calls: int
    """Model calls of the peer probe."""
    escalation_calls: int
    """Model calls of the escalation (one per peer)."""
    anchor_calls: int = 1
    """Model calls of the anchor step (its N samples are one request)."""


@dataclass(frozen=True, slots=True)
class PolicyScore:
    thresholds: EscalationThresholds
    rescues: int
    harms: int
    extra_calls: int
    """Model calls beyond the anchor's, summed over the questions."""
    calls_per_question: float
    """COMED's mean model calls per question under these thresholds, the anchor's included (the
    unit of the run report's calls/q column)."""
    objective: float


def calibration_objective(rescues: int, harms: int, extra_calls: int, n: int, lam: float) -> float:
    """``(rescues − harms − λ·extra_calls) / n`` (protocols.md §3: thresholds maximise
    rescue − harm − λ·cost, here per question).

    Units: ``(rescues − harms) / n`` is COMED's accuracy gain over its anchor as a fraction (0.01 =
    1 pp) and the cost ``extra_calls / n`` is model calls (requests) per question beyond the
    anchor's one, so ``λ`` is the accuracy gain one extra request per question must buy: λ = 0.01
    asks 1 pp per request, so escalating every question of a 2-model pool through the probe
    (2 extra requests) must gain 2 pp. On ``n`` dev questions one net rescue is worth ``1/(λ n)``
    extra requests per question, so with small dev splits the budget of :func:`calibrate` is the
    firmer cost control.

    >>> calibration_objective(3, 1, 10, 20, 0.01)
    0.095
    """
    return (rescues - harms - lam * extra_calls) / n


def score_policy(outcomes: Sequence[DevOutcome], thresholds: EscalationThresholds, lam: float) -> PolicyScore:
    """Rescues, harms, model calls and objective of the decide rule under ``thresholds``."""
    rescues = harms = extra = 0
    for o in outcomes:
        decision = decide(o.sc, o.margin, thresholds)
        if decision == "verify":
            extra += o.probe_calls
        if escalates(decision, o.probe_agrees):
            extra += o.escalation_calls
            rescues += int(not o.anchor_correct and o.escalation_correct)
            harms += int(o.anchor_correct and not o.escalation_correct)
    n = max(1, len(outcomes))
    return PolicyScore(thresholds, rescues, harms, extra, (sum(o.anchor_calls for o in outcomes) + extra) / n,
                       calibration_objective(rescues, harms, extra, n, lam))


def candidate_thresholds(outcomes: Sequence[DevOutcome]) -> list[EscalationThresholds]:
    """Every distinct policy on ``outcomes``. The rule changes only where a threshold crosses an
    observed value, so ``tau_lo, tau_hi`` range over 0 and the midpoints between neighbours of
    {0, 1} ∪ observed SC values, and ``m_min`` likewise over {0, 1} ∪ observed margins ({0} alone
    without a router). A midpoint decides every dev question as the value above it does, and keeps
    the chosen thresholds off the points themselves, where float rounding (2/3 as 0.666…) could
    flip a comparison: at N = 3 the SC candidates are 0, 1/6, 1/2 and 5/6."""
    def cuts(values: set[float]) -> list[float]:
        v = sorted(values)
        return [0.0] + [(a + b) / 2 for a, b in zip(v, v[1:])]

    sc_cuts = cuts({0.0, 1.0} | {float(o.sc) for o in outcomes})
    observed = {float(o.margin) for o in outcomes if o.margin is not None and 0 <= o.margin <= 1}
    margins = cuts({0.0, 1.0} | observed) if observed else [0.0]
    out = []
    for lo, hi in itertools.combinations_with_replacement(sc_cuts, 2):
        for m in margins:
            out.append(EscalationThresholds(tau_hi=hi, tau_lo=lo, m_min=m))
    return out


def calibrate(outcomes: Sequence[DevOutcome], lam: float = 0.01, max_calls: float | None = None) -> PolicyScore:
    """Thresholds maximising rescue − harm − λ·cost on a dev split (exhaustive over
    :func:`candidate_thresholds`). Ties go to fewer extra calls, then to the earlier candidate.

    ``max_calls`` is an optional budget: only thresholds whose mean model calls per question on
    the dev split (the anchor's included, :attr:`PolicyScore.calls_per_question`) are at most
    ``max_calls`` compete, e.g. half of what a dense baseline spends per question.

    Raises:
        ValueError: no outcomes, ``lam`` not a finite number >= 0, or ``max_calls`` below the
            anchor's own calls per question (no thresholds fit).
    """
    if not outcomes:
        raise ValueError("calibrate: no dev outcomes (run the dev split with explore=True first)")
    if not 0 <= lam < math.inf:
        raise ValueError(f"calibrate: lam must be a finite number >= 0, got {lam}")
    best: PolicyScore | None = None
    for t in candidate_thresholds(outcomes):
        s = score_policy(outcomes, t, lam)
        if max_calls is not None and s.calls_per_question > max_calls:
            continue
        if best is None or (s.objective, -s.extra_calls) > (best.objective, -best.extra_calls):
            best = s
    if best is None:
        anchor_only = sum(o.anchor_calls for o in outcomes) / len(outcomes)
        raise ValueError(f"calibrate: max_calls {max_calls} is below the anchor's own {anchor_only:.2f} "
                         "model calls per question; no thresholds fit")
    return best


@dataclass(frozen=True, slots=True)
class ThresholdsFile:
    """The ``[comed]`` table of a thresholds file."""

    thresholds: EscalationThresholds
    n_anchor: int | None = None
    """Anchor samples N the thresholds were calibrated with (SC takes the values k/N, so thresholds
    chosen for one N decide differently with another); ``None`` when the file does not say."""


def check_pool(config: EscalationConfig, pool_names: Sequence[str]) -> None:
    """Refuse, before a run starts, a pool COMED cannot run ``config`` on: fewer than two models
    (an anchor and another model) or a model ``config`` names (anchor, probe, peers, MoA's) not in it.

    Raises:
        ValueError: naming the field and the pool's models.
    """
    names = list(pool_names)
    if len(names) < 2:
        raise ValueError(f"COMED needs an anchor and at least one other model; the pool has only {', '.join(names)}")
    named = [("anchor", config.anchor), ("probe", config.probe), ("moa_aggregator", config.moa_aggregator),
             *(("peers", m) for m in config.peers), *(("moa_proposers", m) for m in config.moa_proposers)]
    for what, name in named:
        if name is not None and name not in names:
            raise ValueError(f"EscalationConfig.{what}: {name!r} is not in the pool ({', '.join(names)})")


def write_thresholds(path: str | Path, score: PolicyScore, *, n_anchor: int, lam: float, source: str,
                     max_calls: float | None = None) -> None:
    """Write calibrated thresholds and their N as a TOML ``[comed]`` table the run reads back."""
    t = score.thresholds
    budget = "none" if max_calls is None else f"{max_calls} model calls per question"
    Path(path).write_text(
        f"# COMED thresholds calibrated on {source}\n"
        f"# objective {score.objective:.4f}: rescues {score.rescues}, harms {score.harms}, "
        f"extra model calls {score.extra_calls}, {score.calls_per_question:.2f} model calls per question "
        f"(anchor included), lambda {lam}, budget {budget}\n"
        f"[comed]\ntau_hi = {t.tau_hi!r}\ntau_lo = {t.tau_lo!r}\nm_min = {t.m_min!r}\nn_anchor = {n_anchor}\n",
        encoding="utf-8")


def load_thresholds(path: str | Path) -> ThresholdsFile:
    """Read the ``[comed]`` table of a thresholds file: ``tau_hi``, ``tau_lo``, ``m_min`` and,
    optionally, ``n_anchor``.

    Raises:
        ValueError: missing file, bad TOML, no ``[comed]`` table (or an empty one), unknown key or
            bad value (``file: ... field ...``).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: thresholds file not found")
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("comed")
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML: {exc}") from None
    known = {f.name for f in fields(EscalationThresholds)} | {"n_anchor"}
    if not isinstance(table, dict) or not table:
        raise ValueError(f"{path}: no thresholds: expected a [comed] table with {', '.join(sorted(known))} "
                         "(as `agora calibrate comed` writes)")
    unknown = sorted(set(table) - known)
    if unknown:
        raise ValueError(f"{path}: [comed] field '{unknown[0]}': unknown; expected {', '.join(sorted(known))}")
    n_anchor = table.pop("n_anchor", None)
    if n_anchor is not None and (isinstance(n_anchor, bool) or not isinstance(n_anchor, int) or n_anchor < 1):
        raise ValueError(f"{path}: [comed] field 'n_anchor' must be an integer >= 1, got {n_anchor!r}")
    try:
        return ThresholdsFile(EscalationThresholds(**table), n_anchor)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


# ---------------------------------------------------------------------------- prompts

def peer_messages(problem: Problem, anchor_text: str, shots: int = 2) -> list[dict[str, str]]:
    """A peer's escalation prompt: the question and the anchor's answer, then its own answer."""
    return with_question(problem, shots, (
        f"{problem.question}\n\nAnother model answered:\n\"{anchor_text.strip()}\"\n\n"
        f"Check that answer. Agree only if it is right; otherwise give the correct one. {finish_instruction(problem)}"))
