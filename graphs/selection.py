"""CUPID model selection with a human in the loop, as a LangGraph state machine (protocols.md §4).

    model_features ─▶ choose_pair ─▶ generate ─▶ ask_user ─▶ update_belief ─┐
          │                │           ▲                                    │
          │                │           └──────────── choose_pair ◀──────────┤ (budget and δ left)
          └────────────────┴──────────────────────▶ recommend ◀─────────────┘

``model_features`` builds each model's features ``x_i`` (the caller's, e.g. from the trace store;
the pool file's cost per 1k tokens and ``features`` table; latency measured by answering the first
prompt when none is known) and the prior belief. Each round ``choose_pair`` picks two models by the
belief-aware UCB rule within the remaining budgets, ``generate`` has both answer the round's prompt,
``ask_user`` pauses on a LangGraph ``interrupt`` with the two answers anonymised as A and B in
random order, and ``update_belief`` makes the Laplace step with the user's choice. ``recommend``
names the model most probably best once a budget is spent or ``P(best) ≥ 1 − δ``.

Blind until the end: what a person or a client of the HTTP API sees while the session runs (the
interrupt payload, the custom stream events, and the graph's output at each pause) names no model
behind A or B: the ``pair`` and ``judged`` events carry no model names, and the output keys that
would tell (``history``: who was shown as A and B; the per-model ``p_best``; the model ``calls``
with their completions) are not output until ``recommend`` has run (``history`` is written then;
``p_best`` is in the recommendation's ranking; ``calls`` stay in the state and the trace store).
The state itself (``duel.shown``, ``generations``, ``calls``: what a checkpoint must keep to
resume, and what a simulated user reads) does name them: a UI shows the interrupt payload, never
the thread's state.

Resume safety: every answer is stored in state (``generations``) by ``generate``, which finishes
before ``ask_user`` starts; resuming re-runs only ``ask_user``, so nothing is generated or charged
twice, and an answer already generated for a prompt is reused (free) when a model meets it again.

Source: Nguyen, Liu, Senanayake, arXiv 2606.00846 (2026), reconstructed (see :mod:`agora.agents.cupid`).

Usage::

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command
    from agora.graphs.selection import SelectionContext, build_selection_graph

    graph = build_selection_graph().compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "s1"}}
    graph.invoke({"prompts": ["Write a haiku about rain."]}, thread, context=SelectionContext(pool=my_pool))
    while graph.get_state(thread).next:           # paused at ask_user
        duel = graph.get_state(thread).interrupts[0].value   # {"prompt", "A", "B", ...}
        graph.invoke(Command(resume="A"), thread, context=SelectionContext(pool=my_pool))
    graph.get_state(thread).values["recommendation"]

or, recorded in a trace store and resumable (``agora select`` does this; the driver is :mod:`agora.runs.selection`)::

    from agora.runs.selection import run_session
    from agora.traces import TraceStore

    def choose(duel, state):                      # duel: {"round", "prompt", "A", "B", "options"}
        for key in ("prompt", "A", "B"):
            print(f"{key}: {duel[key]}")
        return input("A, B or tie (empty: stop, continue later)? ") or None

    values = run_session(my_pool, TraceStore("agora.db"), "s1", {"config": {"budget_rounds": 10}}, choose,
                         prompts=["Write a haiku about rain."])   # the same call again resumes "s1"
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Mapping, NotRequired

import numpy as np
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents.cupid import (
    Choice,
    CupidConfig,
    affordable_pairs,
    answer_cost,
    bt_probability,
    laplace_update,
    prior_belief,
    prob_best,
    ucb_pair,
)
from agora.agents.cupid_features import COST, LATENCY, feature_table, normalize_features, spec_features
from agora.agents.cupid_records import (Duel, DuelRecord, Generation, PromptItem, RankedModel, Recommendation,
                                        StopReason, judged_duels, prompt_items)
from agora.models.pool import ModelPool
from agora.agents.seeds import call_seed, sampling
from agora.graphs.context import context_as, pool_from, protocol_context
from agora.graphs.nodes import emit
from agora.models.studio_schema import studio_schema
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.spec import ProtocolSpec
from agora.traces.store import TraceStore

SelectionContext = protocol_context("SelectionContext", CupidConfig,
                                    "Budgets, UCB width, stopping level δ, prior, sampling.")


@studio_schema(example={"prompts": ["Explain in one sentence why the sky is blue.",
                                     "Write a haiku about autumn."]})
class SelectionInput(TypedDict):
    """What a caller passes in."""

    prompts: list[str | PromptItem]
    """Prompts shown in turn, one per round (cycling); strings or ``{"id", "text"}``."""
    models: NotRequired[list[str]]
    """Pool members to choose from (default: every member)."""
    features: NotRequired[dict[str, dict[str, float]]]
    """Known features per model (e.g. ``acc:gsm8k``, ``latency_s`` from the trace store); the pool
    file's values win over these."""


