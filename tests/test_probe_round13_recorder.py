"""Traces you can trust from inside an app (round 13 probes): a recorder given no ``pool=`` is refused
before any model is asked, question ids that differ only by white space or by Unicode compatibility
forms (NFKC) are refused as one id, a late branch's samples are written once; and the training
commands' refusals of ``--seed`` and of GRPO's group size name their options. Models are the user's own
``ChatOpenAI`` clients on the loopback OpenAI stub (tests/openai_stub.py); nothing real is loaded."""

import json

import pytest
from typer.testing import CliRunner

from agora.cli.main import app
from test_cli_training_options import fake_pool, lines

# ------------------------------------------------------------------ --seed and GRPO's group size


def _evolve(tmp_path, monkeypatch, *flags):
    import agora.cli.evolve as evolve_cli

    monkeypatch.setattr(evolve_cli, "require_train_extra", lambda: None, raising=False)  # as with the extra installed
    instructions = tmp_path / "i.jsonl"
    instructions.write_text(json.dumps({"id": "i1", "prompt": "2+3?"}) + "\n")
    return CliRunner().invoke(app, ["evolve", "--instructions", str(instructions), "--pool", str(fake_pool(tmp_path)),
                                    "--db", str(tmp_path / "t.db"), "--out", str(tmp_path / "o"), *flags])


def _train_grpo(tmp_path, *flags):
    return CliRunner().invoke(app, ["train", "grpo", "--model", "a", "--pool", str(fake_pool(tmp_path)), "--data",
                                    "synthetic", "--data-only", "--out", str(tmp_path / "o"), *flags])


SEED_REFUSED = ("error: --seed: {cls}.seed must be an integer in [0, 4294967295] (numpy's and torch's seeds are "
                "32-bit), got 4294967296")


def test_an_evolve_seed_beyond_32_bits_is_refused_before_any_duel(tmp_path, monkeypatch):
    """Before: the duels were played and recorded, then training's ``set_seed`` failed inside numpy
    (``Seed must be between 0 and 2**32 - 1``)."""
    result = _evolve(tmp_path, monkeypatch, "--seed", str(2**32))
    assert result.exit_code == 2, result.output
    assert lines(result) == [SEED_REFUSED.format(cls="DPOSettings")]
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "o").exists()


def test_a_train_seed_beyond_32_bits_is_the_same_one_line_refusal(tmp_path):
    """Before: Typer's usage box (``Input should be less than or equal to 4294967295``), unlike evolve's."""
    result = _train_grpo(tmp_path, "--seed", str(2**32))
    assert result.exit_code == 2, result.output
    assert lines(result) == [SEED_REFUSED.format(cls="GRPOSettings")]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
def test_training_settings_refuse_a_seed_numpy_cannot_take(seed):
    from agora.training.config import DPOSettings, GRPOSettings, SFTSettings

    for cls in (DPOSettings, GRPOSettings, SFTSettings):
        with pytest.raises(ValueError, match=rf"^seed must be an integer in \[0, 4294967295\] .*, got {seed}$"):
            cls(seed=seed)
    assert DPOSettings(seed=2**32 - 1).seed == 2**32 - 1


def test_the_seeds_of_run_and_bench_protocols_take_any_integer():
    """``agora run`` and ``agora bench`` mix their ``--seed`` into each call's seed modulo 2**31 - 1
    (:func:`agora.agents.seeds.item_seed`): a seed beyond 32 bits is a seed, not refused."""
    from agora.agents.delegation import DelegationConfig
    from agora.agents.seeds import SEED_MODULUS, item_seed

    assert DelegationConfig(seed=2**64).seed == 2**64
    assert 0 <= item_seed(2**64, "q1") < SEED_MODULUS and 0 <= item_seed(-(2**64), "q1") < SEED_MODULUS


GROUPS_REFUSED = ("error: --batch-size, --grad-accum, --num-generations: GRPOSettings: batch_size × grad_accum "
                  "(3 × 1) must be divisible by num_generations ({g})")


