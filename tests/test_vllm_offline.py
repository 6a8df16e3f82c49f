"""The in-process vLLM backend's micro-batching (no vLLM needed) and pool-file validation."""

import threading

import pytest

from agora.models.pool import PoolConfigError, load_pool
from agora.models.vllm_offline import MicroBatcher, VLLMChatModel


def test_concurrent_submissions_are_batched_and_each_gets_its_own_results():
    started, release = threading.Event(), threading.Event()
    batches = []

    def run(items):
        batches.append(list(items))
        if len(batches) == 1:  # hold the first batch until the others are waiting
            started.set()
            release.wait(5)
        return [f"out:{x}" for x in items]

    batcher = MicroBatcher(run)
    results = {}

    def call(name, items):
        results[name] = batcher.submit(items)

    first = threading.Thread(target=call, args=("a", ["a0"]))
    first.start()
    started.wait(5)
    others = [threading.Thread(target=call, args=(n, [f"{n}0", f"{n}1"])) for n in "bcd"]
    for t in others:
        t.start()
    while len(batcher._waiting) < 6:  # the three callers have queued their items
        threading.Event().wait(0.01)
    release.set()
    for t in [first, *others]:
        t.join(5)
    assert batcher.batch_sizes == [1, 6]
    assert results == {"a": ["out:a0"], **{n: [f"out:{n}0", f"out:{n}1"] for n in "bcd"}}


def test_a_failing_batch_fails_every_caller_in_it():
    batcher = MicroBatcher(lambda items: (_ for _ in ()).throw(RuntimeError("engine died")))
    with pytest.raises(RuntimeError, match="engine died"):
        batcher.submit(["x"])
    short = MicroBatcher(lambda items: [])
    with pytest.raises(RuntimeError, match="batch of 1 gave 0 results"):
        short.submit(["x"])


def test_pool_file_vllm_entry(tmp_path):
    f = tmp_path / "pool.toml"
    f.write_text('[[models]]\nname = "g"\nbackend = "vllm"\nmodel = "/hf/gemma"\nprompt_format = "fewshot"\n'
                 'vllm_args = {max_model_len = 1024}\n')
    chat = load_pool(f)["g"].chat_model
    assert isinstance(chat, VLLMChatModel)
    assert (chat.model, chat.prompt_format, chat.engine_args) == ("/hf/gemma", "fewshot", {"max_model_len": 1024})
    f.write_text('[[models]]\nname = "g"\nbackend = "vllm"\n')
    with pytest.raises(PoolConfigError, match="field 'model'"):
        load_pool(f)
