"""The duel driver: :func:`run_duels` plays ``T`` iterations of ``D`` duels of the duel graph
(:mod:`agora.graphs.duel`) and writes each duel to the trace store (:mod:`agora.traces.duels`) once it
finished.

The state carried from duel to duel (reputations, leader weights, duel counter) is read back from the
store, so a rerun with the same run id resumes after the last recorded duel. Duel ids are
``<run_id>:<iteration>:<index>`` and all random draws are seeded by ``(seed, iteration, index)``, so a
resumed run plays the same duels as an uninterrupted one. A duel interrupted mid-way resumes from its
checkpoint (``<db>.checkpoints``, thread = duel id: a follower that answered is not asked again).

Sources: Jiang et al., arXiv 2506.04721 (Sparta); Hahn et al., arXiv 2609.39076 (Stackelberg).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from langgraph.runtime import RunControl

from agora.tasks.errors import InputError
from agora.agents.duel_records import DuelRecord
from agora.graphs.duel import SPEC, DuelContext, build_duel_graph, duel_pool
from agora.graphs.question_workers import raise_if_drained
from agora.graphs.recorded_runs import recorded_run
from agora.models.pool import ModelCallError
from agora.traces import duels as duel_traces
from agora.traces.store import TraceStore


@dataclass
class DuelRunOutcome:
    run_id: str
    resumed: bool
    skipped: int
    """Duels already recorded before this call."""
    records: list[DuelRecord] = field(default_factory=list)
    """Duels played by this call."""


def run_duels(
    store: TraceStore,
    run_id: str,
    context: DuelContext,
    *,
    dataset: dict[str, Any] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    on_duel: Callable[[DuelRecord], None] | None = None,
    control: RunControl | None = None,
    pool_may_change: bool = False,
) -> DuelRunOutcome:
    """Play ``T × D`` duels (``context.config``), recording each in ``store`` as it finishes.

    A rerun with the same ``run_id`` continues after the last recorded duel, from the stored
    reputations and leader weights; a duel that was interrupted resumes from its checkpoint
    (``<db>.checkpoints``, thread = duel id).

    Args:
        store: the trace store; context: pool, settings, instructions.
        dataset: described in the ``runs`` row (path, format, ...).
        on_event: called with each custom stream event; on_duel: after each recorded duel.
        control: LangGraph's ``RunControl``: after ``request_drain()`` the running duel stops at
            its next step boundary (checkpointed) and no new duel starts.
        pool_may_change: resuming with other pool members is allowed (``agora evolve``: the
            members of a later iteration carry trained adapters); otherwise it is refused.

    Raises:
        GraphDrained: the run stopped because ``control`` asked it to; rerun to resume.
        ValueError: a pool under 3 members, no instructions, or a rerun whose settings or
            instructions differ from the stored run's.
        ModelCallError: a model failed after retries; its failed attempts are stored and a rerun
            resumes the duel.
    """
    cfg = context.config
    pool = duel_pool(context.pool)
    problems = list(context.instructions)
    if not problems:
        raise InputError("no instructions to duel on")
    config = cfg.describe(len(problems))
    fingerprint = duel_traces.instruction_fingerprint([p.id for p in problems])
    dataset = {**(dataset or {}), "count": len(problems), "fingerprint": fingerprint}
    with recorded_run(store, run_id, cfg.mode, config=config, pool=pool.describe(), dataset=dataset,
                      pool_may_change=pool_may_change) as run:
        if run.resumed:
            duel_traces.check_same_run(store, run_id, config, fingerprint)
        duel_traces.create_tables(store)
        saved = duel_traces.load_state(store, run_id, cfg.reputation.window)
        outcome = DuelRunOutcome(run_id=run_id, resumed=run.resumed, skipped=len(saved.done))
        reputation, leader, number = saved.reputation, saved.leader, saved.duels
        run.progress = lambda: {"duels": number}  # an error or a stop: the row says how many were played
        ctx = DuelContext(pool=pool, config=cfg, instructions=problems)
        compiled = build_duel_graph().compile(checkpointer=run.saver)
        for t in range(cfg.iterations):
            for d in range(cfg.duels):
                duel_id = f"{run_id}:{t}:{d}"
                if duel_id in saved.done:
                    continue
                raise_if_drained(control)
                thread = {"configurable": {"thread_id": duel_id}}
                snapshot = compiled.get_state(thread)
                # Send branches (respond, judge) show up in ``tasks``, not ``next``; a duel is
                # finished only once ``record`` is in its state.
                pending = bool(snapshot.next) or bool(snapshot.tasks)
                if pending or "record" not in snapshot.values:
                    inp = None if pending else {"run_id": run_id, "iteration": t, "index": d,
                                                "duel_number": number, "reputation": reputation,
                                                "leader": leader}
                    try:
                        for _ns, mode, chunk in compiled.stream(inp, thread, context=ctx, control=control,
                                                                stream_mode=["custom", "updates"], subgraphs=True):
                            if mode == "custom" and on_event is not None:
                                on_event({"duel_id": duel_id, **chunk})
                    except ModelCallError as exc:
                        duel_traces.record_calls(store, run_id, cfg.mode, duel_id, exc.records)
                        raise
                values = compiled.get_state(thread).values
                rec = values["record"]
                SPEC.record(store, rec, values.get("calls") or [])  # duel_traces.record_duel
                run.saver.delete_thread(duel_id)
                reputation, leader, number = values["reputation"], values["leader"], number + 1
                outcome.records.append(rec)
                if on_duel is not None:
                    on_duel(rec)
        run.finish(duel_traces.summary(store, run_id))
    return outcome
