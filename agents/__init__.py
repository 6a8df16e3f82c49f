"""The players: principal, proposer, judge, router, EXP3 leader,
reputation, simulated user. Plain classes and functions, no LangGraph, so each piece is testable
on its own and usable outside a graph.

Public surface::

    from agora.agents import delegation  # ALIGN proposer/principal rules
    from agora.agents import ModelPool, SamplingParams  # kept: the pool now lives in agora.models
"""

from agora.models import *  # noqa: F401,F403 - the pool's public names, from their home in agora.models
from agora.models import __all__  # noqa: F401
