"""Using COMED, the duel, CUPID and the conversation graph from another LangGraph app, with scripted
models: inside a parent graph, output schema, custom stream events, and a checkpointed resume after
a crash (tests/test_embedding.py does the same for ALIGN)."""

import operator
import re
import sqlite3
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import TypedDict

from agora.agents.cupid import CupidConfig
from agora.agents.escalation import EscalationConfig, EscalationThresholds
from agora.agents.judge import JudgeConfig
from agora.agents.matching import MatchConfig
from agora.models.pool import ModelPool, ModelSpec, PoolMember
from agora.models.testing import ScriptedChatModel
from agora.graphs.conversation import (
    ConversationConfig,
    ConversationContext,
    ConversationOutput,
    build_conversation_graph,
)
from agora.graphs.duel import DuelConfig, DuelContext, DuelOutput, build_duel_graph
from agora.graphs.escalation import EscalationContext, EscalationOutput, build_escalation_graph
from agora.graphs.selection import SelectionContext, SelectionOutput, build_selection_graph
from agora.tasks import synthetic_problems


class Crash(BaseException):
    """Not an Exception: the pool does not retry it and the run stops (like a killed process)."""


def crashing(respond, at: int | None):
    """``respond`` that raises :class:`Crash` once, at its ``at``-th call (1-based; ``None``: never)."""
    count = {"n": 0}

    def wrapped(chat, index):
        count["n"] += 1
        if count["n"] == at:
            raise Crash
        return respond(chat, index)

    return wrapped


def without_call_ids(value: Any) -> Any:
    """``value`` with every ``call_id`` (a fresh uuid per model call), reference to one
    (``messages_of``) and call start time (``created_at``) removed, at any depth."""
    if isinstance(value, dict):
        return {k: without_call_ids(v) for k, v in value.items() if k not in ("call_id", "messages_of", "created_at")}
    if isinstance(value, list):
        return [without_call_ids(v) for v in value]
    return value


def stream_events(graph, inp, config=None, context=None) -> tuple[list[tuple[tuple, dict]], list[dict]]:
    """``(namespace, custom event)`` pairs and the ``updates`` chunks of one streamed run."""
    events, updates = [], []
    for ns, mode, chunk in graph.stream(inp, config, context=context, stream_mode=["custom", "updates"],
                                        subgraphs=True):
        (events.append((ns, chunk)) if mode == "custom" else updates.append(chunk))
    return events, updates


def output_keys(schema) -> set[str]:
    return set(schema.__annotations__)


# ---------------------------------------------------------------------------- COMED

MC = {"question": "Which gas do plants absorb?\nA. Oxygen\nB. Nitrogen\nC. Carbon dioxide\nD. Helium",
      "kind": "mc", "n_choices": 4, "gold": "C"}
# the anchor's 3 samples say B, B, C: SC = 2/3 sits between tau_lo and tau_hi, so COMED verifies; the
# probe says C, disagrees, and the peer (who also says C) outvotes the anchor (B 2/3 against C 1)
COMED_CONFIG = EscalationConfig(thresholds=EscalationThresholds(tau_hi=0.7, tau_lo=0.34), n_anchor=3,
                                baselines=("moa",))


def comed_pool(crash_at: int | None = None) -> tuple[ModelPool, dict[str, ScriptedChatModel]]:
    """``a`` is the anchor; ``b`` probes then is the peer (its 2nd call is the escalation's)."""
    models = {"a": ScriptedChatModel(respond=lambda chat, i: f"The answer is {'BBC'[i]}."),
              "b": ScriptedChatModel(respond=crashing(lambda chat, i: "The answer is C.", crash_at))}
    return ModelPool.from_chat_models(models, max_retries=0), models


