"""Continuous batching on the embedded llama.cpp engine (issue 29 item 2; slow: real embedded models).

Concurrent callers' requests share the decoder's ``llama_decode`` batches; a request that runs alone
still gives exactly its seeded samples; requests wait for sequence slots and KV cells and the context
grows once nothing is in flight; a failed batch fails the requests in it and not the ones after it;
``agora run`` on the embedded pool keeps questions in flight by default and records every call.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from waiting import wait_until

from agora.models import _llama_batch
from agora.models._llama_batch import BatchDecoder
from agora.models.llamacpp import DECODE_LOCK
from agora.models.pool import SamplingParams, builtin_pool

pytestmark = pytest.mark.slow

QUESTIONS = ["Name three colours.", "Count to five.", "What is 2 + 3?", "Say a word about cats."]


@pytest.fixture(scope="module")
def tiny():
    return builtin_pool("tiny")


def ask(pool, q: int, n: int = 3, max_tokens: int = 32):
    samples, records = pool.sample("smollm2-135m", [{"role": "user", "content": QUESTIONS[q]}],
                                   SamplingParams(n=n, temperature=0.8, max_tokens=max_tokens, seed=7 + q))
    assert len(records) == n and all(r["error"] is None for r in records)
    return samples


def decoder_of(pool):
    return pool._members["smollm2-135m"].sampler.llm()._agora_decoder


def test_concurrent_requests_share_decode_batches_and_each_gets_its_samples(tiny):
    ask(tiny, 0, max_tokens=2)  # load the model and create its decoder
    decoder = decoder_of(tiny)
    decoder.peak_sequences = 0
    start = threading.Barrier(4)

    def one(q):
        start.wait()
        return ask(tiny, q, max_tokens=48)

    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(one, range(4)))
    assert [len(r) for r in results] == [3, 3, 3, 3]
    assert all(s.completion_tokens > 0 and s.prompt_tokens > 0 and s.text for r in results for s in r)
    assert decoder.peak_sequences > 3  # more than one request's sequences were decoded in one step
    assert not decoder._active and not decoder._pending and not decoder._driving


def test_a_request_alone_gives_the_same_samples_before_and_after_concurrent_traffic(tiny):
    alone = [s.text for s in ask(tiny, 2)]
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(lambda q: ask(tiny, q), range(4)))
    assert [s.text for s in ask(tiny, 2)] == alone


def test_requests_wait_for_kv_cells_and_the_context_grows_when_nothing_is_in_flight(tiny, monkeypatch):
    monkeypatch.setattr(_llama_batch, "MIN_CELLS", 2048)
    ask(tiny, 0, max_tokens=2)
    llm = tiny._members["smollm2-135m"].sampler.llm()
    decoder = BatchDecoder(llm, 1, lock=DECODE_LOCK)  # a fresh context: 2048 cells
    prompt = llm.tokenize(b"Write a long story about a dragon.", add_bos=True, special=True)
    kw = dict(max_tokens=200, temperature=0.8, top_p=0.95, stops=[], n_ctx_limit=2048, ignore_eos=True)
    try:
        decoder.generate(prompt, 1, seeds=[1], **dict(kw, max_tokens=4))
        assert decoder.n_ctx == 2048
        start = threading.Barrier(2)

        def one(seed):
            start.wait()
            return decoder.generate(prompt, 8, seeds=[seed + i for i in range(8)], **kw)  # 8 × 200 cells

        with ThreadPoolExecutor(2) as ex:
            results = list(ex.map(one, (10, 20)))
        assert [[r.completion_tokens for r in rs] for rs in results] == [[200] * 8, [200] * 8]
        assert decoder.peak_sequences == 8  # the second request waited for cells: never 16 in one step
        assert decoder._capacity_goal > 2048
        decoder.generate(prompt, 1, seeds=[1], **dict(kw, max_tokens=4))  # idle: the context is re-created larger
        assert decoder.n_ctx >= decoder._capacity_goal
        with ThreadPoolExecutor(2) as ex:
            again = list(ex.map(one, (10, 20)))
        assert decoder.peak_sequences == 16  # now both fit at once
        assert [[r.completion_tokens for r in rs] for rs in again] == [[200] * 8, [200] * 8]
    finally:
        decoder.close()


def test_a_failed_batch_fails_the_requests_in_it_and_the_next_request_runs(tiny, monkeypatch):
    ask(tiny, 0, max_tokens=2)
    llm = tiny._members["smollm2-135m"].sampler.llm()
    decoder = BatchDecoder(llm, 1, lock=DECODE_LOCK)
    prompt = llm.tokenize(b"Tell me about the sea.", add_bos=True, special=True)
    kw = dict(max_tokens=40, temperature=0.8, top_p=0.95, stops=[], n_ctx_limit=2048, ignore_eos=True)
    real, calls = decoder._decode, []

    def flaky(batch):
        calls.append(batch.n_tokens)
        if len(calls) == 12:  # a step well inside the run, with both requests in flight
            raise RuntimeError("llama_decode failed with code -3 (injected)")
        return real(batch)

    monkeypatch.setattr(decoder, "_decode", flaky)
    start = threading.Barrier(2)

    def one(seed):
        start.wait()
        try:
            return decoder.generate(prompt, 2, seeds=[seed, seed + 1], **kw)
        except RuntimeError as exc:
            return str(exc)

    try:
        with ThreadPoolExecutor(2) as ex:
            out = list(ex.map(one, (1, 5)))
        assert all(isinstance(o, str) and "injected" in o for o in out), out
        assert not decoder._active and not decoder._pending and decoder._used_cells == 0
        after = decoder.generate(prompt, 2, seeds=[1, 2], **kw)
        assert [r.completion_tokens for r in after] == [40, 40]
    finally:
        decoder.close()


def test_two_models_decode_concurrently_one_step_at_a_time(tiny):
    from agora.agents.prompts import solver_messages
    from agora.tasks.loaders import load_problems
    from agora.tasks.samples import sample_path

    problem = load_problems(*sample_path("gsm8k"), 1)[0]

    def one(model):
        samples, records = tiny.sample(model, solver_messages(problem, 2), SamplingParams(n=2, max_tokens=24, seed=3))
        return [r["error"] for r in records], [s.completion_tokens for s in samples]

    with ThreadPoolExecutor(2) as ex:
        out = list(ex.map(one, ["smollm2-135m", "gemma3-270m"]))
    assert all(errors == [None, None] and all(c > 0 for c in counts) for errors, counts in out), out


def test_run_align_on_the_embedded_pool_keeps_questions_in_flight_and_records_every_call(tmp_path):
    import os
    import subprocess
    import sys

    import sqlite_utils

    db = tmp_path / "t.db"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "160", "AGORA_LLAMA_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "agora.cli", "run", "align", "--pool", "tiny", "--limit", "3",
                          "--samples", "2", "--max-tokens", "24", "--db", str(db),
                          "--run-id", "cb"], capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "3 questions in flight" in out.stdout  # the default: 8 on the embedded pool, capped at the questions
    calls = list(sqlite_utils.Database(db)["model_calls"].rows)
    assert len(calls) == 3 * 2 * 2  # questions × agents × samples
    assert all(c["error"] is None and c["completion_tokens"] > 0 for c in calls)
    assert len(list(sqlite_utils.Database(db)["questions"].rows)) == 3


def test_with_batch_sharing_off_concurrent_requests_decode_alone_and_reproduce(tiny, monkeypatch):
    """``share_batches=False`` (``AGORA_LLAMA_SHARE_BATCHES=0``): each request waits for the decoder
    to be idle, so requests made at the same time give exactly their lone samples."""
    alone = {q: [s.text for s in ask(tiny, q)] for q in range(4)}
    model = tiny._members["smollm2-135m"].sampler
    monkeypatch.setattr(model, "share_batches", False)
    decoder = decoder_of(tiny)
    decoder.peak_sequences = 0
    start = threading.Barrier(4)

    def one(q):
        start.wait()
        return [s.text for s in ask(tiny, q)]

    with ThreadPoolExecutor(4) as ex:
        together = dict(zip(range(4), ex.map(one, range(4))))
    assert together == alone
    assert decoder.peak_sequences == 3  # one request's sequences per step, never more


def test_the_environment_switch_turns_batch_sharing_off(monkeypatch):
    from agora.models.llamacpp import LlamaCppChatModel

    monkeypatch.setenv("AGORA_LLAMA_SHARE_BATCHES", "0")
    assert LlamaCppChatModel(model_path="x.gguf").share_batches is False
    monkeypatch.delenv("AGORA_LLAMA_SHARE_BATCHES")
    assert LlamaCppChatModel(model_path="x.gguf").share_batches is True


class _FailingBigContexts:
    """The llama_cpp module, except that contexts above ``limit`` cells cannot be created (no memory)."""

    def __init__(self, lib, limit):
        self._real, self._limit, self.refused = lib, limit, []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def llama_init_from_model(self, model, params):
        if params.n_ctx > self._limit:
            self.refused.append(params.n_ctx)
            return None
        return self._real.llama_init_from_model(model, params)


def test_a_grown_context_that_cannot_be_created_falls_back_to_the_requests_own_size(tiny):
    ask(tiny, 0, max_tokens=2)
    llm = tiny._members["smollm2-135m"].sampler.llm()
    decoder = BatchDecoder(llm, 1, lock=DECODE_LOCK)
    decoder._lib = _FailingBigContexts(decoder._lib, limit=_llama_batch.MIN_CELLS)
    prompt = llm.tokenize(b"Say something.", add_bos=True, special=True)
    kw = dict(max_tokens=8, temperature=0.8, top_p=0.95, stops=[], n_ctx_limit=2048, ignore_eos=True)
    try:
        decoder.generate(prompt, 2, seeds=[1, 2], **kw)
        decoder.reserve(4 * _llama_batch.MIN_CELLS)  # a burst asked for more than this machine can hold
        out = decoder.generate(prompt, 2, seeds=[1, 2], **kw)
        assert [r.completion_tokens for r in out] == [8, 8]
        assert decoder._lib.refused and decoder.n_ctx == _llama_batch.MIN_CELLS
        assert decoder._capacity_goal == 0  # the growth is forgotten: later requests do not try it again
        decoder.generate(prompt, 1, seeds=[3], **kw)
        assert len(decoder._lib.refused) == 1
    finally:
        decoder.close()


def test_a_cancelled_request_ends_at_the_next_step_and_frees_its_room(tiny):
    """A caller interrupted while its request runs (Ctrl-C in a notebook) leaves it cancelled: the
    request stops at the next step instead of decoding to its budget for nobody."""
    ask(tiny, 0, max_tokens=2)
    llm = tiny._members["smollm2-135m"].sampler.llm()
    decoder = BatchDecoder(llm, 1, lock=DECODE_LOCK)
    prompt = llm.tokenize(b"Tell me a long story.", add_bos=True, special=True)
    kw = dict(temperature=0.8, top_p=0.95, stops=[], n_ctx_limit=2048, ignore_eos=True)
    real, steps = decoder._decode, []

    def spy(batch):  # cancel the second request once both are decoding
        steps.append(batch.n_tokens)
        victim = next((r for r in decoder._active if r.seeds == [50, 51]), None)
        if len(steps) >= 6 and victim is not None and not victim.cancelled and victim.counts and victim.counts[0] >= 2:
            victim.cancelled = True
        return real(batch)

    decoder._decode = spy
    start = threading.Barrier(2)

    def one(seed, max_tokens):
        start.wait()
        return decoder.generate(prompt, 2, seeds=[seed, seed + 1], max_tokens=max_tokens, **kw)

    try:
        with ThreadPoolExecutor(2) as ex:
            kept, cancelled = ex.map(one, (10, 50), (64, 400))
        assert [r.completion_tokens for r in kept] == [64, 64]
        assert {r.finish_reason for r in cancelled} == {"cancelled"}
        assert all(r.completion_tokens < 20 for r in cancelled)
        assert not decoder._active and decoder._used_cells == 0
    finally:
        decoder.close()


def _beside_a_running_request(decoder, first, second, **kw):
    """Run ``first`` (decoding 200 tokens) and, once it is in flight, ``second``; both results."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("first", decoder.generate(first, 1, seeds=[1], max_tokens=200, **kw)))
    t.start()
    # wait until the first request is admitted (its prompt is then kept)
    wait_until(lambda: decoder._active, "the first request to be admitted", timeout_s=600, alive=t.is_alive,
               interval_s=0.001)
    out["second"] = decoder.generate(second, 1, seeds=[2], max_tokens=8, **kw)
    t.join()
    return out["first"], out["second"]


