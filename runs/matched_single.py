"""``agora bench --matched-single``: the dev-chosen best member's extra samples, per task and question.

The claim "best multi-member method − the best single member at matched samples" compares a method
with that member's own plurality over as many of its own samples as the method used in total on the
question (:mod:`agora.traces.matched_single`). Its first ``k`` samples are its share of the shared
candidate pool; the run ``<bench>:<task>:matched-single`` (:mod:`agora.graphs.matched_single`) draws
the rest, after the task's other runs: per question, as many as the most samples any multi-member
method of the bench (:data:`MULTI_MEMBER`) used on it, less the member's shared ones, so whichever
method turns out best, the member can match it. A question runs once every other run of its task has
recorded it (:func:`ready_questions`), so the count never changes after its draw; the run resumes
like any run and is reused by ``--report-only``.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, Sequence

from agora.tasks.errors import InputError
from agora.graphs.candidates import CandidatesConfig, models_of
from agora.graphs.matched_single import MatchedSingleConfig
from agora.tasks.problem import Problem
from agora.traces.matched_single import MATCHED_RUN
from agora.traces.store import TraceStore

MULTI_MEMBER = ("align", "self_consistency", "best_of_n", "comed", "comed_routed", "moa", "debate", "council",
                "slm-mux", "mux_vote")
"""The multi-member methods the matched claim picks its best from (macro accuracy, every task): the
methods whose answer draws on more than one member's samples (ALIGN and its votes, COMED and its
routed variant, the dense collaborations, SLM-MUX's selection and its pooled vote). Not
``single_agent``, ``anchor``, ``router_only``, ``mux_top``, ``council_top``/``council_vote``: one
member's samples, or a council's by-products."""


def matched_config(shared: CandidatesConfig, member: str, names: Sequence[str]) -> MatchedSingleConfig:
    """The matched draw's settings: ``member`` and the shared draw's sampling, prompt and seed.

    Raises:
        ValueError: ``member`` is not one of the shared draw's members.
    """
    models = models_of(shared, list(names))
    if member not in models:
        raise InputError(f"--matched-single: member {member!r} is not in the shared draw ({', '.join(models)})")
    return MatchedSingleConfig(member=member, index=models.index(member), k_shared=shared.k,
                               temperature=shared.temperature, top_p=shared.top_p, max_tokens=shared.max_tokens,
                               shots=shared.shots, seed=shared.seed)


def needed_samples(store: TraceStore, runs: Mapping[str, str], methods: Mapping[str, str],
                   renames: Mapping[str, Mapping[str, str]], question_id: str) -> int:
    """The most samples any multi-member method of the bench used on ``question_id``: ``runs`` is the
    task's protocol → run id, ``methods`` the bench's method → protocol, ``renames`` its protocol →
    {recorded method → bench method} (0 when none is recorded)."""
    most = 0
    for protocol, run_id in runs.items():
        if protocol in ("candidates", MATCHED_RUN):
            continue
        names = renames.get(protocol, {})
        for r in store.db.query("select method, samples from results where run_id = ? and question_id = ?",
                                [run_id, question_id]):
            name = names.get(r["method"], r["method"])
            if name in MULTI_MEMBER and methods.get(name) == protocol and r["samples"]:
                most = max(most, int(r["samples"]))
    return most


def ready_questions(store: TraceStore, runs: Mapping[str, str], question_ids: Collection[str]) -> frozenset[str]:
    """The questions every run of the task but the matched one has recorded (a question one of
    them failed or has not reached yet waits for a later call)."""
    ready = set(question_ids)
    for protocol, run_id in runs.items():
        if protocol != MATCHED_RUN:
            ready &= set(store.finished_questions(run_id))
    return frozenset(ready)


def matched_inputs(store: TraceStore, shared: Callable[[Problem], dict[str, Any]], runs: Mapping[str, str],
                   methods: Mapping[str, str], renames: Mapping[str, Mapping[str, str]],
                   member: str) -> Callable[[Problem], dict[str, Any]]:
    """The matched run's per-question inputs: the shared candidates (``shared``, as
    :func:`agora.runs.shared.shared_inputs` gives them) and ``matched_extra``, the samples the member
    still needs to match :func:`needed_samples` beyond its shared ones."""

    def inputs(problem: Problem) -> dict[str, Any]:
        given = shared(problem)
        own = len((given.get("shared_candidates") or {}).get(member) or [])
        need = needed_samples(store, runs, methods, renames, problem.id)
        return {**given, "matched_extra": max(0, need - own)}

    return inputs
