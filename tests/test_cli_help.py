"""``agora --help`` and every group's command list: one paragraph per command, no hard line breaks
(Typer's rich mode keeps a docstring's line breaks in the command list, so a multi-line first
paragraph printed mid-sentence breaks)."""

import typer.main
from typer.testing import CliRunner

from agora.cli.main import app


def listed_help(group, path: str = "agora") -> dict[str, str]:
    """What each group's command list shows per command (Typer: ``short_help``, else the help's
    first paragraph), by command path, for every group below ``group``."""
    out = {}
    for name, command in getattr(group, "commands", {}).items():
        out[f"{path} {name}"] = (command.short_help or command.help or "").strip().split("\n\n")[0]
        out.update(listed_help(command, f"{path} {name}"))
    return out


def test_every_listed_command_help_is_one_line():
    listed = listed_help(typer.main.get_command(app))
    assert {"agora duel", "agora run align", "agora run comed", "agora calibrate comed", "agora report diversity"} <= set(listed)
    assert {name: text for name, text in listed.items() if "\n" in text or not text} == {}


def test_top_level_help_rows_do_not_break_mid_sentence():
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0
    rows = [line for line in result.output.splitlines() if line.startswith("│ ") and "--help" not in line]
    assert [r.split()[1] for r in rows] == ["duel", "serve", "select", "converse", "evolve", "bench", "run", "report",
                                            "calibrate", "train", "pool"]
