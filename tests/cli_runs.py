"""The ``agora`` command run in-process (typer's ``CliRunner``), as the CLI tests call it, and the one
error line a refused command prints."""

from typer.testing import CliRunner

from agora.cli.main import app


def agora(*args, **kw) -> tuple[int, str]:
    """Run ``agora ARGS`` (each argument ``str()``-ed); ``kw`` goes to ``CliRunner.invoke`` (``env``,
    ``input``). Returns the exit code and the output (stdout and stderr together)."""
    result = CliRunner().invoke(app, [str(a) for a in args], **kw)
    return result.exit_code, result.output


def one_error_line(output: str) -> str:
    """The ``error: ...`` line of a refused command (there is exactly one, and no traceback)."""
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, output
    return errors[0]
