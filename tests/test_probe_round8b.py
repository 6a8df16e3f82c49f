"""Probe round 8 (b): what a fresh user and an attacker found still wrong, each with its fix."""

from __future__ import annotations

import pytest

from agora.models.recipes.sandbox import SandboxLimits, run_program

LIMITS = SandboxLimits(cpu_s=2, wall_s=6, memory_mb=256, output_bytes=4096)


@pytest.fixture
def loopback_align(tmp_path):
    """A user's own app: ALIGN (two agents, two samples each) over two ``ChatOpenAI`` members ``a``
    and ``b`` of a loopback OpenAI stub that holds every request while ``slow`` is set (it is, at
    first; cleared, replies come at once), until the test ends: a call stays in flight until it is
    cancelled. Yields ``(graph, context, db, slow, server)``: the compiled graph, its context, the
    trace DB path to record into, the ``threading.Event`` and the stub (its ``requests``: arrivals)."""
    import sys
    import threading
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from langchain_openai import ChatOpenAI
    from openai_stub import StubServer, default_handler

    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.models.pool import ModelPool

    slow, ended = threading.Event(), threading.Event()
    slow.set()

    def handler(path, body):
        if slow.is_set():
            ended.wait(60)
        return default_handler(path, body)

    graph = build_delegation_graph().compile()
    with StubServer(handler) as server:
        pool = ModelPool.from_chat_models(
            {m: ChatOpenAI(base_url=server.base_url, api_key="k", model=m, max_retries=0, timeout=10) for m in "ab"},
            max_retries=0)
        context = DelegationContext(pool, DelegationConfig(n_agents=2, k_samples=2, tau=0.5))
        try:
            yield graph, context, tmp_path / "app.db", slow, server
        finally:
            ended.set()


async def _cancelled_in_flight(invocation, server, calls: int = 2) -> float:
    """Await ``invocation`` (a coroutine) as a task and cancel it, as ``asyncio.wait_for``'s timeout
    does, once ``calls`` more model requests have reached the stub (they are in flight: the stub holds
    them); the seconds from its start to the end of its cancellation. A set timeout (0.1 s) cancelled
    a busy machine's invocation before its calls had started."""
    import asyncio
    import time

    start, before = time.monotonic(), len(server.requests)
    task = asyncio.ensure_future(invocation)
    while len(server.requests) < before + calls and not task.done():
        if time.monotonic() - start > 300:
            task.cancel()
            pytest.fail(f"{calls} model requests did not reach the stub in 300 s")
        await asyncio.sleep(0.01)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    return time.monotonic() - start


def _cancelled_invocation(graph, context, db, server):
    """Record one ALIGN invocation of question ``q1`` (3 + 3) from an app's ``asyncio`` code, cancelled
    once both members' calls are in flight (:func:`_cancelled_in_flight`), with a ``TraceRecorder`` on
    run ``app``; returns the recorder once its ``with`` block has ended and the seconds the invocation ran."""
    import asyncio

    from agora.graphs.recording import TraceRecorder

    async def app() -> tuple[TraceRecorder, float]:
        with TraceRecorder(db, run_id="app") as recorder:
            ran = await _cancelled_in_flight(graph.ainvoke({"question": "What is 3 + 3?", "question_id": "q1",
                                                            "gold": "6"}, {"callbacks": [recorder]}, context=context),
                                             server)
        return recorder, ran

    return asyncio.run(app())


def test_a_parse_expr_transformation_of_the_program_does_not_get_the_interpreters_builtins():
    """sympy's ``parse_expr`` hands its ``global_dict`` (the interpreter's ``eval``, ``__import__``,
    ``open`` and ``__builtins__`` copied in) to every transformation, one of the program's too:
    ``g['eval']("__import__('os').getpid()", g)`` ran unrestricted code."""
    program = ("from sympy.parsing.sympy_parser import parse_expr, standard_transformations\n"
               "seen = []\n"
               "def mine(tokens, local_dict, global_dict):\n"
               "    seen.append(global_dict)\n"
               "    return tokens\n"
               "print(parse_expr('x + 1', transformations=standard_transformations + (mine,)))\n"
               "g = seen[0]\n"
               "print('Symbol' in g, g['abs'] is abs, 'eval' in g)\n"
               "g['eval']('1')\n")
    run = run_program(program, LIMITS)
    assert (run.status, run.output) == ("error", "x + 1\nTrue True True\n"), run
    assert run.error == "NameError: name 'eval' is not defined"
    for name in ("exec", "open", "__import__", "compile"):
        run = run_program(program.replace("g['eval']('1')", f"g[{name!r}]('1')"), LIMITS)
        assert run.error == f"NameError: name {name!r} is not defined"
    run = run_program(program.replace("g['eval']('1')", "print(g['__builtins__'])"), LIMITS)
    assert "withheld" in run.output  # a stand-in, not the interpreter's builtins module


