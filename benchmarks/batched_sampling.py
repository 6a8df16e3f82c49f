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

**--mode engines** (issue 29): the embedded engine one question at a time (llama-cpp-python, a
request's ``n`` samples batched: the baseline) against the same engine with 2, 4 and 8 questions in
flight (continuous batching: concurrent requests share decode batches, :mod:`agora.models._llama_batch`),
on the same GSM8K questions with the same seeds (question ``q``'s samples: ``seed + 1000·q + i``),
natural stops, each model in turn. A repeat runs every cell once (the order reversed on odd
repeats). Printed per model and cell: wall seconds, generated tokens per second, the speed-up
``wall(baseline) / wall(cell)`` as a mean over repeats with a 95 % t interval, and the accuracy (a
sample is right when its extracted answer is the gold one) paired by question: the cell's minus the
baseline's, mean over questions with a 95 % interval::

    python benchmarks/batched_sampling.py --mode engines                  # 16 questions × n 3, 3 repeats
    python benchmarks/batched_sampling.py --mode engines --models qwen2.5-coder-0.5b --questions 1 \
        --max-tokens 16 --levels 1 --repeats 1                            # smoke

Threads: ``AGORA_LLAMA_THREADS`` (default: the cores this process may use). Run it on an idle
machine: another busy process halves llama.cpp's speed.

The ``server`` rows of benchmarks/README.md (llama.cpp's server in process; issue 29) were measured
with this script at commit f9a60a8, where it can be rerun (``git show f9a60a8:benchmarks/batched_sampling.py``,
with that commit's ``models/llamacpp_server.py`` and its ``server-engine`` extra installed). That
engine was removed on 2026-12-04, so ``--engines`` takes ``native`` only (kept so the recorded
commands still run).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agora.models._llama_batch import decode_only_rate
from agora.models.llamacpp import DECODE_LOCK, batch_decoder
from agora.models.pool import SamplingParams, builtin_pool
from agora.agents.prompts import solver_messages
from agora.tasks.loaders import load_problems
from agora.tasks.samples import sample_path


def rate(samples, seconds: float) -> float:
    return sum(s.completion_tokens for s in samples) / seconds


#: The GSM8K test set beside the checkout (the shipped sample has 5 questions only).
SHARED_GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "test.jsonl"


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % Student-t interval of ``values`` (the interval is the mean alone for one value)."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def run_questions(model, problems, messages, *, n: int, in_flight: int, max_tokens: int, temperature: float,
                  seed: int) -> tuple[float, list[list]]:
    """Wall seconds and, per question, its ``n`` generations (``AIMessage``), ``in_flight`` questions at once."""
    from agora.models._chat import to_messages

    def ask(q: int) -> list:
        result = model.generate([to_messages(messages[q])], n=n, temperature=temperature, max_tokens=max_tokens,
                                seed=seed + 1000 * q)
        return [g.message for g in result.generations[0]]

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        answers = list(pool.map(ask, range(len(problems))))
    return time.perf_counter() - start, answers


def engines(args) -> None:
    """``--mode engines``: the embedded engine with 1 and more questions in flight (see the module docstring)."""
    from agora.models.builtins import BUILTINS, resolve_builtin
    from agora.models.llamacpp import LlamaCppChatModel
    from agora.tasks.answers import extract_answer
    from agora.tasks.comparison import is_correct

    levels = [int(x) for x in args.levels.split(",")]
    data = Path(args.data) if args.data else (SHARED_GSM8K if SHARED_GSM8K.is_file() else None)
    path, fmt = (data, "gsm8k") if data else sample_path("gsm8k")
    problems = load_problems(path, fmt, args.questions)
    messages = [solver_messages(p, 2) for p in problems]
    print(f"{len(problems)} GSM8K questions ({path}) × n {args.n}, temperature {args.temperature}, max "
          f"{args.max_tokens} tokens, natural stops, seeds {args.seed} + 1000·q + i; in flight {levels}; "
          f"{args.repeats} repeat(s); threads {os.environ.get('AGORA_LLAMA_THREADS', 'all cores')}")
    kw = dict(n=args.n, max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)

    def right(problem, gens) -> list[float]:
        return [float(is_correct(extract_answer(m.content, problem.kind, problem.n_choices), problem.gold,
                                 problem.kind)) for m in gens]

    unknown = {e.strip() for e in args.engines.split(",") if e.strip()} - {"native"}
    if unknown:
        raise SystemExit(f"--engines: unknown {sorted(unknown)}: only native remains (the server engine was "
                         f"removed; see the module docstring)")
    # the baseline first: the engine with one question at a time
    cells: list[tuple[str, int]] = [("native", 1)] + [("native", lv) for lv in levels if lv > 1]
    label = {"native": "llama-cpp-python"}  # the table's engine column, as in benchmarks/README.md
    for name in args.models.split(","):
        gguf = resolve_builtin(f"builtin:{name}")
        model = LlamaCppChatModel(model_path=gguf, model_name=name, prompt_format=BUILTINS[name].prompt_format,
                                  n_ctx=4096)
        # room for every question in flight at once (else the first busy cell waits for KV cells
        # until the context grows, which it does only when nothing is in flight)
        batch_decoder(model.llm(), model.n_threads).reserve(
            max(levels) * (max(len(model.llm().tokenize(str(m).encode())) for m in messages) + args.n * args.max_tokens))
        run_questions(model, problems[:1], messages[:1], in_flight=1, **dict(kw, max_tokens=4))  # warm-up: first context
        walls: dict[tuple, list[float]] = {c: [] for c in cells}
        tokens: dict[tuple, list[int]] = {c: [] for c in cells}
        acc: dict[tuple, list[list[float]]] = {c: [] for c in cells}  # [repeat][question]
        base = ("native", 1)
        for r in range(args.repeats):
            for cell in (cells if r % 2 == 0 else cells[::-1]):
                engine, in_flight = cell
                wall, answers = run_questions(model, problems, messages, in_flight=in_flight, **kw)
                walls[cell].append(wall)
                tokens[cell].append(sum(m.usage_metadata["output_tokens"] for gens in answers for m in gens))
                acc[cell].append([statistics.fmean(right(p, g)) for p, g in zip(problems, answers)])
                print(f"  {name} repeat {r + 1} {label[engine]} ×{in_flight}: {wall:.1f} s, "
                      f"{tokens[cell][-1]} tokens", flush=True)
        base_acc = [statistics.fmean(col) for col in zip(*acc[base])]  # per question, over repeats
        print(f"\n{name} (threads {model.n_threads})")
        print(f"{'engine':<16} {'in flight':>9} {'wall s':>8} {'tok/s':>7} {'speed-up [95% CI]':>22} "
              f"{'accuracy':>9} {'Δ acc vs 1 in flight [95% CI]':>29}")
        mean_acc = statistics.fmean(base_acc)
        print(f"{'llama-cpp-python':<16} {1:>9} {statistics.fmean(walls[base]):8.1f} "
              f"{sum(tokens[base]) / sum(walls[base]):7.1f} {'1 (baseline)':>22} {mean_acc:9.3f} {'':>26}")
        for cell in cells[1:]:
            engine, lv = cell
            ratio = t_interval([a / b for a, b in zip(walls[base], walls[cell])])
            cell_acc = [statistics.fmean(col) for col in zip(*acc[cell])]
            diff = t_interval([a - b for a, b in zip(cell_acc, base_acc)])
            print(f"{label[engine]:<16} {lv:>9} {statistics.fmean(walls[cell]):8.1f} "
                  f"{sum(tokens[cell]) / sum(walls[cell]):7.1f} "
                  f"{ratio[0]:8.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}]{'':>2} {statistics.fmean(cell_acc):9.3f} "
                  f"{diff[0]:+10.3f} [{diff[1]:+.3f}, {diff[2]:+.3f}]", flush=True)
        if decoder_peak := getattr(getattr(model.llm(), "_agora_decoder", None), "peak_sequences", 0):
            print(f"(the engine decoded at most {decoder_peak} sequences in one step)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("samples", "engines"), default="samples",
                        help="samples: k samples of one prompt, batched vs sequential (issue 14); engines: the "
                             "embedded engine with 1 and more questions in flight (issue 29)")
    parser.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    parser.add_argument("--ks", default="1,2,4,8", help="samples mode: samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--levels", default="1,2,4,8", help="engines mode: questions in flight")
    parser.add_argument("--engines", default="native",
                        help="engines mode: native (llama-cpp-python, continuous batching across the questions in "
                             "flight) is the only engine left; the baseline is native with 1 in flight")
    parser.add_argument("--questions", type=int, default=16, help="engines mode: GSM8K test questions (the first)")
    parser.add_argument("--n", type=int, default=3, help="engines mode: samples per question")
    parser.add_argument("--repeats", type=int, default=3, help="engines mode: repeats (the speed-up's interval)")
    parser.add_argument("--data", default=None, help="engines mode: a GSM8K jsonl (default: ../shared/data/gsm8k/"
                                                     "test.jsonl, else the shipped sample)")
    args = parser.parse_args()
    if args.mode == "engines":
        engines(args)
        return
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
            with DECODE_LOCK:
                dec = batch_decoder(llm, model.n_threads)
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