def test_comed_as_a_subgraph_node_of_a_parent_app():
    class AppState(TypedDict, total=False):
        question: str
        kind: str
        n_choices: int
        answer: str | None
        outcome: str
        log: Annotated[list[str], operator.add]

    parent = StateGraph(AppState, context_schema=EscalationContext)
    parent.add_node("route", lambda state: {"log": ["routing to COMED"]})
    parent.add_node("comed", build_escalation_graph().compile())
    parent.add_edge(START, "route")
    parent.add_edge("route", "comed")
    parent.add_edge("comed", END)
    pool, _ = comed_pool()
    question = {k: MC[k] for k in ("question", "kind", "n_choices")}
    out = parent.compile().invoke(question, context=EscalationContext(pool, COMED_CONFIG))
    assert (out["answer"], out["outcome"], out["log"]) == ("C", "verify_escalate", ["routing to COMED"])


def test_comed_output_schema_and_stream_events():
    pool, _ = comed_pool()
    graph = build_escalation_graph().compile()
    out = graph.invoke(MC, context=EscalationContext(pool, COMED_CONFIG))
    assert set(out) == output_keys(EscalationOutput)  # every step ran, so every output key is set
    assert out["methods"]["comed"]["correct"] is True and out["methods"]["anchor"]["answer"] == "B"

    events, updates = stream_events(graph, MC, context=EscalationContext(pool, COMED_CONFIG))
    kinds = [e["event"] for _, e in events]
    assert kinds == ["route", "anchor", "decide", "verify", "escalate", "moa_propose", "moa_aggregate", "score"]
    decide = next(e for _, e in events if e["event"] == "decide")
    assert decide["message"] == "SC 0.67, margin None → verify (τ_hi 0.7, τ_lo 0.34, m_min 0.0)"
    assert [next(iter(u)) for u in updates][-1] == "score"


def test_comed_resumes_after_a_crash_with_the_uninterrupted_final_state(tmp_path):
    pool, _ = comed_pool()
    reference = build_escalation_graph().compile(checkpointer=InMemorySaver())
    ref_thread = {"configurable": {"thread_id": "ref"}}
    reference.invoke(MC, ref_thread, context=EscalationContext(pool, COMED_CONFIG))

    pool, models = comed_pool(crash_at=2)  # b's second call: the escalation, after route, anchor, verify
    with sqlite3.connect(tmp_path / "ckpt.db", check_same_thread=False) as conn:
        graph = build_escalation_graph().compile(checkpointer=SqliteSaver(conn))
        thread = {"configurable": {"thread_id": "t1"}}
        with pytest.raises(Crash):
            graph.invoke(MC, thread, context=EscalationContext(pool, COMED_CONFIG))
        assert graph.get_state(thread).next == ("escalate",)
        graph.invoke(None, thread, context=EscalationContext(pool, COMED_CONFIG))
        resumed = graph.get_state(thread).values
    assert without_call_ids(resumed) == without_call_ids(reference.get_state(ref_thread).values)
    # a's requests: the anchor's 3 samples, its MoA proposal, the MoA aggregation; nothing before the crash re-ran
    assert len(models["a"].calls) == 3


# ---------------------------------------------------------------------------- duel

_AUTHOR = re.compile(r"Response to be evaluated: answer by (\w+)")
SCORES = {"a": 8, "b": 6, "c": 4, "d": 5}
"""What every judge gives an answer by each follower."""


def duel_member(name: str, crash_at: int | None = None) -> ScriptedChatModel:
    """Answers as ``name``; as a judge, scores the answer's author from :data:`SCORES`."""

    def respond(chat, index):
        author = _AUTHOR.search(chat[-1]["content"])
        return '{"score": %d}' % SCORES[author.group(1)] if author else f"answer by {name}. The answer is 4."

    return ScriptedChatModel(respond=crashing(respond, crash_at))


def duel_context(crash: str | None = None) -> tuple[DuelContext, dict[str, ScriptedChatModel]]:
    """Four members; ``crash``: a member whose 1st call raises (a judge: followers are a and c)."""
    models = {m: duel_member(m, 1 if m == crash else None) for m in "abcd"}
    # a sharp matching kernel makes the pairing certain: active a (round-robin), opponent c
    cfg = DuelConfig(duels=2, iterations=2, max_tokens=16, judge=JudgeConfig(shots=0),
                     match=MatchConfig(p_rand=0.0, sigma_g=0.01))
    return DuelContext(ModelPool.from_chat_models(models, max_retries=0), cfg, synthetic_problems(3)), models


