"""The players: principal, proposer, judge, router, EXP3 leader,
reputation, simulated user. Plain classes and functions, no LangGraph, so each piece is testable
on its own and usable outside a graph. The models they play with live in :mod:`agora.models`.

Public surface::

    from agora.agents import delegation  # ALIGN proposer/principal rules
    from agora.models import ModelPool, SamplingParams  # the pool
"""
