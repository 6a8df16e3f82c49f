"""The bench report's files are byte-identical to the ones written before rendering and plotting left
``traces/bench.py`` (issue 32 item 5).

Each case runs a scripted bench (the setup of tests/test_bench.py and tests/test_bench_shared.py),
pins the only columns that change from one run to the next (model latencies and question wall
seconds, written by the clock) and the report's ``generated_at``, rewrites the report from the DB
alone (``agora bench --report-only``) and compares ``bench.json`` and ``bench.md`` byte for byte
with the files the code before the move wrote for the same DB (``tests/data/bench_report/``, the
temporary directory written as ``<tmp>``). Regenerate them only for a deliberate change of the
report: ``AGORA_WRITE_GOLDEN=1 python -m pytest tests/test_bench_report.py``.
"""

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
import agora.traces.bench as traces_bench
from agora.cli.main import app
from agora.traces.store import TraceStore
from test_bench import bench_args, scripted_pool, write_tasks
from test_bench_shared import args as shared_args, scripted_tiny, write_math

GOLDEN = Path(__file__).parent / "data" / "bench_report"
GENERATED_AT = "2026-12-03T00:00:00+00:00"


def _pin_clock_columns(db: Path) -> None:
    """Replace what the clock wrote (latencies, wall seconds) by values that depend on the rows alone."""
    store = TraceStore(db)
    with store.transaction() as d:
        d.execute("update model_calls set latency_s = 0.001 * (1 + coalesce(sample_index, 0))")
        d.execute("update results set latency_s = 0.001 * coalesce(samples, 0)")
        d.execute("update questions set wall_s = 0.01 * length(question_id)")


def _first_edition(tmp: Path, monkeypatch) -> list[str]:
    math_file, mc_file = write_tasks(tmp)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    return bench_args(math_file, mc_file, tmp / "t.db", tmp / "run")


def _shared(tmp: Path, monkeypatch) -> list[str]:
    math_file, mc_file = write_tasks(tmp)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    return bench_args(math_file, mc_file, tmp / "t.db", tmp / "run", design="--shared-candidates")


def _dev_chosen(tmp: Path, monkeypatch) -> list[str]:
    f = write_math(tmp, n=6)
    monkeypatch.setattr(bench_cli, "get_pool",
                        lambda path: scripted_tiny(a_right=lambda i, j: False, b_right=lambda i, j: True))
    return shared_args(f, tmp / "t.db", tmp / "run", "--limit", "3", "--dev", "3", "--shared-candidates",
                       "--embedding", "tfidf", "--protocols", "align,comed", run_id="b1")


CASES = {"first_edition": _first_edition, "shared": _shared, "dev_chosen": _dev_chosen}


@pytest.mark.parametrize("case", list(CASES))
def test_bench_json_and_markdown_are_byte_identical_to_before_the_move(case, tmp_path, monkeypatch):
    result = CliRunner().invoke(app, CASES[case](tmp_path, monkeypatch))
    assert result.exit_code == 0, result.output
    _pin_clock_columns(tmp_path / "t.db")
    monkeypatch.setattr(traces_bench, "now", lambda: GENERATED_AT)
    out = tmp_path / "report"
    again = CliRunner().invoke(app, ["bench", "--run-id", "b1", "--db", str(tmp_path / "t.db"), "--report-only",
                                     "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert (out / "accuracy_vs_tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("bench.json", "bench.md"):
        got = (out / name).read_bytes().replace(str(tmp_path).encode(), b"<tmp>")
        golden = GOLDEN / case / name
        if os.environ.get("AGORA_WRITE_GOLDEN"):
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_bytes(got)
        assert got == golden.read_bytes(), f"{case}/{name} differs from {golden}"