def _shared_prompts(llm):
    long = llm.tokenize(b"You are a careful solver. " * 12 + b"Question: what is 2 + 3?", add_bos=True, special=True)
    other = long[:40] + llm.tokenize(b" Something else entirely: name a colour.", add_bos=False, special=True)
    shared = next(i for i, (a, b) in enumerate(zip(long, other)) if a != b)
    return long, other, shared


def test_a_request_beside_others_reuses_the_prompt_prefix_it_shares_with_a_kept_prompt(tiny):
    """Prefix reuse (issue 32): a request admitted while another runs takes the KV cells of the prefix its
    prompt shares with the running request's (kept) prompt and evaluates only the rest; a request that
    then starts alone evaluates its whole prompt again (the seeded-determinism contract above)."""
    ask(tiny, 0, max_tokens=2)
    llm = tiny._members["smollm2-135m"].sampler.llm()
    decoder = BatchDecoder(llm, 1, lock=DECODE_LOCK)
    long, other, shared = _shared_prompts(llm)
    assert shared == 40 and len(other) > 45
    kw = dict(temperature=0.8, top_p=0.95, stops=[], n_ctx_limit=2048, ignore_eos=True)
    try:
        first, second = _beside_a_running_request(decoder, long, other, **kw)
        assert first[0].reused_tokens == 0  # admitted alone: its whole prompt evaluated
        assert second[0].reused_tokens == shared and second[0].completion_tokens == 8
        assert decoder.reused_tokens == shared
        assert [len(k.tokens) for k in decoder._kept] == [len(long), len(other)]
        assert decoder._kept_cells == len(long) + len(other)
        again = decoder.generate(other, 1, seeds=[2], max_tokens=8, **kw)  # nothing in flight: starts clean
        assert again[0].reused_tokens == 0 and [len(k.tokens) for k in decoder._kept] == [len(other)]
    finally:
        decoder.close()


