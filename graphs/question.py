"""A question as it enters a protocol graph: the input fields every per-question protocol takes,
the problem they describe, and the bench's shared candidate samples that may come with it (not public).
"""

from __future__ import annotations

import math
import sys
import unicodedata
import zlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, NotRequired, get_args

from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents.seeds import item_seed
from agora.models.studio_schema import studio_schema
from agora.models.pool import Sample
from agora.tasks.loaders import LETTERS, MAX_LINE_BYTES, UNSTORABLE, unstorable
from agora.tasks.problem import AnswerKind, Problem


class ProblemState(TypedDict, total=False):
    """A problem as it travels in graph state."""

    question_id: str
    question: str
    kind: AnswerKind
    n_choices: int


@studio_schema()
class SharedCandidate(TypedDict):
    """One sample of a question's **shared candidate pool**: drawn once per question and model by
    ``agora bench`` (node ``candidates``, role ``candidate``, the protocol-neutral solver prompt
    :func:`agora.agents.prompts.solver_messages`) and handed to every protocol that starts from
    independent samples (ALIGN's agents, COMED's anchor, MoA's proposers, debate's first round).
    Its trace row is the draw's own ``model_calls`` row (``call_id``): a protocol that takes it
    writes no new row and counts its cost as *shared*, not added (:class:`agora.traces.schema.Cost`)."""

    model: str
    """The pool member that generated it."""
    text: str
    """The generated text."""
    call_id: str
    """The ``model_calls`` row of this sample (in the bench's candidates run)."""
    sample_index: int
    """0-based position among the model's k samples for this question."""
    seed: int | None
    """The seed of the request that drew it (samples of one request share it)."""
    prompt_tokens: int
    """Tokens of the prompt it was generated from."""
    completion_tokens: int
    """Tokens it generated."""
    latency_s: float
    """Its share of the request's wall time, in seconds."""
    finish_reason: str | None
    """Why generation stopped (``stop``, ``length``), as the backend says."""
    answer: NotRequired[str | None]
    """The extracted answer, when the drawer extracted it (``docs/scoring.md``)."""
    how: NotRequired[str | None]
    """How the answer was found (``marker``, ``boxed``, ``####``, ``fallback``)."""


def shared_candidate(sample: Sample, index: int, answer: str | None = None, how: str | None = None) -> SharedCandidate:
    """A drawn :class:`~agora.models.pool.Sample` as a :class:`SharedCandidate` (``index``: its
    position among its model's samples for the question)."""
    return SharedCandidate(model=sample.model, text=sample.text, call_id=sample.call_id, sample_index=index,
                           seed=sample.seed, prompt_tokens=sample.prompt_tokens,
                           completion_tokens=sample.completion_tokens, latency_s=sample.latency_s,
                           finish_reason=sample.finish_reason, answer=answer, how=how)


def take_shared(state: Mapping[str, Any], model: str, k: int, start: int = 0) -> list[Sample] | None:
    """Samples ``start .. start + k - 1`` of ``model`` from the state's ``shared_candidates``
    (model → its samples for this question), as :class:`~agora.models.pool.Sample` objects with
    the shared rows' ``call_id`` (so the trace rows are the shared ones, not new ones); ``None``
    when the state has no shared pool, none for ``model``, or fewer than ``start + k`` samples:
    the node then draws as it would without a bench.

    ``start`` lets two agents that play the same model take disjoint shares (ALIGN agent ``i``
    with the model's ``j``-th share takes ``start = j·k``)."""
    pool = state.get("shared_candidates") or {}
    mine = sorted(pool.get(model) or [], key=lambda c: c["sample_index"])
    if k < 1 or len(mine) < start + k:
        return None
    return [Sample(text=c["text"], model=c["model"], prompt_tokens=c.get("prompt_tokens") or 0,
                   completion_tokens=c.get("completion_tokens") or 0, latency_s=c.get("latency_s") or 0.0,
                   finish_reason=c.get("finish_reason"), call_id=c["call_id"], seed=c.get("seed"))
            for c in mine[start:start + k]]


