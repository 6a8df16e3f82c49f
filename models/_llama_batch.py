"""Batched sampling on llama.cpp: a prompt evaluated once, its n sequences decoded together, and
the requests of concurrent callers sharing decode batches (continuous batching).

A request for ``n`` samples runs on a second llama.cpp context of the loaded model
(:class:`~agora.models._llama_context.LlamaContext`, whose C-API calls this module schedules: one unified KV
cache holding up to :data:`SEQ_SLOTS` sequences), with the model's LoRA adapter set on it too when
it has one (llama.cpp attaches adapters per context). The prompt is decoded once into the request's
first sequence, its KV cells are shared with its other ``n - 1`` sequences
(``llama_memory_seq_cp``, no copy of the data), and then every step decodes one token for each
unfinished sequence in one ``llama_decode`` batch. Each sequence has its own sampler chain seeded
with ``seed + i`` (the chain llama-cpp-python builds for ``create_completion``: top-k 40, typical
1.0, top-p, min-p 0.05, temperature, then a seeded draw; greedy at temperature 0).

**Concurrent requests** (questions in flight with ``--concurrency N``, or a question's
agents) join the running batch: at each step, requests waiting in line are admitted while sequence
slots and KV cells are free (first come, first served), their prompts are evaluated, and their
sequences decode in the same ``llama_decode`` calls as the ones already running, so a CPU reads
the weights once per step for all of them and sequences that finish early are replaced instead of
leaving the batch short. No thread runs in the background: the calling threads take turns driving
the loop (the caller whose request is still running drives; when its request finishes it hands the
loop to another waiting caller). Each step holds the decode lock it is given (the process-wide one of
:mod:`agora.models.llamacpp`), so two models' batches alternate step by step, never decode at once.

**Determinism.** A request that runs alone (nothing else in flight when it starts or while it
runs) starts from an empty cache, gets sequences ``0..n-1`` and follows exactly the calls of a
lone request, so the same seeds give the same samples run to run, whatever ran before. A
request that shared its batches with others may differ in the last bits of its logits (llama.cpp
computes a batch's attention over every cell in use), hence sometimes in its text: resume rests on
stored traces, never on regenerating (llama.cpp #6950).

**Shared prompt prefixes.** A request admitted while others are in flight reuses the KV cells of the
longest prompt prefix it shares with a recent request (:data:`CACHE_SLOTS` prompts kept, least recently
used dropped first, at least :data:`MIN_REUSE` tokens): the cells are attached to its first sequence
(``llama_memory_seq_cp`` over positions ``[0, p)``) and only the rest of its prompt is evaluated. The
prompts of one question's steps (MoA's aggregator, debate's rounds, the council's reviews and chair)
repeat the system prompt, the few-shot turns and the question, so concurrent questions evaluate each of
those once per model. A reused prefix gives slightly different logits than a fresh prefill (its cells sit
elsewhere in the cache), so it is kept to batches that are shared anyway: a request admitted when nothing
is in flight starts from an empty cache, forgetting the kept prompts, as before.
``reuse_prefix=False`` (``LlamaCppChatModel.prefix_cache``, ``AGORA_LLAMA_PREFIX_CACHE=0``) turns it off.

The context holds :data:`MIN_CELLS` cells, or one request's ``prompt + n * max_tokens`` when that is
more; when concurrent requests had to wait for cells, it is re-created with room for all of them (up
to :data:`MAX_CELLS`) the next time nothing is in flight.

Why: decoding B tokens in one batch costs little more than one token on a CPU, whose decode is
bound by reading the weights; measured in ``benchmarks/batched_sampling.py``.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from agora.tasks.errors import InputError
from agora.models._llama_context import N_BATCH, LlamaContext

#: Sequences of one request decoded together at most; a request for more samples runs in chunks of this size.
MAX_SEQ = 16
#: Sequences in flight at once across concurrent requests (the context's ``n_seq_max``).
SEQ_SLOTS = 64
#: Sequence ids after the :data:`SEQ_SLOTS` requests' ones that keep recent prompts' KV cells for prefix
#: reuse (the context's ``n_seq_max`` is their sum).
CACHE_SLOTS = 16
#: The fewest prompt tokens worth reusing from a kept prompt (shorter shared prefixes are evaluated again).
MIN_REUSE = 16
#: KV cells of the shared context at first: room for several requests of a few hundred prompt
#: tokens and k × 256 generated ones (the KV cache's memory: cells × layers × KV width × 2 bytes ×
#: 2, about 230 MB for Qwen2.5-1.5B).
MIN_CELLS = 8192
#: The most KV cells the shared context grows to for concurrent requests (a single request that
#: needs more still gets a context of its size).
MAX_CELLS = 32768


@dataclass
class SeqResult:
    """One decoded sequence: its text, token count, why it stopped, when (seconds from the request
    start), how long its request's prompt evaluation took (seconds) and how many of its prompt tokens
    came from a kept prompt's cells instead (:data:`MIN_REUSE`)."""

    text: str
    completion_tokens: int
    finish_reason: str
    finished_at_s: float
    prefill_s: float = 0.0
    reused_tokens: int = 0


