"""The OpenAI-compatible backend against a stub server on 127.0.0.1: n samples, fewer choices,
errors and retries, timeouts, structured outputs, logprobs, several endpoints, concurrency, and a
server that dies in the middle of a run."""

import asyncio
import logging
import threading

import pytest
from openai_stub import StubServer, chat_reply
from ports import free_ports

from agora.agents.delegation import DelegationConfig
from agora.models.openai_backend import OpenAICompatibleChatModel, split_tokens
from agora.models.pool import ModelCallError, ModelPool, ModelSpec, PoolConfigError, SamplingParams, load_pool, pool_from_specs
from agora.models.structured import parse_json_reply
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.runner import run_problems
from agora.tasks.problem import Problem
from agora.traces.store import TraceStore

MSG = [{"role": "user", "content": "What is 2 + 2?"}]
SCORE = {"type": "object", "required": ["score"], "additionalProperties": False,
         "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10}}}


def free_port() -> int:
    """A port nothing listens on, below the ephemeral range (ports.py): a client connecting to it is
    refused, never given it as its own source port, and a stub server stopped on it binds it again."""
    return free_ports()


def pool_for(*urls: str, name: str = "m", max_retries: int = 0, **fields) -> ModelPool:
    spec = ModelSpec(name=name, backend="openai", model="stub", endpoints=tuple(urls), max_retries=max_retries,
                     **fields)
    return pool_from_specs([spec])


def test_split_tokens_adds_up_and_spreads_the_remainder():
    assert split_tokens(10, 3) == [4, 3, 3]
    assert split_tokens(6, 3) == [2, 2, 2]
    assert split_tokens(0, 2) == [0, 0]
    assert split_tokens(5, 0) == []


def test_n_choices_in_one_request_with_seed_stop_and_max_tokens():
    with StubServer() as srv:
        samples, records = pool_for(srv.base_url).sample(
            "m", MSG, SamplingParams(n=3, max_tokens=17, seed=5, stop=("\n\n",), temperature=0.3))
    assert [s.text for s in samples] == ["The answer is 4."] * 3
    assert [s.completion_tokens for s in samples] == [5, 5, 5]  # 15 reported for 3 choices
    assert all(s.prompt_tokens == 11 for s in samples)
    (body,) = srv.bodies()
    assert (body["n"], body["max_tokens"], body["seed"], body["stop"], body["temperature"]) == (3, 17, 5, ["\n\n"], 0.3)
    assert "response_format" not in body and "logprobs" not in body
    assert len(records) == 3 and all(r["error"] is None for r in records)


def test_fewer_choices_than_n_asks_again_for_the_rest_with_moved_seeds():
    with StubServer(lambda path, body: (200, chat_reply(body, choices=1))) as srv:
        samples, _ = pool_for(srv.base_url).sample("m", MSG, SamplingParams(n=3, seed=100))
    assert len(samples) == 3
    assert [(b["n"], b["seed"]) for b in srv.bodies()] == [(3, 100), (2, 101), (1, 102)]


def test_a_server_that_returns_no_choices_gives_fewer_samples_without_looping():
    with StubServer(lambda path, body: (200, chat_reply(body, choices=0))) as srv:
        samples, records = pool_for(srv.base_url).sample("m", MSG, SamplingParams(n=4))
    assert samples == [] and len(srv.requests) == 1
    # the empty reply is a failed attempt with its own trace row (issue 16 item 6)
    assert len(records) == 1 and "EmptyResponseError" in records[0]["error"] and "zero choices" in records[0]["error"]


def test_http_500_is_retried_and_logged_then_succeeds():
    calls = []

    def flaky(path, body):
        calls.append(1)
        return (500, {"error": {"message": "boom"}}) if len(calls) == 1 else (200, chat_reply(body))

    with StubServer(flaky) as srv:
        samples, records = pool_for(srv.base_url, max_retries=2).sample("m", MSG, SamplingParams(n=2))
    assert len(samples) == 2
    failed = [r for r in records if r["error"]]
    assert len(failed) == 1 and "InternalServerError" in failed[0]["error"] and failed[0]["attempt"] == 0
    assert [r["attempt"] for r in records if not r["error"]] == [1, 1]


def test_timeout_is_a_logged_failure_not_a_dead_server():
    release = threading.Event()

    def slow(path, body):
        release.wait(5)
        return 200, chat_reply(body)

    with StubServer(slow) as srv:
        samples, records = pool_for(srv.base_url, timeout_s=0.3).sample("m", MSG, SamplingParams())
        release.set()
    assert samples == []
    assert len(records) == 1 and "APITimeoutError" in records[0]["error"]


def test_structured_output_request_and_strict_parse(caplog):
    with StubServer(lambda path, body: (200, chat_reply(body, texts=['{"score": 7}']))) as srv:
        samples, _ = pool_for(srv.base_url).sample("m", MSG, SamplingParams(temperature=0, json_schema=SCORE))
        pool_for(srv.base_url, structured_outputs="vllm").sample("m", MSG, SamplingParams(json_schema=SCORE))
    first, second = srv.bodies()
    assert first["response_format"] == {"type": "json_schema",
                                        "json_schema": {"name": "reply", "schema": SCORE, "strict": True}}
    assert second["structured_outputs"] == {"json": SCORE} and "response_format" not in second
    assert parse_json_reply(samples[0].text, SCORE, model="m") == {"score": 7}


@pytest.mark.parametrize("reply, reason", [
    ("Score: 7", "not JSON"),
    ('```json\n{"score": 7}\n```', "not JSON"),
    ('{"score": 11}', "maximum"),
    ('{"score": "7"}', "expected integer"),
    ('{"score": true}', "expected integer"),
    ('{"grade": 7}', "missing score"),
    ('{"score": 7, "why": "ok"}', "unexpected why"),
    ("[7]", "JSON object"),
])
def test_malformed_judge_replies_are_rejected_and_logged(reply, reason, caplog):
    with caplog.at_level(logging.WARNING, logger="agora.structured"):
        assert parse_json_reply(reply, SCORE, model="judge-a") is None
    assert "judge-a" in caplog.text and reason in caplog.text


def test_a_structured_reply_with_a_runaway_number_is_rejected_not_a_crash(caplog):
    """A number longer than json reads (4,300+ digits, a model repeating a digit to its token cap)
    is a reply that is not JSON: rejected and logged, like any other."""
    with caplog.at_level(logging.WARNING, logger="agora.structured"):
        assert parse_json_reply('{"score": ' + "9" * 5000 + "}", SCORE, model="judge-a") is None
    assert "judge-a" in caplog.text and "not JSON" in caplog.text


def test_server_refusing_the_schema_is_asked_without_it_once_logged(caplog):
    def picky(path, body):
        if "response_format" in body:
            return 400, {"error": {"message": "response_format not supported"}}
        return 200, chat_reply(body, texts=["score 8"])

    with StubServer(picky) as srv, caplog.at_level(logging.WARNING, logger="agora.openai"):
        pool = pool_for(srv.base_url)
        samples, _ = pool.sample("m", MSG, SamplingParams(json_schema=SCORE))
        pool.sample("m", MSG, SamplingParams(json_schema=SCORE))
    assert samples[0].text == "score 8"
    assert ["response_format" in b for b in srv.bodies()] == [True, False, False]
    assert caplog.text.count("refused structured output") == 1


def test_logprobs_sum_top_alternatives_and_per_choice_token_counts():
    tokens = [("4", -0.25), (".", -0.5)]
    with StubServer(lambda path, body: (200, chat_reply(body, logprobs=tokens))) as srv:
        samples, _ = pool_for(srv.base_url).sample("m", MSG, SamplingParams(n=2, logprobs=2))
    (body,) = srv.bodies()
    assert body["logprobs"] is True and body["top_logprobs"] == 2
    assert samples[0].logprob == pytest.approx(-0.75)
    assert samples[0].completion_tokens == 2  # counted from the logprobs, not the usage share (5)
    assert samples[0].top_logprobs == ({"4": -0.25, "x": -1.25}, {".": -0.5, "x": -1.5})


def test_fewshot_prompt_format_uses_the_completions_endpoint():
    with StubServer() as srv:
        samples, _ = pool_for(srv.base_url, prompt_format="fewshot").sample("m", MSG, SamplingParams(n=2))
    (req,) = srv.requests
    assert req["path"] == "/v1/completions"
    assert req["body"]["prompt"] == "Question: What is 2 + 2?\nAnswer:"
    assert "\nQuestion:" in req["body"]["stop"]
    assert [s.text for s in samples] == ["4", "4"]


def test_requests_rotate_over_endpoints_and_a_dead_one_is_skipped_with_a_logged_error(caplog):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with StubServer() as a, StubServer() as b, caplog.at_level(logging.ERROR, logger="agora.openai"):
        pool = pool_for(a.base_url, dead, b.base_url)
        results = [pool.sample("m", MSG, SamplingParams()) for _ in range(6)]
    assert all(len(samples) == 1 and not any(r["error"] for r in recs) for samples, recs in results)
    assert len(a.requests) + len(b.requests) == 6 and min(len(a.requests), len(b.requests)) >= 2
    assert caplog.text.count(f"endpoint {dead} is unreachable") == 1  # then skipped while marked dead


def test_every_endpoint_dead_raises_model_call_error_after_retries(caplog):
    pool = pool_for(f"http://127.0.0.1:{free_port()}/v1", max_retries=1)
    with caplog.at_level(logging.ERROR, logger="agora.openai"), pytest.raises(ModelCallError) as info:
        pool.sample("m", MSG, SamplingParams())
    assert "unreachable" in str(info.value)
    assert caplog.text.count("is unreachable") == 1  # once per outage, not per attempt
    assert len(info.value.records) == 2 and all("ModelUnavailableError" in r["error"] for r in info.value.records)


def all_at_once(k: int):
    """A stub handler that holds each request until ``k`` are in flight; a request that waits in
    vain (they did not overlap) gets a 500."""
    barrier = threading.Barrier(k, timeout=10)

    def together(path, body):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return 500, {"error": {"message": "requests did not overlap"}}
        return 200, chat_reply(body)

    return together


def run_one_question(tmp_path, context):
    """``What is 2 + 2?`` through the runner; its outcome."""
    outcome = run_problems(build_delegation_graph(), [Problem("q1", "What is 2 + 2?", "4")],
                           store=TraceStore(tmp_path / "t.db"), run_id="r", protocol="align",
                           context=context, config={}, pool_description=[], dataset={})
    return outcome.outcomes[0]


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "runner"])
def test_agents_of_one_fan_out_reach_the_server_concurrently(tmp_path, how):
    # The stub holds each request until all three agents' requests are in flight; a backend or
    # graph that serialised them would leave the barrier broken and every request failing.
    # "runner": run_problems, which drives the graph with ainvoke on its own event loop.
    with StubServer(all_at_once(3)) as srv:
        context = DelegationContext(pool=pool_for(srv.base_url), config=DelegationConfig(n_agents=3, k_samples=4))
        question = {"question": "What is 2 + 2?", "gold": "4"}
        if how == "invoke":
            out = build_delegation_graph().compile().invoke(question, context=context)
        elif how == "ainvoke":
            out = asyncio.run(build_delegation_graph().compile().ainvoke(question, context=context))
        else:
            outcome = run_one_question(tmp_path, context)
            out = {"answer": outcome.answer, "methods": outcome.methods}
    assert len(srv.requests) == 3 and [b["n"] for b in srv.bodies()] == [4, 4, 4]
    starts, ends = [r["start"] for r in srv.requests], [r["end"] for r in srv.requests]
    assert max(starts) < min(ends)  # all three were in flight at once
    assert out["answer"] == "4" and out["methods"]["align"]["correct"] is True


