"""The sampling fields most protocol settings share, as field types of :func:`agora.models.validation.settings`
classes: a temperature in ``[0, MAX_POOL_TEMPERATURE]`` (a pool member's own limit), ``top_p`` in
``(0, 1]``, a token cap an integer >= 1, ``shots`` an integer >= 0 and a seed an integer (a
seed of numpy's generator an integer >= 0). A bad value is
one ``ValueError`` naming the class, the field and the value::

    MoAConfig.max_tokens must be an integer >= 1, got True
"""

from __future__ import annotations

from typing import Annotated, Any

from agora.models.contract import MAX_TOKENS_LIMIT
from agora.models.registry import MAX_POOL_TEMPERATURE
from agora.models.validation import Check, Convert, Count, Number, SeedInt
from agora.tasks.errors import InputError

__all__ = ["MAX_AGENTS", "MAX_SAMPLES", "Agents", "DrawSeed", "EachOnce", "MaxTokens", "Samples", "Seed", "Shots",
           "Temperature", "TopP"]

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
#: The seed of numpy's random generator (``np.random.default_rng``: duels' draws, CUPID's, a
#: bootstrap's), an integer >= 0: numpy refuses a negative one (``expected non-negative integer``)
#: when the first draw is made, after models were asked.
DrawSeed = Annotated[int, Count(0)]


def EachOnce(owner: str, field: str, why: str) -> Check:  # noqa: N802 - a marker
    """A list of pool members (after ``Names``) that names each member once, kept as given; a
    repeated one is refused in one line naming it, in the order first given::

        MoAConfig.proposers: 'a' named more than once (each proposer answers once and its answer is read once)

    ``owner``/``field``: the settings class and field the message names; ``why``: what a repeat
    would do wrong (the CLI refuses it sooner, naming the option: ``agora.cli._run.member_names``).

    Raises (when a value is checked):
        InputError: a member named more than once.
    """
    def once(names: Any) -> Any:
        given = list(names)
        twice = [n for n in dict.fromkeys(given) if given.count(n) > 1]
        if twice:
            raise InputError(f"{owner}.{field}: {', '.join(map(repr, twice))} named more than once ({why})")
        return names

    return Convert(once)
