"""The model layer: the pool, its members' contract, sampling parameters and the backends
(embedded llama.cpp, OpenAI-compatible servers, vLLM in process, transformers), below the
protocol players of :mod:`agora.agents`. No protocol logic and no LangGraph here.

Public surface::

    from agora.models import ModelPool, SamplingParams, Sample, default_pool, load_pool

and :func:`safe_file_name` (a model, run or thread name as one file name inside a folder).
"""

from agora.models._files import safe_file_name

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
    "safe_file_name",
]
