"""A bench run with ``--matched-single``, read before it is complete: every multi-member method
against the dev-chosen best member at matched samples, on the tasks given.

The report's own claim (``agora bench --report-only``) picks the best method by macro accuracy over
*every* task and so says nothing until all tasks are done; this prints each method's paired figure
on the finished tasks, so a partial run can be read without choosing a method on the test questions.
Figures: method − member in pp with the 95 % paired bootstrap CI (macro: the tasks' mean, stratified),
McNemar's exact p, the questions paired, each side's accuracy and samples per question
(:func:`agora.traces.matched_single.matched_pairs`).

Usage::

    python benchmarks/ref4_partial.py /work/refrun4/bench-ref4.db gsm8k,arc [--bench ref-4]

The database is copied first (SQLite's backup API) and the copy is read, so a bench writing to it
meanwhile is neither blocked nor changed. Raises ``SystemExit`` naming the bench or task when the
database holds no such bench, or the bench no such task or no matched draw.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
from pathlib import Path

from agora.runs.matched_single import MULTI_MEMBER
from agora.traces.bench_data import read_bench
from agora.traces.bench_spec import read_bench_spec
from agora.traces.matched_single import matched_pairs
from agora.traces.store import TraceStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", help="the bench's SQLite trace database")
    ap.add_argument("tasks", help="comma-separated task names whose test methods are done (e.g. gsm8k,arc)")
    ap.add_argument("--bench", default="ref-4", help="the bench id (default ref-4)")
    ap.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (the report's default 0)")
    args = ap.parse_args()
    if not Path(args.db).is_file():
        raise SystemExit(f"{args.db}: no such database file")
    with tempfile.TemporaryDirectory() as tmp:
        copy = str(Path(tmp) / "copy.db")
        src = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
        dst = sqlite3.connect(copy)
        src.backup(dst)
        dst.close()
        src.close()
        store = TraceStore(copy)
        spec = read_bench_spec(store, args.bench)
        if spec is None:
            raise SystemExit(f"{args.db}: no bench {args.bench!r}")
        data = read_bench(store, spec)
        tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
        for t in tasks:
            if t not in data.tasks:
                raise SystemExit(f"--tasks: bench {args.bench!r} has no task {t!r} (it has {', '.join(data.tasks)})")
            if t not in data.matched:
                raise SystemExit(f"task {t!r}: no matched single-member draw recorded (was the bench run with "
                                 "--matched-single, and is the task's matched-single run done?)")
        matched = {t: data.matched[t] for t in tasks}
        print(f"bench {args.bench}, tasks {', '.join(tasks)}; matched member: "
              + ", ".join(f"{t} {m.member}" for t, m in matched.items()))
        print(f"{'method':18s} {'task':8s} {'diff pp':>8s} {'95% CI':>16s} {'p':>8s} {'n':>4s} "
              f"{'method %':>8s} {'member %':>8s} samples")
        for method in MULTI_MEMBER:
            results = {t: data.tasks[t].results.get(method, {}) for t in tasks}
            pairs = matched_pairs(spec, results, matched, args.seed)
            if not pairs:
                continue
            for task, pair in [*pairs["tasks"].items(), ("macro", pairs["macro"])]:
                ci = f"[{100 * pair['ci_low']:+.1f}, {100 * pair['ci_high']:+.1f}]"
                print(f"{method:18s} {task:8s} {100 * pair['diff']:+8.1f} {ci:>16s} {pair['p_mcnemar']:8.3g} "
                      f"{pair['questions']:4d} {100 * pair['method_accuracy']:8.1f} {100 * pair['member_accuracy']:8.1f} "
                      f"{pair['samples_method']:.1f}/{pair['samples_member']:.1f}")


if __name__ == "__main__":
    main()
