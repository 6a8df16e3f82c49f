"""`agora run align --utility calibrated`: a member without a dev accuracy, or a dev run that cannot
be read, is refused in one line before the run row is created and before any model is asked."""

import sqlite3

import pytest
from typer.testing import CliRunner

from agora.cli.main import app

FAKE = "langchain_core.language_models.fake_chat_models:FakeListChatModel"


def pool(tmp_path):
    path = tmp_path / "pool.toml"
    path.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "langchain"\nclass = "{FAKE}"\n'
                            f'kwargs = {{responses = ["The answer is 4."]}}\n\n' for m in ("a", "b")))
    return path


@pytest.mark.parametrize("extra, needle", [
    (["--dev-accuracy", "a=0.5"], "DelegationConfig.dev_accuracy: no accuracy for member(s) b"),
    (["--dev-run", "R0", "--dev-db", "missing.db"], "trace database missing.db not found"),
])
def test_refused_before_any_run_row(tmp_path, monkeypatch, extra, needle):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, ["run", "align", "--format", "synthetic", "--limit", "1", "--pool",
                                      str(pool(tmp_path)), "--db", str(db), "--utility", "calibrated", *extra])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0], result.output
    if db.exists():
        with sqlite3.connect(db) as con:
            tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
            for table in ("runs", "model_calls"):
                if table in tables:
                    assert con.execute(f"select count(*) from {table}").fetchone()[0] == 0
