"""A peft LoRA adapter → a GGUF LoRA adapter, so the embedded llama.cpp pool serves trained models.

``agora train`` writes peft adapters (``adapter_config.json`` + ``adapter_model.safetensors``) for
the transformers weights that :func:`agora.models.convert.export_hf` dequantised from a pool GGUF.
llama.cpp applies a LoRA adapter at run time on top of the (quantised) GGUF it was trained from, if
the adapter is itself a GGUF file: :func:`export_lora_gguf` writes one, with gguf-py.

The file llama.cpp reads (``llama_adapter_lora_init``):

* metadata ``general.type = "adapter"``, ``general.architecture`` equal to the base model's,
  ``adapter.type = "lora"``, ``adapter.lora.alpha``;
* for every adapted weight ``W`` of the base GGUF (e.g. ``blk.3.attn_q.weight``) two tensors
  ``<name>.lora_a`` and ``<name>.lora_b``. ggml lists dimensions innermost first, so peft's
  ``lora_A`` (``[r, in]`` in PyTorch order) and ``lora_B`` (``[out, r]``) are written as they are:
  llama.cpp checks ``a.ne[0] = W.ne[0] = in``, ``b.ne[1] = W.ne[1] = out`` and ``a.ne[1] = b.ne[0] = r``.

llama.cpp scales the product by ``adapter_scale · alpha / r`` with ``r`` read from each tensor,
which is peft's ``lora_alpha / r`` (Hu et al. 2021, "LoRA", eq. 3's ``α/r``) at scale 1. For rsLoRA
(peft ``use_rslora``: ``α/√r``) the file's alpha is ``α·√r``. Module names map to GGUF names with
gguf-py's own table for the architecture (``gguf.get_tensor_name_map``).

Refused, with the reason: DoRA (a magnitude vector llama.cpp does not apply), ``modules_to_save``
(full weights, not low-rank), LoRA biases, per-module alphas (``alpha_pattern``: llama.cpp keeps one
alpha per adapter), a module the base GGUF does not have, or a shape that does not match it.

For ``llama`` models llama.cpp's converter reorders the rows of ``attn_q`` and ``attn_k`` (each
head's rotary halves interleaved); ``lora_B`` of those modules is reordered the same way
(:data:`ROPE_PERMUTED`). Checked numerically against peft: the next-token log-probabilities move
the same way on SmolLM2 (``llama``), Qwen2.5 (``qwen2``; both in ``tests/test_lora_gguf.py``) and
Gemma 3 (``gemma3``: correlation 0.993, slope 0.98, measured once by hand on a random q/k/v LoRA).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from agora.tasks.errors import InputError

#: Default file name of the converted adapter, written inside the peft folder.
GGUF_NAME = "adapter.gguf"
#: Metadata key of a converted file: what it was made from (:func:`_fingerprint`).
FINGERPRINT_KEY = "agora.lora.made_from"
_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<side>[AB])(?:\.[^.]+)?\.weight$")


#: Architectures whose GGUF stores ``attn_q``/``attn_k`` with rows permuted from the HF layout
#: (llama.cpp's converter reorders each head's rotary halves for ``llama``): ``lora_B`` of q/k gets the
#: same row order, or the adapter would move the wrong rows. Checked against peft on SmolLM2
#: (``llama``) and Qwen2.5 (``qwen2``, not permuted) in ``tests/test_lora_gguf.py``.
ROPE_PERMUTED = frozenset({"llama"})


class LoraConversionError(InputError):
    """The adapter cannot be converted (or would not mean the same thing in llama.cpp)."""


_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF file's header says: scalar metadata (arrays skipped) and tensor shapes (ggml order)."""

    path: Path
    metadata: dict[str, Any]
    shapes: dict[str, tuple[int, ...]]

    def get(self, key: str) -> Any:
        """``metadata[key]``.

        Raises:
            LoraConversionError: the key is missing.
        """
        if key not in self.metadata:
            raise LoraConversionError(f"{self.path}: no '{key}' in the GGUF metadata (not a llama.cpp model file?)")
        return self.metadata[key]


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """The header of a GGUF file, read without loading tensors or the tokenizer's arrays (gguf-py's
    ``GGUFReader`` parses every vocabulary entry: ≈ 12 CPU-s for Gemma's 262k tokens; this skips them).

    Raises:
        LoraConversionError: not a GGUF file (version 2 or 3), or a header cut short.
    """
    import mmap
    import struct

    path = Path(path)
    with path.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            raise LoraConversionError(f"{path}: not a GGUF file")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            pos = 4

            def take(fmt: str) -> Any:
                nonlocal pos
                value = struct.unpack_from("<" + fmt, buf, pos)[0]
                pos += struct.calcsize("<" + fmt)
                return value

            def string() -> str:
                nonlocal pos
                n = take("Q")
                text = bytes(buf[pos:pos + n]).decode("utf-8", errors="replace")
                pos += n
                return text

            def skip(vtype: int) -> None:
                nonlocal pos
                if vtype in _SCALARS:
                    pos += struct.calcsize("<" + _SCALARS[vtype])
                elif vtype == 8:
                    pos += 8 + struct.unpack_from("<Q", buf, pos)[0]
                elif vtype == 9:
                    etype, count = take("I"), take("Q")
                    if etype in _SCALARS:
                        pos += count * struct.calcsize("<" + _SCALARS[etype])
                    else:
                        for _ in range(count):
                            skip(etype)
                else:
                    raise LoraConversionError(f"{path}: unknown GGUF value type {vtype}")

            try:
                version = take("I")
                if version not in (2, 3):
                    raise LoraConversionError(f"{path}: GGUF version {version} (2 or 3 expected)")
                n_tensors, n_kv = take("Q"), take("Q")
                metadata: dict[str, Any] = {}
                for _ in range(n_kv):
                    key, vtype = string(), take("I")
                    if vtype in _SCALARS:
                        metadata[key] = take(_SCALARS[vtype])
                    elif vtype == 8:
                        metadata[key] = string()
                    else:
                        skip(vtype)
                shapes: dict[str, tuple[int, ...]] = {}
                for _ in range(n_tensors):
                    name, n_dims = string(), take("I")
                    shapes[name] = tuple(take("Q") for _ in range(n_dims))
                    pos += 4 + 8  # type, offset
            except struct.error:
                raise LoraConversionError(f"{path}: the GGUF header is cut short") from None
    return GGUFHeader(path, metadata, shapes)


