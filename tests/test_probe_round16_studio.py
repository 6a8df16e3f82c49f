"""Round 16: LangGraph Studio by hand, as a new user would (``agora studio`` from the project folder, the
HTTP API on a loopback OpenAI stub pool, docs/studio.md's commands).

Found: with the port taken (by another ``agora studio``, ``langgraph dev`` or anything else) the server
moved to a random port without a word on the console, after ``agora studio`` had printed the port asked
for (the user's curl then reached the other server; the tests polled the wrong port for 10 minutes); a
COMED context ``{"router": 3}`` failed at the first route with ``AttributeError: 'int' object has no
attribute 'route'``; an input sent as text (``"input": "What is 2+2?"``) failed with LangGraph's
two-line ``InvalidUpdateError`` naming no field; a question sent as a number was said to be empty;
Studio's state editor at a breakpoint after a ``Send`` fan-out (MoA before ``moa_aggregate``) failed
with ``Missing required config key 'N/A' for 'to_proposers'`` (LangGraph took the edit as
``__start__``'s).

Checked and fine: all nine graphs listed and run on the stub pool, input forms (markdown
descriptions, ``gold`` described, no ``shared_candidates``, ``kind`` a choice defaulting to ``math``),
CUPID's interrupt and resume, the appending/``__overwrite__`` reducers, unknown context keys, empty
question, ``NaN`` (refused by the server's JSON parser), docs/studio.md's curl and SDK commands (on the
stub pool), and the Studio tests' wait (``GET /ok`` polled up to 600 s; this machine took 227 s)."""

import json
import os
import socket
import subprocess

import pytest

from test_studio import ROOT, agora_exe, post, start_studio, stop, wait_until_up

# ---------------------------------------------------------------------------------------- the port


def test_agora_studio_refuses_a_port_in_use_in_one_line_before_starting_a_server(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([agora_exe(), "studio", "--port", str(port)], cwd=ROOT, capture_output=True,
                              text=True, timeout=900, env={**os.environ, "LANGSMITH_TRACING": "false"})
    assert proc.returncode == 2, proc.stderr[-2000:]  # a bad option value, as typer exits
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: --port {port}: 127.0.0.1:{port} is in use (another agora studio or langgraph dev?); "
        "stop it or pick another port with --port")
    assert "API:" not in proc.stderr  # no address printed for a server that never starts


def test_the_server_process_exits_rather_than_move_to_another_port(capsys):
    """The port may be taken between ``agora studio``'s check and the server's bind: langgraph-api's
    fallback to a random port is replaced in the server process."""
    pytest.importorskip("langgraph_api")
    from agora.cli.studio import _keep_port

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as stopped:
            _keep_port("127.0.0.1", port)
    assert stopped.value.code == 1
    assert capsys.readouterr().err == (f"error: --port {port}: 127.0.0.1:{port} is in use (another agora studio "
                                       "or langgraph dev?); stop it or pick another port with --port\n")
    assert _keep_port("127.0.0.1", port) == port  # free again: served where asked


# ---------------------------------------------------------------------------------------- contexts and inputs


def test_a_comed_router_that_is_not_a_router_is_refused_in_one_line():
    from agora.graphs.context import ContextError, context_as
    from agora.graphs.escalation import EscalationContext

    for value, shown in ((3, "int 3"), ("knn", "str 'knn'"), ({"k": 5}, "dict {'k': 5}")):
        with pytest.raises(ContextError) as refused:
            context_as({"router": value}, EscalationContext)
        assert str(refused.value) == ("EscalationContext.router: expected a KNNRouter (from Python) or null "
                                      f"(a fixed anchor), got {shown}")
    assert context_as({"router": None}, EscalationContext).router is None


@pytest.mark.parametrize("value, shown", [("What is 2+2?", "str 'What is 2+2?'"), (["What is 2+2?"], "list ['What is 2+2?']"),
                                          (5, "int 5")])
def test_an_input_that_is_not_an_object_is_refused_in_one_line_naming_the_form_fields(value, shown):
    from agora.graphs.moa import graph
    from agora.tasks.errors import InputError

    with pytest.raises(InputError) as refused:
        graph.invoke(value)
    assert str(refused.value) == ("graph input must be an object of its fields (question, question_id, kind, "
                                  f"n_choices, gold), not {shown}")


def test_cupid_input_that_is_not_an_object_names_its_own_fields():
    from agora.graphs.selection import graph
    from agora.tasks.errors import InputError

    with pytest.raises(InputError) as refused:
        graph.invoke("Say hi.")
    assert str(refused.value) == "graph input must be an object of its fields (prompts, models, features), not str 'Say hi.'"


@pytest.mark.parametrize("value, shown", [(5, "int 5"), (["a"], "list ['a']"), ({"t": 1}, "dict {'t': 1}")])
def test_a_question_that_is_not_text_is_said_to_be_of_the_wrong_type_not_empty(value, shown):
    from agora.graphs.question import as_problem
    from agora.tasks.errors import InputError

    with pytest.raises(InputError) as refused:
        as_problem({"question": value})
    assert str(refused.value) == f"graph input field 'question' must be text, not {shown}"
    with pytest.raises(InputError, match=r"^graph input needs a non-empty 'question'$"):
        as_problem({"question": "  "})


# ---------------------------------------------------------------------------------------- state edits at a breakpoint


