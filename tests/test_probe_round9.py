"""Probe round 9: what a fresh user and an attacker found still wrong, each with its fix."""

from __future__ import annotations

from agora.models.recipes.sandbox import SandboxLimits, run_program

LIMITS = SandboxLimits(cpu_s=2, wall_s=6, memory_mb=256, output_bytes=4096)


def test_sympys_plot_interval_string_is_evaluated_restricted():
    """``sympy.plotting.pygletplot.plot_interval.PlotInterval("...")`` (importable without pyglet)
    ``eval``s its string with the interpreter's built-ins: ``__import__('os').getpid()`` ran and
    ``__builtins__`` held the interpreter's 150-odd names."""
    program = ("from sympy.plotting.pygletplot.plot_interval import PlotInterval\n"
               "print(PlotInterval(\"(None, 0, 1, __import__('os').getpid())\"))\n")
    run = run_program(program, LIMITS)
    assert run.status == "error"
    assert run.error.startswith('SyntaxError: Line 1: "__import__" is an invalid variable name'), run.error
    run = run_program(program.replace("__import__('os').getpid()", "len(open('x', 'w').name)"), LIMITS)
    assert run.error == "NameError: name 'open' is not defined"
    fine = ("from sympy.plotting.pygletplot.plot_interval import PlotInterval\n"
            "print(PlotInterval('(None, 0, 1, 4)'), PlotInterval(\"(Symbol('t'), 0, 2, 8)\"))\n")
    run = run_program(fine, LIMITS)
    assert (run.status, run.output) == ("ok", "[None,0,1,4] [t,0,2,8]\n"), run


def test_private_modules_and_sympys_test_helpers_are_not_importable(tmp_path):
    """``import sympy.utilities._compilation.util as u`` passed RestrictedPython (which refuses
    ``from sympy.utilities import _compilation``): ``u.sha256_of_file`` read any file, ``u.copy``
    copied one. ``sympy.testing.tmpfiles.TmpFileManager.cleanup()`` removes any folder it is given
    (only Landlock stopped it; without pytest installed it imports)."""
    cases = [
        ("import sympy.utilities._compilation.util as u\nprint(u.sha256_of_file('pyvenv.cfg'))",
         "ImportError: import of 'sympy.utilities._compilation.util' is not allowed (a private module)"),
        ("from sympy.utilities._compilation import util\nprint(util)",
         "ImportError: import of 'sympy.utilities._compilation' is not allowed (a private module)"),
        (f"from sympy.testing.tmpfiles import TmpFileManager\nTmpFileManager.tmp_folder({str(tmp_path)!r})\n"
         "TmpFileManager.cleanup()\nprint('removed')",
         "ImportError: import of 'sympy.testing.tmpfiles' is not allowed (sympy's test suite)"),
        ("import sympy.testing\nprint(1)", "ImportError: import of 'sympy.testing' is not allowed (sympy's test suite)"),
        ("from sympy import testing\nprint(testing)", "ImportError: import of 'sympy.testing' is not allowed (sympy's test suite)"),
    ]
    for program, error in cases:
        run = run_program(program, LIMITS)
        assert (run.status, run.error) == ("error", error), program
    assert tmp_path.exists()
    run = run_program("import sympy.ntheory.factor_ as f\nprint(f.factorint(12))", LIMITS)
    assert (run.status, run.output) == ("ok", "{2: 2, 3: 1}\n")


def test_trace_stores_opened_at_once_on_a_new_database_by_threads_all_open(tmp_path):
    """Ten per-request ``TraceRecorder``s (each its own run id) opening a new database at once: nine
    failed at once with ``the database is locked by another process (waited 30 s)``, 0.0 s after
    they started, and their questions were lost. Creating the schema read, then wrote, in one
    transaction: SQLite refuses that upgrade without waiting when another connection wrote between."""
    import threading

    from agora.traces.store import TraceStore

    db = tmp_path / "new.db"
    start, errors, stores = threading.Barrier(10), [], []

    def open_store():
        start.wait()
        try:
            stores.append(TraceStore(db))
        except Exception as exc:  # noqa: BLE001 - counted below
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(stores) == 10
    for i, store in enumerate(stores):  # each writes its own run
        store.start_run(f"r{i}", "align", config={}, pool=[], dataset={})
    assert stores[0].run_ids() == sorted(f"r{i}" for i in range(10))


