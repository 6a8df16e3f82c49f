"""The protocol registry is the one list: langgraph.json, agora.graphs' exports, the CLI's commands and
the docs pages all agree with it (graphs/registry.py, graphs/spec.py; issue 17 item 1)."""

import json
from pathlib import Path

import pytest
import typer.main
from langgraph.graph import StateGraph

import agora.graphs
from agora.cli.main import app
from agora.graphs import registry
from agora.graphs.spec import ProtocolSpec, methods_written

ROOT = Path(__file__).resolve().parents[1]
SPECS = registry.specs()


def test_langgraph_json_is_the_registry():
    """Regenerate with ``python -m agora.graphs > langgraph.json``."""
    assert json.loads((ROOT / "langgraph.json").read_text()) == registry.langgraph_config()


def test_studio_lists_the_graphs_it_listed_plus_moa_and_debate():
    ids = [spec.graph_id for spec in SPECS]  # at least these (a new protocol adds its own)
    assert set(ids) >= {"align_delegation", "conversation", "comed_escalation", "duel", "cupid_selection", "moa", "debate"}
    assert len(set(ids)) == len(ids) and len({spec.name for spec in SPECS}) == len(SPECS)


def test_protocols_are_found_in_their_modules_without_importing_them(tmp_path):
    """A graph module declaring ``SPEC = ProtocolSpec(...)`` is registered; one without (runner, bench) is not."""
    assert registry.PROTOCOLS["moa"] == registry.Entry("agora.graphs.moa:SPEC",
                                                       ("build_moa_graph", "MoAContext", "MoAInput", "MoAOutput"))
    assert not any(e.module in ("agora.graphs.runner", "agora.runs.bench") for e in registry.PROTOCOLS.values())
    module = tmp_path / "council.py"
    module.write_text("import nothing_that_exists\n\nSPEC = ProtocolSpec(\n    name='council', graph_id='council', "
                      "build=build_council_graph, context=CouncilContext,\n    input=CouncilInput, output=CouncilOutput)\n")
    assert registry._entry(module) == ("council", registry.Entry(
        "agora.graphs.council:SPEC", ("build_council_graph", "CouncilContext", "CouncilInput", "CouncilOutput")))
    (tmp_path / "plain.py").write_text("x = 1\n")
    assert registry._entry(tmp_path / "plain.py") is None
    (tmp_path / "typed.py").write_text("SPEC: ProtocolSpec = ProtocolSpec(name='typed', graph_id='t', build=b)\n")
    assert registry._entry(tmp_path / "typed.py") == ("typed", registry.Entry("agora.graphs.typed:SPEC", ("b",)))
    (tmp_path / "odd.py").write_text("SPEC = ProtocolSpec(name='odd', graph_id='o', build=lambda: None)\n")
    with pytest.raises(TypeError, match="odd.py: SPEC's build must be plain names"):
        registry._entry(tmp_path / "odd.py")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_spec_describes_its_graph(spec: ProtocolSpec):
    builder = spec.build()
    assert isinstance(builder, StateGraph)
    assert builder.context_schema is spec.context and builder.input_schema is spec.input
    assert builder.output_schema is spec.output
    assert spec.compiled().name == spec.graph_id and spec.compiled().checkpointer is None
    assert spec.context().config == spec.config()  # the context's settings are the spec's config type
    assert (ROOT / "docs" / spec.docs).is_file()
    if spec.kind == "benchmark":
        assert spec.methods[0] == spec.name and spec.detail is not None
        assert spec.finished({"methods": {}}) and not spec.finished({"question": "x"})


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_agora_graphs_exports_each_protocol_from_its_entry(spec: ProtocolSpec):
    for obj in (spec.build, spec.context, spec.input, spec.output):
        assert getattr(agora.graphs, obj.__name__) is obj and obj.__name__ in agora.graphs.__all__


def commands(group, path=()) -> set[str]:
    out = set()
    for name, command in getattr(group, "commands", {}).items():
        out.add(" ".join((*path, name)))
        out |= commands(command, (*path, name))
    return out


def test_every_registered_command_exists_in_the_cli():
    known = commands(typer.main.get_command(app))
    missing = {(spec.name, c) for spec in SPECS for c in spec.cli if c not in known}
    assert not missing
    assert {"run moa", "run debate", "run comed"} <= known


def test_registry_errors_name_the_problem():
    with pytest.raises(KeyError, match="unknown protocol 'nope'; choose one of align"):
        registry.get("nope")
    with pytest.raises(ValueError, match="module:attr"):
        registry.register("x", "no_colon")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("moa", "other.module:SPEC")
    registry.register("moa", registry.PROTOCOLS["moa"].target, registry.PROTOCOLS["moa"].exports)  # same: fine
    with pytest.raises(ValueError, match="first method is its main one"):
        ProtocolSpec(name="x", graph_id="x", description="", build=StateGraph, context=dict, config=dict,
                     input=dict, output=dict, module="m", methods=("y", "x"))
    assert methods_written({"methods": {}}) and registry.by_graph_id("moa").name == "moa"


