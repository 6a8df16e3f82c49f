"""The sampling fields most protocol settings share, as field types of :func:`agora.models.validation.settings`
classes: a temperature in ``[0, MAX_POOL_TEMPERATURE]`` (a pool member's own limit), ``top_p`` in
``(0, 1]``, a token cap an integer >= 1, ``shots`` an integer >= 0 and a seed an integer. A bad value is
one ``ValueError`` naming the class, the field and the value::

    MoAConfig.max_tokens must be an integer >= 1, got True
"""

from __future__ import annotations

from typing import Annotated

from agora.models.registry import MAX_POOL_TEMPERATURE
from agora.models.validation import Count, Number, SeedInt

__all__ = ["MaxTokens", "Seed", "Shots", "Temperature", "TopP"]

#: A sampling temperature in ``[0, MAX_POOL_TEMPERATURE]``.
Temperature = Annotated[float, Number(0.0, MAX_POOL_TEMPERATURE)]
#: Nucleus sampling's probability mass, in ``(0, 1]``.
TopP = Annotated[float, Number(0.0, 1.0, low_open=True)]
#: A generated-token cap, an integer >= 1.
MaxTokens = Annotated[int, Count(1)]
#: Worked exemplars in a prompt, an integer >= 0.
Shots = Annotated[int, Count(0)]
#: A base seed, an integer of any sign.
Seed = Annotated[int, SeedInt]
