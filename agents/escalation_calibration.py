"""COMED's rescue–harm decomposition and threshold calibration (:mod:`agora.agents.escalation`): the
questions escalation rescued or harmed, the cost-weighted objective a threshold policy scores on a
dev run, the search over candidate thresholds, and the ``[comed]`` thresholds file a run reads back.

Source: Alballa et al., arXiv 2609.26913 (``shared/docs/protocols.md`` §3), **reconstructed**: the
objective and the candidate grid are ours, each a parameter.
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Sequence

from agora.tasks.errors import InputError
from agora.agents.escalation import EscalationThresholds, decide, escalates


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
        raise InputError("calibrate: no dev outcomes (run the dev split with explore=True first)")
    if not 0 <= lam < math.inf:
        raise InputError(f"calibrate: lam must be a finite number >= 0, got {lam}")
    best: PolicyScore | None = None
    for t in candidate_thresholds(outcomes):
        s = score_policy(outcomes, t, lam)
        if max_calls is not None and s.calls_per_question > max_calls:
            continue
        if best is None or (s.objective, -s.extra_calls) > (best.objective, -best.extra_calls):
            best = s
    if best is None:
        anchor_only = sum(o.anchor_calls for o in outcomes) / len(outcomes)
        raise InputError(f"calibrate: max_calls {max_calls} is below the anchor's own {anchor_only:.2f} "
                         "model calls per question; no thresholds fit")
    return best


@dataclass(frozen=True, slots=True)
class ThresholdsFile:
    """The ``[comed]`` table of a thresholds file."""

    thresholds: EscalationThresholds
    n_anchor: int | None = None
    """Anchor samples N the thresholds were calibrated with (SC takes the values k/N, so thresholds
    chosen for one N decide differently with another); ``None`` when the file does not say."""


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
        raise InputError(f"{path}: thresholds file not found")
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("comed")
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: invalid TOML: {exc}") from None
    known = {f.name for f in fields(EscalationThresholds)} | {"n_anchor"}
    if not isinstance(table, dict) or not table:
        raise InputError(f"{path}: no thresholds: expected a [comed] table with {', '.join(sorted(known))} "
                         "(as `agora calibrate comed` writes)")
    unknown = sorted(set(table) - known)
    if unknown:
        raise InputError(f"{path}: [comed] field '{unknown[0]}': unknown; expected {', '.join(sorted(known))}")
    n_anchor = table.pop("n_anchor", None)
    if n_anchor is not None and (isinstance(n_anchor, bool) or not isinstance(n_anchor, int) or n_anchor < 1):
        raise InputError(f"{path}: [comed] field 'n_anchor' must be an integer >= 1, got {n_anchor!r}")
    try:
        return ThresholdsFile(EscalationThresholds(**table), n_anchor)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None
