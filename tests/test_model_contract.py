"""The member contract, the LangChain adapter and error classification (issue 28, items 1-3).

A ``ChatOpenAI`` (langchain-openai, a test dependency) against the loopback OpenAI stub
(tests/openai_stub.py), custom ``BaseChatModel`` fakes (one without usage, one shaped like
``ChatOllama`` that refuses ``n``), and the scripted fake in ALIGN, COMED, MoA and debate: n samples
always, each sample's tokens counted once, errors retried or not by kind, empty and null replies
retried and never scored wrong."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import httpx
import openai
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_openai import ChatOpenAI
from openai_stub import DROP, Raw, StubServer, chat_reply

from agora.agents.debate import DebateConfig
from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig, EscalationThresholds
from agora.agents.moa import MoAConfig
from agora.graphs.debate import DebateContext, build_debate_graph
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.escalation import EscalationContext, build_escalation_graph
from agora.graphs.moa import MoAContext, build_moa_graph
from agora.graphs.runner import run_problems
from agora.models import ModelCallError, ModelPool, ModelSpec, PoolMember, SamplingParams
from agora.models.contract import ModelMember, Sample
from agora.models.langchain import LangChainMember, langchain_member
from agora.models.pool import pool_from_specs
from agora.models.retry import backoff_s, is_transient, is_unreachable, retry_after
from agora.models.testing import ScriptedChatModel
from agora.tasks.problem import Problem
from agora.traces.report import run_totals
from agora.traces.store import TraceStore

HI = [{"role": "user", "content": "What is 2 + 2?"}]


def chat_openai(url: str, **kw: Any) -> ChatOpenAI:
    return ChatOpenAI(base_url=url, api_key="test", model="stub", max_retries=0, timeout=5, **kw)


def status(code: int, message: str = "boom", headers: dict[str, str] | None = None):
    return code, Raw(f'{{"error": {{"message": "{message}"}}}}', headers=headers)


def then_ok(*faults):
    """A handler answering ``faults`` (``(status, payload)``) in order, then normal replies."""
    queue = list(faults)

    def handler(path, body):
        return queue.pop(0) if queue else (200, chat_reply(body))
    return handler


# ----------------------------------------------------------------------------- the contract


def test_every_member_implements_the_contract_and_a_plain_chat_model_is_wrapped_once():
    scripted = ScriptedChatModel(responses=["x"])
    assert isinstance(scripted, ModelMember)  # Agora's own models implement it themselves
    assert PoolMember(ModelSpec(name="s", backend="langchain"), scripted).sampler is scripted
    plain = ChatOpenAI(base_url="http://127.0.0.1:9/v1", api_key="x", model="m", max_retries=0)
    member = PoolMember(ModelSpec(name="o", backend="langchain"), plain)
    assert isinstance(member.sampler, LangChainMember) and member.sampler.chat_model is plain
    assert isinstance(member.sampler, ModelMember) and member.chat_model is plain
    assert ModelPool.from_chat_models({"o": plain})["o"].spec.backend == "langchain"
    assert isinstance(langchain_member(plain, name="o"), LangChainMember)


def test_a_hand_written_member_needs_only_sample_and_asample():
    class Echo:
        def sample(self, messages, params):
            return [Sample(text=f"echo {i}", model="", prompt_tokens=1, completion_tokens=2, latency_s=0.0,
                           seed=None if params.seed is None else params.seed + i) for i in range(params.n)]

        async def asample(self, messages, params):
            return self.sample(messages, params)

    pool = ModelPool.from_chat_models({"e": Echo()})
    samples, records = pool.sample("e", HI, SamplingParams(n=2, seed=7))
    assert [(s.text, s.model, s.seed) for s in samples] == [("echo 0", "e", 7), ("echo 1", "e", 8)]
    assert [r["seed"] for r in records] == [7, 8] and all(r["usage"] == "exact" for r in records)
    assert asyncio.run(pool.asample("e", HI, SamplingParams(n=3)))[0][2].text == "echo 2"


# ----------------------------------------------------------------------------- n samples, tokens once


def test_chat_openai_n3_gives_three_samples_and_the_servers_token_total_once():
    with StubServer() as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)})
        samples, records = pool.sample("m", HI, SamplingParams(n=3, seed=5))
    [body] = srv.bodies()
    assert body["n"] == 3 and body["seed"] == 5
    assert len(samples) == 3 and [s.seed for s in samples] == [5, 6, 7]
    # the stub reports 15 completion tokens for the request: counted once, not 3 x 15
    assert sum(s.completion_tokens for s in samples) == 15 and all(s.usage == "split" for s in samples)
    assert sum(r["completion_tokens"] for r in records) == 15 and all(r["usage"] == "split" for r in records)
    assert all(s.prompt_tokens == 11 for s in samples)  # each sample's prompt, as for Agora's own backends


def test_per_choice_logprob_counts_are_exact():
    lps = [("4", -0.1), (".", -0.2)]
    with StubServer(lambda p, b: (200, chat_reply(b, logprobs=lps))) as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)})
        samples, _ = pool.sample("m", HI, SamplingParams(n=2, logprobs=1))
    assert [(s.completion_tokens, s.usage) for s in samples] == [(2, "exact"), (2, "exact")]
    assert samples[0].logprob == pytest.approx(-0.3) and samples[0].top_logprobs[0] == {"4": -0.1, "x": -1.1}


def test_a_server_that_ignores_n_gives_n_samples_seeded_seed_plus_i():
    with StubServer(lambda p, b: (200, chat_reply(b, choices=1))) as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)})
        samples, records = pool.sample("m", HI, SamplingParams(n=3, seed=10))
        assert len(samples) == 3 and [b["seed"] for b in srv.bodies()] == [10, 11, 12]
        assert [(s.completion_tokens, s.usage) for s in samples] == [(5, "exact")] * 3
        assert sum(r["completion_tokens"] for r in records) == 15
        srv.requests.clear()
        assert len(pool.sample("m", HI, SamplingParams(n=2))[0]) == 2
        assert all("n" not in b for b in srv.bodies())  # remembered: one sample per request


def test_max_tokens_reaches_the_server_as_it_expects():
    with StubServer() as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url, max_tokens=64)})
        pool.sample("m", HI, SamplingParams(max_tokens=8, temperature=0.3, top_p=0.5, stop=("\n",)))
    [body] = srv.bodies()
    assert body["max_tokens"] == 8 and body["max_completion_tokens"] == 8  # llama.cpp reads the first
    assert (body["temperature"], body["top_p"], body["stop"]) == (0.3, 0.5, ["\n"])


def test_a_json_schema_goes_as_response_format_to_chat_openai():
    schema = {"type": "object", "required": ["score"], "properties": {"score": {"type": "integer"}}}
    with StubServer(lambda p, b: (200, chat_reply(b, texts=['{"score": 7}']))) as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)})
        samples, _ = pool.sample("m", HI, SamplingParams(json_schema=schema))
    assert srv.bodies()[0]["response_format"]["json_schema"]["schema"] == schema
    assert samples[0].text == '{"score": 7}'


class WithStructured(BaseChatModel):
    """A chat model with its own ``with_structured_output`` (tool calling: the raw text is empty)."""

    @property
    def _llm_type(self) -> str:
        return "with-structured"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="free text"))])

    def with_structured_output(self, schema, *, include_raw=False, **kwargs):
        from langchain_core.runnables import RunnableLambda

        usage = {"input_tokens": 9, "output_tokens": 3, "total_tokens": 12}
        return RunnableLambda(lambda msgs: {"raw": AIMessage(content="", usage_metadata=usage),
                                            "parsed": {"score": 7}, "parsing_error": None})


def test_a_json_schema_uses_the_models_structured_output_or_else_the_prompt():
    schema = {"type": "object", "required": ["score"], "properties": {"score": {"type": "integer"}}}
    pool = ModelPool.from_chat_models({"w": WithStructured(), "p": ScriptedFree()})
    samples, _ = pool.sample("w", HI, SamplingParams(n=2, json_schema=schema))
    assert [(s.text, s.completion_tokens) for s in samples] == [('{"score": 7}', 3)] * 2
    assert asyncio.run(pool.asample("w", HI, SamplingParams(json_schema=schema)))[0][0].text == '{"score": 7}'
    pool.sample("p", HI, SamplingParams(json_schema=schema))
    prompt = pool["p"].chat_model.seen[-1]
    assert prompt.startswith("What is 2 + 2?") and '"required": ["score"]' in prompt  # schema in the prompt


class ScriptedFree(BaseChatModel):
    """No structured output of its own: records the last user message it saw."""

    seen: list = []

    @property
    def _llm_type(self) -> str:
        return "free"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(messages[-1].content)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content='{"score": 5}'))])


class OllamaShaped(BaseChatModel):
    """Shaped like ``ChatOllama``: sampling settings are fields (``num_predict`` for max tokens, no
    ``n``), and any call keyword reaches a client that refuses it with ``TypeError``."""

    temperature: float | None = None
    num_predict: int | None = None
    seed: int | None = None
    top_p: float | None = None
    usage: bool = True
    calls: list = []

    @property
    def _llm_type(self) -> str:
        return "ollama-shaped"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if kwargs:
            raise TypeError(f"Client.chat() got an unexpected keyword argument {next(iter(kwargs))!r}")
        self.calls.append({"temperature": self.temperature, "num_predict": self.num_predict, "seed": self.seed,
                           "top_p": self.top_p, "stop": stop})
        usage = {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7} if self.usage else None
        return ChatResult(generations=[ChatGeneration(message=AIMessage(
            content=f"The answer is 4 (seed {self.seed}).", usage_metadata=usage))])


def test_a_model_that_rejects_n_gives_n_samples_and_is_not_asked_with_n_again(caplog):
    model = OllamaShaped(calls=[])
    pool = ModelPool.from_chat_models({"o": model})
    with caplog.at_level(logging.WARNING, logger="agora.langchain"):
        samples, records = pool.sample("o", HI, SamplingParams(n=3, seed=4, max_tokens=32, temperature=0.2))
        assert len(samples) == 3 and [s.seed for s in samples] == [4, 5, 6]
        assert model.calls == [{"temperature": 0.2, "num_predict": 32, "seed": s, "top_p": 0.95, "stop": None}
                               for s in (4, 5, 6)]  # every setting reached its field
        assert all(r["error"] is None for r in records) and len(records) == 3
        assert [(s.completion_tokens, s.usage) for s in samples] == [(4, "exact")] * 3
        pool.sample("o", HI, SamplingParams(n=2))
    refused = [r for r in caplog.records if "refused call keywords" in r.getMessage()]
    assert len(refused) == 1 and refused[0].getMessage().startswith("model o (OllamaShaped): refused call keywords")
    assert len(model.calls) == 5


class NoUsage(BaseChatModel):
    """A custom chat model that reports no token usage and ignores call keywords."""

    @property
    def _llm_type(self) -> str:
        return "no-usage"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="The answer is 4."))])


def test_a_model_without_usage_is_recorded_as_unknown_not_zero(tmp_path, caplog):
    pool = ModelPool.from_chat_models({"u": NoUsage()})
    with caplog.at_level(logging.WARNING, logger="agora.pool"):
        samples, records = pool.sample("u", HI, SamplingParams(n=2))
        pool.sample("u", HI)
    assert len(samples) == 2 and all(s.usage == "unknown" for s in samples)
    assert all(r["prompt_tokens"] is None and r["completion_tokens"] is None for r in records)
    assert sum("no token usage" in r.getMessage() for r in caplog.records) == 1  # said once per member
    store = TraceStore(tmp_path / "t.db")
    out = run_problems(build_delegation_graph(), [Problem("q1", "What is 2 + 2?", "4")], store=store, run_id="r",
                       protocol="align", context=DelegationContext(pool=pool, config=DelegationConfig(1, 2)),
                       config={}, pool_description=pool.describe(), dataset={})
    assert out.outcomes[0].answer == "4"
    calls = store.calls("r")
    assert calls and all(c["completion_tokens"] is None for c in calls)  # NULL in model_calls: unknown
    totals = run_totals(store, "r")
    assert totals["calls_unknown_usage"] == len(calls)


# ----------------------------------------------------------------------------- errors, classified once


@pytest.mark.parametrize("code", [401, 403, 404])
def test_auth_and_not_found_fail_in_one_attempt_for_chat_openai_and_the_toml_member(code, caplog):
    with StubServer(lambda p, b: status(code, "no such model")) as srv:
        lc = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)}, max_retries=3)
        toml = pool_from_specs([ModelSpec(name="m", backend="openai", model="m", base_url=srv.base_url,
                                          max_retries=3)])
        for pool in (lc, toml):
            srv.requests.clear()
            with caplog.at_level(logging.ERROR, logger="agora.pool"):
                samples, records = pool.sample("m", HI)
            assert samples == [] and len(srv.requests) == 1 and len(records) == 1
            assert str(code) in records[0]["error"] or "Error" in records[0]["error"]
    lines = [r.getMessage() for r in caplog.records if "not retried" in r.getMessage()]
    assert len(lines) == 2 and all("'m'" in line and f"HTTP {code}" in line for line in lines)


def test_a_type_error_fails_in_one_attempt(monkeypatch):
    def raises(chat, i):
        raise TypeError("generate() got an unexpected keyword argument 'foo'")

    from agora.models.calls import SamplingCall

    waits, failed = [], SamplingCall.failed  # the pool's wait after each failed attempt (0.0: none follows)
    monkeypatch.setattr(SamplingCall, "failed", lambda self, exc, start: waits.append(failed(self, exc, start)) or waits[-1])
    pool = ModelPool.from_chat_models({"t": ScriptedChatModel(respond=raises)}, max_retries=3)
    samples, records = pool.sample("t", HI)
    assert samples == [] and len(records) == 1 and "TypeError" in records[0]["error"]
    assert waits == [0.0]  # no backoff (recorded, not timed: a busy machine can be slower than a backoff)


@pytest.mark.parametrize("async_", [False, True])
def test_503_is_retried_with_backoff_then_answers(async_):
    with StubServer(then_ok(status(503, "loading"))) as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)}, max_retries=2)
        samples, records = (asyncio.run(pool.asample("m", HI)) if async_ else pool.sample("m", HI))
    assert len(samples) == 1 and len(srv.requests) == 2
    assert [r["attempt"] for r in records] == [0, 1] and "503" in records[0]["error"] or "InternalServer" in records[0]["error"]
    assert srv.requests[1]["start"] - srv.requests[0]["end"] >= 0.45  # backoff 0.5 s


def test_429_is_retried_after_its_retry_after():
    with StubServer(then_ok(status(429, "slow down", {"Retry-After": "0.8"}))) as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)}, max_retries=1)
        samples, records = pool.sample("m", HI)
    assert len(samples) == 1 and "RateLimitError" in records[0]["error"]
    assert srv.requests[1]["start"] - srv.requests[0]["end"] >= 0.75  # the server's 0.8 s, not the 0.5 s backoff


def test_an_unreachable_chat_openai_raises_model_call_error_like_the_toml_member():
    with StubServer() as srv:
        url = srv.base_url
    lc = ModelPool.from_chat_models({"m": chat_openai(url)}, max_retries=0)
    toml = pool_from_specs([ModelSpec(name="m", backend="openai", model="m", base_url=url, max_retries=0)])
    for pool in (lc, toml):
        with pytest.raises(ModelCallError, match="unreachable"):
            pool.sample("m", HI)


def test_classification_table():
    req = httpx.Request("POST", "http://x/v1/chat/completions")

    def api(code, headers=None):
        return openai.APIStatusError("e", response=httpx.Response(code, request=req, headers=headers or {}), body=None)

    assert [is_transient(api(c)) for c in (400, 401, 403, 404, 408, 429, 500, 503)] == \
        [True, False, False, False, True, True, True, True]
    assert is_transient(openai.APITimeoutError(req)) and is_transient(openai.APIConnectionError(request=req))
    assert not is_transient(TypeError("x")) and not is_transient(ValueError("Failed to load model"))
    assert is_transient(RuntimeError("scripted failure")) and is_transient(ConnectionRefusedError())
    assert is_unreachable(openai.APIConnectionError(request=req)) and not is_unreachable(openai.APITimeoutError(req))
    assert retry_after(api(429, {"Retry-After": "2"})) == 2.0 and retry_after(api(429, {"retry-after-ms": "150"})) == 0.15
    assert backoff_s(0, api(429, {"Retry-After": "0.1"})) == 0.1 and backoff_s(2) == 2.0 and backoff_s(9) == 8.0


# ----------------------------------------------------------------------------- empty and null replies


@pytest.mark.parametrize("text", [None, ""])
def test_an_empty_or_null_reply_is_retried_with_the_next_seed(text):
    with StubServer(then_ok((200, chat_reply({"n": 1}, texts=[text])))) as srv:
        for model in (chat_openai(srv.base_url), None):
            srv.requests.clear()
            pool = (ModelPool.from_chat_models({"m": model}, max_retries=1) if model is not None else
                    pool_from_specs([ModelSpec(name="m", backend="openai", model="m", base_url=srv.base_url,
                                               max_retries=1)]))
            if model is None:
                srv.handler = then_ok((200, chat_reply({"n": 1}, texts=[text])))
            samples, records = pool.sample("m", HI, SamplingParams(seed=3))
            assert [s.text for s in samples] == ["The answer is 4."] and samples[0].seed == 4
            assert [b["seed"] for b in srv.bodies()] == [3, 4]
            assert "EmptyResponseError" in records[0]["error"] and records[1]["error"] is None


def test_a_member_that_only_replies_null_gives_no_samples():
    with StubServer(lambda p, b: (200, chat_reply(b, texts=[None]))) as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)}, max_retries=2)
        samples, records = pool.sample("m", HI, SamplingParams(n=2))
    assert samples == [] and len(srv.requests) == 3 and all("EmptyResponseError" in r["error"] for r in records)


MC = Problem("q1", "Which gas do plants absorb?\nA. Oxygen\nB. Carbon dioxide\nC. Helium\nD. Neon", "B",
             kind="mc", n_choices=4)
T = EscalationThresholds(tau_hi=0.67, tau_lo=0.34, m_min=0.2)
PROTOCOLS = {
    "align": (build_delegation_graph, lambda pool: DelegationContext(pool=pool, config=DelegationConfig(2, 2))),
    "comed": (build_escalation_graph, lambda pool: EscalationContext(pool, EscalationConfig(baselines=(), thresholds=T))),
    "moa": (build_moa_graph, lambda pool: MoAContext(pool, MoAConfig())),
    "debate": (build_debate_graph, lambda pool: DebateContext(pool, DebateConfig())),
}


def run_protocol(name, pool, store, run_id="r"):
    builder, context = PROTOCOLS[name]
    return run_problems(builder(), [MC], store=store, run_id=run_id, protocol=name, context=context(pool),
                        config={}, pool_description=pool.describe(), dataset={})


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_null_and_empty_replies_are_retried_and_never_scored_wrong(protocol, tmp_path):
    # every reply empty or null: the question failed (a rerun retries it), nothing scored wrong
    store = TraceStore(tmp_path / "t.db")
    silent = {m: ScriptedChatModel(responses=[None, ""], cycle=True) for m in ("a", "b")}
    out = run_protocol(protocol, ModelPool.from_chat_models(silent, max_retries=1), store)
    assert [q.problem.id for q in out.failed] == ["q1"] and out.outcomes == []
    assert store.questions("r") == [] and store.results("r") == []
    assert all("EmptyResponseError" in c["error"] for c in store.calls("r"))
    # the first reply of each model empty, then answers: retried, and right
    flaky = {m: ScriptedChatModel(responses=[None] + ["The answer is B."] * 40) for m in ("a", "b")}
    again = run_protocol(protocol, ModelPool.from_chat_models(flaky, max_retries=1), store, run_id="r2")
    [row] = store.questions("r2")
    assert row["answer"] == "B" and row["correct"] == 1
    assert all(r["correct"] in (1, None) for r in store.results("r2"))
    assert any("EmptyResponseError" in (c["error"] or "") for c in store.calls("r2"))
    assert not again.failed


def test_a_dropped_connection_mid_reply_is_unreachable_for_chat_openai_too():
    with StubServer(lambda p, b: (200, DROP)) as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)}, max_retries=0)
        with pytest.raises(ModelCallError):
            pool.sample("m", HI)


def test_a_pool_file_langchain_member_is_the_same_correct_member(tmp_path):
    with StubServer(lambda p, b: (200, chat_reply(b, choices=1))) as srv:  # a server that ignores n
        pool_file = tmp_path / "pool.toml"
        pool_file.write_text(f'[[models]]\nname = "lc"\nbackend = "langchain"\nclass = "langchain_openai:ChatOpenAI"\n'
                             f'max_retries = 0\n\n[models.kwargs]\nbase_url = "{srv.base_url}"\napi_key = "x"\n'
                             f'model = "stub"\nmax_retries = 0\n')
        from agora.models.pool import load_pool

        pool = load_pool(pool_file)
        assert pool["lc"].spec.backend == "langchain" and isinstance(pool["lc"].sampler, LangChainMember)
        samples, _ = pool.sample("lc", HI, SamplingParams(n=3, seed=1, max_tokens=9))
    assert len(samples) == 3 and [b["seed"] for b in srv.bodies()] == [1, 2, 3]
    assert all(b["max_tokens"] == 9 for b in srv.bodies())


def test_html_200_reply_is_transient():
    """F17: a 200 HTML page (langchain-openai's ValueError, or the SDK's validation error) is retried."""
    import httpx
    import openai

    from agora.models.retry import is_transient

    assert is_transient(ValueError("Unexpected response type from OpenAI-compatible endpoint. Expected dict"))
    assert not is_transient(ValueError("temperature must be >= 0"))
    req = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    resp = httpx.Response(200, request=req, text="<html>oops</html>")
    assert is_transient(openai.APIResponseValidationError(response=resp, body="<html>oops</html>"))


def test_a_chat_openai_member_works_from_several_event_loops():
    """Two ``asyncio.run`` calls on one pool (an app), and concurrent loops in threads (the runner's
    ``--concurrency``): every call gives its n samples. langchain-openai's cached async client is
    bound to the first loop ("Event loop is closed" on the second run before the fix)."""
    with StubServer() as srv:
        pool = ModelPool.from_chat_models({"m": chat_openai(srv.base_url)}, max_retries=0)
        params = SamplingParams(n=2, max_tokens=8, seed=1)
        for _ in range(2):
            samples, records = asyncio.run(pool.asample("m", HI, params))
            assert len(samples) == 2 and all(r["error"] is None for r in records)
        got: list[int] = []

        def in_own_loop():
            got.append(len(asyncio.run(pool.asample("m", HI, params))[0]))

        threads = [threading.Thread(target=in_own_loop) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert got == [2, 2, 2]
