"""How soon a damaged trace bundle is refused: a synthetic bundle of ``--rows`` model-call rows (one
run, one question; each row a short reply, as a real run's rows are), written once, then three cases
checked with :func:`agora.traces.bundle_reading.check_bundle` and timed:

- ``intact``: every row read and checked (the time a good bundle takes before an import starts);
- ``rows missing``: three rows cut out near the end; the footer's counts no longer add up, which the
  fast first pass over the bytes finds before any row is parsed;
- ``no footer``: the last line cut off (a copy interrupted before its end).

Prints the bundle's size and, per case, the seconds to its verdict and the verdict's first words.

    python benchmarks/bundle_checks.py                  # 1,000,000 rows
    python benchmarks/bundle_checks.py --rows 100000
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

from agora.traces.bundle import FORMAT, VERSION, BundleError
from agora.traces.bundle_reading import check_bundle
from agora.traces.schema import MODEL_CALLS, PRIMARY_KEYS, QUESTIONS, RUNS

_SQL = {str: "TEXT", int: "INTEGER", float: "FLOAT"}


def _header() -> dict:
    tables = {t: {"columns": {c: _SQL[ty] for c, ty in cols.items()}, "primary_key": list(PRIMARY_KEYS[t])}
              for t, cols in (("runs", RUNS), ("questions", QUESTIONS), ("model_calls", MODEL_CALLS))}
    return {"format": FORMAT, "version": VERSION, "created_at": "2026-12-05T00:00:00", "code_revision": "bench",
            "runs": ["R"], "benches": [], "tables": tables}


def _row(table: str, values: dict) -> str:
    cols = {"runs": RUNS, "questions": QUESTIONS, "model_calls": MODEL_CALLS}[table]
    return json.dumps({"t": table, "v": [values.get(c) for c in cols]})


def write_lines(rows: int) -> list[str]:
    """The bundle's lines: header, the run, the question, ``rows`` model calls, footer."""
    lines = [json.dumps(_header()),
             _row("runs", {"run_id": "R", "protocol": "align", "status": "finished"}),
             _row("questions", {"run_id": "R", "question_id": "q1", "kind": "math", "question": "What is 2 + 2?",
                                "gold": "4", "answer": "4", "correct": 1})]
    for i in range(rows):
        lines.append(_row("model_calls", {"call_id": f"c{i}", "run_id": "R", "question_id": "q1", "node": "agent",
                                          "role": "agent", "agent": i % 4, "model": "m", "completion":
                                          "2 + 2 = 4. The answer is 4.", "prompt_tokens": 40,
                                          "completion_tokens": 12, "latency_s": 0.5, "attempt": 1}))
    lines.append(json.dumps({"end": True, "rows": {"runs": 1, "questions": 1, "model_calls": rows}}))
    return lines


def write(path: Path, lines: list[str]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
        for line in lines:
            f.write(line + "\n")
    return path


def timed(path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        check_bundle(path)
        verdict = "accepted"
    except BundleError as exc:
        verdict = str(exc).split(": ", 1)[1][:70]
    return time.perf_counter() - start, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    lines = write_lines(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"intact": write(Path(tmp) / "intact.agora.jsonl.gz", lines),
                 "rows missing": write(Path(tmp) / "missing.agora.jsonl.gz", lines[:-5] + lines[-2:]),
                 "no footer": write(Path(tmp) / "cut.agora.jsonl.gz", lines[:-1])}
        size = cases["intact"].stat().st_size
        print(f"bundle: {args.rows:,} model-call rows, {size / 1e6:.1f} MB gzip")
        for name, path in cases.items():
            seconds, verdict = timed(path)
            print(f"{name:13s} {seconds:7.2f} s  {verdict}")


if __name__ == "__main__":
    main()
