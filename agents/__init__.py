"""The players: principal, proposer, judge, router, EXP3 leader,
reputation, simulated user. Plain classes and functions, no LangGraph, so each piece is testable
on its own and usable outside a graph.

Public surface::

    from agora.agents import ModelPool, SamplingParams, Sample, default_pool, load_pool
    from agora.agents import delegation  # ALIGN proposer/principal rules
"""

from agora.models.pool import (
    ModelCallError,
    ModelPool,
    ModelSpec,
    PoolConfigError,
    PoolMember,
    Sample,
    SamplingParams,
    default_pool,
    load_pool,
)

__all__ = [
    "ModelCallError",
    "ModelPool",
    "ModelSpec",
    "PoolConfigError",
    "PoolMember",
    "Sample",
    "SamplingParams",
    "default_pool",
    "load_pool",
]
