"""Prompt-prefix reuse on the embedded llama.cpp pool, on the request stream of a recorded bench run.

A COMED run of the bench (MoA's aggregator, debate's rounds, the council's reviews and chair, COMED's own
steps) evaluates about 6 prompt tokens per generated token, and every prompt of a question repeats its
system prompt, few-shot turns and question. The batch decoder lets a request admitted beside others reuse
the KV cells of the prefix it shares with a kept prompt (:mod:`agora.models._llama_batch`). This replays
the requests a recorded run made, question by question in their recorded order and with their recorded
messages, parameters and seeds, with ``--in-flight`` questions at once, first with reuse on and then off
(the order alternates between repeats), and prints per repeat: wall seconds, prompt tokens, prompt tokens
reused, generated tokens; then the speed-up ``wall(off) / wall(on)``, mean over repeats with a 95 % t
interval. The samples differ a little between the two (a reused prefix's logits differ in their last
bits), so generated tokens differ too; both are printed.

    python benchmarks/prefix_reuse.py                                    # ref-2's GSM8K COMED run, 8 questions
    python benchmarks/prefix_reuse.py --run ref-2:arc:comed --questions 8 --repeats 2
    python benchmarks/prefix_reuse.py --db /work/refrun/bench-ref2.db    # a trace DB instead of the bundle

Default source: the committed bundle ``benchmarks/bench-ref2/ref-2.agora.jsonl.gz`` (imported into a
temporary DB). Run it on an idle machine: another busy process halves llama.cpp's speed.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agora.models.pool import SamplingParams, builtin_pool

BUNDLE = Path(__file__).resolve().parent / "bench-ref2" / "ref-2.agora.jsonl.gz"


def requests_of(db: Path, run: str, questions: int) -> list[list[dict]]:
    """The first ``questions`` questions' requests (one per ``request_id``), each question's in recorded order."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("select question_id, request_id, model, messages, params, min(created_at) t from model_calls "
                       "where run_id = ? and error is null group by request_id order by t", [run]).fetchall()
    if not rows:
        raise SystemExit(f"{db}: no model calls of run {run!r}")
    order: list[str] = []
    per: dict[str, list[dict]] = {}
    for qid, _rid, model, messages, params, _t in rows:
        if qid not in per:
            order.append(qid)
            per[qid] = []
        per[qid].append({"model": model, "messages": json.loads(messages), "params": json.loads(params)})
    return [per[q] for q in order[:questions]]


def replay(pool, stream: list[list[dict]], in_flight: int) -> dict:
    def one(reqs):
        prompt = gen = 0
        for r in reqs:
            p = r["params"]
            samples, records = pool.sample(r["model"], r["messages"], SamplingParams(
                n=int(p.get("n", 1)), temperature=float(p.get("temperature", 0.7)), top_p=float(p.get("top_p", 0.95)),
                max_tokens=int(p.get("max_tokens", 256)), seed=p.get("seed"), stop=tuple(p.get("stop") or ())))
            prompt += samples[0].prompt_tokens if samples else 0
            gen += sum(s.completion_tokens for s in samples)
        return prompt, gen

    before = {name: _decoder_of(pool, name).reused_tokens for name in pool.names}
    start = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as ex:
        parts = list(ex.map(one, stream))
    wall = time.perf_counter() - start
    reused = sum(_decoder_of(pool, name).reused_tokens - before[name] for name in pool.names)
    return {"wall_s": wall, "prompt": sum(p for p, _ in parts), "reused": reused, "gen": sum(g for _, g in parts)}


def _decoder_of(pool, name: str):
    from agora.models.llamacpp import DECODE_LOCK, batch_decoder

    chat = pool._members[name].sampler
    with DECODE_LOCK:
        return batch_decoder(chat.llm(), chat.n_threads)


def t95(values: list[float]) -> tuple[float, float]:
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, float("nan")
    tq = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57}.get(len(values), 2.0)
    return m, tq * statistics.stdev(values) / math.sqrt(len(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, default=None, help="a trace DB (default: the committed ref-2 bundle, imported)")
    ap.add_argument("--run", default="ref-2:gsm8k:comed")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--in-flight", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    db = a.db
    if db is None:
        from agora.traces.bundle_import import import_bundle
        from agora.traces.store import TraceStore

        db = Path(tempfile.mkdtemp()) / "ref.db"
        import_bundle(BUNDLE, TraceStore(db))
    stream = requests_of(db, a.run, a.questions)
    pool = builtin_pool()
    for name in pool.names:  # load the weights before timing
        pool.sample(name, [{"role": "user", "content": "Hi."}], SamplingParams(n=1, max_tokens=1, seed=0))
    print(f"{a.run}: {len(stream)} questions, {sum(len(q) for q in stream)} requests, {a.in_flight} in flight")
    print(f"{'repeat':>6s} {'reuse':>5s} {'wall s':>8s} {'prompt tok':>10s} {'reused tok':>10s} {'gen tok':>8s}")
    ratios = []
    for rep in range(a.repeats):
        walls = {}
        for flag in ((True, False) if rep % 2 == 0 else (False, True)):
            for name in pool.names:
                pool._members[name].sampler.prefix_cache = flag
            r = replay(pool, stream, a.in_flight)
            walls[flag] = r["wall_s"]
            print(f"{rep:6d} {'on' if flag else 'off':>5s} {r['wall_s']:8.1f} {r['prompt']:10d} {r['reused']:10d} {r['gen']:8d}",
                  flush=True)
        ratios.append(walls[False] / walls[True])
    m, h = t95(ratios)
    print(f"speed-up wall(off) / wall(on): {m:.2f}" + (f" ± {h:.2f} (95 % t, {len(ratios)} repeats)" if len(ratios) > 1
                                                      else " (1 repeat: no interval)"))


if __name__ == "__main__":
    main()
