"""The bench's shared candidate pool and its fair configuration (the same candidates for every
method, and the best single model chosen on dev).

:mod:`agora.runs.bench` draws, per question, k samples from every pool model once (the run
``<bench>:<task>:candidates`` of :func:`agora.graphs.candidates.build_candidates_graph`) and hands them
to every protocol run of that task as the graph input ``shared_candidates``
(:func:`shared_inputs`). With a dev split it draws the same pool on the dev questions first
(``<bench>:<scope>:candidates-dev``), picks the **best single model** there (:func:`best_on_dev`:
the highest expected one-sample accuracy, never on a test question), makes it COMED's fixed anchor
and ``single_agent``'s model, and trains the kNN router of ``comed_routed`` on that run's traces
(:func:`dev_router`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Sequence

from agora.tasks.errors import InputError
from agora.agents.debate import agent_models
from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig
from agora.agents.router import KNNRouter, RouterExample
from agora.graphs.candidates import CandidatesConfig, shared_from_rows
from agora.tasks.problem import Problem
from agora.tasks.scoring import score_answer
from agora.traces.store import TraceStore

#: The key a protocol run's recorded settings carry when it took the shared candidates: a bench id
#: whose runs lack it drew their own samples (first edition) and is refused (:func:`check_edition`).
SHARED_KEY = "shared_candidates"


def candidates_config(align: DelegationConfig | None, comed: EscalationConfig | None, pool_names: Sequence[str],
                      baselines: Sequence[str] = (), anchor: bool = True) -> CandidatesConfig:
    """The shared draw's settings: the protocols' common sampling settings, and k large enough for
    every protocol that takes its first samples from it (per model: ALIGN's agents on it × k,
    COMED's N, MoA's proposers on it, debate's agents on it). ``anchor``: whether COMED's own
    methods run (its anchor's N samples count); ``False`` when only its dense baselines do.

    Raises:
        ValueError: the protocols sample with different settings (temperature, top_p, max_tokens,
            shots, seed): one pool could not honestly stand for both (names the field and values).
    """
    given = [c for c in (align, comed) if c is not None]
    if not given:
        raise InputError("shared candidates: no protocol of the bench starts from independent samples")
    for name in ("temperature", "top_p", "max_tokens", "shots", "seed"):
        values = {getattr(c, name, None) for c in given}
        if len(values) > 1:
            raise InputError(f"shared candidates: ALIGN and COMED sample with different {name} ({sorted(map(str, values))}); "
                             "one candidate pool must be drawn with one setting: give both the same")
    names = list(pool_names)
    need = Counter()
    if align is not None:
        models = list(align.models) or names
        per = Counter(models[i % len(models)] for i in range(align.n_agents))
        need.update({m: 0 for m in names})
        for m, n in per.items():
            need[m] = max(need[m], n * align.k_samples)
    if comed is not None:
        for m in names:
            need[m] = max(need[m], comed.n_anchor if anchor else 0)
        if "debate" in baselines:
            for m, n in Counter(agent_models(comed.debate_config(), names)).items():
                need[m] = max(need[m], n)
        if "moa" in baselines:
            for m, n in Counter(comed.moa_config().proposers or names).items():
                need[m] = max(need[m], n)
    first = given[0]
    return CandidatesConfig(k=max(need.values(), default=1) or 1, models=tuple(names), temperature=first.temperature,
                            top_p=getattr(first, "top_p", 1.0), max_tokens=first.max_tokens, shots=first.shots,
                            seed=first.seed)


def candidate_rows(store: TraceStore, run_id: str, question_id: str | None = None) -> list[dict[str, Any]]:
    """The shared draw's ``model_calls`` rows (node ``candidates``) of a run, or of one question."""
    sql = "select * from model_calls where run_id = ? and node = 'candidates'"
    args: list[Any] = [run_id]
    if question_id is not None:
        sql += " and question_id = ?"
        args.append(question_id)
    return list(store.db.query(sql + " order by model, sample_index", args))


def shared_inputs(store: TraceStore, run_id: str) -> Callable[[Problem], dict[str, Any]]:
    """The ``inputs`` of :func:`agora.graphs.runner.run_problems` for a protocol run: each question's
    ``shared_candidates`` read from the candidates run ``run_id`` (nothing for a question whose draw
    failed or has not run: its protocols then draw their own samples)."""

    def inputs(problem: Problem) -> dict[str, Any]:
        shared = shared_from_rows(candidate_rows(store, run_id, problem.id))
        return {"shared_candidates": shared} if shared else {}

    return inputs


def model_accuracy(store: TraceStore, run_id: str, question_ids: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    """Model → question id → the share of its shared samples that are right (its expected
    one-sample accuracy on that question), from a candidates run's rows and its questions' gold."""
    keep = None if question_ids is None else set(question_ids)
    gold = {q["question_id"]: q for q in store.questions(run_id)}
    by: dict[str, dict[str, list[bool]]] = {}
    for r in candidate_rows(store, run_id):
        q = gold.get(r["question_id"])
        if r["error"] or q is None or q["gold"] is None or (keep is not None and r["question_id"] not in keep):
            continue
        by.setdefault(r["model"], {}).setdefault(r["question_id"], []).append(
            bool(score_answer(r["answer"], q["gold"], q["kind"] or "math")))
    return {m: {q: sum(v) / len(v) for q, v in per.items()} for m, per in by.items()}


def best_on_dev(store: TraceStore, run_id: str, models: Sequence[str]) -> tuple[str, dict[str, float]]:
    """The best single model on a dev candidates run: the highest mean expected one-sample accuracy
    over its dev questions (ties: pool order), with every model's mean.

    Raises:
        ValueError: no scored dev question (nothing to choose on).
    """
    acc = model_accuracy(store, run_id)
    means = {m: sum(acc[m].values()) / len(acc[m]) for m in models if acc.get(m)}
    if not means:
        raise InputError(f"{run_id}: no dev question with a gold answer and a shared sample: cannot choose the "
                         "best single model on dev")
    best = max(models, key=lambda m: (means.get(m, -1.0), -list(models).index(m)))
    return best, means


def dev_router(store: TraceStore, run_id: str, models: Sequence[str], *, k: int = 5,
               embedding: str = "auto") -> KNNRouter:
    """``comed_routed``'s kNN router, trained on the dev candidates run only (every model's solo
    answers on the dev questions): never a test question. A member of ``models`` with no scored dev
    answer (every one of its dev calls failed) is left out: the router ranks the others, and
    ``router.models`` lists those it ranks (in ``models``' order).

    Raises:
        ValueError: fewer than two members have a scored dev answer (nothing to route between),
            naming those without one.
    """
    questions = {q["question_id"]: q["question"] for q in store.questions(run_id)}
    examples = [RouterExample(questions[q], m, a) for m, per in model_accuracy(store, run_id).items()
                for q, a in sorted(per.items()) if q in questions]
    ranked = [m for m in models if any(e.model == m for e in examples)]
    if len(ranked) < 2:
        silent = [m for m in models if m not in ranked]
        raise InputError(f"{run_id}: the routed anchor needs two members with a scored dev answer; "
                         f"{', '.join(ranked) or 'none'} {'has' if len(ranked) == 1 else 'have'} one, "
                         f"{', '.join(silent)} none (every dev call failed): make those members answer "
                         "(their failed calls are in the dev run's traces) and rerun with the same --run-id")
    return KNNRouter(examples, ranked, k=k, embedding=embedding)  # type: ignore[arg-type]


def check_edition(store: TraceStore, run_ids: Sequence[str], shared: bool) -> None:
    """Refuse to resume a bench whose existing protocol runs were made the other way (with or
    without shared candidates), with a message naming why and what to do.

    Raises:
        ValueError: naming the first such run.
    """
    for run_id in run_ids:
        config = store.run_config(run_id)
        if config is None:
            continue
        had = SHARED_KEY in config
        if had != shared:
            bench = run_id.split(":", 1)[0]
            if shared:
                raise InputError(f"bench {bench!r} was run before shared candidates: its run {run_id} drew "
                                 "its own samples; resume it with --no-shared-candidates, or start a new --run-id")
            raise InputError(f"bench {bench!r} was run with shared candidates: its run {run_id} took them; resume it "
                             "with --shared-candidates, or start a new --run-id")