RATINGS = {"reputation": {"ratings": {"a": 100.0, "b": 90.0, "c": 150.0, "d": 120.0}, "deltas": {}, "updates": 0}}


def test_duels_called_from_a_node_of_a_tournament_app_carry_reputations():
    duel = build_duel_graph().compile()

    class Tournament(TypedDict, total=False):
        rounds: int
        reputation: dict
        leader: dict
        played: Annotated[list[dict], operator.add]

    def play(state: Tournament, runtime: Runtime[DuelContext]) -> dict:
        """The duel's schema differs from the app's: call it from a node, mapping the state both ways."""
        n = len(state.get("played") or [])
        carried = {k: state[k] for k in ("reputation", "leader") if k in state}
        out = duel.invoke({"run_id": "cup", "index": n, "duel_number": n, **carried}, context=runtime.context)
        rec = out["record"]
        return {"reputation": out["reputation"], "leader": out["leader"],
                "played": [{k: rec[k] for k in ("followers", "winner", "ratings_before", "ratings_after")}]}

    app = StateGraph(Tournament, context_schema=DuelContext)
    app.add_node("play", play)
    app.add_edge(START, "play")
    app.add_conditional_edges("play", lambda s: "play" if len(s["played"]) < s["rounds"] else END, ["play", END])
    ctx, _ = duel_context()
    out = app.compile().invoke({"rounds": 2, **RATINGS}, context=ctx)
    first, second = out["played"]
    assert (first["followers"], first["winner"]) == (["a", "c"], "a")  # judges give a 8, c 4
    assert first["ratings_after"]["a"] > first["ratings_before"]["a"]
    assert second["ratings_before"] == first["ratings_after"]  # the app carried the reputations over


def test_duel_output_schema_and_stream_events():
    ctx, _ = duel_context()
    graph = build_duel_graph().compile()
    out = graph.invoke({"run_id": "r", **RATINGS}, context=ctx)
    assert set(out) == output_keys(DuelOutput)
    assert out["record"]["followers"] == ["a", "c"] and out["record"]["winner"] == "a"

    events, _ = stream_events(graph, {"run_id": "r", **RATINGS}, context=ctx)
    kinds = [e["event"] for _, e in events]
    assert kinds[:2] == ["instruction", "match"] and sorted(kinds[2:4]) == ["answer", "answer"]
    assert kinds[4:] == ["answers", "judged", "judged", "outcome", "reputation"]
    outcome = next(e for _, e in events if e["event"] == "outcome")
    assert outcome["message"] == "scores 8.00 vs 4.00: a"
    assert next(e for _, e in events if e["event"] == "reputation")["leader_updated"] is True


def test_duel_resumes_after_a_judge_crashes_with_the_uninterrupted_final_state(tmp_path):
    ctx, _ = duel_context()
    reference = build_duel_graph().compile(checkpointer=InMemorySaver())
    ref_thread = {"configurable": {"thread_id": "ref"}}
    reference.invoke({"run_id": "r", **RATINGS}, ref_thread, context=ctx)

    ctx, models = duel_context(crash="d")  # judge d crashes while judge b, in parallel, finishes
    with sqlite3.connect(tmp_path / "ckpt.db", check_same_thread=False) as conn:
        graph = build_duel_graph().compile(checkpointer=SqliteSaver(conn))
        thread = {"configurable": {"thread_id": "t1"}}
        with pytest.raises(Crash):
            graph.invoke({"run_id": "r", **RATINGS}, thread, context=ctx)
        assert graph.get_state(thread).next == ("judge",)  # judge b's score is saved: only d is pending
        graph.invoke(None, thread, context=ctx)
        resumed = graph.get_state(thread).values
    assert without_call_ids(resumed) == without_call_ids(reference.get_state(ref_thread).values)
    # a judge scores each answer in its own prompt (2 calls); the followers answered once and judge b
    # judged once: only d ran again (its crashed first call, then both scores)
    assert [len(models[m].calls) for m in "abcd"] == [1, 2, 1, 3]


