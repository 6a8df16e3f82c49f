"""Re-evaluate a self-improvement run's base model and adapters on llama.cpp and compare with its
transformers evaluation (issue 19): accuracy, same verdicts, same texts, CPU seconds per answer.

The adapters are converted to GGUF LoRAs (``agora.models.lora_gguf``) and applied on the 0.5B's
quantised GGUF, one greedy question at a time, exactly as a ``backend = "llamacpp"`` pool entry
serves them. Answers go to ``--out`` (resumable).

    AGORA_LLAMA_THREADS=1 python benchmarks/llamacpp_eval_check.py --run runs/self-improvement/si-small \\
        --models base,grpo,align-dpo --questions 20
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from agora.tasks.loaders import load_problems
from agora.agents.stats import proportion_ci
from agora.training.evaluation import greedy_outcomes, paired_difference

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=Path("runs/self-improvement/si-small"))
    ap.add_argument("--models", default="base,grpo,align-dpo", help="base and arm names of the run")
    ap.add_argument("--questions", type=int, default=20, help="the run's first N held-out questions")
    ap.add_argument("--eval-data", type=Path, default=ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl")
    ap.add_argument("--base", default="builtin:qwen2.5-coder-0.5b")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--out", type=Path, default=Path("runs/lora-check"))
    args = ap.parse_args(argv)
    problems = load_problems(args.eval_data, "gsm8k", args.questions)
    outcomes = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        adapter = None if name == "base" else str(args.run / name / "adapter")
        start = time.process_time()
        rows = greedy_outcomes(problems, args.base, adapter, args.out / f"{name}.jsonl", max_tokens=args.max_tokens,
                               backend="llamacpp")
        cpu = time.process_time() - start
        reference = {}
        for line in (args.run / "eval" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                reference[row["question_id"]] = row
        right = sum(r["correct"] for r in rows)
        share, lo, hi = proportion_ci(right, len(rows))
        print(f"{name}: llama.cpp {right}/{len(rows)} ({100 * share:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]); "
              f"transformers {sum(reference[r['question_id']]['correct'] for r in rows)}/{len(rows)}; "
              f"same verdict {sum(reference[r['question_id']]['correct'] == r['correct'] for r in rows)}; "
              f"same text {sum(reference[r['question_id']]['text'] == r['text'] for r in rows)}; "
              f"CPU s per answer {cpu / len(rows):.1f} (0 when resumed from --out)")
        outcomes[name] = [r["correct"] for r in rows]
    for name, after in outcomes.items():
        if name != "base" and "base" in outcomes:
            d = paired_difference(outcomes["base"], after)
            print(f"{name} − base on llama.cpp: {100 * d['diff']:+.1f} pp [{100 * d['wald_low']:+.1f}, "
                  f"{100 * d['wald_high']:+.1f}] (normal), +{d['gained']}/−{d['lost']}, McNemar p {d['mcnemar_p']:.2f}")


if __name__ == "__main__":
    main()
