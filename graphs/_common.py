"""Helpers shared by the protocol graphs (not public)."""

from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
import threading
import typing
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import fields, is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, NotRequired, TypeVar

from pydantic import ConfigDict
from typing_extensions import TypedDict

from langgraph.config import get_stream_writer

try:  # LangGraph's node wrapper taking a sync and an async function (internal, stable since 0.2)
    from langgraph._internal._runnable import RunnableCallable
except ImportError:  # pragma: no cover - a LangGraph without it: nodes stay sync-only
    RunnableCallable = None

from agora.models.pool import ModelPool, PoolConfigError, Sample, builtin_pool, builtin_pool_name, load_pool
from agora.models.builtins import BUILTIN_POOLS
from agora.agents.seeds import item_seed
from agora.tasks.loaders import Problem
from agora.tasks.problem import AnswerKind

S = TypeVar("S")
C = TypeVar("C")


class ProblemState(TypedDict, total=False):
    """A problem as it travels in graph state."""

    question_id: str
    question: str
    kind: AnswerKind
    n_choices: int


# ---------------------------------------------------------------------------- Studio-grade schemas

SHARED_FIELD_DOCS: dict[str, str] = {
    "temperature": "Sampling temperature of the model calls (0 = greedy); a pool member's own "
                   "``temperature`` overrides it.",
    "top_p": "Nucleus sampling: each token is drawn from the smallest set of tokens whose probability "
             "reaches ``top_p``, in (0, 1].",
    "max_tokens": "Upper bound on the tokens generated per sample.",
    "seed": "Base seed: every sampled call derives its own seed from it, the question and its role "
            "(agora.agents.seeds.call_seed), so a rerun draws the same samples.",
    "s_min": "Lowest score on the judge's scale (a reply's score is clipped to [s_min, s_max]).",
    "s_max": "Highest score on the judge's scale.",
    "thresholds": "The decide rule's thresholds tau_hi, tau_lo and m_min (protocols.md §3).",
}
"""Descriptions of settings fields that mean the same in every settings class (sampling, judge
scale), used in a JSON schema where the field's own class gives it no docstring."""


@lru_cache(maxsize=None)
def _own_field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of the attributes ``cls`` declares in its own body (the string literal
    right after an annotated attribute), read from its source; ``{}`` without source."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of ``cls`` and of the classes it derives from (a TypedDict's bases
    included), the class's own docstring winning."""
    docs: dict[str, str] = {}
    for base in reversed(_lineage(cls)):
        docs.update(_own_field_docs(base))
    return docs


def _lineage(cls: type) -> list[type]:
    """``cls`` then its bases, nearest first (``__orig_bases__`` for a TypedDict, whose MRO is ``dict``)."""
    seen: list[type] = []
    todo = [cls]
    while todo:
        c = todo.pop(0)
        if not isinstance(c, type) or c in seen or c in (object, dict):
            continue
        seen.append(c)
        todo.extend([*getattr(c, "__orig_bases__", ()), *c.__bases__])
    return seen


def studio_schema(example: Mapping[str, Any] | None = None) -> Callable[[type[S]], type[S]]:
    """Class decorator for a graph's input, output, context or settings type: its JSON schema (what
    LangGraph Studio draws its forms from) gets a ``description`` for every field, from the field's
    docstring (pydantic's ``use_attribute_docstrings``, for nested settings classes too), a base
    class's docstring for an inherited field, or :data:`SHARED_FIELD_DOCS`; and ``example``, when
    given, as the schema's worked example (``examples: [example]``)."""

    def extra(schema: dict[str, Any], owner: type) -> None:
        docs = field_docs(owner)
        for name, prop in (schema.get("properties") or {}).items():
            if not prop.get("description") and (doc := docs.get(name) or SHARED_FIELD_DOCS.get(name)):
                prop["description"] = doc
        if example is not None and owner is target:
            schema["examples"] = [dict(example)]

    def apply(cls: type[S]) -> type[S]:
        nonlocal target
        target = cls
        cls.__pydantic_config__ = ConfigDict(use_attribute_docstrings=True, json_schema_extra=extra)
        return cls

    target: type | None = None
    return apply


