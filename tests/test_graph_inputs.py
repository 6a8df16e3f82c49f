"""What a caller (Studio's form, the HTTP API, Python) gives a protocol graph: ``gold`` is a described
input field, never a state channel, never in a prompt, and scores the output after a pause too; a
context key the graph does not have is refused where LangGraph's server would drop it; the forms'
descriptions are Markdown, ``kind`` has its default, the bench's own input is not offered, and a
reducer key (``proposals``) can be replaced through the state API."""

import asyncio

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from agora.agents.council import CouncilConfig
from agora.agents.debate import DebateConfig
from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig, EscalationThresholds
from agora.agents.moa import MoAConfig
from agora.graphs import registry
from agora.graphs.context import ContextError
from agora.graphs.conversation import ConversationConfig, ConversationContext, build_conversation_graph
from agora.graphs.council import CouncilContext, build_council_graph
from agora.graphs.debate import DebateContext, build_debate_graph
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.escalation import EscalationContext, build_escalation_graph
from agora.graphs.moa import MoAContext, MoAState, build_moa_graph
from agora.models.studio_schema import field_docs
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel

GOLD = "8675309"
"""A gold answer no model says and no question contains: any prompt holding it was shown the gold."""
QUESTION = "What is 2 + 5?"


def scripted() -> dict[str, ScriptedChatModel]:
    return {"a": ScriptedChatModel(responses=["2 + 5 = 7. The answer is 7."], cycle=True),
            "b": ScriptedChatModel(responses=["I think the answer is 7."], cycle=True),
            "c": ScriptedChatModel(responses=["The answer is 6."], cycle=True)}


def question_specs():
    return [s for s in registry.specs() if "question" in s.compiled().get_input_jsonschema().get("properties", {})]


# ---------------------------------------------------------------------------- gold: a described input field


@pytest.mark.parametrize("spec", question_specs(), ids=lambda s: s.name)
def test_gold_is_a_described_input_field_the_state_never_holds(spec):
    schema = spec.compiled().get_input_jsonschema()
    gold = schema["properties"]["gold"]
    assert {"type": "string"} in gold["anyOf"] and "scoring" in gold["description"]
    assert "never shown to a model" in gold["description"]
    assert "gold" not in spec.build().channels  # a form field, not a state channel
    assert "shared_candidates" not in schema["properties"]  # the bench fills it, a person does not
    assert schema["properties"]["kind"]["default"] == "math"


BUILDERS = {
    "moa": (build_moa_graph, lambda pool: MoAContext(pool, MoAConfig(shots=0)), "moa_aggregate"),
    "debate": (build_debate_graph, lambda pool: DebateContext(pool, DebateConfig(shots=0)), "debate_vote"),
    "council": (build_council_graph, lambda pool: CouncilContext(pool, CouncilConfig(shots=0)), "council_chair"),
    "align": (build_delegation_graph, lambda pool: DelegationContext(pool, DelegationConfig(shots=0)),
              "principal_select"),
    "comed": (build_escalation_graph, lambda pool: EscalationContext(pool, EscalationConfig(
        shots=0, anchor="a", thresholds=EscalationThresholds(0.99, 0.98))), "score"),
    "converse": (build_conversation_graph, lambda pool: ConversationContext(pool, ConversationConfig(shots=0)),
                 "conclude"),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_pause_keeps_scoring_and_no_prompt_ever_holds_the_gold(name):
    build, context, pause_at = BUILDERS[name]
    models = scripted()
    pool = ModelPool.from_chat_models(models)
    graph = build().compile(checkpointer=InMemorySaver(), interrupt_before=[pause_at])
    thread = {"configurable": {"thread_id": name}}
    paused = graph.invoke({"question": QUESTION, "question_id": "q1", "gold": GOLD}, thread, context=context(pool))
    assert "methods" not in paused and graph.get_state(thread).next == (pause_at,)

    out = graph.invoke(None, thread, context=context(pool))  # Studio's "continue": no input, the gold kept
    assert out["methods"] and all(r["correct"] is False for r in out["methods"].values()), out["methods"]

    graph.invoke({"question": QUESTION, "question_id": "q2", "gold": "7"}, thread, context=context(pool))
    finished = graph.invoke(Command(resume="go on"), thread, context=context(pool))  # the newest input's gold
    main = finished["methods"][registry.get(name).name]
    assert main["answer"] == "7" and main["correct"] is True, finished["methods"]

    prompts = [m["content"] for model in models.values() for call in model.calls for m in call["messages"]]
    assert prompts and not [p for p in prompts if GOLD in p or "gold" in p.lower()]


def test_a_paused_async_run_is_scored_against_its_input_gold_too():
    pool = ModelPool.from_chat_models(scripted())
    graph = build_moa_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["moa_aggregate"])
    thread = {"configurable": {"thread_id": "t"}}

    async def run():
        await graph.ainvoke({"question": QUESTION, "gold": "7"}, thread, context=MoAContext(pool))
        return await graph.ainvoke(None, thread, context=MoAContext(pool))

    out = asyncio.run(run())
    assert (out["methods"]["moa"]["answer"], out["methods"]["moa"]["correct"]) == ("7", True)


