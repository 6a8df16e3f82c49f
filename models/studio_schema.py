"""The JSON schemas LangGraph Studio draws its forms from: a description for every field of a
protocol's input, output, context and settings, read from the field's docstring (not public)."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, TypeVar

from pydantic import ConfigDict

S = TypeVar("S")


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
    right after an annotated attribute), read from its source, and of its ``__field_docs__`` mapping
    (what :func:`agora.graphs.context.protocol_context` gives the classes it makes)."""
    made = dict(vars(cls).get("__field_docs__") or {})  # a class a factory made has no source
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return made
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return made | docs


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


_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`~?(?:[\w.]+\.)?([^`.]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


_SECTION = re.compile(r"\n\s*\n(?:Args|Arguments|Raises|Returns|Yields):\n.*", re.S)
"""A docstring's trailing Google-style sections (what a Python caller passes and catches)."""


def as_markdown(text: str) -> str:
    """A docstring as a form shows it (Markdown): ````code```` → `` `code` ``, ``:func:`a.b.name```
    → `` `name` ``; its ``Raises:`` (``Args:``, ``Returns:``, ``Yields:``) sections left out."""
    return _LITERAL.sub(r"`\1`", _ROLE.sub(r"`\1`", _SECTION.sub("", text)))


def markdown_schema(schema: Any) -> Any:
    """``schema`` (a JSON schema) with every ``description`` in it, nested types' included, in
    Markdown (:func:`as_markdown`)."""
    if isinstance(schema, dict):
        return {k: as_markdown(v) if k == "description" and isinstance(v, str) else markdown_schema(v)
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [markdown_schema(v) for v in schema]
    return schema


def studio_schema(example: Mapping[str, Any] | None = None, docs: Mapping[str, str] | None = None,
                  finish: Callable[[dict[str, Any]], None] | None = None) -> Callable[[type[S]], type[S]]:
    """Class decorator for a graph's input, output, context or settings type: its JSON schema (what
    LangGraph Studio draws its forms from) gets a ``description`` for every field, from the field's
    docstring (pydantic's ``use_attribute_docstrings``, for nested settings classes too), ``docs``
    (field → what it means in this class: an inherited field a subclass cannot declare again), a
    base class's docstring for an inherited field, or :data:`SHARED_FIELD_DOCS`, written in Markdown
    (:func:`as_markdown`: Studio shows descriptions as they are); ``example``, when given, as the
    schema's worked example (``examples: [example]``); and ``finish(schema)`` applied last, to the
    decorated class's own schema (:func:`agora.graphs.question.protocol_input`'s form)."""

    def extra(schema: dict[str, Any], owner: type) -> None:
        known, own = field_docs(owner), vars(owner).get("__field_docs__") or {}
        for name, prop in (schema.get("properties") or {}).items():
            if name in own:  # the class says what an inherited field means in it
                prop["description"] = own[name]
            elif not prop.get("description") and (doc := known.get(name) or SHARED_FIELD_DOCS.get(name)):
                prop["description"] = doc
            if isinstance(prop.get("description"), str):
                prop["description"] = as_markdown(prop["description"])
        if isinstance(schema.get("description"), str):
            schema["description"] = as_markdown(schema["description"])
        if owner is target:
            if example is not None:
                schema["examples"] = [dict(example)]
            if finish is not None:
                finish(schema)

    def apply(cls: type[S]) -> type[S]:
        nonlocal target
        target = cls
        if docs:
            cls.__field_docs__ = dict(docs)
        own = vars(cls).get("__pydantic_config__") or {}  # a pydantic dataclass's own (its validator is built)
        cls.__pydantic_config__ = ConfigDict(**{**own, "use_attribute_docstrings": True, "json_schema_extra": extra})
        return cls

    target: type | None = None
    return apply
