"""``agora export`` / ``agora import`` (trace bundles, :mod:`agora.traces.bundle`) and ``agora traces
backfill`` (the answer-level columns of an older trace database, :func:`agora.traces.store.backfill`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.tasks.loaders import missing_reason
from agora.cli._apps import app
from agora.cli._shared import console, user_errors
from agora.traces.bundle import SUFFIX
from agora.traces.bundle_export import check_out_path, compressed, export_bundle
from agora.traces.bundle_import import import_bundle
from agora.traces.bundle_reading import check_bundle
from agora.traces.run_list import open_trace_store
from agora.traces.store import MAX_STORED_RUN_ID_CHARS, TraceStore, backfill, check_run_id, store_backend

traces_app = typer.Typer(help="Maintain a trace database (backfill).", no_args_is_help=True)
app.add_typer(traces_app, name="traces")


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


@app.command("export", short_help="Write runs (or a bench) of a trace DB as one compressed bundle file.")
def export_cmd(
    db: str = typer.Option("agora.db", "--db", help="Trace database (a SQLite file or a postgresql:// URL); "
                                                   "opened read-only."),
    run_id: Optional[list[str]] = typer.Option(None, "--run-id", help="A run to export (repeatable)."),
    bench_id: Optional[list[str]] = typer.Option(None, "--bench-id", help="A bench to export: its report rows and "
                                                 "every run <bench>:... (repeatable)."),
    out: Path = typer.Option(..., "--out", help=f"Bundle file to write (*{SUFFIX}; a name not ending in .gz gets "
                                                "plain JSON Lines)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --out file."),
) -> None:
    """Write the runs (every question, result and model call, and their protocol tables) to one
    gzip JSON Lines bundle (plain JSON Lines when the --out name does not end in .gz) that `agora import`
    loads into any trace DB (format: docs/traces.md). A bench run that took the bench's shared candidates
    brings their run along (named in the summary line)."""
    with user_errors():
        if store_backend(db) is None and not Path(db).is_file():
            raise FileNotFoundError(f"{db}: no such trace database")
        check_out_path(out)
        if out.exists() and not force:
            raise InputError(f"--out {out}: the file exists; pick a new name, or pass --force to overwrite it")
        for r in run_id or ():
            check_run_id(r, max_chars=MAX_STORED_RUN_ID_CHARS)
        summary = export_bundle(open_trace_store(db), out, run_id or (), bench_id or ())
        rows = ", ".join(f"{t} {n}" for t, n in summary.rows.items() if n)
        carried = "".join(f" + run {escape(r)} (its shared candidates)" for r in summary.carried)
        console.print(f"wrote {escape(str(out))}: {len(summary.runs) - len(summary.carried)} runs{carried}"
                      + (f", benches {', '.join(summary.benches)}" if summary.benches else "")
                      + f"; rows: {rows}; {_size(summary.bytes)}"
                      + ("" if compressed(out) else " (plain JSON Lines, not compressed: the name does not end in .gz)"),
                      highlight=False, soft_wrap=True)


@app.command("import", short_help="Load a trace bundle into a trace DB (importing twice adds nothing).")
def import_cmd(
    bundle: Path = typer.Argument(..., help=f"Bundle file (*{SUFFIX}) written by `agora export`."),
    db: str = typer.Option("agora.db", "--db", help="Trace database to load it into: a SQLite file (created if "
                                                   "missing) or a postgresql:// URL."),
    force: bool = typer.Option(False, "--force", help="The bundle wins: replace rows of --db whose key exists with "
                               "other content, and add new rows to runs --db already holds (without it both are "
                               "refused)."),
) -> None:
    """Add the bundle's rows to --db: rows already there with the same content are skipped, so a second
    import adds nothing. Refused, writing nothing: a row whose key exists in --db with other content, or a
    new row for a run --db already holds (unless --force); a run id that exists in --db as another run;
    orphan rows (results or model calls of a question the bundle does not hold), malformed rows, values of
    the wrong type, and a bundle holding two contents under one key. A refused import into a new --db
    leaves no file. See docs/traces.md."""
    with user_errors():
        if bundle.is_symlink() and not bundle.exists():  # a loop, or a link to nothing: say so, not "no such file"
            raise InputError(f"{bundle}: {missing_reason(bundle)}")
        created = store_backend(db) is None and not Path(db).exists()
        if created:
            check_bundle(bundle)  # the whole bundle, before --db is created
            try:  # claim the new file: an import into the same path that created it meanwhile keeps it its own
                with open(db, "x"):
                    pass
            except FileExistsError:
                created = False  # (another process made it since: a refusal here must not remove its rows)
            except OSError:
                pass  # (no folder yet, or another problem: the store makes the folder or says what is wrong)
        store = TraceStore(db)
        try:
            summary = import_bundle(bundle, store, force=force)
        except BaseException:
            if created:  # a refusal found only against the store: leave no new empty database behind
                store.close()
                for extra in ("", "-wal", "-shm", "-journal"):
                    Path(f"{db}{extra}").unlink(missing_ok=True)
            raise
        rows = ", ".join(f"{t} {n}" for t, n in summary.rows.items() if n) or "none"
        where = escape(shown_url(str(db)))
        skipped = ", ".join(said for n, said in (
            (summary.skipped, f"{summary.skipped} identical to rows already in {where}"),
            (summary.repeated, f"{summary.repeated} repeated within the bundle")) if n) or "none"
        console.print(f"imported {escape(str(bundle))} into {where}: {len(summary.runs)} runs; rows added: "
                      f"{rows}; rows skipped: {skipped}"
                      + (f"; rows replaced (--force): {summary.replaced}"
                         + (f" whose key {where} held with other content" if summary.replaced else "") if force else ""),
                      highlight=False, soft_wrap=True)
        for run, source in summary.missing_shared.items():
            console.print(f"[yellow]warning:[/yellow] run {escape(run)} took its shared candidates from run "
                          f"{escape(source)}, which is neither in the bundle nor in {escape(shown_url(str(db)))}: its report and "
                          f"replay are refused until that run is imported (agora export --db <its database> --run-id "
                          f"{escape(source)} --out <bundle>, then agora import)", highlight=False, soft_wrap=True)


@traces_app.command("backfill", short_help="Fill the answer-level columns of an older trace DB (once).")
def backfill_cmd(
    db: str = typer.Option("agora.db", "--db", help="Trace database to update in place (a file or a postgresql:// URL)."),
    run_id: Optional[list[str]] = typer.Option(None, "--run-id", help="Only these runs (repeatable; default all)."),
) -> None:
    """Extract each recorded sample's answer (and how it was found), its sample index and request, and
    each question's option count, for databases written before these columns existed. Rows already
    filled are left alone."""
    with user_errors():
        if store_backend(db) is None and not Path(db).is_file():
            raise FileNotFoundError(f"{db}: no such trace database")
        for r in run_id or ():
            check_run_id(r, max_chars=MAX_STORED_RUN_ID_CHARS)
        store = TraceStore(db)
        known = set(store.run_ids()) | {r["run_id"] for r in store.db.query("select distinct run_id from questions")}
        for r in run_id or ():  # a run the database does not hold is said so, not 'nothing filled'
            if r not in known:
                raise InputError(f"{shown_url(str(db))}: no run {r!r} (`agora report runs` lists them)")
        counts = backfill(store, run_id or ())
        console.print(f"{escape(shown_url(str(db)))}: {counts['calls']} model calls and {counts['questions']} questions filled",
                      highlight=False)