def test_a_run_without_gold_stays_unscored_after_a_pause():
    pool = ModelPool.from_chat_models(scripted())
    graph = build_moa_graph().compile(checkpointer=InMemorySaver(), interrupt_before=["moa_aggregate"])
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": QUESTION}, thread, context=MoAContext(pool))
    out = graph.invoke(None, thread, context=MoAContext(pool))
    assert {r["correct"] for r in out["methods"].values()} == {None}


# ---------------------------------------------------------------------------- the context as the server sees it


class Runtime:
    """What LangGraph's server passes a graph factory for a run: the context as the client sent it."""

    def __init__(self, context):
        self.context = context


@pytest.mark.parametrize("spec", registry.specs(), ids=lambda s: s.name)
def test_the_server_factory_refuses_context_keys_the_graph_does_not_have(spec):
    graph = spec.compiled()
    fields = ", ".join(f for f in ("pool", "config", "router", "instructions")
                       if f in graph.get_context_jsonschema()["properties"])
    with pytest.raises(ContextError) as refused:
        graph(Runtime({"pol": "pool.toml"}))
    assert str(refused.value) == f"{spec.context.__name__}: unknown field(s) pol; its fields are {fields}"
    assert graph(Runtime({"pool": "tiny", "config": {}})) is graph  # a good context: the graph itself
    assert graph(object()) is graph  # a read (schemas, state): no context to check


def test_langgraph_server_calls_the_graph_as_its_factory_with_the_runtime():
    factory_utils = pytest.importorskip("langgraph_api._factory_utils")
    graph = registry.get("moa").compiled()
    hook = factory_utils._classify_factory(graph)
    assert hook({}, "the runtime") == {"runtime": "the runtime"}


# ---------------------------------------------------------------------------- the forms Studio draws


def descriptions(schema):
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "description" and isinstance(value, str):
                yield value
            else:
                yield from descriptions(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from descriptions(value)


@pytest.mark.parametrize("spec", registry.specs(), ids=lambda s: s.name)
def test_descriptions_are_markdown_not_restructured_text(spec):
    graph = spec.compiled()
    texts = [t for kind in ("input", "output", "context")
             for t in descriptions(getattr(graph, f"get_{kind}_jsonschema")())]
    assert texts and not [t for t in texts if "``" in t or ":func:`" in t or ":class:`" in t]


def test_proposals_are_appended_and_replaced_through_the_state_api():
    pool = ModelPool.from_chat_models(scripted())
    graph = build_moa_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": QUESTION}, thread, context=MoAContext(pool))
    assert len(graph.get_state(thread).values["proposals"]) == 3
    mine = {"agent": 0, "model": "a", "answer": "9", "how": "marker", "text": "The answer is 9."}
    graph.update_state(thread, {"proposals": [mine]})  # the reducer appends
    assert len(graph.get_state(thread).values["proposals"]) == 4
    graph.update_state(thread, {"proposals": {"__overwrite__": [mine]}})  # what the HTTP state API sends to replace
    assert graph.get_state(thread).values["proposals"] == [mine]
    assert "__overwrite__" in field_docs(MoAState)["proposals"]  # the state's own description says how
