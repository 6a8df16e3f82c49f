"""A few-shot set of one's own (``recipe = { name = "fewshot", shots = [...] }``): the protocol's
worked exemplars replaced by the member's, a prompt variant (Dipper, arXiv 2412.15238)."""

from typing import Any

from pydantic import BaseModel, ConfigDict, StrictStr, field_validator

from agora.tasks.errors import InputError
from agora.models.recipes.registry import Recipe, plain_text


class Shot(BaseModel):
    """One worked exemplar: a question and its answer (ending ``The answer is ...``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    question: StrictStr
    answer: StrictStr

    @field_validator("question", "answer")
    @classmethod
    def _plain(cls, value: str) -> str:
        return plain_text(value)


class FewShot(Recipe):
    """Replaces the exemplar turns (user/assistant pairs between the system prompt and the last
    user turn) with :attr:`shots`."""

    name = "fewshot"
    summary = "the protocol's worked exemplars replaced by the member's own shots"

    shots: tuple[Shot, ...]
    """The exemplars, in order (``[{question = "...", answer = "... The answer is 4."}]``); may be empty."""

    @field_validator("shots")
    @classmethod
    def _answers_end(cls, value: tuple[Shot, ...]) -> tuple[Shot, ...]:
        for i, shot in enumerate(value):
            if not shot.question.strip() or not shot.answer.strip():
                raise InputError(f"shot {i}: question and answer must not be empty")
        return value

    def prepare(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        head = [m for m in messages[:1] if m.get("role") == "system"]
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
        if last is None:
            return messages
        shots = [turn for s in self.shots for turn in ({"role": "user", "content": s.question},
                                                        {"role": "assistant", "content": s.answer})]
        return [*head, *shots, *messages[last:]]


RECIPE = FewShot
