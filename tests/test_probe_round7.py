"""Probes of bad input, round 7: a pool path that is a folder, a bundle with data after its footer,
reports and replays of a run that is not in the database, a method compared with itself, a
question that is not text."""

from __future__ import annotations

import pytest

from agora.models.errors import PoolConfigError
from agora.models.pool import load_pool


def test_a_pool_path_that_is_a_folder_says_so(tmp_path):
    """It said "pool file not found" about a folder that is there."""
    with pytest.raises(PoolConfigError) as err:
        load_pool(tmp_path)
    assert str(err.value) == f"{tmp_path}: a folder, not a pool file; give the path of a TOML pool file"


def test_a_bundle_with_data_after_its_footer_names_that_line(tmp_path):
    """It said "no footer: the file is truncated" about a file whose footer is there, lines before the end."""
    import gzip
    import json

    from agora.traces.bundle import FORMAT, VERSION
    from agora.traces.bundle_reading import BundleError, check_bundle

    head = {"format": FORMAT, "version": VERSION, "tables": {"notes": {"columns": {"k": "TEXT"}, "primary_key": ["k"]}}}
    lines = [json.dumps(head), json.dumps({"t": "notes", "v": ["a"]}), json.dumps({"end": True, "rows": {"notes": 1}}),
             "", json.dumps({"t": "notes", "v": ["b"]})]
    path = tmp_path / "extra.agora.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with pytest.raises(BundleError) as err:
        check_bundle(path)
    assert str(err.value) == f"{path}:5: data after the footer (line 3); nothing was imported"


def test_report_diversity_of_a_run_the_database_does_not_hold_says_so(tmp_path):
    """It said only "no successful model calls in run(s) nope", as if the run were there."""
    from typer.testing import CliRunner

    from agora.cli.main import app
    from test_diversity_report import comed_db

    db = comed_db(tmp_path / "c.db")
    res = CliRunner().invoke(app, ["report", "diversity", "--db", str(db), "--out", str(tmp_path / "o"), "--run", "nope"])
    errors = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and errors == [
        f"error: {db}: no successful model calls in run(s) nope: the database holds no run 'nope' "
        "(`agora report runs` lists them)"], res.output


def test_report_duels_of_a_run_the_database_does_not_hold_says_so(tmp_path):
    """It said "no duel runs" about a --run-id that is not in the database at all."""
    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.store import TraceStore

    TraceStore(tmp_path / "t.db").close()
    res = CliRunner().invoke(app, ["report", "duels", "--db", str(tmp_path / "t.db"), "--out", str(tmp_path / "p"),
                                   "--run-id", "nope"])
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and lines == [f"error: {tmp_path / 't.db'}: no run 'nope' in this database; it holds "
                                            "no duel runs (run `agora duel` first)"], res.output


def test_report_run_refuses_comparing_a_method_with_itself(tmp_path):
    """`--disagree align align` was accepted and printed an empty comparison."""
    from typer.testing import CliRunner

    from agora.cli.main import app

    res = CliRunner().invoke(app, ["report", "run", "--db", str(tmp_path / "t.db"), "--run-id", "r1",
                                   "--disagree", "align", "align"])
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and lines == ["error: --disagree align align: the same method twice; name two different "
                                            "methods (a method never disagrees with itself)"], res.output
    assert not (tmp_path / "t.db").exists()


def test_replay_without_a_rule_checks_the_db_and_run_it_is_given(tmp_path):
    """Without --rule, a missing --db or an unknown --run-id was ignored: exit 0 and the rules listed."""
    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.store import TraceStore

    def errors(*args):
        res = CliRunner().invoke(app, ["replay", *map(str, args)])
        return res.exit_code, [line for line in res.output.splitlines() if line.strip()]

    missing = tmp_path / "nope.db"
    assert errors("--db", missing) == (2, [f"error: {missing}: no such trace database"])
    assert errors("--db", missing, "--run-id", "r1") == (2, [f"error: {missing}: no such trace database"])
    TraceStore(tmp_path / "t.db").close()
    code, lines = errors("--db", tmp_path / "t.db", "--run-id", "nope")
    assert code == 2 and len(lines) == 1 and "'nope'" in lines[0], lines
    code, lines = errors("--db", tmp_path / "t.db")  # a database that is there: the rules, as before
    assert code == 0 and any("selection rules" in line for line in lines)
    assert not missing.exists()


def test_a_prompt_given_as_a_number_is_refused_as_not_text(tmp_path):
    """`{"question": 5}` in a prompts file was refused as "no text field", as if the question were absent."""
    from agora.tasks.loaders import TaskFormatError, load_problems

    path = tmp_path / "p.jsonl"
    path.write_text('{"question": "What is 1 + 1?"}\n{"question": 5}\n', encoding="utf-8")
    with pytest.raises(TaskFormatError) as err:
        load_problems(path, "prompts")
    assert str(err.value) == f"{path}:2: field 'question': must be text, not int 5"
