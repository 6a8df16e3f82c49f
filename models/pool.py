"""The model pool: named chat models built from a pool file (TOML) or the built-in default pool.

A pool file lists models under ``[[models]]``::

    [[models]]
    name = "smollm2"                 # how graphs and traces call it (unique)
    backend = "llamacpp"             # "llamacpp" (in-process GGUF) or "openai" (any OpenAI-compatible server)
    path = "builtin:smollm2"         # llamacpp: a .gguf path, or builtin:<model> (`agora pool list`)
    prompt_format = "chat"           # llamacpp: "chat" (GGUF template) or "fewshot" (base models)

    [[models]]
    name = "qwen-0.5b"
    backend = "openai"
    base_url = "http://127.0.0.1:8000/v1"
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    api_key = "EMPTY"                # optional
    endpoints = ["http://gpu-a:8000/v1", "http://gpu-b:8000/v1"]   # optional replicas

Optional keys for every model: ``family`` (a label for panel analyses), ``system_prompt``
(prepended to every conversation: the same weights under a different persona make a different
member), ``temperature`` (overrides the protocol's sampling temperature), ``max_retries`` (3),
``cost_per_1k_tokens`` (0.0), ``n_ctx`` (llamacpp, 2048). A relative ``path`` is resolved against
the pool file's folder.

OpenAI-compatible models may list several ``endpoints`` (replicas of one model; requests are
spread across them and a dead one is skipped), ``timeout_s`` (120) and ``structured_outputs``
(``"response_format"``, ``"vllm"`` or ``"none"``: how a JSON schema is sent). ``backend = "vllm"``
runs ``model`` (an HF folder or id) in-process with ``vllm.LLM``; ``vllm_args`` (a table) passes
engine arguments to it and to ``agora serve``. ``prompt_format = "fewshot"`` works for every backend.
``backend = "transformers"`` runs ``path`` (an HF folder, or ``builtin:...`` converted once) in-process
with transformers, plus an optional peft ``adapter`` folder (a model trained by ``agora train``).
A ``llamacpp`` entry takes an ``adapter`` too: the same peft folder (converted once to a GGUF LoRA
beside it, :mod:`agora.models.lora_gguf`) or a GGUF LoRA file, applied by llama.cpp on the GGUF.
``backend = "langchain"`` builds any LangChain chat model (``class = "pkg.mod:ChatClass"``, a
``[models.kwargs]`` table). Every backend, and each entry's validation, comes from the registry
(:mod:`agora.models.registry`): a package adds one through the ``agora.backends`` entry point.
"""

from __future__ import annotations

import difflib
import logging
import re
import tomllib
import unicodedata
from pathlib import Path
from typing import Any, Sequence

from agora.models.builtins import BUILTIN_MODELS, BUILTIN_POOLS, BUILTINS  # noqa: F401 (BUILTIN_MODELS re-exported)
from agora.models.calls import unreturned_attempts  # noqa: F401 (re-exported)
from agora.models.contract import ModelMember, Sample, SamplingParams  # noqa: F401 (re-exported)
from agora.tasks.errors import bare_cr_as_lf, utf16_guess
from agora.tasks.loaders import missing_reason
from agora.models.errors import (EmptyResponseError, MemberContractError, ModelCallError,  # noqa: F401
                                 ModelUnavailableError, PoolConfigError, UnknownNameError)
from agora.models.member import ModelSpec, PoolMember
from agora.models.model_pool import ModelPool
from agora.models.registry import (MAX_POOL_TEMPERATURE, MemberBuildError,  # noqa: F401 (re-exported)
                                   build_member, shadowing_plugins, validate_entry)

log = logging.getLogger("agora.pool")


def build_chat_model(spec: ModelSpec) -> Any:
    """The chat model for a spec, made by its backend's factory (:mod:`agora.models.registry`);
    weights load lazily, on the first call. A LangChain ``BaseChatModel`` for the built-in backends.

    Raises:
        PoolConfigError: an unknown backend (the message lists the registered ones), or the
            factory refused a value (:class:`MemberBuildError`: ``model 'name': field 'x': ...``).
        MemberBuildError: a plug-in's factory raised, or a factory returned something that is not a
            model: ``model 'name': field 'backend': backend 'x' (entry point ...): what went wrong``
            (:func:`agora.models.registry.build_member`).
    """
    return build_member(spec)



#: ``ModelSpec`` fields a pool entry sets (the rest of an entry goes to ``extra`` or ``options``).
_SPEC_FIELDS = ("name", "backend", "path", "prompt_format", "base_url", "model", "api_key", "family",
                "system_prompt", "temperature", "max_retries", "cost_per_1k_tokens", "n_ctx", "endpoints",
                "timeout_s", "structured_outputs", "adapter", "recipe")

