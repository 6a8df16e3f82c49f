"""llama.cpp's server in process (models/llamacpp_server.py, issue 29): per-sample tokens, seeds,
logprobs, JSON schemas, few-shot prompts, LoRA adapters, concurrent requests, a clean exit.

The slow tests load the tiny built-in models (SmolLM2-135M, Gemma-3-270M) in xllamacpp's server;
run them one file at a time with ``AGORA_LLAMA_THREADS=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from agora.models._chat import to_messages
from agora.models.errors import ModelUnavailableError
from agora.models.llamacpp_server import (
    DEFAULT_SLOTS,
    LlamaCppServerChatModel,
    ServerReplyError,
    _collect,
    default_slots,
    server_engine_selected,
)

# ----------------------------------------------------------------------------- no model needed


def test_the_engine_and_its_slots_come_from_the_environment(monkeypatch):
    monkeypatch.delenv("AGORA_LLAMA_ENGINE", raising=False)
    monkeypatch.delenv("AGORA_LLAMA_SLOTS", raising=False)
    assert not server_engine_selected() and default_slots() == DEFAULT_SLOTS
    monkeypatch.setenv("AGORA_LLAMA_ENGINE", "server")
    monkeypatch.setenv("AGORA_LLAMA_SLOTS", "12")
    assert server_engine_selected() and default_slots() == 12
    monkeypatch.setenv("AGORA_LLAMA_ENGINE", "vllm")
    with pytest.raises(ValueError, match="AGORA_LLAMA_ENGINE='vllm'"):
        server_engine_selected()
    monkeypatch.setenv("AGORA_LLAMA_SLOTS", "0")
    with pytest.raises(ValueError, match="AGORA_LLAMA_SLOTS='0'"):
        default_slots()


def test_the_pool_builds_the_server_engine_when_it_is_selected(monkeypatch, tmp_path):
    from agora.models.llamacpp import LlamaCppChatModel

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    fields = dict(model_path=str(gguf), model_name="m", prompt_format="fewshot", n_ctx=1024, lora_path=None)
    monkeypatch.delenv("AGORA_LLAMA_ENGINE", raising=False)
    assert type(LlamaCppChatModel(**fields)) is LlamaCppChatModel
    monkeypatch.setenv("AGORA_LLAMA_ENGINE", "server")
    model = LlamaCppChatModel(**fields, batched=True)  # the current engine's own field is dropped
    assert type(model) is LlamaCppServerChatModel
    assert (model.model_path, model.model_name, model.prompt_format, model.n_ctx) == (str(gguf), "m", "fewshot", 1024)


def test_each_choice_gets_its_own_usage_from_the_stream():
    """A chat stream sends a choice's usage in a chunk of its own after its last chunk; a
    completion stream in the last chunk; the non-streamed usage would count choice 0 only."""
    chat = [
        {"choices": [{"index": 1, "delta": {"content": "Hi"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hello"}}]},
        {"choices": [{"index": 1, "delta": {"content": "!"}}], "timings": {"prompt_ms": 30.0}},
        {"choices": [{"index": 1, "finish_reason": "stop", "delta": {}}]},
        {"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 9}},
        {"choices": [{"index": 0, "delta": {"content": " there"}}], "timings": {"prompt_ms": 31.0}},
        {"choices": [{"index": 0, "finish_reason": "length", "delta": {}}]},
        {"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 9}},
    ]
    got = _collect(chat, 2, "m.gguf")
    assert [(c["text"], c["finish_reason"], c["completion_tokens"], c["prompt_tokens"]) for c in got] == [
        ("Hello there", "length", 4, 9), ("Hi!", "stop", 3, 9)]
    completion = [{"choices": [{"index": 0, "text": " 4"}]},
                  {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}],
                   "usage": {"completion_tokens": 2, "prompt_tokens": 5}}]
    assert _collect(completion, 1, "m.gguf")[0]["completion_tokens"] == 2
    with pytest.raises(ServerReplyError, match="HTTP 400: Field 'n'") as refused:
        _collect([{"error": {"code": 400, "message": "Field 'n': Value must be between 1 <= value <= 4"}}], 9, "m")
    assert refused.value.status_code == 400  # classified by agora.models.retry like any server's 400
    with pytest.raises(ServerReplyError, match="ended choice 0 of 2 without"):
        _collect(chat[:5], 2, "m.gguf")


def test_a_file_that_is_not_a_gguf_is_unavailable_not_a_crash(tmp_path):
    pytest.importorskip("xllamacpp")
    bad = tmp_path / "bad.gguf"
    bad.write_text("not a model")
    model = LlamaCppServerChatModel(model_path=str(bad))
    with pytest.raises(ModelUnavailableError, match="not a GGUF file"):
        model.generate([to_messages([{"role": "user", "content": "hi"}])])
    with pytest.raises(ModelUnavailableError, match="cannot read the model"):
        LlamaCppServerChatModel(model_path=str(tmp_path / "missing.gguf")).engine()


# ----------------------------------------------------------------------------- real models (slow)

QUESTION = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("xllamacpp")
    from agora.models.builtins import resolve_builtin

    return LlamaCppServerChatModel(model_path=resolve_builtin("builtin:smollm2"), model_name="smollm2", n_parallel=4)


@pytest.fixture(scope="module")
def vocab(smol):
    """SmolLM2's tokenizer, from llama-cpp-python (vocabulary only)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=smol.model_path, vocab_only=True, verbose=False)