def test_sympys_ast_parser_is_refused_not_run_unrestricted():
    """``sympy.parsing.ast_parser.parse_expr`` compiles the string as plain Python: attribute access on
    a ``local_dict`` object reached ``__globals__['__builtins__']`` and then ``os``."""
    program = ("from sympy.parsing import ast_parser\n"
               "b = ast_parser.parse_expr(\"f.__globals__['__builtins__']\", {'f': ast_parser.parse_expr})\n"
               "print(b['__import__']('os').getpid())\n")
    run = run_program(program, LIMITS)
    assert run.status == "error"
    assert run.error == ("NotImplementedError: sympy.parsing.ast_parser is not available in the sandbox "
                         "(use sympy.parse_expr or sympify)")


def test_experimental_lambdify_runs_its_printed_code_restricted():
    """sympy's plotting ``experimental_lambdify`` ``exec``s a lambda printed from the expression with the
    interpreter's built-ins: a symbol named ``__import__('os').getpid()`` ran."""
    program = ("import sympy\n"
               "from sympy.plotting.experimental_lambdify import Lambdifier\n"
               "x = sympy.Symbol('x')\n"
               "print(Lambdifier([x], sympy.Symbol(\"__import__('os').getpid()\") + x, use_python_math=True)(1))\n")
    run = run_program(program, LIMITS)
    assert run.status == "error"
    assert run.error.startswith('SyntaxError: Line 1: "__import__" is an invalid variable name'), run.error
    fine = ("import sympy\nfrom sympy.plotting.experimental_lambdify import experimental_lambdify\n"
            "x = sympy.Symbol('x')\nprint(experimental_lambdify([x], x**2 + 1, use_python_math=True)(3))\n")
    assert (run_program(fine, LIMITS).output) == "10\n"


def test_the_output_cap_holds_when_the_program_changes_its_printer():
    """``printed`` was RestrictedPython's collector, the program's own object: ``printed.cap = 10**12``
    (or appending to ``printed.parts``) let 40 MB come back with ``output_bytes`` 4096, status ok.
    The worker bounds the output itself, and ``printed`` is now the text printed so far (a ``str``):
    the collector is out of the program's reach, and nothing of the 20 MB comes back."""
    raised = run_program("printed.cap = 10 ** 12\nfor i in range(20):\n    print('y' * 10 ** 6)\n", LIMITS)
    assert (raised.status, raised.output) == ("error", "")
    assert raised.error == "AttributeError: 'str' object has no attribute 'cap'"
    appended = run_program("printed.parts.append('z' * 10000)\nprint('end')\n", LIMITS)
    assert (appended.status, appended.output) == ("error", "")
    assert appended.error == "AttributeError: 'str' object has no attribute 'parts'"
    flooded = run_program("x = 'y' * 10 ** 6\nfor i in range(20):\n    print(x)\n", LIMITS)
    assert (flooded.status, flooded.output) == ("output_limit", "")
    assert flooded.error == "OutputLimit: the program printed more than 4096 bytes"
    exact = run_program("print('a' * 4095)\n", LIMITS)  # 4095 + newline = the cap: still fine
    assert (exact.status, len(exact.output)) == ("ok", 4096)


def test_an_async_invocation_cancelled_mid_question_is_a_failed_question_not_dropped(loopback_align):
    """``asyncio.wait_for(graph.ainvoke(...), timeout)`` (or ``task.cancel()``, a web request whose client
    left) stopped the question with ``CancelledError``: the recorder wrote nothing of it and marked
    the run ``finished`` with 0 questions and 0 failed; it is an abandoned question, as a closed stream is."""
    import json

    from agora.traces.store import TraceStore

    graph, context, db, _, server = loopback_align

    recorder, _ = _cancelled_invocation(graph, context, db, server)
    assert recorder.recorded == {} and recorder.failed == {"align": 1}
    run = TraceStore(db).get_run("app-align")
    summary = json.loads(run["summary"])
    assert run["status"] == "failed"
    assert (summary["questions"], summary["failed"]) == (0, 1)
    assert summary["failed_questions"] == {"q1": "the invocation was abandoned (its asyncio task was cancelled)"}


