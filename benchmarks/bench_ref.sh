#!/bin/bash
# The bench's second-edition reference runs (issue 32 item 6), resumable: run this script again and it
# resumes (same --run-id, nothing finished is redone). It runs Agora from a frozen worktree at the commit
# the run started at (PINNED below), so that edits to the checkout cannot reach a running bench and
# every sitting runs the same code. Usage, from the repository root, with its venv built:
#   AGORA_REF=ref-3 nohup benchmarks/bench_ref.sh > /dev/null 2>&1 &   # then: tail $WORK/log*.txt, $WORK/sittings.txt
#   SIGTERM (kill <pid>) stops it after the running step; the next start resumes.
#   AGORA_REF=ref-3 benchmarks/bench_ref.sh save   # write the run so far to $BUNDLE and its sittings.txt beside it
#                                     # (commit both at the end of a session). Pausing it (SIGSTOP/SIGCONT) for a
#                                     # quiet measurement: add a "pause <from>..<to>" line to $WORK/sittings.txt,
#                                     # since the wall times of the questions in flight then include the pause.
# Figures so far: agora bench --run-id $REF --db $DB --report-only --out <folder>;
# wall time per phase: python benchmarks/bench_ref2_phases.py $DB --bench $REF.
#
# The runs (same tasks, question sets, seed and pool; AGORA_REF picks one, default ref-3):
#   ref-2  at e64c432, rounds of 16 test questions (2026-12-04, 3 sittings, complete; benchmarks/bench-ref2/).
#   ref-3  at PINNED below, each run in one go (--round-size 0: fewer tails with fewer than 8 questions in
#          flight) and with prompt-prefix reuse in the batch decoder (session 17), on a quiet machine.
#   ref-4  the same tasks, question sets, dev split, seed and round size as ref-3, on the built-in pool
#          `diverse` (members = weights x recipe), with the shared candidates, SLM-MUX among the methods and
#          --matched-single (the dev-chosen best member's own vote at the samples the best method used).
#          pinned at 35c6431 (the diverse pool of the member table, --matched-single, SLM-MUX).
#
# A run outlives machines: a session may start on a new machine without $WORK (this happened on
# 2026-12-04, when ref-2's first attempt, 50 of 240 test questions at mixed code versions, was lost with
# its machine). So at the end of every session the run so far is exported to $BUNDLE and committed, and a
# start that finds no DB imports $BUNDLE first (agora import; tests/test_bundles.py checks that a bench
# moved this way resumes to the results of a bench run in one go).
set -u
REF=${AGORA_REF:-ref-3}
EXTRA=()                                        # options a run adds to the common command line below
case $REF in
  ref-2) PINNED=e64c432; ROUND=16; WORK=${AGORA_REF_DIR:-/work/refrun} ;;
  ref-3) PINNED=c0af482; ROUND=0; WORK=${AGORA_REF_DIR:-/work/refrun3} ;;
  ref-4) PINNED=35c6431; ROUND=0; WORK=${AGORA_REF_DIR:-/work/refrun4}
         EXTRA=(--pool diverse --shared-candidates --protocols all --matched-single) ;;
  *) echo "AGORA_REF: ref-2, ref-3 or ref-4, not $REF" >&2; exit 2 ;;
esac
if ! [[ $PINNED =~ ^[0-9a-f]{7}$ ]]; then
  echo "$REF: PINNED is '$PINNED', not a 7-character commit hash: write the commit to run in $0's $REF line first" >&2
  exit 2
fi
NAME=bench-${REF/-/}                            # bench-ref2, bench-ref3, bench-ref4
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DB=$WORK/$NAME.db                               # WORK: the DB, logs and frozen worktree (not in git)
DATA=${AGORA_DATA:-$ROOT/../shared/data}        # the benchmark files (shared/data/README.md)
BUNDLE=$ROOT/benchmarks/$NAME/$REF.agora.jsonl.gz   # the run so far, carried between machines
mkdir -p "$WORK/pkg"
[ -d "$WORK/src" ] || git -C "$ROOT" worktree add -q -f "$WORK/src" "$PINNED"
[ "$(git -C "$WORK/src" rev-parse --short=7 HEAD)" = "$PINNED" ] || git -C "$WORK/src" checkout -q --detach "$PINNED"
ln -sfn "$WORK/src" "$WORK/pkg/agora"           # `import agora` finds the frozen copy first
. "$ROOT/.venv/bin/activate"
# Export and import run the checkout's code, not the frozen copy (which cannot export a bench in its dev phase).
if [ "${1:-}" = save ]; then
  mkdir -p "$(dirname "$BUNDLE")"
  cp "$WORK/sittings.txt" "$(dirname "$BUNDLE")/sittings.txt"   # the sittings and pauses travel with it
  exec agora export --db "$DB" --bench-id $REF --out "$BUNDLE" --force
fi
if [ ! -f "$DB" ] && [ -f "$BUNDLE" ]; then
  [ -f "$(dirname "$BUNDLE")/sittings.txt" ] && cat "$(dirname "$BUNDLE")/sittings.txt" >> "$WORK/sittings.txt"
  echo "imported $BUNDLE on $(hostname) at $(date -u +%FT%TZ)" >> "$WORK/sittings.txt"
  agora import "$BUNDLE" --db "$DB" >> "$WORK/sittings.txt" 2>&1 || exit 1
fi
export PYTHONPATH="$WORK/pkg"
cd "$WORK"
if [ "$REF" = ref-4 ]; then  # the pinned code must have what ref-4 asks for, before any model is asked
  agora bench --help | grep -q -- --matched-single \
    || { echo "$REF: agora bench at $PINNED has no --matched-single: pin a later commit" >&2; exit 2; }
  python -c "from agora.graphs.registry import bench_specs; import sys; sys.exit(all(s.name != 'slm-mux' for s in bench_specs()))" \
    || { echo "$REF: SLM-MUX is not a bench method at $PINNED: pin a later commit" >&2; exit 2; }
  agora pool show diverse > /dev/null \
    || { echo "$REF: no built-in pool 'diverse' at $PINNED: pin a later commit" >&2; exit 2; }
fi
D=$(cd "$DATA" && pwd)
n=$(ls "$WORK"/log*.txt 2>/dev/null | wc -l)
echo "start $(date -u +%FT%TZ) commit $(git -C "$WORK/src" rev-parse --short HEAD) cores $(nproc) round-size $ROUND${EXTRA[*]:+ ${EXTRA[*]}}" >> "$WORK/sittings.txt"
agora bench \
  --tasks gsm8k=$D/gsm8k/test.jsonl,arc=$D/arc/arc_challenge_test.jsonl,math500=$D/math/math500_test.jsonl,mmlu=$D/mmlu/mmlu_dev.jsonl \
  --limit 60 --dev 20 --max-calls 1.5 --seed 0 --round-size $ROUND \
  "${EXTRA[@]}" --db "$DB" --run-id $REF --out "$WORK/$NAME" > "$WORK/log$((n+1)).txt" 2>&1
rc=$?
echo "end $(date -u +%FT%TZ) rc $rc" >> "$WORK/sittings.txt"
