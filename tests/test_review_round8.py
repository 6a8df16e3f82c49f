"""Findings of a review of round 8's changes: each test failed before its fix."""

from __future__ import annotations

from cli_runs import agora


def test_evolve_refuses_a_judge_max_tokens_beyond_any_context_naming_that_option(tmp_path):
    """`agora evolve --max-tokens 64 --judge-max-tokens 2000000` said
    'error: --max-tokens: JudgeConfig.max_tokens must be at most 1000000 ...': the option typed and
    named was not the one whose value was refused (every other --*-max-tokens option has the cap)."""
    instructions = tmp_path / "ins.jsonl"
    instructions.write_text('{"question": "What is 2 + 2?", "answer": "#### 4"}\n', encoding="utf-8")
    code, output = agora("evolve", "--instructions", instructions, "--max-tokens", "64", "--judge-max-tokens",
                         "2000000", "--db", tmp_path / "t.db", "--out", tmp_path / "out", env={"COLUMNS": "200"})
    assert code == 2, output
    assert "Invalid value for '--judge-max-tokens'" in output and "1000000" in output, output
    assert "--max-tokens:" not in output, output
    assert not (tmp_path / "t.db").exists()
