"""A persona (``recipe = { name = "persona", persona = "..." }``): the same weights asked as someone
else, a prompt variant that makes a different member (Dipper, arXiv 2412.15238, draws a panel's
diversity from prompts on one model)."""

from typing import Any

from pydantic import StrictStr, field_validator

from agora.tasks.errors import InputError
from agora.models.recipes.registry import Recipe, plain_text


class Persona(Recipe):
    """Puts :attr:`persona` before the protocol's system prompt (or as the system prompt when the
    protocol sends none)."""

    name = "persona"
    summary = "a persona put before the protocol's system prompt"

    persona: StrictStr
    """Who the member is, e.g. ``"You are a meticulous accountant who checks every sum twice."``"""

    @field_validator("persona")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise InputError("must not be empty")
        return plain_text(value)

    def prepare(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if messages and messages[0].get("role") == "system":
            return [{"role": "system", "content": f"{self.persona}\n\n{messages[0]['content']}"}, *messages[1:]]
        return [{"role": "system", "content": self.persona}, *messages]


RECIPE = Persona
