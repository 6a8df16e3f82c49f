"""benchmarks/orchestrator_ceiling.py on a tiny scale: the stub fleet serves the runner's requests on
loopback ports, the figures it saves add up (2 requests and 11 trace rows per ALIGN question), a
rerun reads the saved figures instead of running again."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "orchestrator_ceiling.py"


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--questions", "6", "--replicas", "2,4", "--concurrency", "3",
                           "--time-scale", "0.01", "--insert-questions", "5", "--work", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=600)


def test_a_tiny_ceiling_run_saves_figures_that_add_up_and_resumes_from_them(tmp_path):
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    inserts = results["inserts-sqlite-5"]
    assert (inserts["questions"], inserts["rows"]) == (5, 55)  # 1 question + 4 results + 6 calls each
    for replicas in (2, 4):
        r = results[f"run-sqlite-r{replicas}-q6-c3-t0.01"]
        assert (r["replicas"], r["ran_this_sitting"], r["failed"], r["done_before"]) == (replicas, 6, 0, 0)
        assert r["requests"] == 12 and r["store_rows"] == 66  # 2 requests (one per agent), 11 rows a question
        assert r["questions_per_s"] > 0 and r["cpu_ms_per_request"] > 0 and r["replicas_busy_sum"] >= 0
    assert "sqlite      2 replicas       6 questions in" in proc.stdout
    assert "trace store alone, sqlite: 55 rows (5 questions)" in proc.stdout
    assert results["inserts-sqlite-5-warm"]["rows"] == 55
    again = run(tmp_path)  # the figures are read back, nothing runs again
    assert again.returncode == 0 and json.loads((tmp_path / "results.json").read_text()) == results
    assert again.stdout.splitlines()[2:] == proc.stdout.splitlines()[2:]  # (the first lines: load, the model)


def test_two_workers_on_one_postgres_run_share_its_questions_and_their_figures_add_up(tmp_path, postgres_server):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--questions", "6", "--replicas", "2", "--workers", "2",
                           "--stores", "none", "--concurrency", "2", "--time-scale", "0.01", "--insert-questions", "2",
                           "--postgres", postgres_server.url(), "--work", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads((tmp_path / "results.json").read_text())["workers-2-postgres-r2-q6-c2-t0.01"]
    assert (r["workers"], r["recorded"], r["failed"], r["run_status"]) == (2, 6, 0, "finished")
    assert r["rows_in_db"] == {"questions": 6, "results": 24, "model_calls": 36}  # each question once
    assert r["requests"] == 12 and r["store_rows"] == 66  # 2 requests and 11 rows a question, all workers
    assert len(r["per_worker"]) == 2 and sum(w["recorded"] for w in r["per_worker"]) == 6
    assert sum(w["requests_share"] for w in r["per_worker"]) == 12
    assert r["questions_per_s"] > 0 and all(w["cpu_ms_per_request"] > 0 for w in r["per_worker"])
    assert "postgres    2 replicas, 2 workers:      6 questions in" in proc.stdout
