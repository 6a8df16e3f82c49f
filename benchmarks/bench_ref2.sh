#!/bin/bash
# The bench's second-edition reference run (issue 32 item 6), resumable: run this script again and it
# resumes (same --run-id, nothing finished is redone). It runs Agora from a frozen worktree at the commit
# the run started at (PINNED below), so that edits to the checkout cannot reach a running bench and
# every sitting runs the same code. Usage, from the repository root, with its venv built:
#   nohup benchmarks/bench_ref2.sh > /dev/null 2>&1 &     # then: tail $WORK/log*.txt, $WORK/sittings.txt
#   SIGTERM (kill <pid>) stops it after the running step; the next start resumes.
# Figures so far: agora bench --run-id ref-2 --db $WORK/bench-ref2.db --report-only --out <folder>.
set -u
# The code the run uses: it started at 7a54c9a (sittings 1-3, one question at a time); from sitting 4
# (2026-12-03, session 11) it runs at 400a7ef, whose embedded engine batches across questions in flight
# (continuous batching, issue 29; the bench's default concurrency, 8, capped by the round size: 5 in
# sittings 4-6, 16 from sitting 7 so that 8 questions are in flight; rounds change only the order in
# which questions run, never their runs or results). Sitting 8 stopped on a trace-store race that 8
# threads exposed ("no such savepoint: sqlite_utils_query", fixed in 02cd30b); from sitting 9 it runs at
# 02cd30b (the store fix, and 400a7ef's later commits: review fixes that keep behaviour, the ETA).
# Each sitting's commit and round size are in $WORK/sittings.txt; finished questions are never redone.
PINNED=02cd30b
ROUND=16
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${AGORA_REF2_DIR:-/work/refrun}            # the DB, logs and frozen worktree (not in git)
DATA=${AGORA_DATA:-$ROOT/../shared/data}        # the benchmark files (shared/data/README.md)
mkdir -p "$WORK/pkg"
[ -d "$WORK/src" ] || git -C "$ROOT" worktree add -q "$WORK/src" "$PINNED"
[ "$(git -C "$WORK/src" rev-parse --short=7 HEAD)" = "$PINNED" ] || git -C "$WORK/src" checkout -q --detach "$PINNED"
ln -sfn "$WORK/src" "$WORK/pkg/agora"           # `import agora` finds the frozen copy first
. "$ROOT/.venv/bin/activate"
export PYTHONPATH="$WORK/pkg"
cd "$WORK"
D=$(cd "$DATA" && pwd)
n=$(ls "$WORK"/log*.txt 2>/dev/null | wc -l)
echo "start $(date -u +%FT%TZ) commit $(git -C "$WORK/src" rev-parse --short HEAD) cores $(nproc) round-size $ROUND" >> "$WORK/sittings.txt"
agora bench \
  --tasks gsm8k=$D/gsm8k/test.jsonl,arc=$D/arc/arc_challenge_test.jsonl,math500=$D/math/math500_test.jsonl,mmlu=$D/mmlu/mmlu_dev.jsonl \
  --limit 60 --dev 20 --max-calls 1.5 --seed 0 --round-size $ROUND \
  --db "$WORK/bench-ref2.db" --run-id ref-2 --out "$WORK/bench-ref2" > "$WORK/log$((n+1)).txt" 2>&1
rc=$?
echo "end $(date -u +%FT%TZ) rc $rc" >> "$WORK/sittings.txt"