def _loopback_align():
    """(stub server, a pool of two user ``ChatOpenAI`` clients on it, the compiled ALIGN graph, its context)."""
    import sys
    import threading
    import time
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from langchain_openai import ChatOpenAI
    from openai_stub import StubServer, chat_reply

    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.models.pool import ModelPool

    arrived, together = [], threading.Event()

    def slow(path, body):  # the first invocations overlap: the first 6 requests are answered together
        arrived.append(1)
        if len(arrived) >= 6:
            together.set()
        together.wait(10)
        time.sleep(0.1)
        return 200, chat_reply(body)

    server = StubServer(slow)
    pool = ModelPool.from_chat_models({m: ChatOpenAI(base_url=server.base_url, api_key="k", model=m, max_retries=0,
                                                     timeout=10) for m in "ab"}, max_retries=0)
    context = DelegationContext(pool, DelegationConfig(n_agents=2, k_samples=2, tau=0.5))
    return server, build_delegation_graph().compile(), context


def _rows(db, sql):
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_two_recorders_of_one_run_id_at_once_are_refused_not_merged(tmp_path):
    """Per-request recorders sharing a run id, requests at once: one got ``sqlite3.IntegrityError:
    UNIQUE constraint failed: runs.run_id`` (a traceback, its question lost), others took the same
    question id and were upserted into one question; two recorders of one run id on one invocation
    wrote the question twice, its 4 ``model_calls`` rows moved to the second (the first counted 4
    and held none). A run id is recorded by one recorder at a time, as it is run by one driver."""
    import threading

    from agora.graphs.recording import TraceRecorder
    from agora.traces.errors import RunLockedError

    db = tmp_path / "app.db"
    server, graph, context = _loopback_align()
    question = {"question": "What is 2 + 2?", "gold": "4"}
    with server:
        start, done, errors = threading.Barrier(3), threading.Barrier(3), []

        def request():
            start.wait()
            try:
                with TraceRecorder(db, run_id="web") as recorder:
                    try:
                        graph.invoke(question, {"callbacks": [recorder]}, context=context)
                    finally:
                        # every request ends before any recorder does; the one recorded waits 10 s
                        # for 6 requests that never come (_loopback_align), so 30 s left a busy
                        # machine 20 s for the rest, then a BrokenBarrierError in every thread
                        done.wait(300)
            except Exception as exc:  # noqa: BLE001 - counted below
                errors.append(exc)

        threads = [threading.Thread(target=request) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(errors) == 2 and all(isinstance(e, RunLockedError) for e in errors), errors
        assert "run id 'web-align' is being recorded by another TraceRecorder or process" in str(errors[0])
        assert "\n" not in str(errors[0])
        assert _rows(db, "select question_id, model_calls from questions") == [("q-f465154e", 4)]
        # the same run id once more, after the first recorder ended: a new question, counts agree
        with TraceRecorder(db, run_id="web") as recorder:
            graph.invoke(question, {"callbacks": [recorder]}, context=context)
        assert _rows(db, "select q.question_id, q.model_calls, count(c.call_id) from questions q join model_calls c "
                         "using (run_id, question_id) group by 1 order by 1") == [
            ("q-f465154e", 4, 4), ("q-f465154e-2", 4, 4)]
        # two recorders of one run id on one invocation: the second is refused, the first records it
        other = tmp_path / "nested.db"
        with TraceRecorder(other, run_id="nest") as first, TraceRecorder(other, run_id="nest") as second:
            try:
                graph.invoke(question, {"callbacks": [first, second]}, context=context)
            except RunLockedError:
                pass
        assert first.recorded == {"align": 1} and second.recorded == {}
        assert _rows(other, "select q.question_id, q.model_calls, count(c.call_id) from questions q join model_calls c "
                            "using (run_id, question_id) group by 1") == [("q-f465154e", 4, 4)]


def test_a_graph_inputs_blank_gold_or_id_is_none_and_a_hidden_character_or_non_finite_gold_is_refused(tmp_path):
    """A graph input's ``gold`` of ``''`` or ``'  '`` (a Studio form's cleared field) scored every
    method wrong (``correct`` 0 where there was no gold to score against), a ``nan`` gold likewise;
    a ``question_id`` of ``' '`` was recorded as the id ``' '``, and one holding a newline or
    U+202E was stored and printed as is (task files refuse such ids, naming file, line and field)."""
    import math

    import pytest

    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.graphs.question import check_question_id, checked_input
    from agora.graphs.recording import TraceRecorder
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    q = "What is 2 + 2?"
    assert checked_input({"question": q, "gold": "  ", "question_id": " "}) == {"question": q}
    assert checked_input({"question": q, "gold": ""}) == {"question": q}
    assert checked_input({"question": q, "gold": " 4 ", "question_id": "q 1"}) == {
        "question": q, "gold": " 4 ", "question_id": "q 1"}
    for qid, what in (("q\n1", "'\\n'"), ("\u202eq", "'\\u202e'"), ("a\u200bb", "'\\u200b'")):
        with pytest.raises(ValueError) as refused:
            check_question_id(qid)
        assert str(refused.value).startswith(f"graph input field 'question_id': {qid!r} holds the control or "
                                             f"invisible character {what}"), str(refused.value)
    for gold in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="graph input field 'gold' must be a finite number"):
            checked_input({"question": q, "gold": gold})
    chats = {m: ScriptedChatModel(responses=["The answer is 4."], cycle=True) for m in "ab"}
    graph = build_delegation_graph().compile()
    out = graph.invoke({"question": q, "gold": ""}, context=DelegationContext(
        ModelPool.from_chat_models(chats), DelegationConfig(n_agents=2, k_samples=1, tau=0.5)))
    assert {m["correct"] for m in out["methods"].values()} == {None}
    with TraceRecorder(tmp_path / "app.db", run_id="app") as recorder:  # recorded ids are checked before any call
        with pytest.raises(ValueError, match="holds the control or invisible character"):
            graph.invoke({"question": q, "question_id": "q\n1"}, {"callbacks": [recorder]}, context=DelegationContext(
                ModelPool.from_chat_models(chats), DelegationConfig(n_agents=2, k_samples=1, tau=0.5)))
    assert recorder.recorded == {} and recorder.failed == {}


