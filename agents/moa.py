"""Mixture-of-Agents: settings and the aggregator's prompt (no LangGraph; the graph is
:mod:`agora.graphs.moa`).

Source: Wang et al., "Mixture-of-Agents Enhances Large Language Model Capabilities", arXiv 2406.04692:
proposers answer independently, an aggregator reads every proposal and writes one answer
(aggregate-and-synthesise). Agora runs the two-layer "MoA-Lite" shape: one proposer layer, one
aggregator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from agora.models.pool import MAX_POOL_TEMPERATURE
from agora.agents._checks import check_name, check_names, check_number, check_sampling
from agora.agents.prompts import finish_instruction, with_question
from agora.tasks.problem import Problem

# Seeds: nodes "moa.proposer" and "moa.aggregator" of agora.agents.seeds.NODES (the same in COMED's
# baseline and in MoA alone, so both draw the same samples).


@dataclass(frozen=True, slots=True)
class MoAConfig:
    """Settings of one Mixture-of-Agents run (defaults as COMED's baseline, sized for CPU pools).

    Raises:
        ValueError: a bad value (a wrong type, a bool, NaN or inf, out of range); one line naming the
            class, the field and the value (:mod:`agora.agents._checks`).
    """

    proposers: tuple[str, ...] = ()
    """Proposer models (one answer each); empty = every pool model."""
    aggregator: str | None = None
    """The aggregator model; ``None`` = the first pool model (COMED passes its anchor)."""
    temperature: float = 0.7
    """Sampling temperature of every answer (at most 2, as a pool entry's)."""
    top_p: float = 0.95
    """Nucleus sampling: the probability mass sampled from."""
    max_tokens: int = 128
    """Generated-token cap of every proposal and of the aggregation."""
    shots: int = 2
    """Worked exemplars in each prompt."""
    seed: int = 0
    """Per-question seeds derive from it and the question id."""

    def __post_init__(self):
        check_number("MoAConfig", "temperature", self.temperature)  # a type, bool, NaN or inf: the shared message
        if not 0 <= self.temperature <= MAX_POOL_TEMPERATURE:  # the range keeps its message (the CLI's tests pin it)
            raise ValueError(f"MoAConfig.temperature must be in [0, {MAX_POOL_TEMPERATURE}], got {self.temperature!r}")
        check_sampling("MoAConfig", self, temperatures=())
        check_names("MoAConfig", "proposers", self.proposers)
        check_name("MoAConfig", "aggregator", self.aggregator)


def check_pool(config: MoAConfig, names: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the field when a configured model is not in the pool."""
    for what, name in [("aggregator", config.aggregator), *(("proposers", m) for m in config.proposers)]:
        if name is not None and name not in names:
            raise ValueError(f"MoAConfig.{what}: {name!r} is not in the pool ({', '.join(names)})")


def aggregator_messages(problem: Problem, proposals: Sequence[str], shots: int = 2) -> list[dict[str, str]]:
    """The MoA aggregator's prompt (Wang et al. 2024, aggregate-and-synthesise): the proposers'
    answers, to be critically combined into one."""
    shown = "\n\n".join(f"{i + 1}. \"{t.strip()}\"" for i, t in enumerate(proposals))
    return with_question(problem, shots, (
        f"{problem.question}\n\nResponses from several models:\n{shown}\n\n"
        f"Some of them may be wrong. Critically evaluate them and write one correct answer. {finish_instruction(problem)}"))


def run_label(config: MoAConfig, names: Sequence[str]) -> str:
    """A run's one-line description (``agora run moa``'s first line): who proposes and who aggregates."""
    return f"{len(config.proposers or names)} proposers, aggregator {config.aggregator or names[0]}"