def test_the_runner_sends_a_fan_out_wider_than_the_default_thread_pool_at_once(tmp_path):
    # asyncio's default pool (cpus + 4 threads) would hold some of 12 agents' requests back
    with StubServer(all_at_once(12)) as srv:
        context = DelegationContext(pool=pool_for(srv.base_url, max_retries=0),
                                    config=DelegationConfig(n_agents=12, k_samples=1))
        outcome = run_one_question(tmp_path, context)
    assert len(srv.requests) == 12
    assert outcome.methods["align"]["correct"] is True


def test_a_server_that_dies_mid_run_stops_the_run_resumably(tmp_path):
    port = free_port()
    problems = [Problem(id=f"q{i}", question=f"What is {i} + {i}?", gold=str(2 * i), kind="math") for i in range(1, 5)]

    def dies_after_q2(path, body):
        return 200, chat_reply(body, texts=["The answer is 2."])

    store = TraceStore(tmp_path / "t.db")
    cfg = DelegationConfig(n_agents=2, k_samples=2, models=("m",))
    context = DelegationContext(pool=pool_for(f"http://127.0.0.1:{port}/v1", max_retries=1), config=cfg)
    kwargs = dict(store=store, run_id="r1", protocol="align", context=context, config={}, pool_description=[],
                  dataset={})
    srv = StubServer(dies_after_q2, port=port).__enter__()
    done = []

    def on_question(q):
        done.append(q.problem.id)
        if len(done) == 2:
            srv.stop()

    with pytest.raises(ModelCallError):
        run_problems(build_delegation_graph(), problems, on_question=on_question, **kwargs)
    assert store.finished_questions("r1") == {"q1", "q2"}
    with StubServer(dies_after_q2, port=port):
        outcome = run_problems(build_delegation_graph(), problems, **kwargs)
    assert outcome.skipped == 2 and [q.problem.id for q in outcome.outcomes] == ["q3", "q4"]
    assert store.finished_questions("r1") == {"q1", "q2", "q3", "q4"}
    ok = {q: [c for c in store.calls("r1", q) if c["error"] is None] for q in ("q1", "q2", "q3", "q4")}
    assert all(len(calls) == 4 for calls in ok.values())
    # q3's failed attempts (the server was down) are rows too, with their error (issue 16 item 6)
    failed = [c for c in store.calls("r1") if c["error"]]
    assert failed and {c["question_id"] for c in failed} == {"q3"}
    assert all("ModelUnavailableError" in c["error"] for c in failed)


