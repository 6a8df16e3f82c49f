"""An aggregator against majority vote and against ALIGN on the same candidates: a bench's shared draws.

``agora bench`` draws, per question, k samples of every pool member once (the run
``<bench>:<task>:candidates``) and hands them to every protocol; ALIGN's n agents take their k
candidates each from it (agent i plays member i mod |members|, :mod:`agora.graphs.delegation`). This
script rebuilds, per question, exactly the n·k candidates ALIGN saw, lets each ``--aggregator`` (the
untrained base, or a LoRA adapter trained by ``agora train … --aggregate K``) read the question and
those candidates and answer greedily (the prompt of :func:`agora.agents.moa.aggregator_prompt`, as the
trained aggregators saw it), and pairs its verdicts with the recorded ones on the same questions:

* ``majority``: ALIGN's ``self_consistency`` (plurality over the same n·k candidates);
* ``align``: ALIGN's own answer (its principal delegating to the agents' proposals).

Usage (resumable: answers already in ``OUT/<aggregator>/<task>.jsonl`` are not redone)::

    AGORA_LLAMA_THREADS=2 python benchmarks/agg_vs_align.py --db /work/si-agg/ref4.db --bench ref-4 \\
        --tasks gsm8k,math500 --aggregator base --aggregator si-agg3=/work/si-agg3/si-agg3/agg/adapter \\
        --out /work/agg-bench --record benchmarks/agg-bench/results.json
    python benchmarks/agg_vs_align.py --record benchmarks/agg-bench/results.json --report   # figures only
    python benchmarks/agg_vs_align.py --record benchmarks/agg-bench/results.json --report \
        --db /work/si-agg/ref4.db --bench ref-4 --tasks gsm8k,math500   # refresh the checks, then figures

The report also prints a vote-first gate over each aggregator's verdicts (no further model call): the
majority's answer where the plurality answer has more than g of the candidates' votes, the
aggregator's where it has at most g, for every g.

Before any model call, the rebuilt candidates are checked against the record: their plurality answer
must be the answer ALIGN's ``self_consistency`` recorded (``majority_agrees`` in the record; a mismatch
is reported, not hidden). Costs are the process's wall and CPU seconds per (aggregator, task), summed
over reruns. Paired figures: :func:`agora.training.evaluation.paired_difference` (after − before on the
same questions, normal and bootstrap 95 % CIs, McNemar's exact p).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agora.graphs.candidates import shared_from_rows  # noqa: E402
from agora.tasks import Problem, find_answer, is_correct  # noqa: E402
from agora.traces.store import TraceStore  # noqa: E402
from agora.training.aggregator import aggregation_problem, plurality_answer  # noqa: E402
from agora.training.evaluation import greedy_outcomes, paired_difference  # noqa: E402

BASE = "qwen2.5-coder-0.5b"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", help="the bench's trace database (SQLite path)")
    ap.add_argument("--bench", help="the bench id (runs <bench>:<task>:candidates and <bench>:<task>:align)")
    ap.add_argument("--tasks", default="gsm8k,math500", help="comma-separated tasks of the bench, in order")
    ap.add_argument("--aggregator", action="append", default=[],
                    help="NAME (the base model) or NAME=ADAPTER_DIR (a peft LoRA on it); repeatable, run in order")
    ap.add_argument("--base", default=BASE, help="the aggregator's base weights (built-in name or GGUF path)")
    ap.add_argument("--out", type=Path, default=Path("agg-bench"), help="answers, one JSONL per aggregator and task")
    ap.add_argument("--record", type=Path, help="the results file (JSON), written after every cell")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0, help="the candidates' shuffle: seed + the question's place")
    ap.add_argument("--report", action="store_true",
                    help="print the figures of --record and stop (with --db and --bench: refresh its checks first)")
    args = ap.parse_args(argv)
    if not args.report:
        for opt in ("db", "bench"):
            if not getattr(args, opt):
                ap.error(f"--{opt} is required (or --report with --record)")
        if not args.aggregator:
            ap.error("give at least one --aggregator NAME or NAME=ADAPTER_DIR")
        if not Path(args.db).is_file():
            ap.error(f"--db {args.db}: no such file")
    if args.report and not (args.record and args.record.is_file()):
        ap.error("--report reads --record FILE: give an existing one")
    return args


def parse_aggregator(value: str) -> tuple[str, str | None]:
    """``NAME`` → ``(NAME, None)``; ``NAME=DIR`` → ``(NAME, DIR)`` (the adapter folder must exist).

    Raises:
        ValueError: an empty name, or an adapter folder that is not there.
    """
    name, _, adapter = value.partition("=")
    name, adapter = name.strip(), adapter.strip() or None
    if not name:
        raise ValueError(f"--aggregator {value!r}: give NAME or NAME=ADAPTER_DIR")
    if adapter is not None and not Path(adapter).is_dir():
        raise ValueError(f"--aggregator {value!r}: no adapter folder {adapter}")
    return name, adapter


def align_candidates(store: TraceStore, bench: str, task: str) -> list[dict]:
    """The candidates ALIGN saw on each question of ``<bench>:<task>:align``, with the recorded verdicts.

    Returns, in the align run's question order, ``{"problem": Problem, "candidates": [text] (agent
    order, then sample order), "answers": [answer], "majority": plurality answer,
    "majority_recorded": self_consistency's recorded answer, "majority_correct", "align_correct",
    "any_correct"}`` (verdicts 0/1, the recorded ones for majority and align).

    Raises:
        ValueError: a run missing, a run that did not take the shared candidates, or a question whose
            shared draw lacks an agent's samples.
    """
    align_run, draw_run = f"{bench}:{task}:align", f"{bench}:{task}:candidates"
    known = store.run_ids()
    for run in (align_run, draw_run):
        if run not in known:
            raise ValueError(f"{store.path}: no run {run}")
    config = store.run_config(align_run) or {}
    if config.get("shared_candidates") != draw_run:
        raise ValueError(f"{store.path}: run {align_run} did not take the shared draw {draw_run} "
                         f"(shared_candidates: {config.get('shared_candidates')!r})")
    draw = store.run_config(draw_run) or {}
    members = list(config.get("models") or draw["models"])
    n, k = int(config["n_agents"]), int(config["k_samples"])
    results: dict[tuple[str, str], dict] = {(r["question_id"], r["method"]): r for r in store.results(align_run)}
    questions = {q["question_id"]: q for q in store.questions(draw_run)}
    out = []
    for q in store.questions(align_run):
        qid = q["question_id"]
        if (qid, "align") not in results:
            continue
        shared = shared_from_rows(list(store.calls(draw_run, qid)))
        texts, answers = [], []
        taken: dict[str, int] = {}
        for agent in range(n):
            member = members[agent % len(members)]
            start = taken.get(member, 0) * k
            taken[member] = taken.get(member, 0) + 1
            mine = (shared.get(member) or [])[start:start + k]
            if len(mine) < k:
                raise ValueError(f"{store.path}: question {qid} of {draw_run} has {len(mine)} of agent {agent}'s "
                                 f"{k} samples of {member}")
            texts += [c["text"].strip() for c in mine]
            answers += [c["answer"] for c in mine]
        src = questions.get(qid, q)
        problem = Problem(qid, src["question"], src["gold"], src["kind"], n_choices=src.get("n_choices"))
        majority = plurality_answer(answers)
        sc = results.get((qid, "self_consistency"), {})
        out.append({"problem": problem, "candidates": texts, "answers": answers, "majority": majority,
                    "majority_recorded": sc.get("answer"),
                    "majority_correct": int(bool(sc.get("correct"))),
                    "align_correct": int(bool(results[(qid, "align")]["correct"])),
                    "any_correct": int(any(bool(is_correct(a, problem.gold, problem.kind)) for a in answers if a))})
    if not out:
        raise ValueError(f"{store.path}: run {align_run} has no question with an align result")
    return out


def aggregate(base: str, adapter: str | None, items: list[dict], out_file: Path, *, seed: int,
              max_tokens: int) -> list[int]:
    """Greedy answers of ``base`` (+ ``adapter``) as the aggregator of each item's candidates (shuffled
    with ``seed`` + the item's place), on llama.cpp as the pool serves it; verdicts 0/1 in item order,
    answers read against the *question* (a reply naming a candidate's answer is not an echo)."""
    problems = [aggregation_problem(item["problem"], item["candidates"], seed=seed + n) for n, item in enumerate(items)]
    rows = greedy_outcomes(problems, base, adapter, out_file, shots=0, max_tokens=max_tokens, batch_size=1,
                           backend="llamacpp",
                           progress=lambda done, total: print(f"  {out_file.parent.name}/{out_file.stem}: "
                                                               f"{done}/{total}", flush=True))
    verdicts = []
    for row, item in zip(rows, items, strict=True):
        p = item["problem"]
        found = find_answer(row["text"], p.kind, p.n_choices or 4, question=p.question)
        verdicts.append(int(bool(is_correct(found.answer, p.gold, p.kind))))
    return verdicts


def load_record(path: Path | None) -> dict:
    if path is not None and path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return {"cells": {}}


def save_record(path: Path | None, record: dict) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def top_votes(answers: list[str | None]) -> int:
    """How many of a question's candidates give its plurality answer (0 when none gives an answer)."""
    counts = Counter(a for a in answers if a is not None)
    return max(counts.values(), default=0)


def gated(cells: list[dict], checks: dict, most: int) -> tuple[list[int], list[int]]:
    """Verdicts of a vote-first gate: the aggregator's verdict where the plurality answer has at most
    ``most`` of the candidates' votes, the majority's elsewhere; returned with the majority's own, pooled
    over ``cells`` in order (a cell without ``checks[task]["top_votes"]`` is skipped)."""
    mine, vote = [], []
    for c in cells:
        tops = checks.get(c["task"], {}).get("top_votes")
        if tops is None or len(tops) != len(c["correct"]):
            continue
        mine += [a if top <= most else m for a, m, top in zip(c["correct"], c["majority"], tops)]
        vote += c["majority"]
    return mine, vote


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def pp(d: dict) -> str:
    return (f"{100 * d['diff']:+.1f} pp [{100 * d['wald_low']:+.1f}, {100 * d['wald_high']:+.1f}] "
            f"+{d['gained']}/−{d['lost']} p {d['mcnemar_p']:.2f}")


def report(record: dict) -> dict:
    """Per aggregator: each finished task and all of them pooled: accuracy, paired vs majority and vs
    ALIGN on the same questions. Printed; returned as a dict."""
    cells = record.get("cells", {})
    names = list(dict.fromkeys(c["aggregator"] for c in cells.values()))
    out: dict = {}
    for name in names:
        mine = [c for c in cells.values() if c["aggregator"] == name and c.get("status") == "finished"]
        rows = [(c["task"], c) for c in mine] + ([("all", {
            key: sum((c[key] for c in mine), []) for key in ("correct", "majority", "align", "any_correct")})]
            if len(mine) > 1 else [])
        out[name] = {}
        print(f"\naggregator {name}" + (f" ({mine[0]['adapter']})" if mine and mine[0].get("adapter") else " (untrained)"))
        for task, c in rows:
            n = len(c["correct"])
            vs_maj = paired_difference(c["majority"], c["correct"])
            vs_align = paired_difference(c["align"], c["correct"])
            out[name][task] = {"n": n, "accuracy": sum(c["correct"]) / n, "majority": sum(c["majority"]) / n,
                               "align": sum(c["align"]) / n, "any_correct": sum(c["any_correct"]) / n,
                               "vs_majority": vs_maj, "vs_align": vs_align}
            print(f"  {task:8s} n {n:3d}  aggregator {pct(sum(c['correct']) / n)}  majority {pct(sum(c['majority']) / n)}"
                  f"  ALIGN {pct(sum(c['align']) / n)}  ceiling {pct(sum(c['any_correct']) / n)}")
            print(f"           vs majority {pp(vs_maj)}   vs ALIGN {pp(vs_align)}")
        checks = record.get("checks", {})
        sizes = {checks.get(c["task"], {}).get("candidates") for c in mine}
        if mine and None not in sizes and len(sizes) == 1:
            size = sizes.pop()
            out[name]["gated"] = {}
            print(f"  vote first, the aggregator only where the plurality has at most g of {size} votes (pooled):")
            for most in range(1, size):
                verdicts, vote = gated(mine, checks, most)
                share = sum(1 for c in mine for t in checks[c["task"]]["top_votes"] if t <= most) / len(vote)
                d = paired_difference(vote, verdicts)
                out[name]["gated"][most] = {"asked": share, "accuracy": sum(verdicts) / len(vote), "vs_majority": d}
                print(f"    g {most}: aggregator asked on {pct(share)}  accuracy {pct(sum(verdicts) / len(vote))}"
                      f"  vs majority {pp(d)}")
        cost = [c for c in mine if "cpu_s" in c]
        if cost:
            print(f"  cost: {sum(c['wall_s'] for c in cost) / 3600:.2f} h wall, "
                  f"{sum(c['cpu_s'] for c in cost) / 3600:.2f} CPU-h")
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    record = load_record(args.record)
    if args.report and not (args.db and args.bench):
        report(record)
        return
    try:
        aggregators = [] if args.report else [parse_aggregator(a) for a in args.aggregator]
        store = TraceStore.reading(args.db)
        tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
        items = {t: align_candidates(store, args.bench, t) for t in tasks}
    except ValueError as exc:
        sys.exit(f"error: {exc}")
    if not args.report:
        record["settings"] = {"db": str(args.db), "bench": args.bench, "base": args.base,
                              "max_tokens": args.max_tokens, "seed": args.seed}
    for t, its in items.items():
        agree = sum(1 for i in its if i["majority"] == i["majority_recorded"])
        print(f"{t}: {len(its)} questions, {len(its[0]['candidates'])} candidates each; rebuilt plurality = recorded "
              f"self_consistency on {agree}/{len(its)}", flush=True)
        record.setdefault("checks", {})[t] = {"questions": len(its), "majority_agrees": agree,
                                              "candidates": len(its[0]["candidates"]),
                                              "top_votes": [top_votes(i["answers"]) for i in its]}
    save_record(args.record, record)
    for name, adapter in aggregators:
        for t in tasks:
            key = f"{name}/{t}"
            cell = record["cells"].get(key, {})
            if cell.get("status") == "finished":
                continue
            wall0, cpu0 = time.monotonic(), sum(os.times()[:4])
            verdicts = aggregate(args.base, adapter, items[t], args.out / name / f"{t}.jsonl", seed=args.seed,
                                 max_tokens=args.max_tokens)
            cell = {"aggregator": name, "adapter": adapter, "task": t, "status": "finished",
                    "wall_s": cell.get("wall_s", 0.0) + time.monotonic() - wall0,
                    "cpu_s": cell.get("cpu_s", 0.0) + sum(os.times()[:4]) - cpu0,
                    "question_ids": [i["problem"].id for i in items[t]], "correct": verdicts,
                    "majority": [i["majority_correct"] for i in items[t]],
                    "align": [i["align_correct"] for i in items[t]],
                    "any_correct": [i["any_correct"] for i in items[t]]}
            record["cells"][key] = cell
            save_record(args.record, record)
    report(record)


if __name__ == "__main__":
    main()
