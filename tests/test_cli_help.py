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
    assert [r.split()[1] for r in rows] == ["duel", "serve", "select", "converse", "evolve", "bench", "replay", "export",
                                            "import", "studio", "run", "report", "calibrate", "train", "pool", "traces"]


def test_bracketed_words_in_help_texts_are_shown_not_read_as_markup():
    """Typer's rich help reads ``[moa]`` or ``[default: 64]`` as a markup tag and drops it (issue 33);
    :func:`agora.cli._apps.escape_help` escapes every help text once."""
    def help_of(*args: str) -> str:
        result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "250"})
        assert result.exit_code == 0, result.output
        return " ".join(result.output.replace("│", " ").split())

    assert "a table named after the protocol ([moa], [debate], [comed])" in help_of("run", "moa")
    assert "LoRA rank of a fresh adapter [default: 64]." in help_of("train", "dpo")
    assert "models[i mod len(models)]" in help_of("run", "debate")
    assert "a ``[comed]`` table of EscalationConfig fields" in help_of("run", "comed")
    assert help_of("run", "moa") == help_of("run", "moa")  # escaped once: a second call shows the same


def test_escape_help_escapes_each_shared_option_once():
    import typer

    from agora.cli._apps import escape_help

    shared = typer.Option(None, "--config", help="a [moa] table")
    sub = typer.Typer()

    @sub.command("a")
    def a(config: str = shared) -> None:
        """Run [a]."""

    @sub.command("b")
    def b(config: str = shared) -> None:
        """Run [b]."""

    top = typer.Typer()
    top.add_typer(sub, name="sub", help="Sub [commands].")
    escape_help(top)
    escape_help(top)
    assert shared.help == "a \\[moa] table"
    assert [c.help for c in sub.registered_commands] == ["Run \\[a].", "Run \\[b]."]
    assert top.registered_groups[0].help == "Sub \\[commands]."
