"""Panel diversity: partner-conditioned cue rates, the shift Δ_m, behavioural distances between
models and the panel of size p that maximises them, beside a family-label-only choice.

Source: Zhang, Wang, Xue, Chu, "Post-Training Recipe, More Than Model Family, Shapes Multi-Agent
LLM Conversational Behavior", arXiv 2606.20632 (protocols.md §5, **reconstructed**). Reported: a
reasoning-distilled checkpoint's hedging shifts 18% with its same-base partner; family labels are
an incomplete proxy for diversity.

Input rows
    One dict per response (``agora.traces.diversity.read_exchanges`` builds them from a trace DB;
    tests build them by hand)::

        speaker       str         the model that wrote ``text``
        partner       str | None  the model whose answer the speaker was shown (None: no partner,
                                  or several: those rows count for the speaker, not for a pair)
        text          str         the response
        question_key  str         the same question across runs (its text, when known)
        answer        str | None  canonical extracted answer (None: none, or an open prompt)
        role          str | None  the row's role; roles in ``DiversityConfig.exclude_roles``
                                  (judges: their replies are scores, not conversation) are dropped

Cue rates come from :mod:`agora.agents.behaviour` (word tokens; hedging validated, repair and
challenge exploratory). Each (speaker, partner) cell reports the mean per-response rate with a
percentile-bootstrap CI over responses (:func:`agora.agents.stats.bootstrap_ci`); responses with
no tokens have no rate and are left out of the means.

The behavioural distance and the panel that maximises it are :mod:`agora.agents.panel_choice`; the
persona variants of the pool (:mod:`agora.agents.personas`) are the same weights under another
``system_prompt``, distinct members whose ``family`` is the base model's, which is what makes family
labels an incomplete proxy.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Annotated, Any, Mapping, Sequence

import numpy as np

from agora.agents.behaviour import DEFAULT_DETECTORS, CueDetector, measure
from agora.agents.delegation import plurality
from agora.agents.panel_choice import behavioural_distance, family_distance, optimal_panels, panel_total
from agora.agents.stats import bootstrap_ci
from agora.models.validation import Count, Names, Number, settings

NO_PARTNER = "(none)"
"""Column label of responses written without seeing another model's answer."""


# ----------------------------------------------------------------------------- settings


@settings
class DiversityConfig:
    """Settings of a diversity analysis.

    Raises:
        ValueError: a bad value (a wrong type, ``True`` for a count, NaN, out of range); the message
            names the field and the value.
    """

    min_turns: Annotated[int, Count(1)] = 5
    """Responses a (speaker, partner) cell needs before it counts for Δ_m."""
    panel_size: Annotated[int, Count(2)] = 3
    """Members p of the suggested panel (capped at the number of models)."""
    level: Annotated[float, Number(0.0, 1.0, low_open=True, high_open=True)] = 0.95
    """Confidence level of the bootstrap intervals."""
    resamples: Annotated[int, Count(1)] = 2000
    """Bootstrap resamples per interval."""
    seed: Annotated[int, Count(0)] = 0
    """Seed of the bootstrap generator (numpy's: an integer >= 0)."""
    exclude_roles: Annotated[tuple[str, ...], Names] = ("judge",)
    """Rows with these roles are left out (a judge's reply is a score, not conversation)."""
    max_exact: Annotated[int, Count(1)] = 200_000
    """Largest number of candidate panels searched exhaustively; above it, local search."""


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Estimate:
    """A mean and its bootstrap interval (all ``nan`` without data)."""

    mean: float
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Cell:
    """Cue rates of one speaker replying to one partner (``partner=None``: no partner shown)."""

    speaker: str
    partner: str | None
    turns: int
    """Responses in the cell."""
    empty: int
    """Responses with no tokens (no rate; left out of the means)."""
    mean_tokens: float
    """Mean word tokens per response (empty ones included)."""
    cues: dict[str, Estimate]
    """Detector name → mean cues per 100 tokens with its CI."""
    enough: bool
    """``turns >= min_turns``: the cell counts for Δ_m."""