def sample(model, messages=QUESTION, **kwargs):
    result = model.generate([to_messages(messages)], **kwargs)
    return [g.message for g in result.generations[0]]


@pytest.mark.slow
def test_n_samples_each_with_its_own_exact_token_count(smol, vocab):
    out = sample(smol, n=3, temperature=0.9, max_tokens=24, seed=11, logprobs=0)
    assert len(out) == 3
    counts = [m.usage_metadata["output_tokens"] for m in out]
    assert len(set(counts)) > 1  # not the first choice's count repeated (xllamacpp's own usage)
    for m in out:
        meta, usage = m.response_metadata, m.usage_metadata
        assert usage["input_tokens"] == out[0].usage_metadata["input_tokens"] > 0
        text_tokens = len(vocab.tokenize(m.content.encode(), add_bos=False, special=False))
        if meta["finish_reason"] == "length":
            assert usage["output_tokens"] == 24
        else:  # ended on its end-of-generation token, which llama.cpp counts too
            assert meta["finish_reason"] == "stop" and usage["output_tokens"] == text_tokens + 1
        assert meta["batch_size"] == 3 and 0 < meta["latency_s"] <= meta["request_latency_s"]
    assert sum(m.response_metadata["latency_s"] for m in out) == pytest.approx(out[0].response_metadata["request_latency_s"])


@pytest.mark.slow
def test_the_prompt_count_is_the_chat_templates_tokens(smol, vocab):
    out = sample(smol, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                 max_tokens=2, seed=0)
    rendered = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                "<|im_start|>assistant\n")  # SmolLM2's ChatML template
    assert out[0].usage_metadata["input_tokens"] == len(vocab.tokenize(rendered.encode(), add_bos=False, special=True))


@pytest.mark.slow
def test_a_seeded_request_run_alone_gives_the_same_samples(smol):
    params = dict(n=3, temperature=0.9, max_tokens=20, seed=5)
    first = [m.content for m in sample(smol, **params)]
    sample(smol, [{"role": "user", "content": "Say hello."}], n=2, max_tokens=8, seed=3)  # something else between
    assert [m.content for m in sample(smol, **params)] == first
    assert len(set(first)) > 1  # three seeds, not three copies
    greedy = [m.content for m in sample(smol, n=2, temperature=0, max_tokens=12, seed=0)]
    assert greedy[0] == greedy[1]


@pytest.mark.slow
def test_a_request_larger_than_the_slots_runs_in_chunks_with_the_seeds_continuing(smol):
    out = sample(smol, n=6, temperature=0.9, max_tokens=6, seed=2)  # 4 slots: 4 + 2
    assert len(out) == 6 and [m.response_metadata["batch_size"] for m in out] == [4] * 4 + [2] * 2
    tail = sample(smol, n=2, temperature=0.9, max_tokens=6, seed=6)  # seeds 6, 7: choices 4, 5 above
    assert [m.content for m in tail] == [m.content for m in out[4:]]


