"""Print the reference bench's figures as the tables in ``benchmarks/README.md`` (issue 18).

Reads the ``bench.json`` that ``agora bench --report-only --out DIR`` writes and prints, in the
README's layout: accuracy per method and task with its 95 % bootstrap CI, the macro-average, calls
and generated tokens per question; the pool models' expected one-sample accuracy; COMED's decisions,
rescues and harms; the paired differences against the single agent and self-consistency (macro);
and the three claims. Nothing is computed here that the bench did not already compute: this only
lays its JSON out, so the README's numbers are the report's.

    python benchmarks/bench_ref_tables.py benchmarks/bench-ref/bench.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

LABELS = {
    "single_agent": "single_agent (0.5B, one sample)",
    "self_consistency": "self_consistency (6 candidates)",
    "best_of_n": "best_of_n (6 candidates)",
    "anchor": "anchor (0.5B, N = 3)",
}
ORDER = ("single_agent", "self_consistency", "best_of_n", "align", "anchor", "comed", "moa", "debate")


def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def ci(lo: float | None, hi: float | None) -> str:
    return f"[{pct(lo)}, {pct(hi)}]"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json", type=Path)
    args = ap.parse_args(argv)
    report = json.loads(args.bench_json.read_text(encoding="utf-8"))
    tasks = [t["name"] for t in report["tasks"]]
    cells = {(c["task"], c["method"]): c for c in report["cells"]}
    macro = {m["method"]: m for m in report["macro"]}
    scored = {t: max((c["questions"] for c in report["cells"] if c["task"] == t), default=0) for t in tasks}
    status = "complete" if report["complete"] else "incomplete"
    print(f"Bench {report['bench_id']}, generated {report['generated_at']} ({status}); questions scored per task: "
          + ", ".join(f"{t} {scored[t]}" for t in tasks) + "\n")

    print("| method | " + " | ".join(tasks) + " | macro | calls/q | gen. tokens/q |")
    print("|---" * (len(tasks) + 4) + "|")
    for method in [m for m in ORDER if m in macro] + [m for m in macro if m not in ORDER]:
        row = [f"{pct(cells[(t, method)]['accuracy'])} {ci(cells[(t, method)]['ci_low'], cells[(t, method)]['ci_high'])}"
               if (t, method) in cells else "–" for t in tasks]
        m = macro[method]
        print(f"| {LABELS.get(method, method)} | " + " | ".join(row)
              + f" | {pct(m['accuracy'])} {ci(m['ci_low'], m['ci_high'])} | {m['calls_per_q']:.2f} | {m['tokens_per_q']:.0f} |")
    singles = {(s["task"], s["model"]): s for s in report["single_models"]}
    for m in report["macro_single_models"]:
        row = [f"{pct(singles[(t, m['model'])]['accuracy'])} {ci(singles[(t, m['model'])]['ci_low'], singles[(t, m['model'])]['ci_high'])}"
               if (t, m["model"]) in singles else "–" for t in tasks]
        print(f"| {m['model']}, one sample (expected) | " + " | ".join(row)
              + f" | {pct(m['accuracy'])} {ci(m['ci_low'], m['ci_high'])} | | |")

    print("\nCOMED's decisions per task:")
    for c in report["comed"]:
        d = c["decisions"]
        print(f"- {c['task']}: {c['questions']} questions, accept {d['accept']}, verify {d['verify']}, "
              f"escalate {d['escalate']}; escalated {c['escalated']}, rescues {c['rescues']}, harms {c['harms']}")
    print(f"- failed questions: {len(report['failed_questions'])}")

    print("\nPaired differences, macro (pp, 95 % paired-bootstrap CI, wins / losses, McNemar p):")
    for p in report["paired"]:
        if p["task"] == "macro":
            print(f"- {p['method']} − {p['baseline']}: {pct(p['diff'])} {ci(p['ci_low'], p['ci_high'])}, "
                  f"{p['wins']} / {p['losses']}, p = {p['p_mcnemar']:.3g} ({p['questions']} questions)")

    print("\n| claim | measured | holds |\n|---|---|---|")
    for c in report["claims"]:
        extra = []
        if c.get("p_mcnemar") is not None:
            extra.append(f"McNemar p = {c['p_mcnemar']:.3g}")
        if "calls_ratio" in c:
            extra.append(f"calls {100 * c['calls_ratio']:.0f} % of its")
        if "rescues" in c:
            extra.append(f"rescues {c['rescues']}, harms {c['harms']}")
        print(f"| {c['claim']} | **{pct(c['value'])} pp** {ci(c['ci_low'], c['ci_high'])}"
              + (f"; {'; '.join(extra)}" if extra else "") + f" | {c['holds']} |")


if __name__ == "__main__":
    main()