def _load_one(tmp_path, line: str, fmt: str):
    from agora.tasks.loaders import load_problems

    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    return load_problems(path, fmt)[0]


def test_a_gold_whose_commas_do_not_separate_thousands_is_refused_not_read_as_another_number(tmp_path):
    """``#### 1,000,00`` was read as 100000 and ``#### 4,5`` (a decimal comma) as 45: every comma was removed."""
    import pytest

    from agora.tasks.loaders import TaskFormatError

    assert _load_one(tmp_path, '{"question": "q", "answer": "#### 1,234,567"}', "gsm8k").gold == "1234567"
    assert _load_one(tmp_path, '{"question": "q", "answer": "#### -12,345.5"}', "gsm8k").gold == "-12345.5"
    assert _load_one(tmp_path, '{"input": "q", "target": "1,234"}', "gsm-hard").gold == "1234"
    for bad in ("1,000,00", "4,5", "1,2345"):
        with pytest.raises(TaskFormatError) as err:
            _load_one(tmp_path, f'{{"question": "q", "answer": "#### {bad}"}}', "gsm8k")
        assert str(err.value) == (f"{tmp_path / 't.jsonl'}:1: field 'answer': '{bad}': its commas do not separate "
                                  "thousands (1,234,567); write the number without them")
        with pytest.raises(TaskFormatError) as err:
            _load_one(tmp_path, f'{{"input": "q", "target": "{bad}"}}', "gsm-hard")
        assert str(err.value) == f"{tmp_path / 't.jsonl'}:1: field 'target': not a number: '{bad}'"


def test_a_question_id_that_is_not_text_or_a_whole_number_or_holds_a_control_character_is_refused(tmp_path):
    """``"id": {"a": 1}`` became the question id ``"{'a': 1}"``, ``true`` became ``'True'``, and an id with a
    newline or U+202E was stored and printed as it is."""
    import pytest

    from agora.tasks.loaders import TaskFormatError

    line = '{"question": "q", "answer": "#### 4", "id": %s}'
    assert _load_one(tmp_path, line % "7", "gsm8k").id == "7"
    assert _load_one(tmp_path, line % '"gsm-12"', "gsm8k").id == "gsm-12"
    assert _load_one(tmp_path, line % "null", "gsm8k").id == "t-1"
    where = f"{tmp_path / 't.jsonl'}:1: field 'id': "
    for value, why in (('{"a": 1}', "an id is text or a whole number, got dict {'a': 1}"),
                       ("true", "an id is text or a whole number, got bool True"),
                       ("1.5", "an id is text or a whole number, got float 1.5"),
                       ('"a\\nb"', "'a\\nb' holds the control or invisible character '\\n' at position 1; ids are printed "
                                   "and typed, so use visible characters"),
                       ('"x\\u202ey"', "'x\\u202ey' holds the control or invisible character '\\u202e' at position 1; ids "
                                       "are printed and typed, so use visible characters")):
        with pytest.raises(TaskFormatError) as err:
            _load_one(tmp_path, line % value, "gsm8k")
        assert str(err.value) == where + why


def test_an_openai_member_whose_url_is_not_an_http_url_is_refused_when_the_pool_is_loaded(tmp_path):
    """``base_url = "not a url"`` or ``"ftp://x/v1"`` loaded; the run then tried every retry and ended
    'model 'a' is unreachable' (exit 1), as if a server were down."""
    import pytest

    from agora.models.errors import PoolConfigError
    from agora.models.pool import load_pool

    def pool(field: str, value: str):
        path = tmp_path / "pool.toml"
        path.write_text(f'[[models]]\nname = "a"\nbackend = "openai"\n{field} = {value}\nmodel = "m"\n', encoding="utf-8")
        return load_pool(path)

    assert pool("base_url", '"https://api.example.com/v1"').names == ["a"]
    assert pool("base_url", '"http://[::1]:8000/v1"').names == ["a"]
    where = f"{tmp_path / 'pool.toml'}: models[0] (a): field "
    example = ', e.g. "http://127.0.0.1:8000/v1"'
    for field, value, why in (("base_url", '"not a url"', "'not a url' is not an http:// or https:// URL"),
                              ("base_url", '"ftp://x/v1"', "'ftp://x/v1' is not an http:// or https:// URL"),
                              ("base_url", '"127.0.0.1:8000/v1"', "'127.0.0.1:8000/v1' is not an http:// or https:// URL"),
                              ("base_url", '"http://"', "'http://' has no host"),
                              ("base_url", '"http://h:99999/v1"', "'http://h:99999/v1' is not a URL (Port out of range 0-65535)"),
                              ("endpoints", '["http://h:1/v1", "localhost:8000"]', "'localhost:8000' is not an http:// or https:// URL")):
        with pytest.raises(PoolConfigError) as err:
            pool(field, value)
        assert str(err.value) == f"{where}'{field}': {why}{example}"


