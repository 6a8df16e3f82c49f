"""The member table: every member of a pool measured on the dev questions of the reference tasks, alone
and in pairs, to choose a pool by measurement.

Usage (from the repository root, its venv active; resumable: rerun the same command and only the
questions not yet recorded are asked)::

    python benchmarks/member_table.py --pool my-pool.toml --db members.db --run-id members
    python benchmarks/member_table.py --pool my-pool.toml --db members.db --run-id members --table-only

What it runs: per task, one SLM-MUX run (``agora.graphs.slm_mux``) on the task's dev questions, run id
``<run-id>:<task>``: every member of the pool (each pool entry: weights × recipe) draws ``k`` samples
of every question alone, one request each, recorded in the trace DB. The tasks, dev split and seed are
the reference bench's (``benchmarks/bench_ref.sh``: GSM8K, ARC-Challenge, MATH-500, MMLU, ``--limit 60
--dev 20 --seed 0``; the dev questions are each file's last 20, never a test question,
:func:`agora.runs.bench_tasks.load_tasks`), its sampling the bench's (temperature 0.7, top-p 0.95, 256 tokens,
2 worked exemplars). Each run is also a dev run for SLM-MUX's tie-breaker and ALIGN's calibrated
utility (``--dev-run <run-id>:<task>``).

What it prints (markdown), per task and over all tasks (every dev question pooled), with 95 % CIs
(percentile bootstrap over questions, 2000 resamples, seed 0; :mod:`agora.agents.stats`):

* per member: ``acc@1``, the expected accuracy of one sample (per question, the share of its ``k``
  samples that are right; averaged); ``SC@k``, the accuracy of its plurality answer over its ``k``
  samples (its own self-consistency); ``conf``, its mean confidence (share of its samples on that answer);
* per pair of members, on their plurality answers: ``oracle``, the share of questions either gets
  right (the ceiling of any selection between the two: SLM-MUX's union accuracy); ``disagree``, the
  share where their answers differ (a missing answer differs from any answer); ``phi``, the
  correlation of their errors (:func:`agora.agents.stats.phi_ci`; ``nan`` when one never or always errs).

A sample whose call failed counts as a sample without an answer (wrong), so every member has ``k``
samples per question.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from agora.agents.delegation import plurality
from agora.agents.slm_mux import SLMMuxConfig
from agora.agents.stats import bootstrap_ci, phi_ci
from agora.graphs.context import resolve_pool
from agora.graphs.runner import run_protocol
from agora.graphs.slm_mux import SLMMuxContext
from agora.models.pool import ModelPool
from agora.runs.bench_tasks import TaskFile, load_tasks
from agora.tasks.scoring import score_answer
from agora.traces.store import TraceStore

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("AGORA_DATA", ROOT.parent / "shared" / "data"))
#: The reference bench's task files (benchmarks/bench_ref.sh), relative to ``$AGORA_DATA``.
REFERENCE_TASKS = ("gsm8k=gsm8k/test.jsonl", "arc=arc/arc_challenge_test.jsonl", "math500=math/math500_test.jsonl",
                   "mmlu=mmlu/mmlu_dev.jsonl")
ALL = "all"


def reference_tasks(data: Path = DATA) -> str:
    """``--tasks`` of the reference bench, its files under ``data``."""
    return ",".join(f"{name}={data / rel}" for name, rel in (t.split("=", 1) for t in REFERENCE_TASKS))


@dataclass(frozen=True, slots=True)
class MemberOutcomes:
    """One member's outcomes on one task's dev questions, question by question (same order for every member)."""

    member: str
    right: list[float]
    """Per question: the share of its k samples that are right (acc@1's terms)."""
    sc_right: list[bool]
    """Per question: whether its plurality answer is right."""
    answers: list[str | None]
    """Per question: its plurality answer."""
    confidence: list[float]
    """Per question: the share of its k samples on its plurality answer."""


def measure(pool: ModelPool, tasks: Sequence[TaskFile], store: TraceStore, run_id: str, config: SLMMuxConfig,
            concurrency: int = 1) -> list[str]:
    """Run (or resume) one SLM-MUX run per task on its dev questions; returns the run ids.

    Raises:
        ValueError: a task without dev questions.
    """
    runs = []
    for task in tasks:
        if not task.dev:
            raise ValueError(f"{task.path}: no dev questions (give --dev N)")
        rid = f"{run_id}:{task.name}"
        outcome = run_protocol("slm-mux", list(task.dev), store=store, run_id=rid, context=SLMMuxContext(pool, config),
                               config=asdict(config), pool_description=pool.describe(),
                               dataset={"path": str(task.path), "format": task.format, "split": "dev",
                                        "questions": len(task.dev)},
                               concurrency=concurrency)
        print(f"{rid}: {len(task.dev)} dev questions, {outcome.skipped} already recorded", file=sys.stderr)
        runs.append(rid)
    return runs


def outcomes(store: TraceStore, run_id: str, k: int) -> list[MemberOutcomes]:
    """Each member's outcomes in the recorded run ``run_id``, members in pool order (``agent``),
    questions in run order; a member with fewer than ``k`` recorded samples of a question has the
    missing ones as samples without an answer."""
    questions = sorted(store.questions(run_id), key=lambda q: q["idx"])
    samples: dict[tuple[int, str], dict[str, dict[int, str | None]]] = {}
    for c in store.calls(run_id):
        if c.get("error") is None and c.get("sample_index") is not None and c.get("node") == "mux_sample":
            samples.setdefault((c["agent"], c["model"]), {}).setdefault(c["question_id"], {})[c["sample_index"]] = c["answer"]
    out = []
    for (_agent, model), by_q in sorted(samples.items()):
        row = MemberOutcomes(model, [], [], [], [])
        for q in questions:
            got = by_q.get(q["question_id"], {})
            answers = [got.get(i) for i in range(k)]
            scores = [bool(score_answer(a, q["gold"], q["kind"])) for a in answers]
            answer, share = plurality(answers)
            row.right.append(sum(scores) / k)
            row.sc_right.append(bool(score_answer(answer, q["gold"], q["kind"])))
            row.answers.append(answer)
            row.confidence.append(share)
        out.append(row)
    return out


def _ci(value: tuple[float, float, float], pct: bool = True) -> str:
    est, low, high = value
    if math.isnan(est):
        return "nan"
    if pct:
        return f"{100 * est:.1f} [{100 * low:.1f}, {100 * high:.1f}]"
    return f"{est:+.2f} [{low:+.2f}, {high:+.2f}]"


def member_rows(by_task: dict[str, list[MemberOutcomes]]) -> list[dict[str, Any]]:
    """One row per task (and ``all``: the tasks' questions pooled) and member: n, acc@1, SC@k, conf."""
    rows = []
    for task, members in by_task.items():
        for m in members:
            rows.append({"task": task, "member": m.member, "n": len(m.right), "acc1": bootstrap_ci(m.right),
                         "sc": bootstrap_ci(m.sc_right), "conf": bootstrap_ci(m.confidence)})
    return rows


def pair_rows(by_task: dict[str, list[MemberOutcomes]]) -> list[dict[str, Any]]:
    """One row per task (and ``all``) and pair of members, on their plurality answers: oracle (either
    right), disagreement (answers differ) and phi of their errors."""
    rows = []
    for task, members in by_task.items():
        for a, b in itertools.combinations(members, 2):
            either = [x or y for x, y in zip(a.sc_right, b.sc_right)]
            differ = [x != y for x, y in zip(a.answers, b.answers)]
            errors = ([not x for x in a.sc_right], [not y for y in b.sc_right])
            rows.append({"task": task, "a": a.member, "b": b.member, "n": len(either), "oracle": bootstrap_ci(either),
                         "disagree": bootstrap_ci(differ), "phi": phi_ci(*errors)})
    return rows


def pooled(by_task: dict[str, list[MemberOutcomes]]) -> dict[str, list[MemberOutcomes]]:
    """``by_task`` with an ``all`` entry: every task's questions, member by member, concatenated."""
    names = [m.member for m in next(iter(by_task.values()), [])]
    every = []
    for name in names:
        parts = [m for members in by_task.values() for m in members if m.member == name]
        every.append(MemberOutcomes(name, *[sum((getattr(p, f) for p in parts), [])
                                            for f in ("right", "sc_right", "answers", "confidence")]))
    return {**by_task, ALL: every} if len(by_task) > 1 else dict(by_task)


def markdown(by_task: dict[str, list[MemberOutcomes]], k: int) -> str:
    """The two tables (members, pairs) as markdown."""
    lines = [f"| task | member | n | acc@1 % | SC@{k} % | conf % |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['member']} | {r['n']} | {_ci(r['acc1'])} | {_ci(r['sc'])} | {_ci(r['conf'])} |"
              for r in member_rows(by_task)]
    lines += ["", "| task | member A | member B | n | oracle % | disagree % | error phi |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['task']} | {r['a']} | {r['b']} | {r['n']} | {_ci(r['oracle'])} | {_ci(r['disagree'])} | "
              f"{_ci(r['phi'], pct=False)} |" for r in pair_rows(by_task)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, pool: ModelPool | None = None) -> str:
    """Parse ``argv``, run or resume the measurement, print and return the markdown. ``pool``: a
    ready pool in place of ``--pool`` (tests)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pool", help="Pool: a TOML pool file (any members, any recipes) or a built-in pool name.")
    p.add_argument("--tasks", default=None, help="name=path,... (default: the reference bench's four files under "
                                                 "$AGORA_DATA, else ../shared/data).")
    p.add_argument("--limit", type=int, default=60, help="Test questions per file (kept out of the dev split).")
    p.add_argument("--dev", type=int, default=20, help="Dev questions per file: its last N.")
    p.add_argument("--k", type=int, default=3, help="Samples per member and question.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--shots", type=int, default=2)
    p.add_argument("--db", default="members.db", help="Trace DB (SQLite file or postgresql:// URL).")
    p.add_argument("--run-id", default="members", help="Run ids are <run-id>:<task>; the same id resumes.")
    p.add_argument("--concurrency", type=int, default=1, help="Questions in flight per run.")
    p.add_argument("--table-only", action="store_true", help="Print the table from the recorded runs; ask nothing.")
    args = p.parse_args(argv)
    tasks = load_tasks(args.tasks or reference_tasks(), args.limit, args.dev)
    config = SLMMuxConfig(k_samples=args.k, temperature=args.temperature, max_tokens=args.max_tokens,
                          shots=args.shots, seed=args.seed)
    store = TraceStore(args.db)
    if not args.table_only:
        if pool is None:
            if not args.pool:
                p.error("--pool is required (or --table-only)")
            pool = resolve_pool(args.pool)
        measure(pool, tasks, store, args.run_id, config, args.concurrency)
    by_task = {t.name: outcomes(store, f"{args.run_id}:{t.name}", args.k) for t in tasks}
    text = markdown(pooled(by_task), args.k)
    print(text)
    return text


if __name__ == "__main__":
    main()
