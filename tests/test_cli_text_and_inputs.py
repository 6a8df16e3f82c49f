"""What the CLI prints of recorded text, the run settings it refuses as input, the next command it
prints, how a stopped worker leaves a shared run, and misspelt graph input keys."""

from __future__ import annotations

import pytest
import typer


# ---------------------------------------------------------------------------- recorded text shown

#: What a model wrote: clear the screen, set the window title, a C1 CSI (8-bit), a carriage return.
SHOUTING = "\x1b[2J\x1b]0;pwned\x07The answer is 4.\x9b31m\rhidden"


def _control_free(output: str) -> bool:
    return not any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f for c in output)


def test_report_question_shows_a_models_control_characters_escaped(tmp_path, monkeypatch):
    """A completion's or an error's escape codes reached the terminal raw in `report question --full`
    (the screen cleared, the window retitled)."""
    from typer.testing import CliRunner

    from agora.agents.delegation import DelegationConfig
    from agora.cli.main import app
    from agora.graphs.delegation import DelegationContext
    from agora.graphs.runner import run_protocol
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.tasks.problem import Problem
    from agora.traces.store import TraceStore

    def respond(chat, i):
        if "3 + 3" in chat[-1]["content"]:
            raise RuntimeError("server \x1b[31mdown\x1b[0m")
        return SHOUTING

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=respond) for m in ("a", "b")}, max_retries=0)
    config = DelegationConfig(n_agents=2, k_samples=1, tau=0.5)
    problems = [Problem(id="q1", question="What is 2 + 2?\x1b[8m", gold="4", kind="math"),
                Problem(id="q2", question="What is 3 + 3?", gold="6", kind="math")]
    db = tmp_path / "t.db"
    run_protocol("align", problems, store=TraceStore(db), run_id="r", context=DelegationContext(pool, config),
                 config=config, pool_description=pool.describe(), dataset={"path": "q", "format": "jsonl"})
    monkeypatch.setenv("COLUMNS", "1000")
    for question in ("q1", "q2"):
        result = CliRunner().invoke(app, ["report", "question", "--db", str(db), "--run-id", "r", "--question-id",
                                          question, "--full"])
        assert result.exit_code == 0, result.output
        assert _control_free(result.output), repr(result.output)
        cells = "".join(line.split("│")[-2] for line in result.output.splitlines() if line.startswith("│"))
        if question == "q1":  # the completion column folds: its cells joined, each text is whole
            assert "What is 2 + 2?\\x1b[8m" in result.output
            assert "".join(cells.split()).count("\\x1b[2J\\x1b]0;pwned\\x07Theansweris4.\\x9b31m\\x0dhidden") == 2
        else:
            assert "".join(cells.split()).count("server\\x1b[31mdown\\x1b[0m") == 2


def test_visible_keeps_newlines_tabs_and_backslashes():
    from agora.cli._shared import visible

    assert visible("a\tb\r\nc\nd \\frac{1}{2} \u00e9\u4e2d") == "a\tb\nc\nd \\frac{1}{2} \u00e9\u4e2d"
    assert visible("\x00\x08\x0b\x1f\x7f\x80\x9f\xa0") == "\\x00\\x08\\x0b\\x1f\\x7f\\x80\\x9f\xa0"


# ---------------------------------------------------------------------------- run settings are input

@pytest.mark.parametrize("call, said", [
    (lambda: __import__("agora.graphs.runner", fromlist=["run_problems"]).run_problems(
        None, [], store=None, run_id="r", protocol="p", context=None, config=None, pool_description=None,
        dataset={}, concurrency=0), "concurrency must be an integer >= 1, got 0"),
    (lambda: __import__("agora.graphs.runner", fromlist=["run_problems"]).run_problems(
        None, [], store=None, run_id="r", protocol="p", context=None, config=None, pool_description=None,
        dataset={}, durability="fast"), "durability must be one of sync, async, exit, got 'fast'"),
    (lambda: __import__("agora.graphs.runner", fromlist=["run_protocol"]).run_protocol("duel", []),
     "protocol 'duel' is a "),
    (lambda: __import__("agora.traces.claims", fromlist=["lease_s"]).lease_s(),
     "AGORA_LEASE_S='soon': not a number above 0 (seconds a question claimed"),
])
def test_run_settings_refused_as_input_not_as_a_bug(monkeypatch, capsys, call, said):
    """These refusals were plain ValueErrors, which the CLI prints as an 'internal error' with a
    traceback (exit 1); they are input: one 'error:' line, exit 2."""
    from agora.cli._shared import user_errors

    monkeypatch.setenv("AGORA_LEASE_S", "soon")
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(typer.Exit) as stopped:
        with user_errors():
            call()
    assert stopped.value.exit_code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: " + said) and "internal error" not in err, err


