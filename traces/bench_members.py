"""A bench's members and its pool's oracle: each member's row per task and the ceiling of any selection.

A pool **member** is a pool entry, weights × recipe (``qwen1.5b`` and ``qwen1.5b+pot`` are two members
on one weights file): everything here is grouped by the member's name, the ``model`` column of the
trace rows, never by the weights.

:func:`member_rows`, per task and member (and ``macro`` over the tasks a member has):

- ``accuracy`` (with ``ci_low``/``ci_high``): its **expected one-sample accuracy**, the mean over
  questions of the share of its samples in the bench's shared candidate pool that are right
  (``BenchData.single_values``; ALIGN's candidates for a bench without a shared pool);
- ``sc_accuracy`` (with ``sc_ci_low``/``sc_ci_high``, ``sc_questions``, ``sc_samples_per_q``): its
  **own self-consistency**, the plurality of its own share of the shared pool (the candidates run's
  ``sc:<member>`` method, ``BenchData.model_sc``); ``None`` without a shared pool.

:func:`pool_oracle`, per task (and ``macro``): the share of questions on which **any** member's
sample in the shared pool is right: the ceiling any per-question selection among the pool's
samples can reach (a selector that only picks one of these samples can do no better). Questions
with a gold answer and at least one sample; ``None`` rows without a shared pool.

Both read :class:`agora.traces.bench.BenchData` only (no store, no rendering); 95 % bootstrap CIs
(:func:`agora.agents.stats.bootstrap_ci`, stratified by task for ``macro``) with the report's seed.
"""

from __future__ import annotations

from typing import Any

from agora.agents.stats import bootstrap_ci, macro_bootstrap_ci
from agora.traces.report import too_few


def _tasks(spec: Any) -> list[str]:
    return [t.name for t in spec.tasks]


def _shared(spec: Any, task: str) -> bool:
    return any(t.name == task and "candidates" in t.runs for t in spec.tasks)


def member_rows(spec: Any, data: Any, seed: int = 0) -> list[dict[str, Any]]:
    """One row per task and member, then one ``macro`` row per member (mean of its per-task figures,
    stratified bootstrap CI; ``tasks`` says over how many tasks). Keys: ``task``, ``member``,
    ``questions``, ``accuracy``, ``ci_low``, ``ci_high``, ``too_few``, ``sc_questions``, ``sc_accuracy``,
    ``sc_ci_low``, ``sc_ci_high``, ``sc_too_few``, ``sc_samples_per_q`` (accuracies on the 0..1 scale;
    ``None`` for a self-consistency the bench has no shared pool for). Members in pool order where
    the bench's settings name the pool, else by name."""
    tasks = _tasks(spec)
    seen = {m for t in tasks for m in (data.single_values.get(t) or {})} | \
        {m for t in tasks for m in (data.model_sc.get(t) or {})}
    order = [m for m in (spec.settings or {}).get("pool") or [] if m in seen]
    members = order + sorted(seen - set(order))
    rows: list[dict[str, Any]] = []
    for t in tasks:
        for m in members:
            one = (data.single_values.get(t) or {}).get(m)
            sc = (data.model_sc.get(t) or {}).get(m)
            if not one and not sc:
                continue
            rows.append({"task": t, "member": m, **_one(list((one or {}).values()), seed), **_sc(sc, seed)})
    for m in members:
        ones = [list(((data.single_values.get(t) or {}).get(m) or {}).values()) for t in tasks]
        scs = [[c for c, _ in ((data.model_sc.get(t) or {}).get(m) or {}).values()] for t in tasks]
        acc, lo, hi = macro_bootstrap_ci(ones, seed=seed)
        sacc, slo, shi = macro_bootstrap_ci(scs, seed=seed)
        n, sn = sum(map(len, ones)), sum(map(len, scs))
        samples = [s for t in tasks for _, s in ((data.model_sc.get(t) or {}).get(m) or {}).values()]
        rows.append({"task": "macro", "member": m, "tasks": sum(1 for g in ones if g), "questions": n,
                     "accuracy": acc, "ci_low": lo, "ci_high": hi, "too_few": too_few(n, lo, hi),
                     "sc_questions": sn, "sc_accuracy": sacc if sn else None, "sc_ci_low": slo if sn else None,
                     "sc_ci_high": shi if sn else None, "sc_too_few": too_few(sn, slo, shi) if sn else None,
                     "sc_samples_per_q": sum(samples) / len(samples) if samples else None})
    return rows


def _one(values: list[float], seed: int) -> dict[str, Any]:
    acc, lo, hi = bootstrap_ci(values, seed=seed)
    return {"questions": len(values), "accuracy": acc, "ci_low": lo, "ci_high": hi,
            "too_few": too_few(len(values), lo, hi)}


def _sc(sc: dict[str, tuple[int, int]] | None, seed: int) -> dict[str, Any]:
    if not sc:
        return {"sc_questions": 0, "sc_accuracy": None, "sc_ci_low": None, "sc_ci_high": None, "sc_too_few": None,
                "sc_samples_per_q": None}
    right = [c for c, _ in sc.values()]
    acc, lo, hi = bootstrap_ci(right, seed=seed)
    return {"sc_questions": len(right), "sc_accuracy": acc, "sc_ci_low": lo, "sc_ci_high": hi,
            "sc_too_few": too_few(len(right), lo, hi),
            "sc_samples_per_q": sum(s for _, s in sc.values()) / len(sc)}


def oracle_outcomes(spec: Any, data: Any) -> dict[str, dict[str, int]]:
    """Task → question id → 1 when some member's sample in the shared pool is right, else 0 (tasks
    with a shared pool; questions with a gold answer and at least one member's sample)."""
    out: dict[str, dict[str, int]] = {}
    for t in _tasks(spec):
        if not _shared(spec, t):
            continue
        per: dict[str, int] = {}
        for values in (data.single_values.get(t) or {}).values():
            for q, share in values.items():
                per[q] = max(per.get(q, 0), int(share > 0))
        out[t] = per
    return out


def pool_oracle(spec: Any, data: Any, seed: int = 0) -> list[dict[str, Any]]:
    """The pool's oracle per task with a shared pool, then ``macro`` (mean of the per-task figures,
    stratified bootstrap CI) when every task has one: ``task``, ``questions``, ``accuracy``,
    ``ci_low``, ``ci_high``, ``too_few``, ``members`` (how many members drew). Empty without a shared pool."""
    outcomes = oracle_outcomes(spec, data)
    rows = []
    for t, per in outcomes.items():
        acc, lo, hi = bootstrap_ci(list(per.values()), seed=seed)
        rows.append({"task": t, "questions": len(per), "accuracy": acc, "ci_low": lo, "ci_high": hi,
                     "too_few": too_few(len(per), lo, hi), "members": len(data.single_values.get(t) or {})})
    if outcomes and len(outcomes) == len(spec.tasks):
        groups = [list(per.values()) for per in outcomes.values()]
        acc, lo, hi = macro_bootstrap_ci(groups, seed=seed)
        n = sum(map(len, groups))
        rows.append({"task": "macro", "questions": n, "accuracy": acc, "ci_low": lo, "ci_high": hi,
                     "too_few": too_few(n, lo, hi),
                     "members": len({m for t in outcomes for m in data.single_values.get(t) or {}})})
    return rows


def members_report(spec: Any, data: Any, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """What the bench report adds for its members: ``members`` (:func:`member_rows`) and
    ``pool_oracle`` (:func:`pool_oracle`)."""
    return {"members": member_rows(spec, data, seed), "pool_oracle": pool_oracle(spec, data, seed)}
