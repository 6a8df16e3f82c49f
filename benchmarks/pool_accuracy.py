"""What the embedded pool can do alone: each model, greedy, one sample per question.

    python benchmarks/pool_accuracy.py --gsm8k ../shared/data/gsm8k/test.jsonl \\
        --arc ../shared/data/arc/arc_challenge_test.jsonl --limit 50 --db pool-acc.db

For each model of the pool (default: the built-in Qwen pool) and each task it runs the first
``--limit`` questions through the ALIGN graph with one agent, one sample, temperature 0 (so the
prompt, the answer extraction and the trace rows are exactly those of every protocol run), and
prints accuracy with a 95 % bootstrap CI, generated tokens and model seconds per question, and the
share of answers capped at ``--max-tokens``. Each (model, task) is a run ``<run-id>:<model>:<task>``
in ``--db``: rerun the same command to resume; finished questions are not redone.

This is the bar the protocols have to beat (``agora bench``).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from agora.agents.delegation import DelegationConfig
from agora.models.pool import load_pool
from agora.graphs.delegation import DelegationContext, build_delegation_graph
from agora.graphs.runner import run_problems
from agora.tasks.loaders import detect_format, load_problems
from agora.agents.stats import bootstrap_ci
from agora.traces.store import TraceStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k", type=Path, help="GSM8K-format file (test split).")
    parser.add_argument("--arc", type=Path, help="ARC-Challenge (or any multiple-choice) file.")
    parser.add_argument("--task", action="append", default=[], metavar="NAME=FILE", help="More tasks.")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--pool", default="default", help="Pool file or built-in pool name.")
    parser.add_argument("--max-tokens", type=int, default=384)
    parser.add_argument("--db", type=Path, default=Path("pool-accuracy.db"))
    parser.add_argument("--run-id", default="pool-acc")
    args = parser.parse_args()
    tasks = [(name, path) for name, path in (("gsm8k", args.gsm8k), ("arc", args.arc)) if path is not None]
    tasks += [(t.split("=", 1)[0], Path(t.split("=", 1)[1])) for t in args.task]
    if not tasks:
        parser.error("give at least one task (--gsm8k, --arc or --task NAME=FILE)")
    pool = load_pool(args.pool)
    store = TraceStore(args.db)
    rows = []
    for model in pool.names:
        for task, path in tasks:
            problems = load_problems(path, detect_format(path), args.limit)
            run_id = f"{args.run_id}:{model}:{task}"
            config = DelegationConfig(n_agents=1, k_samples=1, temperature=0.0, max_tokens=args.max_tokens,
                                      models=(model,))
            print(f"{run_id}: {len(problems)} questions", flush=True)
            run_problems(build_delegation_graph(), problems, store=store, run_id=run_id, protocol="align",
                         context=DelegationContext(pool=pool, config=config), config=asdict(config),
                         pool_description=pool.describe(),
                         dataset={"path": str(path), "format": detect_format(path), "limit": args.limit})
            results = [r for r in store.results(run_id) if r["method"] == "single_agent"]
            calls = [c for c in store.calls(run_id) if c["error"] is None]
            outcome = [bool(r["correct"]) for r in results]
            _, low, high = bootstrap_ci(outcome)
            n = max(1, len(results))
            rows.append((model, task, len(results), sum(outcome) / n, low, high,
                         sum(c["completion_tokens"] for c in calls) / n, sum(c["latency_s"] for c in calls) / n,
                         sum(c["finish_reason"] == "length" for c in calls) / max(1, len(calls))))
    print(f"\n{'model':<20} {'task':<6} {'n':>4} {'accuracy':>9} {'95% CI':>15} {'tokens/q':>9} {'s/q':>6} {'capped':>7}")
    for model, task, n, acc, low, high, toks, secs, capped in rows:
        print(f"{model:<20} {task:<6} {n:>4} {acc:>8.1%} {f'[{low:.1%}, {high:.1%}]':>15} {toks:>9.0f} {secs:>6.1f} "
              f"{capped:>6.0%}")


if __name__ == "__main__":
    main()
