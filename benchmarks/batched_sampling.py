"""Batched sampling on the embedded llama.cpp pool: k samples of one prompt, batched vs sequential.

    python benchmarks/batched_sampling.py                      # both Qwen models, k = 1, 2, 4, 8
    python benchmarks/batched_sampling.py --models qwen2.5-coder-0.5b --ks 4 --max-tokens 128

For each model and k it prints, from one run on one prompt (the first GSM8K test problem of the
shipped sample, Agora's solver prompt), with the same seeds on both paths:

* **natural**: generated tokens per second of the sequential path (``batched=False``: k
  ``create_chat_completion`` calls one after the other) and of the batched path (the prompt once,
  k sequences in one batch), each sample stopping at its end token or ``--max-tokens``, and their
  ratio. Samples that stop early shrink the batch, so this is what a user gets.
* **fixed length**: every sequence decodes exactly ``--max-tokens`` tokens (end tokens ignored), on
  the batched decoder at batch 1 (k times) and at batch k, beside llama.cpp's own rate at batch k
  (``llama_decode`` alone, no sampling: the ceiling) and our batched rate as a share of it.

Threads: ``AGORA_LLAMA_THREADS`` (default: the cores this process may use). Run it on an idle
machine: another busy process halves llama.cpp's speed.
"""

from __future__ import annotations

import argparse
import time

from agora.models._llama_batch import decode_only_rate
from agora.models.llamacpp import _DECODE_LOCK, _decoder
from agora.models.pool import SamplingParams, builtin_pool
from agora.agents.prompts import solver_messages
from agora.tasks.loaders import load_problems
from agora.tasks.samples import sample_path


def rate(samples, seconds: float) -> float:
    return sum(s.completion_tokens for s in samples) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    parser.add_argument("--ks", default="1,2,4,8")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    pool = builtin_pool("default")
    path, fmt = sample_path("gsm8k")
    problem = load_problems(path, fmt, 1)[0]
    messages = solver_messages(problem, 2)
    print(f"prompt: GSM8K test #1 ({problem.id}), max {args.max_tokens} tokens, temperature {args.temperature}")
    for name in args.models.split(","):
        member = pool[name]
        model = member.chat_model
        llm = model.llm()
        tokens, _ = model._prompt_tokens(llm, [dict(m) for m in messages], None)
        for batched in (False, True):  # warm-up of both paths: load, first contexts
            model.batched = batched
            pool.sample(name, messages, SamplingParams(n=1, max_tokens=8, seed=1))
        print(f"\n{name} (threads {model.n_threads}, prompt {len(tokens)} tokens)")
        print(f"{'k':>2} | natural: seq tok/s  batched tok/s  ratio | fixed: b1 tok/s  bk tok/s  ratio  "
              f"llama.cpp bk tok/s  ours/llama.cpp")
        for k in ks:
            params = SamplingParams(n=k, temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed)
            model.batched = False
            t = time.perf_counter()
            seq, _ = pool.sample(name, messages, params)
            seq_rate = rate(seq, time.perf_counter() - t)
            model.batched = True
            t = time.perf_counter()
            bat, _ = pool.sample(name, messages, params)
            bat_rate = rate(bat, time.perf_counter() - t)
            with _DECODE_LOCK:
                dec = _decoder(llm, model.n_threads)
                kw = dict(max_tokens=args.max_tokens, temperature=args.temperature, top_p=0.95, stops=[],
                          n_ctx_limit=max(model.n_ctx, len(tokens) + args.max_tokens + 1), ignore_eos=True)
                t = time.perf_counter()
                one = [r for i in range(k) for r in dec.generate(tokens, 1, seeds=[args.seed + i], **kw)]
                b1 = sum(r.completion_tokens for r in one) / (time.perf_counter() - t)
                t = time.perf_counter()
                many = dec.generate(tokens, k, seeds=[args.seed + i for i in range(k)], **kw)
                bk = sum(r.completion_tokens for r in many) / (time.perf_counter() - t)
                raw = decode_only_rate(dec, tokens, k, args.max_tokens)
            print(f"{k:>2} | {seq_rate:18.1f}  {bat_rate:13.1f}  {bat_rate / seq_rate:5.2f} | "
                  f"{b1:14.1f}  {bk:8.1f}  {bk / b1:5.2f}  {raw:18.1f}  {bk / raw:14.2f}", flush=True)
        model.batched = True


if __name__ == "__main__":
    main()
