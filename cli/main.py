"""Entry point of the ``agora`` console script."""

from __future__ import annotations

from agora.cli._apps import app, calibrate_app, escape_help, report_app, run_app, train_app  # noqa: F401

# Command modules register themselves on the apps above (one import per module).
from agora.cli import align  # noqa: E402,F401
from agora.cli import duel  # noqa: E402,F401
from agora.cli import serve  # noqa: E402,F401
from agora.cli import select  # noqa: E402,F401
from agora.cli import converse  # noqa: E402,F401
from agora.cli import comed  # noqa: E402,F401
from agora.cli import train_dpo  # noqa: E402,F401
from agora.cli import train_grpo  # noqa: E402,F401
from agora.cli import train_sft  # noqa: E402,F401
from agora.cli import evolve  # noqa: E402,F401
from agora.cli import pool  # noqa: E402,F401
from agora.cli import bench  # noqa: E402,F401
from agora.cli import runs  # noqa: E402,F401
from agora.cli import replay  # noqa: E402,F401
from agora.cli import export  # noqa: E402,F401
from agora.cli import studio  # noqa: E402,F401
from agora.cli import _run  # noqa: E402

# `agora run <name>` for every protocol whose spec sets `run` (MoA, debate): no CLI module of their own.
_run.spec_commands()

# A command module imported before this one (a test, a script) registered its commands early: list
# every app's commands in the order of the imports above, whatever order the modules loaded in.
_ORDER = [m.__name__ for m in (align, duel, serve, select, converse, comed, _run, train_dpo, train_grpo, train_sft,
                                   evolve, pool, bench, runs, replay, export)]


def _import_order(info) -> int:
    module = getattr(info.callback, "__module__", None)
    return _ORDER.index(module) if module in _ORDER else len(_ORDER)


for _app in (app, run_app, report_app, calibrate_app, train_app):
    _app.registered_commands.sort(key=_import_order)

escape_help(app)  # "[moa]" and "[default: 64]" in help texts shown as written, not read as rich markup
