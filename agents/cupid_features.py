"""CUPID's model features (:mod:`agora.agents.cupid`): each model's accuracy per task, cost per 1k
tokens and median latency, from the pool file (:func:`spec_features`) or the trace store
(:func:`trace_features`), as one normalised table (:func:`feature_table`); and a user's preference
vector ``θ`` parsed from text (:func:`parse_theta`).
"""

from __future__ import annotations

import math
import re
import statistics
from typing import Any, Mapping, Sequence

import numpy as np

from agora.tasks.errors import InputError
from agora.models.pool import ModelPool

COST = "cost_per_1k_tokens"
"""Feature name: price of 1000 (prompt + completion) tokens, from ``ModelSpec.cost_per_1k_tokens``."""
LATENCY = "latency_s"
"""Feature name: median seconds per answer, from the traces or measured."""
ACCURACY_PREFIX = "acc:"
"""Feature names ``acc:<task>``: fraction of a model's traced answers on ``<task>`` that were right."""
JUDGING_ROLES = ("judge", "verifier", "principal", "router", "critic")
"""Trace roles whose completions judge other answers instead of answering; not scored for accuracy."""

# ----------------------------------------------------------------------------- features


def normalize_features(raw: np.ndarray) -> np.ndarray:
    """The ``x_i`` of the model: each feature column of ``raw`` ``(m, d)`` min–max scaled to
    ``[0, 1]`` across the pool, then centred on the pool mean.

    The scale makes one prior and one ``β`` fit features in seconds, prices and accuracies alike
    (the sign is kept); a constant column becomes 0. Centring changes no Bradley–Terry probability
    (they depend on differences only) but makes the UCB bonus ``β‖x_i‖_Σ`` the uncertainty of model
    ``i``'s utility relative to the pool average rather than to an arbitrary origin (our choice;
    measured on 140 simulated users, 6 models, 3 features, 30 rounds: best model found 120 times
    centred, 115 times not).
    """
    raw = np.asarray(raw, dtype=float)
    lo, hi = raw.min(axis=0), raw.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    scaled = np.where(hi > lo, (raw - lo) / span, 0.0)
    return scaled - scaled.mean(axis=0)


def _feature_order(name: str) -> tuple[int, str]:
    return (0 if name.startswith(ACCURACY_PREFIX) else 1 if name == COST else 2 if name == LATENCY else 3, name)


