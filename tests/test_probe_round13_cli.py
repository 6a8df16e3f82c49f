"""Probes of the CLI, bundles, task files and the Postgres store, round 13: a crafted bundle whose
yes/no column held 5 (a report's accuracy of 500 %), a bundle of a NUL character that a Postgres
store refused to import a second time, ... Each was found by a new user's or an attacker's input;
the models are a loopback stub (tests/openai_stub.py), never a real one."""

from __future__ import annotations

import gzip
import json

import pytest

from cli_runs import agora, one_error_line
from openai_stub import StubServer


def _pool(tmp_path, url):
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nbase_url = "{url}"\nmodel = "{m}"\n'
                            "max_retries = 0\n" for m in ("m1", "m2", "m3")))
    return pool


@pytest.fixture(scope="module")
def align_bundle(tmp_path_factory):
    """Run ``a1`` (ALIGN, 2 synthetic questions, the stub answering "The answer is 4.") and its bundle."""
    tmp = tmp_path_factory.mktemp("round13")
    with StubServer() as server:
        code, output = agora("run", "align", "--pool", _pool(tmp, server.base_url), "--format", "synthetic",
                             "--limit", "2", "--db", tmp / "t.db", "--run-id", "a1")
        assert code == 0, output
    bundle = tmp / "a1.jsonl.gz"
    code, output = agora("export", "--db", tmp / "t.db", "--run-id", "a1", "--out", bundle)
    assert code == 0, output
    return tmp / "t.db", bundle


def _lines(bundle):
    return [json.loads(line) for line in gzip.open(bundle, "rt", encoding="utf-8")]


def _crafted(bundle, out, table, column, value):
    """``bundle`` with ``table.column`` set to ``value`` in every row, written by hand as an attacker
    would (the footer's counts made to match, no checksums: a bundle may be written without them)."""
    lines = _lines(bundle)
    cols = list(lines[0]["tables"][table]["columns"])
    rows = [{**r, "v": [value if c == column else v for c, v in zip(cols, r["v"])]} if r.get("t") == table else r
            for r in lines[1:-1]]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["t"]] = counts.get(r["t"], 0) + 1
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for line in [lines[0], *rows, {"end": True, "rows": counts}]:
            f.write(json.dumps(line) + "\n")
    return out


@pytest.mark.parametrize("table, column, value, said", [
    ("results", "correct", 5, "results.correct: 5 is not 0 or 1"),
    ("questions", "correct", -1, "questions.correct: -1 is not 0 or 1"),
    ("results", "completion_tokens", -400, "results.completion_tokens: -400 is negative (a count or seconds)"),
    ("model_calls", "prompt_tokens", -11, "model_calls.prompt_tokens: -11 is negative (a count or seconds)"),
    ("model_calls", "latency_s", -5.0, "model_calls.latency_s: -5.0 is negative (a count or seconds)"),
])
def test_a_bundle_whose_yes_no_column_or_count_holds_what_no_store_writes_is_refused(
        align_bundle, tmp_path, table, column, value, said):
    """Before: ``results.correct = 5`` was imported and ``agora report run`` showed ALIGN's accuracy as
    500.0 % (``replay``: a difference of -475 points); a negative token count lowered the run's cost."""
    bundle = _crafted(align_bundle[1], tmp_path / "c.gz", table, column, value)
    code, output = agora("import", bundle, "--db", tmp_path / "i.db")
    assert code == 2, output
    assert said in one_error_line(output) and "nothing was imported" in output
    assert not (tmp_path / "i.db").exists()


def test_a_bundle_of_flags_and_counts_as_written_still_imports(align_bundle, tmp_path):
    code, output = agora("import", align_bundle[1], "--db", tmp_path / "i.db")
    assert code == 0, output
    assert "rows added: runs 1, questions 2, results 8, model_calls 12" in output


