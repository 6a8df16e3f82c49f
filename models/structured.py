"""Strict parsing of structured (JSON) replies, e.g. a judge's ``{"score": 7}``.

Ask for structure with ``SamplingParams(json_schema=SCHEMA)``: vLLM and other servers with
structured outputs then only generate JSON that matches; backends without them generate free
text. Either way, read the reply with :func:`parse_json_reply`, which accepts only a JSON object
that satisfies the schema's subset below, and logs every reply it rejects (the caller applies its
documented fallback, e.g. protocols.md §2: an unparsable judge reply scores 5.0).

Checked subset of JSON Schema: top-level ``type: object``, ``required``, per-property ``type``
(``number``, ``integer``, ``string``, ``boolean``), ``enum``, ``minimum``, ``maximum``, and
``additionalProperties: false``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("agora.structured")

_TYPES: dict[str, tuple[type, ...]] = {"number": (int, float), "integer": (int,), "string": (str,),
                                       "boolean": (bool,)}


def schema_violation(value: Any, schema: dict[str, Any]) -> str | None:
    """Why ``value`` does not satisfy ``schema`` (the subset in the module docstring), or ``None``."""
    if not isinstance(value, dict):
        return f"expected a JSON object, got {type(value).__name__}"
    props: dict[str, Any] = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in value]
    if missing:
        return f"missing {', '.join(missing)}"
    if schema.get("additionalProperties") is False:
        extra = sorted(set(value) - set(props))
        if extra:
            return f"unexpected {', '.join(extra)}"
    for key, rule in props.items():
        if key not in value:
            continue
        v = value[key]
        kinds = _TYPES.get(rule.get("type", ""), (object,))
        if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds):
            return f"{key}: expected {rule['type']}, got {v!r}"
        if "enum" in rule and v not in rule["enum"]:
            return f"{key}: {v!r} not in {rule['enum']}"
        if "minimum" in rule and v < rule["minimum"]:
            return f"{key}: {v!r} < minimum {rule['minimum']}"
        if "maximum" in rule and v > rule["maximum"]:
            return f"{key}: {v!r} > maximum {rule['maximum']}"
    return None


def parse_json_reply(text: str, schema: dict[str, Any], *, model: str = "?") -> dict[str, Any] | None:
    """The reply as a dict when it is exactly one JSON object satisfying ``schema``; else ``None``.

    Strict: surrounding whitespace is allowed, anything else (prose, code fences, a second
    object) is a failure. Each failure is logged as a warning naming the model and the reason.

    >>> parse_json_reply(' {"score": 7} ', {"type": "object", "required": ["score"],
    ...                  "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10}}})
    {'score': 7}
    """
    try:
        value = json.loads(text)
    except (ValueError, TypeError) as exc:  # ValueError: not JSON, or an integer longer than json reads
        log.warning("model %s: structured reply is not JSON (%s): %.120r", model, exc, text)
        return None
    problem = schema_violation(value, schema)
    if problem is not None:
        log.warning("model %s: structured reply does not match the schema (%s): %.120r", model, problem, text)
        return None
    return value