@pytest.mark.parametrize("flags, g", [(("--batch-size", "3", "--num-generations", "2"), 2), (("--batch-size", "3"), 4)])
def test_grpos_group_size_refusal_names_the_options(tmp_path, flags, g):
    """Before: ``error: batch_size × grad_accum (3 × 1) must be divisible by num_generations (2)``,
    naming no option, while single-field refusals do (``--lr: ...``)."""
    result = _train_grpo(tmp_path, *flags)
    assert result.exit_code == 2, result.output
    assert lines(result) == [GROUPS_REFUSED.format(g=g)]
    assert not (tmp_path / "o").exists()


def test_evolves_grpo_group_size_refusal_names_the_options(tmp_path, monkeypatch):
    result = _evolve(tmp_path, monkeypatch, "--algo", "grpo", "--batch-size", "3")
    assert result.exit_code == 2, result.output
    assert lines(result) == [GROUPS_REFUSED.format(g=4)]
    assert not (tmp_path / "t.db").exists()


# ------------------------------------------------------------------ a branch still running when the question ends

import threading  # noqa: E402
import time  # noqa: E402

from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

from agora.graphs.delegation import DelegationContext, build_delegation_graph  # noqa: E402
from agora.graphs.recording import TraceRecorder  # noqa: E402
from agora.models.pool import ModelCallError, ModelPool  # noqa: E402
from db_rows import rows  # noqa: E402
from openai_stub import DROP, StubServer, default_handler  # noqa: E402
from test_probe_round12_recorder import chat  # noqa: E402

CONFIG = {"n_agents": 2, "k_samples": 2}  # one request of n=2 to member a, one to member b: 4 samples a question
QUESTION = {"question": "What is 2 + 2?", "gold": "4"}


def user_pool(url: str, names: str = "ab") -> ModelPool:
    return ModelPool.from_chat_models({name: chat(url, name) for name in names}, max_retries=0)


class SlowB:
    """Member ``b``'s reply takes 0.5 s; while ``broken``, member ``a``'s connection is dropped as soon
    as ``b``'s request has arrived, so ``a``'s call raises while ``b``'s is still in flight."""

    def __init__(self):
        self.broken, self.arrived = True, threading.Event()

    def __call__(self, path, body):
        if body.get("model") == "b":
            self.arrived.set()
            time.sleep(0.5)
            return default_handler(path, body)
        if self.broken:
            self.arrived.wait(20)
            return 200, DROP
        return default_handler(path, body)


def test_a_sync_members_call_in_flight_when_another_raised_is_written_once_and_its_resume_doubles_nothing(tmp_path):
    """It cannot be lost: a synchronous invocation (LangGraph's sync loop) joins every task of the step
    before the graph's end reaches the recorder, so ``b``'s node, finishing 0.5 s after ``a``'s call
    raised, has ended when the failed question is written; the resume through the checkpointer writes
    each call once (a row per call id, every request the server saw a row or two, one per sample)."""
    db = tmp_path / "app.db"
    handler = SlowB()
    graph = build_delegation_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t1"}}
    with StubServer(handler) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            with pytest.raises(ModelCallError):
                graph.invoke(QUESTION, {**thread, "callbacks": [recorder]}, context=context)
            assert rows(db, "select model, error from model_calls order by model, error") == [
                ("a", "OpenAIConnectionError: Connection error."), ("b", None), ("b", None)]
            handler.broken = False
            out = graph.invoke(None, {**thread, "callbacks": [recorder]}, context=context)
        assert out["answer"] == "4"
        asked = sorted(r["body"]["model"] for r in server.requests)
    assert asked == ["a", "a", "b"]  # b's node, finished in the step that raised, is kept by the checkpoint
    assert rows(db, "select count(*), count(distinct call_id) from model_calls") == [(5, 5)]
    assert rows(db, "select model, count(*), count(error) from model_calls group by model order by model") == [
        ("a", 3, 1), ("b", 2, 0)]
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]  # its samples


class AppState(TypedDict, total=False):
    question: str
    answer: str