def test_a_bundle_holding_a_nul_imported_twice_into_postgres_adds_nothing_the_second_time(
        align_bundle, tmp_path, postgres_server):
    """Postgres text cannot hold NUL: the store writes U+FFFD for it. Before: the second import of the
    same bundle compared the stored U+FFFD with the bundle's NUL and refused it, ``already exists with
    other content (question differ)``, though importing twice adds nothing."""
    bundle = _crafted(align_bundle[1], tmp_path / "nul.gz", "questions", "question", "What is 2\x00+2?")
    url = postgres_server.database()
    code, output = agora("import", bundle, "--db", url)
    assert code == 0, output
    assert "rows added: runs 1, questions 2, results 8, model_calls 12" in output
    code, output = agora("import", bundle, "--db", url)
    assert code == 0, output
    assert "rows added: none; rows skipped: 23 identical to rows already in " in output
    # a bundle whose text really differs is still refused
    other = _crafted(align_bundle[1], tmp_path / "other.gz", "questions", "question", "What is 3\x00+3?")
    code, output = agora("import", other, "--db", url)
    assert code == 2 and "question differ" in one_error_line(output), output


def test_ids_that_differ_only_by_surrounding_spaces_are_one_id_in_task_files(tmp_path):
    """Before: ``"q1 "`` and ``"q1"`` loaded as two questions whose ids print alike in every report;
    ``agora report question --question-id q1`` showed one of them, the other could hardly be typed."""
    from agora.tasks.loaders import TaskFormatError, load_problems

    data = tmp_path / "t.jsonl"
    data.write_text(json.dumps({"id": "q1 ", "question": "a?", "answer": "#### 1"}) + "\n"
                    + json.dumps({"id": "q1", "question": "b?", "answer": "#### 2"}) + "\n")
    with pytest.raises(TaskFormatError) as refused:
        load_problems(data, "gsm8k")
    assert str(refused.value) == f"{data}:2: field 'id': duplicate id 'q1'"
    data.write_text(json.dumps({"id": " q1 ", "question": "a?", "answer": "#### 1"}) + "\n"
                    + json.dumps({"question_id": "  ", "question": "b?", "answer": "#### 2"}) + "\n")
    assert [p.id for p in load_problems(data, "gsm8k")] == ["q1", "t-2"]


def test_a_graph_inputs_question_id_with_surrounding_spaces_is_the_same_question(tmp_path):
    """Before: a Studio form's ``"q1 "`` after ``"q1"`` was recorded as a second question ``'q1 '``
    (two rows that print alike); now it is ``q1``, refused by the recorder as already recorded."""
    import sqlite3

    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.graphs.question import checked_input
    from agora.graphs.recording import QuestionRecordedError, TraceRecorder
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    assert checked_input({"question": "x", "question_id": " q 1\t"}) == {"question": "x", "question_id": "q 1"}
    chats = {m: ScriptedChatModel(responses=["The answer is 4."], cycle=True) for m in "ab"}
    graph = build_delegation_graph().compile()

    def context():
        return DelegationContext(ModelPool.from_chat_models(chats), DelegationConfig(n_agents=2, k_samples=1, tau=0.5))

    with TraceRecorder(tmp_path / "app.db", run_id="app") as recorder:
        graph.invoke({"question": "What is 2+2?", "question_id": "q1", "gold": "4"}, {"callbacks": [recorder]},
                     context=context())
        with pytest.raises(QuestionRecordedError, match="question id 'q1' is already recorded"):
            graph.invoke({"question": "What is 2+2?", "question_id": "q1 ", "gold": "4"}, {"callbacks": [recorder]},
                         context=context())
    with sqlite3.connect(tmp_path / "app.db") as conn:
        assert conn.execute("select question_id, correct from questions").fetchall() == [("q1", 1)]