@dataclass(frozen=True, slots=True)
class Shift:
    """Partner-conditioned shift Δ_m of one model and cue."""

    speaker: str
    cue: str
    partners: int
    """Partners with enough turns."""
    low_partner: str | None
    low: float
    high_partner: str | None
    high: float
    shift: float
    """Δ_m (``nan`` with fewer than two partners or when every rate is 0; ``inf`` when the lowest
    is 0 and another is not)."""


@dataclass(frozen=True, slots=True)
class PanelChoice:
    """A suggested panel and the family-label-only panel next to it."""

    size: int
    members: tuple[str, ...]
    """The panel maximising total behavioural distance."""
    total: float
    """Its total pairwise behavioural distance."""
    exact: bool
    """True when every panel was searched (else local search, which may miss the optimum)."""
    family_members: tuple[str, ...]
    """The first (pool order) of the panels maximising the number of distinct-family pairs."""
    family_total: float
    """Total behavioural distance of ``family_members``."""
    family_ties: int
    """How many panels family labels alone cannot tell apart (all maximise distinct-family pairs)."""
    family_total_range: tuple[float, float]
    """Lowest and highest behavioural total among those tied panels."""


@dataclass(frozen=True)
class DiversityReport:
    """Everything the diversity report shows; :meth:`as_dict` is its JSON form."""

    models: list[str]
    families: dict[str, str | None]
    detectors: list[tuple[str, bool]]
    """``(name, exploratory)`` per detector, in column order."""
    cells: list[Cell]
    shifts: list[Shift]
    features: dict[str, dict[str, float]]
    """Model → overall mean cue rates, ``mean_tokens`` and ``turns``."""
    agreement: np.ndarray
    """``m×m`` answer agreement rates (``nan`` where two models share no answered question)."""
    agreement_n: np.ndarray
    """``m×m`` questions both models answered."""
    distance: np.ndarray
    """``m×m`` behavioural distances, in [0, 1]."""
    panel: PanelChoice | None
    config: DiversityConfig
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | str | None:
            x = float(x)
            return None if math.isnan(x) else ("inf" if math.isinf(x) else x)

        def matrix(a: np.ndarray) -> list[list]:
            return [[num(v) for v in row] for row in a]

        return {
            "models": self.models, "families": self.families,
            "detectors": [{"name": n, "exploratory": e} for n, e in self.detectors],
            "cells": [{"speaker": c.speaker, "partner": c.partner, "turns": c.turns, "empty": c.empty,
                       "mean_tokens": num(c.mean_tokens), "enough": c.enough,
                       "cues": {k: {"mean": num(e.mean), "low": num(e.low), "high": num(e.high)}
                                for k, e in c.cues.items()}} for c in self.cells],
            "shifts": [{"speaker": s.speaker, "cue": s.cue, "partners": s.partners, "low_partner": s.low_partner,
                        "low": num(s.low), "high_partner": s.high_partner, "high": num(s.high),
                        "shift": num(s.shift)} for s in self.shifts],
            "features": {m: {k: num(v) for k, v in f.items()} for m, f in self.features.items()},
            "agreement": matrix(self.agreement), "agreement_n": self.agreement_n.astype(int).tolist(),
            "distance": matrix(self.distance),
            "panel": None if self.panel is None else {
                "size": self.panel.size, "members": list(self.panel.members), "total": num(self.panel.total),
                "exact": self.panel.exact, "family_members": list(self.panel.family_members),
                "family_total": num(self.panel.family_total), "family_ties": self.panel.family_ties,
                "family_total_range": [num(x) for x in self.panel.family_total_range]},
            "config": {"min_turns": self.config.min_turns, "panel_size": self.config.panel_size,
                       "level": self.config.level, "resamples": self.config.resamples,
                       "exclude_roles": list(self.config.exclude_roles)},
            "notes": self.notes,
        }


# ----------------------------------------------------------------------------- formulas