#: Keys read by other tools from ``ModelSpec.extra`` (serving, CUPID features).
_EXTRA_KEYS = {"vllm_args", "chat_template", "adapters", "features"}


def _spec_from_dict(entry: dict[str, Any], where: str, base_dir: Path | None,
                    source: tuple[Path, str, int] | None = None) -> ModelSpec:
    """One ``[[models]]`` entry as a :class:`ModelSpec`, validated by its backend's config class.

    Raises:
        PoolConfigError: ``where (name): field 'x': what is wrong``.
    """
    config = validate_entry(entry, where, base_dir)
    if source is None:
        return spec_from_config(config, where=f"{where} ({config.name})")
    path, text, index = source
    note = unknown_fields_note(config, f"models[{index}] ({config.name})", str(path), _entry_key_lines(text, index))
    if note:
        log.warning("%s", note)
    return spec_from_config(config, warn=False)


def spec_from_config(config: Any, where: str = "", *, warn: bool = True) -> ModelSpec:
    """A :class:`ModelSpec` from a validated backend config (:class:`agora.models.registry.BackendConfig`):
    its common fields as attributes, fields only its class declares in ``options`` (by their pool-file
    name), keys no class declares in ``extra`` (unknown ones logged when ``warn``, by
    :func:`unknown_fields_note`: a typo should not pass unseen)."""
    base = {name for name in type(config).model_fields if name in _SPEC_FIELDS}
    kwargs: dict[str, Any] = {name: getattr(config, name) for name in base}
    kwargs["endpoints"] = tuple(kwargs.get("endpoints") or ())
    dumped = config.model_dump(by_alias=True)
    options: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, info in type(config).model_fields.items():
        key = info.alias or name
        if name in _SPEC_FIELDS:
            continue
        if name in _EXTRA_KEYS:  # declared by BackendConfig (vllm_args), read from extra as before
            if key in config.model_fields_set:
                extra[key] = dumped[key]
        else:
            options[key] = dumped[key]
    extra.update(config.model_extra or {})
    note = unknown_fields_note(config, where or config.name) if warn else None
    if note:
        log.warning("%s", note)
    return ModelSpec(**kwargs, extra=extra, options=options)


def unknown_fields_note(config: Any, where: str, file: str | None = None,
                        lines: dict[str, int] | None = None) -> str | None:
    """The warning for the fields of a pool entry that neither its backend's config class nor Agora's
    tools (:data:`_EXTRA_KEYS`) know, or ``None`` when there are none. They are kept in
    ``ModelSpec.extra`` and otherwise ignored (a pool file written for a later Agora still loads),
    but a typo should not pass unseen: the note names the file and the line of the first (``lines``:
    field → line in ``file``, when known), the entry (``where``: ``models[0] (x)``), each field, and
    the closest known field (``difflib``) when one is close::

        pool.toml:7: models[0] (x): unknown field(s) temprature are ignored (did you mean 'temperature'?)
    """
    unknown = sorted(set(config.model_extra or {}) - _EXTRA_KEYS, key=lambda f: ((lines or {}).get(f, 1 << 30), f))
    if not unknown:
        return None
    known = sorted({info.alias or name for name, info in type(config).model_fields.items()} | _EXTRA_KEYS)
    lines = lines or {}
    close = {f: next(iter(difflib.get_close_matches(f, known, n=1, cutoff=0.6)), None) for f in unknown}
    if len(unknown) == 1:
        (f,) = unknown
        notes = [f"did you mean {close[f]!r}?"] if close[f] else []
    else:
        notes = [f"{f}{f' on line {lines[f]}' if f in lines else ''}{f': did you mean {close[f]!r}?' if close[f] else ''}"
                 for f in unknown if f in lines or close[f]]
    first = lines.get(unknown[0])
    at = f"{file}:{first}: " if file and first else f"{file}: " if file else ""
    return (f"{at}{where}: unknown field(s) {', '.join(unknown)} are ignored"
            + (f" ({'; '.join(notes)})" if notes else ""))


#: A TOML table header (``[[models]]``, ``[models.vllm_args]``), not an array value spread over lines.
_TABLE_HEADER = re.compile(r"""^\s*\[{1,2}\s*[A-Za-z0-9_.\"' -]+\s*\]{1,2}\s*(#.*)?$""")
_MODELS_HEADER = re.compile(r"^\s*\[\[\s*models\s*\]\]\s*(#.*)?$")
_SUBTABLE_HEADER = re.compile(r"^\s*\[\s*models\s*\.\s*([A-Za-z0-9_-]+)\s*\]\s*(#.*)?$")
#: A key at the start of a line (bare, or quoted), followed by ``=`` or a dotted key's ``.``.
_KEY_AT_START = re.compile(r"""^\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*[=.]""")
#: A table header's first key (``[defaults]``, ``[[extra]]``, ``[a.b]``).
_TABLE_NAME = re.compile(r"""^\s*\[{1,2}\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+))""")


