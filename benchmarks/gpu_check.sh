#!/usr/bin/env bash
# The GPU check (issue 29, item 5): on a CUDA machine, in about 10 minutes,
#   1. installs Agora (if its venv is missing) and vLLM's CUDA build in a venv of its own,
#   2. converts the two built-in Qwen2.5-Coder GGUF models to HF folders (export_hf),
#   3. serves them with `agora serve` (one vLLM server each, 127.0.0.1),
#   4. runs the reference bench's questions (benchmarks/README.md, "Reference run") at high
#      concurrency on the served pool (`agora bench --pool served.toml --concurrency 64`),
#   5. runs the orchestration-efficiency benchmark (benchmarks/orchestration.py) on the same servers,
#   6. stops those servers, then serves the 1.5B model as replicas in two ways and runs the same ALIGN
#      questions (`agora run align`, REPLICA_QUESTIONS of GSM8K at --concurrency CONCURRENCY) on each:
#      (a) Agora's endpoint list: one vLLM server per GPU (CUDA_VISIBLE_DEVICES), the pool entry's
#          `endpoints` listing them, balanced by Agora (round-robin, a dead replica skipped);
#      (b) vLLM's own data-parallel serving: one server with `--data-parallel-size G` (one endpoint,
#          vLLM balancing its ranks by their running and waiting queues);
#      with one GPU, (a) is two servers sharing it and (b) one server (vLLM's data parallelism needs
#      a GPU per rank), so the table then compares splitting a GPU, not the two balancers;
#   7. prints one table: each step's wall time, the bench's accuracy per method, the orchestration
#      figures and each replica arm's questions/s and generated tokens/s.
#
# Without a CUDA GPU (no working `nvidia-smi`), or with --dry-run, it is a dry run: it prints each
# step's command and exits 0 without running, installing or writing anything
# (tests/test_gpu_check.py runs it that way).
#
# Usage:  bash benchmarks/gpu_check.sh [--dry-run]
# Settings (environment): GPU_CHECK_OUT (work folder, default ./gpu-check), AGORA_VENV (.venv),
# VLLM_VENV (.venv-vllm-gpu), VLLM_SPEC (vllm), AGORA_DATA (../shared/data: the benchmark files),
# LIMIT (60 test questions per task), CONCURRENCY (64), MEMORY_FRACTION (0.4 of the GPU per server),
# PORT (8100), NVIDIA_SMI (nvidia-smi), REPLICAS (the GPU count; 2 on one GPU or in a dry run),
# REPLICA_QUESTIONS (200).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${GPU_CHECK_OUT:-$ROOT/gpu-check}"
AGORA_VENV="${AGORA_VENV:-$ROOT/.venv}"
VLLM_VENV="${VLLM_VENV:-$ROOT/.venv-vllm-gpu}"
VLLM_SPEC="${VLLM_SPEC:-vllm}"
DATA="${AGORA_DATA:-$ROOT/../shared/data}"
LIMIT="${LIMIT:-60}"
CONCURRENCY="${CONCURRENCY:-64}"
MEMORY_FRACTION="${MEMORY_FRACTION:-0.4}"
PORT="${PORT:-8100}"
NVIDIA_SMI="${NVIDIA_SMI:-nvidia-smi}"
BUDGET_S=600
REPLICA_QUESTIONS="${REPLICA_QUESTIONS:-200}"
REPLICA_PORT=$((PORT + 50))

