"""SLM-MUX: per question, the member whose own samples agree most answers (no LangGraph; the graph
is :mod:`agora.graphs.slm_mux`).

Source: Wang, Wan, Kang, Chen, Xie, Krishna, Janapa Reddi, Du, "SLM-MUX: Orchestrating Small
Language Models for Reasoning", arXiv 2510.05077 (ICLR 2026), the SLM-MUX architecture:

1. *Independent generation*: each of the ``n`` members ``M_i`` draws ``k`` samples at temperature
   ``T > 0``, ``Y_i = {y_i^(1) .. y_i^(k)}``; no member sees another's output.
2. *Confidence estimation*: ``f_i(y) = (1/k) Σ_j 1[y_i^(j) = y]``, the member's plurality answer
   ``y_i* = argmax_y f_i(y)`` and its confidence ``s_i = f_i(y_i*)`` (self-consistency).
3. *Selection*: the member with the highest ``s_i`` answers ``y_i*``; a tie on ``s_i`` goes to the
   member with the highest accuracy measured on validation questions (the paper's tie-breaker;
   here: :mod:`agora.agents.reliability`, accuracy on dev questions), then to the earlier member.

A sample with no extractable answer counts in ``k`` (it lowers the member's confidence) and is
never an answer; a member with no answer at all has ``s_i = 0``. A member without a measured
accuracy loses an accuracy tie to one with any measured accuracy.

The paper's model-selection search (which members to pool: union accuracy minus a contradiction
penalty) is measured, not run per question: ``benchmarks/member_table.py`` prints each pair's oracle
(union) accuracy and disagreement.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Annotated, Any, Sequence

from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents._checks import EachOnce, MaxTokens, Samples, Seed, Shots, Temperature, TopP
from agora.agents.delegation import plurality
from agora.agents.reliability import DevAccuracy, dev_accuracy_pairs
from agora.agents.seeds import SeedNode
from agora.models.validation import Convert, Name, Names, settings

#: The members' seeds: member ``i``'s ``k`` samples are one request seeded
#: ``call_seed(seed, question, MEMBER, agent=i)``. The offset keeps them apart from every node COMED
#: runs on the same question when it embeds SLM-MUX as a dense baseline (anchor 0, probe 101, peers
#: 201+, MoA 301+, debate 500+, council 601-701).
MEMBER = SeedNode(811, agent_stride=1000)


@settings
class SLMMuxConfig:
    """Settings of one SLM-MUX run (defaults: the paper's ``k = 3`` samples per member, sized for
    CPU pools otherwise; ``docs/protocols.md`` §6).

    Raises:
        ValueError: a bad value; one line naming the field and the value (:mod:`agora.models.validation`).
    """

    models: Annotated[tuple[str, ...], Names,
                      EachOnce("SLMMuxConfig", "models", "each member is sampled once and its samples counted once")] = ()
    """The members, in order (the last tie-breaker); empty = every pool member."""
    k_samples: Samples = 3
    """Samples each member draws (k): its confidence is the share of them on its plurality answer."""
    dev_accuracy: Annotated[DevAccuracy, Convert(partial(dev_accuracy_pairs, "SLMMuxConfig", "dev_accuracy"))] = ()
    """Each member's accuracy on dev questions, the confidence tie-breaker (``member=accuracy``
    entries, or a mapping); members not given take theirs from ``dev_run`` when it is set."""
    dev_run: Annotated[str | None, Name()] = None
    """A dev run in the trace DB ``dev_db`` whose samples give each member's accuracy (``None``: none read)."""
    dev_db: Annotated[str | None, Name()] = None
    """The trace DB holding ``dev_run`` (a SQLite file or a postgresql:// URL); ``None``: ``agora.db``."""
    temperature: Temperature = 0.7
    """Sampling temperature of every sample (the paper samples at T > 0)."""
    top_p: TopP = 0.95
    """Nucleus sampling: the probability mass sampled from."""
    max_tokens: MaxTokens = 256
    """Generated-token cap of every sample."""
    shots: Shots = 2
    """Worked exemplars in each prompt."""
    seed: Seed = 0
    """Per-question seeds derive from it and the question id."""