@studio_schema()
class QuestionFields(TypedDict):
    """The question itself, as every per-question protocol graph takes it (the conversation)."""

    question: str
    """The problem text (for multiple choice, with lettered options)."""
    question_id: NotRequired[str]
    """Id under which the question's calls are traced (default: ``q-`` and a CRC-32 of the text)."""
    kind: NotRequired[AnswerKind]
    """``math`` (default), ``mc`` or ``open``: how answers are extracted and compared."""
    n_choices: NotRequired[int]
    """Number of lettered options of a ``mc`` question, 2 to 10 (default 4: answers are read among A-D)."""


@studio_schema()
class QuestionInput(QuestionFields):
    """What a caller passes to a per-question protocol graph (ALIGN, COMED, MoA, debate, the council).

    And ``gold``, the reference answer (:data:`GOLD_FIELD`: offered in the JSON schema, so Studio's
    form has it): accepted and never a state channel, so no node, prompt or state sees it;
    ``invoke`` / ``ainvoke`` / ``stream`` score the returned ``methods`` against it on the way out,
    after a pause too (:mod:`agora.graphs.scoring`), and the runner scores from the problem."""

    shared_candidates: NotRequired[dict[str, list[SharedCandidate]]]
    """Model → its samples of this question drawn once for every protocol (``agora bench``); the
    first answers are taken from them instead of drawn (:func:`take_shared`). Absent: drawn."""


GOLD_FIELD: dict[str, Any] = {
    "anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Gold",
    "description": ("The reference answer, for scoring only: the returned methods' `correct` is set against it "
                    "(after a pause too, kept with the thread's input); never shown to a model, never in the "
                    "graph's state. Empty: the methods stay unscored."),
}
"""The ``gold`` input field as a per-question graph's JSON schema offers it: not a state channel
(``TypedDict`` key), so the graph holds none; :class:`agora.graphs.scoring.ScoredCompiledGraph`
reads it from the input."""

INTERNAL_INPUT = ("shared_candidates",)
"""Input keys the bench fills and a person does not: left out of Studio's form (still accepted)."""


def question_form(schema: dict[str, Any]) -> None:
    """A per-question input's JSON schema as Studio's form should offer it: ``gold`` described
    (:data:`GOLD_FIELD`), the bench's own keys (:data:`INTERNAL_INPUT`) left out, and the defaults
    the graph applies (``kind`` ``math``, ``n_choices`` 4) written as schema defaults."""
    props = schema.setdefault("properties", {})
    for key in INTERNAL_INPUT:
        props.pop(key, None)
    props["gold"] = dict(GOLD_FIELD)
    for key, default in (("kind", "math"), ("n_choices", 4)):
        if key in props:
            props[key].setdefault("default", default)


