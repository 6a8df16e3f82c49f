"""Probe round 9 (b): what a fresh user found still unclear, each with its fix."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("command, option, value", [
    ("debate", "--models", ""), ("debate", "--models", ",,"), ("slm-mux", "--models", " , "),
    ("council", "--members", ""), ("moa", "--proposers", ","), ("align", "--models", ""),
])
def test_a_member_list_naming_no_member_is_refused(tmp_path, command, option, value):
    """``agora run debate --models ""`` (or ``",,"``) quietly meant every member of the pool: the
    option was read as not given. Now one line naming the option, before any pool is read."""
    from typer.testing import CliRunner

    from agora.cli.main import app

    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, ["run", command, option, value, "--db", str(db), "--pool",
                                      str(tmp_path / "pool.toml")])  # before: read as every member of it
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"error: {option} {value!r}: names no member; give comma-separated pool "
                                     f"members, or leave {option} out for the default"), result.output
    assert not db.exists()


def test_member_names_still_reads_lists_and_absence():
    from agora.cli._run import member_names

    assert member_names(None) == ()
    assert member_names(" a, b ,c") == ("a", "b", "c")
    with pytest.raises(ValueError, match=r"^--train-models '': names no member"):
        member_names("", "--train-models")


@pytest.mark.parametrize("command", [["run", "debate"], ["run", "comed"], ["calibrate", "comed"], ["train", "grpo"]])
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_data_option_is_refused_naming_it(tmp_path, command, value):
    """``--data ""`` became ``Path("")``, the current folder: ``error: .: is a directory, not a JSONL
    file``. Now the option parser refuses it, naming ``--data``, before anything is read."""
    from typer.testing import CliRunner

    from agora.cli.main import app

    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, [*command, "--data", value, "--db", str(db)])
    text = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--data': an empty path; give a file" in text, result.output
    assert "is a directory" not in text
    assert not db.exists()


def test_a_data_file_still_parses_as_a_path(tmp_path):
    from pathlib import Path

    from agora.cli._shared import nonempty_path

    assert nonempty_path("problems.jsonl") == Path("problems.jsonl")
    assert nonempty_path(Path(".")) == Path(".")


def _openai_pool(url: str):
    from agora.models.pool import ModelSpec, pool_from_specs

    return pool_from_specs([ModelSpec(name="m", backend="openai", model="stub", endpoints=(url,), max_retries=0)])


def test_a_reply_of_content_parts_is_read_as_its_text_parts_joined():
    """An OpenAI-compatible server whose message ``content`` is a list of content parts
    (``[{"type": "text", "text": ...}, ...]``): every attempt failed with ``AttributeError: 'list'
    object has no attribute 'strip'``. Now the text parts are joined (others left out)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from openai_stub import StubServer, chat_reply

    from agora.models.contract import SamplingParams

    def handler(path, body):
        reply = chat_reply(body)
        for choice in reply["choices"]:
            choice["message"]["content"] = [{"type": "text", "text": "The answer is "},
                                            {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
                                            {"type": "text", "text": "4."}]
        return 200, reply

    with StubServer(handler) as srv:
        samples, records = _openai_pool(srv.base_url).sample("m", [{"role": "user", "content": "2+2?"}],
                                                             SamplingParams(n=2, temperature=0.5))
    assert [s.text for s in samples] == ["The answer is 4.", "The answer is 4."]
    assert [r["error"] for r in records] == [None, None]
    assert [r["completion"] for r in records] == ["The answer is 4.", "The answer is 4."]


def test_a_reply_whose_content_is_not_text_or_parts_fails_with_a_clear_message():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from openai_stub import StubServer, chat_reply

    from agora.models.contract import SamplingParams

    def handler(path, body):
        reply = chat_reply(body)
        reply["choices"][0]["message"]["content"] = {"answer": 4}
        return 200, reply

    with StubServer(handler) as srv:
        samples, records = _openai_pool(srv.base_url).sample("m", [{"role": "user", "content": "2+2?"}],
                                                             SamplingParams(n=1, temperature=0.5))
    assert samples == []
    assert records[-1]["error"] == (f"InvalidReplyError: model m at {srv.base_url} sent message content that is "
                                    "neither text nor a list of content parts: \"{'answer': 4}\""), records[-1]["error"]


def test_a_trace_recorder_passed_alone_as_callbacks_says_to_pass_it_in_a_list(tmp_path):
    """``graph.invoke(question, {"callbacks": recorder})`` failed inside LangChain with
    ``AttributeError: 'TraceRecorder' object has no attribute 'parent_run_id'`` (a value that is not
    a list is taken for a callback manager). Now a ``TypeError`` saying to pass ``[recorder]``;
    in a list it records as before."""
    import asyncio

    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.graphs.recording import TraceRecorder
    from agora.models.testing import ScriptedChatModel
    from agora.models.pool import ModelPool
    from agora.traces.store import TraceStore

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=["The answer is 4."], cycle=True)
                                       for m in ("a", "b")}, max_retries=0)
    graph = build_delegation_graph().compile()
    context = DelegationContext(pool, DelegationConfig(n_agents=2, k_samples=1))
    question = {"question": "What is 2 + 2?", "question_id": "q1", "gold": "4"}
    message = ("TraceRecorder 'r' was passed as callbacks alone; pass it in a list: "
               'config={"callbacks": [recorder]}')
    with TraceRecorder(tmp_path / "t.db", "r") as recorder:
        with pytest.raises(TypeError) as raised:
            graph.invoke(dict(question), {"callbacks": recorder}, context=context)
        assert str(raised.value) == message
        with pytest.raises(TypeError, match=r"pass it in a list"):
            asyncio.run(graph.ainvoke(dict(question), {"callbacks": recorder}, context=context))
        with pytest.raises(TypeError, match=r"pass it in a list"):
            list(graph.stream(dict(question), {"callbacks": recorder}, context=context))
        assert graph.invoke(dict(question), {"callbacks": [recorder]}, context=context)["answer"] == "4"
    assert recorder.recorded == {"align": 1}
    store = TraceStore(tmp_path / "t.db")
    assert [r["question_id"] for r in store.db.query("SELECT question_id FROM questions")] == ["q1"]


