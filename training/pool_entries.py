"""A trained adapter as a pool entry: :func:`trained_entry` (the ``[[models]]`` entry serving it in
place of the member it came from), :func:`spec_entry` and :func:`write_pool_file`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from agora.tasks.errors import InputError
from agora.training.trainers import TrainResult


#: Spec fields a trained entry keeps from the member it replaces (persona, sampling, cost, labels).
_KEPT = ("name", "family", "system_prompt", "temperature", "max_retries", "cost_per_1k_tokens", "prompt_format")


def trained_entry(spec, result: TrainResult, iteration: int | None = None, *,
                  backend: str = "transformers") -> dict[str, Any]:
    """The ``[[models]]`` entry serving ``result``'s adapter in place of pool member ``spec``.

    Same name, persona, sampling settings and member recipe (``recipe``, :mod:`agora.models.recipes`:
    the trained weights are asked and read the way the member was) as ``spec``, and the ``iteration``
    it came from.
    ``backend = "transformers"``: the base folder (or ``builtin:...``, dequantised) and the adapter,
    in-process on CPU or GPU. ``backend = "llamacpp"``: the member's GGUF with the adapter applied by
    llama.cpp (converted once to ``<adapter>/adapter.gguf``, :mod:`agora.models.lora_gguf`): the
    quantised weights the pool served before training, at llama.cpp's speed.

    Raises:
        ValueError: ``llamacpp`` for a model trained from an HF folder (no GGUF to apply it to), or
            an unknown backend.
    """
    if backend not in ("transformers", "llamacpp"):
        raise InputError(f"backend {backend!r}: a trained member is served by 'transformers' or 'llamacpp'")
    entry = {k: getattr(spec, k) for k in _KEPT if getattr(spec, k) not in (None, "")}
    if getattr(spec, "recipe", None) is not None:
        entry["recipe"] = spec.recipe.describe()
    # Absolute paths: a pool file reads relative paths relative to itself, not to the working directory.
    base = result.base if result.base.startswith("builtin:") else str(Path(result.base).resolve())
    if backend == "llamacpp":
        from agora.models.convert import is_gguf_source

        if not is_gguf_source(base):
            raise InputError(f"model {spec.name!r} was trained from {base}, not a GGUF: llama.cpp cannot serve its "
                             "adapter (use backend 'transformers')")
        if getattr(spec, "backend", None) == "llamacpp":
            entry["n_ctx"] = spec.n_ctx
    entry.update(backend=backend, path=base, adapter=str(Path(result.adapter_dir).resolve()))
    if iteration is not None:
        entry["iteration"] = iteration
    return entry


def spec_entry(spec) -> dict[str, Any]:
    """A pool member's spec as a ``[[models]]`` entry (its ``extra`` keys back at the top level)."""
    d = spec.describe()
    return {**{k: v for k, v in d.items() if k != "extra"}, **d.get("extra", {})}


def write_pool_file(entries: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``[[models]]`` entries as a TOML pool file: scalars, lists, one level of tables
    (``[models.recipe]``), and tables inside those as TOML inline tables (a ``fewshot`` recipe's
    ``shots = [{ question = "...", answer = "..." }]``), so that :func:`agora.models.pool.load_pool`
    reads back the entries written."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):  # an inline table; keys quoted (any text is a valid quoted key)
            return "{ " + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)} = {value(x)}"
                                    for k, x in v.items() if x is not None) + " }"
        return json.dumps(str(v), ensure_ascii=False)  # a TOML basic string

    lines = []
    for e in entries:
        lines.append("[[models]]")
        lines += [f"{k} = {value(v)}" for k, v in e.items() if v is not None and not isinstance(v, dict)]
        for k, table in ((k, v) for k, v in e.items() if isinstance(v, dict)):
            lines.append(f"[models.{k}]")
            lines += [f"{tk} = {value(tv)}" for tk, tv in table.items() if tv is not None]
        lines.append("")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