MATH_EXAMPLE = {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?", "kind": "math"}
"""The worked example each per-question graph's input schema shows (Studio fills its form with it)."""


def problem_input(problem: Problem) -> dict[str, Any]:
    """Graph input fields for a :class:`~agora.tasks.Problem`: no gold (graphs do not score; the
    runner does, :func:`agora.tasks.scoring.score_results`)."""
    return {"question_id": problem.id, "question": problem.question, "kind": problem.kind,
            "n_choices": problem.n_choices}


#: Longest ``question`` a graph input may hold, in characters: a task file's line holds at most
#: :data:`agora.tasks.loaders.MAX_LINE_BYTES` bytes, so every question it holds is taken.
MAX_QUESTION_CHARS = MAX_LINE_BYTES

#: Options of a multiple-choice input without ``n_choices``: the nodes read answers among A-D.
DEFAULT_CHOICES = 4

#: The answer kinds a graph input's ``kind`` may name (:data:`agora.tasks.problem.AnswerKind`).
_KINDS = get_args(AnswerKind)


def checked_input(inp: Any) -> Any:
    """A caller's input mapping checked before any model is asked: a ``question`` longer than
    :data:`MAX_QUESTION_CHARS`, a lone UTF-16 surrogate or a NUL
    in ``question`` (the JSONL loader's check: no UTF-8 text holds the one, a Postgres trace store
    cannot store the other), a ``kind`` other than math, mc, open, an ``n_choices`` that is not an
    integer in 0..10, a multiple-choice (``mc``) question of fewer than 2 options (``n_choices`` 0 or 1) or whose
    text ``gold`` is not one of its option letters (``F`` of 4 options, or of an input without ``n_choices``,
    whose answers are read among A-D: every answer would be scored wrong), and a ``question_id`` or
    ``gold`` that is neither text nor a finite number are refused; a number (``7``, ``0.5``, a
    ``Decimal`` in positional notation) becomes its text, and a blank ``question_id`` or ``gold`` (``''``, ``'  '``: a cleared form field) is left
    out, as not given (a blank gold would score every method wrong); spaces around a ``question_id``
    are dropped (``"q1 "`` prints as ``q1``: one id, as in the task files). Returns the mapping (a copy when a field was coerced); anything else (a resume's
    ``None`` or ``Command``) unchanged.

    Raises:
        ValueError: one line naming the field."""
    if not isinstance(inp, Mapping):
        return inp
    question = inp.get("question")
    if isinstance(question, str) and len(question) > MAX_QUESTION_CHARS:
        raise InputError(f"graph input field 'question' is {len(question):,} characters long; at most "
                         f"{MAX_QUESTION_CHARS:,} are taken (a task file's line holds no more)")
    if isinstance(question, str) and (bad := UNSTORABLE.search(question)):
        raise InputError(f"graph input field 'question': {unstorable(bad.group(0))}")
    kind = inp.get("kind")
    if kind is not None and kind not in _KINDS:
        raise InputError(f"graph input field 'kind' must be one of {', '.join(_KINDS)}, not {kind!r:.60}")
    n_choices = inp.get("n_choices")
    if n_choices is not None and (not isinstance(n_choices, int) or isinstance(n_choices, bool)
                                  or not 0 <= n_choices <= len(LETTERS)):
        raise InputError(f"graph input field 'n_choices' must be an integer in 0..{len(LETTERS)} (options A to "
                         f"{LETTERS[-1]}), not {n_choices!r:.60}")
    if kind == "mc":  # as a task file's: at least two options, the gold one of their letters
        if n_choices is not None and n_choices < 2:
            raise InputError("graph input field 'n_choices': a multiple-choice question has at least 2 options (A, B), "
                             f"not {n_choices}")
        letters = LETTERS[: n_choices or DEFAULT_CHOICES]  # the letters answers are read among
        gold = inp.get("gold")
        if isinstance(gold, (int, float, Decimal)) and not isinstance(gold, bool):
            gold = _number_text(gold)  # (a number is its text, below: 1 is no option letter either)
        if isinstance(gold, str) and gold.strip() and gold.strip().upper() not in tuple(letters):
            raise InputError(f"graph input field 'gold' of a multiple-choice question must be one of the option letters "
                             f"{letters[0]}-{letters[-1]}, not {inp.get('gold')!r:.60} (no answer could match it)")
    fixed: dict[str, Any] = {}
    for field in ("question_id", "gold"):
        value = inp.get(field)
        if value is None or isinstance(value, str):
            if isinstance(value, str) and (bad := UNSTORABLE.search(value)):
                raise InputError(f"graph input field {field!r}: {unstorable(bad.group(0))}")
            if isinstance(value, str) and not value.strip():
                fixed[field] = _DROPPED  # a cleared form field: none given
            elif field == "question_id" and isinstance(value, str) and value != value.strip():
                fixed[field] = value.strip()  # "q1 " prints as q1: one id, as in the task files
            continue
        if (isinstance(value, float) and not math.isfinite(value)
                or isinstance(value, Decimal) and not value.is_finite()):
            raise InputError(f"graph input field {field!r} must be a finite number or text, not {value!r}")
        if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
            fixed[field] = _number_text(value)
            continue
        raise InputError(f"graph input field {field!r} must be text or a number, "
                         f"not {type(value).__name__} {value!r:.60}")
    if not fixed:
        return inp
    return {k: v for k, v in {**inp, **fixed}.items() if v is not _DROPPED}


_DROPPED = object()


def _number_text(value: int | float | Decimal) -> str:
    """A number given as a graph input field, as text: an ``int`` or ``float`` as ``str`` writes it, a
    ``Decimal`` (a database's ``numeric`` column) in positional notation (``Decimal("1E+2")``: ``"100"``)."""
    return format(value, "f") if isinstance(value, Decimal) else str(value)


def check_question_id(qid: str) -> None:
    """Refuse a caller's ``question_id`` holding a control or invisible format character (a newline,
    U+202E, a zero-width space), as the task files' ids are refused: ids are printed in reports and
    typed back (``agora report question ID``). The trace recorder applies it to the ids it records.

    Raises:
        InputError: one line naming the field, the id and the character."""
    for at, ch in enumerate(qid):
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise InputError(f"graph input field 'question_id': {qid!r:.60} holds the control or invisible character "
                             f"{ch!r} at position {at}; ids are printed and typed, so use visible characters")


def as_problem(state: dict[str, Any]) -> Problem:
    """The problem described by a graph state's input fields. Its ``gold`` is the mapping's
    ``gold`` if it has one (a caller's input, as the trace recorder reads it); a graph's state has
    none, so inside a node it is ``None``."""
    question = state.get("question")
    if question is not None and not isinstance(question, str):
        raise InputError(f"graph input field 'question' must be text, not {type(question).__name__} {question!r:.60}")
    if not isinstance(question, str) or not question.strip():
        raise InputError("graph input needs a non-empty 'question'")
    qid = state.get("question_id") or f"q-{zlib.crc32(question.encode()):08x}"
    return Problem(id=qid, question=question, gold=state.get("gold"), kind=state.get("kind") or "math",
                   n_choices=int(state.get("n_choices") or 0))


def question_seed(base: int, question_id: str) -> int:
    """A per-question seed: :func:`agora.agents.seeds.item_seed` (nodes use
    :func:`agora.agents.seeds.call_seed`)."""
    return item_seed(base, question_id)


def protocol_input(name: str, example: Mapping[str, Any] | None = MATH_EXAMPLE, *, shared: bool = True,
                   module: str | None = None) -> type:
    """A per-question protocol's input schema: :class:`QuestionInput` (or, ``shared=False``, for a
    protocol that never takes the bench's shared candidates, :class:`QuestionFields`) under the
    protocol's own name (Studio's form title), with ``example`` as its worked example. Derive the
    protocol's state and ``Send`` payloads from it (``class MoAState(MoAInput, total=False)``).

        MoAInput = protocol_input("MoAInput")

    The class belongs to the calling module (``module``, default: the caller's ``__name__``).
    """
    base = QuestionInput if shared else QuestionFields

    class Input(base):  # type: ignore[valid-type,misc]
        pass

    Input.__name__ = Input.__qualname__ = name
    Input.__module__ = module or sys._getframe(1).f_globals.get("__name__", __name__)
    Input.__doc__ = "What a caller passes in: the question, and its gold answer to score the methods against."
    return studio_schema(example=example, finish=question_form)(Input)


_QUESTION_KEYS = ("question", "question_id", "kind", "n_choices")


def question_payload(state: Mapping[str, Any], model: str | None = None) -> dict[str, Any]:
    """The question fields of ``state`` for a ``Send`` payload, its ``question_id`` filled in
    (:func:`as_problem`), with ``model``'s shared candidates when the state has some for it (each
    branch carries its own model's only, never the whole pool). No gold: a payload is what a node
    shows a model."""
    payload = {k: state[k] for k in _QUESTION_KEYS if k in state} | {"question_id": as_problem(state).id}
    mine = (state.get("shared_candidates") or {}).get(model) if model is not None else None
    return payload | ({"shared_candidates": {model: mine}} if mine is not None else {})
