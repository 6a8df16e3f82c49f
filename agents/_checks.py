"""The sampling fields most protocol settings share, as field types of :func:`agora.models.validation.settings`
classes: a temperature in ``[0, MAX_POOL_TEMPERATURE]`` (a pool member's own limit), ``top_p`` in
``(0, 1]``, a token cap an integer >= 1, ``shots`` an integer >= 0 and a seed an integer. A bad value is
one ``ValueError`` naming the class, the field and the value::

    MoAConfig.max_tokens must be an integer >= 1, got True
"""

from __future__ import annotations

from typing import Annotated

from agora.models.contract import MAX_TOKENS_LIMIT
from agora.models.registry import MAX_POOL_TEMPERATURE
from agora.models.validation import Check, Count, Number, SeedInt

__all__ = ["MAX_AGENTS", "MAX_SAMPLES", "Agents", "MaxTokens", "Samples", "Seed", "Shots", "Temperature", "TopP"]

#: A sampling temperature in ``[0, MAX_POOL_TEMPERATURE]``.
Temperature = Annotated[float, Number(0.0, MAX_POOL_TEMPERATURE)]
#: Nucleus sampling's probability mass, in ``(0, 1]``.
TopP = Annotated[float, Number(0.0, 1.0, low_open=True)]
#: A generated-token cap, an integer >= 1 and at most ``MAX_TOKENS_LIMIT``.
MaxTokens = Annotated[int, Count(1), Check(lambda v: v <= MAX_TOKENS_LIMIT,
                                           f"at most {MAX_TOKENS_LIMIT} (beyond any model's context)")]
#: Worked exemplars in a prompt, an integer >= 0.
Shots = Annotated[int, Count(0)]
#: Most samples one request of a protocol draws (k, N): a self-consistency vote levels off long
#: before (Wang et al. 2023 stop at 40); a larger value (a typo, ``k_samples = 100000`` in a
#: context) would only run for hours.
MAX_SAMPLES = 256
#: Most agents one question fans out to (ALIGN's n, each a parallel branch of the graph): a value
#: far beyond (``n_agents = 1000000`` from Studio's form) builds that many branches and never ends.
MAX_AGENTS = 64
#: Samples of one request, an integer >= 1 and at most ``MAX_SAMPLES``.
Samples = Annotated[int, Count(1), Check(lambda v: v <= MAX_SAMPLES,
                                         f"at most {MAX_SAMPLES} (each is a model sample, every question)")]
#: Agents of one question, an integer >= 1 and at most ``MAX_AGENTS``.
Agents = Annotated[int, Count(1), Check(lambda v: v <= MAX_AGENTS,
                                        f"at most {MAX_AGENTS} (each agent is a branch of every question)")]
#: A base seed, an integer of any sign.
Seed = Annotated[int, SeedInt]
