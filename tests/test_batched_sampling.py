"""Batched llama.cpp sampling (slow: real embedded models).

One request for n samples evaluates the prompt once and decodes the n sequences together; the same
seeds give the same samples, whatever ran before, and a request larger than the batch limit runs
in chunks with the seeds continuing.
"""

import pytest

from agora.models import _llama_batch
from agora.models.pool import SamplingParams, builtin_pool
from agora.agents.prompts import solver_messages
from agora.tasks.loaders import load_problems
from agora.tasks.samples import sample_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny():
    return builtin_pool("tiny")


def texts(pool, model, messages, params):
    samples, records = pool.sample(model, messages, params)
    assert len(records) == params.n and all(r["error"] is None for r in records)  # one trace row per sample
    return [s.text for s in samples], samples


def test_same_seeds_same_samples_whatever_ran_before(tiny):
    messages = [{"role": "user", "content": "Name three colours."}]
    params = SamplingParams(n=4, temperature=0.9, max_tokens=24, seed=11)
    first, samples = texts(tiny, "smollm2-135m", messages, params)
    tiny.sample("smollm2-135m", [{"role": "user", "content": "Say hello."}], SamplingParams(n=2, max_tokens=8, seed=3))
    again, _ = texts(tiny, "smollm2-135m", messages, params)
    assert first == again
    assert len(set(first)) > 1  # four seeds, not four copies of one sample
    assert all(s.completion_tokens > 0 and s.prompt_tokens > 0 for s in samples)
    wall = samples[0].latency_s  # shares of one request: they add up to its wall time
    assert sum(s.latency_s for s in samples) > wall > 0


def test_a_sample_depends_on_its_seed_not_on_its_batch(tiny):
    messages = [{"role": "user", "content": "Write one word."}]
    greedy1, _ = texts(tiny, "smollm2-135m", messages, SamplingParams(n=1, temperature=0, max_tokens=12, seed=0))
    greedy3, _ = texts(tiny, "smollm2-135m", messages, SamplingParams(n=3, temperature=0, max_tokens=12, seed=0))
    assert greedy3 == greedy1 * 3  # greedy: every sequence of the batch is the greedy continuation


def test_requests_larger_than_the_batch_run_in_chunks(tiny, monkeypatch):
    messages = [{"role": "user", "content": "Count to three."}]
    params = SamplingParams(n=3, temperature=0.8, max_tokens=10, seed=5)
    whole, _ = texts(tiny, "smollm2-135m", messages, params)
    monkeypatch.setattr(_llama_batch, "MAX_SEQ", 2)
    chunked, samples = texts(tiny, "smollm2-135m", messages, params)
    assert len(chunked) == 3 and chunked[:2] == whole[:2]  # seeds continue across chunks
    assert all(s.finish_reason in ("stop", "length") for s in samples)


def test_fewshot_prompts_batch_too(tiny):
    problem = load_problems(*sample_path("gsm8k"), 1)[0]
    out, samples = texts(tiny, "gemma3-270m", solver_messages(problem, 2), SamplingParams(n=2, max_tokens=16, seed=1))
    assert len(out) == 2 and all("Question:" not in t for t in out)  # the transcript's stop cuts the next turn


def test_a_prompt_longer_than_the_context_fails_the_call_not_the_process(tiny):
    long = [{"role": "user", "content": "word " * 5000}]
    samples, records = tiny.sample("smollm2-135m", long, SamplingParams(n=2, max_tokens=8, seed=1))
    assert samples == [] and records and all("exceed context window" in r["error"] for r in records)


def test_run_align_on_the_default_qwen_pool_traces_every_call(tmp_path):
    """The main job on the real default pool: the shipped GSM8K sample, every model call a row."""
    import os
    import subprocess
    import sys

    import sqlite_utils

    db = tmp_path / "t.db"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "160"}
    out = subprocess.run([sys.executable, "-m", "agora.cli", "run", "align", "--limit", "2", "--samples", "2",
                          "--max-tokens", "96", "--db", str(db), "--run-id", "qwen"],
                         capture_output=True, text=True, env=env, timeout=1200)
    assert out.returncode == 0, out.stderr
    assert "2 gsm8k problems" in out.stdout, out.stdout
    assert "self_consistency" in out.stdout, out.stdout
    results = list(sqlite_utils.Database(db)["results"].rows)
    assert {r["method"] for r in results} == {"align", "single_agent", "self_consistency", "best_of_n"}
    assert len(results) == 2 * 4
    calls = list(sqlite_utils.Database(db)["model_calls"].rows)
    assert len(calls) == 2 * 2 * 2  # questions x agents x samples
    assert {c["model"] for c in calls} == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    assert all(c["error"] is None and c["completion_tokens"] > 0 for c in calls)


def test_the_levels_side_by_side_runs_in_a_smoke_configuration():
    """``benchmarks/batched_sampling.py --mode engines`` (issue 29) on SmolLM2: the embedded engine at
    two levels in flight (one question at a time is the baseline; with 2 in flight it batches across
    the questions), the table with speed-up and paired accuracy columns; the removed server engine
    is refused by name."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "batched_sampling.py"
    path, _ = sample_path("gsm8k")
    env = {**os.environ, "AGORA_LLAMA_THREADS": "1"}
    args = [sys.executable, str(script), "--mode", "engines", "--models", "smollm2", "--questions", "2",
            "--max-tokens", "8", "--levels", "1,2", "--repeats", "1", "--data", str(path)]
    out = subprocess.run(args + ["--engines", "native"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("llama-cpp-python")]
    assert [r[:2] for r in rows] == [["llama-cpp-python", "1"], ["llama-cpp-python", "2"]], out.stdout
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows)  # wall seconds, tokens per second
    assert float(rows[1][4]) > 0  # the speed-up of 2 in flight over the baseline
    assert "2 GSM8K questions" in out.stdout and "speed-up" in out.stdout
    assert "sequences in one step" in out.stdout
    # 300 s: the script imports Agora and llama.cpp before it refuses (an agora process took 73 s to start on a busy machine)
    refused = subprocess.run(args + ["--engines", "native,server"], capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode != 0 and "only native remains" in refused.stderr