@studio_schema()
class SelectionOutput(TypedDict):
    """What the graph returns."""

    recommendation: Recommendation
    """The recommended model, its P(best), why the session stopped, and the full ranking (each
    model's posterior P(best))."""
    history: list[DuelRecord]
    """Every judged round: the pair, how it was shown, the user's choice, the belief before it.
    Written by ``recommend`` only: while the session runs, the output names no model behind A or B."""
    arms: list[str]
    """The models compared, in feature-row order."""
    feature_names: list[str]
    """Names of the feature columns (``raw_features``)."""
    raw_features: list[list[float]]
    """``(m, d)`` features per model, in their units."""
    spent_cost: float
    """Cost of every answer generated, in the unit of ``cost_per_1k_tokens``."""
    spent_time_s: float
    """Seconds the models took for every answer generated."""


def _merge(left: dict, right: dict) -> dict:
    return {**(left or {}), **(right or {})}


class SelectionState(SelectionInput, total=False):
    """Full state of a selection session."""

    prompt_items: list[PromptItem]
    arms: list[str]
    """The models being compared, in feature-row order."""
    feature_names: list[str]
    raw_features: list[list[float]]
    """``(m, d)`` features in their units."""
    x: list[list[float]]
    """``(m, d)`` min–max normalised features: the ``x_i`` of the Bradley–Terry model."""
    mu: list[float]
    """Belief mean over θ, ``(d,)``."""
    precision: list[list[float]]
    """Belief precision Σ⁻¹, ``(d, d)``."""
    p_best: list[float]
    """Posterior ``P(model i is best)``, ``(m,)``."""
    round: int
    """Duels judged so far."""
    generations: Annotated[dict[str, Generation], _merge]
    """Every answer generated, by ``"<model>@<prompt id>"``."""
    spent_cost: float
    spent_time_s: float
    duel: Duel | None
    """The current round's pair (``None`` when no pair fits the budgets)."""
    choice: Choice
    judged: Annotated[list[DuelRecord], operator.add]
    """Every judged round so far (``history`` once the session has ended; not in the output)."""
    history: list[DuelRecord]
    """``judged``, written by ``recommend``: the output reveals who was A and B only at the end."""
    calls: Annotated[list[dict[str, Any]], operator.add]
    """Trace records of every model call (written to the trace store by the caller)."""
    recommendation: Recommendation


def _config(runtime: Runtime) -> CupidConfig:
    return context_as(runtime.context, SelectionContext).config


def _key(model: str, prompt_id: str) -> str:
    return f"{model}@{prompt_id}"


def _answer(pool: ModelPool, model: str, item: PromptItem, cfg: CupidConfig, cost_per_1k: float,
            node: str) -> tuple[Generation, list[dict[str, Any]]]:
    params = sampling(cfg, seed=call_seed(cfg.seed, item["id"], "cupid.answer"))
    samples, records = pool.sample(model, [{"role": "user", "content": item["text"]}], params,
                                   context={"question_id": item["id"], "node": node, "role": "candidate"})
    if not samples:
        return Generation(model=model, prompt_id=item["id"], text="", ok=False, prompt_tokens=0,
                          completion_tokens=0, latency_s=sum(r["latency_s"] for r in records), cost=0.0,
                          call_id=""), records
    s = samples[0]
    return Generation(model=model, prompt_id=item["id"], text=s.text, ok=True, prompt_tokens=s.prompt_tokens,
                      completion_tokens=s.completion_tokens, latency_s=s.latency_s,
                      cost=answer_cost(cost_per_1k, s.prompt_tokens + s.completion_tokens),
                      call_id=s.call_id), records


def _column(state: SelectionState, name: str) -> np.ndarray:
    """A raw feature of every model (zeros when no model has it)."""
    if name not in state["feature_names"]:
        return np.zeros(len(state["arms"]))
    return np.array(state["raw_features"])[:, state["feature_names"].index(name)]


