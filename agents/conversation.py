"""The two-model conversation's settings and prompts (protocols.md §5; its graph is
:mod:`agora.graphs.conversation`): who speaks, for how many turns, and what each speaker is shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import model_validator

from agora.tasks.errors import InputError
from agora.agents._checks import MaxTokens, Seed, Shots, Temperature, TopP
from agora.agents.prompts import solver_messages
from agora.models.pool import ModelPool
from agora.models.validation import Count, Name, settings
from agora.tasks.problem import Problem

MAX_TURNS = 100
"""The most turns one conversation takes: every turn shows the speaker the whole conversation so far, so
its prompt (and the checkpoint of each step) grows with every turn; ``--turns 1e30`` would otherwise run
until the disk is full."""

REPLY_PROMPT = ("Another assistant answered:\n\n{reply}\n\nReply to it: say whether you agree and why, "
                "correct any mistake, and give your own answer.")
"""How a speaker is shown its partner's turn."""


@settings
class ConversationConfig:
    """Settings of one two-model conversation."""

    speaker_a: Annotated[str | None, Name()] = None
    """Model that answers first; ``None`` = the pool's first member."""
    speaker_b: Annotated[str | None, Name()] = None
    """Model that replies first; ``None`` = the first other member."""
    turns: Annotated[int, Count(2, MAX_TURNS)] = 3
    """Responses in all (A, B, A, ...); at least 2 so that someone replies, at most :data:`MAX_TURNS`."""
    max_tokens: MaxTokens = 128
    """Upper bound on generated tokens per turn."""
    temperature: Temperature = 0.7
    """Sampling temperature of every turn (0 = greedy); a pool member's own ``temperature`` overrides it."""
    top_p: TopP = 0.95
    """Nucleus sampling mass of every turn, in (0, 1]."""
    shots: Shots = 2
    """Worked exemplars in the solver prompt (math and multiple choice)."""
    seed: Seed = 0
    """Base seed; turn t of a question uses ``question_seed(seed, question_id) + t``."""

    @model_validator(mode="after")
    def _two_speakers(self) -> ConversationConfig:
        if self.speaker_a is not None and self.speaker_a == self.speaker_b:
            raise InputError(f"speaker_b must differ from speaker_a, both are {self.speaker_a!r}")
        return self

    def speakers(self, pool: ModelPool) -> tuple[str, str]:
        """``(A, B)`` resolved against ``pool``.

        Raises:
            ValueError: a named speaker is not in the pool, or the pool has one model.
        """
        for name in (self.speaker_a, self.speaker_b):
            if name is not None and name not in pool:
                raise InputError(f"ConversationConfig names {name!r}, which is not in the pool "
                                 f"({', '.join(pool.names)})")
        a = self.speaker_a or next((n for n in pool.names if n != self.speaker_b), None)
        b = self.speaker_b or next((n for n in pool.names if n != a), None)
        if a is None or b is None:
            raise InputError(f"a conversation needs two models; the pool has {', '.join(pool.names)}")
        return a, b


def conversation_messages(problem: Problem, shots: int, history: Sequence[Mapping[str, Any]],
                          speaker: str) -> list[dict[str, str]]:
    """What ``speaker`` sees: the solver prompt, its own turns (``{"speaker", "text"}`` each) as
    assistant messages and the other turns as :data:`REPLY_PROMPT` user messages; consecutive user
    messages are joined."""
    messages = solver_messages(problem, shots)
    for turn in history:
        if turn["speaker"] == speaker:
            messages.append({"role": "assistant", "content": turn["text"]})
        else:
            messages.append({"role": "user", "content": REPLY_PROMPT.format(reply=turn["text"].strip())})
    merged: list[dict[str, str]] = []
    for m in messages:
        if merged and m["role"] == "user" and merged[-1]["role"] == "user":
            merged[-1] = {"role": "user", "content": merged[-1]["content"] + "\n\n" + m["content"]}
        else:
            merged.append(m)
    return merged