def check_lora_gguf(adapter: str | Path, base: str | Path) -> None:
    """Check that a GGUF LoRA file fits a GGUF model before llama.cpp loads it (a LoRA llama.cpp
    refuses leaves llama-cpp-python 0.3 with a null adapter that crashes the process at the first decode).

    Raises:
        LoraConversionError: not an adapter GGUF, not a LoRA, another architecture, or a tensor
            that is not in the model or does not fit its shape.
    """
    a, m = read_gguf_header(adapter), read_gguf_header(base)
    if a.metadata.get("general.type") != "adapter":
        raise LoraConversionError(f"{a.path}: general.type is {a.metadata.get('general.type')!r}, not 'adapter' "
                                  "(a model file, not a LoRA?)")
    if a.metadata.get("adapter.type") != "lora":
        raise LoraConversionError(f"{a.path}: adapter.type is {a.metadata.get('adapter.type')!r}, not 'lora'")
    arch, base_arch = a.metadata.get("general.architecture"), m.get("general.architecture")
    if arch != base_arch:
        raise LoraConversionError(f"{a.path}: a LoRA for architecture {arch!r}, but {m.path.name} is {base_arch!r}")
    for name, shape in a.shapes.items():
        weight, _, side = name.rpartition(".")
        if side not in ("lora_a", "lora_b") or weight not in m.shapes:
            raise LoraConversionError(f"{a.path}: tensor {name!r} has no weight {weight!r} in {m.path.name}")
        w = m.shapes[weight] + (1,)
        fits = shape[0] == w[0] if side == "lora_a" else len(shape) > 1 and shape[1] == w[1]
        if not fits:
            raise LoraConversionError(f"{a.path}: tensor {name!r} {shape} does not fit {weight} {m.shapes[weight]} of "
                                      f"{m.path.name}: was the adapter made for another model?")


def _fingerprint(folder: Path, base: Path) -> str:
    """What a converted file was made from: the adapter's config and weights (sha256) and the base
    GGUF (name and size). A cached conversion is used only when this matches."""
    import hashlib

    h = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        with (folder / name).open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return f"{h.hexdigest()}:{base.name}:{base.stat().st_size}"