DRY=""
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY="--dry-run was given" ;;
        -h|--help) sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument '$arg' (expected --dry-run or --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$DRY" ]; then
    if ! command -v "$NVIDIA_SMI" >/dev/null 2>&1; then
        DRY="no $NVIDIA_SMI on PATH: no CUDA GPU here"
    elif ! "$NVIDIA_SMI" -L >/dev/null 2>&1; then
        DRY="$NVIDIA_SMI -L failed: no usable CUDA GPU here"
    fi
fi

TASKS="gsm8k=$DATA/gsm8k/test.jsonl,arc=$DATA/arc/arc_challenge_test.jsonl,math500=$DATA/math/math500_test.jsonl,mmlu=$DATA/mmlu/mmlu_dev.jsonl"
# Converts both Qwen models and writes the pool file agora serve reads: HF-folder entries, so the
# check does not depend on which engine the embedded pool uses.
CONVERT='import sys
from agora.models.convert import export_hf
lines = []
for name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
    folder = export_hf(name)
    print(name, "->", folder, flush=True)
    lines += ["[[models]]", f"name = \"{name}\"", "backend = \"vllm\"", f"model = \"{folder}\"", "n_ctx = 4096", ""]
open(sys.argv[1], "w").write("\n".join(lines))'

STEP=0
STARTED=$SECONDS
SERVE_PID=""
REPLICA_PIDS=()

# step NAME COMMAND...: print the step and its command; run it unless this is a dry run, timing it
# into $OUT/steps.tsv.
step() {
    local name="$1"; shift
    local shown=("$@") note=""
    case "$1" in  # this script's own functions and shell lines, shown as what they run
        serve) shown=("${@:2}"); note="   # in the background, until it writes $OUT/served.toml" ;;
        stop_servers) shown=(kill -TERM "<agora-serve-pid>"); note="   # SIGTERM: agora serve stops its servers" ;;
        replica_arm) shown=("${REPLICA_SHOWN[@]}"); note="   # then agora run align on them, and SIGTERM" ;;
    esac
    STEP=$((STEP + 1))
    printf 'step %d: %s\n    $' "$STEP" "$name"
    if [ "$1" = bash ] && [ "$2" = -c ]; then
        printf ' %s' "$3"
    else
        local arg
        for arg in "${shown[@]}"; do
            if [[ "$arg" =~ ^[][A-Za-z0-9_./=:,+@%\<\>\&-]+$ ]]; then printf ' %s' "$arg"; else printf ' %q' "$arg"; fi
        done
    fi
    printf '%s\n' "$note"
    [ -n "$DRY" ] && return 0
    local t0=$SECONDS
    "$@"
    printf '%s\t%s\n' "$name" "$((SECONDS - t0))" >> "$OUT/steps.tsv"
}

stop_servers() {
    if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then
        kill -TERM "$SERVE_PID" 2>/dev/null || true
        wait "$SERVE_PID" 2>/dev/null || true
    fi
}

stop_replicas() {
    local pid
    for pid in "${REPLICA_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${REPLICA_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    REPLICA_PIDS=()
}

# port_open PORT: whether something accepts connections on 127.0.0.1:PORT (vLLM opens its port once ready).
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# replica_command ARM I: the vLLM server command of replica I of ARM (endpoints: one per GPU, or
# two sharing GPU 0; dp: one server with --data-parallel-size REPLICAS).
replica_command() {
    local arm=$1 i=$2 fraction=0.85
    local cmd=("$VLLM_VENV/bin/python" -m vllm.entrypoints.openai.api_server --model "$REPLICA_MODEL"
               --served-model-name qwen2.5-coder-1.5b --host 127.0.0.1 --max-model-len 4096)
    if [ "$arm" = endpoints ]; then
        [ "$GPUS" -ge "$REPLICAS" ] || fraction=$(awk -v r="$REPLICAS" 'BEGIN { printf "%.2f", 0.85 / r }')
        cmd+=(--port "$((REPLICA_PORT + i))" --gpu-memory-utilization "$fraction")
    else
        cmd+=(--port "$REPLICA_PORT" --gpu-memory-utilization 0.85)
        [ "$REPLICAS" -gt 1 ] && [ "$GPUS" -ge "$REPLICAS" ] && cmd+=(--data-parallel-size "$REPLICAS")
    fi
    printf '%s\0' "${cmd[@]}"
}

# replica_arm ARM: serve the 1.5B model as ARM's replicas, run the ALIGN questions on them through a
# pool file listing their endpoints, stop them. Its pool file, log and trace DB are $OUT/replicas-ARM.*.
replica_arm() {
    local arm=$1 i n=1 ports=() urls=()
    [ "$arm" = endpoints ] && n=$REPLICAS
    for ((i = 0; i < n; i++)); do
        local cmd=() device=0
        mapfile -d '' cmd < <(replica_command "$arm" "$i")
        if [ "$arm" = endpoints ]; then
            [ "$GPUS" -ge "$REPLICAS" ] && device=$i
        else
            device=$(seq -s, 0 $((REPLICAS > GPUS ? 0 : REPLICAS - 1)))
        fi
        CUDA_VISIBLE_DEVICES=$device VLLM_HOST_IP=127.0.0.1 "${cmd[@]}" > "$OUT/replicas-$arm-$i.log" 2>&1 &
        REPLICA_PIDS+=($!)
        ports+=("$((REPLICA_PORT + i))")
        urls+=("\"http://127.0.0.1:$((REPLICA_PORT + i))/v1\"")
    done
    local deadline=$((SECONDS + 420)) port pid
    for port in "${ports[@]}"; do
        until port_open "$port"; do
            for pid in "${REPLICA_PIDS[@]}"; do
                if ! kill -0 "$pid" 2>/dev/null; then
                    echo "gpu_check.sh: a $arm replica stopped before it served; end of its log:" >&2
                    tail -n 30 "$OUT"/replicas-"$arm"-*.log >&2
                    stop_replicas; return 1
                fi
            done
            if [ $SECONDS -gt $deadline ]; then
                echo "gpu_check.sh: the $arm replicas did not open their ports within 420 s" >&2
                stop_replicas; return 1
            fi
            sleep 2
        done
    done
    local joined
    joined=$(IFS=,; echo "${urls[*]}")
    printf '[[models]]\nname = "qwen2.5-coder-1.5b"\nbackend = "openai"\nmodel = "qwen2.5-coder-1.5b"\nendpoints = [%s]\n' \
        "$joined" > "$OUT/replicas-$arm.toml"
    local t0=$SECONDS
    "$AGORA_VENV/bin/agora" run align --pool "$OUT/replicas-$arm.toml" --data "$DATA/gsm8k/test.jsonl" \
        --limit "$REPLICA_QUESTIONS" --concurrency "$CONCURRENCY" --db "$OUT/replicas-$arm.db" --run-id "replicas-$arm" \
        > "$OUT/replicas-$arm.run.log" 2>&1 || { stop_replicas; tail -n 20 "$OUT/replicas-$arm.run.log" >&2; return 1; }
    printf '%s\t%s\t%s\t%s\n' "$arm" "$n" "$GPUS" "$((SECONDS - t0))" >> "$OUT/replicas.tsv"
    stop_replicas
}