def test_a_gsm_hard_integer_target_beyond_float_precision_keeps_its_value(tmp_path):
    """A gsm-hard ``target`` that is an integer beyond 2**53 went through ``float``:
    ``12345678901234567890123`` became the gold ``12345678901234567741440``, and the right answer
    was scored wrong (integers are compared exactly)."""
    from agora.tasks.loaders import load_problems
    from agora.tasks.scoring import score_answer

    path = tmp_path / "hard.jsonl"
    path.write_text('{"input": "q1", "target": 12345678901234567890123}\n'
                    '{"input": "q2", "target": "98,765,432,109,876,543,210"}\n'
                    '{"input": "q3", "target": -9007199254740993}\n'
                    '{"input": "q4", "target": 2.5}\n{"input": "q5", "target": 1e20}\n{"input": "q6", "target": "7.0"}\n')
    golds = [p.gold for p in load_problems(path, "gsm-hard")]
    assert golds == ["12345678901234567890123", "98765432109876543210", "-9007199254740993", "2.5",
                     "100000000000000000000", "7"]
    assert score_answer("12345678901234567890123", golds[0], "math")


def test_integers_beyond_a_floats_precision_compare_exactly():
    """Answers were read through ``float``: ``9007199254740993`` was extracted as
    ``9007199254740992.0`` and ``10000000000000001`` as ``1e+16``, so an answer one off a large
    integer gold was scored right and two different answers were one vote (docs/scoring.md:
    integer golds compare exactly)."""
    from agora.tasks.answers import find_answer
    from agora.tasks.comparison import answer_key
    from agora.tasks.scoring import score_answer

    assert find_answer("The answer is 9007199254740993.", "math").answer == "9007199254740993"
    for answer, gold in [("9007199254740993", "9007199254740992"), ("10000000000000001", "10000000000000000"),
                         ("12345678901234567890124", "12345678901234567890123"), ("-9007199254740993", "-9007199254740992")]:
        assert score_answer(find_answer(f"The answer is {answer}.", "math").answer, gold, "math") is False, answer
        assert score_answer(find_answer(f"The answer is {answer}.", "math").answer, answer, "math") is True, answer
    assert answer_key("10000000000000001") != answer_key("10000000000000000")
    assert answer_key("10,000,000,000,000,001") == "10000000000000001"
    assert answer_key("1e16") == answer_key("10000000000000000") == answer_key("10^{16}") == "10000000000000000"
    assert score_answer("1e20", "100000000000000000000", "math") and score_answer("42", "42.0", "math")


def test_a_recipe_with_no_roles_is_refused_as_one_that_never_applies(tmp_path):
    """``recipe = { name = "pot", roles = [] }`` loaded, and the member answered every protocol call
    the plain way: a program-of-thought member that never wrote a program (a misspelt role is refused
    for that reason)."""
    import pytest

    from agora.models.pool import load_pool
    from agora.models.errors import PoolConfigError

    pool = tmp_path / "pool.toml"
    pool.write_text('[[models]]\nname = "a"\nbackend = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
                    'recipe = { name = "pot", roles = [] }\n')
    with pytest.raises(PoolConfigError) as refused:
        load_pool(pool)
    assert str(refused.value) == (f"{pool}: models[0] (a): field 'recipe.roles': no roles: the recipe would apply "
                                  "to no protocol call; name some (agent, candidate, ...) or leave roles out "
                                  "for the answering roles, got []")