def test_a_cancelled_question_keeps_its_id_and_the_next_invocation_of_its_text_is_a_new_question(loopback_align):
    """A cancelled invocation wrote no ``model_calls`` rows (its calls were in flight), so the next
    invocation of the same text took its ``q-<crc>`` again and, answered, cleared the failure."""
    import asyncio
    import json
    import zlib

    from agora.graphs.recording import TraceRecorder
    from agora.traces.store import TraceStore

    graph, context, db, slow, server = loopback_align
    question = {"question": "What is 3 + 3?", "gold": "6"}
    base = f"q-{zlib.crc32(b'What is 3 + 3?'):08x}"  # the auto id of a question without question_id

    async def app() -> TraceRecorder:
        with TraceRecorder(db, run_id="app") as recorder:
            await _cancelled_in_flight(graph.ainvoke(dict(question), {"callbacks": [recorder]}, context=context), server)
            slow.clear()
            await graph.ainvoke(dict(question), {"callbacks": [recorder]}, context=context)
        return recorder

    recorder = asyncio.run(app())
    assert recorder.recorded == {"align": 1} and recorder.failed == {"align": 1}
    store = TraceStore(db)
    assert [q["question_id"] for q in store.questions("app-align")] == [f"{base}-2"]
    summary = json.loads(store.get_run("app-align")["summary"])
    assert (summary["questions"], summary["failed"]) == (1, 1)
    assert summary["failed_questions"] == {base: "the invocation was abandoned (its asyncio task was cancelled)"}


def test_a_gsm8k_answer_with_two_final_answer_lines_is_refused_not_read_as_the_last(tmp_path):
    """``#### 4\\n#### 5`` scored against 5, the last; real GSM8K answers have exactly one ``####``."""
    import pytest

    from agora.tasks.loaders import TaskFormatError

    with pytest.raises(TaskFormatError) as raised:
        _load_one(tmp_path, '{"question": "2 + 2?", "answer": "so 4\\n#### 4\\n#### 5"}', "gsm8k")
    assert str(raised.value) == (f"{tmp_path / 't.jsonl'}:1: field 'answer': 2 '#### N' final answers "
                                 "(#### 4, #### 5); a GSM8K answer has exactly one")
    assert "\n" not in str(raised.value)
    assert _load_one(tmp_path, '{"question": "2 + 2?", "answer": "so 4\\n#### 4"}', "gsm8k").gold == "4"


