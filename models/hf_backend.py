"""In-process transformers chat model, with an optional peft (LoRA) adapter: trained models in the pool.

A pool entry::

    [[models]]
    name = "gemma3-270m-it1"
    backend = "transformers"
    path = "builtin:gemma3-270m"      # an HF folder, or builtin:... (converted once by agora.models.convert)
    adapter = "runs/evolve/it1/gemma3-270m/adapter"   # optional: a peft adapter folder
    prompt_format = "fewshot"         # "chat": the folder's chat template; "fewshot": Question/Answer transcript
    iteration = 1                     # recorded by agora evolve (kept in ModelSpec.extra)

Needs the ``train`` extra (torch, transformers, peft). Weights load on the first call and are
shared by every instance with the same folder, adapter and dtype. Generation holds one process-wide
lock (two CPU decodes at once run slower than one after the other) and uses ``threads`` torch
threads (default: the cores this process may use, as for llama.cpp).
"""

from __future__ import annotations

import threading
import time
from functools import lru_cache
from typing import Any, Literal, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, Field

from agora.models._chat import NativeMember, fewshot_stops, generation, render_fewshot, to_dicts
from agora.models.llamacpp import default_threads

_GENERATE_LOCK = threading.RLock()
_LOAD_LOCK = threading.Lock()


def resolve_model_folder(path: str) -> str:
    """An HF folder path as is; ``builtin:smollm2`` / ``builtin:gemma3-270m`` / a ``.gguf`` file → its
    converted folder (:func:`agora.models.convert.export_hf`, cached)."""
    from agora.models.convert import export_hf, is_gguf_source

    if is_gguf_source(path):
        return str(export_hf(path))
    return path


@lru_cache(maxsize=4)
def load_model(path: str, adapter: str | None = None, dtype: str = "float32"):
    """``(model, tokenizer)`` for an HF folder, with ``adapter`` applied (peft) when given; eval mode.

    Raises:
        OSError: the folder or adapter cannot be read.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = resolve_model_folder(path)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    if torch.cuda.is_available():  # on a GPU machine generate there (CPU otherwise)
        model.to("cuda")
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    return model, tokenizer


class TransformersChatModel(NativeMember, BaseChatModel):
    """A transformers causal LM (plus optional LoRA adapter) as a LangChain chat model.

    ``prompt_format="chat"`` renders with the tokenizer's chat template; ``"fewshot"`` with
    :func:`agora.models._chat.render_fewshot` and its stop strings. Each call returns ``n``
    generations, sampled as one batch; sample ``i`` of a seeded call is reproducible (``torch``'s
    generator is seeded with ``seed`` before the batch). Usage and ``latency_s`` metadata as for the
    other backends.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_path: str
    """HF folder, or ``builtin:smollm2`` / ``builtin:gemma3-270m``."""
    adapter_path: str | None = None
    """peft adapter folder applied on top of the base weights."""
    model_name: str = "transformers"
    """Name recorded in traces."""
    prompt_format: Literal["chat", "fewshot"] = "chat"
    dtype: Literal["float32", "bfloat16"] = "float32"
    threads: int = Field(default_factory=default_threads)
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 256

    @property
    def _llm_type(self) -> str:
        return "agora-transformers"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "adapter_path": self.adapter_path, "prompt_format": self.prompt_format}

    def loaded(self):
        """``(model, tokenizer)``, loaded on first use."""
        with _LOAD_LOCK:
            return load_model(self.model_path, self.adapter_path, self.dtype)

    def render(self, chat: list[dict[str, str]]) -> str:
        """The prompt text of a conversation (chat template with generation prompt, or few-shot transcript)."""
        if self.prompt_format == "fewshot":
            return render_fewshot(chat)
        _model, tokenizer = self.loaded()
        return tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)

    def generate_texts(self, chats: Sequence[list[dict[str, str]]], *, max_tokens: int | None = None,
                       temperature: float | None = None, top_p: float | None = None, seed: int | None = None,
                       stop: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Generate one completion per conversation, as one left-padded batch.

        Returns:
            One dict per conversation: ``text`` (cut at the first stop string), ``prompt_tokens``,
            ``completion_tokens``, ``finish_reason`` (``stop`` or ``length``).
        """
        import torch

        model, tokenizer = self.loaded()
        max_tokens = int(max_tokens or self.max_tokens)
        temperature = self.temperature if temperature is None else float(temperature)
        top_p = self.top_p if top_p is None else float(top_p)
        stops = list(stop) + (fewshot_stops() if self.prompt_format == "fewshot" else [])
        texts = [self.render(list(c)) for c in chats]
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        # Chat templates write their own special tokens (TRL tokenises the same way).
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=self.prompt_format == "fewshot")
        batch = batch.to(model.device)
        kwargs: dict[str, Any] = {"max_new_tokens": max_tokens, "pad_token_id": tokenizer.pad_token_id}
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if stops:
            kwargs.update(stop_strings=stops, tokenizer=tokenizer)
        with _GENERATE_LOCK:
            torch.set_num_threads(self.threads)
            if seed is not None:
                torch.manual_seed(int(seed))
            with torch.inference_mode():
                out = model.generate(**batch, **kwargs)
        new = out[:, batch["input_ids"].shape[1]:]
        results = []
        eos = tokenizer.eos_token_id
        for i in range(len(texts)):
            ids = new[i].tolist()
            ended = [j for j, t in enumerate(ids) if t == eos or t == tokenizer.pad_token_id]
            n_gen = ended[0] + 1 if ended else len(ids)
            text = tokenizer.decode(ids[:n_gen], skip_special_tokens=True)
            cut = min((text.find(s) for s in stops if s in text), default=-1)
            if cut >= 0:
                text = text[:cut]
            results.append({"text": text.strip(), "prompt_tokens": int(batch["attention_mask"][i].sum()),
                            "completion_tokens": n_gen,
                            "finish_reason": "stop" if ended or cut >= 0 else "length"})
        return results

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        n = int(kwargs.pop("n", 1))
        chat = to_dicts(messages)
        start = time.perf_counter()
        outs = self.generate_texts([chat] * n, max_tokens=kwargs.get("max_tokens"),
                                   temperature=kwargs.get("temperature"), top_p=kwargs.get("top_p"),
                                   seed=kwargs.get("seed"), stop=stop or ())
        latency = (time.perf_counter() - start) / max(1, n)
        return ChatResult(generations=[
            generation(o["text"], prompt_tokens=o["prompt_tokens"], completion_tokens=o["completion_tokens"],
                       latency_s=latency, model_name=self.model_name, finish_reason=o["finish_reason"])
            for o in outs])