# ---------------------------------------------------------------------------- the next command printed

@pytest.mark.parametrize("db, shown, note", [
    ("agora.db", "agora.db", ""),
    ("my runs/a.db", "'my runs/a.db'", ""),
    ("postgresql://ann@db.example/traces", "postgresql://ann@db.example/traces", ""),
    ("postgresql://ann:s3cr%40t@db.example:5432/traces?sslmode=require",
     "'postgresql://ann@db.example:5432/traces?sslmode=require'", "PGPASSWORD"),
    ("postgres://db.example/traces?password=s3cret&sslmode=require", "'postgres://db.example/traces?sslmode=require'",
     "PGPASSWORD"),
    ("postgres://db.example/traces?sslmode=require&password=s3cret", "'postgres://db.example/traces?sslmode=require'",
     "PGPASSWORD"),
])
def test_a_printed_commands_db_leaves_out_only_the_password(db, shown, note):
    from agora.traces.pg_sql import db_argument

    argument, said = db_argument(db)
    assert argument == shown and (note in said if note else said == "")


def test_converse_prints_a_next_command_that_connects(postgres_server, tmp_path, monkeypatch):
    """The next command was printed with the password as '***' (shown_url), so it could not
    connect; and the line before it ('recorded in ...') printed the URL with its password."""
    import shlex

    from typer.testing import CliRunner

    import agora.cli.converse as converse_cli
    from agora.cli.main import app
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    pool = ModelPool.from_chat_models({
        "a": ScriptedChatModel(respond=lambda chat, i: "I think it is 4."),
        "b": ScriptedChatModel(respond=lambda chat, i: "It is 4."),
    })
    monkeypatch.setattr(converse_cli, "load_pool", lambda path: pool)
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)
    url = postgres_server.database() + "&password=hunter2"  # the test server trusts its socket's user
    result = CliRunner().invoke(app, ["converse", "--pool", "pool.toml", "--limit", "1", "--turns", "2",
                                      "--db", url, "--run-id", "c"])
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output and "***" in result.output  # 'recorded in' shows the URL redacted
    line = next(line for line in result.output.splitlines() if "next: " in line)
    command, note = line.split("next: ", 1)[1].split(" (", 1)
    assert shlex.split(command) == ["agora", "report", "diversity", "--db", url.removesuffix("&password=hunter2"),
                                    "--out", "diversity/"]
    assert note.startswith("the password is left out: set PGPASSWORD")
    report = CliRunner().invoke(app, shlex.split(command)[1:] + ["--min-turns", "1", "--panel-size", "2"])
    assert report.exit_code == 0, report.output


