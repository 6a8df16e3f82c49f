"""``benchmarks/gpu_check.sh`` as a dry run: without a CUDA GPU (or with ``--dry-run``) it prints the
steps it would run on one, in order, and exits 0 having run, installed and written nothing."""

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
from ports import free_ports

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.sh"
TASK_FILES = ("gsm8k/test.jsonl", "arc/arc_challenge_test.jsonl", "math/math500_test.jsonl", "mmlu/mmlu_dev.jsonl")


def fake_nvidia_smi(tmp_path: Path, status: int) -> Path:
    """An ``nvidia-smi`` that records each call and exits with ``status``."""
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/nvidia-smi.calls"\necho "GPU 0: Fake"\nexit {status}\n')
    tool.chmod(0o755)
    return tool


def run_check(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """Run the script; returns the process and its steps (name → printed command), in order."""
    base = {**os.environ, "GPU_CHECK_OUT": str(tmp_path / "out"), "AGORA_VENV": str(tmp_path / "venv"),
            "VLLM_VENV": str(tmp_path / "venv-vllm"), "AGORA_DATA": str(tmp_path / "data")}
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={**base, **env})
    lines = proc.stdout.splitlines()
    steps = {}
    for i, line in enumerate(lines):
        match = re.fullmatch(r"step (\d+): (.+)", line)
        if match:
            assert int(match.group(1)) == len(steps) + 1, proc.stdout
            steps[match.group(2)] = lines[i + 1].strip().removeprefix("$ ")
    return proc, steps


def test_dry_run_prints_every_step_in_order_and_runs_nothing(tmp_path):
    tool = fake_nvidia_smi(tmp_path, 0)
    proc, steps = run_check(tmp_path, "--dry-run", NVIDIA_SMI=str(tool))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == ("gpu_check.sh: dry run (--dry-run was given): the steps it would run "
                                           "on a CUDA machine:")
    names = list(steps)
    assert [n.split(" ")[0] for n in names] == ["install", "install", "convert", "serve", "reference",
                                                "orchestration", "stop", "replicas:", "replicas:"]
    agora, vllm_py = tmp_path / "venv" / "bin", tmp_path / "venv-vllm" / "bin" / "python"
    install_vllm, convert, serve, bench, orchestration = (steps[n] for n in names[1:6])
    assert install_vllm == f"python3 -m venv '{tmp_path}/venv-vllm' && '{tmp_path}/venv-vllm/bin/pip' install 'vllm'"
    assert convert.startswith(f"{agora}/python -c ") and "export_hf" in convert
    assert "qwen2.5-coder-0.5b" in convert and "qwen2.5-coder-1.5b" in convert
    out = tmp_path / "out"
    assert convert.endswith(f" {out}/pool-in.toml")
    assert serve.startswith(f"{agora}/agora serve --pool {out}/pool-in.toml --out {out}/served.toml --python {vllm_py} "
                            "--port 8100 --memory-fraction 0.4")
    assert bench.startswith(f"{agora}/agora bench --pool {out}/served.toml --tasks gsm8k={tmp_path}/data/gsm8k/test.jsonl,")
    assert all(f"{tmp_path}/data/{f}" in bench for f in TASK_FILES)
    assert "--limit 60 --dev 20 --max-calls 1.5 --seed 0" in bench and "--concurrency 64" in bench
    assert f"orchestration.py' --pool '{out}/served.toml'" in orchestration and "--questions 64" in orchestration
    # replicas: Agora's endpoint list (one vLLM server per GPU) against vLLM's own data parallelism
    server = (f"{vllm_py} -m vllm.entrypoints.openai.api_server --model <qwen2.5-coder-1.5b-HF-folder> "
              "--served-model-name qwen2.5-coder-1.5b --host 127.0.0.1 --max-model-len 4096")
    endpoints, dp = steps[names[7]], steps[names[8]]
    assert names[7] == "replicas: Agora's endpoint list over 2 vLLM servers (one per GPU)"
    assert endpoints == (f"{server} --port 8150 --gpu-memory-utilization 0.85 & {server} --port 8151 "
                         "--gpu-memory-utilization 0.85   # then agora run align on them, and SIGTERM")
    assert names[8] == "replicas: vLLM's data-parallel serving, one server with --data-parallel-size 2"
    assert dp == (f"{server} --port 8150 --gpu-memory-utilization 0.85 --data-parallel-size 2   "
                  "# then agora run align on them, and SIGTERM")
    assert proc.stdout.rstrip().endswith("dry run: nothing was run; 9 steps, then one table of wall times, "
                                         "accuracy, orchestration and replica figures.")
    assert not out.exists() and not (tmp_path / "venv-vllm").exists()
    assert not (tmp_path / "nvidia-smi.calls").exists()  # --dry-run does not even look for a GPU


