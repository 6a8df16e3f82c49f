"""Entry point of the ``agora`` console script."""

from __future__ import annotations

from agora.cli._apps import app, calibrate_app, report_app, run_app, train_app  # noqa: F401

# Command modules register themselves on the apps above (one import per module).
from agora.cli import align  # noqa: E402,F401
from agora.cli import duel  # noqa: E402,F401
from agora.cli import serve  # noqa: E402,F401
from agora.cli import select  # noqa: E402,F401
from agora.cli import converse  # noqa: E402,F401
from agora.cli import comed  # noqa: E402,F401
from agora.cli import moa  # noqa: E402,F401
from agora.cli import debate  # noqa: E402,F401
from agora.cli import train  # noqa: E402,F401
from agora.cli import evolve  # noqa: E402,F401
from agora.cli import pool  # noqa: E402,F401
from agora.cli import bench  # noqa: E402,F401