def test_pool_file_endpoints_and_validation(tmp_path):
    f = tmp_path / "pool.toml"
    f.write_text('[[models]]\nname = "q"\nbackend = "openai"\nmodel = "Q"\n'
                 'endpoints = ["http://h1:8000/v1", "http://h2:8000/v1"]\ntimeout_s = 5\n'
                 'structured_outputs = "vllm"\n')
    member = load_pool(f)["q"]
    assert member.spec.endpoints == ("http://h1:8000/v1", "http://h2:8000/v1")
    assert isinstance(member.chat_model, OpenAICompatibleChatModel)
    assert member.chat_model.endpoints == ["http://h1:8000/v1", "http://h2:8000/v1"]
    assert (member.chat_model.timeout_s, member.chat_model.structured_outputs) == (5, "vllm")
    for bad, field in [('endpoints = "http://h1/v1"', "endpoints"), ("", "base_url"),
                       ('base_url = "http://h/v1"\nstructured_outputs = "guided"', "structured_outputs")]:
        f.write_text(f'[[models]]\nname = "q"\nbackend = "openai"\nmodel = "Q"\n{bad}\n')
        with pytest.raises(PoolConfigError, match=f"field '{field}'"):
            load_pool(f)



def test_cli_run_against_a_dead_server_exits_with_a_resume_hint(tmp_path):
    from typer.testing import CliRunner

    from agora.cli.main import app

    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "openai"\nmodel = "x"\nmax_retries = 0\n'
                    f'base_url = "http://127.0.0.1:{free_port()}/v1"\n')
    result = CliRunner().invoke(app, ["run", "align", "--pool", str(pool), "--limit", "1", "--db",
                                      str(tmp_path / "t.db"), "--run-id", "dead-1"])
    assert result.exit_code == 1
    assert "model 'm' is unreachable" in result.output and "rerun with the same --run-id" in result.output
    assert "Traceback" not in result.output