# ---------------------------------------------------------------------------- CUPID selection

LATENCIES = {"fast": 0.5, "mid": 1.0, "slow": 2.0}
CUPID_CONFIG = CupidConfig(budget_rounds=2, mc_samples=200, seed=1)


def cupid_pool(crash_at: int | None = None) -> tuple[ModelPool, dict[str, ScriptedChatModel]]:
    """Members answer ``"<name> says hello"``; their latencies are stated (pool-file ``features``).
    ``crash_at`` counts the calls of ``fast``, the UCB leader, which answers in every round."""
    models = {m: ScriptedChatModel(respond=crashing(lambda chat, i, m=m: f"{m} says hello",
                                                    crash_at if m == "fast" else None))
              for m in LATENCIES}
    return ModelPool([PoolMember(ModelSpec(m, "openai", max_retries=0, extra={"features": {"latency_s": lat}}),
                                 models[m]) for m, lat in LATENCIES.items()]), models


def user(question: dict) -> str:
    """A person who reads both answers and prefers the fast model's."""
    return "A" if question["A"].startswith("fast") else "B" if question["B"].startswith("fast") else "tie"


def pending_question(graph, thread) -> dict | None:
    """What the paused graph asks the user (``None`` when it is not paused)."""
    interrupts = graph.get_state(thread).interrupts
    return interrupts[0].value if interrupts else None


PROMPTS = {"prompts": ["Say hello.", "Greet me."]}


def test_cupid_as_a_subgraph_node_pauses_the_parent_and_resumes_with_command():
    # The interrupt inside the subgraph pauses the whole app; Command(resume=...) on the app's thread
    # reaches the subgraph's ask_user. A parent that pauses needs a checkpointer.
    class AppState(TypedDict, total=False):
        prompts: list[str]
        recommendation: dict

    parent = StateGraph(AppState, context_schema=SelectionContext)
    parent.add_node("select", build_selection_graph().compile())
    parent.add_edge(START, "select")
    parent.add_edge("select", END)
    app = parent.compile(checkpointer=InMemorySaver())
    pool, _ = cupid_pool()
    ctx, thread = SelectionContext(pool, CUPID_CONFIG), {"configurable": {"thread_id": "app"}}
    app.invoke(PROMPTS, thread, context=ctx)
    asked = []
    while (question := pending_question(app, thread)) is not None:
        asked.append(question)
        out = app.invoke(Command(resume=user(question)), thread, context=ctx)
    assert [q["round"] for q in asked] == [1, 2] and asked[0]["prompt"] == "Say hello."
    assert out["recommendation"]["model"] == "fast" and out["recommendation"]["rounds"] == 2


def test_cupid_stream_events_across_the_pauses():
    pool, _ = cupid_pool()
    graph = build_selection_graph().compile(checkpointer=InMemorySaver())
    ctx, thread = SelectionContext(pool, CUPID_CONFIG), {"configurable": {"thread_id": "s"}}
    events, updates = stream_events(graph, PROMPTS, thread, ctx)
    assert [e["event"] for _, e in events] == ["features", "pair", "generated"]
    assert "__interrupt__" in updates[-1]  # paused at ask_user: the update says so
    resumes = []
    while (question := pending_question(graph, thread)) is not None:
        events, _ = stream_events(graph, Command(resume=user(question)), thread, ctx)
        resumes.append([e["event"] for _, e in events])
    assert resumes == [["judged", "pair", "generated"], ["judged", "recommend"]]
    assert events[-1][1]["message"].startswith("recommended fast (P(best)=")


def run_cupid(graph, thread, ctx, inp: dict | None) -> dict:
    """Run (``inp``) or resume (``None``) a session, answering as :func:`user`; the graph's output."""
    out = graph.invoke(inp, thread, context=ctx)
    while (question := pending_question(graph, thread)) is not None:
        out = graph.invoke(Command(resume=user(question)), thread, context=ctx)
    return out