def test_a_protocol_question_the_app_left_running_is_recorded_when_it_ends(tmp_path):
    """An app's node starts the protocol graph in a thread of its own (with the node's config, so the
    recorder sees it) and returns before it ends; the app's invocation ends first. Before: the
    question was lost: the recorder forgot the runs when the app's invocation ended, so the protocol
    graph's nodes and end found no run (2 requests, 4 samples, no row, no run)."""
    db = tmp_path / "app.db"
    protocol = build_delegation_graph().compile()
    started: list[threading.Thread] = []

    def slow(path, body):
        time.sleep(0.3)
        return default_handler(path, body)

    with StubServer(slow) as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)

        def ask(state: AppState, config: RunnableConfig) -> dict:
            worker = threading.Thread(target=protocol.invoke, args=({**QUESTION, "question": state["question"]}, config),
                                      kwargs={"context": context})
            worker.start()
            started.append(worker)
            return {"answer": "pending"}

        builder = StateGraph(AppState)
        builder.add_node("ask", ask)
        builder.add_edge(START, "ask")
        builder.add_edge("ask", END)
        app_graph = builder.compile()
        with TraceRecorder(db, run_id="app") as recorder:
            assert app_graph.invoke({"question": QUESTION["question"]}, {"callbacks": [recorder]}) == {
                "question": QUESTION["question"], "answer": "pending"}
            assert rows(db, "select count(*) from model_calls") == [(0,)]  # still running
            for worker in started:
                worker.join(20)
        assert len(server.requests) == 2
    assert rows(db, "select question_id, answer, correct, model_calls from questions") == [("q-f465154e", "4", 1, 4)]
    assert rows(db, "select model, count(*) from model_calls group by model order by model") == [("a", 2), ("b", 2)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 1, "failed": 0}))]


# ------------------------------------------------------------------ a recorder given no pool=


def _ask(db, url, names, **given):
    """One question through a new recorder of run ``app`` (no ``pool=``), members ``names``."""
    graph = build_delegation_graph().compile()
    context = DelegationContext(user_pool(url, names), {"n_agents": 2, "k_samples": 2})
    with TraceRecorder(db, run_id="app", **given) as recorder:
        return graph.invoke(QUESTION, {"callbacks": [recorder]}, context=context)


def test_a_recorder_without_pool_is_refused_before_any_model_is_asked_when_its_run_holds_other_models(tmp_path):
    """Before: the app's models c and d were asked (2 requests, 4 samples), and only then was the
    invocation refused, as the question was to be written (``... was started with other pool``)."""
    from agora.traces.errors import ResumeRefusedError

    db = tmp_path / "app.db"
    with StubServer() as server:
        assert _ask(db, server.base_url, "ab")["answer"] == "4"
        assert len(server.requests) == 2
        with pytest.raises(ResumeRefusedError) as refused:
            _ask(db, server.base_url, "cd")
        assert len(server.requests) == 2  # no model asked
    first = str(refused.value).splitlines()[0]
    assert first == (f"run id 'app-align' in {db} was started with other pool; this TraceRecorder was given no pool=, "
                     "so the pool its invocations' model calls go through is compared; give it another run_id, or "
                     "the pool that run was recorded with (no model was asked; nothing was written)")
    assert str(refused.value).splitlines()[1] == "  pool: members c, d here, a, b in the run"
    assert rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
    assert rows(db, "select count(*) from model_calls") == [(4,)]
    assert rows(db, "select run_id, status, summary from runs") == [
        ("app-align", "finished", json.dumps({"questions": 1, "failed": 0}))]


def test_a_recorder_without_pool_resumes_its_run_with_the_same_models(tmp_path):
    """The run row describes the pool the first call went through (not only the names of the models
    called), and a later recorder without ``pool=`` on the same models adds to the run."""
    db = tmp_path / "app.db"
    with StubServer() as server:
        _ask(db, server.base_url, "ab")
        _ask(db, server.base_url, "ab")
        assert len(server.requests) == 4
    assert rows(db, "select question_id, model_calls from questions order by idx") == [
        ("q-f465154e", 4), ("q-f465154e-2", 4)]
    [(pool,)] = rows(db, "select pool from runs")
    assert [(m["name"], m["backend"]) for m in json.loads(pool)] == [("a", "langchain"), ("b", "langchain")]


