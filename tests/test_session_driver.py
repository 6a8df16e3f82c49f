"""The run drivers' shared run handling and CUPID's session driver (issue 17 item 2):
``graphs.recorded_runs.recorded_run`` (checkpointer, ``start_run`` refusals, final statuses) and
``runs.selection.run_session`` (a scripted ``choose``, a ``None`` choice that stops cleanly, resuming
at the pending interrupt, the run row's status), with scripted models."""

import json

import pytest
from langgraph.errors import GraphDrained

from agora.models.pool import ModelPool, ModelSpec, PoolMember
from agora.models.testing import ScriptedChatModel
from agora.graphs import registry
from agora.graphs.recorded_runs import recorded_run
from agora.graphs.selection import record_session
from agora.runs.selection import run_session, session_settings
from agora.traces.store import TraceStore, TraceStoreError

LATENCIES = {"fast": 0.5, "mid": 1.0, "slow": 2.0, "slowest": 3.0}
PROMPTS = [{"id": f"q{i}", "text": f"Prompt number {i}"} for i in range(3)]
SETTINGS = {"config": {"budget_rounds": 4, "delta": 0.001}, "note": "kept with the run"}


def scripted_pool() -> tuple[ModelPool, dict[str, ScriptedChatModel]]:
    """Models answering ``"<name> answers"`` with stated latencies (nothing measured)."""
    models = {m: ScriptedChatModel(respond=lambda chat, i, m=m: f"{m} answers") for m in LATENCIES}
    members = [PoolMember(ModelSpec(m, "openai", extra={"features": {"latency_s": lat}}), models[m])
               for m, lat in LATENCIES.items()]
    return ModelPool(members), models