@pytest.mark.slow
def test_logprobs_sum_and_top_alternatives(smol):
    out = sample(smol, n=2, temperature=0.7, max_tokens=8, seed=1, logprobs=2)
    for m in out:
        meta = m.response_metadata
        tops = meta["top_logprobs"]
        assert meta["logprob"] < 0 and 1 <= len(tops) <= m.usage_metadata["output_tokens"]
        assert all(1 <= len(t) <= 2 and all(v <= 0 for v in t.values()) for t in tops)
    plain = sample(smol, max_tokens=4, seed=1)[0].response_metadata
    assert "logprob" not in plain and "top_logprobs" not in plain


@pytest.mark.slow
def test_a_json_schema_reply_parses(smol):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    out = sample(smol, [{"role": "user", "content": "What is 2 + 2? Reply in JSON."}], n=2, max_tokens=40, seed=3,
                 json_schema=schema)
    for m in out:
        reply = json.loads(m.content)
        assert set(reply) == {"answer"} and isinstance(reply["answer"], int)


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_is_refused_as_the_current_engine_words_it(smol):
    with pytest.raises(ServerReplyError, match=r"Requested tokens \(\d+\) exceed context window of 2048") as refused:
        sample(smol, [{"role": "user", "content": "word " * 3000}], max_tokens=4)
    assert refused.value.status_code == 400
    assert sample(smol, max_tokens=3, seed=1)[0].content  # the server still answers


@pytest.mark.slow
def test_concurrent_requests_from_threads_all_complete(smol):
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            results[i] = sample(smol, [{"role": "user", "content": f"Count to {i + 2}."}], n=2, temperature=0.8,
                                max_tokens=12, seed=i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]  # 8 sequences on 4 slots
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and sorted(results) == [0, 1, 2, 3]
    assert all(len(r) == 2 and all(m.usage_metadata["output_tokens"] > 0 for m in r) for r in results.values())


@pytest.mark.slow
def test_fewshot_prompts_on_gemma_stop_before_the_next_question():
    pytest.importorskip("xllamacpp")
    from agora.agents.prompts import solver_messages
    from agora.models.builtins import resolve_builtin
    from agora.tasks.loaders import load_problems
    from agora.tasks.samples import sample_path

    gemma = LlamaCppServerChatModel(model_path=resolve_builtin("builtin:gemma3-270m"), model_name="gemma",
                                    prompt_format="fewshot", n_parallel=2)
    problem = load_problems(*sample_path("gsm8k"), 1)[0]
    out = sample(gemma, solver_messages(problem, 2), n=2, max_tokens=24, seed=1)
    assert len(out) == 2 and all("Question:" not in m.content for m in out)
    assert all(m.usage_metadata["input_tokens"] > 50 and m.usage_metadata["output_tokens"] > 0 for m in out)


def _random_lora(folder, base, r: int = 8, std: float = 0.1):
    """A peft LoRA folder (q and k projections of every layer, random A and B) for a llama-architecture
    GGUF, written with numpy as tests/test_lora_gguf.py's ``peft_folder`` does, sized from the GGUF header."""
    np = pytest.importorskip("numpy")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from agora.models.lora_gguf import read_gguf_header

    header = read_gguf_header(base)
    rng = np.random.default_rng(0)
    tensors = {}
    for i in range(int(header.get("llama.block_count"))):
        for proj, gguf_name in (("q_proj", "attn_q"), ("k_proj", "attn_k")):
            w_in, w_out = header.shapes[f"blk.{i}.{gguf_name}.weight"]
            prefix = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = (std * rng.standard_normal((r, w_in))).astype(np.float32)
            tensors[f"{prefix}.lora_B.weight"] = (std * rng.standard_normal((w_out, r))).astype(np.float32)
    folder.mkdir(parents=True)
    safetensors_numpy.save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": r, "lora_alpha": 2 * r,
                                                            "bias": "none", "target_modules": ["q_proj", "k_proj"]}))
    return folder