def test_a_folder_variable_naming_an_unknown_users_home_is_one_line():
    """``AGORA_CACHE_DIR='~nosuchuser/x'``: ``Path.expanduser`` raised ``RuntimeError: Could not
    determine home directory.`` from the variable check, a traceback from every command."""
    import pytest

    from agora.models.environment import EnvironmentVariableError, check_environment

    for var in ("AGORA_CACHE_DIR", "AGORA_POOL_DIR"):
        with pytest.raises(EnvironmentVariableError) as refused:
            check_environment({var: "~nosuchuser-agora/x"})
        assert str(refused.value).startswith(f"{var}='~nosuchuser-agora/x': '~nosuchuser-agora' is no user's home "
                                             "folder (no such user)"), str(refused.value)


def test_a_pool_path_naming_an_unknown_users_home_is_one_line(tmp_path):
    """``path = "~nosuchuser/m.gguf"`` in a pool file, and a graph context's pool
    ``"~nosuchuser/pool.toml"``, raised ``RuntimeError: Could not determine home directory.``."""
    import pytest

    from agora.graphs.delegation import build_delegation_graph
    from agora.models.errors import PoolConfigError
    from agora.models.pool import load_pool

    pool = tmp_path / "pool.toml"
    pool.write_text('[[models]]\nname = "a"\npath = "~nosuchuser-agora/m.gguf"\n')
    with pytest.raises(PoolConfigError) as refused:
        load_pool(pool)
    assert "field 'path'" in str(refused.value) and "'~nosuchuser-agora' is no user's home folder" in str(refused.value)
    with pytest.raises(PoolConfigError) as refused:
        build_delegation_graph().compile().invoke({"question": "q"}, context={"pool": "~nosuchuser-agora/pool.toml"})
    assert str(refused.value) == ("~nosuchuser-agora/pool.toml: '~nosuchuser-agora' is no user's home folder "
                                  "(no such user); give the pool file's path")


