"""A duel's records: the instruction, the followers' answers, the duel record that
:mod:`agora.traces.duels` writes (one row per duel) and the DPO preference pair drawn from it
(:func:`preference_pair`: winner chosen, loser rejected). Shapes and one pure function; the duel
graph is :mod:`agora.graphs.duel`."""

from __future__ import annotations

from typing_extensions import TypedDict

from agora.agents.exp3 import LeaderState
from agora.agents.judge import Judgement, judge_means
from agora.models.studio_schema import studio_schema


class Instruction(TypedDict):
    id: str
    index: int
    """Position in the instruction pool (the leader's arm)."""
    question: str
    gold: str | None
    kind: str
    n_choices: int
    probability: float
    """Probability the leader gave it when it was drawn."""


class FollowerAnswer(TypedDict):
    slot: int
    """0: the active model, 1: its opponent."""
    model: str
    text: str
    answer: str | None
    """Extracted final answer (math and multiple choice), else ``None``."""
    correct: bool | None
    """Against the instruction's gold answer; ``None`` without one."""
    completion_tokens: int
    call_id: str


@studio_schema()
class PreferencePair(TypedDict):
    """A row of ``preference_pairs`` (:mod:`agora.traces.duels`), for DPO."""

    pair_id: str
    run_id: str
    duel_id: str
    iteration: int
    prompt: str
    prompt_messages: list[dict[str, str]]
    chosen: str
    rejected: str
    chosen_model: str
    rejected_model: str
    chosen_score: float
    rejected_score: float
    margin: float
    judge_scores: dict[str, dict[str, float]]
    """``{"chosen": {judge: score}, "rejected": {judge: score}}`` (mean over presentation orders)."""
    reputations: dict[str, float]
    """Every pool member's reputation when the duel was played (before its update)."""
    gold: str | None
    kind: str | None


@studio_schema()
class DuelRecord(TypedDict):
    """Everything one duel produced; :func:`agora.traces.duels.record_duel` writes it."""

    duel_id: str
    run_id: str
    mode: str
    iteration: int
    index: int
    duel_number: int
    instruction: Instruction
    prompt_messages: list[dict[str, str]]
    followers: list[str]
    opponent_probability: float
    answers: list[FollowerAnswer]
    judgements: list[Judgement]
    scores: list[float]
    """Reputation-weighted judge score ``s̄`` of each answer (slot order): the GRPO reward."""
    winner: str | None
    """``None`` for a tie."""
    margin: float
    """``|s̄_0 − s̄_1|``."""
    position_bias: float | None
    ratings_before: dict[str, float]
    ratings_after: dict[str, float]
    sigmas_after: dict[str, float]
    deltas: dict[str, float]
    """Applied reputation change of each follower."""
    leader_reward: float
    eta: float
    leader_updated: bool
    leader_state: LeaderState
    n_instructions: int
    pair: PreferencePair | None



def preference_pair(rec: DuelRecord) -> PreferencePair | None:
    """The DPO pair of a duel: the winner's answer chosen, the loser's rejected; ``None`` for a tie."""
    if rec["winner"] is None:
        return None
    w = rec["followers"].index(rec["winner"])
    means = judge_means(rec["judgements"])
    ins = rec["instruction"]
    return PreferencePair(
        pair_id=rec["duel_id"], run_id=rec["run_id"], duel_id=rec["duel_id"], iteration=rec["iteration"],
        prompt=ins["question"], prompt_messages=rec["prompt_messages"], chosen=rec["answers"][w]["text"],
        rejected=rec["answers"][1 - w]["text"], chosen_model=rec["followers"][w],
        rejected_model=rec["followers"][1 - w], chosen_score=rec["scores"][w], rejected_score=rec["scores"][1 - w],
        margin=rec["scores"][w] - rec["scores"][1 - w],
        judge_scores={"chosen": means[w], "rejected": means[1 - w]}, reputations=rec["ratings_before"],
        gold=ins["gold"], kind=ins["kind"])
