"""docs/align.md's settings table says which ``agora run align`` flag sets each setting, and every
flag it names is one the command has."""

import re
from pathlib import Path

import typer.main

from agora.cli.align import run_align

DOC = Path(__file__).resolve().parents[1] / "docs" / "align.md"


def test_every_setting_row_names_its_flag_and_the_flags_exist():
    text = DOC.read_text()
    table = text[text.index("## Settings"):text.index("## Embedding")]
    rows = {r.split("|")[1].strip(): r.split("|")[2] for r in table.splitlines() if r.startswith("| `")}
    assert "`--agents`" in rows["`n_agents`"]
    command = typer.main.get_command_from_info(
        typer.models.CommandInfo(callback=run_align), pretty_exceptions_short=True, rich_markup_mode=None)
    options = {o for p in command.params for o in p.opts}
    named = {f for cell in rows.values() for f in re.findall(r"`(--?[a-z][a-z-]*)`", cell)}
    assert named and named <= options, named - options
