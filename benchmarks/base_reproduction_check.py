"""Does a recorded greedy evaluation reproduce on this machine? (issue 19: pairing an arm with a base
evaluated in another session, on another machine of the same kind.)

Evaluates the base model again, greedy on llama.cpp, on the record's first N held-out questions and
prints how many verdicts agree with the recorded ones. Answers go to ``--out`` (resumable).

    AGORA_LLAMA_THREADS=2 python benchmarks/base_reproduction_check.py \\
        --record benchmarks/si-fit/phases.json --phase eval:base@avx512 --questions 60
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from agora.tasks.loaders import load_problems
from agora.training.evaluation import greedy_outcomes

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, default=ROOT / "benchmarks" / "si-fit" / "phases.json")
    ap.add_argument("--phase", default="eval:base@avx512", help="the recorded evaluation to reproduce")
    ap.add_argument("--questions", type=int, default=60, help="its first N held-out questions")
    ap.add_argument("--eval-data", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl")
    ap.add_argument("--base", default="builtin:qwen2.5-coder-0.5b")
    ap.add_argument("--out", type=Path, default=Path("runs/base-check/base.jsonl"))
    args = ap.parse_args(argv)
    book = json.loads(args.record.read_text(encoding="utf-8"))
    recorded = book["phases"][args.phase]["result"]
    problems = load_problems(args.eval_data, "gsm8k", args.questions)
    start = time.process_time()
    rows = greedy_outcomes(problems, args.base, None, args.out, backend="llamacpp",
                           max_tokens=book["settings"].get("max_tokens", 256))
    n = len(rows)
    if [r["question_id"] for r in rows] != recorded["question_ids"][:n]:
        raise SystemExit(f"{args.record}: {args.phase} was evaluated on other questions than {args.eval_data}")
    here, there = [r["correct"] for r in rows], recorded["correct"][:n]
    print(f"{n} questions: {sum(here)} right here, {sum(there)} in {args.phase}; "
          f"same verdict on {sum(a == b for a, b in zip(here, there))} of {n}; "
          f"{time.process_time() - start:.0f} CPU-s")


if __name__ == "__main__":
    main()
