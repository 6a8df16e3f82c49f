"""Probe round 9 (b): what a fresh user found still unclear, each with its fix."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("command, option, value", [
    ("debate", "--models", ""), ("debate", "--models", ",,"), ("slm-mux", "--models", " , "),
    ("council", "--members", ""), ("moa", "--proposers", ","), ("align", "--models", ""),
])
def test_a_member_list_naming_no_member_is_refused(tmp_path, command, option, value):
    """``agora run debate --models ""`` (or ``",,"``) quietly meant every member of the pool: the
    option was read as not given. Now one line naming the option, before any pool is read."""
    from typer.testing import CliRunner

    from agora.cli.main import app

    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, ["run", command, option, value, "--db", str(db), "--pool",
                                      str(tmp_path / "pool.toml")])  # before: read as every member of it
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"error: {option} {value!r}: names no member; give comma-separated pool "
                                     f"members, or leave {option} out for the default"), result.output
    assert not db.exists()


def test_member_names_still_reads_lists_and_absence():
    from agora.cli._run import member_names

    assert member_names(None) == ()
    assert member_names(" a, b ,c") == ("a", "b", "c")
    with pytest.raises(ValueError, match=r"^--train-models '': names no member"):
        member_names("", "--train-models")
