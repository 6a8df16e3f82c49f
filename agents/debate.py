"""Multi-agent debate: settings, who plays which agent, and the prompt of a later round (no
LangGraph; the graph is :mod:`agora.graphs.debate`).

Source: Du et al., "Improving Factuality and Reasoning in Language Models through Multiagent Debate",
arXiv 2305.14325: agents answer independently, then for each later round read the other agents'
latest answers and answer again; the final answer is the plurality of the last round (3 agents ×
2 rounds in the paper's cheapest setting).
"""

from __future__ import annotations

from typing import Annotated, Sequence

from agora.tasks.errors import InputError
from agora.models.pool import MAX_POOL_TEMPERATURE
from agora.agents._checks import MaxTokens, Seed, Shots, TopP
from agora.agents.prompts import finish_instruction, with_question
from agora.models.validation import Check, Count, Names, Number, settings
from agora.tasks.problem import Problem

#: Most agents and rounds of one debate: Du et al. (2023) study up to 7 agents and 4 rounds (§3.3,
#: Fig. 10 and 11); every question costs ``agents × rounds`` model calls, so a value far beyond these
#: (``rounds = 100000`` in a ``--config`` file) would run for ever rather than debate more.
MAX_DEBATE_AGENTS = 16
MAX_DEBATE_ROUNDS = 10

# Seeds: node "debate.round" of agora.agents.seeds.NODES: round r starts 50·r after the node's
# offset; in the first round the j-th distinct model's request adds 10·j, in later rounds agent i
# adds i (as COMED's baseline always did).


@settings
class DebateConfig:
    """Settings of one debate (defaults from Du et al.'s cheapest setting, sized for CPU pools).

    Raises:
        ValueError: a bad value (a wrong type, a bool, NaN or inf, out of range); one line naming the
            class, the field and the value (:mod:`agora.models.validation`).
    """

    agents: Annotated[int, Count(1), Check(lambda v: v <= MAX_DEBATE_AGENTS, f"at most {MAX_DEBATE_AGENTS} (each question costs agents × rounds model calls)")] = 3
    """Debate agents (1 to 16); agent i plays pool model i mod |pool| (or ``models[i mod len(models)]``)."""
    rounds: Annotated[int, Count(1), Check(lambda v: v <= MAX_DEBATE_ROUNDS, f"at most {MAX_DEBATE_ROUNDS} (each question costs agents × rounds model calls)")] = 2
    """Rounds including the first, independent one (1 to 10)."""
    models: Annotated[tuple[str, ...], Names] = ()
    """Models the agents play, in turn; empty = the pool's models in pool order."""
    temperature: Annotated[float, Number(), Number(0, MAX_POOL_TEMPERATURE, expected=f"in [0, {MAX_POOL_TEMPERATURE}]")] = 0.7
    """Sampling temperature of every answer (at most 2, as a pool entry's)."""
    top_p: TopP = 0.95
    """Nucleus sampling: the probability mass sampled from."""
    max_tokens: MaxTokens = 128
    """Generated-token cap of every answer."""
    shots: Shots = 2
    """Worked exemplars in each prompt."""
    seed: Seed = 0
    """Per-question seeds derive from it and the question id."""


def agent_models(config: DebateConfig, pool_names: Sequence[str]) -> list[str]:
    """The model each agent plays: agent i plays ``models[i mod len(models)]`` (default: the pool's).

    >>> agent_models(DebateConfig(agents=3), ["a", "b"])
    ['a', 'b', 'a']

    Raises:
        ValueError: a configured model is not in the pool (the message names it).
    """
    models = list(config.models) or list(pool_names)
    for name in models:
        if name not in pool_names:
            raise InputError(f"DebateConfig.models: {name!r} is not in the pool ({', '.join(pool_names)})")
    return [models[i % len(models)] for i in range(config.agents)]


def debate_messages(problem: Problem, others: Sequence[str], shots: int = 2) -> list[dict[str, str]]:
    """A debate round after the first (Du et al. 2023, §2): the other agents' latest answers, then
    an updated answer."""
    shown = "\n\n".join(f"Agent {i + 1}: \"{t.strip()}\"" for i, t in enumerate(others))
    return with_question(problem, shots, (
        f"{problem.question}\n\nThese are the answers of other agents:\n{shown}\n\n"
        f"Use their reasoning as additional advice and give your updated answer. {finish_instruction(problem)}"))


def run_label(config: DebateConfig, names: Sequence[str]) -> str:
    """A run's one-line description (``agora run debate``'s first line): the agents (their models) and rounds."""
    return f"{config.agents} agents ({', '.join(agent_models(config, names))}) × {config.rounds} rounds"
