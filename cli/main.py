"""Entry point of the ``agora`` console script."""

from __future__ import annotations

import typer

app = typer.Typer(help="Agora: multi-LLM protocols as LangGraph state machines on local models.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
run_app = typer.Typer(help="Run a protocol on a benchmark and print its method table.", no_args_is_help=True)
app.add_typer(run_app, name="run")

# Command modules register themselves on the apps above.
from agora.cli import align  # noqa: E402,F401


def main() -> None:  # pragma: no cover - console script
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
