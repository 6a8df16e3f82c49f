"""A CUPID session's records: a prompt with its id (:func:`prompt_items` reads a graph input's
prompts), a model's answer kept for the duels (:class:`Generation`), the pair of a round and its
judged record (:class:`Duel`, :class:`DuelRecord`, :func:`judged_duels`), and the ranking and
recommendation a session ends with. Shapes and pure functions; the selection graph is
:mod:`agora.graphs.selection`, the Bradley–Terry belief :mod:`agora.agents.cupid`.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents.cupid import Choice

StopReason = Literal["rounds", "budget", "confident"]
"""Why a session stopped: its rounds, a budget, or ``P(best) ≥ 1 − δ``."""


class PromptItem(TypedDict):
    """A prompt with an id of its own."""

    id: str
    """Id under which the prompt's answers are kept and traced."""
    text: str
    """What both models are asked."""


class Generation(TypedDict):
    """One model's answer to one prompt (kept in state: never generated or charged twice)."""

    model: str
    prompt_id: str
    text: str
    ok: bool
    """False when the model failed after its retries (``text`` is then empty)."""
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cost: float
    """Price of the answer, in the unit of ``cost_per_1k_tokens``."""
    call_id: str


class Duel(TypedDict):
    """The pair of one round and how it is shown."""

    round: int
    """1-based round number."""
    prompt_id: str
    prompt: str
    a: str
    """The UCB leader (first model of the pair rule)."""
    b: str
    """Its challenger."""
    shown: list[str]
    """``[model shown as A, model shown as B]`` (random order, hidden from the user)."""


class DuelRecord(Duel):
    """A judged duel."""

    choice: Choice
    winner: str | None
    """Preferred model; ``None`` for a tie."""
    y: float
    """1 if ``a`` won, 0 if ``b`` won, 0.5 for a tie."""
    p: float
    """Belief's ``P(a ≻ b)`` before the update."""


class RankedModel(TypedDict):
    model: str
    p_best: float
    utility: float
    """Posterior mean utility ``μᵀx`` (normalised features)."""
    duels: int
    wins: float
    """Duels won (a tie counts one half)."""


class Recommendation(TypedDict):
    model: str
    p_best: float
    """Posterior probability (Monte Carlo) that the recommended model is the user's best."""
    rounds: int
    spent_cost: float
    spent_time_s: float
    stop_reason: StopReason
    ranking: list[RankedModel]


def prompt_items(prompts: Any) -> list[PromptItem]:
    """A graph input's ``prompts`` as :class:`PromptItem` (a string gets the id ``p<i>``, its index).

    Raises:
        ValueError: not a non-empty list, or an item that is neither a non-empty string nor ``{id, text}``.
    """
    if not isinstance(prompts, list) or not prompts:
        raise InputError("graph input needs 'prompts': a non-empty list of strings or {id, text}")
    items = []
    for i, p in enumerate(prompts):
        if isinstance(p, str) and p.strip():
            items.append(PromptItem(id=f"p{i}", text=p.strip()))
        elif isinstance(p, dict) and isinstance(p.get("text"), str) and p["text"].strip():
            items.append(PromptItem(id=str(p.get("id") or f"p{i}"), text=p["text"].strip()))
        else:
            raise InputError(f"prompts[{i}]: expected a non-empty string or {{id, text}}, got {p!r}")
    return items


def judged_duels(values: Mapping[str, Any]) -> list[DuelRecord]:
    """The judged duels of a session's state, by round: ``judged`` (and ``history``, where a session
    checkpointed before ``judged`` existed kept them; each round once)."""
    by_round = {d["round"]: d for d in [*(values.get("history") or []), *(values.get("judged") or [])]}
    return [by_round[r] for r in sorted(by_round)]
