"""A new protocol is one module: the `vote` module that docs/architecture.md shows under "Adding a
protocol" runs as written (read from the page, not copied here), is found by the registry from its
source, runs through the runner with a trace store, and has the Studio schemas every protocol has; the
page's try-it script runs as a user's script beside the saved module."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from agora.graphs import registry
from agora.graphs.runner import run_protocol
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.tasks.problem import Problem
from agora.traces import TraceStore

ROOT = Path(__file__).resolve().parents[1]


def python_blocks() -> list[str]:
    """The Python blocks of the "Adding a protocol" section of docs/architecture.md."""
    section = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split("## Adding a protocol\n", 1)[1]
    return re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.S)


def vote_source() -> str:
    """The first Python block of the "Adding a protocol" section: the module."""
    return python_blocks()[0]


@pytest.fixture
def vote(tmp_path):
    path = tmp_path / "vote.py"
    path.write_text(vote_source(), encoding="utf-8")
    name = "agora_docs_vote"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    registry.register(module.SPEC)
    yield module, path
    registry.unregister("vote")
    sys.modules.pop(name, None)


def pool() -> ModelPool:
    return ModelPool.from_chat_models({"a": ScriptedChatModel(responses=["6 + 7 = 13. The answer is 13."], cycle=True),
                                       "b": ScriptedChatModel(responses=["The answer is 12."], cycle=True),
                                       "c": ScriptedChatModel(responses=["I get 13, so the answer is 13."], cycle=True)})


def test_the_registry_reads_the_module_from_its_source(vote):
    _module, path = vote
    name, entry = registry._entry(path)
    assert name == "vote" and entry.exports == ("build_vote_graph", "VoteContext", "VoteInput", "VoteOutput")
    assert registry.get("vote").methods == ("vote",)


def test_the_vote_answers_by_plurality_and_is_scored_by_the_caller_gold(vote):
    module, _path = vote
    out = module.graph.invoke({"question": "What is 6 + 7?", "gold": "13"},
                              context=module.VoteContext(pool=pool()))
    assert [(a["model"], a["answer"]) for a in sorted(out["answers"], key=lambda a: a["agent"])] == [
        ("a", "13"), ("b", "12"), ("c", "13")]
    assert out["answer"] == "13"
    vote_row = out["methods"]["vote"]
    assert (vote_row["answer"], vote_row["correct"], vote_row["calls"], vote_row["samples"]) == ("13", True, 3, 3)
    # the context as Studio's JSON sends it, and a field it does not have refused in one line
    assert module.VoteContext(**{"pool": None, "config": {"seed": 3}}).config.seed == 3
    with pytest.raises(TypeError, match=r"VoteContext: unknown field\(s\) pol; its fields are pool, config"):
        module.VoteContext(pol="pool.toml")


def test_the_runner_records_the_new_protocol(vote, tmp_path):
    store = TraceStore(tmp_path / "t.db")
    problems = [Problem("q1", "What is 6 + 7?", "13"), Problem("q2", "What is 6 + 6?", "12")]
    run_protocol("vote", problems, store=store, run_id="r", context=vote[0].VoteContext(pool()), config={},
                 pool_description=[], dataset={})
    results = {(r["question_id"], r["method"]): r["correct"] for r in store.db["results"].rows}
    assert results == {("q1", "vote"): 1, ("q2", "vote"): 0}
    assert store.db["model_calls"].count == 6


def test_the_new_protocol_has_studio_schemas(vote):
    module, _path = vote
    graph = module.graph
    context = graph.get_context_jsonschema()
    assert set(context["properties"]) == {"pool", "config"}
    assert context["properties"]["pool"]["description"].startswith("The models")
    output = graph.get_output_jsonschema()["properties"]
    assert all(prop.get("description") for prop in output.values()), output
    assert graph.get_input_jsonschema()["examples"] == [{"question": "Tom has 3 apples and buys 4 more. How many "
                                                                     "apples does he have?", "kind": "math"}]


def test_the_page_try_script_runs_beside_the_saved_module(tmp_path, monkeypatch, capsys):
    module, script = python_blocks()[:2]
    (tmp_path / "vote.py").write_text(module, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(script, "try_vote.py", "exec"), {"__name__": "__main__"})
    finally:
        if "vote" in registry.PROTOCOLS:
            registry.unregister("vote")
        sys.modules.pop("vote", None)
    assert capsys.readouterr().out == "13\n13\n"
    store = TraceStore(tmp_path / "runs.db")
    assert [(r["question_id"], r["method"], r["answer"], r["correct"]) for r in store.db["results"].rows] == [
        ("q1", "vote", "13", 1)]
    assert store.db["model_calls"].count == 3