def test_train_data_only_warns_of_an_empty_dataset_and_refuses_bad_settings_as_training_does(tmp_path, duel_pairs_db):
    """``--data-only`` wrote an empty dataset in silence where training refuses it, and did not check
    ``--lr nan`` or ``--epochs -1`` at all. An empty dataset is still written with its statistics
    (they say why it is empty), with training's refusal as a warning; bad settings are refused."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_verified_data import agora

    db = duel_pairs_db
    out = agora("train", "dpo", "--model", "a", "--data-only", "--db", db, "--out", tmp_path / "e", "--min-margin", 5)
    assert out.exit_code == 0 and "Traceback" not in out.output
    assert ("warning: no preference pairs to train 'a' on (0 after the filters {'min_margin': 5.0, 'model': 'a', "
            "'dedupe': True, 'run_ids': (), 'iterations': ()}, 0 held out); run more duels or relax --min-margin "
            "(training would refuse this dataset)") in out.output.replace("\n", "")
    assert json.loads((tmp_path / "e" / "dataset" / "stats.json").read_text())["rows"] == 0
    assert (tmp_path / "e" / "dataset" / "train.jsonl").read_text() == ""
    for flags, message in ((("--lr", "nan"), "error: --lr: must be a finite number, got nan"),  # as typer parses it
                           (("--epochs", "-1"), "epochs must be > 0 unless max_steps is set")):
        out = agora("train", "dpo", "--model", "a", "--data-only", "--db", db, "--out", tmp_path / "o", *flags)
        assert out.exit_code == 2 and message in out.output, out.output
        assert len([line for line in out.output.splitlines() if line.strip()]) == 1
        assert not (tmp_path / "o").exists()
    ok = agora("train", "dpo", "--model", "a", "--data-only", "--db", db, "--out", tmp_path / "k", "--validation", 0)
    assert ok.exit_code == 0, ok.output


def test_a_max_tokens_beyond_any_context_is_refused_naming_the_option(tmp_path, monkeypatch):
    """``--max-tokens 99999999999999999999`` was accepted and sent to servers as is."""
    import sys
    from pathlib import Path

    import pytest

    sys.path.insert(0, str(Path(__file__).parent))
    from test_verified_data import agora

    from agora.agents.delegation import DelegationConfig
    from agora.models.contract import SamplingParams
    from agora.tasks.errors import InputError

    monkeypatch.chdir(tmp_path)  # (before the fix the run went ahead: its agora.db lands here)
    for command in (("run", "align"), ("run", "comed"), ("bench",), ("duel",), ("select",)):
        out = agora(*command, "--max-tokens", "99999999999999999999", "--pool", tmp_path / "none.toml")
        assert out.exit_code == 2, (command, out.output)
        assert out.output.strip() == ("error: --max-tokens: must be an integer from 1 to 1000000, got "
                                      "99999999999999999999"), (command, out.output)
        assert "Traceback" not in out.output
    assert SamplingParams(max_tokens=1_000_000).max_tokens == 1_000_000
    with pytest.raises((InputError, ValueError)) as raised:
        SamplingParams(max_tokens=1_000_001)
    assert "max_tokens" in str(raised.value) and "at most 1000000" in str(raised.value)
    with pytest.raises((InputError, ValueError)) as raised:
        DelegationConfig(max_tokens=10 ** 20)
    assert "max_tokens" in str(raised.value) and "at most 1000000" in str(raised.value)


def test_a_pool_member_name_that_is_not_text_or_repeats_another_after_nfkc_is_refused(tmp_path):
    """``name = 5`` was reported "missing or empty"; full-width ``"ａ"`` beside ``"a"`` (one name after
    NFKC normalisation, as a terminal or a report shows them alike) made two members."""
    import pytest

    from agora.models.errors import PoolConfigError
    from agora.models.pool import load_pool

    stub = 'backend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
    pool = tmp_path / "p.toml"
    pool.write_text(f"[[models]]\nname = 5\n{stub}", encoding="utf-8")
    with pytest.raises(PoolConfigError) as raised:
        load_pool(pool)
    assert str(raised.value) == f"{pool}: models[0]: field 'name': must be text, got 5"
    pool.write_text(f'[[models]]\nname = "a"\n{stub}\n[[models]]\nname = "\uff41"\n{stub}', encoding="utf-8")
    with pytest.raises(PoolConfigError) as raised:
        load_pool(pool)
    assert str(raised.value) == (f"{pool}: models[1] (\uff41): field 'name': '\uff41' is the name of models[0] "
                                 "('a') once normalised (NFKC); give each member its own name")
    pool.write_text(f'[[models]]\nname = "a"\n{stub}\n[[models]]\nname = "b"\n{stub}', encoding="utf-8")
    assert load_pool(pool).names == ["a", "b"]


def test_the_model_calls_in_flight_when_an_invocation_is_cancelled_are_recorded_as_failed_attempts(loopback_align):
    """A cancelled invocation's calls awaiting their model were dropped: the failed question had no
    ``model_calls`` row at all. Each is now a failed attempt with error ``cancelled``."""
    from agora.traces.store import TraceStore

    graph, context, db, _, server = loopback_align

    _, ran = _cancelled_invocation(graph, context, db, server)
    calls = TraceStore(db).calls("app-align", "q1")
    assert sorted((c["model"], c["attempt"], c["error"], c["completion"]) for c in calls) == [
        ("a", 0, "cancelled", None), ("b", 0, "cancelled", None)]
    assert all(0 < c["latency_s"] <= ran for c in calls)  # the time until the cancellation (no reply came)
