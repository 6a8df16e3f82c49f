#!/bin/bash
# The bench's second-edition reference run (issue 32 item 6), resumable: run this script again and it
# resumes (same --run-id, nothing finished is redone). It runs Agora from a frozen worktree at the commit
# the run started at (PINNED below), so that edits to the checkout cannot reach a running bench and
# every sitting runs the same code. Usage, from the repository root, with its venv built:
#   nohup benchmarks/bench_ref2.sh > /dev/null 2>&1 &     # then: tail $WORK/log*.txt, $WORK/sittings.txt
#   SIGTERM (kill <pid>) stops it after the running step; the next start resumes.
#   benchmarks/bench_ref2.sh save     # write the run so far to $BUNDLE and its sittings.txt beside it (commit both
#                                     # at the end of a session). Pausing it (SIGSTOP/SIGCONT) for a quiet
#                                     # measurement: add a "pause <from>..<to>" line to $WORK/sittings.txt, since
#                                     # the wall times of the questions in flight then include the pause.
# Figures so far: agora bench --run-id ref-2 --db $WORK/bench-ref2.db --report-only --out <folder>.
#
# The run outlives machines: a session may start on a new machine without $WORK (this happened on
# 2026-12-04, when the first attempt's DB, 50 of 240 test questions at mixed code versions, was lost with
# its machine). So at the end of every session the run so far is exported to $BUNDLE and committed, and a
# start that finds no DB imports $BUNDLE first (agora import; tests/test_bundles.py checks that a bench
# moved this way resumes to the results of a bench run in one go). Restarted from scratch on 2026-12-04
# (session 14) at PINNED, one code version and round size for every sitting.
set -u
PINNED=e64c432
ROUND=16
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${AGORA_REF2_DIR:-/work/refrun}            # the DB, logs and frozen worktree (not in git)
DATA=${AGORA_DATA:-$ROOT/../shared/data}        # the benchmark files (shared/data/README.md)
BUNDLE=$ROOT/benchmarks/bench-ref2/ref-2.agora.jsonl.gz   # the run so far, carried between machines
mkdir -p "$WORK/pkg"
[ -d "$WORK/src" ] || git -C "$ROOT" worktree add -q -f "$WORK/src" "$PINNED"
[ "$(git -C "$WORK/src" rev-parse --short=7 HEAD)" = "$PINNED" ] || git -C "$WORK/src" checkout -q --detach "$PINNED"
ln -sfn "$WORK/src" "$WORK/pkg/agora"           # `import agora` finds the frozen copy first
. "$ROOT/.venv/bin/activate"
# Export and import run the checkout's code, not the frozen copy (which cannot export a bench in its dev phase).
if [ "${1:-}" = save ]; then
  mkdir -p "$(dirname "$BUNDLE")"
  cp "$WORK/sittings.txt" "$(dirname "$BUNDLE")/sittings.txt"   # the sittings and pauses travel with it
  exec agora export --db "$WORK/bench-ref2.db" --bench-id ref-2 --out "$BUNDLE" --force
fi
if [ ! -f "$WORK/bench-ref2.db" ] && [ -f "$BUNDLE" ]; then
  [ -f "$(dirname "$BUNDLE")/sittings.txt" ] && cat "$(dirname "$BUNDLE")/sittings.txt" >> "$WORK/sittings.txt"
  echo "imported $BUNDLE on $(hostname) at $(date -u +%FT%TZ)" >> "$WORK/sittings.txt"
  agora import "$BUNDLE" --db "$WORK/bench-ref2.db" >> "$WORK/sittings.txt" 2>&1 || exit 1
fi
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
