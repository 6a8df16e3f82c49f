"""Every sampling seed Agora draws, derived in one place from (base seed, item, node, agent, step).

A seed is :func:`item_seed` (the run's base seed mixed with a CRC of the question or item id, so a
question keeps its seed whatever its position or run) plus the node's offset from :data:`NODES`,
plus a stride per agent and per step (a debate round, a conversation turn). The offsets keep the
streams of different nodes apart for one question, so, for example, COMED's MoA baseline and
``agora run moa`` draw the same proposals (same node, same seed) while COMED's anchor and peer
never share a sample. :func:`sampling` builds the :class:`~agora.models.pool.SamplingParams` of a
call from a protocol's settings (their ``temperature``, ``top_p``, ``max_tokens``).

Several samples of one request (``n > 1``) come from its one seed: each backend derives sample
``i``'s stream from it (llama.cpp: ``seed + i``, :class:`~agora.models.pool.SamplingParams`).

    >>> call_seed(0, "q1", "moa.proposer", agent=1) == item_seed(0, "q1") + 301 + 1
    True
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from agora.models.pool import SamplingParams

SEED_MODULUS = 2**31 - 1


def item_seed(base: int, item_id: str) -> int:
    """``(base · 1 000 003 + crc32(item_id)) mod (2³¹ − 1)``: an item's seed, reproducible across runs."""
    return (base * 1_000_003 + zlib.crc32(item_id.encode())) % SEED_MODULUS


@dataclass(frozen=True, slots=True)
class SeedNode:
    """Where a node's seeds start from the item's seed, and how far apart its agents and steps are."""

    offset: int = 0
    agent_stride: int = 0
    step_stride: int = 0


#: The nodes that sample, by ``"<protocol>.<node>"``. Changing a value changes every later run's
#: samples: add nodes, do not renumber them.
NODES: dict[str, SeedNode] = {
    "align.agent": SeedNode(0, agent_stride=1000),           # agent a's k candidates: one request
    "comed.anchor": SeedNode(0),                              # the anchor's N samples: one request
    "comed.probe": SeedNode(101),                             # the peer probe (greedy)
    "comed.peer": SeedNode(201, agent_stride=1),              # escalation peer i
    "moa.proposer": SeedNode(301, agent_stride=1),            # proposer i
    "moa.aggregator": SeedNode(401),
    "debate.round": SeedNode(500, agent_stride=1, step_stride=50),  # round r, the request's first agent
    "conversation.turn": SeedNode(0, step_stride=1),          # turn t
    "duel.respond": SeedNode(0, agent_stride=1),              # follower slot s (item: "<iteration>:<index>")
    "cupid.answer": SeedNode(0),                              # both answers of a CUPID round
    "align.principal": SeedNode(901),                         # ALIGN's model principal (DelegationConfig.principal)
}


def call_seed(base: int, item_id: str, node: str | SeedNode, agent: int = 0, step: int = 0) -> int:
    """The seed of one model request: ``item_seed(base, item_id) + offset + agent·agent_stride +
    step·step_stride`` of ``NODES[node]`` (or of ``node`` itself: a protocol outside Agora declares
    its own :class:`SeedNode` instead of editing ``NODES``).

    Raises:
        KeyError: an unknown node name (the message lists the known ones).
    """
    if isinstance(node, SeedNode):
        n = node
    else:
        try:
            n = NODES[node]
        except KeyError:
            raise KeyError(f"unknown seed node {node!r}; known: {', '.join(NODES)}") from None
    return item_seed(base, item_id) + n.offset + agent * n.agent_stride + step * n.step_stride


def sampling(settings: Any, *, seed: int, n: int = 1, **override: Any) -> SamplingParams:
    """The request's :class:`SamplingParams` from a protocol's settings: their ``temperature``,
    ``max_tokens`` and ``top_p`` (SamplingParams' default when they have none); ``override``
    replaces any field (``temperature=0.0, top_p=1.0`` for a greedy probe)."""
    fields = {"temperature": settings.temperature, "max_tokens": settings.max_tokens}
    if hasattr(settings, "top_p"):
        fields["top_p"] = settings.top_p
    fields.update(override)
    return SamplingParams(n=n, seed=seed, **fields)
