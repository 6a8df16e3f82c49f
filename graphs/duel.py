"""Duel-then-judge rounds, Sparta and Stackelberg modes, as a LangGraph state machine (protocols.md §2).

One invocation is one duel::

    pick_instruction ─▶ match ──Send×2──▶ respond ─▶ collect_answers ──Send×(m−2)──▶ judge
        ─▶ aggregate ─▶ update ─▶ record ─▶ END

The leader picks an instruction (EXP3, :mod:`agora.agents.exp3`), the matcher two followers
(:mod:`agora.agents.matching`), both answer in parallel, every other pool member judges both
answers (:mod:`agora.agents.judge`), the scores are aggregated with the judges' reputations
(Sparta Eq. 8), reputations (Eq. 9) and, in Stackelberg mode, the leader's weights are updated,
and ``record`` assembles the duel's record: the preference pair, unless the duel is a tie.

The two modes are settings of one implementation: **sparta** draws instructions uniformly (the
leader is never updated) and matches by closest reputation; **stackelberg** updates the leader
and matches with the annealed-gap kernel, the active model going round-robin.

An iteration is ``D`` duels. The driver :func:`agora.runs.duel.run_duels` plays ``T`` iterations,
carrying reputations and leader weights from duel to duel through the trace store; all random draws
are seeded by ``(seed, iteration, index)``, so a resumed run plays the same duels as an
uninterrupted one.

Sources: Jiang et al., arXiv 2506.04721 (Sparta); Hahn et al., arXiv 2609.39076 (Stackelberg).
"""

from __future__ import annotations

import math
import operator
from functools import lru_cache
from typing import Annotated, Any, Sequence

import numpy as np
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents.duel import DuelConfig
from agora.agents.duel_records import DuelRecord, FollowerAnswer, Instruction, preference_pair
from agora.agents.exp3 import Exp3Leader, LeaderState, leader_reward, target_gap
from agora.agents.judge import Judge, Judgement, judge_means, position_bias
from agora.agents.matching import Match, Matcher
from agora.agents.personas import CAUTIOUS, persona_specs
from agora.models.pool import ModelCallError, ModelPool, builtin_pool_specs, pool_from_specs
from agora.agents.prompts import solver_messages
from agora.agents.reputation import Reputation, ReputationState, aggregate_score
from agora.agents.seeds import call_seed, sampling
from agora.graphs.context import context_as, protocol_context
from agora.graphs.nodes import emit
from agora.models.studio_schema import studio_schema
from agora.graphs.scoring import ProtocolGraph
from agora.graphs.spec import ProtocolSpec
from agora.tasks.answers import extract_answer
from agora.tasks.comparison import is_correct
from agora.tasks.problem import Problem
from agora.tasks.synthetic import synthetic_problems
from agora.traces import duels as duel_traces

MIN_POOL = 3
"""Two followers and at least one judge who is neither."""


def default_duel_specs(pool: str = "default"):
    """A built-in pool's models (``default`` or ``tiny``) plus a ``cautious`` persona variant of each:
    4 members (same weights, a different system prompt, separate names in duels and traces)."""
    base = builtin_pool_specs(pool)
    return list(base) + persona_specs(base, {"cautious": CAUTIOUS})


def duel_pool(pool: ModelPool | str | None = None) -> ModelPool:
    """``pool``, or the embedded duel pool (:func:`default_duel_specs`) when ``None`` or the name of a
    built-in pool (``"tiny"``: SmolLM2, Gemma and their personas).

    Raises:
        ValueError: the pool has fewer than 3 members (judges must be outside the duel).
    """
    if pool is None or isinstance(pool, str):
        pool = _embedded_duel_pool(pool or "default")
    if len(pool) < MIN_POOL:
        raise InputError(f"{pool.source}: a duel pool needs at least {MIN_POOL} models (two duel, the others "
                         f"judge), got {len(pool)} ({', '.join(pool.names)}); add members to the pool file, e.g. "
                         f"variants of a model under another name with a different system_prompt or temperature")
    return pool


@lru_cache(maxsize=2)
def _embedded_duel_pool(name: str = "default") -> ModelPool:
    return pool_from_specs(default_duel_specs(name), source=f"builtin:duel-{name}" if name != "default" else "builtin:duel")


DuelContext = protocol_context(
    "DuelContext", DuelConfig, "Duel settings: mode, sampling, judging, reputation, leader and matching.",
    builtin=_embedded_duel_pool,
    pool_doc="At least 3 models: a ``ModelPool`` (Python callers), a built-in pool name (``tiny``, ``default``: its "
             "two models plus a ``cautious`` persona of each) or a TOML pool-file path; ``None`` = the embedded duel "
             "pool (the default pool's models and their personas).",
    extra=[("instructions", Sequence[Problem], (),
            "The leader's instruction pool; empty = 16 generated arithmetic problems (for Studio).")])