# ----------------------------------------------------------------------------- replies that are not completions


def test_a_200_reply_with_an_error_body_keeps_the_servers_message(caplog):
    """``{"error": ...}`` with status 200 is the server's error, not "zero choices": its message, type
    and code are in the failed attempt's record, and its code 500 makes it transient (retried)."""
    def failing(path, body):
        return 200, {"error": {"message": "the KV cache is full", "type": "InternalServerError", "code": 500}}

    with StubServer(failing) as srv:
        samples, records = pool_for(srv.base_url, max_retries=1).sample("m", MSG, SamplingParams(n=2))
    assert samples == [] and len(records) == 2 and len(srv.requests) == 2  # retried once: a 500
    for r in records:
        assert r["error"] == (f"InvalidReplyError: model m at {srv.base_url} sent an error with status 200: "
                              "the KV cache is full (InternalServerError, 500)")
    assert "zero choices" not in caplog.text and "no choices" not in caplog.text


def test_a_200_error_body_with_a_permanent_code_is_not_retried():
    with StubServer(lambda path, body: (200, {"error": {"message": "bad key", "code": 401}})) as srv:
        samples, records = pool_for(srv.base_url, max_retries=3).sample("m", MSG, SamplingParams())
    assert samples == [] and len(srv.requests) == 1
    assert records[0]["error"].endswith("sent an error with status 200: bad key (401)")


