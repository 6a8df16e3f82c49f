"""``python -m agora.cli`` runs the ``agora`` command; :func:`main` is also the console script."""

import sys


def main() -> None:
    """Run the ``agora`` command.

    Ctrl-C while the commands are still being imported (seconds: LangGraph, numpy, sympy...) exits
    130 with one line instead of a traceback. Once a command runs, its own ``user_errors()`` turns
    Ctrl-C into exit 130 with a resume hint (Typer exits 130 quietly outside it); neither reaches
    the handler here.
    """
    try:
        from agora.cli.main import app

        app(prog_name="agora")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