def _config(runtime: Runtime) -> DuelConfig:
    return context_as(runtime.context, DuelContext).config


def _instructions(runtime: Runtime) -> Sequence[Problem]:
    given = context_as(runtime.context, DuelContext).instructions
    return given if given else synthetic_problems(16, seed=_config(runtime).seed)


def _pool(runtime: Runtime) -> ModelPool:
    return duel_pool(context_as(runtime.context, DuelContext).pool)


def _rng(cfg: DuelConfig, iteration: int, index: int, stream: int) -> np.random.Generator:
    """The generator of one draw of one duel: seeded by ``(seed, iteration, index, stream)``."""
    return np.random.default_rng([cfg.seed, iteration, index, stream])


# ---------------------------------------------------------------------------- state


@studio_schema(example={"run_id": "studio", "iteration": 0, "index": 0})
class DuelInput(TypedDict, total=False):
    """Where the duel sits in its run and the state carried over from the previous duel."""

    run_id: str
    """Default ``"duel"``."""
    iteration: int
    """``t`` in ``0..T−1`` (default 0)."""
    index: int
    """Duel index within the iteration, ``0..D−1`` (default 0)."""
    duel_number: int
    """Duels played before this one in the run (default 0)."""
    reputation: ReputationState
    """Default: every model at the initial reputation."""
    leader: LeaderState
    """Default: uniform weights."""


@studio_schema()
class DuelOutput(TypedDict):
    """What the graph returns: the duel's record and the state the next duel starts from."""

    record: DuelRecord
    """The duel: instruction, followers, both answers, every judge's scores, winner, updates."""
    reputation: ReputationState
    """Reputations after this duel (pass it to the next duel's input)."""
    leader: LeaderState
    """The leader's EXP3 weights after this duel (pass it to the next duel's input)."""
    calls: list[dict[str, Any]]
    """Trace records of every model call of the duel (followers and judges)."""


class DuelState(DuelInput, total=False):
    duel_id: str
    instruction: Instruction
    prompt_messages: list[dict[str, str]]
    match: Match
    ratings_before: dict[str, float]
    answers: Annotated[list[FollowerAnswer], operator.add]
    judges: list[str]
    """The pool members judging this duel (set by ``collect_answers``)."""
    judgements: Annotated[list[Judgement], operator.add]
    calls: Annotated[list[dict[str, Any]], operator.add]
    """Trace records of every model call (written to the store by :func:`agora.runs.duel.run_duels`)."""
    scores: list[float]
    winner: str | None
    deltas: dict[str, float]
    leader_reward: float
    leader_updated: bool
    record: DuelRecord


class RespondTask(TypedDict):
    duel_id: str
    iteration: int
    index: int
    slot: int
    model: str
    prompt_messages: list[dict[str, str]]
    instruction: Instruction


class JudgeTask(TypedDict):
    duel_id: str
    judge: str
    question: str
    answers: list[list[str]]
    """``[model, text]`` of both followers, slot order."""


# ---------------------------------------------------------------------------- nodes


def pick_instruction(state: DuelState, runtime: Runtime[DuelContext]) -> dict[str, Any]:
    """The leader draws an instruction (uniformly in iteration 0 and in Sparta mode)."""
    cfg = _config(runtime)
    problems = _instructions(runtime)
    run_id, t, d = state.get("run_id") or "duel", state.get("iteration", 0), state.get("index", 0)
    if not 0 <= t < cfg.iterations or not 0 <= d < cfg.duels:
        raise ValueError(f"duel ({t}, {d}) is outside {cfg.iterations} iterations × {cfg.duels} duels")
    leader = Exp3Leader([p.id for p in problems], cfg.leader, state.get("leader"))
    k, p_k = leader.sample(_rng(cfg, t, d, 0), t)
    problem = problems[k]
    instruction = Instruction(id=problem.id, index=k, question=problem.question, gold=problem.gold,
                              kind=problem.kind, n_choices=problem.n_choices, probability=p_k)
    duel_id = f"{run_id}:{t}:{d}"
    emit("instruction", f"duel {duel_id}: instruction {problem.id} (p={p_k:.3f})", duel_id=duel_id,
         instruction_id=problem.id, probability=p_k)
    return {"run_id": run_id, "iteration": t, "index": d, "duel_number": state.get("duel_number", 0),
            "duel_id": duel_id, "instruction": instruction, "prompt_messages": solver_messages(problem, cfg.shots),
            "leader": leader.state()}


