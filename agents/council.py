"""LLM council: settings, the reviewers' anonymised ballots, the aggregate ranking and the prompts
(no LangGraph; the graph is :mod:`agora.graphs.council`).

Three stages, as the LLM councils users run today:

1. **First answers**: every member answers the question alone.
2. **Peer ranking**: every member ranks the *other* members' answers, shown anonymised as
   "Response A", "Response B", ... in an order shuffled per reviewer with a seeded permutation
   (:func:`ballot_order`); its own answer is never shown to it (self-exclusion), and no model name
   is in its prompt. It ends its reply with ``FINAL RANKING:`` and the labels best first
   (:func:`parse_ranking`).
3. **Chair**: one model (``CouncilConfig.chair``) reads every first answer and the aggregate
   ranking and writes the final answer.

Sources and how this differs: Karpathy's ``llm-council`` (2025; stage 1 first opinions, stage 2
anonymised "Response X" review ending in a ``FINAL RANKING:`` list, aggregated as each answer's
mean rank position, stage 3 a chairman synthesis) shows every reviewer all answers, its own
included; amiable-dev's ``llm-council`` (ADR-010) excludes self-votes and aggregates with a
normalised Borda count (first = 1, last = 0, averaged over ballots). Agora follows the second:
self-exclusion and normalised Borda (:func:`aggregate`), with the mean rank reported beside it.
Borda: J.-C. de Borda, "Mémoire sur les élections au scrutin" (1781); as a rank aggregation, e.g.
Dwork et al., "Rank aggregation methods for the web", WWW 2001.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Annotated, Mapping, Sequence

from pydantic import model_validator

from agora.tasks.errors import InputError
from agora.agents.prompts import finish_instruction, with_question
from agora.agents.seeds import SeedNode, call_seed
from agora.agents._checks import EachOnce, MaxTokens, Seed, Shots, Temperature, TopP
from agora.models.validation import Name, Names, settings
from agora.tasks.problem import Problem

ANSWER_SEED = SeedNode(301, agent_stride=1)
"""Member i's first answer: MoA's proposer seeds (``moa.proposer``), so without a shared candidate
pool the council's first answers are MoA's proposals (the same prompt, model and seed)."""
REVIEW_SEED = SeedNode(601, agent_stride=1)
"""Reviewer i's ranking request."""
SHUFFLE_SEED = SeedNode(651, agent_stride=1)
"""Reviewer i's permutation of the answers it ranks (no model call: the ``random.Random`` seed)."""
CHAIR_SEED = SeedNode(701)
"""The chair's request."""

RANKING_HEADER = "FINAL RANKING:"


@settings
class CouncilConfig:
    """Settings of one council run (sampling sized for CPU pools, as MoA's).

    Raises:
        ValueError: a bad value; the message names the field.
    """

    members: Annotated[tuple[str, ...], Names,
                       EachOnce("CouncilConfig", "members", "each member answers once and casts one ballot")] = ()
    """Member models (one first answer and one ballot each); empty = every pool model. At least two."""
    chair: Annotated[str | None, Name()] = None
    """The model that writes the final answer; ``None`` = the first member (Agora's pools list the
    strongest model first by convention; COMED passes its anchor, as it does MoA's aggregator)."""
    temperature: Temperature = 0.7
    """Sampling temperature of the first answers and of the chair's answer (at most 2)."""
    top_p: TopP = 0.95
    """Nucleus sampling: the probability mass sampled from."""
    max_tokens: MaxTokens = 128
    """Generated-token cap of every first answer and of the chair's answer."""
    review_temperature: Temperature = 0.0
    """Sampling temperature of the rankings (greedy by default: a ballot is a judgement, not a sample)."""
    review_max_tokens: MaxTokens = 192
    """Generated-token cap of each ranking (its short evaluation and the ``FINAL RANKING:`` list)."""
    shots: Shots = 2
    """Worked exemplars in each prompt."""
    seed: Seed = 0
    """Per-question seeds (answers, rankings, the reviewers' shuffles) derive from it and the question id."""

    @model_validator(mode="after")
    def _two_members(self) -> CouncilConfig:
        if len(self.members) == 1:
            raise InputError(f"CouncilConfig.members: a council needs at least two members, got {self.members}")
        return self