@pytest.mark.slow
def test_a_lora_adapter_is_applied(smol, tmp_path):
    pytest.importorskip("gguf")
    from agora.models.lora_gguf import check_lora_gguf, export_lora_gguf

    adapter = export_lora_gguf(_random_lora(tmp_path / "adapter", smol.model_path), smol.model_path)
    check_lora_gguf(adapter, smol.model_path)
    tuned = LlamaCppServerChatModel(model_path=smol.model_path, model_name="tuned", lora_path=str(adapter),
                                    n_parallel=2)
    base_text = sample(smol, temperature=0, max_tokens=12, seed=0)[0].content
    tuned_text = [m.content for m in sample(tuned, n=2, temperature=0, max_tokens=12, seed=0)]
    assert tuned_text[0] == tuned_text[1] != base_text
    off = LlamaCppServerChatModel(model_path=smol.model_path, lora_path=str(adapter), lora_scale=0.0, n_parallel=2)
    assert sample(off, temperature=0, max_tokens=12, seed=0)[0].content == base_text  # scale 0: the model alone


@pytest.mark.slow
def test_the_interpreter_exits_cleanly_after_a_refused_request_and_ctrl_c_still_interrupts():
    """One process hung at exit after an HTTP 400 when the server was left to the garbage collector;
    llama.cpp's server must not take Ctrl-C away from Python either."""
    pytest.importorskip("xllamacpp")
    script = textwrap.dedent("""
        import os, signal, time
        signal.signal(signal.SIGINT, signal.default_int_handler)  # (a background job starts with SIGINT ignored)
        from agora.models._chat import to_messages
        from agora.models.builtins import resolve_builtin
        from agora.models.llamacpp_server import LlamaCppServerChatModel, ServerReplyError
        m = LlamaCppServerChatModel(model_path=resolve_builtin("builtin:smollm2"), n_parallel=2)
        try:
            m.generate([to_messages([{"role": "user", "content": "hi"}])], n=1, max_tokens=3, seed=1)
            m.generate([to_messages([{"role": "user", "content": "word " * 3000}])], max_tokens=3)
        except ServerReplyError as exc:
            print("refused:", exc)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(2)
            print("no interrupt")
        except KeyboardInterrupt:
            print("interrupted")
        print("bye", flush=True)
    """)
    env = {**os.environ, "AGORA_LLAMA_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused:" in out.stdout and "interrupted" in out.stdout and out.stdout.rstrip().endswith("bye")


@pytest.mark.slow
def test_both_engines_give_the_same_next_token_distribution_with_and_without_the_lora(smol, tmp_path):
    """The server applies a LoRA as today's engine (llama-cpp-python) does: the top next-token
    log-probabilities after one prompt agree, with the adapter and without it (the self-improvement
    benchmark's serve check reads the same adapter through either engine)."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from agora.models.llamacpp import _load
    from agora.models.lora_gguf import export_lora_gguf

    adapter = str(export_lora_gguf(_random_lora(tmp_path / "adapter", smol.model_path, std=0.1), smol.model_path))
    question = [{"role": "user", "content": "Tom has 3 apples and buys 4 more. How many apples does Tom have?"}]
    prompt = "Question: Tom has 3 apples and buys 4 more. How many apples does Tom have?\nAnswer:"
    top: dict = {}
    for lora in (None, adapter):
        server = LlamaCppServerChatModel(model_path=smol.model_path, prompt_format="fewshot", lora_path=lora,
                                         n_ctx=512, n_parallel=1)
        first = sample(server, question, temperature=0, max_tokens=1, seed=0, logprobs=10)[0]
        got = first.response_metadata["top_logprobs"][0]  # {token: logprob}, the 10 likeliest
        llm = _load(smol.model_path, 512, 1, lora)
        llm.reset()
        llm.eval(llm.tokenize(prompt.encode(), add_bos=True, special=True))
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float64)
        logp = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        want = {llm.detokenize([int(t)]).decode("utf-8", errors="replace"): float(logp[t])
                for t in np.argsort(-logp)[:5]}
        assert list(got)[:3] == list(want)[:3], (lora, got, want)
        for token, value in want.items():  # the builds differ (portable AVX2 vs native): ≈ 0.1 apart
            assert got[token] == pytest.approx(value, abs=0.2), (lora, token, got, want)
        top[lora] = (got, want)
    (base_got, base_want), (tuned_got, tuned_want) = top[None], top[adapter]
    first_token = next(iter(base_want))
    # the adapter moves the likeliest token far more than the builds differ, the same way on both
    assert base_got[first_token] - tuned_got[first_token] > 0.3
    assert base_want[first_token] - tuned_want[first_token] > 0.3
