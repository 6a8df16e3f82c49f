"""A seeded llama.cpp request gives the same text whatever ran before it (slow: real Gemma-3-270M).

llama.cpp reuses the cached prefix of the previous prompt; a reused prefix gives slightly different
logits than a fresh prefill. Before each request started from an empty context, this question's
seeded answer changed with the request that preceded it (found when two COMED runs disagreed on
MoA and debate answers with the same seeds).
"""

import pytest

from agora.models.pool import SamplingParams, builtin_pool
from agora.agents.prompts import solver_messages
from agora.tasks.loaders import load_problems


@pytest.mark.slow
def test_seeded_request_does_not_depend_on_the_previous_request(shared_data):
    pool = builtin_pool("tiny")
    problem = load_problems(shared_data / "mmlu" / "mmlu_dev.jsonl", "mc", 7)[6]
    messages = solver_messages(problem, 2)
    asked = SamplingParams(n=1, temperature=0.7, max_tokens=40, seed=777)
    before = SamplingParams(n=1, temperature=0.7, max_tokens=40, seed=5)

    pool.sample("gemma3-270m", messages, before)  # the same prompt ran just before: its prefix is cached
    after_same = pool.sample("gemma3-270m", messages, asked)[0][0].text
    pool.sample("gemma3-270m", [{"role": "user", "content": "Say hello."}], before)  # an unrelated prompt
    after_other = pool.sample("gemma3-270m", messages, asked)[0][0].text
    assert after_same and after_same == after_other
