"""The model layer: the pool, its members' contract, sampling parameters and the backends
(embedded llama.cpp, OpenAI-compatible servers, vLLM in process, transformers), below the
protocol players of :mod:`agora.agents`. No protocol logic and no LangGraph here.

Public surface::

    from agora.models import ModelPool, SamplingParams, Sample, default_pool, load_pool
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