def test_prefix_reuse_off_evaluates_every_prompt_whole(tiny):
    ask(tiny, 0, max_tokens=2)
    llm = tiny._members["smollm2-135m"].sampler.llm()
    decoder = BatchDecoder(llm, 1, lock=DECODE_LOCK)
    long, other, _ = _shared_prompts(llm)
    kw = dict(temperature=0.8, top_p=0.95, stops=[], n_ctx_limit=2048, ignore_eos=True, reuse_prefix=False)
    try:
        _, second = _beside_a_running_request(decoder, long, other, **kw)
        assert second[0].reused_tokens == 0 and decoder.reused_tokens == 0 and not decoder._kept
    finally:
        decoder.close()


def test_a_sliding_window_model_keeps_no_prompt(tiny):
    """Gemma 3 attends over a sliding window, whose cells llama.cpp overwrites once out of the window:
    its prompts are never kept, so nothing is reused."""
    tiny.sample("gemma3-270m", [{"role": "user", "content": "Hi."}], SamplingParams(n=1, max_tokens=1, seed=0))
    llm = tiny._members["gemma3-270m"].sampler.llm()
    decoder = BatchDecoder(llm, 1, lock=DECODE_LOCK)
    long, other, _ = _shared_prompts(llm)
    kw = dict(temperature=0.8, top_p=0.95, stops=[], n_ctx_limit=2048, ignore_eos=True)
    try:
        _, second = _beside_a_running_request(decoder, long, other, **kw)
        assert second[0].reused_tokens == 0 and not decoder._kept
    finally:
        decoder.close()