def match(state: DuelState, runtime: Runtime[DuelContext]) -> dict[str, Any]:
    """The matcher draws the two followers from the pool's reputations."""
    cfg = _config(runtime)
    names = _pool(runtime).names
    ratings = Reputation(cfg.reputation, state.get("reputation")).ratings(names)
    pairing = Matcher(cfg.mode, cfg.match).pick(names, ratings, duel_number=state["duel_number"],
                                                iteration=state["iteration"], iterations=cfg.iterations,
                                                rng=_rng(cfg, state["iteration"], state["index"], 1))
    emit("match", f"{pairing['active']} vs {pairing['opponent']}", **pairing)
    return {"match": pairing, "ratings_before": ratings}


def fan_out_followers(state: DuelState) -> list[Send]:
    """Both followers answer in parallel."""
    base = {k: state[k] for k in ("duel_id", "iteration", "index", "prompt_messages", "instruction")}
    followers = (state["match"]["active"], state["match"]["opponent"])
    return [Send("respond", RespondTask(**base, slot=slot, model=model)) for slot, model in enumerate(followers)]


def respond(task: RespondTask, runtime: Runtime[DuelContext]) -> dict[str, Any]:
    """One follower answers the instruction.

    Raises:
        ModelCallError: no answer after the pool's retries (the run stops; a rerun resumes).
    """
    cfg = _config(runtime)
    slot, model, ins = task["slot"], task["model"], task["instruction"]
    params = sampling(cfg, seed=call_seed(cfg.seed, f"{task['iteration']}:{task['index']}", "duel.respond", agent=slot))
    samples, records = _pool(runtime).sample(model, task["prompt_messages"], params, context={
        "question_id": task["duel_id"], "node": "respond", "role": "follower", "agent": slot})
    if not samples:
        raise ModelCallError(f"follower {model} gave no answer to duel {task['duel_id']} after retries", records)
    text = samples[0].text
    checkable = ins["kind"] in ("math", "mc")
    answer = extract_answer(text, ins["kind"], ins["n_choices"] or 4) if checkable else None
    correct = is_correct(answer, ins["gold"], ins["kind"]) if checkable and ins["gold"] is not None else None
    emit("answer", f"{model} answered ({samples[0].completion_tokens} tokens)", model=model, slot=slot)
    return {"answers": [FollowerAnswer(slot=slot, model=model, text=text, answer=answer, correct=correct,
                                       completion_tokens=samples[0].completion_tokens, call_id=samples[0].call_id)],
            "calls": records}


def collect_answers(state: DuelState, runtime: Runtime[DuelContext]) -> dict[str, Any]:
    """Both answers are in: the judging can start; its update names the judges (every pool member
    outside the duel, as :func:`fan_out_judges` sends them)."""
    followers = [a["model"] for a in _ordered(state["answers"])]
    emit("answers", "both followers answered", models=followers)
    return {"judges": [name for name in _pool(runtime).names if name not in followers]}


def fan_out_judges(state: DuelState, runtime: Runtime[DuelContext]) -> list[Send]:
    """Every pool member outside the duel judges both answers, in parallel."""
    answers = _ordered(state["answers"])
    followers = {a["model"] for a in answers}
    shown = [[a["model"], a["text"]] for a in answers]
    return [Send("judge", JudgeTask(duel_id=state["duel_id"], judge=name, question=state["instruction"]["question"],
                                    answers=shown))
            for name in _pool(runtime).names if name not in followers]


def judge(task: JudgeTask, runtime: Runtime[DuelContext]) -> dict[str, Any]:
    """One judge scores both answers (1–10, parse failures score the fallback and are flagged)."""
    cfg = _config(runtime)
    judgements, records = Judge(_pool(runtime), task["judge"], cfg.judge).score(
        task["question"], [tuple(a) for a in task["answers"]], context={"question_id": task["duel_id"],
                                                                       "node": "judge"})
    emit("judged", f"{task['judge']} scored {[j['score'] for j in judgements]}", judge=task["judge"],
         scores=[j["score"] for j in judgements], parsed=[j["parsed"] for j in judgements])
    return {"judgements": judgements, "calls": records}


def aggregate(state: DuelState) -> dict[str, Any]:
    """Reputation-weighted mean score of each answer (Sparta Eq. 8); equal scores are a tie."""
    means = judge_means(state["judgements"])
    scores = [aggregate_score(means[slot], state["ratings_before"]) for slot in (0, 1)]
    answers = _ordered(state["answers"])
    winner = None if math.isclose(scores[0], scores[1], abs_tol=1e-9) else answers[int(scores[1] > scores[0])]["model"]
    emit("outcome", f"scores {scores[0]:.2f} vs {scores[1]:.2f}: {winner or 'tie'}", scores=scores, winner=winner)
    return {"scores": scores, "winner": winner}