def test_a_registered_entry_must_name_a_spec_of_that_name(monkeypatch):
    monkeypatch.setitem(registry.PROTOCOLS, "fake", registry.Entry("agora.graphs.moa:METHODS"))
    with pytest.raises(TypeError, match="is a tuple, not a ProtocolSpec"):
        registry.get("fake")
    monkeypatch.setitem(registry.PROTOCOLS, "fake2", registry.Entry("agora.graphs.moa:SPEC"))
    with pytest.raises(TypeError, match="declares protocol 'moa', registered as 'fake2'"):
        registry.get("fake2")


def test_run_protocol_takes_graph_name_detail_and_finished_from_the_spec():
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.graphs.moa import MoAContext
    from agora.graphs.runner import run_protocol
    from agora.tasks import Problem
    from agora.traces.store import TraceStore

    pool = ModelPool.from_chat_models({"a": ScriptedChatModel(respond=lambda chat, i: "The answer is 4.")})
    store = TraceStore(":memory:")
    problems = [Problem("q1", "2 + 2?", "4")]
    out = run_protocol("moa", problems, store=store, run_id="r", context=MoAContext(pool), config={},
                       pool_description=[], dataset={})
    assert store.get_run("r")["protocol"] == "moa" and out.outcomes[0].answer == "4"
    assert json.loads(store.questions("r")[0]["detail"])["aggregator"] == "a"  # the spec's detail
    with pytest.raises(ValueError, match="'duel' is a carried protocol"):
        run_protocol("duel", problems, store=store, run_id="d", context=None, config={}, pool_description=[], dataset={})