def feature_table(values: Mapping[str, Mapping[str, float]], models: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The raw feature matrix of ``models`` from per-model feature values.

    Columns are the union of the feature names (``acc:*`` sorted, then ``cost_per_1k_tokens``, then
    ``latency_s``, then others). A model without a value for a feature gets the mean of the models
    that have one (mean imputation: a missing value then says nothing for or against the model).
    Non-finite values count as missing.

    Returns:
        ``(names, raw)``: ``d`` feature names and the ``(m, d)`` matrix.
    """
    names = sorted({n for m in models for n, v in values.get(m, {}).items() if v is not None and math.isfinite(v)},
                   key=_feature_order)
    raw = np.full((len(models), len(names)), np.nan)
    for i, m in enumerate(models):
        for j, n in enumerate(names):
            v = values.get(m, {}).get(n)
            if v is not None and math.isfinite(v):
                raw[i, j] = float(v)
    for j in range(len(names)):
        col = raw[:, j]
        col[np.isnan(col)] = np.nanmean(col)
    return names, raw


def spec_features(pool: ModelPool, models: Sequence[str]) -> dict[str, dict[str, float]]:
    """Features a pool file states: ``cost_per_1k_tokens`` and the optional ``features`` table.

    A pool entry may carry ``features = { latency_s = 0.4, "acc:gsm8k" = 0.31 }`` (kept in
    ``ModelSpec.extra``): measured elsewhere, or synthetic for experiments.

    Raises:
        ValueError: a ``features`` value that is not a finite number, or a negative cost, latency or
        accuracy (names the pool's source, model and field).
    """
    out: dict[str, dict[str, float]] = {}
    for m in models:
        spec = pool[m].spec
        table = spec.extra.get("features") or {}
        if not isinstance(table, dict):
            raise InputError(f"{pool.source}: model {m!r}: field 'features' must be a table of numbers, got {table!r}")
        row = {}
        for field, name, value in [(COST, COST, spec.cost_per_1k_tokens),
                                   *((f"features.{n}", str(n), v) for n, v in table.items())]:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise InputError(f"{pool.source}: model {m!r}: field {field!r}: expected a finite number, got {value!r}")
            if value < 0 and (name in (COST, LATENCY) or name.startswith(ACCURACY_PREFIX)):
                raise InputError(f"{pool.source}: model {m!r}: field {field!r}: must be >= 0, got {value!r}")
            row[name] = float(value)
        out[m] = row
    return out


def _n_options(question: str) -> int:
    return max(2, len(re.findall(r"^[A-J]\. ", question or "", flags=re.MULTILINE)))


def trace_features(store: Any, models: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per-model features measured in a trace store: ``acc:<task>`` and ``latency_s``.

    ``acc:<task>``: over the successful calls of the model on questions with a gold answer (a
    ``model_calls`` row joined with its ``questions`` row; ``<task>`` is the question's ``source``),
    the share whose completion's extracted answer is correct. Calls of judging roles
    (:data:`JUDGING_ROLES`) are not answers and are skipped. ``latency_s``: the median latency of
    the model's successful calls. Models absent from the store get no entry.

    Args:
        store: an :class:`agora.traces.TraceStore`.
        models: pool member names to look up.
    """
    from agora.tasks.answers import extract_answer
    from agora.tasks.comparison import is_correct

    if not models:
        return {}
    marks = ", ".join("?" for _ in models)
    out: dict[str, dict[str, float]] = {}
    latencies: dict[str, list[float]] = {}
    for row in store.db.query(f"select model, latency_s from model_calls where error is null "
                              f"and latency_s is not null and model in ({marks})", list(models)):
        latencies.setdefault(row["model"], []).append(row["latency_s"])
    for m, values in latencies.items():
        out.setdefault(m, {})[LATENCY] = statistics.median(values)
    judges = ", ".join("?" for _ in JUDGING_ROLES)
    scores: dict[tuple[str, str], list[bool]] = {}
    for row in store.db.query(
            f"select c.model, q.source, q.kind, q.question, q.gold, c.completion from model_calls c "
            f"join questions q on q.run_id = c.run_id and q.question_id = c.question_id "
            f"where c.error is null and c.completion is not null and q.gold is not null "
            f"and coalesce(c.role, '') not in ({judges}) and c.model in ({marks})",
            [*JUDGING_ROLES, *models]):
        kind = row["kind"] or "math"
        if kind not in ("math", "mc"):
            continue
        pred = extract_answer(row["completion"], kind, _n_options(row["question"]), question=row["question"])
        scores.setdefault((row["model"], row["source"] or "task"), []).append(is_correct(pred, row["gold"], kind))
    for (m, task), correct in scores.items():
        out.setdefault(m, {})[f"{ACCURACY_PREFIX}{task}"] = sum(correct) / len(correct)
    return out


def parse_theta(text: str, names: Sequence[str]) -> np.ndarray:
    """A preference vector ``θ`` from ``"latency_s=-1, cost_per_1k_tokens=-0.5"`` (unnamed features
    weigh 0) or from ``d`` comma-separated numbers in feature order.

    Raises:
        ValueError: unknown feature name (lists the known ones), a feature named twice, a value that
        is not a finite number, or the wrong count of plain numbers.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    theta = np.zeros(len(names))
    if parts and all("=" not in p for p in parts):
        if len(parts) != len(names):
            raise InputError(f"theta {text!r}: {len(parts)} numbers for {len(names)} features "
                             f"({', '.join(names)}); or name them, e.g. {names[-1] if names else 'latency_s'}=-1")
        try:
            theta = np.array([float(p) for p in parts])
        except ValueError:
            raise InputError(f"theta {text!r}: not a list of numbers") from None
    else:
        seen: set[str] = set()
        for p in parts:
            name, _, value = p.partition("=")
            name = name.strip()
            if name not in names:
                raise InputError(f"theta {text!r}: unknown feature {name!r}; features: {', '.join(names)}")
            if name in seen:  # (the last would win, silently)
                raise InputError(f"theta {text!r}: feature {name!r} is given twice; give each feature once")
            seen.add(name)
            try:
                theta[list(names).index(name)] = float(value)
            except ValueError:
                raise InputError(f"theta {text!r}: feature {name!r}: {value.strip()!r} is not a number") from None
    if not np.isfinite(theta).all():
        raise InputError(f"theta {text!r}: weights must be finite numbers")
    return theta
