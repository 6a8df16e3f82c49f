"""The ``agora`` console script's entry point: Ctrl-C during start-up is one line and exit 130,
while a command's own interrupt handling (its resume hint) still applies."""

import sys
import tomllib
import types
from pathlib import Path

import pytest

import agora.cli.align as align_cli
from agora.cli.__main__ import main


class _StillImporting(types.ModuleType):
    """Stands in for ``agora.cli.main`` while Ctrl-C arrives in the middle of importing it."""

    def __getattr__(self, name):
        raise KeyboardInterrupt


def test_console_script_is_main():
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["scripts"]["agora"] == "agora.cli.__main__:main"


def test_ctrl_c_while_importing_is_one_line_and_130(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "agora.cli.main", _StillImporting("agora.cli.main"))
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 130
    captured = capsys.readouterr()
    assert captured.err == "interrupted\n" and captured.out == ""


def test_ctrl_c_inside_a_run_keeps_the_commands_resume_hint(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(align_cli, "load_problems", interrupted)
    monkeypatch.setattr(sys, "argv", ["agora", "run", "align", "--limit", "1"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 130
    err = capsys.readouterr().err
    assert "interrupted: finished questions are saved; rerun with the same --run-id to resume" in err
    assert err.count("interrupted") == 1