def test_cupid_output_schema_and_resume_after_a_crash_with_the_uninterrupted_final_state(tmp_path):
    pool, _ = cupid_pool()
    reference = build_selection_graph().compile(checkpointer=InMemorySaver())
    ref_thread = {"configurable": {"thread_id": "ref"}}
    out = run_cupid(reference, ref_thread, SelectionContext(pool, CUPID_CONFIG), PROMPTS)
    assert set(out) == output_keys(SelectionOutput)

    pool, models = cupid_pool(crash_at=2)  # fast's 2nd answer: round 2's generate, after one judged duel
    ctx = SelectionContext(pool, CUPID_CONFIG)
    with sqlite3.connect(tmp_path / "ckpt.db", check_same_thread=False) as conn:
        graph = build_selection_graph().compile(checkpointer=SqliteSaver(conn))
        thread = {"configurable": {"thread_id": "t1"}}
        with pytest.raises(Crash):
            run_cupid(graph, thread, ctx, PROMPTS)
        assert graph.get_state(thread).next == ("generate",)
        run_cupid(graph, thread, ctx, None)  # None resumes from the last checkpoint, then answers the user
        resumed = graph.get_state(thread).values
    assert without_call_ids(resumed) == without_call_ids(reference.get_state(ref_thread).values)
    assert resumed["recommendation"]["rounds"] == 2
    assert sum(len(m.calls) for m in models.values()) == len(resumed["calls"]) + 1  # + the crashed call


# ---------------------------------------------------------------------------- conversation

