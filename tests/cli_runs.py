"""The ``agora`` command run in-process (typer's ``CliRunner``), as the CLI tests call it, and the one
error line a refused command prints."""

from pathlib import Path

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


#: LangChain's scripted chat model, as a pool file names it.
FAKE = "langchain_core.language_models.fake_chat_models:FakeListChatModel"


def fake_pool(folder: Path) -> Path:
    """``folder/pool.toml``: two members, ``a`` and ``b``, each LangChain's fake chat model answering
    ``The answer is 4.``"""
    path = Path(folder) / "pool.toml"
    path.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "langchain"\nclass = "{FAKE}"\n'
                            f'kwargs = {{responses = ["The answer is 4."]}}\n\n' for m in ("a", "b")))
    return path