def test_kept_prompts_give_way_to_requests_and_are_bounded(tiny, monkeypatch):
    """At most CACHE_SLOTS prompts are kept (least recently used dropped first), and a request that needs
    cells held by kept prompts gets them instead of waiting; every request completes."""
    monkeypatch.setattr(_llama_batch, "CACHE_SLOTS", 2)
    monkeypatch.setattr(_llama_batch, "MIN_CELLS", 1024)
    ask(tiny, 0, max_tokens=2)
    llm = tiny._members["smollm2-135m"].sampler.llm()
    decoder = BatchDecoder(llm, 1, lock=DECODE_LOCK)
    prompts = [llm.tokenize(f"Question {q}: ".encode() * 20, add_bos=True, special=True) for q in range(5)]
    kw = dict(temperature=0.8, top_p=0.95, stops=[], n_ctx_limit=2048, ignore_eos=True)
    try:
        t = threading.Thread(target=lambda: decoder.generate(prompts[0], 1, seeds=[1], max_tokens=300, **kw))
        t.start()
        wait_until(lambda: decoder._active, "the first request to be admitted", timeout_s=600, alive=t.is_alive,
                   interval_s=0.001)
        with ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(lambda q: decoder.generate(prompts[q], 2, seeds=[q, q + 1], max_tokens=40, **kw),
                               range(1, 5)))
        t.join()
        assert [[r.completion_tokens for r in o] for o in outs] == [[40, 40]] * 4
        assert len(decoder._kept) <= 2 and decoder._kept_cells == sum(len(k.tokens) for k in decoder._kept)
    finally:
        decoder.close()