def _belief(state: SelectionState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    precision = np.array(state["precision"])
    return np.array(state["mu"]), precision, np.linalg.inv(precision)


def _stop_reason(state: SelectionState, cfg: CupidConfig) -> StopReason | None:
    if "duel" in state and state["duel"] is None:
        return "budget"
    if state.get("round", 0) >= cfg.budget_rounds:
        return "rounds"
    if max(state["p_best"]) >= 1 - cfg.delta:
        return "confident"
    return None


def known_features(pool: ModelPool, arms: list[str], given: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Features known before the session: ``given`` (e.g. from traces), overridden by the pool file's
    (:func:`~agora.agents.cupid_features.spec_features`)."""
    return {m: {**given.get(m, {}), **row} for m, row in spec_features(pool, arms).items()}


# ---------------------------------------------------------------------------- nodes


def model_features(state: SelectionState, runtime: Runtime[SelectionContext]) -> dict[str, Any]:
    """Features ``x_i`` of every model and the prior belief; a model with no known latency answers
    the first prompt, which measures it (the answer is kept for the duels)."""
    cfg = _config(runtime)
    pool = pool_from(runtime.context, SelectionContext)
    items = prompt_items(state.get("prompts"))
    arms = list(state.get("models") or pool.names)
    for m in arms:
        pool[m]
    if len(set(arms)) < 2 or len(set(arms)) != len(arms):
        raise InputError(f"CUPID needs at least two distinct models, got {arms}")
    values = known_features(pool, arms, state.get("features") or {})
    generations: dict[str, Generation] = {}
    calls: list[dict[str, Any]] = []
    for m in arms:
        if LATENCY not in values[m]:
            gen, records = _answer(pool, m, items[0], cfg, values[m][COST], "model_features")
            generations[_key(m, items[0]["id"])] = gen
            calls += records
            if gen["ok"]:
                values[m][LATENCY] = gen["latency_s"]
            emit("measured", f"{m}: {gen['latency_s']:.2f} s for the first prompt", model=m,
                 latency_s=gen["latency_s"], ok=gen["ok"])
    names, raw = feature_table(values, arms)
    x = normalize_features(raw)
    mu, precision = prior_belief(len(names), cfg.prior_sd)
    p_best = prob_best(mu, np.linalg.inv(precision), x, cfg.mc_samples, seed=(cfg.seed, 0))
    emit("features", f"{len(arms)} models, features {', '.join(names)}", arms=arms, features=names,
         raw=raw.tolist())
    return {"prompt_items": items, "arms": arms, "feature_names": names, "raw_features": raw.tolist(),
            "x": x.tolist(), "mu": mu.tolist(), "precision": precision.tolist(), "p_best": p_best.tolist(),
            "round": 0, "generations": generations, "calls": calls,
            "spent_cost": sum(g["cost"] for g in generations.values()),
            "spent_time_s": sum(g["latency_s"] for g in generations.values())}


def choose_pair(state: SelectionState, runtime: Runtime[SelectionContext]) -> dict[str, Any]:
    """Belief-aware UCB pair among the pairs whose next answers fit the remaining budgets.

    Expected cost of an answer: the model's mean tokens per answer so far (else every model's mean,
    else ``max_tokens`` plus a quarter of the prompt's characters) at its price; expected time: its
    latency feature. An answer already generated for this prompt is free. An estimate below the
    actual size can overspend the cost budget by at most one pair."""
    cfg = _config(runtime)
    arms, t = state["arms"], state["round"]
    item = state["prompt_items"][t % len(state["prompt_items"])]
    gens = state.get("generations") or {}
    tokens = {m: [g["prompt_tokens"] + g["completion_tokens"] for g in gens.values() if g["model"] == m and g["ok"]]
              for m in arms}
    everyone = [n for ts in tokens.values() for n in ts]
    fallback = float(np.mean(everyone)) if everyone else cfg.max_tokens + len(item["text"]) / 4
    price, latency = _column(state, COST), _column(state, LATENCY)
    cached = np.array([_key(m, item["id"]) in gens for m in arms])
    cost = np.where(cached, 0.0, [answer_cost(price[i], np.mean(tokens[m]) if tokens[m] else fallback)
                                  for i, m in enumerate(arms)])
    time_s = np.where(cached, 0.0, latency)
    allowed = affordable_pairs(
        cost, time_s,
        None if cfg.budget_cost is None else cfg.budget_cost - state["spent_cost"],
        None if cfg.budget_time_s is None else cfg.budget_time_s - state["spent_time_s"])
    mu, _, cov = _belief(state)
    pair = ucb_pair(mu, cov, np.array(state["x"]), cfg.beta, allowed)
    if pair is None:
        emit("budget", "no pair of models fits the remaining budget", spent_cost=state["spent_cost"],
             spent_time_s=state["spent_time_s"])
        return {"duel": None}
    a, b = arms[pair[0]], arms[pair[1]]
    swap = np.random.default_rng((cfg.seed, t + 1, 7)).random() < 0.5
    duel = Duel(round=t + 1, prompt_id=item["id"], prompt=item["text"], a=a, b=b, shown=[b, a] if swap else [a, b])
    emit("pair", f"round {t + 1}: two models chosen", round=t + 1)  # no names: the user judges blind
    return {"duel": duel}


def generate(state: SelectionState, runtime: Runtime[SelectionContext]) -> dict[str, Any]:
    """Both models answer the round's prompt (answers already in state are reused, not regenerated)."""
    cfg = _config(runtime)
    pool = pool_from(runtime.context, SelectionContext)
    duel = state["duel"]
    gens = state.get("generations") or {}
    item = PromptItem(id=duel["prompt_id"], text=duel["prompt"])
    price = dict(zip(state["arms"], _column(state, COST)))
    new: dict[str, Generation] = {}
    calls: list[dict[str, Any]] = []
    for m in (duel["a"], duel["b"]):
        if _key(m, item["id"]) not in gens:
            gen, records = _answer(pool, m, item, cfg, float(price[m]), "generate")
            new[_key(m, item["id"])] = gen
            calls += records
    emit("generated", f"round {duel['round']}: {len(new)} new answers", round=duel["round"], new=len(new))
    return {"generations": new, "calls": calls,
            "spent_cost": state["spent_cost"] + sum(g["cost"] for g in new.values()),
            "spent_time_s": state["spent_time_s"] + sum(g["latency_s"] for g in new.values())}


def parse_choice(value: Any) -> Choice | None:
    """``"A"``, ``"B"`` or ``"tie"`` from a resume value (``"a"``, ``"t"``, ``{"choice": "B"}``...);
    ``None`` when it is none of them."""
    if isinstance(value, dict):
        value = value.get("choice")
    if not isinstance(value, str):
        return None
    v = value.strip().lower()
    return "A" if v == "a" else "B" if v == "b" else "tie" if v in ("tie", "t", "=") else None


def ask_user(state: SelectionState) -> dict[str, Any]:
    """Pause with both answers, anonymised as A and B; resume with ``Command(resume="A"|"B"|"tie")``.

    Re-run from its start on every resume, so it only reads state. An invalid reply asks again.
    """
    duel = state["duel"]
    gens = state["generations"]
    shown = [gens[_key(m, duel["prompt_id"])] for m in duel["shown"]]
    payload = {"round": duel["round"], "prompt": duel["prompt"],
               "A": shown[0]["text"] if shown[0]["ok"] else "(no answer: the model failed)",
               "B": shown[1]["text"] if shown[1]["ok"] else "(no answer: the model failed)",
               "options": ["A", "B", "tie"]}
    while True:
        reply = interrupt(payload)
        choice = parse_choice(reply)
        if choice is not None:
            return {"choice": choice}
        payload = {**payload, "error": f"expected A, B or tie, got {reply!r}"}


def update_belief(state: SelectionState, runtime: Runtime[SelectionContext]) -> dict[str, Any]:
    """Laplace update of the belief with the user's choice, then ``P(best)`` of every model."""
    cfg = _config(runtime)
    duel, choice = state["duel"], state["choice"]
    arms = state["arms"]
    x = np.array(state["x"])
    mu, precision, _ = _belief(state)
    a, b = arms.index(duel["a"]), arms.index(duel["b"])
    winner = None if choice == "tie" else duel["shown"][0 if choice == "A" else 1]
    y = 0.5 if winner is None else 1.0 if winner == duel["a"] else 0.0
    p = bt_probability(mu, x[a], x[b])
    mu, precision = laplace_update(mu, precision, x[a] - x[b], y)
    p_best = prob_best(mu, np.linalg.inv(precision), x, cfg.mc_samples, seed=(cfg.seed, duel["round"]))
    leader = int(np.argmax(p_best))
    # no model names before the session ends: they would tell the user who was A and B
    emit("judged", f"round {duel['round']}: {choice}; the leader's P(best) is now {p_best[leader]:.2f}",
         round=duel["round"], choice=choice, p_best=float(p_best[leader]))
    record = DuelRecord(**duel, choice=choice, winner=winner, y=y, p=p)
    return {"mu": mu.tolist(), "precision": precision.tolist(), "p_best": p_best.tolist(),
            "round": duel["round"], "judged": [record]}


def recommend(state: SelectionState, runtime: Runtime[SelectionContext]) -> dict[str, Any]:
    """The model most probably best, with the posterior ranking and what the session spent."""
    cfg = _config(runtime)
    arms, p_best = state["arms"], state["p_best"]
    mu, _, _ = _belief(state)
    utility = np.array(state["x"]) @ mu
    duels = {m: 0 for m in arms}
    wins = {m: 0.0 for m in arms}
    judged = judged_duels(state)
    for r in judged:
        for m in (r["a"], r["b"]):
            duels[m] += 1
            wins[m] += 0.5 if r["winner"] is None else float(r["winner"] == m)
    ranking = sorted((RankedModel(model=m, p_best=p_best[i], utility=float(utility[i]), duels=duels[m],
                                  wins=wins[m]) for i, m in enumerate(arms)),
                     key=lambda r: (-r["p_best"], -r["utility"]))
    best = ranking[0]
    rec = Recommendation(model=best["model"], p_best=best["p_best"], rounds=state["round"],
                         spent_cost=state["spent_cost"], spent_time_s=state["spent_time_s"],
                         stop_reason=_stop_reason(state, cfg), ranking=ranking)
    emit("recommend", f"recommended {rec['model']} (P(best)={rec['p_best']:.2f}) after {rec['rounds']} rounds",
         **{k: rec[k] for k in ("model", "p_best", "rounds", "stop_reason")})
    return {"recommendation": rec, "history": judged}


# ---------------------------------------------------------------------------- edges


def after_belief(state: SelectionState, runtime: Runtime[SelectionContext]) -> str:
    """Another round while rounds remain and no model is best with probability ``1 − δ``."""
    return "recommend" if _stop_reason(state, _config(runtime)) else "choose_pair"


def after_pair(state: SelectionState) -> str:
    """``recommend`` when no pair fits the budgets."""
    return "recommend" if state.get("duel") is None else "generate"


def build_selection_graph() -> StateGraph:
    """The CUPID selection graph, uncompiled. Compile it with a checkpointer to use ``ask_user``.

    Input: :class:`SelectionInput`; output: :class:`SelectionOutput`; run-time context:
    :class:`SelectionContext`.
    """
    builder = ProtocolGraph(SelectionState, context_schema=SelectionContext, input_schema=SelectionInput,
                         output_schema=SelectionOutput)
    for node in (model_features, choose_pair, generate, ask_user, update_belief, recommend):
        builder.add_node(node)  # named after its function
    builder.add_edge(START, "model_features")
    builder.add_conditional_edges("model_features", after_belief, ["choose_pair", "recommend"])
    builder.add_conditional_edges("choose_pair", after_pair, ["generate", "recommend"])
    builder.add_edge("generate", "ask_user")
    builder.add_edge("ask_user", "update_belief")
    builder.add_conditional_edges("update_belief", after_belief, ["choose_pair", "recommend"])
    builder.add_edge("recommend", END)
    return builder


def _recommended(values: Mapping[str, Any]) -> bool:
    """A CUPID session is finished once it has recommended a model (``recommendation`` not ``None``)."""
    return values.get("recommendation") is not None


# ---------------------------------------------------------------------------- records


def record_session(store: TraceStore, run_id: str, values: Mapping[str, Any]) -> None:
    """Write a session's model calls to ``store``: one ``questions`` row per prompt that has calls
    (protocol ``cupid``, kind ``open``, ``detail = {"duels": [its judged DuelRecords]}``) with
    those calls. Idempotent (rows are upserted), so :func:`agora.runs.selection.run_session` writes the whole state
    again after every round. ``values``: a :class:`SelectionState`."""
    calls = values.get("calls") or []
    history = judged_duels(values)
    for idx, item in enumerate(values.get("prompt_items") or []):
        mine = [c for c in calls if c.get("question_id") == item["id"]]
        if not mine:
            continue
        duels = [h for h in history if h["prompt_id"] == item["id"]]
        store.record_question(run_id, SPEC.name, {
            "question_id": item["id"], "idx": idx, "source": "prompts", "kind": "open", "question": item["text"],
            "gold": None, "answer": None, "correct": None, "wall_s": None, "detail": {"duels": duels}}, {}, mine)


SPEC = ProtocolSpec(
    name="cupid", graph_id="cupid_selection", module=__name__,
    build=build_selection_graph, context=SelectionContext, config=CupidConfig,
    input=SelectionInput, output=SelectionOutput, kind="interactive", finished=_recommended,
    record=record_session, cli=("select",), docs="cupid.md",
    description='CUPID model selection with a human in the loop: choose a pair of models by belief-aware UCB within the cost/time budgets, both answer the prompt, pause at ask_user (interrupt) with the two answers anonymised as A and B, resume with A, B or tie, Laplace update of the Bradley-Terry belief, stop when a budget is spent or P(best) >= 1 - delta, recommend.',
)

#: Compiled without a checkpointer, for LangGraph Studio (``langgraph.json``) and embedding.
graph = SPEC.compile()