def test_an_integral_float_gold_or_answer_is_the_integer_it_is_written_as(tmp_path):
    """A JSON ``1e23`` is the float 99999999999999991611392.0. Before: a gsm-hard ``target`` (or a MATH
    ``answer``) of ``1e23`` became the gold ``99999999999999991611392``, and a reply ``The answer is
    1e23.`` was read as that integer too, so the reply ``100000000000000000000000`` was scored wrong
    against a gold of ``1e23`` (and the reply ``1e23`` wrong against the gold 10**23)."""
    from agora.tasks.extraction import read_answer
    from agora.tasks.loaders import load_problems
    from agora.tasks.scoring import score_answer

    data = tmp_path / "h.jsonl"
    data.write_text('{"input": "a?", "target": 1e23}\n{"input": "b?", "target": "1e23"}\n'
                    '{"input": "c?", "target": 1.5e300}\n{"input": "d?", "target": 2.5}\n')
    assert [p.gold for p in load_problems(data, "gsm-hard")] == [
        "1" + "0" * 23, "1" + "0" * 23, "15" + "0" * 299, "2.5"]
    data = tmp_path / "m.jsonl"
    data.write_text('{"problem": "a?", "answer": 1e23}\n{"problem": "b?", "answer": 4.0}\n')
    assert [p.gold for p in load_problems(data, "math")] == ["1" + "0" * 23, "4"]
    assert read_answer("The answer is 1e23.", "math", 0).answer == "1" + "0" * 23
    assert score_answer("1" + "0" * 23, "1e+23") is True  # a graph input's gold 1e23 (str(1e23))
    assert score_answer("1e23", "1" + "0" * 23) is True
    assert score_answer("99999999999999991611392", "1e23") is False


def test_a_key_in_a_members_url_query_or_an_unknown_field_is_not_written_to_the_runs_pool(tmp_path):
    """The run's pool description goes into the trace database and every bundle of it. Before:
    ``base_url = "http://host/v1?api_key=QSECRET"`` was stored whole (only ``?password=`` was
    hidden), and ``headers = {Authorization = "Bearer HSECRET"}``, a field the pool warns it ignores,
    was stored as is under ``extra``."""
    from agora.models.urls import shown_url

    with StubServer() as server:
        pool = tmp_path / "pool.toml"
        pool.write_text(f'[[models]]\nname = "a"\nbackend = "openai"\nbase_url = "{server.base_url}?api_key=QSECRET"\n'
                        'model = "a"\nmax_retries = 0\n'
                        f'[[models]]\nname = "b"\nbackend = "openai"\nbase_url = "{server.base_url}"\nmodel = "b"\n'
                        'max_retries = 0\nheaders = {Authorization = "Bearer HSECRET", Accept = "text/plain"}\n')
        code, output = agora("run", "align", "--pool", pool, "--format", "synthetic", "--limit", "1",
                             "--db", tmp_path / "t.db", "--run-id", "s1")
        assert code == 0, output
    assert b"SECRET" not in (tmp_path / "t.db").read_bytes()
    code, output = agora("export", "--db", tmp_path / "t.db", "--run-id", "s1", "--out", tmp_path / "s1.gz")
    assert code == 0, output
    members = json.loads(dict(zip(_lines(tmp_path / "s1.gz")[0]["tables"]["runs"]["columns"],
                                  _lines(tmp_path / "s1.gz")[1]["v"]))["pool"])
    assert members[0]["base_url"] == f"{server.base_url}?api_key=***"
    assert members[1]["extra"] == {"headers": {"Authorization": "***", "Accept": "text/plain"}}
    assert shown_url("http://h/v1?x=1&access_token=T&sig=S#f") == "http://h/v1?x=1&access_token=***&sig=***#f"
    assert shown_url("postgresql://ann:pw@h/db?sslmode=require") == "postgresql://ann:***@h/db?sslmode=require"