def test_a_spec_with_run_gets_its_agora_run_command_without_a_cli_module(tmp_path, monkeypatch):
    """A protocol from another package, registered with register(): its spec's ``run`` is its whole CLI."""
    import agora.cli._apps
    from typer.testing import CliRunner

    from agora.cli._run import spec_commands

    (tmp_path / "my_protocol.py").write_text(
        "import dataclasses\nfrom agora.graphs import registry\n"
        "SPEC = dataclasses.replace(registry.get('moa'), name='moa2', graph_id='moa2', "
        "methods=('moa2', 'proposal_vote'), cli=('run moa2',), docs='')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.PROTOCOLS, "moa2", registry.Entry("my_protocol:SPEC"))
    fresh = typer.Typer()
    monkeypatch.setattr(agora.cli._apps, "run_app", fresh)
    made = spec_commands()
    assert {"debate", "moa", "moa2"} <= set(made) and "align" not in made and "comed" not in made
    assert spec_commands() == []  # once registered, not again
    out = CliRunner().invoke(fresh, ["moa2", "--help"], terminal_width=200)
    assert out.exit_code == 0 and "--proposers" in out.output and "--config" in out.output and "--run-id" in out.output


def test_only_a_benchmark_protocol_with_its_run_command_listed_gets_one():
    from agora.graphs.spec import RunCommand

    moa = registry.get("moa")
    with pytest.raises(ValueError, match="ProtocolSpec.run"):
        ProtocolSpec(**{**{f: getattr(moa, f) for f in moa.__slots__}, "cli": ()})
    with pytest.raises(ValueError, match="ProtocolSpec.run"):
        ProtocolSpec(**{**{f: getattr(moa, f) for f in moa.__slots__}, "kind": "carried"})
    assert isinstance(moa.run, RunCommand) and moa.run.check is not None


def test_a_settings_field_named_as_a_shared_option_is_refused_clearly():
    from dataclasses import dataclass

    from agora.cli._run import benchmark_command

    @dataclass(frozen=True)
    class Clashing:
        limit: int = 3
        temperature: float = 0.7

    with pytest.raises(ValueError, match="agora run x: settings field.s. limit of Clashing clash with the shared options"):
        benchmark_command("x", Clashing, short_help="", help="", context=dict, check=lambda c, n: None,
                          label=lambda c, n: "", methods=("x",), title="x")


def test_a_generated_command_looks_get_pool_up_when_it_runs(tmp_path, monkeypatch):
    """Tests (and embedders) patch agora.cli._shared.get_pool after the CLI is imported."""
    import agora.cli._shared as shared
    from typer.testing import CliRunner

    from agora.models.testing import ScriptedChatModel
    from agora.models.pool import ModelPool

    seen = []

    def scripted(path):
        seen.append(path)
        return ModelPool.from_chat_models({m: ScriptedChatModel(respond=lambda chat, i: "The answer is 4.")
                                           for m in ("a", "b")})

    monkeypatch.setattr(shared, "get_pool", scripted)
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    out = CliRunner().invoke(app, ["run", "moa", "--data", str(data), "--pool", "x", "--db", str(tmp_path / "t.db")])
    assert out.exit_code == 0, out.output
    assert [str(p) for p in seen] == ["x"] and "100.0" in out.output


# ---------------------------------------------------------------------------- issue 32: methods from the registry

from dataclasses import dataclass as _dataclass  # noqa: E402

from typing_extensions import TypedDict as _TypedDict  # noqa: E402

from agora.graphs.spec import BenchRole, DenseBaseline  # noqa: E402


@_dataclass
class EchoConfig:
    answer: str = "42"


@_dataclass
class EchoContext:
    pool: object = None
    config: EchoConfig = None


class EchoInput(_TypedDict, total=False):
    question: str
    question_id: str
    kind: str
    n_choices: int


class EchoOutput(_TypedDict, total=False):
    answer: str
    methods: dict
    costs: dict
    calls: list


def echo_node(state: EchoOutput, runtime) -> dict:
    answer = runtime.context.config.answer
    cost = {"calls": 0, "samples": 0, "completion_tokens": 0, "latency_s": 0.0}
    return {"answer": answer, "costs": {"echo": cost}, "calls": [],
            "methods": {"echo": {"answer": answer, "correct": None, "how": None, **cost}}}


def build_echo_graph():
    builder = StateGraph(EchoOutput, context_schema=EchoContext, input_schema=EchoInput, output_schema=EchoOutput)
    builder.add_node("echo_answer", echo_node)
    builder.set_entry_point("echo_answer")
    builder.set_finish_point("echo_answer")
    return builder


#: A tiny protocol defined here, not in agora: registering it is the only edit.
ECHO = ProtocolSpec(
    name="echo", graph_id="echo", module=__name__, description="Answers 42 without asking anyone.",
    build=build_echo_graph, context=EchoContext, config=EchoConfig, input=EchoInput, output=EchoOutput,
    methods=("echo",), bench=BenchRole(methods=("echo",), sharing={"echo": "no samples at all"}),
    dense=DenseBaseline(context=lambda comed, pool, anchor: EchoContext(pool, EchoConfig(answer=anchor))))


def test_a_protocol_registered_in_a_test_module_is_in_the_bench_and_a_comed_baseline():
    from agora.agents.escalation import EscalationConfig, EscalationThresholds
    from agora.graphs.escalation import EscalationContext, build_escalation_graph, comed_methods
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.runs.bench_plan import BenchConfig, protocol_of, resolve_methods, sharing

    with pytest.raises(ValueError, match="unknown 'echo'"):
        resolve_methods("echo")
    registry.register(ECHO)
    try:
        with pytest.raises(ValueError, match="already registered"):
            registry.register(dataclasses_replace(ECHO, description="another"))
        assert registry.get("echo") is ECHO and ECHO in registry.dense_baselines()
        assert resolve_methods("echo") == ("echo",) and resolve_methods("all")[-1] == "echo"
        assert protocol_of()["echo"] == "comed" and sharing()["echo"] == "no samples at all"
        assert BenchConfig().baselines == ("moa", "debate", "council", "slm-mux", "echo")
        assert comed_methods()[-1] == "echo"
        pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=lambda chat, i: "The answer is 4.")
                                           for m in ("a", "b")})
        cfg = EscalationConfig(thresholds=EscalationThresholds(0.5, 0.34), anchor="b", baselines=("echo",))
        graph = build_escalation_graph().compile()
        assert "echo" in graph.get_graph().nodes
        out = graph.invoke({"question": "What is 2 + 2?", "gold": "4"}, context=EscalationContext(pool, cfg),
                           output_keys=["methods", "costs"])
        assert list(out["methods"]) == ["comed", "anchor", "echo"] and out["methods"]["echo"]["answer"] == "b"
    finally:
        registry.unregister("echo")
    assert "echo" not in protocol_of() and "echo" not in build_escalation_graph().compile().get_graph().nodes
    with pytest.raises(ValueError, match="EscalationConfig.baselines: unknown"):
        EscalationConfig(baselines=("echo",))
    with pytest.raises(KeyError, match="unknown protocol 'echo'"):
        registry.unregister("echo")


def dataclasses_replace(spec, **changes):
    import dataclasses

    return dataclasses.replace(spec, **changes)


def test_moa_debate_the_council_and_slm_mux_are_comed_baselines_in_report_order():
    from agora.graphs.escalation import METHODS

    assert [s.name for s in registry.dense_baselines()] == ["moa", "debate", "council", "slm-mux"]
    assert METHODS == ("comed", "anchor", "router_only", "moa", "debate", "council", "council_top", "council_vote",
                       "slm-mux", "mux_vote")
    assert {n for n, e in registry.PROTOCOLS.items() if e.dense} == {"moa", "debate", "council", "slm-mux"}  # from source