def test_log_lines_on_stderr_show_control_characters_escaped(tmp_path):
    """A failed model call's warning quotes the server's error: it reached stderr raw in `agora run`."""
    import subprocess
    import sys

    code = ("import logging, sys; from agora.cli.main import app; sys.argv = ['agora', 'pool', '--help'];\n"
            "try: app()\nexcept SystemExit: pass\n"
            "logging.getLogger('agora.pool').warning('model a failed: RuntimeError: server \\x1b[31mdown\\x9b')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.stderr.endswith("model a failed: RuntimeError: server \\x1b[31mdown\\x9b\n"), repr(out.stderr)


# ---------------------------------------------------------------------------- a worker ended at once

def test_a_worker_ended_at_once_leaves_a_shared_run_to_the_workers_still_on_it(postgres_server, monkeypatch):
    """A second Ctrl-C (or a SIGTERM whose drain takes too long) marked the shared run `interrupted`
    while another worker still held one of its questions; the row stays `running` for that worker
    (docs/scaling.md), which ends it. Alone on the run, the worker still marks it."""
    from test_workers import _in_process_workers, _run_row

    from agora.graphs.recorded_runs import mark_live_runs
    from agora.traces.claims import Claims
    from agora.traces.store import TraceStore

    monkeypatch.setenv("AGORA_LEASE_S", "5")
    url = postgres_server.database()
    store = TraceStore(url)
    other = Claims(store, "r")  # the other worker: present on the run, holding q1 under a live lease
    other.seed([(0, "q0"), (1, "q1")])
    assert other.claim_next(["q1"]) == "q1"
    other.start()  # renewed, as a working worker's is: unrenewed, the 5 s lease lapsed on a busy machine
    # before this worker's first model call (1.7 s later on an idle one), and the run was marked
    seen: dict = {}

    def respond(n: int) -> str:
        if n == 0 and "marked" not in seen:  # this worker's first call: as the signal handler would
            seen["marked"], seen["status"] = mark_live_runs(), _run_row(url)[0]
            other.stop()  # the other worker ends in its turn, freeing q1 for this one
            other.leave()
        return f"The answer is {2 * n}."

    results: dict = {}
    _in_process_workers(url, respond, questions=2)(results, "w").join(60)
    assert seen == {"marked": [], "status": "running"}
    assert _run_row(url)[0] == "finished" and results["w"].failed == []

    # alone on a run, the worker ending at once marks it interrupted, as before
    url = postgres_server.database()
    seen.clear()

    def alone(n: int) -> str:
        if "marked" not in seen:
            seen["marked"], seen["status"] = mark_live_runs(), _run_row(url)[0]
        return f"The answer is {2 * n}."

    _in_process_workers(url, alone, questions=1)(results, "alone").join(60)
    assert seen == {"marked": ["r"], "status": "interrupted"}
    store.close()


# ---------------------------------------------------------------------------- misspelt graph input keys

def _align_graph():
    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=["The answer is 7."], cycle=True)
                                       for m in ("a", "b")})
    return build_delegation_graph().compile(), DelegationContext(pool, DelegationConfig(n_agents=2, k_samples=1))


def test_a_misspelt_input_key_is_refused_naming_its_likely_key():
    """`{"question": ..., "golden": "7"}` ran with every `correct` empty and nothing said (LangGraph
    drops a key its input schema lacks); a warning in the log was missed in Studio, so it is refused."""
    import asyncio

    import pytest

    graph, ctx = _align_graph()
    fields = "question, question_id, kind, n_choices, gold"
    with pytest.raises(ValueError) as refused:
        graph.invoke({"question": "What is 3 + 4?", "golden": "7", "questoin_id": "q1", "notes": "x"}, context=ctx)
    assert str(refused.value) == ("graph input: unknown field(s) golden (did you mean gold?), questoin_id (did you "
                                  f"mean question_id?), notes; its fields are {fields}")
    with pytest.raises(ValueError, match=r"^graph input: unknown field\(s\) Gold \(did you mean gold\?\);"):
        asyncio.run(graph.ainvoke({"question": "What is 3 + 4?", "Gold": "7"}, context=ctx))
    out = graph.invoke({"question": "What is 3 + 4?", "gold": "7"}, context=ctx)
    assert {m["correct"] for m in out["methods"].values()} == {True}


def test_a_protocol_graph_as_a_node_is_not_warned_about_its_parents_keys(caplog):
    """As a node of a parent graph the protocol gets the parent's whole state: a key close to one of
    its own (the parent's `golden`) is the parent's, not a mistake (neither refused nor warned about)."""
    import logging
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    graph, ctx = _align_graph()

    class Parent(TypedDict, total=False):
        question: str
        golden: str
        methods: dict

    parent = StateGraph(Parent, context_schema=type(ctx))
    parent.add_node("align", graph)
    parent.add_edge(START, "align")
    parent.add_edge("align", END)
    with caplog.at_level(logging.WARNING, logger="agora.graphs.scoring"):
        out = parent.compile().invoke({"question": "What is 3 + 4?", "golden": "yes"}, context=ctx)
    assert caplog.records == [] and set(out["methods"]) >= {"align"}


def test_run_prints_its_postgres_trace_url_without_the_password(postgres_server, tmp_path, monkeypatch):
    """`agora run`'s last line ('traces: URL') printed a Postgres URL with its password."""
    import json

    from typer.testing import CliRunner

    import agora.cli.align as align_cli
    from agora.cli.main import app
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=["The answer is 4."], cycle=True)
                                       for m in ("a", "b")})
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "g.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    url = postgres_server.database() + "&password=hunter2"  # the test server trusts its socket's user
    result = CliRunner().invoke(app, ["run", "align", "--data", str(data), "--db", url, "--run-id", "r"])
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output, result.output
    assert result.output.rstrip().endswith("traces: " + url.replace("hunter2", "***")), result.output