def _entry_key_lines(text: str, index: int) -> dict[str, int]:
    """Each top-level key of the ``index``-th ``[[models]]`` table of the pool file ``text`` → its
    line (1-based), read off the text (``tomllib`` keeps no positions); ``{}`` when the entry is not
    written as such a table (an inline ``models = [{...}]``)."""
    rows = text.splitlines()
    starts = [n for n, row in enumerate(rows) if _MODELS_HEADER.match(row)]
    if index >= len(starts):
        return {}
    found: dict[str, int] = {}
    in_subtable = False
    for n in range(starts[index] + 1, len(rows)):
        if _TABLE_HEADER.match(rows[n]):
            sub = _SUBTABLE_HEADER.match(rows[n])  # [models.vllm_args]: a key of this entry, then its own keys
            if sub is None:
                break
            found.setdefault(sub.group(1), n + 1)
            in_subtable = True
            continue
        key = None if in_subtable else _KEY_AT_START.match(rows[n])
        if key:
            found.setdefault(next(g for g in key.groups() if g is not None), n + 1)
    return found


def _top_level_line(text: str, key: str) -> int | None:
    """The line (1-based) of the pool file ``text`` where top-level ``key`` is set or its table
    starts, read off the text; ``None`` when not found there (a key set after a table header is the
    table's, not a top-level one: only lines before the first header are read for ``key = ...``)."""
    in_table = False
    for n, row in enumerate(text.splitlines(), 1):
        header = _TABLE_NAME.match(row)
        if header:
            in_table = True
            if next(g for g in header.groups() if g is not None) == key:
                return n
        elif not in_table and (m := _KEY_AT_START.match(row)) and next(g for g in m.groups() if g is not None) == key:
            return n
    return None