CONVERSATION = ConversationContext(config=ConversationConfig(turns=3, max_tokens=16))
QUESTION = {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?", "gold": "7"}


def conversation_pool(crash_at: int | None = None) -> tuple[ModelPool, dict[str, ScriptedChatModel]]:
    """``a`` opens with 6 and, after ``b`` replies 7, agrees; ``crash_at`` counts a's calls."""

    def a(chat, index):
        return "I agree. The answer is 7." if len(chat) > 2 and "7" in chat[-1]["content"] else "The answer is 6."

    models = {"a": ScriptedChatModel(respond=crashing(a, crash_at)),
              "b": ScriptedChatModel(respond=lambda chat, i: "3 + 4 = 7. The answer is 7.")}
    return ModelPool.from_chat_models(models, max_retries=0), models


def context_with(pool: ModelPool) -> ConversationContext:
    return ConversationContext(pool, CONVERSATION.config)


def test_conversation_as_a_subgraph_node_of_a_parent_app():
    class AppState(TypedDict, total=False):
        question: str
        gold: str
        answer: str | None
        methods: dict

    parent = StateGraph(AppState, context_schema=ConversationContext)
    parent.add_node("converse", build_conversation_graph().compile())
    parent.add_edge(START, "converse")
    parent.add_edge("converse", END)
    pool, _ = conversation_pool()
    out = parent.compile().invoke(QUESTION, context=context_with(pool))
    assert out["answer"] == "7"
    assert (out["methods"]["opening"]["correct"], out["methods"]["converse"]["correct"]) == (False, True)


def test_conversation_output_schema_and_stream_events():
    pool, _ = conversation_pool()
    graph = build_conversation_graph().compile()
    out = graph.invoke(QUESTION, context=context_with(pool))
    assert set(out) == output_keys(ConversationOutput)
    assert [(t["speaker"], t["partner"], t["answer"]) for t in out["turns"]] == \
           [("a", None, "6"), ("b", "a", "7"), ("a", "b", "7")]
    events, _ = stream_events(graph, QUESTION, context=context_with(pool))
    assert [e["message"] for _, e in events] == [
        "turn 1: a answered (6)", "turn 2: b replied to a (7)", "turn 3: a replied to b (7)",
        "opening answer 6, final answer 7 after 3 turns (gold 7)"]


def test_conversation_resumes_after_a_crash_with_the_uninterrupted_final_state(tmp_path):
    pool, _ = conversation_pool()
    reference = build_conversation_graph().compile(checkpointer=InMemorySaver())
    ref_thread = {"configurable": {"thread_id": "ref"}}
    reference.invoke(QUESTION, ref_thread, context=context_with(pool))

    pool, models = conversation_pool(crash_at=2)  # a's reply in turn 3
    with sqlite3.connect(tmp_path / "ckpt.db", check_same_thread=False) as conn:
        graph = build_conversation_graph().compile(checkpointer=SqliteSaver(conn))
        thread = {"configurable": {"thread_id": "t1"}}
        with pytest.raises(Crash):
            graph.invoke(QUESTION, thread, context=context_with(pool))
        assert graph.get_state(thread).next == ("reply",)
        graph.invoke(None, thread, context=context_with(pool))
        resumed = graph.get_state(thread).values
    assert without_call_ids(resumed) == without_call_ids(reference.get_state(ref_thread).values)
    assert (len(models["a"].calls), len(models["b"].calls)) == (3, 1)  # turn 3 twice (crashed, resumed)


# ---------------------------------------------------------------------------- context from JSON


def test_a_context_sent_as_json_builds_nested_settings():
    """LangGraph Studio and the HTTP API send the context as JSON: settings arrive as dicts."""
    ctx = EscalationContext(config={"n_anchor": 2, "thresholds": {"tau_hi": 0.9}, "peers": ["b"]})
    assert ctx.config == EscalationConfig(n_anchor=2, thresholds=EscalationThresholds(tau_hi=0.9), peers=("b",))
    assert DuelContext(config={"judge": {"max_tokens": 8}}).config.judge == JudgeConfig(max_tokens=8)
    assert SelectionContext(config={"budget_rounds": 3}).config == CupidConfig(budget_rounds=3)
    assert ConversationContext(config=None).config == ConversationConfig()
    with pytest.raises(ValueError, match="ConversationConfig: unknown field"):
        ConversationContext(config={"turn": 3})
    with pytest.raises(ValueError, match="EscalationThresholds.tau_lo"):
        EscalationContext(config={"thresholds": {"tau_hi": 0.2, "tau_lo": 0.5}})


# ---------------------------------------------------------------------------- strict context, every protocol

from dataclasses import dataclass, field as dc_field  # noqa: E402

from agora.graphs import context as graph_context_module, registry  # noqa: E402
from agora.graphs.context import ContextError  # noqa: E402
from agora.graphs.duel import _embedded_duel_pool  # noqa: E402
from agora.models import pool as pool_module  # noqa: E402
from agora.models.pool import builtin_pool_specs  # noqa: E402

SMALL = {
    "align": ({"question": "What is 3 + 4?"}, {"n_agents": 2, "k_samples": 1, "max_tokens": 16, "shots": 0}),
    "comed": (MC, {"n_anchor": 2, "max_tokens": 16, "shots": 0, "baselines": []}),
    "moa": ({"question": "What is 3 + 4?"}, {"max_tokens": 16, "shots": 0}),
    "debate": ({"question": "What is 3 + 4?"}, {"agents": 2, "rounds": 1, "max_tokens": 16, "shots": 0}),
    "council": ({"question": "What is 3 + 4?"}, {"max_tokens": 16, "review_max_tokens": 16, "shots": 0}),
    "slm-mux": ({"question": "What is 3 + 4?"}, {"k_samples": 2, "max_tokens": 16, "shots": 0}),
    "converse": ({"question": "What is 3 + 4?"}, {"turns": 2, "max_tokens": 16, "shots": 0}),
    "duel": ({"run_id": "r"}, {"duels": 1, "iterations": 1, "max_tokens": 16, "judge": {"shots": 0}}),
    "cupid": ({"prompts": ["Say hi."]}, {"budget_rounds": 1, "max_tokens": 8, "mc_samples": 200}),
}
"""Per protocol: an input and small settings (a JSON mapping, as Studio sends them)."""


def test_every_registered_protocol_has_a_small_case():
    assert set(SMALL) == set(registry.names())


@dataclass
class ForeignContext:
    """An app's own context: it has a pool and settings, but it is not the graph's context type."""

    pool: Any = "tiny"
    config: dict = dc_field(default_factory=dict)


@pytest.fixture
def scripted_builtin_models(monkeypatch):
    """Built-in pools (``"tiny"``) built from their real member specs, each member a scripted model:
    what a context naming a pool resolves to is checked without loading weights."""

    def respond(chat, index):
        text = chat[-1]["content"]
        return '{"score": 7}' if "Response to be evaluated" in text else \
            "The answer is C." if "\nC. " in text else "The answer is 7."

    monkeypatch.setattr(pool_module, "build_chat_model", lambda spec: ScriptedChatModel(respond=respond))
    graph_context_module.clear_pool_cache()
    _embedded_duel_pool.cache_clear()
    yield
    graph_context_module.clear_pool_cache()
    _embedded_duel_pool.cache_clear()


def models_called(graph, inp, context) -> set[str]:
    """The pool members every model call of one run went to (from the ``calls`` of each node update)."""
    models = set()
    thread = {"configurable": {"thread_id": "t"}}
    for _ns, chunk in graph.stream(inp, thread, context=context, stream_mode="updates", subgraphs=True):
        for update in chunk.values():
            for call in (update or {}).get("calls") or [] if isinstance(update, dict) else []:
                models.add(call["model"])
    return models


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_plain_mapping_naming_the_tiny_pool_runs_the_tiny_pool(name, scripted_builtin_models):
    spec = registry.get(name)
    inp, config = SMALL[name]
    graph = spec.build().compile(checkpointer=InMemorySaver())
    called = models_called(graph, inp, {"pool": "tiny", "config": config})
    tiny = {s.name for s in builtin_pool_specs("tiny")}
    expected = {m.name for m in _embedded_duel_pool("tiny")} if name == "duel" else tiny
    assert called and called <= expected, called  # tiny members only (COMED may ask its anchor alone)


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("context", [ForeignContext(), "tiny", ["tiny"], {"pol": "tiny"}, {"pool": 3}],
                         ids=["foreign-dataclass", "string", "list", "unknown-field", "pool-number"])
def test_a_context_of_another_type_fails_with_one_line(name, context, scripted_builtin_models):
    spec = registry.get(name)
    inp, _config = SMALL[name]
    graph = spec.build().compile(checkpointer=InMemorySaver())
    with pytest.raises(ContextError) as err:
        graph.invoke(inp, {"configurable": {"thread_id": "t"}}, context=context)
    message = str(err.value)
    assert "\n" not in message
    if isinstance(context, dict) and "pool" in context:
        assert message.startswith(f"{spec.context.__name__}.pool: expected a ModelPool, a built-in pool name"), message
    else:
        assert spec.context.__name__ in message and "pool, config" in message, message


def test_the_context_rule_holds_for_a_graph_embedded_as_a_node():
    """A parent app without a context schema passes its context on as it is: the ALIGN subgraph
    refuses the app's own object, and takes a mapping of its fields."""
    pool, _ = cupid_pool()  # any three-member pool answering text

    class AppState(TypedDict, total=False):
        question: str
        answer: str | None

    parent = StateGraph(AppState)
    parent.add_node("align", registry.get("align").build().compile())
    parent.add_edge(START, "align")
    parent.add_edge("align", END)
    app = parent.compile()
    with pytest.raises(ContextError) as err:
        app.invoke({"question": "What is 3 + 4?"}, context=ForeignContext(pool=pool))
    assert re.fullmatch(r"context: expected a DelegationContext or a mapping with its fields \(pool, config\), "
                        r"got test_embedding_protocols\.ForeignContext", str(err.value)), str(err.value)
    out = app.invoke({"question": "What is 3 + 4?"}, context={"pool": pool, "config": SMALL["align"][1]})
    assert "answer" in out


def test_a_pool_named_by_name_or_file_is_built_once(tmp_path, scripted_builtin_models):
    from agora.graphs.delegation import DelegationContext

    assert DelegationContext(pool="tiny").pool is DelegationContext(pool="tiny").pool
    assert DelegationContext(pool="tiny").pool.names == [s.name for s in builtin_pool_specs("tiny")]
    pool_file = tmp_path / "pool.toml"
    pool_file.write_text('[[models]]\nname = "x"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    first = DelegationContext(pool=str(pool_file)).pool
    assert first.names == ["x"] and DelegationContext(pool=pool_file).pool is first
    pool_file.write_text(pool_file.read_text().replace('"x"', '"y"') + "\n")  # edited: built again
    assert DelegationContext(pool=str(pool_file)).pool.names == ["y"]
    with pytest.raises(ValueError, match="pool file not found"):
        DelegationContext(pool=str(tmp_path / "missing.toml"))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_no_node_update_is_empty(name, scripted_builtin_models):
    """Every node says what it did in the ``updates`` stream (Studio shows an empty one as null)."""
    inp, config = SMALL[name]
    graph = registry.get(name).build().compile(checkpointer=InMemorySaver())
    empty = []
    for ns, chunk in graph.stream(inp, {"configurable": {"thread_id": "t"}}, context={"pool": "tiny", "config": config},
                                  stream_mode="updates", subgraphs=True):
        empty += [(ns, node) for node, update in chunk.items() if not update and node != "__interrupt__"]
    assert not empty, empty


@pytest.mark.slow
def test_a_plain_mapping_naming_the_tiny_pool_runs_the_real_tiny_models():
    """One real run: MoA on ``{"pool": "tiny"}`` loads SmolLM2 and Gemma and asks both (seconds on a CPU)."""
    graph_context_module.clear_pool_cache()
    out = registry.get("moa").compiled().invoke(
        {"question": "What is 2 + 3?", "gold": "5"},
        context={"pool": "tiny", "config": {"max_tokens": 16, "shots": 0}})
    assert {p["model"] for p in out["proposals"]} == {"smollm2-135m", "gemma3-270m"}
    assert out["aggregator"] == "smollm2-135m" and out["methods"]["moa"]["samples"] >= 1


def test_an_empty_pool_in_a_context_means_the_graphs_default_pool():
    """Studio sends ``""`` for a pool field left empty: the graph's default pool, as docs/studio.md says."""
    assert graph_context_module.resolve_pool("") is None and graph_context_module.resolve_pool("  ") is None
    with pytest.raises(ContextError):
        graph_context_module.resolve_pool(3)


def test_a_relative_pool_path_is_read_from_agora_pool_dir_then_the_current_folder(tmp_path, monkeypatch):
    """`agora studio` runs its server in a private folder and passes the folder it was started in as
    $AGORA_POOL_DIR; without it a relative path is read from the current folder, and where
    `langgraph dev` refuses os.getcwd() in a request (blockbuster), from $PWD."""
    from agora.graphs import context as graph_context_module
    from agora.graphs.delegation import DelegationContext

    launch, elsewhere = tmp_path / "project", tmp_path / "server"
    launch.mkdir(), elsewhere.mkdir()
    (launch / "pools").mkdir()
    (launch / "pools" / "p.toml").write_text('[[models]]\nname = "rel"\nbackend = "openai"\n'
                                             'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("AGORA_POOL_DIR", str(launch))
    assert DelegationContext(pool="pools/p.toml").pool.names == ["rel"]
    monkeypatch.delenv("AGORA_POOL_DIR")
    with pytest.raises(Exception, match=r"pools/p.toml"):
        DelegationContext(pool="pools/p.toml")  # not in the server's folder
    monkeypatch.chdir(launch)
    assert DelegationContext(pool="pools/p.toml").pool.names == ["rel"]

    def blocked():
        raise RuntimeError("Blocking call to os.getcwd")

    monkeypatch.setattr(graph_context_module.os, "getcwd", blocked)
    monkeypatch.setenv("PWD", str(launch))
    assert graph_context_module.pool_base_dir() == str(launch)
    monkeypatch.setenv("PWD", "relative")
    with pytest.raises(RuntimeError, match="Blocking call"):
        graph_context_module.pool_base_dir()