@pytest.mark.parametrize("run_id", ["-", "-x", "--db", "-1"])
def test_a_run_id_starting_with_a_dash_is_refused(tmp_path, run_id):
    """A run id of ``-`` was accepted and printed in suggested commands as ``--run-id -``, which a
    shell user's next command reads as an option. Refused by the one run id check, before any
    database is created (the recorder's too)."""
    from agora.graphs.recording import TraceRecorder
    from agora.traces.store import check_run_id

    with pytest.raises(ValueError) as raised:
        check_run_id(run_id)
    assert str(raised.value) == (f"--run-id {run_id!r}: a run id may not start with '-' (the commands Agora prints "
                                 "would read it as an option); start it with a letter or digit")
    with pytest.raises(ValueError, match=r"^run_id '-.*': a run id may not start with '-'"):
        TraceRecorder(tmp_path / "t.db", run_id)
    assert not (tmp_path / "t.db").exists()
    assert check_run_id("a-b") == "a-b" and check_run_id("1-") == "1-"


def test_replay_of_a_run_without_model_calls_says_so_in_one_line(tmp_path):
    """``agora replay`` of a run that holds no model call printed its header and an empty paired
    table, no reason. Now one line (exit 0, as ``agora report runs`` on an empty database);
    ``--json`` still writes its object."""
    import json

    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.store import TraceStore

    db = tmp_path / "t.db"
    TraceStore(db).start_run("r", "align", config={}, pool=[], dataset={"path": "q", "format": "jsonl"})
    result = CliRunner().invoke(app, ["replay", "--db", str(db), "--run-id", "r", "--rule", "plurality"])
    assert result.exit_code == 0, result.output
    assert result.output == "nothing to replay: run r (align, 0 questions) holds no successful model call\n"
    result = CliRunner().invoke(app, ["replay", "--db", str(db), "--run-id", "r", "--rule", "plurality", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rows"] == []