# serve: `agora serve` in the background until it has written the pool file of its servers.
serve() {
    rm -f "$OUT/served.toml"
    "$@" > "$OUT/serve.log" 2>&1 &
    SERVE_PID=$!
    local deadline=$((SECONDS + 420))
    until [ -f "$OUT/served.toml" ]; do
        if ! kill -0 "$SERVE_PID" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
            echo "gpu_check.sh: agora serve wrote no pool file; end of $OUT/serve.log:" >&2
            tail -n 30 "$OUT/serve.log" >&2
            return 1
        fi
        sleep 2
    done
}

GPUS=${GPUS:-0}
if [ -n "$DRY" ]; then
    echo "gpu_check.sh: dry run ($DRY): the steps it would run on a CUDA machine:"
else
    mkdir -p "$OUT"
    : > "$OUT/steps.tsv"
    : > "$OUT/replicas.tsv"
    trap 'stop_servers; stop_replicas' EXIT
    "$NVIDIA_SMI" -L | tee "$OUT/gpus.txt"
    GPUS=$(grep -c '^GPU ' "$OUT/gpus.txt" || true)
    for file in gsm8k/test.jsonl arc/arc_challenge_test.jsonl math/math500_test.jsonl mmlu/mmlu_dev.jsonl; do
        [ -f "$DATA/$file" ] || { echo "gpu_check.sh: $DATA/$file: no such benchmark file (set AGORA_DATA)" >&2; exit 1; }
    done
fi

if [ -n "$DRY" ] || [ ! -x "$AGORA_VENV/bin/agora" ]; then
    step "install Agora with the train extra (GGUF conversion)" \
        bash -c "python3 -m venv '$AGORA_VENV' && '$AGORA_VENV/bin/pip' install -e '$ROOT[train]'"
fi
if [ -n "$DRY" ] || ! "$VLLM_VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    step "install vLLM, the CUDA build, in its own venv" \
        bash -c "python3 -m venv '$VLLM_VENV' && '$VLLM_VENV/bin/pip' install '$VLLM_SPEC'"
fi
step "convert the built-in Qwen GGUF models to HF folders (export_hf) and write their pool file" \
    "$AGORA_VENV/bin/python" -c "$CONVERT" "$OUT/pool-in.toml"
step "serve both Qwen models on vLLM (agora serve, 127.0.0.1)" serve \
    "$AGORA_VENV/bin/agora" serve --pool "$OUT/pool-in.toml" --out "$OUT/served.toml" --python "$VLLM_VENV/bin/python" --port "$PORT" \
    --memory-fraction "$MEMORY_FRACTION" --startup-timeout 400 --log-dir "$OUT/logs"
step "reference bench questions at --concurrency $CONCURRENCY on the served pool (agora bench)" \
    "$AGORA_VENV/bin/agora" bench --pool "$OUT/served.toml" --tasks "$TASKS" --limit "$LIMIT" --dev 20 \
    --max-calls 1.5 --seed 0 --round-size 0 --concurrency "$CONCURRENCY" --db "$OUT/gpu.db" --run-id gpu-1 \
    --out "$OUT/bench"
step "orchestration efficiency on the served pool (benchmarks/orchestration.py)" \
    bash -c "'$AGORA_VENV/bin/python' '$ROOT/benchmarks/orchestration.py' --pool '$OUT/served.toml' --data '$DATA/gsm8k/test.jsonl' --questions $CONCURRENCY --rounds 1 --llama-questions 0 | tee '$OUT/orchestration.txt'"
step "stop the servers" stop_servers

