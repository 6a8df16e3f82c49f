"""``python -m agora.cli`` runs the ``agora`` command; :func:`main` is also the console script."""

import sys


def _printable_anywhere() -> None:
    """Let stdout print what its encoding cannot (``PYTHONIOENCODING=ascii``, a Latin-1 terminal):
    such a character (a run id's ``é``) is shown as a ``\\xe9`` escape instead of failing the
    command with ``UnicodeEncodeError``. stderr already escapes them (Python's own default)."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None and getattr(sys.stdout, "errors", None) == "strict":
        try:
            reconfigure(errors="backslashreplace")
        except (ValueError, OSError):  # (a closed or detached stream: nothing to print to anyway)
            pass


def main() -> None:
    """Run the ``agora`` command.

    Ctrl-C while the commands are still being imported (seconds: LangGraph, numpy, sympy...) exits
    130 with one line instead of a traceback. Once a command runs, its own ``user_errors()`` turns
    Ctrl-C into exit 130 with a resume hint (Typer exits 130 quietly outside it); neither reaches
    the handler here.
    """
    _printable_anywhere()
    try:
        from agora.cli.main import app

        app(prog_name="agora")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