@pytest.mark.parametrize("extra, said", [
    ({"gold": "F", "n_choices": 4}, "graph input field 'gold' of a multiple-choice question must be one of the option "
                                    "letters A-D, not 'F'"),
    ({"gold": "2"}, "graph input field 'gold' of a multiple-choice question must be one of the option letters A-D"),
    ({"gold": "B", "n_choices": 1}, "graph input field 'n_choices': a multiple-choice question has at least 2 options"),
    ({"gold": "AB", "n_choices": 4}, "graph input field 'gold' of a multiple-choice question must be one of the option "
                                     "letters A-D, not 'AB'"),  # (a run of letters is no letter)
    ({"gold": "BCD"}, "graph input field 'gold' of a multiple-choice question must be one of the option letters A-D"),
    ({"gold": "B", "n_choices": 0}, "graph input field 'n_choices': a multiple-choice question has at least 2 options"),
])
def test_a_multiple_choice_graph_input_whose_gold_no_answer_can_match_is_refused(extra, said):
    """Before: Studio's ``{"kind": "mc", "gold": "F", "n_choices": 4}`` ran every model and scored every
    method wrong (no answer is read outside A-D), as did ``n_choices`` 1 (no letter is read at all);
    a task file refuses both, naming its line."""
    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    chats = {m: ScriptedChatModel(responses=["The answer is B."], cycle=True) for m in "ab"}
    graph = build_delegation_graph().compile()
    question = "Which is 2 + 2?\nA. 3\nB. 4\nC. 5\nD. 6"

    def invoke(**fields):
        return graph.invoke({"question": question, "kind": "mc", **fields}, context=DelegationContext(
            ModelPool.from_chat_models(chats), DelegationConfig(n_agents=2, k_samples=1, tau=0.5, shots=0)))

    with pytest.raises(ValueError) as refused:
        invoke(**extra)
    assert str(refused.value).startswith(said), str(refused.value)
    assert all(chat.calls == [] for chat in chats.values())  # refused before any model was asked
    for fields in ({"gold": "b", "n_choices": 4}, {"gold": "B"}, {"gold": "B", "n_choices": 2}):
        assert {m["correct"] for m in invoke(**fields)["methods"].values()} == {True}


def test_a_postgres_url_whose_own_connect_timeout_is_bad_is_one_line_at_once(postgres_server):
    """Before: the first connection (checking the URL) set its own ``connect_timeout``, so a URL's
    ``&connect_timeout=abc`` passed it; the pool's connections then failed in the background,
    printing ``error connecting in 'agora-traces'`` again and again for 30 s, and the command ended
    with exit 1 and no error line."""
    import time

    url = postgres_server.database()
    started = time.monotonic()
    code, output = agora("report", "runs", "--db", url + "&connect_timeout=abc")
    assert code == 2, output
    assert one_error_line(output).endswith("cannot connect to the Postgres trace store (bad value for connect_timeout: 'abc')")
    assert time.monotonic() - started < 20
    code, output = agora("report", "runs", "--db", url + "&connect_timeout=5")  # a good one connects
    assert one_error_line(output).endswith("connect_timeout=5: no trace tables in this database"), output


@pytest.mark.parametrize("key, named, said", [
    ("runs", ["a1", "ghost"], "the header names run 'ghost', but the bundle holds no runs row of it"),
    ("benches", ["b9"], "the header names bench 'b9', but the bundle holds no benches row of it"),
])
def test_a_bundle_whose_header_names_a_run_or_bench_it_holds_no_row_of_is_refused(align_bundle, tmp_path, key, named, said):
    """Before: ``imported ...: 2 runs`` for a bundle whose header listed runs a1 and ghost and whose
    rows held a1 only (ghost's rows removed by hand): a run reported imported that is nowhere."""
    lines = _lines(align_bundle[1])
    lines[0][key] = named
    bundle = tmp_path / "b.gz"
    with gzip.open(bundle, "wt", encoding="utf-8") as f:
        for line in lines[:-1] + [{"end": True, "rows": lines[-1]["rows"]}]:
            f.write(json.dumps(line) + "\n")
    code, output = agora("import", bundle, "--db", tmp_path / "i.db")
    assert code == 2, output
    assert f"b.gz:1: {key}: {said}" in one_error_line(output)
    assert not (tmp_path / "i.db").exists()