class Script:
    """A ``choose`` that replies from a list and keeps every payload it was shown; past the list's
    end it stops the session (``None``)."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.payloads = []

    def __call__(self, payload, values):
        self.payloads.append(payload)
        return self.replies.pop(0) if self.replies else None


def n_calls(models) -> int:
    return sum(len(m.calls) for m in models.values())


def test_scripted_choices_run_the_session_to_its_recommendation(tmp_path):
    pool, models = scripted_pool()
    store = TraceStore(tmp_path / "t.db")
    choose = Script("A", "B", "tie", "A")
    events = []
    values = run_session(pool, store, "s", SETTINGS, choose, prompts=PROMPTS, features={},
                         dataset={"path": "p.jsonl", "format": "prompts"}, on_event=events.append)
    assert [h["choice"] for h in values["history"]] == ["A", "B", "tie", "A"]
    assert [p["round"] for p in choose.payloads] == [1, 2, 3, 4]
    assert values["recommendation"]["rounds"] == 4 and values["recommendation"]["stop_reason"] == "rounds"
    assert {"pair", "generated", "judged", "recommend"} <= {e["event"] for e in events}
    run = store.get_run("s")
    assert run["protocol"] == "cupid" and run["status"] == "finished"
    assert json.loads(run["summary"]) == values["recommendation"]
    assert json.loads(run["config"]) == {**SETTINGS, "config": json.loads(run["config"])["config"]}
    assert json.loads(run["config"])["config"]["budget_rounds"] == 4  # the whole CupidConfig is kept
    assert json.loads(run["dataset"]) == {"path": "p.jsonl", "format": "prompts", "count": 3}
    # every call traced under its prompt, each judged duel in its prompt's detail
    assert store.db["model_calls"].count == n_calls(models) == len(values["calls"]) > 0
    rows = {q["question_id"]: json.loads(q["detail"])["duels"] for q in store.questions("s")}
    assert sorted(d["round"] for duels in rows.values() for d in duels) == [1, 2, 3, 4]
    assert all(d["prompt_id"] == qid for qid, duels in rows.items() for d in duels)


def test_a_none_choice_stops_cleanly_and_the_rerun_resumes_at_the_pending_interrupt(tmp_path):
    pool, models = scripted_pool()
    store = TraceStore(tmp_path / "t.db")
    first = Script("A", "B")  # then None at round 3
    values = run_session(pool, store, "s", SETTINGS, first, prompts=PROMPTS, features={})
    assert values["round"] == 2 and "recommendation" not in values
    run = store.get_run("s")
    assert run["status"] == "interrupted" and json.loads(run["summary"]) == {"rounds": 2, "stopped": "no choice"}
    assert store.db["model_calls"].count == n_calls(models)  # round 3's answers, generated, are traced
    calls_before, pending, generated = n_calls(models), first.payloads[-1], set(values["generations"])
    assert pending["round"] == 3

    settings = session_settings(store, "s")
    assert settings["note"] == "kept with the run" and settings["config"]["budget_rounds"] == 4
    second = Script("tie", "B")
    values = run_session(pool, store, "s", settings, second, prompts=None)  # prompts: not needed to resume
    assert second.payloads[0] == pending  # the same duel, the same answers, shown again
    assert [h["choice"] for h in values["history"]] == ["A", "B", "tie", "B"]
    assert values["recommendation"]["rounds"] == 4
    # round 3 was not generated again: the only new calls are round 4's new answers
    assert n_calls(models) - calls_before == len(set(values["generations"]) - generated)
    assert store.db["model_calls"].count == n_calls(models)
    assert store.get_run("s")["status"] == "finished"
    # a finished session returns its state at once, asking nobody
    again = Script()
    assert run_session(pool, store, "s", settings, again)["recommendation"] == values["recommendation"]
    assert again.payloads == [] and store.get_run("s")["status"] == "finished"


def test_an_unreadable_reply_is_asked_again_with_the_error(tmp_path):
    pool, _ = scripted_pool()
    choose = Script("maybe", "A")
    values = run_session(pool, TraceStore(tmp_path / "t.db"), "s", {"config": {"budget_rounds": 1}}, choose,
                         prompts=["Say hi."], features={})
    assert [p["round"] for p in choose.payloads] == [1, 1]
    assert "error" not in choose.payloads[0] and choose.payloads[1]["error"] == "expected A, B or tie, got 'maybe'"
    assert [h["choice"] for h in values["history"]] == ["A"]


def test_ctrl_c_in_choose_marks_the_run_interrupted_and_keeps_the_calls(tmp_path):
    pool, models = scripted_pool()
    store = TraceStore(tmp_path / "t.db")

    def choose(payload, values):
        if payload["round"] == 2:
            raise KeyboardInterrupt
        return "A"

    with pytest.raises(KeyboardInterrupt):
        run_session(pool, store, "s", SETTINGS, choose, prompts=PROMPTS, features={})
    run = store.get_run("s")
    assert run["status"] == "interrupted" and json.loads(run["summary"]) == {"rounds": 1, "error": "KeyboardInterrupt: "}
    assert store.db["model_calls"].count == n_calls(models) > 0
    values = run_session(pool, store, "s", SETTINGS, Script("B", "B", "B"))
    assert [h["choice"] for h in values["history"]] == ["A", "B", "B", "B"]
    assert store.get_run("s")["status"] == "finished"


def test_an_error_marks_the_run_failed_and_a_drain_interrupted(tmp_path):
    from langgraph.runtime import RunControl

    pool, _ = scripted_pool()
    store = TraceStore(tmp_path / "t.db")

    def broken(payload, values):
        raise RuntimeError("no user")

    with pytest.raises(RuntimeError, match="no user"):
        run_session(pool, store, "s", SETTINGS, broken, prompts=PROMPTS, features={})
    run = store.get_run("s")
    assert run["status"] == "failed" and json.loads(run["summary"])["error"] == "RuntimeError: no user"

    control = RunControl()

    def drain(payload, values):
        control.request_drain("test")
        return "A"

    with pytest.raises(GraphDrained):
        run_session(pool, store, "s", SETTINGS, drain, control=control)
    assert store.get_run("s")["status"] == "interrupted"
    values = run_session(pool, store, "s", SETTINGS, Script("A", "A", "A", "A"))
    assert values["recommendation"]["rounds"] == 4 and values["history"][0]["choice"] == "A"


def test_refusals_leave_no_row_or_the_stored_row_as_it_was(tmp_path):
    pool, models = scripted_pool()
    store = TraceStore(tmp_path / "t.db")
    with pytest.raises(ValueError, match="'s' is new: it needs prompts"):
        run_session(pool, store, "s", SETTINGS, Script())
    assert store.get_run("s") is None
    with pytest.raises(ValueError, match=r"prompts\[0\]: expected a non-empty string"):
        run_session(pool, store, "s", SETTINGS, Script(), prompts=[""])
    assert store.get_run("s") is None and n_calls(models) == 0

    run_session(pool, store, "s", SETTINGS, Script("A"), prompts=PROMPTS, features={})
    other = {**SETTINGS, "config": {"budget_rounds": 9}}
    with pytest.raises(ValueError, match="was started with other settings"):
        run_session(pool, store, "s", other, Script("A"))
    assert store.get_run("s")["status"] == "interrupted"

    store.start_run("align-run", "align", config={}, pool=[], dataset={})
    with pytest.raises(ValueError, match="already holds a align run"):
        run_session(pool, store, "align-run", SETTINGS, Script(), prompts=PROMPTS, features={})


def test_a_checkpoint_without_its_run_is_refused(tmp_path):
    pool, _ = scripted_pool()
    store = TraceStore(tmp_path / "t.db")
    run_session(pool, store, "s", SETTINGS, Script(), prompts=PROMPTS, features={})
    store.db.execute("delete from runs")
    store.db.conn.commit()
    with pytest.raises(ValueError, match="thread 's' has a checkpoint but no cupid run"):
        session_settings(store, "s")
    assert session_settings(store, "new") is None


def test_the_cupid_spec_records_with_record_session():
    spec = registry.get("cupid")
    assert spec.kind == "interactive" and spec.record is record_session
    assert registry.get("duel").record.__name__ == "record_duel"


# ---------------------------------------------------------------------------- recorded_run


def test_recorded_run_writes_the_final_status(tmp_path):
    store = TraceStore(tmp_path / "t.db")
    with recorded_run(store, "a", "align", config={}, pool=[], dataset={}) as run:
        assert not run.resumed and store.get_run("a")["status"] == "running"
        assert run.saver.get_tuple({"configurable": {"thread_id": "x"}}) is None
    assert store.get_run("a")["status"] == "finished" and store.get_run("a")["summary"] == "null"

    with recorded_run(store, "a", "align", config={}, pool=[], dataset={}) as run:
        assert run.resumed
        run.finish({"questions": 3, "later": 1}, status="partial")
    assert store.get_run("a")["status"] == "partial"
    assert json.loads(store.get_run("a")["summary"]) == {"questions": 3, "later": 1}

    for exc, status in ((RuntimeError("boom"), "failed"), (KeyboardInterrupt(), "interrupted"),
                        (GraphDrained("interrupted"), "interrupted")):
        with pytest.raises(type(exc)):
            with recorded_run(store, "a", "align", config={}, pool=[], dataset={}) as run:
                run.progress = lambda: {"questions": 3, "recorded": 1}
                raise exc
        row = store.get_run("a")
        assert row["status"] == status, exc
        assert json.loads(row["summary"]) == {"questions": 3, "recorded": 1, "error": f"{type(exc).__name__}: {exc}"}

    with pytest.raises(RuntimeError):  # an error after finish() leaves the finished row as it is
        with recorded_run(store, "a", "align", config={}, pool=[], dataset={}) as run:
            run.finish({"questions": 3})
            raise RuntimeError("late")
    assert store.get_run("a")["status"] == "finished"


def test_recorded_run_refusals_touch_no_row(tmp_path):
    store = TraceStore(tmp_path / "t.db")
    store.start_run("a", "align", config={"n": 1}, pool=[], dataset={})
    store.finish_run("a", status="interrupted")
    with pytest.raises(ValueError, match="was started with other settings"):
        with recorded_run(store, "a", "align", config={"n": 2}, pool=[], dataset={}):
            pytest.fail("the block must not run")
    assert store.get_run("a")["status"] == "interrupted"

    (tmp_path / "bad.db.checkpoints").write_text("not a database")
    bad = TraceStore(tmp_path / "bad.db")
    with pytest.raises(TraceStoreError):
        with recorded_run(bad, "b", "align", config={}, pool=[], dataset={}):
            pytest.fail("the block must not run")
    assert bad.get_run("b") is None  # the checkpointer is opened before the row is written


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this test, as in a terminal (a background job, e.g. CI started
    with ``&``, inherits SIGINT ignored)."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_a_session_stopped_right_after_a_finished_step_continues_on_the_rerun(tmp_path, ctrl_c_raises):
    """Ctrl-C while a step runs in a worker thread: LangGraph may let the step finish and save its writes
    without moving the checkpoint on, so the state shows no ``next`` step but a ``task`` with its result.
    The rerun must apply those writes and go on to the recommendation (it used to call the session
    finished, with no recommendation, for ever: probe 14). Whether the step finishes before the
    interrupt lands is up to the threads, so the stop is repeated (fresh DBs) until it does."""
    import os
    import signal
    import threading

    from agora.graphs.run_checkpoints import open_checkpointer
    from agora.runs.selection import _thread, build_selection_graph

    taken = threading.Event()  # the main thread has taken the Ctrl-C

    def on_sigint(signum, frame):
        taken.set()
        raise KeyboardInterrupt

    def stopper(fired):
        # One per attempt, bound to its models: a step of an earlier attempt still running in a worker
        # thread must not send a second Ctrl-C into a later attempt (it did when the models looked the
        # function up by name at call time, and the test run then stopped on a stray KeyboardInterrupt).
        def respond(chat, i, m):
            if not fired and threading.current_thread() is not threading.main_thread():
                fired.append(m)
                taken.clear()
                os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, delivered to the main thread
                taken.wait(30)  # ... while this step still runs
            return f"{m} answers"
        return respond

    signal.signal(signal.SIGINT, on_sigint)  # (ctrl_c_raises puts the previous handler back)

    for attempt in range(12):
        respond = stopper([])
        models = {m: ScriptedChatModel(respond=lambda chat, i, m=m, respond=respond: respond(chat, i, m))
                  for m in LATENCIES}
        pool = ModelPool([PoolMember(ModelSpec(m, "openai"), models[m]) for m in LATENCIES])  # no features: measured
        store = TraceStore(tmp_path / f"t{attempt}.db")
        try:  # (a step run in the main thread fails on the interrupt instead: tried again)
            run_session(pool, store, "s", SETTINGS, Script("A"), prompts=PROMPTS)
        except KeyboardInterrupt:
            pass
        saver = open_checkpointer(store.path)
        snap = build_selection_graph().compile(checkpointer=saver).get_state(_thread("s"))
        saver.close()
        if not snap.next and snap.tasks:  # the bug's state: a finished step, not yet applied
            break
    else:
        pytest.skip("the interrupt never landed after the measuring step finished")
    values = run_session(pool, store, "s", session_settings(store, "s"), Script(), prompts=None)
    # (scripted models measure alike, so CUPID is confident at once: the recommendation comes at round 0)
    assert values["recommendation"]["stop_reason"] == "confident" and values["recommendation"]["rounds"] == 0
    run = store.get_run("s")
    assert run["status"] == "finished" and json.loads(run["summary"]) == values["recommendation"]