def paused_moa():
    """MoA on three scripted models, paused before its aggregator (after the proposers' ``Send`` fan-out)."""
    from langgraph.checkpoint.memory import InMemorySaver

    from agora.graphs.moa import MoAContext, build_moa_graph
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    pool = ModelPool.from_chat_models({n: ScriptedChatModel(responses=["The answer is 4."], cycle=True) for n in "abc"})
    graph = build_moa_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["moa_aggregate"])
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": "What is 2 + 2?", "gold": "4"}, thread, context=MoAContext(pool))
    assert graph.get_state(thread).next == ("moa_aggregate",)
    return graph, thread, MoAContext(pool)


MINE = {"agent": 9, "model": "x", "answer": "5", "how": "marker", "text": "The answer is 5."}


def test_a_state_edit_at_a_breakpoint_after_a_fan_out_goes_through_the_reducer():
    """Studio's state editor (``POST /threads/{id}/state`` without ``as_node``) at MoA's breakpoint
    failed with ``Missing required config key 'N/A' for 'to_proposers'``: LangGraph took the edit as
    ``__start__``'s. It is the proposers' now: appended, or replaced with ``__overwrite__``."""
    graph, thread, context = paused_moa()
    graph.update_state(thread, {"proposals": [MINE]})
    state = graph.get_state(thread)
    assert len(state.values["proposals"]) == 4 and state.values["proposals"][-1] == MINE
    assert state.next == ("moa_aggregate",)  # still paused where it was: nothing re-sent
    pinned = state.config  # the checkpoint shown, by its id (as Studio edits one)
    graph.update_state(pinned, {"proposals": {"__overwrite__": [MINE]}})  # an edit of a named checkpoint too
    assert graph.get_state(thread).values["proposals"] == [MINE]
    out = graph.invoke(None, thread, context=context)  # the aggregator reads the edited proposals
    assert out["methods"]["proposal_vote"]["answer"] == "5" and out["methods"]["proposal_vote"]["correct"] is False


def test_the_async_state_edit_the_server_makes_works_at_the_breakpoint_too():
    import asyncio

    graph, thread, _ = paused_moa()
    asyncio.run(graph.aupdate_state(thread, {"proposals": [MINE]}))
    assert len(graph.get_state(thread).values["proposals"]) == 4


# ---------------------------------------------------------------------------------------- through the server


@pytest.mark.slow
def test_through_agora_studio_on_a_stub_pool_edits_at_a_breakpoint_and_bad_inputs(tmp_path):
    """The documented commands on a loopback OpenAI stub pool: MoA paused before its aggregator, its
    proposals replaced through ``POST /threads/{id}/state`` (no ``as_node``), the resumed run votes on
    them; an input sent as text and a COMED ``router`` of 3 are refused in one line each."""
    from openai_stub import StubServer

    with StubServer() as stub:
        pool = tmp_path / "stub.toml"
        pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nbase_url = "{stub.base_url}"\n'
                                f'model = "stub"\n\n' for m in "abc"))
        proc, base, log, sink = start_studio(tmp_path, ROOT)
        try:
            wait_until_up(proc, base, log)
            context = {"pool": str(pool), "config": {"shots": 0}}
            thread = post(f"{base}/threads", {})["thread_id"]
            post(f"{base}/threads/{thread}/runs/wait", {"assistant_id": "moa", "context": context,
                                                         "input": {"question": "What is 2 + 2?", "gold": "4"},
                                                         "interrupt_before": ["moa_aggregate"]}, timeout_s=300)
            post(f"{base}/threads/{thread}/state", {"values": {"proposals": {"__overwrite__": [MINE]}}})
            done = post(f"{base}/threads/{thread}/runs/wait", {"assistant_id": "moa", "input": None,
                                                                 "context": context}, timeout_s=300)
            assert done["methods"]["proposal_vote"]["answer"] == "5" and done["proposals"] == [MINE], done
            assert done["methods"]["proposal_vote"]["correct"] is False  # scored against the thread's gold

            bad = post(f"{base}/runs/wait", {"assistant_id": "moa", "input": "What is 2 + 2?", "context": context},
                       timeout_s=300)
            assert bad["__error__"]["message"] == ("graph input must be an object of its fields (question, question_id, "
                                                   "kind, n_choices, gold), not str 'What is 2 + 2?'"), bad
            bad = post(f"{base}/runs/wait", {"assistant_id": "comed_escalation", "input": {"question": "What is 2 + 2?"},
                                             "context": {"pool": str(pool), "router": 3}}, timeout_s=300)
            assert bad["__error__"]["message"] == ("EscalationContext.router: expected a KNNRouter (from Python) or "
                                                   "null (a fixed anchor), got int 3"), bad
        finally:
            stop(proc, sink)


# ---------------------------------------------------------------------------------------- the forms


def test_the_context_forms_carry_no_python_docstring_sections():
    """The settings' descriptions in Studio's context form ended in the class docstring's
    ``Raises:\\n    ValueError: ...`` section (what a Python caller catches, not what a field means)."""
    from agora.graphs import registry

    for spec in registry.specs():
        graph = spec.compiled()
        for kind in ("input", "output", "context"):
            text = json.dumps(getattr(graph, f"get_{kind}_jsonschema")())
            assert "Raises:" not in text and "Returns:" not in text, (spec.name, kind)
    schema = registry.specs()[0].compiled().get_context_jsonschema()
    assert next(iter(schema["$defs"].values()))["description"]  # the description itself is kept