@dataclass(eq=False)
class _Kept:
    """A recent prompt whose KV cells a cache sequence keeps (positions ``0..len(tokens)-1``)."""

    tokens: tuple[int, ...]
    seq: int
    used: int = 0


@dataclass(eq=False)
class _Request:
    """One caller's request while it is in line or in flight (driver-owned once admitted)."""

    tokens: Sequence[int]
    n: int
    budget: int
    temperature: float
    top_p: float
    seeds: Sequence[int]
    stops: Sequence[str]
    ignore_eos: bool
    cells: int
    alone: bool = False
    reuse_prefix: bool = True
    start: float = field(default_factory=time.perf_counter)
    seqs: list[int] = field(default_factory=list)
    samplers: list[Any] = field(default_factory=list)
    pieces: list[bytearray] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    done: list[SeqResult | None] = field(default_factory=list)
    idx: list[int] = field(default_factory=list)
    next_token: list[int | None] = field(default_factory=list)
    pos: int = 0
    prefill_s: float = 0.0
    reused: int = 0
    finished: bool = False
    cancelled: bool = False
    error: BaseException | None = None


class BatchDecoder(LlamaContext):
    """A second llama.cpp context over an already loaded ``llama_cpp.Llama``'s weights, shared by
    the requests of concurrent callers (:meth:`generate` is thread-safe).

    Args:
        llm: the loaded ``llama_cpp.Llama``.
        n_threads: llama.cpp threads for decoding.
        lock: held for each step (prompt evaluations and one batched decode); the process-wide
            decode lock of :mod:`agora.models.llamacpp`, so no two contexts decode at once.
    """

    def __init__(self, llm: Any, n_threads: int, lock: Any = None):
        super().__init__(llm, n_threads)
        self.last_prefill_s = 0.0
        """Seconds the last finished :meth:`generate` spent evaluating its prompt."""
        self.peak_sequences = 0
        """The most sequences decoded in one step so far (shows that concurrent requests shared batches)."""
        self.reused_tokens = 0
        """Prompt tokens taken from kept prompts' cells instead of being evaluated, so far."""
        self._kept: list[_Kept] = []
        self._kept_cells = 0
        self._clock = 0
        self._lock = lock if lock is not None else threading.RLock()
        self._cv = threading.Condition()
        self._pending: collections.deque[_Request] = collections.deque()
        self._active: list[_Request] = []
        self._driving = False
        self._used_cells = 0
        self._capacity_goal = 0

    def reserve(self, cells: int) -> None:
        """Make the context hold at least ``cells`` KV cells (capped at :data:`MAX_CELLS`) from the
        next time nothing is in flight, so that many concurrent requests' cells fit at once."""
        with self._cv:
            self._capacity_goal = max(self._capacity_goal, int(cells))

    def _ensure_context(self, cells: int) -> None:
        """Make the context hold ``cells`` KV cells (re-created larger when needed, at least
        :data:`MIN_CELLS`; only called when nothing is in flight). A context that cannot be created
        leaves the current one in place.

        Raises:
            RuntimeError: llama.cpp could not create the context, or set the model's LoRA on it.
        """
        if self.ctx is not None and self.n_ctx >= cells:
            return
        self._open_context(max(MIN_CELLS, -(-cells // 1024) * 1024), SEQ_SLOTS + CACHE_SLOTS)

    def generate(self, prompt_tokens: Sequence[int], n: int, *, max_tokens: int, temperature: float,
                 top_p: float, seeds: Sequence[int], stops: Sequence[str], n_ctx_limit: int,
                 ignore_eos: bool = False, alone: bool = False, reuse_prefix: bool = True) -> list[SeqResult]:
        """Decode ``n`` continuations of ``prompt_tokens`` (``n <= MAX_SEQ``), batched together and
        with the sequences of any other request in flight on this decoder.

        Blocks until the request's sequences are finished. ``n_ctx_limit`` is the per-sequence
        context of the model's pool entry: a prompt longer than it raises, and a sequence stops
        (``finish_reason="length"``) when it would pass it, as the sequential path does.
        ``ignore_eos`` (benchmarks only) decodes every sequence to ``max_tokens``, treating an
        end-of-generation token as text. ``alone``: wait until nothing else is in flight on this
        decoder and admit nothing beside this request (its samples then follow only its seeds).
        ``reuse_prefix``: when admitted beside other requests, take the cells of the longest prefix the
        prompt shares with a kept prompt instead of evaluating them, and keep this prompt for later ones
        (a request admitted when nothing is in flight always evaluates its whole prompt).

        Returns:
            ``n`` :class:`SeqResult`, in seed order.

        Raises:
            ValueError: ``n`` outside ``1..MAX_SEQ``, or a prompt that does not fit ``n_ctx_limit``.
            RuntimeError: ``llama_decode`` failed for a batch this request was in.
        """
        if not 1 <= n <= MAX_SEQ:
            raise InputError(f"n must be in 1..{MAX_SEQ}, got {n}")
        n_prompt = len(prompt_tokens)
        if n_prompt == 0:
            raise InputError("empty prompt")
        if n_prompt >= n_ctx_limit:
            raise InputError(f"Requested tokens ({n_prompt}) exceed context window of {n_ctx_limit}")
        budget = min(max_tokens, n_ctx_limit - n_prompt)
        req = _Request(tokens=list(prompt_tokens), n=n, budget=budget, temperature=temperature, top_p=top_p,
                       seeds=[int(s) for s in seeds[:n]], stops=list(stops), ignore_eos=ignore_eos,
                       cells=n_prompt + n * budget + 8, alone=alone, reuse_prefix=reuse_prefix)
        driving = False
        try:
            with self._cv:
                self._pending.append(req)
                while not req.finished and self._driving:
                    self._cv.wait()
                if not req.finished:
                    driving = True
                    self._driving = True
            if driving:
                self._drive(req)
        except BaseException:  # e.g. Ctrl-C: leave the line, or have the running request stop at the next step
            with self._cv:
                req.cancelled = True
                if req in self._pending:
                    self._pending.remove(req)
            raise
        finally:
            if driving:  # hand the loop to another waiting caller
                with self._cv:
                    self._driving = False
                    self._cv.notify_all()
        if req.error is not None:  # one error object may fail several callers: each raises its own
            if isinstance(req.error, RuntimeError):
                raise RuntimeError(str(req.error)) from req.error
            raise req.error
        self.last_prefill_s = req.prefill_s
        return [d for d in req.done if d is not None]

    # -- the loop, run by one calling thread at a time ------------------------------------------

    def _drive(self, mine: _Request) -> None:
        """Run steps until ``mine`` is finished (the caller hands the loop on afterwards)."""
        try:
            while not mine.finished:
                with self._lock:
                    self._step()
                    if not mine.finished and mine not in self._active and mine not in self._pending:
                        # lost between the line and the batch (an interrupt in a narrow window): fail it
                        mine.error = RuntimeError("the request was lost by an interrupted decode step")
                        mine.finished = True
        except BaseException as exc:  # e.g. Ctrl-C in the driving thread: fail what is in flight, keep the line
            self._fail_active(exc if isinstance(exc, Exception) else RuntimeError(f"decoding interrupted: {exc!r}"))
            if not mine.finished:  # still in line: take it out, the caller re-raises
                with self._cv:
                    if mine in self._pending:
                        self._pending.remove(mine)
                mine.finished = True
            raise

    def _step(self) -> None:
        """One step: sample every running sequence's next token from the last decode's logits,
        admit waiting requests (evaluate their prompts, sample their first tokens), then decode one
        token for every unfinished sequence in one batch."""
        for req in self._active:
            for i in range(req.n):
                if req.done[i] is None:
                    if req.cancelled:  # its caller left (Ctrl-C): end it here, freeing its slots and cells
                        req.done[i] = self._finish(req.pieces[i], req.counts[i], "cancelled", req.stops,
                                                   req.start, req.prefill_s, req.reused)
                        req.next_token[i] = None
                    else:
                        self._sample(req, i)
        self._retire()
        self._admit()
        entries = [(req, i) for req in self._active for i in range(req.n) if req.next_token[i] is not None]
        if not entries:
            return
        batch = self._batch
        for j, (req, i) in enumerate(entries):
            self._put(batch, j, req.next_token[i], req.pos, req.seqs[i], True)
            req.idx[i] = j
            req.next_token[i] = None
        batch.n_tokens = len(entries)
        self.peak_sequences = max(self.peak_sequences, len(entries))
        try:
            self._decode(batch)
        except RuntimeError as exc:
            self._fail_active(exc)
            return
        for req in {id(r): r for r, _ in entries}.values():
            req.pos += 1

    def _sample(self, req: _Request, i: int) -> None:
        lib = self._lib
        tok = lib.llama_sampler_sample(req.samplers[i], self.ctx, req.idx[i])
        if not req.ignore_eos and lib.llama_vocab_is_eog(self.vocab, tok):
            req.done[i] = self._finish(req.pieces[i], req.counts[i], "stop", req.stops, req.start, req.prefill_s, req.reused)
            return
        req.pieces[i] += self._piece(tok)
        req.counts[i] += 1
        if req.stops and self._stop_hit(req.pieces[i], req.stops):
            req.done[i] = self._finish(req.pieces[i], req.counts[i], "stop", req.stops, req.start, req.prefill_s, req.reused)
        elif req.counts[i] >= req.budget:
            req.done[i] = self._finish(req.pieces[i], req.counts[i], "length", req.stops, req.start, req.prefill_s, req.reused)
        else:
            req.next_token[i] = tok

    def _retire(self) -> None:
        """Release the sequences and cells of requests whose sequences are all finished."""
        finished = [req for req in self._active if all(d is not None for d in req.done)]
        if not finished:
            return
        mem = self._lib.llama_get_memory(self.ctx)
        for req in finished:
            self._release(req, mem)
        with self._cv:
            for req in finished:
                req.finished = True
            self._cv.notify_all()

    def _release(self, req: _Request, mem: Any) -> None:
        for s in req.seqs:
            self._lib.llama_memory_seq_rm(mem, s, -1, -1)
        self._free_samplers(req)
        self._active.remove(req)
        self._used_cells -= req.cells

    def _free_samplers(self, req: _Request) -> None:
        for smpl in req.samplers:
            self._lib.llama_sampler_free(smpl)
        req.samplers = []

    def _admit(self) -> None:
        """Admit waiting requests in arrival order while sequence slots and KV cells are free."""
        lib = self._lib
        while True:
            with self._cv:
                if not self._pending:
                    return
                req = self._pending[0]
                idle = not self._active
                if idle:  # nothing in flight: start clean, sized for what is waiting
                    need = max(req.cells, min(self._capacity_goal, MAX_CELLS))
                else:
                    busy = {s for r in self._active for s in r.seqs}
                    if req.alone or any(r.alone for r in self._active):  # it, or what runs, decodes alone
                        return
                    if SEQ_SLOTS - len(busy) >= req.n and self._used_cells + req.cells <= self.n_ctx:
                        self._make_room(req)  # it fits beside what runs: kept prompts give way to it
                    if (SEQ_SLOTS - len(busy) < req.n or self._used_cells + req.cells > self.n_ctx):
                        # the next time nothing is in flight, make room for everything now in line
                        waiting = sum(r.cells for r in self._pending)
                        self._capacity_goal = max(self._capacity_goal, self._used_cells + waiting)
                        return
            try:
                with self._cv:
                    self._pending.popleft()
                if idle:
                    try:
                        self._ensure_context(need)
                    except RuntimeError:
                        if need <= max(req.cells, MIN_CELLS):
                            raise
                        # the grown context could not be created (memory): forget the growth, size it for this one
                        self._capacity_goal = 0
                        self._ensure_context(max(req.cells, MIN_CELLS))
                    if self._batch is None:
                        self._batch = lib.llama_batch_init(max(N_BATCH, SEQ_SLOTS), 0, 1)
                    lib.llama_memory_clear(lib.llama_get_memory(self.ctx), True)
                    self._used_cells = 0
                    self._forget_kept()  # a request that starts alone starts from an empty cache
                busy = {s for r in self._active for s in r.seqs}
                req.seqs = [s for s in range(SEQ_SLOTS) if s not in busy][:req.n]
                req.samplers = [self._sampler(req.temperature, req.top_p, s) for s in req.seeds]
                self._active.append(req)
                self._used_cells += req.cells
                req.pieces = [bytearray() for _ in range(req.n)]
                req.counts, req.done = [0] * req.n, [None] * req.n
                req.next_token = [None] * req.n
                began = time.perf_counter()
                mem = lib.llama_get_memory(self.ctx)
                req.reused = 0 if idle else self._reuse_prefix(mem, req)
                last = self._prefill(self._batch, mem, req.tokens, req.seqs, start=req.reused)
                req.prefill_s = time.perf_counter() - began
                self.reused_tokens += req.reused
                self._keep(mem, req)
                req.pos = len(req.tokens)
                req.idx = [last] * req.n
                for i in range(req.n):  # the first tokens come from the prompt's logits, before the next decode
                    self._sample(req, i)
            except BaseException as exc:  # this request's context or prompt failed; the others go on
                req.error = exc if isinstance(exc, Exception) else RuntimeError(f"decoding interrupted: {exc!r}")
                if req in self._active:
                    self._release(req, lib.llama_get_memory(self.ctx))
                with self._cv:
                    if req in self._pending:
                        self._pending.remove(req)
                    req.finished = True
                    self._cv.notify_all()
                if not isinstance(exc, Exception):
                    raise
                continue
            if all(d is not None for d in req.done):  # every sequence ended on its first token
                self._release(req, lib.llama_get_memory(self.ctx))
                with self._cv:
                    req.finished = True
                    self._cv.notify_all()

    # -- kept prompts (prefix reuse) ----------------------------------------------------------------

    def _caching(self, req: _Request) -> bool:
        return req.reuse_prefix and not req.alone and self._cacheable

    @property
    def _cacheable(self) -> bool:
        """Whether a prompt's cells can be kept and attached to another sequence: attention over every
        position (no sliding window, whose cells llama.cpp overwrites once out of the window) and no
        recurrent state."""
        if not hasattr(self, "_cacheable_model"):
            lib, m = self._lib, self.model
            self._cacheable_model = not (lib.llama_model_n_swa(m) > 0 or lib.llama_model_is_recurrent(m)
                                         or lib.llama_model_is_hybrid(m))
        return self._cacheable_model

    def _reuse_prefix(self, mem: Any, req: _Request) -> int:
        """Attach the cells of the longest prefix ``req`` shares with a kept prompt to its first
        sequence; returns how many prompt tokens they cover (0: none long enough). At least one prompt
        token is always left to evaluate (its logits give the first sample)."""
        if not self._caching(req) or not self._kept:
            return 0
        best, best_len = self._best_kept(req)
        if best is None:
            return 0
        self._clock += 1
        best.used = self._clock
        self._lib.llama_memory_seq_cp(mem, best.seq, req.seqs[0], 0, best_len)
        return best_len

    def _best_kept(self, req: _Request) -> tuple[_Kept | None, int]:
        """The kept prompt sharing the longest prefix with ``req``'s (at least :data:`MIN_REUSE` tokens,
        at most all but its last token) and that length; ``(None, 0)`` when none."""
        best, best_len = None, 0
        for kept in self._kept:
            n = _common_prefix(kept.tokens, req.tokens)
            if n > best_len:
                best, best_len = kept, n
        best_len = min(best_len, len(req.tokens) - 1)
        return (best, best_len) if best is not None and best_len >= MIN_REUSE else (None, 0)

    def _make_room(self, req: _Request) -> None:
        """Drop kept prompts, least recently used first, until ``req`` fits beside them; the one ``req``
        would reuse goes last."""
        wanted = self._best_kept(req)[0] if self._caching(req) else None
        while self._kept and self._used_cells + self._kept_cells + req.cells > self.n_ctx:
            others = [k for k in self._kept if k is not wanted]
            self._drop_kept(min(others, key=lambda k: k.used) if others else wanted)

    def _keep(self, mem: Any, req: _Request) -> None:
        """Keep ``req``'s prompt cells under a cache sequence (replacing kept prompts it extends, and the
        least recently used one when every cache sequence is taken)."""
        if not self._caching(req) or len(req.tokens) <= MIN_REUSE:  # too short ever to be reused
            return
        tokens = tuple(req.tokens)
        for kept in list(self._kept):
            if tokens[:len(kept.tokens)] == kept.tokens:  # this prompt extends (or repeats) it
                self._drop_kept(kept)
        if len(self._kept) >= CACHE_SLOTS:
            self._drop_kept(min(self._kept, key=lambda k: k.used))
        seq = next(s for s in range(SEQ_SLOTS, SEQ_SLOTS + CACHE_SLOTS) if s not in {k.seq for k in self._kept})
        self._lib.llama_memory_seq_cp(mem, req.seqs[0], seq, 0, len(tokens))
        self._clock += 1
        self._kept.append(_Kept(tokens=tokens, seq=seq, used=self._clock))
        self._kept_cells += len(tokens)

    def _drop_kept(self, kept: _Kept) -> None:
        self._lib.llama_memory_seq_rm(self._lib.llama_get_memory(self.ctx), kept.seq, -1, -1)
        self._kept.remove(kept)
        self._kept_cells -= len(kept.tokens)

    def _forget_kept(self) -> None:
        """Forget every kept prompt (their cells were cleared with the cache)."""
        self._kept.clear()
        self._kept_cells = 0

    def _fail_active(self, exc: Exception) -> None:
        """A batched decode failed: every request in flight fails with it; the cache starts clean."""
        failed = list(self._active)
        for req in failed:
            req.error = exc
            self._free_samplers(req)
        self._active.clear()
        self._used_cells = 0
        self._forget_kept()
        if self.ctx is not None:
            self._lib.llama_memory_clear(self._lib.llama_get_memory(self.ctx), True)
        with self._cv:
            for req in failed:
                req.finished = True
            self._cv.notify_all()

    @staticmethod
    def _stop_hit(data: bytearray, stops: Sequence[str]) -> bool:
        tail = bytes(data[-(max(len(s.encode()) for s in stops) + 16):]).decode("utf-8", errors="ignore")
        return any(s in tail for s in stops)

    @staticmethod
    def _finish(data: bytearray, count: int, reason: str, stops: Sequence[str], start: float,
                prefill_s: float = 0.0, reused: int = 0) -> SeqResult:
        text = bytes(data).decode("utf-8", errors="ignore")
        if stops:
            cut = [text.find(s) for s in stops if s in text]
            if cut:
                text = text[:min(cut)]
        return SeqResult(text=text, completion_tokens=count, finish_reason=reason,
                         finished_at_s=time.perf_counter() - start, prefill_s=prefill_s,
                         reused_tokens=reused)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def decode_only_rate(decoder: BatchDecoder, prompt_tokens: Sequence[int], batch: int, steps: int) -> float:
    """llama.cpp's own batched decode rate, in generated tokens per second: the prompt once, then
    ``steps`` calls of ``llama_decode`` with one token for each of ``batch`` sequences and no
    sampling (the token fed back is the prompt's last). The ceiling :meth:`BatchDecoder.generate`
    is compared with in ``benchmarks/batched_sampling.py``.

    Raises:
        RuntimeError: requests are in flight on ``decoder`` (this would clear their cache).
    """
    with decoder._cv:
        if decoder._active or decoder._pending or decoder._driving:
            raise RuntimeError("decode_only_rate needs an idle decoder: requests are in flight on it")
    lib = decoder._lib
    n_prompt = len(prompt_tokens)
    decoder._ensure_context(n_prompt + batch * steps + 8)
    mem = lib.llama_get_memory(decoder.ctx)
    lib.llama_memory_clear(mem, True)
    decoder._forget_kept()
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
