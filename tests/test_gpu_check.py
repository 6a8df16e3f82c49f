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
    assert serve.startswith(f"{agora}/agora serve --out {out}/served.toml --python {vllm_py} --port 8100 "
                            "--memory-fraction 0.4")
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
