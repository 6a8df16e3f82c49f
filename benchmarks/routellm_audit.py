"""Audit Agora's answer checker against labels no one here wrote (issue 15).

RouteLLM (lm-sys/RouteLLM, Apache-2.0) released, for each of the 1,319 GSM8K test questions, the
responses of Mixtral-8x7B-Instruct and GPT-4-1106 with its own correctness label. This script
scores all 2,638 responses with :func:`agora.tasks.find_answer` and :func:`agora.tasks.is_correct`
against the GSM8K gold answers (joined on the question text), prints the agreement matrix and
every disagreement, grouped into classes (:func:`classify`), so that each class can be reviewed
(``benchmarks/README.md``, "RouteLLM audit").

Usage::

    python benchmarks/routellm_audit.py [--csv PATH] [--gsm8k PATH] [--width N]

Defaults read the copies in ``../shared/data`` next to the repository (the product itself never
reads that folder). Prints only; exit status 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

from agora.tasks import Extraction, find_answer, is_correct

_CALC_NOTE = re.compile(r"<<[^<>\n]*>>")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT.parent / "shared" / "data" / "routing" / "routellm_gsm8k_responses.csv"
DEFAULT_GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
MODELS = ("mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview")


def load_gold(path: Path) -> dict[str, str]:
    """GSM8K question text → gold answer (after ``#### ``, thousands commas removed)."""
    gold = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            gold[rec["question"].strip()] = rec["answer"].rsplit("####", 1)[-1].strip().replace(",", "")
    return gold


def routellm_reading(response: str) -> str | None:
    """What RouteLLM's labels behave as reading: the response's last run of digits (its sign and
    any decimal point dropped; ``$57.00`` reads ``00``). Used only to name disagreement classes."""
    digits = re.findall(r"\d+", response.replace(",", ""))
    return (digits[-1].lstrip("0") or "0") if digits else None


def classify(agora: bool, routellm: bool, extraction: Extraction, response: str, gold: str) -> str:
    """The disagreement class of one response (``""`` when the two checkers agree).

    ``agora_credits:*``: Agora credits the response, RouteLLM does not; ``routellm_credits:*``:
    the reverse. The suffix names the mechanism; which side is right is decided per class in
    ``benchmarks/README.md``."""
    if agora == routellm:
        return ""
    reading = routellm_reading(response)
    if agora:
        tail = _CALC_NOTE.sub("", response).rstrip()
        if re.search(r"\d\.\d+\D*$", tail):
            return "agora_credits:last_number_has_decimals"  # "$57.00": RouteLLM reads "00"
        return "agora_credits:number_after_answer"  # "by her 10th birthday"
    if extraction.answer is None:
        return f"routellm_credits:no_answer_{extraction.reason}"
    if extraction.several:
        return "routellm_credits:several_values"
    if extraction.answer.lstrip("-") == gold.lstrip("-") and extraction.answer != gold:
        return "routellm_credits:sign_differs"  # "#### -15" against 15: RouteLLM drops the sign
    if extraction.how == "fallback":
        return "routellm_credits:fallback_read_another_number"
    if "." in extraction.answer and reading == gold:
        return "routellm_credits:decimal_answer"  # "#### 0.5" against 5: RouteLLM reads "5"
    return f"routellm_credits:other_value_{extraction.how}"


def audit(csv_path: Path, gsm8k_path: Path) -> list[dict]:
    """One record per response: model, row, gold, labels, Agora's extraction and its class."""
    gold = load_gold(gsm8k_path)
    records = []
    with open(csv_path, encoding="utf-8", newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            question = row["prompt"].strip()
            if question not in gold:
                raise SystemExit(f"{csv_path}:{i + 2}: question not in {gsm8k_path}: {question[:60]!r}")
            for model in MODELS:
                response = row[f"{model}_response"]
                extraction = find_answer(response, "math")
                agora = is_correct(extraction.answer, gold[question], "math")
                routellm = row[model].strip().lower() == "true"
                records.append({"row": i, "model": model, "gold": gold[question], "routellm": routellm,
                                "agora": agora, "extraction": extraction, "response": response,
                                "class": classify(agora, routellm, extraction, response, gold[question])})
    return records


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else "…" + text[-width:]


def report(records: list[dict], width: int = 160, out=sys.stdout) -> None:
    """Agreement matrix per model and overall, how answers were found, then every disagreement."""
    for model in (*MODELS, "all"):
        rows = [r for r in records if model in ("all", r["model"])]
        m = Counter((r["routellm"], r["agora"]) for r in rows)
        agree = m[(True, True)] + m[(False, False)]
        print(f"\n{model}: {len(rows)} responses, agreement {agree}/{len(rows)} = {agree / len(rows):.1%}", file=out)
        print(f"  {'':22}{'Agora correct':>15}{'Agora wrong':>13}", file=out)
        print(f"  {'RouteLLM correct':22}{m[(True, True)]:>15}{m[(True, False)]:>13}", file=out)
        print(f"  {'RouteLLM wrong':22}{m[(False, True)]:>15}{m[(False, False)]:>13}", file=out)
    how = Counter(r["extraction"].how or "none" for r in records)
    print("\nhow Agora found the answers: " + ", ".join(f"{k} {v}" for k, v in how.most_common()), file=out)
    classes = defaultdict(list)
    for r in records:
        if r["class"]:
            classes[r["class"]].append(r)
    print(f"\n{sum(map(len, classes.values()))} disagreements in {len(classes)} classes", file=out)
    for name in sorted(classes, key=lambda c: -len(classes[c])):
        print(f"\n== {name}: {len(classes[name])}", file=out)
        for r in classes[name]:
            e = r["extraction"]
            print(f"  row {r['row']:4} {r['model'].split('/')[-1][:12]:12} gold {r['gold']:>8} routellm "
                  f"{'T' if r['routellm'] else 'F'} agora {e.answer!s:>10} ({e.how}{', ' + e.reason if e.reason else ''}) "
                  f"| {_short(r['response'], width)}", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV, help="RouteLLM GSM8K responses (CSV)")
    parser.add_argument("--gsm8k", type=Path, default=DEFAULT_GSM8K, help="GSM8K test.jsonl (gold answers)")
    parser.add_argument("--width", type=int, default=160, help="characters of each response's end to show")
    args = parser.parse_args(argv)
    for path in (args.csv, args.gsm8k):
        if not path.is_file():
            parser.error(f"{path}: no such file (pass --csv / --gsm8k)")
    report(audit(args.csv, args.gsm8k), args.width)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