def test_a_run_recorded_with_member_names_only_takes_a_pool_holding_them(tmp_path):
    """A run an earlier recorder started without ``pool=`` holds the names of the models its first
    question called: a pool holding them resumes it, one lacking one is refused before any request."""
    from agora.traces.errors import ResumeRefusedError
    from agora.traces.store import TraceStore

    db = tmp_path / "app.db"
    store = TraceStore(db)
    store.start_run("app-align", "align", config={"recorded_by": "TraceRecorder"},
                    pool=[{"name": "a"}, {"name": "b"}], dataset={"source": "embedded", "recorded_by": "TraceRecorder"})
    store.finish_run("app-align", summary={"questions": 0, "failed": 0})
    store.close()
    with StubServer() as server:
        assert _ask(db, server.base_url, "ab")["answer"] == "4"
        with pytest.raises(ResumeRefusedError) as refused:
            _ask(db, server.base_url, "ac")
        assert len(server.requests) == 2
    assert str(refused.value) == (
        f"run id 'app-align' in {db} was recorded with models b, which the pool of this invocation's model calls "
        "(a, c) lacks; this TraceRecorder was given no pool=, so the pool its invocations' model calls go through is "
        "compared; give it another run_id, or the pool that run was recorded with (no model was asked; nothing was "
        "written)")
    assert rows(db, "select pool from runs") == [(json.dumps([{"name": "a"}, {"name": "b"}]),)]
    assert rows(db, "select count(*) from questions") == [(1,)]


# ------------------------------------------------------------------ one id, two spellings

from cli_runs import agora, one_error_line  # noqa: E402

FULL_WIDTH_Q1 = "\uff51\uff11"  # ｑ１: NFKC gives q1


@pytest.mark.parametrize("first, second", [("q1", FULL_WIDTH_Q1), ("1", "\u2460"), ("q1", "q\u00b9")])  # ｑ１, ①, q¹
def test_a_task_file_with_one_id_spelled_two_ways_is_refused_naming_both(tmp_path, first, second):
    """Before: ``q1`` and ``ｑ１`` were two questions, printed nearly alike in every report (spaces
    around an id are dropped as the file is read: ``"q1 "`` is ``q1``, a duplicate)."""
    from agora.tasks.loaders import TaskFormatError, load_problems

    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps({"id": i, "question": f"What is {n} + {n}?", "answer": f"#### {2 * n}"}) + "\n"
                            for n, i in enumerate([first, "q2", second], 1)))
    with pytest.raises(TaskFormatError) as refused:
        load_problems(data, "gsm8k")
    assert str(refused.value) == (f"{data}:3: field 'id': id {second!r} and id {first!r} of line 1 are the same id "
                                  "once compared as ids are (Unicode NFKC, white space at the ends ignored); give each "
                                  "question an id of its own")


def _stub_pool_file(tmp_path, url):
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nbase_url = "{url}"\nmodel = "{m}"\n'
                            "max_retries = 0\n" for m in ("m1", "m2")))
    return pool