def test_a_reply_whose_usage_block_is_unreadable_keeps_its_samples_with_usage_unknown():
    """A 200 reply with good choices and ``"completion_tokens": "x"`` failed as a permanent error
    (``ValueError: invalid literal for int()``): its samples were lost and the question failed; a
    negative ``prompt_tokens`` was stored as -5, lowering the run's token sums. Unusable counts are
    unknown (NULL), as when a server sends no usage."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from openai_stub import StubServer, chat_reply

    from agora.models.contract import SamplingParams
    from agora.models.pool import ModelSpec, pool_from_specs

    for usage in ({"prompt_tokens": 11, "completion_tokens": "x", "total_tokens": None},
                  {"prompt_tokens": -5, "completion_tokens": 10, "total_tokens": 5},
                  {"prompt_tokens": 11.5, "completion_tokens": 10, "total_tokens": 21.5}):
        def handler(path, body, usage=usage):
            return 200, {**chat_reply(body), "usage": usage}

        with StubServer(handler) as server:
            pool = pool_from_specs([ModelSpec(name="a", backend="openai", model="stub", base_url=server.base_url,
                                              max_retries=0)])
            samples, records = pool.sample("a", [{"role": "user", "content": "2+2?"}], SamplingParams(n=2, seed=1))
        assert [s.text for s in samples] == ["The answer is 4."] * 2, usage
        assert [(r["error"], r["prompt_tokens"], r["completion_tokens"]) for r in records] == [(None, None, None)] * 2, usage
    with StubServer(lambda path, body: (200, {**chat_reply(body), "usage": {"prompt_tokens": 11.0, "completion_tokens": 10,
                                                                             "total_tokens": 21}})) as server:
        pool = pool_from_specs([ModelSpec(name="a", backend="openai", model="stub", base_url=server.base_url, max_retries=0)])
        samples, records = pool.sample("a", [{"role": "user", "content": "2+2?"}], SamplingParams(n=2, seed=1))
    assert [(r["prompt_tokens"], r["completion_tokens"]) for r in records] == [(11, 5), (11, 5)]


def test_a_bundle_row_whose_key_belongs_to_another_run_is_refused_force_or_not(tmp_path):
    """``model_calls`` is keyed by ``call_id`` alone: a bundle of run ``r1`` holding a call whose id is
    a call of run ``victim`` in the database was refused, its message saying ``--force replaces such
    rows``, and with ``--force`` the victim's call moved into ``r1`` (the victim's question counted
    1 call and held none)."""
    import sqlite3

    import pytest

    from agora.traces.bundle import BundleError
    from agora.traces.bundle_export import export_bundle
    from agora.traces.bundle_import import import_bundle
    from agora.traces.store import TraceStore

    def make(db, run, qid, text):
        store = TraceStore(db)
        store.start_run(run, "align", config={"x": 1}, pool=[{"name": "a"}], dataset={})
        call = {"call_id": "c1", "run_id": run, "question_id": qid, "model": "a", "role": "agent", "prompt": "p",
                "completion": text, "created_at": "2026-01-01T00:00:00.000Z", "params": {}}
        store.record_question(run, "align", {"question_id": qid, "idx": 0, "question": "Q", "gold": "4", "answer": "4",
                                             "correct": 1}, {"align": {"answer": "4", "correct": True, "samples": 1}}, [call])
        store.finish_run(run, summary={})
        return store

    make(tmp_path / "victim.db", "victim", "q1", "the victim's call")
    export_bundle(make(tmp_path / "src.db", "r1", "q9", "another call"), tmp_path / "b.agora.jsonl.gz", run_ids=["r1"])
    for force in (False, True):
        with pytest.raises(BundleError) as refused:
            import_bundle(tmp_path / "b.agora.jsonl.gz", TraceStore(tmp_path / "victim.db"), force=force)
        assert str(refused.value) == (
            f"{tmp_path / 'b.agora.jsonl.gz'}:5: model_calls: the row call_id='c1' belongs to run 'victim' in "
            f"{tmp_path / 'victim.db'}, not to the bundle's run 'r1'; nothing was imported, --force or not "
            "(import into another database)")
    conn = sqlite3.connect(tmp_path / "victim.db")
    assert conn.execute("select call_id, run_id, completion from model_calls").fetchall() == [
        ("c1", "victim", "the victim's call")]
    assert conn.execute("select run_id from runs").fetchall() == [("victim",)]


def test_a_synthetic_limit_beyond_the_bound_is_refused_at_once():
    """``agora run align --format synthetic --limit 99999999999999999999999`` generated problems
    until killed (no output after 120 s, memory growing): the count is bounded."""
    import time

    import pytest

    from agora.tasks.loaders import load_problems
    from agora.tasks.synthetic import MAX_SYNTHETIC

    started = time.perf_counter()
    for n in (10**23, MAX_SYNTHETIC + 1):
        with pytest.raises(ValueError) as refused:
            load_problems(None, "synthetic", n)
        assert str(refused.value) == (f"--limit {n}: at most {MAX_SYNTHETIC:,} synthetic problems are generated; "
                                      "give a smaller --limit")
    assert time.perf_counter() - started < 1.0
    assert len(load_problems(None, "synthetic", 3)) == 3 and MAX_SYNTHETIC == 1_000_000


def test_a_pool_path_that_is_a_fifo_or_device_says_so_not_not_found(tmp_path):
    """``--pool fifo`` (or ``/dev/null``) said ``pool file not found``, though the path exists."""
    import os

    import pytest

    from agora.models.errors import PoolConfigError
    from agora.models.pool import load_pool

    fifo = tmp_path / "pool.fifo"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/null"):
        with pytest.raises(PoolConfigError) as refused:
            load_pool(path)
        assert str(refused.value) == (f"{path}: not a regular file (a FIFO, device or socket); give the path of "
                                      "a TOML pool file")


def test_a_pool_members_url_password_is_not_written_to_the_runs_pool_description(tmp_path):
    """``base_url = "http://user:secret@host/v1"`` was kept whole by ``ModelSpec.describe``, which the
    ``runs`` row stores (and bundles export), though ``api_key`` is left out of it."""
    from agora.models.pool import load_pool

    pool = tmp_path / "pool.toml"
    pool.write_text('[[models]]\nname = "a"\nbackend = "openai"\nmodel = "m"\nbase_url = "http://user:secret@127.0.0.1:9/v1"\n'
                    '[[models]]\nname = "b"\nbackend = "openai"\nmodel = "m"\n'
                    'endpoints = ["http://127.0.0.1:9/v1", "https://u:s3cret@example.org/v1"]\n')
    described = load_pool(pool).describe()
    assert described[0]["base_url"] == "http://user:***@127.0.0.1:9/v1"
    assert list(described[1]["endpoints"]) == ["http://127.0.0.1:9/v1", "https://u:***@example.org/v1"]
    assert "secret" not in repr(described) and "s3cret" not in repr(described)