# ---------------------------------------------------------------------------- shared candidates (issue 32)


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
class QuestionInput(TypedDict):
    """What a caller passes to a per-question protocol graph (MoA, debate).

    No ``gold``: a ``gold`` key is accepted and ignored by the nodes (no state channel holds it);
    ``invoke`` / ``ainvoke`` / ``stream`` score the returned ``methods`` against it on the way out
    (:mod:`agora.graphs.scoring`), and the runner scores from the problem."""

    question: str
    """The problem text (for multiple choice, with lettered options)."""
    question_id: NotRequired[str]
    """Id under which the question's calls are traced (default: ``q-`` and a CRC-32 of the text)."""
    kind: NotRequired[AnswerKind]
    """``math`` (default), ``mc`` or ``open``: how answers are extracted and compared."""
    n_choices: NotRequired[int]
    """Number of lettered options of a ``mc`` question (default 4)."""
    shared_candidates: NotRequired[dict[str, list[SharedCandidate]]]
    """Model → its samples of this question drawn once for every protocol (``agora bench``); the
    first answers are taken from them instead of drawn (:func:`take_shared`). Absent: drawn."""


MATH_EXAMPLE = {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?", "kind": "math"}
"""The worked example each per-question graph's input schema shows (Studio fills its form with it)."""


def sync_async_node(func: Callable[..., Any], afunc: Callable[..., Awaitable[Any]] | None = None) -> Any:
    """A graph node that runs ``func`` under ``invoke`` and ``afunc`` under ``ainvoke``/``astream``.

    LangGraph runs a sync-only node in a worker thread under ``ainvoke`` (≈ 0.1 ms per node hand-off
    here); a node that does no I/O runs inline instead (``afunc`` omitted: ``func`` called directly),
    and a node that calls a model awaits it (``afunc``). Same arguments (``state``, ``runtime``...).
    """
    if RunnableCallable is None:
        return func

    async def call_inline(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    functools.update_wrapper(call_inline, func)
    return RunnableCallable(func, afunc or call_inline, name=func.__name__, trace=False)


def problem_input(problem: Problem) -> dict[str, Any]:
    """Graph input fields for a :class:`~agora.tasks.Problem`: no gold (graphs do not score; the
    runner does, :func:`agora.tasks.scoring.score_results`)."""
    return {"question_id": problem.id, "question": problem.question, "kind": problem.kind,
            "n_choices": problem.n_choices}


def as_problem(state: dict[str, Any]) -> Problem:
    """The problem described by a graph state's input fields. Its ``gold`` is the mapping's
    ``gold`` if it has one (a caller's input, as the trace recorder reads it); a graph's state has
    none, so inside a node it is ``None``."""
    question = state.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("graph input needs a non-empty 'question'")
    qid = state.get("question_id") or f"q-{zlib.crc32(question.encode()):08x}"
    return Problem(id=qid, question=question, gold=state.get("gold"), kind=state.get("kind") or "math",
                   n_choices=int(state.get("n_choices") or 0))


def settings_from(value: Any, cls: type[S]) -> S:
    """``value`` as the frozen settings dataclass ``cls``: ``value`` itself, ``cls()`` for ``None``,
    or built from a dict, as JSON clients send it (LangGraph Studio, the ``langgraph dev`` HTTP API),
    nested settings and tuples included.

    Raises:
        ValueError: not settings nor a dict, an unknown field (named), or the settings' own checks.
    """
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"{cls.__name__}: expected {cls.__name__} or a dict, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(value) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}")
    kwargs = {}
    for name, v in value.items():
        hint = hints[name]
        kinds = {hint, *typing.get_args(hint)}
        nested = next((k for k in kinds if is_dataclass(k)), None)
        if isinstance(v, dict) and nested is not None:
            v = settings_from(v, nested)
        elif isinstance(v, list) and any(typing.get_origin(k) is tuple for k in kinds):
            v = tuple(v)
        kwargs[name] = v
    return cls(**kwargs)


# ---------------------------------------------------------------------------- run-time context


class ContextError(TypeError):
    """A graph's run-time context that is neither its own context type nor a mapping of that type's
    fields, or a ``pool`` that is neither a pool, a built-in pool name nor a pool file. One line."""


@lru_cache(maxsize=1)
def _default_pool() -> ModelPool:
    from agora.models.pool import default_pool

    return default_pool()


_POOL_CACHE: dict[tuple[Any, ...], ModelPool] = {}
_POOL_LOCK = threading.Lock()  # a server's parallel first runs build a named pool once


def clear_pool_cache() -> None:
    """Forget the pools built from names and files (tests; a long-lived server after editing weights)."""
    with _POOL_LOCK:
        _POOL_CACHE.clear()


POOL_DIR_ENV = "AGORA_POOL_DIR"
"""Environment variable: the folder a relative pool-file path in a context is read from. ``agora
studio`` sets it to the folder it was started in (its server runs in a private temporary folder)."""


def pool_base_dir() -> str:
    """The folder relative pool paths are resolved against: ``$AGORA_POOL_DIR``, else the current
    folder. Under a plain ``langgraph dev``, whose ASGI server refuses ``os.getcwd()`` inside a
    request as a blocking call (blockbuster), the shell's ``$PWD`` stands in for it."""
    base = os.environ.get(POOL_DIR_ENV)
    if base:
        return base
    try:
        return os.getcwd()
    except Exception:  # blockbuster's BlockingError
        pwd = os.environ.get("PWD")
        if pwd and os.path.isabs(pwd):
            return pwd
        raise


def resolve_pool(value: Any, *, builtin: Callable[[str], ModelPool] = builtin_pool,
                 where: str = "context") -> ModelPool | None:
    """A context's ``pool`` as a :class:`ModelPool`: a pool as is, ``None`` or an empty string as
    ``None`` (the graph's embedded pool), a built-in pool name (``"tiny"``, ``"default"``: ``builtin(name)``) or the path
    of a TOML pool file (:func:`agora.models.pool.load_pool`); a relative path is read from
    :func:`pool_base_dir` (under ``agora studio``, the folder it was started in). A pool built from a name or a file is
    built once per process and reused (a Studio server does not reload weights per run or node);
    a file edited since is built again.

    Raises:
        ContextError: any other type (one line naming what is accepted).
        PoolConfigError: a pool file that is missing or invalid (its own one-line message; a missing relative
            path names the folder it was read from).
    """
    if value is None or isinstance(value, ModelPool):
        return value
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(value, str) and not text.strip():  # Studio's form sends "" for a field left empty
            return None
        name = builtin_pool_name(text)
        if name is not None:
            key: tuple[Any, ...] = ("builtin", name, builtin)
            make = functools.partial(builtin, name)
        else:
            path = Path(text).expanduser()
            base = None if path.is_absolute() else pool_base_dir()
            if base is not None:  # against the launch folder: `agora studio` serves from a private one
                path = Path(base) / path
            path = Path(os.path.normpath(path))
            stat = path.stat() if path.is_file() else None
            if stat is None and base is not None:  # say where a relative path was looked for
                raise PoolConfigError(f"{text}: pool file not found in {base} (a relative pool path is read from "
                                      f"${POOL_DIR_ENV}, else the current folder; built-in pools: "
                                      f"{', '.join(BUILTIN_POOLS)})")
            key = ("file", str(path), stat and stat.st_mtime_ns, stat and stat.st_size)
            make = functools.partial(load_pool, path if stat else Path(text))
        with _POOL_LOCK:
            if key not in _POOL_CACHE:
                _POOL_CACHE[key] = make()
            return _POOL_CACHE[key]
    raise ContextError(f"{where}.pool: expected a ModelPool, a built-in pool name ({', '.join(BUILTIN_POOLS)}) "
                       f"or a pool file path, got {type(value).__name__}")


def _context_fields(cls: type) -> list[str]:
    return [f.name for f in fields(cls) if f.init]


def graph_context(cls: type[C]) -> type[C]:
    """Class decorator (above ``@dataclass``) for a graph's run-time context: keyword fields the
    class does not have are refused with one line naming its fields (LangGraph builds the context
    from a JSON mapping with ``cls(**mapping)``), and its JSON schema gets field descriptions
    (:func:`studio_schema`). The class's ``__post_init__`` resolves its pool (:func:`resolve_pool`)."""
    init = cls.__init__
    names = _context_fields(cls)

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(names))
        if unknown or len(args) > len(names):
            got = f"unknown field(s) {', '.join(unknown)}" if unknown else f"{len(args)} positional arguments"
            raise ContextError(f"{cls.__name__}: {got}; its fields are {', '.join(names)}")
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    _describe_settings(cls)
    return studio_schema()(cls)