@pytest.mark.parametrize("respelled", [FULL_WIDTH_Q1])
def test_agora_run_resume_refuses_a_question_id_the_run_holds_spelled_otherwise(tmp_path, respelled):
    """Before: the resume took ``ｑ１`` for a new question and asked its models again, so the run held
    the question twice under ids that print nearly alike."""
    data, db = tmp_path / "t.jsonl", tmp_path / "t.db"
    data.write_text(json.dumps({"id": "q1", "question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    with StubServer() as server:
        pool = _stub_pool_file(tmp_path, server.base_url)
        args = ("run", "align", "--pool", pool, "--data", data, "--format", "gsm8k", "--db", db, "--run-id", "r",
                "--agents", "2", "--samples", "1")
        code, output = agora(*args)
        assert code == 0, output
        asked = len(server.requests)
        data.write_text(json.dumps({"id": respelled, "question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
        code, output = agora(*args)
        assert len(server.requests) == asked  # no model asked
    assert code == 2, output
    assert one_error_line(output) == (
        f"error: run id 'r' in {db}: question id {respelled!r} and the run's question id 'q1' are the same id once "
        "compared as ids are (Unicode NFKC, white space at the ends ignored); give the question the run's id, or pick "
        "a new --run-id")
    assert rows(db, "select question_id from questions") == [("q1",)]


@pytest.mark.parametrize("respelled", [FULL_WIDTH_Q1])
def test_the_recorder_refuses_a_question_id_the_run_holds_spelled_otherwise(tmp_path, respelled):
    """Before: ``question_id="ｑ１"`` after ``"q1"`` was answered was recorded as a second question
    (the repeat check compares ids exactly), its models asked. (``"q1 "`` is ``q1``: the graph input
    drops the spaces, and the recorder refuses it as recorded.)"""
    from agora.graphs.recording import QuestionRecordedError

    db = tmp_path / "app.db"
    graph = build_delegation_graph().compile()
    with StubServer() as server:
        context = DelegationContext(user_pool(server.base_url), CONFIG)
        with TraceRecorder(db, run_id="app") as recorder:
            graph.invoke({**QUESTION, "question_id": "q1"}, {"callbacks": [recorder]}, context=context)
            with pytest.raises(QuestionRecordedError) as refused:
                graph.invoke({**QUESTION, "question_id": respelled}, {"callbacks": [recorder]}, context=context)
        assert len(server.requests) == 2  # the first question's only
    assert str(refused.value) == (
        f"{db}: question id {respelled!r} and question id 'q1' of run 'app-align' are the same id once compared as "
        "ids are (Unicode NFKC, white space at the ends ignored); give this invocation 'q1' (the same question) or an "
        "id of its own; nothing of this invocation was written")
    assert rows(db, "select question_id from questions") == [("q1",)]


def _two_spellings_db(path, respelled):
    """A trace DB whose run ``r`` holds questions ``q1`` and ``respelled`` (as written before the check)."""
    from agora.traces.store import TraceStore

    store = TraceStore(path)
    store.start_run("r", "align", config={}, pool=[{"name": "a"}], dataset={})
    for idx, qid in enumerate(["q1", respelled]):
        store.record_question("r", "align", {"question_id": qid, "idx": idx, "source": "t", "kind": "math",
                                             "question": "What is 2 + 2?", "gold": "4", "answer": "4",
                                             "correct": True, "wall_s": 0.1, "detail": {}},
                              {"align": {"answer": "4", "correct": True}}, [])
    store.finish_run("r", summary={"questions": 2, "failed": 0})
    store.close()


@pytest.mark.parametrize("respelled", ["q1 ", FULL_WIDTH_Q1])
def test_a_bundle_whose_run_holds_one_id_spelled_two_ways_is_refused_naming_both(tmp_path, respelled):
    """Before: imported as two questions; a bundle is refused as the recorder and ``agora run`` refuse them."""
    from agora.traces.bundle import BundleError
    from agora.traces.bundle_export import export_bundle
    from agora.traces.bundle_import import import_bundle
    from agora.traces.store import TraceStore

    _two_spellings_db(tmp_path / "old.db", respelled)
    bundle = tmp_path / "r.agora.jsonl.gz"
    export_bundle(TraceStore(tmp_path / "old.db", readonly=True), bundle, ["r"])
    target = TraceStore(tmp_path / "new.db")
    with pytest.raises(BundleError, match=rf"^{bundle}:\d+: questions: run 'r' has question ids {respelled!r} and "
                                          r"'q1' \(line \d+\), the same id once compared as ids are \(Unicode NFKC, "
                                          r"white space at the ends ignored\); nothing was imported$"):
        import_bundle(bundle, target)
    assert target.get_run("r") is None