def _read_pool_file(path: Path) -> tuple[dict[str, Any], str]:
    """The TOML table of a pool file, and its text.

    Raises:
        PoolConfigError: unreadable, not UTF-8 text (a UTF-16 file says so), or invalid TOML (with line).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PoolConfigError(f"{path}: cannot read the pool file: {exc.strerror or exc}") from None
    utf16 = "it looks like UTF-16 (a byte-order mark or NUL bytes)"
    if utf16_guess(raw) is not None:  # (checked first: UTF-16 without a byte-order mark decodes as UTF-8, NULs)
        raise PoolConfigError(f"{path}: a pool file must be UTF-8 text; {utf16}: save it as UTF-8")
    try:
        text = raw.decode("utf-8-sig")  # a UTF-8 byte-order mark is accepted
    except UnicodeDecodeError as exc:
        kind = utf16 if len(raw) > 1 and b"\x00" in raw[:64] else f"byte {exc.start} is not UTF-8"
        raise PoolConfigError(f"{path}: a pool file must be UTF-8 text; {kind}: save it as UTF-8") from None
    text = bare_cr_as_lf(text)
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise PoolConfigError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise PoolConfigError(f"{path}: invalid TOML: nested too deeply") from None


def load_pool(path: str | Path) -> ModelPool:
    """Build a :class:`ModelPool` from a TOML pool file (format in the module docstring), or the
    built-in pool of that name (``default``, ``tiny``, ``diverse``) when no such file exists.

    Every entry is validated by its backend's config class (:mod:`agora.models.registry`; a
    plug-in backend's own class for a plug-in), then built by its factory.

    Raises:
        PoolConfigError: missing or unreadable file, text that is not UTF-8, TOML syntax error (with
        line), or a bad entry: ``file: models[i] (name): field 'x': what is wrong``.
    """
    name = builtin_pool_name(path)
    if name is not None:
        return builtin_pool(name)
    path = Path(path)
    if path.is_dir():
        raise PoolConfigError(f"{path}: a folder, not a pool file; give the path of a TOML pool file")
    if not path.is_file():
        if path.exists():  # (read, a FIFO would block until a writer came)
            raise PoolConfigError(f"{path}: not a regular file (a FIFO, device or socket); give the path of a "
                                  "TOML pool file")
        if path.is_symlink():  # a loop, or a link to nothing: say so ("ls" lists it)
            raise PoolConfigError(f"{path}: {missing_reason(path)}")
        near = difflib.get_close_matches(str(path), BUILTIN_POOLS, n=1)
        raise PoolConfigError(f"{path}: pool file not found (built-in pools: {', '.join(BUILTIN_POOLS)}"
                              + (f"; did you mean {near[0]}?)" if near else ")"))
    data, text = _read_pool_file(path)
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise PoolConfigError(f"{path}: needs at least one [[models]] table")
    if others := [key for key in data if key != "models"]:  # ([defaults] or a stray key: nothing reads them)
        line = _top_level_line(text, others[0])
        log.warning("%s%s: top-level %s %s %s ignored: a pool file is read for its [[models]] tables only (a setting "
                    "of every member goes in each [[models]] table)", path, f":{line}" if line else "",
                    "keys" if len(others) > 1 else "key", ", ".join(repr(k) for k in others),
                    "are" if len(others) > 1 else "is")
    specs = [_spec_from_dict(e, f"{path}: models[{i}]", path.parent, (path, text, i)) for i, e in enumerate(entries)]
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):  # before any model loads; "ａ" (full width) and "a" are one name to a reader
        first = seen.setdefault(unicodedata.normalize("NFKC", spec.name), i)
        if first != i:
            same = (f"models[{first}] too" if specs[first].name == spec.name
                    else f"models[{first}] ({specs[first].name!r}) once normalised (NFKC)")
            raise PoolConfigError(f"{path}: models[{i}] ({spec.name}): field 'name': {spec.name!r} is the name of "
                                  f"{same}; give each member its own name")
    shadowing_plugins()  # a plug-in named like a built-in is refused: said once, as a warning
    members = []
    for i, spec in enumerate(specs):
        try:
            members.append(PoolMember(spec, build_chat_model(spec)))
        except MemberBuildError as exc:  # a class that does not import, an adapter that does not fit its model
            raise PoolConfigError(f"{path}: models[{i}] ({spec.name}): field '{exc.field}': {exc.detail}") from None
    return ModelPool(members, source=str(path))


def pool_from_specs(specs: Sequence[ModelSpec], source: str = "<memory>") -> ModelPool:
    """A pool of specs made in Python (each built by its backend's factory).

    Raises:
        PoolConfigError: an unknown backend, or a factory refused a value (:class:`MemberBuildError`).
    """
    return ModelPool([PoolMember(s, build_chat_model(s)) for s in specs], source=source)


def builtin_pool_name(path: str | Path | None) -> str | None:
    """``path`` as a built-in pool name (``"tiny"``), or ``None`` when it is a file (an existing file wins)."""
    if path is None:
        return None
    text = str(path)
    if text in BUILTIN_POOLS and not Path(text).is_file():
        return text
    if text.startswith("builtin:") and text.removeprefix("builtin:") in BUILTIN_POOLS:
        return text.removeprefix("builtin:")
    return None


def builtin_pool_specs(name: str) -> tuple[ModelSpec, ...]:
    """The member specs of a built-in pool (``default``: the two Qwen2.5-Coder models; ``tiny``:
    SmolLM2-135M and Gemma-3-270M, for quick tests; ``diverse``: Qwen members with recipes, each
    spec carrying its :class:`~agora.models.recipes.Recipe`). Names and members:
    :data:`agora.models.builtins.BUILTIN_POOLS`.

    Raises:
        PoolConfigError: an unknown pool name.
    """
    if name not in BUILTIN_POOLS:
        raise PoolConfigError(f"unknown built-in pool {name!r}; choose one of {', '.join(BUILTIN_POOLS)} or a pool file")
    return tuple(ModelSpec(name=m.name, backend="llamacpp", path=f"builtin:{m.key}",
                           prompt_format=BUILTINS[m.key].prompt_format, family=BUILTINS[m.key].family,
                           n_ctx=4096 if BUILTINS[m.key].family == "qwen2.5" else 2048,
                           recipe=None if m.recipe is None else m.recipe if isinstance(m.recipe, str) else dict(m.recipe))
                 for m in BUILTIN_POOLS[name])


#: The default embedded pool: Qwen2.5-Coder-0.5B-Instruct (cheap) and -1.5B-Instruct (strong), in-process.
DEFAULT_SPECS = builtin_pool_specs("default")
#: The tiny pool for quick tests: SmolLM2-135M-Instruct (chat) and Gemma-3-270M base (few-shot).
TINY_SPECS = builtin_pool_specs("tiny")


def builtin_pool(name: str = "default") -> ModelPool:
    """A built-in pool by name, in-process (weights are joined and checked on first use)."""
    return pool_from_specs(builtin_pool_specs(name), source=f"builtin:{name}")


def default_pool() -> ModelPool:
    """The embedded default pool: Qwen2.5-Coder-0.5B-Instruct and Qwen2.5-Coder-1.5B-Instruct."""
    return builtin_pool("default")