def partner_shift(rates: Mapping[str, float]) -> float:
    """Partner-conditioned shift ``Δ_m = (max_p h(m|p) − min_p h(m|p)) / min_p h(m|p)``.

    Source: protocols.md §5 (after arXiv 2606.20632). ``rates`` maps each partner ``p`` to the
    model's rate ``h(m|p)``; ``nan`` rates are ignored. Returns ``nan`` with fewer than two rates
    and for ``0/0`` (every rate 0), ``inf`` when the lowest rate is 0 and another is not. 0.18 is
    the paper's 18% shift.
    """
    values = [v for v in rates.values() if not math.isnan(v)]
    if len(values) < 2:
        return math.nan
    lo, hi = min(values), max(values)
    if lo == 0:
        return math.nan if hi == 0 else math.inf
    return (hi - lo) / lo


# ----------------------------------------------------------------------------- analysis


def _estimate(values: Sequence[float], cfg: DiversityConfig) -> Estimate:
    return Estimate(*bootstrap_ci(values, level=cfg.level, resamples=cfg.resamples, seed=cfg.seed))


def answer_agreement(rows: Sequence[Mapping[str, Any]], models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Answer agreement rates between models over the questions both answered.

    A model's answer to a question is the plurality of its extracted answers there
    (:func:`agora.agents.delegation.plurality`; ties go to the first seen). ``A_ab`` is the share of
    questions answered by both ``a`` and ``b`` on which the answers are equal.

    Returns:
        ``(rates, counts)``: ``m×m`` arrays; ``rates`` is ``nan`` where ``counts`` is 0, and 1 on
        the diagonal of models that answered something.
    """
    index = {m: i for i, m in enumerate(models)}
    votes: dict[tuple[str, str], list[str | None]] = {}
    for r in rows:
        if r["speaker"] in index:
            votes.setdefault((r["speaker"], r["question_key"]), []).append(r.get("answer"))
    answers: dict[str, dict[str, str]] = {}
    for (model, question), vs in votes.items():
        winner, _ = plurality(vs)
        if winner is not None:
            answers.setdefault(question, {})[model] = winner
    m = len(models)
    same, count = np.zeros((m, m)), np.zeros((m, m))
    for by_model in answers.values():
        for a, b in itertools.product(by_model, repeat=2):
            count[index[a], index[b]] += 1
            same[index[a], index[b]] += by_model[a] == by_model[b]
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = np.where(count > 0, same / np.maximum(count, 1), np.nan)
    return rates, count


def analyse(
    rows: Sequence[Mapping[str, Any]],
    families: Mapping[str, str | None] | None = None,
    config: DiversityConfig = DiversityConfig(),
    detectors: Sequence[CueDetector] = DEFAULT_DETECTORS,
    model_order: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> DiversityReport:
    """Cue rates per (speaker, partner), Δ_m per model and cue, behavioural distances and the
    suggested panel, from response rows (shape in the module docstring).

    Args:
        rows: responses; rows whose role is in ``config.exclude_roles`` are dropped.
        families: model → family label (``ModelSpec.family``); missing = unknown.
        config: thresholds, bootstrap and panel settings.
        detectors: cue detectors (default hedging, repair, challenge).
        model_order: preferred model order (pool order); other speakers follow alphabetically.
        notes: notes to report first (e.g. what the reader could not find).
    """
    families = dict(families or {})
    notes = list(notes)
    kept = [r for r in rows if r.get("role") not in config.exclude_roles]
    if len(kept) < len(rows):
        notes.append(f"left out {len(rows) - len(kept)} responses with role(s) {', '.join(config.exclude_roles)}")
    rows = kept
    speakers = {r["speaker"] for r in rows}
    models = [m for m in dict.fromkeys(model_order) if m in speakers] + sorted(speakers - set(model_order))
    names = [d.name for d in detectors]
    measured = [(r, measure(r.get("text") or "", detectors)) for r in rows]

    by_cell: dict[tuple[str, str | None], list] = {}
    by_model: dict[str, list] = {}
    for r, cues in measured:
        by_cell.setdefault((r["speaker"], r.get("partner")), []).append(cues)
        by_model.setdefault(r["speaker"], []).append(cues)

    def partner_order(p: str | None) -> tuple[int, int, str]:
        return (p is None, models.index(p) if p in models else len(models), p or "")

    cells: list[Cell] = []
    for speaker in models:
        for partner in sorted({p for (s, p) in by_cell if s == speaker}, key=partner_order):
            group = by_cell[(speaker, partner)]
            cells.append(Cell(
                speaker=speaker, partner=partner, turns=len(group),
                empty=sum(c.tokens == 0 for c in group),
                mean_tokens=float(np.mean([c.tokens for c in group])),
                cues={n: _estimate([c.rates[n] for c in group if c.tokens > 0], config) for n in names},
                enough=len(group) >= config.min_turns))

    shifts: list[Shift] = []
    for speaker in models:
        usable = [c for c in cells if c.speaker == speaker and c.partner is not None and c.enough]
        for name in names:
            rates = {c.partner: c.cues[name].mean for c in usable if not math.isnan(c.cues[name].mean)}
            lo = min(rates, key=rates.get) if rates else None
            hi = max(rates, key=rates.get) if rates else None
            shifts.append(Shift(speaker=speaker, cue=name, partners=len(rates), low_partner=lo,
                                low=math.nan if lo is None else rates[lo], high_partner=hi,
                                high=math.nan if hi is None else rates[hi], shift=partner_shift(rates)))

    features: dict[str, dict[str, float]] = {}
    for model in models:
        group = by_model[model]
        f = {n: float(np.mean(vals)) if (vals := [c.rates[n] for c in group if c.tokens > 0]) else math.nan
             for n in names}
        features[model] = {**f, "mean_tokens": float(np.mean([c.tokens for c in group])),
                           "turns": float(len(group))}
    agreement, agreement_n = answer_agreement(rows, models)
    x = np.array([[features[m][k] for k in (*names, "mean_tokens")] for m in models],
                 dtype=float).reshape(len(models), len(names) + 1)
    distance = behavioural_distance(x, agreement)

    panel = None
    if len(models) >= 2:
        size = min(config.panel_size, len(models))
        if size < config.panel_size:
            notes.append(f"only {len(models)} models: the panel is all of them")
        best, exact = optimal_panels(distance, size, max_exact=config.max_exact)
        fam_panels, fam_exact = optimal_panels(family_distance(models, families), size,
                                               max_exact=config.max_exact)
        fam_totals = [panel_total(distance, p) for p in fam_panels]
        panel = PanelChoice(
            size=size, members=tuple(models[i] for i in best[0]), total=panel_total(distance, best[0]),
            exact=exact, family_members=tuple(models[i] for i in fam_panels[0]), family_total=fam_totals[0],
            family_ties=len(fam_panels) if fam_exact else 1,
            family_total_range=(min(fam_totals), max(fam_totals)))
        missing = [m for m in models if not families.get(m)]
        if missing:
            notes.append(f"no family label for {', '.join(missing)}: each counts as its own family")
    if not any(c.partner is not None for c in cells):
        notes.append("no response saw another model's answer: no partner-conditioned cells "
                     "(collect some with `agora converse`)")
    elif not any(s.partners >= 2 for s in shifts):
        notes.append(f"no model has two partners with >= {config.min_turns} turns: Δ_m is undefined")
    if not np.isfinite(agreement[~np.eye(len(models), dtype=bool)]).any() and len(models) > 1:
        notes.append("no question answered by two models with an extractable answer: agreement left out")
    return DiversityReport(models=models, families={m: families.get(m) for m in models},
                           detectors=[(d.name, d.exploratory) for d in detectors], cells=cells, shifts=shifts,
                           features=features, agreement=agreement, agreement_n=agreement_n, distance=distance,
                           panel=panel, config=config, notes=notes)
