"""Batched sampling on llama.cpp: one prompt evaluated once, n sequences decoded together.

A request for ``n`` samples of one prompt runs on a second llama.cpp context of the loaded model
(``n_seq_max`` sequences, one unified KV cache), with the model's LoRA adapter set on it too when it
has one (llama.cpp attaches adapters per context). The prompt is decoded once into sequence 0, its
KV cells are shared with sequences ``1..n-1`` (``llama_memory_seq_cp``, no copy of the data), and
then every step decodes one token for each unfinished sequence in one ``llama_decode`` batch. Each
sequence has its own sampler chain seeded with ``seed + i`` (the chain llama-cpp-python builds for
``create_completion``: top-k 40, typical 1.0, top-p, min-p 0.05, temperature, then a seeded draw;
greedy at temperature 0), so the same seeds give the same samples, run to run.

The context starts empty for every request (``llama_memory_clear``) so a seeded request's text
depends only on its prompt, seeds and ``n``, never on what ran before it. (So a prefix shared with
the previous request, such as the system prompt and exemplars, is evaluated again: llama.cpp's
logits after a reused prefix differ slightly from a fresh prefill, which would make a seeded
sample depend on the request before it. The prefill of a few hundred tokens costs well under a
second here, against seconds of decoding.) It holds at least
``prompt + n * max_tokens`` cells and grows (is re-created) when a request needs more.

Why: decoding B tokens in one batch costs little more than one token on a CPU, whose decode is
bound by reading the weights; measured in ``benchmarks/batched_sampling.py``.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any, Sequence

#: Sequences decoded together at most; a request for more samples runs in chunks of this size.
MAX_SEQ = 16
#: Prompt tokens per ``llama_decode`` call while evaluating the prompt.
N_BATCH = 512


@dataclass
class SeqResult:
    """One decoded sequence: its text, token count, why it stopped and when (seconds from the request start)."""

    text: str
    completion_tokens: int
    finish_reason: str
    finished_at_s: float


class BatchDecoder:
    """A second llama.cpp context over an already loaded ``llama_cpp.Llama``'s weights.

    Not thread-safe: callers hold the process-wide decode lock (:mod:`agora.models.llamacpp`).
    """

    def __init__(self, llm: Any, n_threads: int):
        import llama_cpp

        self._lib = llama_cpp
        self.llm = llm
        self.model = llm._model.model
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_threads = n_threads
        self.ctx = None
        self.n_ctx = 0
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(self.model))
        self.last_prefill_s = 0.0
        """Seconds the last :meth:`generate` spent evaluating its prompt."""

    def _ensure_context(self, cells: int) -> None:
        if self.ctx is not None and self.n_ctx >= cells:
            return
        lib = self._lib
        self.close()
        size = max(2048, -(-cells // 1024) * 1024)
        params = lib.llama_context_default_params()
        params.n_ctx = size
        params.n_batch = N_BATCH
        params.n_ubatch = N_BATCH
        params.n_seq_max = MAX_SEQ
        params.kv_unified = True
        params.n_threads = self.n_threads
        params.n_threads_batch = self.n_threads
        params.no_perf = True
        ctx = lib.llama_init_from_model(self.model, params)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {size} cells for batched sampling")
        adapter = getattr(self.llm, "_lora_adapter", None)
        if adapter is not None:  # a LoRA is set per context: this one must apply it as the model's own does
            adapters = (lib.llama_adapter_lora_p_ctypes * 1)(adapter)
            scales = (ctypes.c_float * 1)(float(self.llm.lora_scale))
            if lib.llama_set_adapters_lora(ctx, adapters, 1, scales):
                lib.llama_free(ctx)
                raise RuntimeError(f"llama.cpp could not set the LoRA adapter {self.llm.lora_path} on the batch context")
        self.ctx, self.n_ctx = ctx, size

    def close(self) -> None:
        if self.ctx is not None:
            self._lib.llama_free(self.ctx)
            self.ctx, self.n_ctx = None, 0

    def __del__(self):  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass

    def _sampler(self, temperature: float, top_p: float, seed: int):
        lib = self._lib
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if temperature <= 0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
        else:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(40))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_typical(1.0, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(top_p, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(0.05, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(temperature))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        return chain

    def _piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self._lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def generate(self, prompt_tokens: Sequence[int], n: int, *, max_tokens: int, temperature: float,
                 top_p: float, seeds: Sequence[int], stops: Sequence[str], n_ctx_limit: int,
                 ignore_eos: bool = False) -> list[SeqResult]:
        """Decode ``n`` continuations of ``prompt_tokens`` (``n <= MAX_SEQ``) in one batch.

        ``n_ctx_limit`` is the per-sequence context of the model's pool entry: a prompt longer than
        it raises, and a sequence stops (``finish_reason="length"``) when it would pass it, as the
        sequential path does. ``ignore_eos`` (benchmarks only) decodes every sequence to
        ``max_tokens``, treating an end-of-generation token as text.

        Raises:
            ValueError: ``n`` outside ``1..MAX_SEQ``, or a prompt that does not fit ``n_ctx_limit``.
            RuntimeError: ``llama_decode`` failed.
        """
        lib = self._lib
        if not 1 <= n <= MAX_SEQ:
            raise ValueError(f"n must be in 1..{MAX_SEQ}, got {n}")
        n_prompt = len(prompt_tokens)
        if n_prompt == 0:
            raise ValueError("empty prompt")
        if n_prompt >= n_ctx_limit:
            raise ValueError(f"Requested tokens ({n_prompt}) exceed context window of {n_ctx_limit}")
        budget = min(max_tokens, n_ctx_limit - n_prompt)
        self._ensure_context(n_prompt + n * budget + 8)
        start = time.perf_counter()
        mem = lib.llama_get_memory(self.ctx)
        lib.llama_memory_clear(mem, True)
        batch = lib.llama_batch_init(max(N_BATCH, MAX_SEQ), 0, 1)
        samplers = [self._sampler(temperature, top_p, int(s)) for s in seeds[:n]]
        try:
            # 1. the prompt, once, into sequence 0, shared with sequences 1..n-1
            last_idx = self._prefill(batch, mem, prompt_tokens, n)
            self.last_prefill_s = time.perf_counter() - start
            # 2. every sequence draws from the prompt's last logits, then all decode together
            pieces: list[bytearray] = [bytearray() for _ in range(n)]
            counts = [0] * n
            done: list[SeqResult | None] = [None] * n
            idx = {s: last_idx for s in range(n)}
            pos = n_prompt
            while True:
                active = []
                for s in range(n):
                    if done[s] is not None:
                        continue
                    tok = lib.llama_sampler_sample(samplers[s], self.ctx, idx[s])
                    if not ignore_eos and lib.llama_vocab_is_eog(self.vocab, tok):
                        done[s] = self._finish(pieces[s], counts[s], "stop", stops, start)
                        continue
                    pieces[s] += self._piece(tok)
                    counts[s] += 1
                    if stops and self._stop_hit(pieces[s], stops):
                        done[s] = self._finish(pieces[s], counts[s], "stop", stops, start)
                    elif counts[s] >= budget:
                        done[s] = self._finish(pieces[s], counts[s], "length", stops, start)
                    else:
                        active.append((s, tok))
                if not active:
                    break
                for j, (s, tok) in enumerate(active):
                    self._put(batch, j, tok, pos, s, True)
                    idx[s] = j
                batch.n_tokens = len(active)
                self._decode(batch)
                pos += 1
        finally:
            lib.llama_batch_free(batch)
            for smpl in samplers:
                lib.llama_sampler_free(smpl)
        return [d for d in done if d is not None]

    def _prefill(self, batch: Any, mem: Any, prompt_tokens: Sequence[int], n_seq: int) -> int:
        """Decode the prompt into sequence 0 (logits of its last token only), share its KV cells
        with sequences ``1..n_seq-1``, and return the batch index of the last token's logits."""
        n_prompt = len(prompt_tokens)
        for begin in range(0, n_prompt, N_BATCH):
            chunk = prompt_tokens[begin:begin + N_BATCH]
            for j, tok in enumerate(chunk):
                self._put(batch, j, tok, begin + j, 0, begin + j == n_prompt - 1)
            batch.n_tokens = len(chunk)
            self._decode(batch)
        for s in range(1, n_seq):
            self._lib.llama_memory_seq_cp(mem, 0, s, -1, -1)
        return (n_prompt - 1) % N_BATCH

    @staticmethod
    def _put(batch: Any, j: int, token: int, pos: int, seq: int, logits: bool) -> None:
        batch.token[j] = token
        batch.pos[j] = pos
        batch.n_seq_id[j] = 1
        batch.seq_id[j][0] = seq
        batch.logits[j] = 1 if logits else 0

    def _decode(self, batch: Any) -> None:
        rc = self._lib.llama_decode(self.ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with code {rc} (batch of {batch.n_tokens} tokens)")

    @staticmethod
    def _stop_hit(data: bytearray, stops: Sequence[str]) -> bool:
        tail = bytes(data[-(max(len(s.encode()) for s in stops) + 16):]).decode("utf-8", errors="ignore")
        return any(s in tail for s in stops)

    @staticmethod
    def _finish(data: bytearray, count: int, reason: str, stops: Sequence[str], start: float) -> SeqResult:
        text = bytes(data).decode("utf-8", errors="ignore")
        if stops:
            cut = [text.find(s) for s in stops if s in text]
            if cut:
                text = text[:min(cut)]
        return SeqResult(text=text, completion_tokens=count, finish_reason=reason,
                         finished_at_s=time.perf_counter() - start)


def decode_only_rate(decoder: BatchDecoder, prompt_tokens: Sequence[int], batch: int, steps: int) -> float:
    """llama.cpp's own batched decode rate, in generated tokens per second: the prompt once, then
    ``steps`` calls of ``llama_decode`` with one token for each of ``batch`` sequences and no
    sampling (the token fed back is the prompt's last). The ceiling :meth:`BatchDecoder.generate`
    is compared with in ``benchmarks/batched_sampling.py``."""
    lib = decoder._lib
    n_prompt = len(prompt_tokens)
    decoder._ensure_context(n_prompt + batch * steps + 8)
    mem = lib.llama_get_memory(decoder.ctx)
    lib.llama_memory_clear(mem, True)
    b = lib.llama_batch_init(max(N_BATCH, MAX_SEQ), 0, 1)
    try:
        decoder._prefill(b, mem, prompt_tokens, batch)
        tok = prompt_tokens[-1]
        start = time.perf_counter()
        for step in range(steps):
            for s in range(batch):
                decoder._put(b, s, tok, n_prompt + step, s, True)
            b.n_tokens = batch
            decoder._decode(b)
        return batch * steps / (time.perf_counter() - start)
    finally:
        lib.llama_batch_free(b)