def test_a_request_waiting_for_cells_leaves_the_kept_prompts_alone(tiny, monkeypatch):
    """A request that cannot fit beside the running ones waits; dropping kept prompts would free nothing
    it needs, so they stay (a review found the cache wiped at every step while a request waited)."""
    monkeypatch.setattr(_llama_batch, "MIN_CELLS", 1024)
    ask(tiny, 0, max_tokens=2)
    llm = tiny._members["smollm2-135m"].sampler.llm()
    decoder = BatchDecoder(llm, 1, lock=DECODE_LOCK)
    long, other, _ = _shared_prompts(llm)
    kw = dict(temperature=0.8, top_p=0.95, stops=[], n_ctx_limit=2048, ignore_eos=True)
    real, kept_while_waiting = decoder._decode, []

    def spy(batch):
        if decoder._pending:
            kept_while_waiting.append(len(decoder._kept))
        return real(batch)

    decoder._decode = spy
    try:
        t = threading.Thread(target=lambda: decoder.generate(long, 1, seeds=[1], max_tokens=800, **kw))
        t.start()
        wait_until(lambda: decoder._active, "the first request to be admitted", timeout_s=600, alive=t.is_alive,
                   interval_s=0.001)
        out = decoder.generate(other, 1, seeds=[2], max_tokens=400, **kw)  # needs more cells than are free
        t.join()
        assert out[0].completion_tokens == 400
        assert kept_while_waiting and min(kept_while_waiting) == 1  # the running request's prompt stayed kept
    finally:
        decoder.close()


def test_the_environment_switch_turns_prefix_reuse_off(monkeypatch):
    from agora.models.llamacpp import LlamaCppChatModel

    monkeypatch.setenv("AGORA_LLAMA_PREFIX_CACHE", "0")
    assert LlamaCppChatModel(model_path="x.gguf").prefix_cache is False
    monkeypatch.delenv("AGORA_LLAMA_PREFIX_CACHE")
    assert LlamaCppChatModel(model_path="x.gguf").prefix_cache is True
