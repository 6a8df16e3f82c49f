"""Mixture-of-Agents: settings and the aggregator's prompt (no LangGraph; the graph is
:mod:`agora.graphs.moa`).

Source: Wang et al., "Mixture-of-Agents Enhances Large Language Model Capabilities", arXiv 2406.04692:
proposers answer independently, an aggregator reads every proposal and writes one answer
(aggregate-and-synthesise). Agora runs the two-layer "MoA-Lite" shape: one proposer layer, one
aggregator.
"""

from __future__ import annotations

import random
from typing import Annotated, Sequence

from agora.tasks.errors import InputError
from agora.models.pool import MAX_POOL_TEMPERATURE
from agora.agents._checks import EachOnce, MaxTokens, Seed, Shots, TopP
from agora.agents.prompts import finish_instruction, with_question
from agora.models.validation import Name, Names, Number, settings
from agora.tasks.problem import Problem

# Seeds: nodes "moa.proposer" and "moa.aggregator" of agora.agents.seeds.NODES (the same in COMED's
# baseline and in MoA alone, so both draw the same samples).


#: Why a proposer named twice is refused (:func:`agora.agents._checks.EachOnce`).
PROPOSERS_ONCE = "each proposer answers once and its answer is read once"


@settings
class MoAConfig:
    """Settings of one Mixture-of-Agents run (defaults as COMED's baseline, sized for CPU pools).

    Raises:
        ValueError: a bad value (a wrong type, a bool, NaN or inf, out of range); one line naming the
            class, the field and the value (:mod:`agora.models.validation`).
    """

    proposers: Annotated[tuple[str, ...], Names, EachOnce("MoAConfig", "proposers", PROPOSERS_ONCE)] = ()
    """Proposer models (one answer each); empty = every pool model."""
    aggregator: Annotated[str | None, Name()] = None
    """The aggregator model; ``None`` = the first pool model (COMED passes its anchor)."""
    temperature: Annotated[float, Number(), Number(0, MAX_POOL_TEMPERATURE, expected=f"in [0, {MAX_POOL_TEMPERATURE}]")] = 0.7
    """Sampling temperature of every answer (at most 2, as a pool entry's)."""
    top_p: TopP = 0.95
    """Nucleus sampling: the probability mass sampled from."""
    max_tokens: MaxTokens = 128
    """Generated-token cap of every proposal and of the aggregation."""
    shots: Shots = 2
    """Worked exemplars in each prompt."""
    seed: Seed = 0
    """Per-question seeds derive from it and the question id."""


def check_pool(config: MoAConfig, names: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the field when a configured model is not in the pool."""
    for what, name in [("aggregator", config.aggregator), *(("proposers", m) for m in config.proposers)]:
        if name is not None and name not in names:
            raise InputError(f"MoAConfig.{what}: {name!r} is not in the pool ({', '.join(names)})")


def aggregator_messages(problem: Problem, proposals: Sequence[str], shots: int = 2) -> list[dict[str, str]]:
    """The MoA aggregator's prompt (Wang et al. 2024, aggregate-and-synthesise): the proposers'
    answers, to be critically combined into one."""
    shown = "\n\n".join(f"{i + 1}. \"{t.strip()}\"" for i, t in enumerate(proposals))
    return with_question(problem, shots, (
        f"{problem.question}\n\nResponses from several models:\n{shown}\n\n"
        f"Some of them may be wrong. Critically evaluate them and write one correct answer. {finish_instruction(problem)}"))


def aggregator_prompt(question: str, candidates: Sequence[str], *, kind: str = "math", n_choices: int = 4,
                      seed: int = 0, shots: int = 2, question_id: str = "q") -> list[dict[str, str]]:
    """The trained aggregator's prompt (:mod:`agora.training.aggregator`, and ALIGN's model principal
    at run time): :func:`aggregator_messages` over ``candidates`` shuffled with ``seed``
    (``random.Random(seed).shuffle``), so the candidates' order carries no signal."""
    shown = list(candidates)
    random.Random(seed).shuffle(shown)
    problem = Problem(question_id, question, None, kind, n_choices=n_choices)
    return aggregator_messages(problem, shown, shots)


def run_label(config: MoAConfig, names: Sequence[str]) -> str:
    """A run's one-line description (``agora run moa``'s first line): who proposes and who aggregates."""
    return f"{len(config.proposers or names)} proposers, aggregator {config.aggregator or names[0]}"