def test_a_reply_far_over_max_tokens_is_stored_cut_and_marked(caplog):
    """A server that ignores max_tokens (5 MB for max_tokens=16): the stored completion is cut at
    32 characters per allowed token, ends with the marker, and its finish_reason says "length"."""
    from agora.models.openai_backend import CUT_MARKER

    huge = "The answer is 4. " + "x" * 5_000_000
    with StubServer(lambda path, body: (200, chat_reply(body, [huge]))) as srv, \
            caplog.at_level(logging.WARNING, logger="agora.openai"):
        samples, records = pool_for(srv.base_url).sample("m", MSG, SamplingParams(max_tokens=16))
    (s,) = samples
    assert s.text == huge[:32 * 16] + CUT_MARKER and len(s.text) == 512 + len(CUT_MARKER)
    assert s.finish_reason == "length"
    assert records[0]["completion"] == s.text and records[0]["finish_reason"] == "length"
    assert f"sent a reply of {len(huge)} characters for max_tokens=16: stored cut at 512 characters" in caplog.text
    # a reply within the bound is kept whole
    with StubServer(lambda path, body: (200, chat_reply(body, ["y" * 512]))) as srv:
        (s,), _ = pool_for(srv.base_url).sample("m", MSG, SamplingParams(max_tokens=16))
    assert s.text == "y" * 512 and s.finish_reason == "stop"


def test_async_calls_are_not_capped_by_the_default_thread_pool():
    """40 concurrent ``asample`` calls on one event loop reach the server together (a barrier of 40
    that only opens when all are in flight): the backend awaits its async client, where running the
    sync client in asyncio's default pool (min(32, cpus + 4) threads: 6 on 2 cores) held all but 6
    back and broke the barrier."""
    k = 40
    barrier = threading.Barrier(k, timeout=30)

    def gathered(path, body):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return 503, {"error": {"message": "not all requests arrived together"}}
        return 200, chat_reply(body)

    with StubServer(gathered) as srv:
        pool = pool_for(srv.base_url)

        async def main():
            asyncio.get_running_loop().set_default_executor(
                __import__("concurrent.futures").futures.ThreadPoolExecutor(max_workers=6))  # as on 2 cores
            return await asyncio.gather(*(pool.asample("m", MSG, SamplingParams(seed=i)) for i in range(k)))

        results = asyncio.run(main())
    assert [len(samples) for samples, _ in results] == [1] * k
    assert all(r["error"] is None for _, records in results for r in records)
    assert len(srv.requests) == k


def test_the_async_client_belongs_to_its_event_loop():
    """Two ``asyncio.run`` in a row (and the runner's per-thread loops) each get a client of their own
    loop: no "bound to a different event loop"."""
    with StubServer() as srv:
        pool = pool_for(srv.base_url)
        for _ in range(2):
            samples, records = asyncio.run(pool.asample("m", MSG, SamplingParams(n=2)))
            assert [s.text for s in samples] == ["The answer is 4."] * 2 and records[0]["error"] is None


def test_a_users_chat_openai_is_not_capped_by_the_default_thread_pool_either():
    """The same 40 concurrent calls through a user's own ``ChatOpenAI`` (the LangChain adapter runs
    its sync client in Agora's own sized thread pool, not asyncio's default one)."""
    langchain_openai = pytest.importorskip("langchain_openai")
    from concurrent.futures import ThreadPoolExecutor

    k = 40
    barrier = threading.Barrier(k, timeout=30)

    def gathered(path, body):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return 503, {"error": {"message": "not all requests arrived together"}}
        return 200, chat_reply(body)

    with StubServer(gathered) as srv:
        pool = ModelPool.from_chat_models({"m": langchain_openai.ChatOpenAI(
            base_url=srv.base_url, model="stub", api_key="EMPTY", max_retries=0)}, max_retries=0)

        async def main():
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=6))  # as on 2 cores
            return await asyncio.gather(*(pool.asample("m", MSG, SamplingParams(seed=i)) for i in range(k)))

        results = asyncio.run(main())
    assert [len(samples) for samples, _ in results] == [1] * k
    assert len(srv.requests) == k


def test_a_users_chat_openai_reply_far_over_max_tokens_is_stored_cut_too():
    langchain_openai = pytest.importorskip("langchain_openai")
    from agora.models.openai_backend import CUT_MARKER

    huge = "The answer is 4. " + "x" * 1_000_000
    with StubServer(lambda path, body: (200, chat_reply(body, [huge]))) as srv:
        pool = ModelPool.from_chat_models({"m": langchain_openai.ChatOpenAI(
            base_url=srv.base_url, model="stub", api_key="EMPTY", max_retries=0)}, max_retries=0)
        (s,), records = pool.sample("m", MSG, SamplingParams(max_tokens=8))
    assert s.text == huge[:256] + CUT_MARKER and s.finish_reason == "length"
    assert records[0]["completion"] == s.text
