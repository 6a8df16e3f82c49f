"""Probes of the model layer a fresh user ran into (issue 28 follow-up): the pool checks what a
hand-written member returns (too many, too few, wrong types), a plug-in backend that breaks is one
line naming it (a factory that raises or returns no model, a non-callable entry point, an entry
point named like a built-in), a ``langchain`` member resumes after its ``base_url`` moves, and an
ALIGN run over a pool whose every member is unreachable records the failed attempts of every
member, not only of the first to fail."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import textwrap

import pytest
from langchain_openai import ChatOpenAI
from openai_stub import Raw, StubServer
from typer.testing import CliRunner

from agora.agents.delegation import DelegationConfig
from agora.cli.main import app
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.runner import run_problems
from agora.models import ModelCallError, ModelPool, ModelSpec, PoolConfigError, PoolMember, SamplingParams
from agora.models.contract import Sample
from agora.models.errors import MemberContractError
from agora.models.pool import load_pool, unreturned_attempts
from agora.models.registry import ENTRY_POINT_GROUP, available_backends, get_backend, unregister_backend
from agora.models.retry import is_transient
from agora.tasks.problem import Problem
from agora.traces.store import TraceStore

HI = [{"role": "user", "content": "What is 2 + 2?"}]


def sample(text: str = "The answer is 4.", seed: int | None = None) -> Sample:
    return Sample(text=text, model="", prompt_tokens=3, completion_tokens=4, latency_s=0.0, seed=seed)


class Returns:
    """A hand-written member whose ``sample`` returns ``make(params)``; counts its calls."""

    def __init__(self, make):
        self.make, self.calls = make, 0

    def sample(self, messages, params):
        self.calls += 1
        return self.make(params)

    async def asample(self, messages, params):
        return self.sample(messages, params)


def waits_after_failures(monkeypatch) -> list[float]:
    """The seconds the pool waits after each failed attempt (0.0: no retry follows), recorded where the
    pool decides them (``SamplingCall.failed``): a backoff asserted without timing the call, which on a
    busy machine can take longer than a backoff without one."""
    from agora.models.calls import SamplingCall

    waits: list[float] = []
    failed = SamplingCall.failed

    def recorded(self, exc, start):
        waits.append(failed(self, exc, start))
        return waits[-1]

    monkeypatch.setattr(SamplingCall, "failed", recorded)
    return waits


def call(pool: ModelPool, name: str, params: SamplingParams, async_: bool):
    return asyncio.run(pool.asample(name, HI, params)) if async_ else pool.sample(name, HI, params)


# ----------------------------------------------------------------------------- 1. the member contract


@pytest.mark.parametrize("async_", [False, True])
def test_a_member_returning_more_than_n_keeps_the_first_n_and_warns_once_per_member(async_, caplog):
    member = Returns(lambda p: [sample(f"The answer is {i}.", seed=i) for i in range(p.n + 2)])
    pool = ModelPool.from_chat_models({"many": member})
    with caplog.at_level(logging.WARNING, logger="agora.pool"):
        first, records = call(pool, "many", SamplingParams(n=3), async_)
        again, _ = call(pool, "many", SamplingParams(n=2), async_)
    assert [s.text for s in first] == ["The answer is 0.", "The answer is 1.", "The answer is 2."]
    assert [s.text for s in again] == ["The answer is 0.", "The answer is 1."]
    assert len(records) == 3 and all(r["error"] is None for r in records) and member.calls == 2
    said = [r.getMessage() for r in caplog.records if "the first" in r.getMessage()]
    assert said == ["model 'many' (member Returns): sample() returned 5 samples for n=3: the first 3 are kept "
                    "(a member returns exactly n; said once per member)"]


@pytest.mark.parametrize("async_", [False, True])
def test_a_member_returning_fewer_than_n_is_one_failed_attempt_naming_it_not_retried(async_, caplog, monkeypatch):
    member = Returns(lambda p: [sample()])
    pool = ModelPool.from_chat_models({"few": member}, max_retries=3)
    waits = waits_after_failures(monkeypatch)
    with caplog.at_level(logging.ERROR, logger="agora.pool"):
        samples, records = call(pool, "few", SamplingParams(n=3), async_)
    assert samples == [] and member.calls == 1 and waits == [0.0]  # no retry, no backoff
    [record] = records
    assert record["error"] == ("MemberContractError: model 'few' (member Returns): sample() returned 1 sample for "
                               "n=3; a member returns exactly n (or sets tops_up = True when it already asked its "
                               "model again for the rest: docs/models.md)")
    assert (record["attempt"], record["completion"], record["model"]) == (0, None, "few")
    assert any("not retried (a permanent error)" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("returned, said", [
    (lambda p: ["The answer is 4."] * p.n,
     "a list holding a str ('The answer is 4.') at index 0, not an agora.models.contract.Sample"),
    (lambda p: "The answer is 4.", "a str ('The answer is 4.'), not a list of agora.models.contract.Sample"),
    (lambda p: None, "a NoneType (None), not a list of agora.models.contract.Sample"),
    (lambda p: [sample(), {"text": "4"}],
     "a list holding a dict ({'text': '4'}) at index 1, not an agora.models.contract.Sample"),
    (lambda p: (s for s in [sample(), sample()]), "a generator ("),
])
@pytest.mark.parametrize("async_", [False, True])
def test_a_member_returning_wrong_types_is_one_failed_attempt_naming_it_and_what_it_returned(returned, said, async_):
    member = Returns(returned)
    pool = ModelPool.from_chat_models({"odd": member}, max_retries=2)
    samples, records = call(pool, "odd", SamplingParams(n=2), async_)
    assert samples == [] and member.calls == 1 and len(records) == 1
    assert records[0]["error"].startswith(f"MemberContractError: model 'odd' (member Returns): sample() returned {said}")
    assert records[0]["error"].endswith("(docs/models.md)")


def test_a_tuple_of_n_samples_is_accepted_and_an_empty_list_is_a_retried_empty_reply():
    pool = ModelPool.from_chat_models({"t": Returns(lambda p: tuple(sample() for _ in range(p.n)))})
    samples, records = pool.sample("t", HI, SamplingParams(n=2))
    assert len(samples) == 2 and all(r["error"] is None for r in records)
    empty = Returns(lambda p: [])
    pool = ModelPool.from_chat_models({"e": empty}, max_retries=1)
    samples, records = pool.sample("e", HI, SamplingParams(n=2))
    assert samples == [] and empty.calls == 2  # zero choices: transient, asked again once
    assert [r["error"] for r in records] == ["EmptyResponseError: model 'e' returned no samples (zero choices)"] * 2


def test_a_member_that_tops_up_itself_may_return_fewer():
    class TopsUp(Returns):
        tops_up = True

    pool = ModelPool.from_chat_models({"t": TopsUp(lambda p: [sample()])}, max_retries=3)
    samples, records = pool.sample("t", HI, SamplingParams(n=3))
    assert len(samples) == 1 and len(records) == 1 and records[0]["error"] is None


def test_a_sync_asample_is_a_contract_error_and_the_error_is_permanent():
    class SyncAsample:
        def sample(self, messages, params):
            return [sample()]

        def asample(self, messages, params):
            return [sample()]

    pool = ModelPool.from_chat_models({"s": SyncAsample()}, max_retries=2)
    samples, records = asyncio.run(pool.asample("s", HI))
    assert samples == [] and len(records) == 1
    assert records[0]["error"] == ("MemberContractError: model 's' (member SyncAsample): asample() returned a list "
                                   "([Sample(text='The answer is 4.', model='', prompt_tokens=...), not an "
                                   "awaitable: define it with async def (docs/models.md)")
    assert not is_transient(MemberContractError("x")) and isinstance(MemberContractError("x"), TypeError)


def test_something_that_is_not_a_model_is_refused_when_the_pool_is_made():
    with pytest.raises(PoolConfigError) as err:
        PoolMember(ModelSpec(name="m", backend="langchain"), "gpt-4o")
    assert str(err.value) == ("model 'm': a str ('gpt-4o') is not a model: a member is a langchain_core BaseChatModel "
                              "or an object with sample() and asample() (agora.models.contract.ModelMember, "
                              "docs/models.md)")


# ----------------------------------------------------------------------------- 2. plug-ins that break

PLUGIN = '''
"""agora-bad-backends: plug-ins that break in each way a fresh user met (built by the test)."""
from agora.models.registry import Backend, BackendConfig


def _boom(spec):
    raise RuntimeError("no GPU here")


def _text(spec):
    return "hello"


raising = Backend("raising", BackendConfig, _boom)
notmodel = Backend("notmodel", BackendConfig, _text)
shadow = Backend("openai", BackendConfig, _text)
NUMBER = 42


def failing():
    raise ValueError("missing setting")
'''
ENTRY_POINTS = {"raising": "raising", "notmodel": "notmodel", "openai": "shadow", "notcallable": "NUMBER",
                "failingcall": "failing"}


@pytest.fixture
def bad_plugins(tmp_path, monkeypatch):
    """A package outside Agora whose ``agora.backends`` entry points break (installed as pip leaves one)."""
    import agora.models.registry as registry

    site = tmp_path / "site"
    info = site / "agora_bad_backends-0.2.dist-info"
    info.mkdir(parents=True)
    (site / "agora_bad_backends.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agora-bad-backends\nVersion: 0.2\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n" + "".join(
        f"{name} = agora_bad_backends:{attr}\n" for name, attr in ENTRY_POINTS.items()))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_SHADOWS_SAID", set())
    yield site
    for name in ENTRY_POINTS:
        unregister_backend(name)
    sys.modules.pop("agora_bad_backends", None)


def pool_file(tmp_path, body: str):
    path = tmp_path / "pool.toml"
    path.write_text(textwrap.dedent(body))
    return path


def load_error(tmp_path, backend: str) -> str:
    path = pool_file(tmp_path, f'[[models]]\nname = "m"\nbackend = "{backend}"\n')
    with pytest.raises(PoolConfigError) as err:
        load_pool(path)
    message = str(err.value)
    assert "\n" not in message
    return message.removeprefix(f"{path}: models[0] (m): ")


def test_a_plugin_factory_that_raises_is_one_line_naming_backend_and_entry_point(tmp_path, bad_plugins):
    assert load_error(tmp_path, "raising") == (
        "field 'backend': backend 'raising' (entry point agora.backends: raising = agora_bad_backends:raising, from "
        "agora-bad-backends 0.2): its factory raised RuntimeError: no GPU here")


def test_a_plugin_factory_that_returns_no_model_is_one_line_saying_what_it_returned(tmp_path, bad_plugins):
    assert load_error(tmp_path, "notmodel") == (
        "field 'backend': backend 'notmodel' (entry point agora.backends: notmodel = agora_bad_backends:notmodel, "
        "from agora-bad-backends 0.2): its factory returned a str ('hello'), not a model (a langchain_core "
        "BaseChatModel, or an object with sample() and asample(): agora.models.contract.ModelMember)")


def test_a_non_callable_entry_point_and_one_whose_call_raises_are_one_line(tmp_path, bad_plugins):
    assert load_error(tmp_path, "notcallable") == (
        "field 'backend': backend 'notcallable' (entry point agora.backends: notcallable = agora_bad_backends:NUMBER, "
        "from agora-bad-backends 0.2) names an int (42), which is neither an agora.models.registry.Backend nor a "
        "function without arguments that returns one")
    assert load_error(tmp_path, "failingcall") == (
        "field 'backend': backend 'failingcall' (entry point agora.backends: failingcall = "
        "agora_bad_backends:failing, from agora-bad-backends 0.2) failed to load: calling agora_bad_backends:failing() "
        "raised ValueError: missing setting")


def test_a_plugin_named_like_a_builtin_is_refused_with_a_warning_and_the_builtin_stays(tmp_path, bad_plugins, caplog):
    said = ("backend 'openai' (entry point agora.backends: openai = agora_bad_backends:shadow, from "
            "agora-bad-backends 0.2) is ignored: a plug-in may not shadow the built-in backend 'openai'; rename the "
            "entry point (docs/backends.md)")
    path = pool_file(tmp_path, '[[models]]\nname = "m"\nbackend = "openai"\nmodel = "m"\n'
                               'base_url = "http://127.0.0.1:9/v1"\n')
    with caplog.at_level(logging.WARNING, logger="agora.registry"):
        pool = load_pool(path)
        load_pool(path)
    assert type(pool["m"].chat_model).__name__ == "OpenAICompatibleChatModel"  # Agora's, not the plug-in's
    assert get_backend("openai").origin == "agora"
    assert [r.getMessage() for r in caplog.records if "shadow" in r.getMessage()] == [said]  # once
    assert available_backends()[1]["openai (plug-in)"] == said
    result = CliRunner().invoke(app, ["pool", "list", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["failed_backends"]["openai (plug-in)"] == said


# ----------------------------------------------------------------------------- 3. resume after base_url moves


def langchain_pool_file(tmp_path, url: str, model: str = "stub"):
    return pool_file(tmp_path, f'''
        [[models]]
        name = "m"
        backend = "langchain"
        class = "langchain_openai:ChatOpenAI"
        max_retries = 0
        [models.kwargs]
        model = "{model}"
        base_url = "{url}"
        api_key = "test"
        max_retries = 0
        timeout = 5
    ''')


def agora(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_langchain_member_resumes_after_its_base_url_moves_but_not_after_its_model_changes(tmp_path):
    db = tmp_path / "t.db"
    with StubServer(lambda path, body: (500, Raw('{"error": {"message": "boom"}}'))) as broken:
        pool = langchain_pool_file(tmp_path, broken.base_url)
        out = agora("run", "align", "--limit", 1, "--pool", pool, "--db", db, "--run-id", "r")
    assert out.exit_code == 1, out.output  # the question failed: the run is left to resume
    with StubServer() as fixed:  # the same model, served on another port
        langchain_pool_file(tmp_path, fixed.base_url)
        out = agora("run", "align", "--limit", 1, "--pool", pool, "--db", db, "--run-id", "r")
        assert out.exit_code == 0, out.output
        assert len(fixed.requests) >= 1
        langchain_pool_file(tmp_path, fixed.base_url, model="another")
        out = agora("run", "align", "--limit", 1, "--pool", pool, "--db", db, "--run-id", "r")
    assert out.exit_code == 2 and "was started with other pool" in out.output
    assert 'm.options.kwargs.model: "another" here, "stub" in the run' in out.output


def test_transport_kwargs_of_a_langchain_member_are_not_part_of_what_a_resume_compares(tmp_path):
    store = TraceStore(tmp_path / "t.db")

    def described(**kwargs):
        return [ModelSpec(name="m", backend="langchain", options={
            "class": "langchain_openai:ChatOpenAI", "kwargs": {"model": "stub", **kwargs}}).describe()]

    store.start_run("r", "align", config={}, pool=described(base_url="http://a:1/v1", timeout=5, api_key="k"),
                    dataset={"format": "t"})
    assert store.start_run("r", "align", config={}, dataset={"format": "t"},
                           pool=described(base_url="http://b:2/v1", timeout=60, max_retries=0,
                                          default_headers={"X-Trace": "1"})) is True


# ----------------------------------------------------------------------------- 4. every member unreachable


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_an_align_run_over_two_unreachable_members_records_failed_attempts_of_both(tmp_path):
    url = closed_port_url()
    pool = ModelPool.from_chat_models({name: ChatOpenAI(base_url=url, api_key="x", model=name, max_retries=0,
                                                        timeout=2) for name in ("a", "b")}, max_retries=1)
    store = TraceStore(tmp_path / "t.db")
    config = DelegationConfig(n_agents=2, k_samples=2)
    with pytest.raises(ModelCallError, match="is unreachable after 2 attempts"):
        run_problems(build_delegation_graph(), [Problem("q1", "What is 2 + 2?", "4")], store=store, run_id="r",
                     protocol="align", context=DelegationContext(pool=pool, config=config), config={"n": 2},
                     pool_description=pool.describe(), dataset={"format": "test"})
    calls = store.calls("r")
    assert {c["model"] for c in calls} == {"a", "b"}  # not only the member whose error stopped the run
    connection = ("OpenAIConnectionError", "APIConnectionError")
    # (the other member's retry may still be in flight when the first one's error stops the run: it is
    # then a `cancelled` row, as docs/guarantees.md says; which one races depends on timing)
    assert all(c["error"].startswith(connection) or c["error"] == "cancelled" for c in calls)
    assert {c["model"] for c in calls if c["error"].startswith(connection)} == {"a", "b"}
    assert sum(c["error"] == "cancelled" for c in calls) <= 1
    assert len({c["call_id"] for c in calls}) == len(calls) and len(calls) <= 4
    assert {(c["model"], c["attempt"]) for c in calls} >= {("a", 0), ("b", 0)}


def test_a_cancelled_call_hands_its_failed_attempts_to_the_collector():
    asked: list[asyncio.Event] = []

    class Down:
        def sample(self, messages, params):
            raise ConnectionRefusedError("refused")

        async def asample(self, messages, params):
            asked[0].set()
            return self.sample(messages, params)

    pool = ModelPool.from_chat_models({"d": Down()}, max_retries=5)

    async def cut_short():
        asked.append(asyncio.Event())
        task = asyncio.ensure_future(pool.asample("d", HI, context={"node": "agent"}))
        # attempt 0 failed: the call's task went on, without yielding, to wait out its 0.5 s backoff
        # before this one resumes
        await asked[0].wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with unreturned_attempts() as unreturned:
        asyncio.run(cut_short())
    [record] = unreturned
    assert (record["model"], record["attempt"], record["node"]) == ("d", 0, "agent")
    assert record["error"] == "ConnectionRefusedError: refused"
    with unreturned_attempts() as fresh:  # a call that returns keeps its records to itself
        samples, records = ModelPool.from_chat_models({"e": Returns(lambda p: [])}, max_retries=0).sample("e", HI)
    assert fresh == [] and samples == [] and len(records) == 1
