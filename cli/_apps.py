"""The shared Typer apps every command module registers on (``agora``, ``agora run``, ``report``,
``calibrate``, ``train``). Kept apart from :mod:`agora.cli.main`, which imports every command module,
so that a command imports the apps and not the module that imports it (no import cycle)."""

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
