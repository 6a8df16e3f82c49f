"""The CUPID session driver: :func:`run_session` runs the selection graph (:mod:`agora.graphs.selection`)
with its checkpointer beside the trace DB, answers each ``ask_user`` interrupt through a ``choose``
callback (:data:`Chooser`), and records the session's model calls after every round with the graph
spec's ``record`` (:func:`agora.graphs.selection.record_session`); :func:`session_settings` reads back
the settings a session started with. ``agora select`` is this driver with a terminal (or simulated)
user::

    from agora.runs.selection import run_session
    from agora.traces import TraceStore

    def choose(duel, state):                      # duel: {"round", "prompt", "A", "B", "options"}
        for key in ("prompt", "A", "B"):
            print(f"{key}: {duel[key]}")
        return input("A, B or tie (empty: stop, continue later)? ") or None

    values = run_session(my_pool, TraceStore("agora.db"), "s1", {"config": {"budget_rounds": 10}}, choose,
                         prompts=["Write a haiku about rain."])   # the same call again resumes "s1"

Source: Nguyen, Liu, Senanayake, arXiv 2606.00846 (2026), reconstructed (see :mod:`agora.agents.cupid`).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict
from typing import Any, Callable, Mapping, Sequence

from langgraph.runtime import RunControl
from langgraph.types import Command

from agora.tasks.errors import InputError
from agora.agents.cupid import CupidConfig
from agora.agents.cupid_features import trace_features
from agora.agents.cupid_records import PromptItem, prompt_items
from agora.graphs.context import settings_from
from agora.graphs.question_workers import raise_if_drained
from agora.graphs.run_checkpoints import open_checkpointer
from agora.graphs.recorded_runs import recorded_run
from agora.graphs.selection import SPEC, SelectionContext, build_selection_graph
from agora.models.pool import ModelPool
from agora.traces.store import TraceStore


Chooser = Callable[[dict[str, Any], dict[str, Any]], "str | None"]
"""``choose(payload, values)``: the user's reply to one ``ask_user`` interrupt, ``"A"``, ``"B"`` or
``"tie"`` (anything :func:`agora.graphs.selection.parse_choice` reads; another reply asks again),
or ``None`` to stop the session here. ``payload`` is what the user may see (``round``, ``prompt``, ``A``, ``B``,
``options``, and ``error`` after an unreadable reply); ``values`` is the session's state, where a
simulated user finds who is shown as A and B (``values["duel"]["shown"]``)."""


def _thread(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def session_settings(store: TraceStore, thread_id: str) -> dict[str, Any] | None:
    """The ``settings`` session ``thread_id`` was started with (as given to :func:`run_session`, kept
    in its ``runs`` row), or ``None`` when the thread has no checkpoint yet: a new session.

    Raises:
        ValueError: the thread has a checkpoint (``<db>.checkpoints``) but ``store`` holds no
            ``cupid`` run of that id.
        TraceStoreError: the checkpoint file cannot be opened.
    """
    saver = open_checkpointer(store.path)
    try:
        values = build_selection_graph().compile(checkpointer=saver).get_state(_thread(thread_id)).values
    finally:
        saver.close()
    if not values:
        return None
    run = store.get_run(thread_id)
    if run is None or run["protocol"] != SPEC.name:
        raise InputError(f"thread {thread_id!r} has a checkpoint but no {SPEC.name} run in {store.path}")
    return store.run_config(thread_id)


def run_session(
    pool: ModelPool,
    store: TraceStore,
    thread_id: str,
    settings: Mapping[str, Any],
    choose: Chooser,
    *,
    prompts: Sequence[str | PromptItem] | None = None,
    features: Mapping[str, Mapping[str, float]] | None = None,
    dataset: Mapping[str, Any] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    control: RunControl | None = None,
) -> dict[str, Any]:
    """Run the CUPID session ``thread_id`` until it recommends a model or ``choose`` stops it,
    answering each ``ask_user`` interrupt with ``choose``; returns the session's state values
    (a :class:`~agora.graphs.selection.SelectionState`: ``recommendation`` in it once finished, ``round`` judged so far).

    The session's checkpoints live beside the trace DB (``<db>.checkpoints``, thread
    ``thread_id``); its row in ``runs`` has protocol ``cupid``, run id ``thread_id`` and
    ``settings`` as its config. After every round (and before an error propagates) the model
    calls in state are written by the spec's ``record`` (:func:`~agora.graphs.selection.record_session`).

    Resuming: a thread that has a checkpoint continues where it stopped, at its pending interrupt
    (the answers shown there are in state: nothing is generated twice); ``prompts`` and
    ``features`` are then ignored, and ``settings``, the pool's models and the dataset's path and
    format must be the stored ones (:func:`session_settings` gives the settings back; ``dataset``
    defaults to the stored one). A finished session returns its state at once.

    The row ends ``finished`` (summary: the recommendation), ``interrupted`` when ``choose``
    returns ``None`` (summary ``{"rounds", "stopped"}``), on Ctrl-C or a drain, or ``failed`` on
    an error (:func:`agora.graphs.recorded_runs.recorded_run`).

    Args:
        pool: the models to choose from (all of its members, in its order).
        store: the trace store; a file, so that a later call can resume (``":memory:"`` keeps
            neither the row nor the checkpoints from one call to the next).
        thread_id: the session's id: checkpoint thread and run id.
        settings: ``settings["config"]`` is the :class:`~agora.agents.cupid.CupidConfig` (or its
            fields as a dict); other keys are the caller's own, kept with the run (``agora
            select`` keeps its pool file, prompts file and simulated user there).
        choose: the user (:data:`Chooser`).
        prompts: a new session's prompts, one per round, cycling (strings or ``{"id", "text"}``).
        features: known model features (``acc:gsm8k``, ``latency_s``...); default: those measured
            in ``store`` (:func:`~agora.agents.cupid_features.trace_features`).
        dataset: described in the ``runs`` row (``path``, ``format``); ``count`` is added.
        on_event: called with each custom stream event of the graph (``measured``, ``pair``,
            ``judged``, ``recommend``...); before ``recommend`` none names the model behind A or B,
            so a UI may show them to the person judging.
        control: LangGraph's ``RunControl``: after ``request_drain()`` the session stops at its
            next step boundary (checkpointed) and ``GraphDrained`` is raised.

    Raises:
        ValueError: a new session without prompts, or with a bad prompt; fewer than two models;
            bad settings; a rerun refused by ``TraceStore.start_run`` (another protocol, settings,
            pool or dataset), or a checkpoint without its run (:func:`session_settings`).
        GraphDrained, KeyboardInterrupt: the session stopped; rerun with the same ``thread_id``.
        ModelCallError: a model failed after its retries (the pool's errors propagate).
    """
    config = settings_from(settings.get("config"), CupidConfig)
    settings = {**settings, "config": asdict(config)}
    stored = session_settings(store, thread_id)
    resumed = stored is not None
    if resumed:
        run_row = store.get_run(thread_id) or {}
        dataset = dict(dataset) if dataset is not None else json.loads(run_row.get("dataset") or "null") or {}
        command: Any = None
    else:
        if prompts is None:
            raise InputError(f"session {thread_id!r} is new: it needs prompts")
        prompts = list(prompts)
        count = len(prompt_items(prompts))  # a bad prompt is refused before the run's row is written
        arms = pool.names
        given = trace_features(store, arms) if features is None else {m: dict(v) for m, v in features.items()}
        dataset = {**(dataset or {}), "count": count}
        command = {"prompts": prompts, "models": arms, "features": given}
    context = SelectionContext(pool=pool, config=config)
    thread = _thread(thread_id)
    with recorded_run(store, thread_id, SPEC.name, config=settings, pool=pool.describe(), dataset=dataset) as run:
        graph = build_selection_graph().compile(checkpointer=run.saver)
        values: dict[str, Any] = graph.get_state(thread).values
        run.progress = lambda: {"rounds": values.get("round", 0)}
        def steps_left(snap: Any) -> bool:
            # (a step that finished but was not yet applied, e.g. stopped by Ctrl-C right after it, has
            # its writes saved and shows in ``tasks``, not in ``next``: streaming on applies them)
            return bool(snap.next or snap.tasks)

        while True:
            if command is not None or steps_left(graph.get_state(thread)):
                raise_if_drained(control)
                try:
                    for event in graph.stream(command, thread, context=context, stream_mode="custom",
                                              control=control):
                        if on_event is not None:
                            on_event(event)
                except BaseException:  # Ctrl-C, a drain, an error: keep the calls made so far
                    with contextlib.suppress(Exception):
                        values = graph.get_state(thread).values
                        SPEC.record(store, thread_id, values)
                    raise
            snapshot = graph.get_state(thread)
            values = snapshot.values
            SPEC.record(store, thread_id, values)
            if not steps_left(snapshot):
                run.finish(values.get("recommendation"))
                return values
            if not snapshot.interrupts:  # steps left over from a crash: run them
                command = None
                continue
            choice = choose(snapshot.interrupts[0].value, values)
            if choice is None:
                run.finish({"rounds": values.get("round", 0), "stopped": "no choice"}, status="interrupted")
                return values
            command = Command(resume=choice)
