"""Per-phase wall time of a bench run from its trace DB (issue 32: "its wall time on 2 cores ... with the
per-phase split; the council's own cost reported beside it").

A bench runs one run at a time (``<bench>:<task>:<run>``), with several of that run's questions in flight,
so a run's wall time is the length of the union of its questions' intervals ``[finished_at − wall_s,
finished_at]`` (their wall times overlap: adding them up would count the same seconds several times).
Pauses written in the run's ``sittings.txt`` (``pause <from>..<to>`` lines: the bench stopped with SIGSTOP
for a quiet measurement elsewhere) are cut out of those intervals. So is the time between
sittings (from the last question finished before a ``start`` line to that start). A question resumed from
its checkpoint after a stop counts only its last sitting's part in runs made before session 18 (ref-2,
ref-3: ``wall_s`` restarted), which under-counts by at most the steps it had done before; later code adds
the earlier sittings' kept steps to ``wall_s`` (``agora.graphs.run_checkpoints.kept_wall_s``), whose interval then
reaches back over the gap, which is cut: for a run's span, a stop still under-counts by at most the steps
done before it (the question's own ``wall_s`` has them).

The council, MoA, debate and COMED's own steps run inside one COMED run; their shares of its wall time are
split in proportion to their model calls' latencies (nodes named below), since the calls of the questions
in flight overlap in time too. ALIGN and its baselines make no call of their own (they read the shared
draw), so the first edition's methods are: the shared draw, COMED's own steps (anchor, probe, escalation),
MoA and debate; ``comed_routed``'s own calls and the council are added beside them.

    python benchmarks/bench_ref2_phases.py /work/refrun/bench-ref2.db [--sittings FILE] [--bench ref-2] [--json]

Prints one row per run (phase): questions, wall s, s per question, generated tokens; then the COMED runs'
split by method and the totals.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
from collections import defaultdict
from datetime import datetime
from pathlib import Path

#: A COMED run's model calls by node prefix: its dense baselines' nodes (graphs/moa.py ``moa_*``,
#: graphs/debate.py ``debate_*``, graphs/council.py ``council_*``); every other node is COMED's own.
NODE_METHOD = {"council": "council", "moa": "moa", "debate": "debate"}


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def pauses(sittings: Path | None) -> list[tuple[float, float]]:
    """``pause <from>..<to>`` lines of a sittings file: (start, end) in epoch seconds; a ``<to>`` without a
    date takes ``<from>``'s."""
    out = []
    if sittings is None or not sittings.is_file():
        return out
    for line in sittings.read_text().splitlines():
        m = re.match(r"pause (\S+?)\.\.(\S+)", line)
        if m:
            a, b = m.group(1), m.group(2)
            if "T" not in b:
                b = a.split("T")[0] + "T" + b
            out.append((_ts(a), _ts(b)))
    return out


def sitting_starts(sittings: Path | None) -> list[float]:
    """``start <when>`` lines of a sittings file (one per sitting of the bench script), in epoch seconds."""
    if sittings is None or not sittings.is_file():
        return []
    return [_ts(m.group(1)) for line in sittings.read_text().splitlines() if (m := re.match(r"start (\S+)", line))]


def gaps(starts: list[float], finished: list[float]) -> list[tuple[float, float]]:
    """The time between sittings: from the last question finished before a sitting's start to that start
    (a stopped sitting writes no end line when its process is killed with the session)."""
    lasts = ((max((f for f in finished if f < start), default=None), start) for start in starts)
    return [(last, start) for last, start in lasts if last is not None]


def union_length(intervals: list[tuple[float, float]], cut: list[tuple[float, float]] = ()) -> float:
    """Length of the union of ``intervals`` minus its overlap with the ``cut`` intervals (seconds)."""
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = sum(b - a for a, b in merged)
    for a, b in merged:
        for c, d in cut:
            total -= max(0.0, min(b, d) - max(a, c))
    return total


def method_of(node: str) -> str:
    """The method a COMED run's model call serves: a dense baseline's, else COMED's own."""
    for prefix, method in NODE_METHOD.items():
        if node.startswith(prefix):
            return method
    return "comed"


def phases(db: Path, bench: str, sittings: Path | None) -> dict:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("select run_id, finished_at, wall_s, completion_tokens from questions "
                       "where substr(run_id, 1, ?) = ? order by run_id", [len(bench) + 1, f"{bench}:"]).fetchall()
    paused = pauses(sittings)
    cut = paused + gaps(sitting_starts(sittings), [_ts(r[1]) for r in rows])
    per_run: dict[str, dict] = {}
    spans: dict[str, list] = defaultdict(list)
    for run_id, finished_at, wall_s, tokens in rows:
        end = _ts(finished_at)
        spans[run_id].append((end - float(wall_s or 0.0), end))
        r = per_run.setdefault(run_id, {"questions": 0, "tokens": 0})
        r["questions"] += 1
        r["tokens"] += int(tokens or 0)
    for run_id, r in per_run.items():
        r["wall_s"] = union_length(spans[run_id], cut)
        r["s_per_question"] = r["wall_s"] / r["questions"]
    split: dict[str, dict[str, float]] = {}
    for run_id in per_run:
        if not run_id.endswith((":comed", ":comed-routed")):
            continue
        lat: dict[str, float] = defaultdict(float)
        for node, latency in con.execute("select node, sum(latency_s) from model_calls where run_id = ? and "
                                         "error is null group by node", [run_id]):
            lat[method_of(node)] += float(latency or 0.0)
        total = sum(lat.values())
        split[run_id] = {m: per_run[run_id]["wall_s"] * v / total for m, v in lat.items()} if total else {}
    first_edition = council = 0.0
    for run_id, r in per_run.items():
        if run_id.endswith("-dev") or ":calibrate" in run_id:
            continue
        if run_id in split and split[run_id]:
            council += split[run_id].get("council", 0.0)
            if run_id.endswith(":comed-routed"):
                continue  # the routed anchor is new in the second edition
            first_edition += sum(v for m, v in split[run_id].items() if m != "council")
        elif not run_id.endswith(":comed-routed"):
            first_edition += r["wall_s"]
    dev = sum(r["wall_s"] for run_id, r in per_run.items() if run_id.endswith("-dev"))
    return {"bench": bench, "pauses_cut_s": sum(b - a for a, b in paused), "runs": per_run, "comed_split": split,
            "dev_s": dev, "first_edition_test_s": first_edition, "council_s": council}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--bench", default="ref-2")
    ap.add_argument("--sittings", type=Path, default=None, help="sittings.txt (default: beside the DB)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sittings = a.sittings or a.db.parent / "sittings.txt"
    out = phases(a.db, a.bench, sittings)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"bench {out['bench']}: pauses cut {out['pauses_cut_s']:.0f} s ({sittings})")
    print(f"{'run (phase)':40s} {'questions':>9s} {'wall s':>9s} {'s/question':>10s} {'gen. tokens':>11s}")
    for run_id, r in sorted(out["runs"].items()):
        print(f"{run_id:40s} {r['questions']:9d} {r['wall_s']:9.0f} {r['s_per_question']:10.1f} {r['tokens']:11d}")
    for run_id, parts in sorted(out["comed_split"].items()):
        print(f"{run_id}: " + ", ".join(f"{m} {v:.0f} s" for m, v in sorted(parts.items())))
    print(f"dev phase: {out['dev_s'] / 3600:.2f} h; test runs, first edition's methods: "
          f"{out['first_edition_test_s'] / 3600:.2f} h; the council: {out['council_s'] / 3600:.2f} h")


if __name__ == "__main__":
    main()
