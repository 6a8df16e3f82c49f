"""Entry point of the ``agora`` console script."""

from __future__ import annotations

import typer

app = typer.Typer(help="Agora: multi-LLM protocols as LangGraph state machines on local models.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
run_app = typer.Typer(help="Run a protocol on a benchmark and print its method table.", no_args_is_help=True)
report_app = typer.Typer(help="Reports and plots from a trace database.", no_args_is_help=True)
calibrate_app = typer.Typer(help="Calibrate a protocol's thresholds on a dev split.", no_args_is_help=True)
train_app = typer.Typer(help="Train models from traces (DPO, GRPO) with TRL.", no_args_is_help=True)
app.add_typer(run_app, name="run")
app.add_typer(report_app, name="report")
app.add_typer(calibrate_app, name="calibrate")
app.add_typer(train_app, name="train")

# Command modules register themselves on the apps above (one import per module).
from agora.cli import align  # noqa: E402,F401
from agora.cli import duel  # noqa: E402,F401
from agora.cli import serve  # noqa: E402,F401
from agora.cli import select  # noqa: E402,F401
from agora.cli import converse  # noqa: E402,F401
from agora.cli import comed  # noqa: E402,F401
from agora.cli import train  # noqa: E402,F401
from agora.cli import evolve  # noqa: E402,F401
from agora.cli import pool  # noqa: E402,F401