def check_pool(config: SLMMuxConfig, names: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the field when a configured member is not in the pool."""
    for name in config.models:
        if name not in names:
            raise InputError(f"SLMMuxConfig.models: {name!r} is not in the pool ({', '.join(names)})")
    unknown = [name for name, _ in config.dev_accuracy if name not in (config.models or names)]
    if unknown:
        raise InputError(f"SLMMuxConfig.dev_accuracy: {', '.join(map(repr, unknown))} not among the members "
                         f"({', '.join(config.models or names)})")


def members(config: SLMMuxConfig, names: Sequence[str]) -> list[str]:
    """The members in order: ``config.models``, else every pool member."""
    check_pool(config, names)
    return list(config.models or names)


def run_label(config: SLMMuxConfig, names: Sequence[str]) -> str:
    """A run's one-line description (``agora run slm-mux``'s first line)."""
    return f"{len(config.models or names)} members × {config.k_samples} samples"


class MemberVote(TypedDict):
    """One member's own samples, as the selection reads them."""

    member: int
    """The member's position (the last tie-breaker)."""
    model: str
    answers: list[str | None]
    """Its k samples' answers, in sample order (``None``: no answer extracted)."""


class MemberConfidence(TypedDict):
    """A member's plurality answer and its self-consistency confidence."""

    member: int
    model: str
    answer: str | None
    """``y_i*``, the member's plurality answer (``None`` when none of its samples has one)."""
    confidence: float
    """``s_i = f_i(y_i*)``: the share of its k samples on ``y_i*``."""
    dev_accuracy: float | None
    """Its accuracy on dev questions (``None``: not measured)."""


class MuxSelection(TypedDict):
    """The selected member and its answer."""

    member: int
    """Position of the selected member (-1: no member)."""
    model: str | None
    answer: str | None
    confidence: float
    tie: bool
    """Whether another member had the same confidence (the dev accuracy, then the order, decided)."""


def member_confidence(vote: MemberVote, dev_accuracy: Mapping[str, float] | None = None) -> MemberConfidence:
    """``y_i* = argmax_y f_i(y)`` and ``s_i = f_i(y_i*)`` with ``f_i(y) = (1/k) Σ_j 1[y_i^(j) = y]``
    (SLM-MUX's confidence estimation; ties between answers go to the one sampled first).

    >>> member_confidence({"member": 0, "model": "a", "answers": ["7", "8", "7", None]})["confidence"]
    0.5
    """
    answer, share = plurality(vote["answers"])
    return MemberConfidence(member=vote["member"], model=vote["model"], answer=answer, confidence=share,
                            dev_accuracy=(dev_accuracy or {}).get(vote["model"]))


def mux_select(confidences: Sequence[MemberConfidence]) -> MuxSelection:
    """SLM-MUX's selection: the member with the highest confidence ``s_i``; a tie goes to the higher
    accuracy on dev questions (a measured one before an unmeasured one), then to the earlier member.
    A member whose samples have no answer is chosen only when no member has one (answer ``None``).

    >>> mux_select([{"member": 0, "model": "a", "answer": "A", "confidence": 2/3, "dev_accuracy": 0.4},
    ...             {"member": 1, "model": "b", "answer": "B", "confidence": 2/3, "dev_accuracy": 0.6}])["model"]
    'b'
    """
    if not confidences:
        return MuxSelection(member=-1, model=None, answer=None, confidence=0.0, tie=False)
    answered = [c for c in confidences if c["answer"] is not None] or list(confidences)

    def rank(c: MemberConfidence) -> tuple[Any, ...]:
        acc = c["dev_accuracy"]
        return (-c["confidence"], acc is None, -(acc or 0.0), c["member"])

    best = min(answered, key=rank)
    tie = sum(1 for c in answered if c["confidence"] == best["confidence"]) > 1
    return MuxSelection(member=best["member"], model=best["model"], answer=best["answer"],
                        confidence=best["confidence"], tie=tie)


def top_member(confidences: Sequence[MemberConfidence]) -> MemberConfidence | None:
    """The member with the highest accuracy on dev questions (the first member when none is
    measured): the static choice SLM-MUX's per-question selection is compared with."""
    if not confidences:
        return None
    return min(confidences, key=lambda c: (c["dev_accuracy"] is None, -(c["dev_accuracy"] or 0.0), c["member"]))


def vote_all(votes: Sequence[MemberVote]) -> tuple[str | None, float]:
    """Self-consistency over every member's samples pooled (member order, then sample order): the
    plurality vote SLM-MUX is compared with on the same ``n·k`` samples."""
    ordered = sorted(votes, key=lambda v: v["member"])
    return plurality([a for v in ordered for a in v["answers"]])