def council_members(config: CouncilConfig, names: Sequence[str]) -> list[str]:
    """The members (``config.members`` or the whole pool) after :func:`check_pool`."""
    check_pool(config, names)
    return list(config.members or names)


def chair_of(config: CouncilConfig, names: Sequence[str]) -> str:
    """The chair: ``config.chair``, else the first member."""
    return config.chair or council_members(config, names)[0]


def check_pool(config: CouncilConfig, names: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the field when a configured model is not in the pool, or the
    council would have fewer than two members."""
    names = list(names)
    for what, name in [("chair", config.chair), *(("members", m) for m in config.members)]:
        if name is not None and name not in names:
            raise InputError(f"CouncilConfig.{what}: {name!r} is not in the pool ({', '.join(names)})")
    if len(config.members or names) < 2:
        raise InputError(f"a council needs at least two members; the pool has only {', '.join(names)}")


# ---------------------------------------------------------------------------- stage 2: ballots


def label(i: int) -> str:
    """The anonymous label of the ``i``-th answer a reviewer sees: ``Response A``, ``B``, ... ``Z``,
    ``AA``... (0-based)."""
    letters = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        letters = chr(65 + r) + letters
    return f"Response {letters}"


def ballot_order(reviewer: int, others: Sequence[int], seed: int, question_id: str) -> list[int]:
    """The members whose answers reviewer ``reviewer`` ranks, in the order it sees them: ``others``
    (never ``reviewer`` itself) shuffled by ``random.Random(call_seed(seed, question_id,
    SHUFFLE_SEED, agent=reviewer))``: a different permutation per reviewer, the same on every rerun.
    Position ``p`` of the result is shown as :func:`label(p) <label>`."""
    order = [m for m in others if m != reviewer]
    random.Random(call_seed(seed, question_id, SHUFFLE_SEED, agent=reviewer)).shuffle(order)
    return order


_LABEL = re.compile(r"Response\s+([A-Z]{1,2})\b")


def parse_ranking(text: str | None, n_shown: int) -> list[int]:
    """The positions (0-based, as shown) a reviewer ranked, best first: the ``Response X`` labels
    after the last ``FINAL RANKING:`` (case-insensitive), else anywhere in the text, in order of
    first mention; unknown labels and repeats are dropped. ``[]`` when nothing parses.

    >>> parse_ranking("B is right. FINAL RANKING:\\n1. Response B\\n2. Response A", 2)
    [1, 0]
    """
    if not text:
        return []
    cut = text.upper().rfind(RANKING_HEADER)
    section = text[cut + len(RANKING_HEADER):] if cut >= 0 else text
    valid = {label(i).split()[1]: i for i in range(n_shown)}
    out: list[int] = []
    for letters in _LABEL.findall(section):
        if letters in valid and valid[letters] not in out:
            out.append(valid[letters])
    return out


def ballot_points(shown: Sequence[int], ranked: Sequence[int]) -> dict[int, tuple[float, float]]:
    """One ballot's (rank, normalised Borda points) per member it showed. ``shown``: the members in
    the order shown; ``ranked``: positions into ``shown``, best first (:func:`parse_ranking`).
    Ranked members take ranks 1..r; members the ballot left out tie at the mean of ranks r+1..m.
    Points = (m − rank) / (m − 1), first 1, last 0 (1.0 when a ballot shows one answer).

    >>> ballot_points([7, 8, 9], [2])
    {9: (1.0, 1.0), 7: (2.5, 0.25), 8: (2.5, 0.25)}
    """
    m = len(shown)
    ranks: dict[int, float] = {shown[p]: float(i + 1) for i, p in enumerate(ranked)}
    left = [member for member in shown if member not in ranks]
    if left:
        tie = (len(ranks) + 1 + m) / 2
        ranks.update({member: tie for member in left})
    return {member: (r, (m - r) / (m - 1) if m > 1 else 1.0) for member, r in ranks.items()}


@dataclass(frozen=True, slots=True)
class Standing:
    """One member's place in the aggregate ranking."""

    member: int
    borda: float
    """Mean normalised Borda points over the ballots that showed its answer (0 worst .. 1 best)."""
    mean_rank: float
    """Mean rank over the same ballots (1 = best; Karpathy's aggregate)."""
    ballots: int


def aggregate(ballots: Sequence[tuple[Sequence[int], Sequence[int]]], members: Sequence[int]) -> list[Standing]:
    """The aggregate ranking, best first: for each member, the mean normalised Borda points and mean
    rank over the ballots ``(shown, ranked)`` that showed its answer (:func:`ballot_points`); sorted by
    Borda points (higher first), then mean rank, then member order. A member no ballot showed (it
    did not answer) is left out.

    >>> [s.member for s in aggregate([([1, 2], [0, 1]), ([2, 0], [0, 1]), ([1, 0], [0, 1])], [0, 1, 2])]
    [1, 2, 0]
    """
    points: dict[int, list[tuple[float, float]]] = {}
    for shown, ranked in ballots:
        for member, value in ballot_points(shown, ranked).items():
            points.setdefault(member, []).append(value)
    table = [Standing(m, sum(p for _r, p in points[m]) / len(points[m]), sum(r for r, _p in points[m]) / len(points[m]),
                      len(points[m])) for m in members if m in points]
    order = {m: i for i, m in enumerate(members)}
    return sorted(table, key=lambda s: (-s.borda, s.mean_rank, order[s.member]))


# ---------------------------------------------------------------------------- prompts


def review_messages(problem: Problem, answers: Sequence[str], shots: int = 2) -> list[dict[str, str]]:
    """A reviewer's prompt: the question and the answers it ranks, labelled ``Response A``... in the
    order given (already shuffled, its own left out; no model names)."""
    shown = "\n\n".join(f"{label(i)}:\n\"{t.strip()}\"" for i, t in enumerate(answers))
    return with_question(problem, shots, (
        f"{problem.question}\n\nAnswers from other council members:\n\n{shown}\n\n"
        "Check each answer and say briefly which are right. Then rank them from best (most likely correct) to "
        f"worst: end with a line '{RANKING_HEADER}' followed by one numbered line per answer, e.g. "
        f"'1. {label(0)}'."))


def chair_messages(problem: Problem, answers: Sequence[str], ranking: Sequence[tuple[int, float]],
                   shots: int = 2) -> list[dict[str, str]]:
    """The chair's prompt: every first answer (``Answer 1``... in member order) and the council's
    aggregate ranking ``(position in answers, Borda points)``, best first."""
    shown = "\n\n".join(f"Answer {i + 1}:\n\"{t.strip()}\"" for i, t in enumerate(answers))
    ranked = ", ".join(f"Answer {i + 1} ({points:.2f})" for i, points in ranking) or "no usable rankings"
    return with_question(problem, shots, (
        f"{problem.question}\n\nThe council's answers:\n\n{shown}\n\nThe members' peer ranking, best first "
        f"(mean Borda points, 1 = ranked first by every reviewer): {ranked}.\n\n"
        f"As the chair, weigh the answers and the ranking and write the council's final answer. "
        f"{finish_instruction(problem)}"))


def standings_table(standings: Sequence[Standing], models: Mapping[int, str]) -> list[dict[str, object]]:
    """The aggregate ranking as plain rows (for state and traces): member, model, borda, mean_rank, ballots."""
    return [{"member": s.member, "model": models[s.member], "borda": s.borda, "mean_rank": s.mean_rank,
             "ballots": s.ballots} for s in standings]


def run_label(config: CouncilConfig, names: Sequence[str]) -> str:
    """A run's one-line description (``agora run council``'s first line): the members and the chair."""
    return f"{len(config.members or names)} members, chair {chair_of(config, names)}"