def update(state: DuelState, runtime: Runtime[DuelContext]) -> dict[str, Any]:
    """Reputations move (Sparta Eq. 9); in Stackelberg mode the leader takes its EXP3 step."""
    cfg = _config(runtime)
    problems = _instructions(runtime)
    s0, s1 = state["scores"]
    first, second = state["match"]["active"], state["match"]["opponent"]
    reputation = Reputation(cfg.reputation, state.get("reputation"))
    d0, d1 = reputation.update(first, second, s0, s1)
    leader = Exp3Leader([p.id for p in problems], cfg.leader, state["leader"])
    reward = leader_reward(s0, s1, target_gap(state["iteration"], cfg.iterations, cfg.leader), cfg.leader)
    updated = cfg.mode == "stackelberg"
    if updated:
        leader.update(state["instruction"]["index"], reward, state["instruction"]["probability"])
    emit("reputation", f"reputation {first} {d0:+.2f}, {second} {d1:+.2f}"
         + (f"; leader reward {reward:.2f}" if updated else ""), deltas={first: d0, second: d1},
         leader_reward=reward, leader_updated=updated)
    return {"reputation": reputation.state(), "leader": leader.state(), "deltas": {first: d0, second: d1},
            "leader_reward": reward, "leader_updated": updated}


def record(state: DuelState, runtime: Runtime[DuelContext]) -> dict[str, Any]:
    """Assemble the duel's record and its preference pair (none for a tie)."""
    cfg = _config(runtime)
    problems = _instructions(runtime)
    names = _pool(runtime).names
    reputation = Reputation(cfg.reputation, state["reputation"])
    answers = _ordered(state["answers"])
    leader = Exp3Leader([p.id for p in problems], cfg.leader, state["leader"])
    rec = DuelRecord(
        duel_id=state["duel_id"], run_id=state["run_id"], mode=cfg.mode, iteration=state["iteration"],
        index=state["index"], duel_number=state["duel_number"], instruction=state["instruction"],
        prompt_messages=state["prompt_messages"], followers=[a["model"] for a in answers],
        opponent_probability=state["match"]["opponent_probability"], answers=answers,
        judgements=state["judgements"], scores=state["scores"], winner=state["winner"],
        margin=abs(state["scores"][0] - state["scores"][1]), position_bias=position_bias(state["judgements"]),
        ratings_before=state["ratings_before"], ratings_after=reputation.ratings(names),
        sigmas_after={m: reputation.sigma(m) for m in names}, deltas=state["deltas"],
        leader_reward=state["leader_reward"], eta=leader.eta, leader_updated=state["leader_updated"],
        leader_state=state["leader"], n_instructions=len(problems), pair=None)
    rec["pair"] = preference_pair(rec)
    return {"record": rec}


def _ordered(answers: Sequence[FollowerAnswer]) -> list[FollowerAnswer]:
    by_slot = {a["slot"]: a for a in answers}
    if set(by_slot) != {0, 1}:
        raise ValueError(f"a duel needs both answers, got slots {sorted(by_slot)}")
    return [by_slot[0], by_slot[1]]


# ---------------------------------------------------------------------------- graph


def build_duel_graph() -> StateGraph:
    """The duel graph, uncompiled (compile with or without a checkpointer).

    Input: :class:`DuelInput`; output: :class:`DuelOutput`; context: :class:`DuelContext`.
    """
    builder = ProtocolGraph(DuelState, context_schema=DuelContext, input_schema=DuelInput, output_schema=DuelOutput)
    builder.add_sequence([pick_instruction, match])  # nodes named after their functions
    for node in (respond, collect_answers, judge):
        builder.add_node(node)
    builder.add_sequence([aggregate, update, record])
    builder.add_edge(START, "pick_instruction")
    builder.add_conditional_edges("match", fan_out_followers, ["respond"])
    builder.add_edge("respond", "collect_answers")
    builder.add_conditional_edges("collect_answers", fan_out_judges, ["judge"])
    builder.add_edge("judge", "aggregate")
    builder.add_edge("record", END)
    return builder


def _duel_played(values: dict[str, Any]) -> bool:
    """A duel is finished once its graph has returned the duel's ``record`` (not ``None``)."""
    return values.get("record") is not None


SPEC = ProtocolSpec(
    name="duel", graph_id="duel", module=__name__,
    build=build_duel_graph, context=DuelContext, config=DuelConfig, input=DuelInput, output=DuelOutput,
    kind="carried", finished=_duel_played, record=duel_traces.record_duel,
    cli=("duel", "report duels"), docs="duels.md",
    description="One duel of Sparta / Stackelberg alignment: the leader (EXP3) picks an instruction, the matcher two followers by reputation, both answer in parallel, every other pool member judges both answers 1-10, reputation-weighted scores decide winner or tie, reputations and leader weights update, the duel's record and preference pair (none for a tie) are returned.",
)

#: Compiled without a checkpointer, for LangGraph Studio (``langgraph.json``) and embedding.
graph = SPEC.compile()