def _describe_settings(cls: type, seen: set[type] | None = None) -> None:
    """Give every settings dataclass reachable from ``cls``'s fields (``config``, and the settings
    nested in it) :func:`studio_schema`'s descriptions, unless it declares its own pydantic config:
    a settings field without a docstring then still gets :data:`SHARED_FIELD_DOCS`' description."""
    seen = set() if seen is None else seen
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: no schema help, nothing else lost
        return
    for f in fields(cls):
        for kind in {hints.get(f.name), *typing.get_args(hints.get(f.name))}:
            if isinstance(kind, type) and is_dataclass(kind) and kind not in seen:
                seen.add(kind)
                if "__pydantic_config__" not in vars(kind):
                    studio_schema()(kind)
                _describe_settings(kind, seen)


_DEFAULT_CONTEXTS: dict[type, Any] = {}


def context_as(context: Any, cls: type[C]) -> C:
    """The run's context as the graph's own context type ``cls``: ``context`` itself when it is one,
    built from a mapping of ``cls``'s fields (an app's dict, Studio's JSON; a ``pool`` given by name
    or path, settings as a dict), or ``cls()`` for ``None`` (no context given: the graph's embedded
    pool and default settings).

    Raises:
        ContextError: anything else (another class, even one with ``pool`` and ``config``
            attributes), or a mapping with fields ``cls`` does not have: one line naming ``cls`` and
            its fields. A graph never runs on a default pool in place of a context it did not understand.
    """
    if isinstance(context, cls):
        return context
    if context is None:
        if cls not in _DEFAULT_CONTEXTS:
            _DEFAULT_CONTEXTS[cls] = cls()
        return _DEFAULT_CONTEXTS[cls]
    if isinstance(context, Mapping):
        return cls(**context)
    raise ContextError(f"context: expected a {cls.__name__} or a mapping with its fields "
                       f"({', '.join(_context_fields(cls))}), got {type(context).__module__}.{type(context).__qualname__}")


def pool_from(context: Any, cls: type | None = None) -> ModelPool:
    """The pool of the run-time context (:func:`context_as` ``(context, cls)`` when ``cls`` is given),
    or the embedded default pool when the context names none.

    Raises:
        ContextError: as :func:`context_as`.
    """
    if cls is not None:
        context = context_as(context, cls)
    pool = getattr(context, "pool", None) if context is not None else None
    if pool is not None and not isinstance(pool, ModelPool):
        pool = resolve_pool(pool)
    return pool if pool is not None else _default_pool()


def question_seed(base: int, question_id: str) -> int:
    """A per-question seed: :func:`agora.agents.seeds.item_seed` (nodes use
    :func:`agora.agents.seeds.call_seed`)."""
    return item_seed(base, question_id)


def emit(event: str, message: str, **fields: Any) -> None:
    """Send a custom stream event (``stream_mode="custom"``); a no-op outside a streaming run."""
    try:
        writer = get_stream_writer()
    except Exception:  # noqa: BLE001 - outside a runnable context
        return
    writer({"event": event, "message": message, **fields})