def _read_weights(folder: Path) -> dict[str, Any]:
    """``{key: float32 ndarray}`` of ``adapter_model.safetensors`` (bf16/fp16 files read through torch)."""
    path = folder / "adapter_model.safetensors"
    if not path.is_file():
        raise LoraConversionError(f"{folder}: no adapter_model.safetensors (a peft LoRA adapter folder is needed)")
    from safetensors import safe_open

    out: dict[str, Any] = {}
    try:
        with safe_open(str(path), framework="numpy") as fh:
            for key in fh.keys():
                out[key] = fh.get_tensor(key).astype("float32")
    except TypeError:  # numpy has no bfloat16
        with safe_open(str(path), framework="pt") as fh:
            for key in fh.keys():
                out[key] = fh.get_tensor(key).float().numpy()
    return out


def _rope_permute(b: Any, heads: int, *, where: str) -> Any:
    """Rows of ``b`` (``[heads·d, r]``) in llama.cpp's order: within each head, the rows ``0, d/2, 1,
    d/2+1, ...`` (HF keeps the two rotary halves apart, llama.cpp interleaves them)."""
    rows = b.shape[0]
    if heads <= 0 or rows % (2 * heads):
        raise LoraConversionError(f"{where}: {rows} rows do not split into {heads} heads of rotary pairs")
    return b.reshape(heads, 2, rows // heads // 2, *b.shape[1:]).swapaxes(1, 2).reshape(b.shape)


def _refuse(folder: Path, what: str) -> None:
    raise LoraConversionError(f"{folder / 'adapter_config.json'}: {what}; llama.cpp's LoRA cannot apply it")


def _check_config(config: dict[str, Any], folder: Path) -> None:
    def refuse(what: str) -> None:
        _refuse(folder, what)

    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        refuse(f"field 'peft_type' is {config.get('peft_type')!r}, not LORA")
    if config.get("use_dora"):
        refuse("field 'use_dora' is true (DoRA's magnitude vector)")
    if config.get("modules_to_save"):
        refuse(f"field 'modules_to_save' lists {config['modules_to_save']} (full weights, not low-rank)")
    if config.get("bias", "none") != "none":
        refuse(f"field 'bias' is {config['bias']!r} (trained biases)")
    if config.get("lora_bias"):
        refuse("field 'lora_bias' is true (a trained bias on lora_B)")
    if config.get("fan_in_fan_out"):
        refuse("field 'fan_in_fan_out' is true (transposed Conv1D weights)")
    if config.get("alora_invocation_tokens"):
        refuse("field 'alora_invocation_tokens' is set (activated LoRA)")
    if config.get("alpha_pattern"):
        refuse("field 'alpha_pattern' sets per-module alphas (one alpha per adapter)")


def _alpha(config: dict[str, Any], folder: Path, ranks: set[int]) -> float:
    alpha = float(config.get("lora_alpha") or config.get("r") or 8)
    if config.get("use_rslora"):
        if len(ranks) != 1:
            _refuse(folder, "rsLoRA with per-module ranks (field 'rank_pattern')")
        alpha *= math.sqrt(next(iter(ranks)))  # α/√r == α·√r / r
    return alpha


def export_lora_gguf(adapter: str | Path, base_gguf: str | Path, out: str | Path | None = None, *,
                     force: bool = False) -> Path:
    """Write the GGUF LoRA adapter of a peft folder for the GGUF model it was trained on.

    Args:
        adapter: a peft LoRA folder (``adapter_config.json``, ``adapter_model.safetensors``).
        base_gguf: the model's GGUF file (or a built-in pool name / ``builtin:...``): its architecture,
            layer count and tensor shapes decide the names and are checked.
        out: the file to write; default ``<adapter>/adapter.gguf``.
        force: convert again even when ``out`` was made from the same adapter files and base.

    Returns:
        The written (or already current) file. ``out`` is current when its ``agora.lora.made_from``
        metadata names the same adapter files (sha256) and base GGUF (name and size); otherwise it is
        rewritten. Tensors are stored as float32; a rank-16 attention adapter of the 0.5B is 8.7 MB.

    Raises:
        LoraConversionError: not a LoRA folder, an option llama.cpp cannot apply (see the module
            docstring), a module the base does not have, or a shape that does not match it.
        ImportError: gguf-py is missing (``pip install gguf``; the ``train`` extra has it).
    """
    import gguf
    import numpy as np

    from agora.models.convert import resolve_gguf

    folder = Path(adapter)
    config_file = folder / "adapter_config.json"
    if not config_file.is_file():
        raise LoraConversionError(f"{folder}: no adapter_config.json (a peft LoRA adapter folder is needed)")
    base = resolve_gguf(str(base_gguf))
    target = Path(out) if out is not None else folder / GGUF_NAME
    weights_file = folder / "adapter_model.safetensors"
    if not weights_file.is_file():
        raise LoraConversionError(f"{folder}: no adapter_model.safetensors (a peft LoRA adapter folder is needed)")
    made_from = _fingerprint(folder, base)
    if not force and target.is_file():
        try:
            if read_gguf_header(target).metadata.get(FINGERPRINT_KEY) == made_from:
                return target  # converted before from these very files, for this base
        except LoraConversionError:
            pass  # unreadable: convert again
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LoraConversionError(f"{config_file}: line {exc.lineno}: not JSON ({exc.msg})") from None
    _check_config(config, folder)

    header = read_gguf_header(base)
    arch = str(header.get("general.architecture"))
    blocks = int(header.get(f"{arch}.block_count"))
    arch_enum = {name: key for key, name in gguf.MODEL_ARCH_NAMES.items()}.get(arch)
    if arch_enum is None:
        raise LoraConversionError(f"{base}: architecture {arch!r} is unknown to this gguf-py (pip install -U gguf)")
    names = gguf.get_tensor_name_map(arch_enum, blocks)
    shapes = header.shapes

    pairs: dict[str, dict[str, Any]] = {}
    for key, value in _read_weights(folder).items():
        m = _KEY.match(key)
        if m is None:
            raise LoraConversionError(f"{weights_file}: tensor {key!r} is not a lora_A/lora_B weight")
        pairs.setdefault(m["module"], {})[m["side"]] = value
    if not pairs:
        raise LoraConversionError(f"{weights_file}: no LoRA tensors")

    tensors: list[tuple[str, Any, Any]] = []
    for module, sides in sorted(pairs.items()):
        if set(sides) != {"A", "B"}:
            raise LoraConversionError(f"{weights_file}: module {module!r} has lora_{''.join(sides)} only")
        gguf_name = names.get_name(module + ".weight", try_suffixes=(".weight",))
        if gguf_name is None or gguf_name not in shapes:
            raise LoraConversionError(f"{weights_file}: module {module!r} has no weight in {base.name} "
                                      f"({arch}: mapped to {gguf_name!r})")
        a, b = sides["A"], sides["B"]
        w_in, w_out = (shapes[gguf_name] + (1,))[:2]
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != w_in or b.shape[0] != w_out or a.shape[0] != b.shape[1]:
            raise LoraConversionError(
                f"{weights_file}: module {module!r}: lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)} do not fit "
                f"{gguf_name} (in {w_in}, out {w_out}): was the adapter trained on another model than {base.name}?")
        if arch in ROPE_PERMUTED and gguf_name.endswith((".attn_q.weight", ".attn_k.weight")):
            heads = int(header.get(f"{arch}.attention.head_count"))
            if gguf_name.endswith(".attn_k.weight"):
                heads = int(header.get(f"{arch}.attention.head_count_kv"))
            b = _rope_permute(b, heads, where=f"{weights_file}: module {module!r}")
        tensors.append((gguf_name, a, b))
    alpha = _alpha(config, folder, {a.shape[0] for _, a, _ in tensors})

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    writer = gguf.GGUFWriter(str(partial), arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    writer.add_string(FINGERPRINT_KEY, made_from)
    for gguf_name, a, b in tensors:
        writer.add_tensor(f"{gguf_name}.lora_a", np.ascontiguousarray(a, dtype=np.float32))
        writer.add_tensor(f"{gguf_name}.lora_b", np.ascontiguousarray(b, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(target)  # a killed conversion never leaves a half-written adapter under the real name
    return target
