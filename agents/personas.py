"""Persona variants of pool members: the same weights under another system prompt, named
``<base>-<persona>`` and in the base model's family (so family labels alone cannot tell them apart;
:mod:`agora.agents.panel`). Used by ``agora converse``, duels and CUPID's arms.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from agora.models.pool import ModelSpec, builtin_pool_specs

CAUTIOUS = ("You are a careful assistant. Say how confident you are, mention what you are unsure "
            "about, and qualify any claim you cannot check.")
"""System prompt of the ``cautious`` persona variant of the embedded models."""


def persona_specs(bases: Sequence[ModelSpec], personas: Mapping[str, str]) -> list[ModelSpec]:
    """Persona variants: each base spec under each persona's system prompt.

    A variant is named ``<base>-<persona>``, keeps the base's weights and settings, has the persona
    prompt appended to any system prompt the base had, and the base's ``family`` (or the base's
    name when it has none).
    """
    out = []
    for base in bases:
        for persona, prompt in personas.items():
            system = f"{base.system_prompt}\n\n{prompt}" if base.system_prompt else prompt
            out.append(replace(base, name=f"{base.name}-{persona}", system_prompt=system,
                               family=base.family or base.name))
    return out


def converse_default_specs(pool: str = "default") -> list[ModelSpec]:
    """A built-in pool's models (``default``: the two Qwen models; ``tiny``: SmolLM2 and Gemma) plus
    a ``cautious`` persona variant of each (4 members)."""
    base = builtin_pool_specs(pool)
    return list(base) + persona_specs(base, {"cautious": CAUTIOUS})
