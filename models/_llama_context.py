"""A llama.cpp context of its own over an already loaded ``llama_cpp.Llama``'s weights, at the level
of llama.cpp's C API: creating it (one unified KV cache for many sequences, the model's LoRA adapter
set on it too, since llama.cpp attaches adapters per context), each sequence's sampler chain, token
pieces, evaluating a prompt once into a sequence and sharing its KV cells with others
(``llama_memory_seq_cp``, no copy of the data), and one ``llama_decode`` of a batch.

The sampler chain is the one llama-cpp-python builds for ``create_completion``: top-k 40, typical
1.0, top-p, min-p 0.05, temperature, then a draw seeded per sequence; greedy at temperature 0.

:class:`agora.models._llama_batch.BatchDecoder` schedules concurrent requests' sequences on it.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

#: Prompt tokens per ``llama_decode`` call while evaluating a prompt.
N_BATCH = 512


class LlamaContext:
    """A second llama.cpp context over ``llm``'s weights (created by :meth:`_open_context`), and the
    C-API calls a batched decoder makes on it. Not thread-safe: its user serialises the calls.

    Args:
        llm: the loaded ``llama_cpp.Llama``.
        n_threads: llama.cpp threads for decoding.
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
        self._batch = None
        """The ``llama_batch`` the decoder fills each step (created by its user, freed by :meth:`close`)."""

    def _open_context(self, size: int, n_seq_max: int) -> None:
        """(Re-)create the context with ``size`` KV cells shared by up to ``n_seq_max`` sequences (one
        unified KV cache), with the model's LoRA adapter set on it when it has one (llama.cpp attaches
        adapters per context); the old context is freed only once the new one exists.

        Raises:
            RuntimeError: llama.cpp could not create the context, or set the model's LoRA on it.
        """
        lib = self._lib
        params = lib.llama_context_default_params()
        params.n_ctx = size
        params.n_batch = N_BATCH
        params.n_ubatch = N_BATCH
        params.n_seq_max = n_seq_max
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
        if self.ctx is not None:
            lib.llama_free(self.ctx)
        self.ctx, self.n_ctx = ctx, size

    def close(self) -> None:
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None
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

    def _prefill(self, batch: Any, mem: Any, prompt_tokens: Sequence[int], seqs: Sequence[int] | int,
                 start: int = 0) -> int:
        """Decode the prompt from position ``start`` on into the first of ``seqs`` (whose cells
        already hold positions ``0..start-1``; logits of its last token only), share its KV cells with
        the others, and return the batch index of the last token's logits.
        (``seqs`` as an int ``n``: sequences ``0..n-1``.)"""
        if isinstance(seqs, int):
            seqs = list(range(seqs))
        n_prompt = len(prompt_tokens)
        for begin in range(start, n_prompt, N_BATCH):
            chunk = prompt_tokens[begin:begin + N_BATCH]
            for j, tok in enumerate(chunk):
                self._put(batch, j, tok, begin + j, seqs[0], begin + j == n_prompt - 1)
            batch.n_tokens = len(chunk)
            self._decode(batch)
        for s in seqs[1:]:
            self._lib.llama_memory_seq_cp(mem, seqs[0], s, -1, -1)
        return (n_prompt - 1 - start) % N_BATCH

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
