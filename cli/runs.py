"""``agora report runs``: every run in a trace database, with its status and what it recorded."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from agora.cli._apps import report_app
from agora.cli._shared import console, fmt_pct, user_errors
from agora.traces.report import run_rows
from agora.traces.store import TraceStore


@report_app.command("runs", short_help="Every run in a trace DB: protocol, status, questions recorded, accuracy.")
def report_runs(
    db: Path = typer.Option(Path("agora.db"), "--db", help="Trace database (SQLite)."),
    stale_after: float = typer.Option(60.0, "--stale-after", min=0.0, help="Minutes without a recorded question "
                                      "after which a 'running' run is flagged as probably killed."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per run instead of the table."),
) -> None:
    """List the runs of --db (oldest first): run id, protocol, status, questions recorded, main-method
    accuracy, start, last activity. A run left 'running' with no activity for --stale-after minutes
    was most likely killed (kill -9, a crash): rerun it with its --run-id to resume."""
    with user_errors():
        if not db.is_file():
            raise FileNotFoundError(f"{db}: no such trace database")
        rows = run_rows(TraceStore(db, readonly=True), stale_after_s=stale_after * 60)
        if as_json:
            for r in rows:
                print(json.dumps(asdict(r), ensure_ascii=False))
            return
        table = Table(title=f"runs in {escape(str(db))}")
        for col in ("run id", "protocol", "status", "questions", "accuracy %", "started", "last activity"):
            table.add_column(col, justify="right" if col in ("questions", "accuracy %") else "left")
        for r in rows:
            status = r.status + (" (stale)" if r.stale else "")
            table.add_row(escape(r.run_id), r.protocol, status, str(r.questions),
                          "-" if r.accuracy is None else fmt_pct(r.accuracy), r.started_at or "-",
                          r.last_activity or "-")
        console.print(table)
        if any(r.stale for r in rows):
            console.print(f"stale: 'running' with nothing recorded for over {stale_after:g} min, so probably killed "
                          "(kill -9, a crash); rerun it with its --run-id to resume", highlight=False, soft_wrap=True)
        if not rows:
            console.print("no runs", highlight=False)