# Replicas: Agora's endpoint list against vLLM's data-parallel serving, the same questions on each.
if [ -n "$DRY" ]; then GPUS=${REPLICAS:-2}; fi  # a dry run shows the commands for REPLICAS (2) GPUs
REPLICAS="${REPLICAS:-$(( GPUS > 1 ? GPUS : 2 ))}"
REPLICA_MODEL=$(awk '/^name = "qwen2.5-coder-1.5b"/ { found = 1 } found && /^model = / { gsub(/^model = "|"$/, ""); print; exit }' \
    "$OUT/pool-in.toml" 2>/dev/null || true)
REPLICA_MODEL=${REPLICA_MODEL:-"<qwen2.5-coder-1.5b-HF-folder>"}
for arm in endpoints dp; do
    REPLICA_SHOWN=()
    n=1; [ "$arm" = endpoints ] && n=$REPLICAS
    for ((i = 0; i < n; i++)); do
        mapfile -d '' cmd < <(replica_command "$arm" "$i")
        [ $i -gt 0 ] && REPLICA_SHOWN+=("&")
        REPLICA_SHOWN+=("${cmd[@]}")
    done
    if [ "$arm" = endpoints ]; then
        title="replicas: Agora's endpoint list over $REPLICAS vLLM servers ($( [ "$GPUS" -ge "$REPLICAS" ] && echo "one per GPU" || echo "sharing one GPU"))"
    elif [ "$GPUS" -ge "$REPLICAS" ]; then
        title="replicas: vLLM's data-parallel serving, one server with --data-parallel-size $REPLICAS"
    else
        title="replicas: one vLLM server on the GPU (--data-parallel-size needs a GPU per rank: $GPUS GPU here)"
    fi
    step "$title" replica_arm "$arm"
done

if [ -n "$DRY" ]; then
    echo "gpu_check.sh: dry run: nothing was run; $STEP steps, then one table of wall times, accuracy, orchestration and replica figures."
    exit 0
fi

"$AGORA_VENV/bin/python" - "$OUT" "$((SECONDS - STARTED))" "$BUDGET_S" "$ROOT/benchmarks/bench-ref/bench.json" <<'EOF'
import json, re, sys
from pathlib import Path

out, total, budget, reference = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
ref = {c["method"]: c for c in json.loads(reference.read_text()).get("macro", [])} if reference.is_file() else {}
rows = [("step", name, f"{float(s):.0f} s") for name, s in
        (line.split("\t") for line in (out / "steps.tsv").read_text().splitlines() if line)]
rows.append(("total", "wall time, goal ≤ %d s" % budget, f"{total} s" + ("" if total <= budget else "  (over)")))
bench = out / "bench" / "bench.json"
if bench.is_file():
    report = json.loads(bench.read_text())
    for cell in report.get("macro", []):
        was = ref.get(cell["method"])
        rows.append(("bench", f"{cell['method']}: macro accuracy [95% CI], tokens/q, wall s/q",
                     f"{cell['accuracy']:.3f} [{cell['ci_low']:.3f}, {cell['ci_high']:.3f}], {cell['tokens_per_q']:.0f}, "
                     f"{cell.get('wall_s_per_q', float('nan')):.2f}"
                     + (f"  (CPU reference run: {was['accuracy']:.3f}, {was['wall_s_per_q']:.2f} s/q)" if was else "")))
orchestration = out / "orchestration.txt"
if orchestration.is_file():
    for line in orchestration.read_text().splitlines():
        if re.search(r"tok/s|ratio|overhead", line):
            rows.append(("orchestration", "", line.strip()))
replicas = out / "replicas.tsv"
for line in (replicas.read_text().splitlines() if replicas.is_file() else []):
    arm, n, gpus, wall = line.split("\t")
    db, questions, tokens = out / f"replicas-{arm}.db", None, None
    if db.is_file():
        import sqlite3
        con = sqlite3.connect(db)
        questions = con.execute("select count(*) from questions").fetchone()[0]
        tokens = con.execute("select sum(completion_tokens) from model_calls where error is null").fetchone()[0] or 0
        con.close()
    how = (f"endpoint list, {n} servers" if arm == "endpoints" else
           f"--data-parallel-size {n if int(gpus) >= int(n) else 1}" if arm == "dp" else arm)
    wall = max(1, int(wall))
    rows.append(("replicas", f"{how} ({gpus} GPU): questions/s, generated tok/s",
                 f"{questions / wall:.2f}, {tokens / wall:.0f}" if questions else f"no trace DB; {wall} s"))
width = [max(len(r[i]) for r in rows) for i in range(3)]
print()
for r in [("part", "figure", "value"), tuple("-" * w for w in width), *rows]:
    print(" | ".join(c.ljust(w) for c, w in zip(r, width)))
EOF
