"""``benchmarks/gpu_check.sh`` as a dry run: without a CUDA GPU (or with ``--dry-run``) it prints the
steps it would run on one, in order, and exits 0 having run, installed and written nothing."""

import os
import re
import subprocess
from pathlib import Path

import pytest

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
                                                "orchestration", "stop"]
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
    assert proc.stdout.rstrip().endswith("dry run: nothing was run; 7 steps, then one table of wall times, "
                                         "accuracy and orchestration figures.")
    assert not out.exists() and not (tmp_path / "venv-vllm").exists()
    assert not (tmp_path / "nvidia-smi.calls").exists()  # --dry-run does not even look for a GPU


@pytest.mark.parametrize("status, reason", [(None, "no {tool} on PATH: no CUDA GPU here"),
                                            (9, "{tool} -L failed: no usable CUDA GPU here")])
def test_without_a_working_gpu_it_is_a_dry_run(tmp_path, status, reason):
    tool = tmp_path / "absent-nvidia-smi" if status is None else fake_nvidia_smi(tmp_path, status)
    proc, steps = run_check(tmp_path, NVIDIA_SMI=str(tool), CONCURRENCY="16")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"gpu_check.sh: dry run ({reason.format(tool=tool)})")
    assert len(steps) == 7 and "--concurrency 16" in steps["reference bench questions at --concurrency 16 on the "
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
cmd=$1; shift
out=""; while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
case $cmd in
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
    stand_in(tmp_path / "venv-vllm" / "bin" / "python", f'echo "vllm-python $*" >> {calls}\n')
    for name in TASK_FILES:
        (tmp_path / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / name).write_text("")
    proc, steps = run_check(tmp_path, NVIDIA_SMI=str(fake_nvidia_smi(tmp_path, 0)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [n.split(" ")[0] for n in steps] == ["convert", "serve", "reference", "orchestration", "stop"]
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
    assert [r.split(" ")[1] for r in recorded if r.startswith("agora")] == ["serve", "bench"]
    assert recorded.index("servers stopped") > next(i for i, r in enumerate(recorded) if "orchestration" in r)
