"""Backends as plug-ins (issue 28, item 4): the registry, a package outside Agora adding a backend
through the ``agora.backends`` entry point, the ``langchain`` backend from a pool file, each
backend's own config class validating its entries, and ``agora serve`` asking the registry."""

import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from agora.cli.main import app
from agora.models.pool import ModelSpec, PoolConfigError, SamplingParams, load_pool, pool_from_specs
from agora.models.registry import (ENTRY_POINT_GROUP, Backend, BackendConfig, get_backend, register_backend,
                                   unregister_backend, validate_entry)

PLUGIN = '''
"""agora-echo-backend: a plug-in backend for Agora, outside Agora (built by the test)."""
from typing import Annotated

from annotated_types import Ge
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import StrictStr

from agora.models.registry import Backend, BackendConfig


class EchoConfig(BackendConfig):
    reply: StrictStr
    repeat: Annotated[int, Ge(1)] = 1


class EchoChatModel(BaseChatModel):
    reply: str
    calls: list = []

    @property
    def _llm_type(self) -> str:
        return "echo"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls.append(kwargs)
        n = kwargs.get("n") or 1
        return ChatResult(generations=[
            ChatGeneration(message=AIMessage(content=self.reply, usage_metadata={
                "input_tokens": 3, "output_tokens": 5 + i, "total_tokens": 8 + i})) for i in range(n)])


def make(spec):
    return EchoChatModel(reply=" ".join([spec.options["reply"]] * spec.options["repeat"]))


backend = Backend("echo", EchoConfig, make, summary="says its reply")
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A package outside Agora, installed the way pip leaves one: a module and its ``.dist-info``
    (METADATA, entry_points.txt) on ``sys.path``."""
    site = tmp_path / "site"
    (site / "agora_echo_backend-0.1.dist-info").mkdir(parents=True)
    (site / "agora_echo_backend.py").write_text(PLUGIN)
    (site / "agora_echo_backend-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: agora-echo-backend\nVersion: 0.1\n")
    (site / "agora_echo_backend-0.1.dist-info" / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\necho = agora_echo_backend:backend\nbroken = agora_echo_backend:no_such_thing\n")
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name in ("echo", "broken"):
        unregister_backend(name)
    sys.modules.pop("agora_echo_backend", None)


def pool_file(tmp_path, body: str):
    path = tmp_path / "pool.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_package_outside_agora_adds_a_backend_through_its_entry_point(tmp_path, plugin):
    pool = load_pool(pool_file(tmp_path, '''
        [[models]]
        name = "e"
        backend = "echo"
        reply = "The answer is 4."
        system_prompt = "Be brief."
        max_retries = 0
    '''))
    samples, records = pool.sample("e", [{"role": "user", "content": "What is 2 + 2?"}], SamplingParams(n=3, seed=7))
    assert [s.text for s in samples] == ["The answer is 4."] * 3
    assert [s.completion_tokens for s in samples] == [5, 6, 7]  # each sample its own tokens
    assert len(records) == 3 and all(r["error"] is None for r in records)
    spec = pool["e"].spec
    assert (spec.backend, spec.options, spec.system_prompt) == ("echo", {"reply": "The answer is 4.", "repeat": 1}, "Be brief.")
    assert get_backend("echo").origin == "agora-echo-backend 0.1"  # no edit inside Agora named it


def test_a_plugin_config_class_validates_its_own_fields(tmp_path, plugin):
    for body, needle in [('reply = 5', "field 'reply': input should be a valid string, got 5"),
                         ('reply = "x"\nrepeat = 0', "field 'repeat': input should be greater than or equal to 1, got 0"),
                         ('', "field 'reply': missing"),
                         ('reply = "x"\ntimeout_s = inf', "field 'timeout_s': input should be a finite number")]:
        path = pool_file(tmp_path, f'[[models]]\nname = "e"\nbackend = "echo"\n{body}\n')
        with pytest.raises(PoolConfigError) as err:
            load_pool(path)
        assert str(err.value).startswith(f"{path}: models[0] (e): {needle}"), str(err.value)
    path = pool_file(tmp_path, '[[models]]\nname = "e"\nbackend = "echo"\nreply = "x"\nrepeat = 2\n')
    assert load_pool(path)["e"].spec.options == {"reply": "x", "repeat": 2}


def test_a_plugin_that_does_not_load_is_one_line_naming_its_distribution(tmp_path, plugin):
    path = pool_file(tmp_path, '[[models]]\nname = "b"\nbackend = "broken"\n')
    with pytest.raises(PoolConfigError) as err:
        load_pool(path)
    message = str(err.value)
    assert message.startswith(f"{path}: models[0] (b): field 'backend': backend 'broken' (entry point agora.backends: "
                              "broken = agora_echo_backend:no_such_thing, from agora-echo-backend 0.1) failed to load: "
                              "AttributeError"), message
    assert "\n" not in message


def test_an_unknown_backend_lists_the_registered_ones_and_the_plugin_route(tmp_path):
    path = pool_file(tmp_path, '[[models]]\nname = "m"\nbackend = "olama"\n')
    with pytest.raises(PoolConfigError) as err:
        load_pool(path)
    assert str(err.value).startswith(f"{path}: models[0] (m): field 'backend': 'olama' is not one of 'llamacpp', "
                                     "'openai', 'vllm', 'transformers', 'langchain'")
    assert "'agora.backends' entry point" in str(err.value)


def test_pool_list_shows_builtin_and_plugin_backends(plugin):
    result = CliRunner().invoke(app, ["pool", "list", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    rows = {r["backend"]: r for r in listed["backends"]}
    assert list(rows)[:5] == ["llamacpp", "openai", "vllm", "transformers", "langchain"]
    assert (rows["echo"]["from"], rows["echo"]["agora serve"]) == ("agora-echo-backend 0.1", "copy")
    assert rows["vllm"]["agora serve"] == "vllm" and rows["openai"]["agora serve"] == "copy"
    assert "failed to load" in listed["failed_backends"]["broken"]


# ----------------------------------------------------------------------------- the langchain backend

FAKE = "langchain_core.language_models.fake_chat_models:FakeListChatModel"


def test_a_langchain_class_from_a_pool_file_is_a_member(tmp_path):
    pool = load_pool(pool_file(tmp_path, f'''
        [[models]]
        name = "fake"
        backend = "langchain"
        class = "{FAKE}"
        max_retries = 0
        [models.kwargs]
        responses = ["The answer is 4.", "The answer is 5."]
    '''))
    samples, _ = pool.sample("fake", [{"role": "user", "content": "2 + 2?"}], SamplingParams(n=2))
    assert sorted(s.text for s in samples) == ["The answer is 4.", "The answer is 5."]
    assert pool["fake"].spec.options == {"class": FAKE, "kwargs": {"responses": ["The answer is 4.", "The answer is 5."]}}


@pytest.mark.parametrize("entry, needle", [
    ('class = "no_such_package.chat:Chat"',
     "field 'class': cannot import 'no_such_package.chat:Chat': ModuleNotFoundError: No module named 'no_such_package'"),
    ('class = "collections:OrderedDict"', "field 'class': 'collections:OrderedDict' is not a langchain_core BaseChatModel class"),
    ('class = "not a path"', "field 'class': a langchain model needs class = \"package.module:ChatClass\""),
    ('', "field 'class': a langchain model needs class"),
    (f'class = "{FAKE}"\nkwargs = {{responses = 5}}', f"field 'kwargs': {FAKE} refused them: ValidationError"),
    (f'class = "{FAKE}"\nkwargs = "responses"', "field 'kwargs': input should be a valid dictionary"),
])
def test_a_langchain_entry_that_cannot_be_built_is_one_line(tmp_path, entry, needle):
    path = pool_file(tmp_path, f'[[models]]\nname = "m"\nbackend = "langchain"\n{entry}\n')
    code, output = _agora("run", "align", "--format", "synthetic", "--pool", path, "--db", tmp_path / "t.db")
    assert code == 2, output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in output and len(errors) == 1, output
    assert errors[0].startswith(f"error: {path}: models[0] (m): {needle}"), errors[0]


def test_secrets_in_langchain_kwargs_stay_out_of_run_records():
    spec = ModelSpec(name="m", backend="langchain", options={"class": FAKE, "kwargs": {"api_key": "sk-1", "model": "x"}})
    assert spec.describe()["options"] == {"class": FAKE, "kwargs": {"api_key": "***", "model": "x"}}


def _agora(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


# ----------------------------------------------------------------------------- registry and serving


def test_builtins_register_through_the_registry_with_their_own_config_classes():
    for name in ("llamacpp", "openai", "vllm", "transformers", "langchain"):
        backend = get_backend(name)
        assert backend.origin == "agora" and issubclass(backend.config, BackendConfig) and backend.summary
    assert [get_backend(n).serve for n in ("llamacpp", "openai", "vllm", "transformers", "langchain")] == [
        "vllm", "copy", "vllm", "vllm", "copy"]
    with pytest.raises(ValueError, match="a backend named 'openai' is already registered .by agora."):
        register_backend(Backend("openai", BackendConfig, lambda spec: None))
    with pytest.raises(TypeError, match="config must be a subclass of agora.models.registry.BackendConfig"):
        Backend("x", dict, lambda spec: None)
    with pytest.raises(ValueError, match="serve = 'vllm' needs model_source"):
        Backend("x", BackendConfig, lambda spec: None, serve="vllm")


def test_a_backend_registered_from_python_serves_as_its_registration_says(tmp_path):
    from agora.models.serving import ServeConfig, ServedPool, model_source

    from agora.models.testing import ScriptedChatModel

    class KeyConfig(BackendConfig):
        token: str

    register_backend(Backend("keyed", KeyConfig, lambda spec: ScriptedChatModel(responses=["ok"]), serve="copy"))
    register_backend(Backend("local", BackendConfig, lambda spec: ScriptedChatModel(responses=["ok"]), serve="no"))
    try:
        config = validate_entry({"name": "k", "backend": "keyed", "token": "t-1", "family": "f"}, "p.toml: models[0]")
        spec = ModelSpec(name="k", backend="keyed", family="f", options={"token": config.token})
        assert model_source(spec) is None
        served = ServedPool([spec], ServeConfig(log_dir=tmp_path))
        assert served.plan() == [] and "token = \"t-1\"" in served.pool_toml()
        assert 'backend = "keyed"' in served.pool_toml()
        with pytest.raises(ValueError, match="pool entry 'l': backend 'local' cannot be served by agora serve"):
            ServedPool([ModelSpec(name="l", backend="local")], ServeConfig(log_dir=tmp_path))
        assert pool_from_specs([spec]).sample("k", [{"role": "user", "content": "hi"}])[0][0].text == "ok"
    finally:
        unregister_backend("keyed")
        unregister_backend("local")


def test_no_safe_vllm_arg_is_an_abbreviation_of_a_refused_one():
    from agora.models.vllm_args import REFUSED_VLLM_ARGS, SAFE_VLLM_ARGS

    assert not SAFE_VLLM_ARGS & set(REFUSED_VLLM_ARGS)
    # argparse expands an abbreviation only when the flag itself does not exist: --reasoning-parser
    # is older than --reasoning-parser-plugin in vLLM, so it is never read as its abbreviation.
    clashes = [(s, r) for s in SAFE_VLLM_ARGS for r in REFUSED_VLLM_ARGS if r.startswith(s) and r != s]
    assert clashes == [("reasoning_parser", "reasoning_parser_plugin")]


@pytest.mark.parametrize("fields, needle", [
    ({"timeout_s": float("inf")}, "field 'timeout_s': must be a finite number in (0.0, 86400.0], got inf"),
    ({"timeout_s": 0}, "field 'timeout_s': must be a finite number in (0.0, 86400.0], got 0"),
    ({"n_ctx": 0}, "field 'n_ctx': must be a finite number in [16, 4194304], got 0"),
    ({"system_prompt": 5}, "field 'system_prompt': must be a string, got 5"),
    ({"temperature": float("nan")}, "field 'temperature': must be a finite number in [0.0, 2.0], got nan"),
])
def test_a_spec_made_in_python_gets_the_pool_file_bounds(fields, needle):
    with pytest.raises(PoolConfigError) as err:
        ModelSpec(name="m", backend="openai", base_url="http://h/v1", model="m", **fields)
    assert str(err.value) == f"model 'm': {needle}"


def test_the_plugin_example_of_docs_backends_md_runs(tmp_path):
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "backends.md").read_text(encoding="utf-8")
    [plugin] = [code for code in re.findall(r"```python\n(.*?)```", page, flags=re.S) if "BackendConfig" in code]
    [entry] = [t for t in re.findall(r"```toml\n(.*?)```", page, flags=re.S) if 'backend = "echo"' in t]
    namespace: dict = {}
    exec(compile(plugin, "docs/backends.md", "exec"), namespace)
    register_backend(namespace["backend"])
    try:
        pool = load_pool(pool_file(tmp_path, entry))
        samples, _ = pool.sample("e", [{"role": "user", "content": "2 + 2?"}], SamplingParams(n=2))
        assert [s.text for s in samples] == ["The answer is 4."] * 2
    finally:
        unregister_backend("echo")


def test_headers_and_credentials_in_plugin_options_are_masked_in_run_records():
    """A langchain member's ``default_headers = {Authorization = "Bearer ..."}`` (and cookies,
    credentials, nested) never reach ``runs.pool``, checkpoints or bundles as written."""
    from agora.models.member import _redacted

    options = {"kwargs": {"base_url": "http://x/v1", "default_headers": {"Authorization": "Bearer sk-SECRET",
                                                                         "X-Trace": "Basic dXNlcg==", "Accept": "json"},
                          "http_client_args": {"cookies": {"s": "1"}}, "model": "m"}}
    masked = _redacted(options)
    assert masked["kwargs"]["default_headers"] == {"Authorization": "***", "X-Trace": "***", "Accept": "json"}
    assert masked["kwargs"]["http_client_args"]["cookies"] == "***"
    assert masked["kwargs"]["base_url"] == "http://x/v1" and masked["kwargs"]["model"] == "m"
    assert "SECRET" not in repr(masked)


def test_a_backend_registered_from_python_can_be_unregistered_and_built_ins_stay():
    """A Backend made in Python keeps the default origin 'agora', like the built-ins; unregistering it
    must still remove it (it stayed, and a later test's plug-in of the same name was shadowed)."""
    from agora.models.registry import backend_names

    register_backend(Backend("py_only", BackendConfig, lambda spec: None, summary="from Python"))
    assert "py_only" in backend_names()
    unregister_backend("py_only")
    assert "py_only" not in backend_names()
    unregister_backend("llamacpp")
    assert get_backend("llamacpp").summary.startswith("a GGUF file")
