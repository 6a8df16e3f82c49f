"""Honest small-n reports (issue 30 item 6): a cell, difference or claim on fewer than 30 paired
questions, or with a degenerate interval, reads "too few questions" (never yes/no) in the markdown,
the JSON and the console; the plot draws intervals and keeps coincident methods visible."""

import json
import re

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.runs.bench_claims import _holds
from agora.traces.report import MIN_QUESTIONS, TOO_FEW, too_few
from test_bench import bench_args, scripted_pool, write_tasks


def test_too_few_is_under_30_questions_or_a_degenerate_interval():
    assert MIN_QUESTIONS == 30 and TOO_FEW == "too few questions"
    assert too_few(29, -0.1, 0.2) and not too_few(30, -0.1, 0.2)
    assert too_few(200, 0.0, 0.0) and too_few(200, 0.333, 0.333)  # every resample equal
    assert too_few(200, float("nan"), float("nan"))
    assert _holds(0.1, 0.02, 0.0) == "yes"  # the verdict itself is unchanged on enough questions


@pytest.fixture(scope="module")
def two_question_bench(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("small")
    math_file, mc_file = write_tasks(tmp, n_math=2, n_mc=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
        result = CliRunner().invoke(app, bench_args(math_file, mc_file, tmp / "t.db", tmp / "b"),
                                    terminal_width=250)
    assert result.exit_code == 0, result.output
    return tmp / "b", result.output


def test_every_claim_of_a_two_question_bench_is_too_few_questions_in_json(two_question_bench):
    out, _ = two_question_bench
    report = json.loads((out / "bench.json").read_text())
    # ALIGN − SC, best multi − best single, COMED vs each dense baseline the bench ran: MoA, debate, council, SLM-MUX
    assert len(report["claims"]) == 6
    assert [c["holds"] for c in report["claims"]] == [TOO_FEW] * 6
    assert all(c["questions"] == 4 for c in report["claims"])  # 2 questions × 2 tasks, paired
    assert all(c["too_few"] for c in report["cells"]) and all(m["too_few"] for m in report["macro"])
    assert all(p["too_few"] for p in report["paired"])
    assert all(s["too_few"] for s in report["single_models"] + report["macro_single_models"])


def test_every_claim_of_a_two_question_bench_is_too_few_questions_in_markdown(two_question_bench):
    out, _ = two_question_bench
    md = (out / "bench.md").read_text()
    claims = md.split("## Claims")[1].split("\n\n")[1].splitlines()[2:]
    assert len(claims) == 6
    for line in claims:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[-1] == TOO_FEW and cells[-2] == "4", line
    assert not re.search(r"\| (yes|no|undecided) \|", md)
    paired = md.split("## Paired differences")[1].split("## Cost")[0]
    rows = [r for r in paired.splitlines() if r.startswith("| ") and not r.startswith("| method")]
    assert rows and all(r.rstrip().endswith(f"| {TOO_FEW} |") for r in rows)
    accuracy = md.split("## Accuracy")[1].split("Questions scored")[0]
    assert "† too few questions: fewer than 30 scored questions" in accuracy
    assert all("†" in r for r in accuracy.splitlines() if r.startswith("| ") and "%" not in r
               and not r.startswith("| method") and not r.startswith("|---"))


def test_the_console_says_too_few_questions_for_every_claim(two_question_bench):
    _, console = two_question_bench
    claims = [line for line in console.splitlines() if line.startswith("claim:")]
    assert len(claims) == 6 and all(line.endswith(f"(4 paired questions): {TOO_FEW}") for line in claims)


def test_the_plot_draws_intervals_and_spreads_coincident_methods(two_question_bench, monkeypatch):
    out, _ = two_question_bench
    report = json.loads((out / "bench.json").read_text())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from agora.runs.report import plot_accuracy_vs_tokens

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    plot_accuracy_vs_tokens(report, out / "again.png")
    ax = figures[-1].axes[0]
    # align, self_consistency and best_of_n coincide on each task: each is drawn and labelled, apart
    labels = [t.get_text() for t in ax.texts]
    assert {"align", "self_consistency", "best_of_n"} <= set(labels)
    drawn = [c for c in ax.collections if type(c).__name__ == "PathCollection"]
    assert len(drawn) >= len([c for c in report["cells"] if c["accuracy"] is not None])
    screen = {tuple(c.get_offset_transform().transform(c.get_offsets()[0]).round(1)) for c in drawn}
    assert len(screen) == len(drawn)  # no two markers on the same pixel
    assert any(type(c).__name__ == "LineCollection" for c in ax.collections)  # the CI bars
    assert (out / "again.png").read_bytes()[:4] == b"\x89PNG"