@pytest.mark.parametrize("status, reason", [(None, "no {tool} on PATH: no CUDA GPU here"),
                                            (9, "{tool} -L failed: no usable CUDA GPU here")])
def test_without_a_working_gpu_it_is_a_dry_run(tmp_path, status, reason):
    tool = tmp_path / "absent-nvidia-smi" if status is None else fake_nvidia_smi(tmp_path, status)
    proc, steps = run_check(tmp_path, NVIDIA_SMI=str(tool), CONCURRENCY="16")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"gpu_check.sh: dry run ({reason.format(tool=tool)})")
    assert len(steps) == 9 and "--concurrency 16" in steps["reference bench questions at --concurrency 16 on the "
                                                          "served pool (agora bench)"]
    assert not (tmp_path / "out").exists()


def test_an_unknown_argument_is_refused(tmp_path):
    proc, steps = run_check(tmp_path, "--gpu")
    assert proc.returncode == 2 and steps == {}
    assert "unknown argument '--gpu' (expected --dry-run or --help)" in proc.stderr


def stand_in(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def test_the_real_path_with_stand_in_tools_prints_one_table_and_stops_the_servers(tmp_path):
    """The steps as they run on a CUDA machine, with stand-ins for nvidia-smi, Agora and vLLM (installed
    already, so not installed again): the served pool file is awaited, each step timed, the servers
    stopped, and the table carries the bench's and the orchestration benchmark's figures."""
    calls = tmp_path / "calls"
    stand_in(tmp_path / "venv" / "bin" / "agora", f"""echo "agora $*" >> {calls}
cmd=$1; [ "$cmd" = run ] && shift
shift
out=""; db=""; pool=""
while [ $# -gt 0 ]; do
  case $1 in --out) out=$2 ;; --db) db=$2 ;; --pool) pool=$2 ;; esac; shift
done
case $cmd in
  run) cp "$pool" "$pool.seen"
       python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('create table questions (q)'); c.execute('create table model_calls (completion_tokens, error)'); c.executemany('insert into questions values (?)', [(i,) for i in range(4)]); c.execute('insert into model_calls values (400, null)'); c.commit()" "$db" ;;
  serve) trap 'echo "servers stopped" >> {calls}; exit 0' TERM
         sleep 1; printf '[[models]]\\n' > "$out"; while true; do sleep 0.1; done ;;
  bench) mkdir -p "$out"; echo '{{"macro": [{{"method": "align", "accuracy": 0.5, "ci_low": 0.4, "ci_high": 0.6, "tokens_per_q": 100, "wall_s_per_q": 0.25}}]}}' > "$out/bench.json" ;;
esac
""")
    stand_in(tmp_path / "venv" / "bin" / "python", f"""echo "python ${{1##*/}}" >> {calls}  # the script's name: checkout paths differ in length
case "$1" in
  -) exec python3 "$@" ;;
  -c) printf '[[models]]\\n' > "$3" ;;
  *orchestration.py) echo "(a) 64 questions"; echo "    efficiency ratio graph/direct = 0.950 — goal ≥ 0.90" ;;
esac
""")
    stub = Path(__file__).resolve().parent / "openai_stub.py"  # stands in for vLLM's OpenAI server
    stand_in(tmp_path / "venv-vllm" / "bin" / "python", f"""echo "vllm-python $*${{CUDA_VISIBLE_DEVICES+ CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES}}" >> {calls}
if [ "$1" = -m ]; then shift 2; exec python3 {stub} "$@"; fi
""")
    for name in TASK_FILES:
        (tmp_path / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / name).write_text("")
    # the replicas listen on PORT + 50 and PORT + 51, polled by the script until they do: two free ports
    # below the ephemeral range, which no other socket is given meanwhile (ports.py)
    port = free_ports(2) - 50
    proc, steps = run_check(tmp_path, NVIDIA_SMI=str(fake_nvidia_smi(tmp_path, 0)), PORT=str(port),
                            REPLICA_QUESTIONS="4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [n.split(" ")[0] for n in steps] == ["convert", "serve", "reference", "orchestration", "stop",
                                                "replicas:", "replicas:"]
    # one GPU: the endpoint list is two servers sharing it; vLLM's data parallelism needs a GPU per rank
    assert list(steps)[5] == "replicas: Agora's endpoint list over 2 vLLM servers (sharing one GPU)"
    assert list(steps)[6] == ("replicas: one vLLM server on the GPU (--data-parallel-size needs a GPU per rank: "
                              "1 GPU here)")
    out = tmp_path / "out"
    assert (out / "pool-in.toml").is_file() and (out / "served.toml").is_file()
    assert [line.split("\t")[0].split(" ")[0] for line in (out / "steps.tsv").read_text().splitlines()] == list(
        n.split(" ")[0] for n in steps)
    table = proc.stdout[proc.stdout.index("part "):].splitlines()
    assert re.fullmatch(r"total +\| wall time, goal ≤ 600 s +\| \d+ s *", table[2 + len(steps)])
    bench_row = next(r for r in table if r.startswith("bench"))
    assert "align: macro accuracy [95% CI], tokens/q, wall s/q" in bench_row
    assert "0.500 [0.400, 0.600], 100, 0.25  (CPU reference run: 0.300, 26.05 s/q)" in bench_row
    assert any(r.startswith("orchestration") and "efficiency ratio graph/direct = 0.950" in r for r in table)
    recorded = calls.read_text().splitlines()
    assert (tmp_path / "nvidia-smi.calls").read_text().splitlines() == ["-L", "-L"]  # the check, then the listing
    assert recorded[0] == "vllm-python -c import vllm"  # found: not installed again
    assert [r.split(" ")[1] for r in recorded if r.startswith("agora")] == ["serve", "bench", "run", "run"]
    assert recorded.index("servers stopped") > next(i for i, r in enumerate(recorded) if "orchestration" in r)
    servers = [r for r in recorded if "vllm.entrypoints.openai.api_server" in r]
    assert len(servers) == 3 and all(r.endswith("CUDA_VISIBLE_DEVICES=0") for r in servers)
    # the two replicas start side by side: either may be recorded first
    assert sorted(next(p for p in (port + 50, port + 51) if "--port %d --gpu-memory-utilization 0.42" % p in s)
                  for s in servers[:2]) == [port + 50, port + 51]
    assert "--gpu-memory-utilization 0.85" in servers[2] and "--data-parallel-size" not in servers[2]
    # the pool file the run was given lists the replicas' endpoints; it ran once they were serving
    seen = (out / "replicas-endpoints.toml.seen").read_text()
    assert f'endpoints = ["http://127.0.0.1:{port + 50}/v1","http://127.0.0.1:{port + 51}/v1"]' in seen
    assert f'endpoints = ["http://127.0.0.1:{port + 50}/v1"]' in (out / "replicas-dp.toml.seen").read_text()
    replica_rows = [r for r in table if r.startswith("replicas")]
    assert len(replica_rows) == 2
    assert "endpoint list, 2 servers (1 GPU): questions/s, generated tok/s" in replica_rows[0]
    assert "--data-parallel-size 1 (1 GPU)" in replica_rows[1]
    for arm_port in (port + 50, port + 51):  # every replica stopped
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", arm_port)) != 0
