"""Pieces shared by the CLI commands: errors as one line, pools, run ids, progress."""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import os
import re
import secrets
import shlex
import signal
import sqlite3
import sys
import threading
import tomllib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import typer
from langgraph.errors import GraphDrained
from langgraph.runtime import RunControl
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable
from rich.text import Text

from agora.models.urls import shown_url
from agora.models.pool import (
    MAX_POOL_TEMPERATURE,
    ModelCallError,
    ModelPool,
    PoolConfigError,
    UnknownNameError,
    default_pool,
    load_pool,
)
from agora.agents.prompts import MATH_SHOTS, MC_SHOTS
from agora.tasks.errors import InputError, is_input
from agora.tasks.loaders import TaskFormatError
from agora.traces.pg_database import pg_reason
from agora.traces.pg_sql import PASSWORD_NOTE, bare_url, is_postgres_url
from agora.traces.store import describe_sqlite_error

#: The control characters a terminal may act on: C0 but newline and tab, DEL, and C1 (``\x9b`` is CSI).
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with each control character a terminal would act on (:data:`CONTROL_CHARACTERS`)
    written as its escape, ``\\x1b`` for ESC: recorded text (a model's completion, a program's
    output, an error message) then shows what it holds instead of clearing the screen, setting the
    window title or hiding a line. Newlines and tabs stay; a ``\\r\\n`` line end is a newline. A
    backslash already in the text is left as it is (math answers are full of them)."""
    return CONTROL_CHARACTERS.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n"))


def error_line(text: str) -> str:
    """``text`` through :func:`visible`, its newlines written ``\\n`` too: an ``error:`` line quoting
    a path or a value that holds a newline (``--data 'a\\nb.jsonl'``) stays one line. A newline
    followed by two spaces is kept: it starts one of the indented detail lines some refusals end
    with (a resume refusal's ``  pool: ...`` differences)."""
    return re.sub(r"\n(?!  )", r"\\n", visible(text))


#: The terminal controls ``json.dumps`` leaves raw with ``ensure_ascii=False``: DEL and C1 (C0 it escapes).
_JSON_RAW_CONTROLS = re.compile(r"[\x7f-\x9f]")


def json_text(value: Any, **kwargs: Any) -> str:
    """``value`` as JSON for a terminal (what ``--json`` prints): ``json.dumps(value, ensure_ascii=False,
    **kwargs)``, with every control character a terminal would act on written as a JSON escape
    (``\\u009b``): C0 by ``json.dumps`` itself, DEL and C1 here. Other text (``é``, ``×``) stays as
    written; ``json.loads`` gives back the very strings (a control can only stand inside a string)."""
    text = json.dumps(value, ensure_ascii=False, **kwargs)
    return _JSON_RAW_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class _Console(Console):
    """A rich ``Console`` that prints every string it is given (a ``print`` argument, a table cell,
    a panel's body) through :func:`visible`, before its markup is read and its width measured."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(visible(text), **kwargs)


class FieldColumn(TextColumn):
    """A progress column showing a task field as plain text (no markup) through :func:`visible`:
    a status line quoting a model's words cannot drive the terminal."""

    def __init__(self, text_format: str, **kwargs: Any) -> None:
        super().__init__(text_format, markup=False, **kwargs)

    def render(self, task: Any) -> Text:
        return Text(visible(self.text_format.format(task=task)), style=self.style, justify=self.justify)


class _VisibleFormatter(logging.Formatter):
    """A log line (a model's failed call quotes the server's error) through :func:`visible`."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def show_logs_visibly() -> None:
    """Print the log lines that reach stderr with no handler configured (Python's ``lastResort``:
    warnings and errors, ``%(message)s``) through :func:`visible`; the CLI calls it once, before any
    command runs. A handler an application configured itself is left as it is. psycopg's warnings
    (a lost Postgres server's pooled connections, one line each) are left out unless a level was
    set for its logger."""
    if logging.lastResort is not None and not isinstance(logging.lastResort.formatter, _VisibleFormatter):
        logging.lastResort.setFormatter(_VisibleFormatter())
    # psycopg's pool warns once per connection a lost server leaves behind ("discarding closed
    # connection", "error connecting in 'agora-traces'"): the command's own error line says it once
    psycopg_log = logging.getLogger("psycopg")
    if psycopg_log.level in (logging.NOTSET, logging.WARNING):  # (WARNING: what psycopg sets on import)
        psycopg_log.setLevel(logging.ERROR)


def _width(stream: Any, off_terminal: int, columns_off_terminal: bool = True) -> int | None:
    """The output width of ``stream``: ``None`` (rich reads ``$COLUMNS``, else the terminal's) when
    ``$COLUMNS`` is a positive number (off a terminal only with ``columns_off_terminal``) or, unset,
    on a terminal; the terminal's size when ``$COLUMNS`` is set to anything else on one (``0``,
    which rich would take as a width of 0 and print nothing); else ``off_terminal`` (a log file or
    pipe)."""
    import shutil

    columns = os.environ.get("COLUMNS")
    positive = columns is not None and columns.isdigit() and int(columns) > 0
    if stream.isatty():
        return None if positive or columns is None else shutil.get_terminal_size((off_terminal, 24)).columns
    return None if positive and columns_off_terminal else off_terminal


# Off a terminal rich would wrap tables at 80 columns; logs and CI read better wider.
#: Output width: ``$COLUMNS`` (a positive number), else the terminal's, else 120 (a log file or pipe).
console = _Console(width=_width(sys.stdout, 120))
err_console = _Console(stderr=True, width=_width(sys.stderr, 200, columns_off_terminal=False))

class Table(RichTable):
    """The CLI's tables: a rich ``Table`` whose columns fold a cell that does not fit onto more lines
    (``overflow="fold"``) instead of cutting it to ``…``, so a run id, question id, model or method
    name stays whole (and copyable) in a narrow terminal. A ``no_wrap`` column (a method name, a
    note) stays on one line only while the terminal leaves the other columns room
    (:data:`ROOM_PER_COLUMN` characters each): rich would otherwise squeeze them to nothing to keep
    it whole, and their figures would vanish; in a narrower terminal it folds like the others."""

    #: Characters of text each wrappable column keeps beside the ``no_wrap`` ones (else those fold).
    ROOM_PER_COLUMN = 6

    def add_column(self, *args: Any, overflow: Any = "fold", **kwargs: Any) -> None:
        super().add_column(*args, overflow=overflow, **kwargs)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        pinned = [c for c in self.columns if c.no_wrap]
        if pinned:
            kept = sum(max(Measurement.get(console, options, cell).maximum for cell in (c.header, *c.cells)) + 3
                       for c in pinned)
            room = (len(self.columns) - len(pinned)) * (self.ROOM_PER_COLUMN + 3) + 1  # + padding and borders
            if kept + room > options.max_width:
                for c in pinned:
                    c.no_wrap = False
        try:
            yield from super().__rich_console__(console, options)
        finally:
            for c in pinned:
                c.no_wrap = True


#: Bound of ``--shots``: the worked exemplars there are (3 math, 2 multiple choice; a kind with fewer uses all).
MAX_SHOTS = max(len(MATH_SHOTS), len(MC_SHOTS))
#: Bound of ``--temperature`` for sampling answers: the OpenAI API's range (above it answers are mostly noise);
#: a pool entry's ``temperature`` has the same bound.
MAX_TEMPERATURE = MAX_POOL_TEMPERATURE

#: Errors a user can act on: printed as one line, exit status 2, no traceback. Besides these, a
#: ``ValueError`` marked as input (:func:`agora.tasks.errors.as_input`: a settings class's refusal).
#: A file that does not parse (JSON, TOML, text that is not UTF-8) is input too.
USER_ERRORS = (InputError, TaskFormatError, PoolConfigError, FileNotFoundError, UnknownNameError,
               json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError)
#: Not among them: any other ``ValueError`` or ``KeyError`` (a check or a dict lookup in Agora's code
#: that failed is a bug, not bad input: it surfaces with its traceback, introduced by one
#: ``internal error`` line).


def nonempty_path(value: Any) -> Path:
    """A ``parser=`` for a file option (``typer.Option(..., parser=nonempty_path)``): the value as a
    :class:`~pathlib.Path`. An empty value (``--data ""``) would otherwise be ``Path(".")``, the
    current folder, and be reported as a directory.

    Raises:
        typer.BadParameter: the value is empty or blank (exit code 2: ``Invalid value for '--data':
        an empty path; give a file``).
    """
    if isinstance(value, Path):
        return value
    if not str(value).strip():
        raise typer.BadParameter("an empty path; give a file")
    return Path(value)


@contextlib.contextmanager
def user_errors(unit: str | None = None) -> Iterator[None]:
    """Turn user-facing errors (:data:`USER_ERRORS`, and a ``ValueError`` marked as input) into
    ``error: ...`` on stderr and exit 2; any other ``ValueError`` or ``KeyError`` (a ``KeyError`` is
    input only as an :class:`~agora.models.errors.UnknownNameError`) is a bug in Agora: one
    ``internal error`` line, then it is re-raised with its traceback (exit 1); an
    unreachable model into exit 1;
    Ctrl-C into exit 130. ``unit``: what the command's run saves as it goes (``"questions"``,
    ``"duels"``), named in the resume hint; ``None`` (the default) for a command that runs nothing
    (a report, an export, replay, training): its lines then say nothing about saved work or resuming.
    A trace DB error before any run started (:func:`agora.graphs.recorded_runs.runs_started`: a
    read-only ``--db`` file refusing the run's row) says nothing about saved work either."""
    from agora.graphs.recorded_runs import runs_started

    started_before = runs_started()

    def saved_note() -> str:
        """``; finished <unit> are saved`` once a run of this command started, else ``""``."""
        return f"; finished {unit} are saved" if unit is not None and runs_started() > started_before else ""

    try:
        yield
    except typer.Exit:
        raise
    except (KeyboardInterrupt, GraphDrained):
        stopped_by, _stop.signal = _stop.signal, None
        if unit is None:
            err_console.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(130) from None
        if stopped_by in _TERMINATING:
            with contextlib.suppress(OSError):  # (after SIGHUP the terminal may be gone)
                err_console.print(f"[yellow]{_TERMINATING[stopped_by]}[/yellow]: finished {unit} are saved and the "
                                  f"run is marked interrupted; resume with: {escape(resume_command(note=True))}",
                                  highlight=False, soft_wrap=True)
            raise typer.Exit(128 + stopped_by) from None
        err_console.print(f"[yellow]interrupted[/yellow]: finished {unit} are saved; rerun with the same "
                          "--run-id to resume")
        raise typer.Exit(130) from None
    except ModelCallError as exc:  # a model server went away: the run stops, resumable
        resume = (f"\nfinished {unit} are saved; rerun with the same --run-id to resume once the model answers again"
                  if unit is not None else "")
        err_console.print(f"[red]error:[/red] {escape(error_line(str(exc)))}{resume}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except sqlite3.Error as exc:  # the trace DB or its checkpoints failed mid-run (locked, disk full...)
        saved = saved_note()
        described = error_line(describe_sqlite_error(_databases_given(), exc, **({} if unit is not None else {
            "again": "run the command again"})))
        err_console.print(f"[red]error:[/red] {escape(described)}{saved}",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except Exception as exc:
        if _postgres_error(exc):  # the Postgres trace store failed mid-command (server gone, a timeout)
            saved = saved_note()
            url = _postgres_given()
            line = f"{url or 'the --db URL'}: the Postgres trace store failed in the middle of the command " \
                   f"({pg_reason(exc, url)}){saved}"
            err_console.print(f"[red]error:[/red] {escape(error_line(without_passwords(line)))}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(2) from None
        if not (isinstance(exc, USER_ERRORS) or is_input(exc)):
            if isinstance(exc, (KeyError, ValueError)):  # from Agora's own code, not the user's input: a bug
                shown = repr(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
                err_console.print(f"[red]internal error:[/red] {type(exc).__name__} {escape(shown[:300])} "
                                  "(a bug in Agora, not in your input; the traceback follows)", highlight=False,
                                  soft_wrap=True)
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        shown = error_line(without_passwords(with_option(str(message))))
        err_console.print(f"[red]error:[/red] {escape(shown)}", highlight=False,
                          soft_wrap=True)
        raise typer.Exit(2) from None


def _postgres_error(exc: BaseException) -> bool:
    """Whether ``exc`` is psycopg's (or its pool's) error: a Postgres server that went away, ended
    the session or refused a statement (an admin's ``statement_timeout``) after the store opened."""
    return any(cls.__module__.split(".")[0] in ("psycopg", "psycopg_pool") for cls in type(exc).__mro__
               if cls is not Exception)


def _postgres_given() -> str:
    """The Postgres URL(s) the running command was given (``--db``, ``--dev-db``), as a message names
    them: ``URL``, ``--db URL or --dev-db URL``; ``""`` when none."""
    ctx = _current_context()
    params = getattr(ctx, "params", None) or {}
    given = [(option, str(params[name])) for name, option in (("db", "--db"), ("dev_db", "--dev-db"))
             if isinstance(params.get(name), (str, Path)) and is_postgres_url(str(params[name]))]
    if len(given) == 1:
        return given[0][1]
    return " or ".join(f"{option} {value}" for option, value in given)


def _databases_given() -> str:
    """The trace database(s) the running command was given, naming an SQLite error that surfaced
    after the file was opened (a corrupt page read by a report): ``t.db``, ``--db t.db or --dev-db
    d.db``, or ``trace database`` outside a command or in one without a ``--db``."""
    ctx = _current_context()
    params = getattr(ctx, "params", None) or {}
    given = [(option, params[name]) for name, option in (("db", "--db"), ("dev_db", "--dev-db"))
             if isinstance(params.get(name), (str, Path)) and not is_postgres_url(str(params[name]))]
    if len(given) == 1:
        return str(given[0][1])
    return " or ".join(f"{option} {value}" for option, value in given) or "trace database"


#: A Postgres URL in a message, up to the punctuation that ends its sentence (``URL: no run ...``).
_POSTGRES_URL = re.compile(r"(?i)\bpostgres(?:ql)?://[^\s`'\"]*?(?=[:;,.)]*(?:[\s`'\"]|$))")


def without_passwords(text: str) -> str:
    """``text`` with every Postgres URL in it shown without its password (:func:`shown_url`): an
    error's message names the database as the store holds it, the ``--db`` URL whole."""
    return _POSTGRES_URL.sub(lambda m: shown_url(m.group()), text)


#: A settings refusal: ``Class.field must ...``, ``Class.field (value) must ...`` or ``Class.field: ...``
#: (:func:`agora.models.validation.one_line`), often ending ``, got <value>``; groups ``owner`` (the
#: settings class) and ``field``.
SETTING_REFUSED = re.compile(r"(?P<owner>[A-Z]\w*)\.(?P<field>[a-z_]\w*)(?: \([^()]*\))?(?: must |: )")


def config_lead(file: Path | str, table: str, line: int | None = None) -> str:
    """How a refusal of a value read from the ``--config`` file ``file`` begins: ``--config run.toml:3:
    [moa] `` (``line``: 1-based, left out when ``None``), the settings' own message following."""
    at = f"{file}:{line}" if line else f"{file}"
    return f"--config {at}: [{table}] "


@dataclass(frozen=True)
class Source:
    """Where a settings field's value came from, as the command recorded it while building the
    settings (:func:`record_sources`): the command's parameters that set it (``options``, parameter
    names: the first of them typed on the command line gave the value; none typed, their default
    did), or the ``--config`` ``file``'s ``table`` (the field being its key there), on ``line``
    (1-based; ``None`` when the file's text does not show it)."""

    options: tuple[str, ...] = ()
    file: Path | str | None = None
    table: str = ""
    line: int | None = None

    def lead(self, ctx: Any) -> str:
        """How a refusal of the field begins in the running command (``ctx``: its click context):
        ``-n/--agents: `` (the option typed), ``--config run.toml:3: [moa] `` (:func:`config_lead`),
        or ``""`` (a default: the settings' message names the field alone)."""
        if self.file is not None:
            return config_lead(self.file, self.table, self.line)
        params = {p.name: p for p in getattr(getattr(ctx, "command", None), "params", ()) if p.name}
        for name in self.options:
            param = params.get(name)
            if param is not None and _typed(ctx, name) and any(o.startswith("-") for o in param.opts):
                return _option_text(param) + ": "
        return ""


#: ``ctx.meta`` key: settings class name → field → :class:`Source`, what :func:`record_sources`
#: recorded for the running command and :func:`with_option` reads.
FIELD_SOURCES = "agora.field_sources"


def record_sources(ctx: Any, owner: str, sources: dict[str, Source]) -> None:
    """Record in the running command's context (``ctx``) where the fields of the settings class
    named ``owner`` got their values (field → :class:`Source`), so that a refusal of one of them,
    raised while the settings are built or checked later (a member the pool lacks), names that
    option or file line. A field of ``owner`` left out is named by no option."""
    ctx.meta.setdefault(FIELD_SOURCES, {}).setdefault(owner, {}).update(sources)


def from_options(cls: type, **options: str | tuple[str, ...]) -> None:
    """:func:`record_sources` in the running command for settings ``cls`` it builds from its options:
    ``field="parameter"`` (or a tuple of parameters, the first typed giving the value) for each field
    an option sets (``from_options(DelegationConfig, n_agents="agents")``); call it before building
    them. Outside a command it does nothing."""
    ctx = _current_context()
    if ctx is not None:
        record_sources(ctx, cls.__name__, {f: Source(options=(p,) if isinstance(p, str) else tuple(p))
                                           for f, p in options.items()})


#: A refusal naming a field without its settings class (``learning_rate must be > 0, got 0``: a class
#: whose rules write their whole message); group ``field``.
_BARE_FIELD_REFUSED = re.compile(r"(?P<field>[a-z_]\w*)(?: \([^()]*\))?(?: must |: )")


def settings_from_options(cls: type, options: dict[str, str | tuple[str, ...]], /, **values: Any) -> Any:
    """``cls(**values)``: settings a command builds from its options, with :func:`from_options`
    recorded first (``options``: field → the parameter, or parameters, that set it), so a refusal
    of a field names the option the user gave (``--lr: DPOSettings.learning_rate must be > 0, got
    0``; a default names the field alone). A refusal that names a field of ``options`` without its
    class is given the class (``cls.field``), which is how :func:`with_option` finds the option. A
    cross-field refusal (a rule over several fields) is led by the options of the fields it names,
    typed or not, as either may be changed: ``--batch-size, --grad-accum, --num-generations:
    GRPOSettings: batch_size × grad_accum (3 × 1) must be divisible by num_generations (2)``.

    Raises:
        InputError: a refusal of a field of ``options``, as ``cls.field ...``; a cross-field refusal
            naming two or more of them, led by their options.
        ValueError: any other refusal of ``cls``, as ``cls`` raised it.
    """
    from_options(cls, **options)
    try:
        return cls(**values)
    except ValueError as exc:
        message = str(exc)
        if not (isinstance(exc, InputError) or is_input(exc)):
            raise
        found = _BARE_FIELD_REFUSED.match(message)
        if found is not None and found["field"] in options:
            raise InputError(f"{cls.__name__}.{message}") from None
        lead = _cross_field_lead(options, message)
        if lead is None:
            raise
        named = message if message.startswith(f"{cls.__name__}.") else f"{cls.__name__}: {message}"
        raise InputError(f"{lead}: {named}") from None


def _cross_field_lead(options: dict[str, str | tuple[str, ...]], message: str) -> str | None:
    """The options of the running command that set the fields a cross-field refusal names (``batch_size
    × grad_accum (3 × 1) must be divisible by num_generations (2)``), typed or not, in the order the
    message names them: ``--batch-size, --grad-accum, --num-generations``; ``None`` outside a command
    or when the message names fewer than two such fields (not a cross-field rule)."""
    ctx = _current_context()
    if ctx is None:
        return None
    params = {p.name: p for p in getattr(getattr(ctx, "command", None), "params", ()) if p.name and p.opts}
    named = sorted((m.start(), m.group(0)) for f in options for m in re.finditer(rf"\b{re.escape(f)}\b", message))
    shown: list[str] = []
    for _, field_name in named:
        option = options[field_name]
        param = params.get(option if isinstance(option, str) else option[0])
        text = None if param is None else max(param.opts, key=lambda o: (o.startswith("--"), len(o)))
        if text is not None and text not in shown:
            shown.append(text)
    return ", ".join(shown) if len(shown) >= 2 else None


def _current_context() -> Any:
    """The click context of the running command, or ``None`` outside one."""
    try:
        from typer._click.globals import get_current_context  # Typer vendors click
    except ImportError:  # pragma: no cover - a Typer on the real click
        from click import get_current_context
    return get_current_context(silent=True)


def source_lead(ctx: Any, message: str) -> str | None:
    """The lead of ``message``, a settings refusal (:data:`SETTING_REFUSED`), from the sources the
    running command recorded (:meth:`Source.lead`); ``None`` when it names no field, or a field of a
    settings class the command recorded nothing for."""
    found = SETTING_REFUSED.match(message)
    recorded = (getattr(ctx, "meta", None) or {}).get(FIELD_SOURCES) or {}
    if found is None or found["owner"] not in recorded:
        return None
    source = recorded[found["owner"]].get(found["field"])
    return source.lead(ctx) if source is not None else ""


def _typed(ctx: Any, name: str) -> bool:
    """Whether the parameter ``name`` of the running command was typed on the command line."""
    # Typer vendors click (typer._click): compare the source by name, not by click's enum.
    return getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"


def _option_text(param: Any) -> str:
    """A parameter's options as the user would type them: ``-n/--agents``."""
    return "/".join(sorted({*param.opts, *param.secondary_opts}, key=lambda o: (o.startswith("--"), o)))


def option_of_field(ctx: Any, field: str, got: str | None, message: str = "") -> str | None:
    """For a command that recorded no :class:`Source` of the settings refused (it builds them from
    its options without :func:`from_options`): the option of the running command (``ctx``: its
    click context) whose value the settings field ``field`` surely holds, as the user would type it
    (``-n/--agents``); ``None`` when no parameter surely gave it.

    The parameter is the one named as the field (``rounds``), else the one named as the field's
    last words (``agents`` → ``n_agents``; the longest tail). It is named only when ``got`` (the
    ``repr`` after the message's last ``, got``) is its value (a comma-separated option matches the
    tuple it gives), or, for an option typed on the command line, one part of it (``a=2`` gave
    ``2.0``; :func:`_gave_part`); with no ``got``, an option typed whose part the message quotes
    (``'zz'`` of ``--proposers m1,zz``; ``message``). Else the message names the field alone."""
    params = {p.name: p for p in getattr(getattr(ctx, "command", None), "params", ()) if p.name and p.opts}
    param = params.get(field)
    if param is None:
        words = field.split("_")
        tails = ["_".join(words[i:]) for i in range(1, len(words))]
        param = next((params[t] for t in tails if t in params), None)
    if param is None or not any(o.startswith("-") for o in param.opts):
        return None
    value = ctx.params.get(param.name)
    shown = {repr(value), repr(str(value))}
    if isinstance(value, str):
        shown |= {repr(tuple(v.strip() for v in value.split(","))),
                  repr(tuple(v.strip() for v in value.split(",") if v.strip()))}
    typed = _typed(ctx, param.name)
    if value is None:
        return None
    if got is not None:
        sure = got in shown or (typed and _gave_part(value, got))
    else:
        sure = typed and any(repr(part) in message for part in _parts(value))
    return _option_text(param) if sure else None


def _parts(value: Any) -> list[str]:
    """The parts of an option's value as a message may quote them: the entries of a list or of a
    comma-separated string, and each ``name=value`` entry's two sides (``"a=2,b"`` → ``a=2``,
    ``a``, ``2``, ``b``)."""
    entries = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value).split(",")
    parts = [e.strip() for e in entries]
    parts += [side.strip() for e in parts if "=" in e for side in e.split("=", 1)]
    return [p for p in parts if p]


def _gave_part(value: Any, got: str) -> bool:
    """Whether ``got`` (a refused value's ``repr``, ``2.0``, ``'zz'``) is one part of ``value`` (an
    option's value, :func:`_parts`), as written or as the number it reads as (``2`` gave ``2.0``)."""
    try:
        refused = ast.literal_eval(got)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    for part in _parts(value):
        if part == refused:
            return True
        if isinstance(refused, (int, float)) and not isinstance(refused, bool):
            try:
                if float(part) == refused:
                    return True
            except ValueError:
                continue
    return False


def with_option(message: str) -> str:
    """``message``, a settings refusal (``DelegationConfig.n_agents must be at most 64, got 100``),
    led by where the running command got the refused value: the option typed (``-n/--agents:
    DelegationConfig...``) or the ``--config`` file's line (``--config run.toml:3: [moa] ...``), as
    the command recorded it (:func:`record_sources`); for settings it recorded nothing of, the option
    that surely gave it (:func:`option_of_field`). Any other message, or one outside a command, is
    returned as it is."""
    found = SETTING_REFUSED.match(message)
    if found is None:
        return message
    ctx = _current_context()
    if ctx is None:
        return message
    lead = source_lead(ctx, message)
    if lead is not None:
        return lead + message
    _, said, got = message.rpartition(", got ")
    option = option_of_field(ctx, found["field"], got if said else None, message)
    return message if option is None else f"{option}: {message}"


def exit_if_failed(outcome: Any, total: int, run_id: str, unit: str = "questions") -> None:
    """After a run's report: when questions failed (no model call of theirs succeeded; see
    :attr:`agora.graphs.runner.RunOutcome.failed`), list them on stderr and exit 1."""
    failed = outcome.failed
    if not failed:
        return
    shown = "; ".join(f"{q.problem.id}: {q.error}"[:300] for q in failed[:5])
    more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
    err_console.print(f"[red]error:[/red] {len(failed)} of {total} {unit} failed: no model call answered, so they "
                      f"are not recorded as answered ({escape(shown)}{more}); rerun with --run-id "
                      f"{escape(shlex.quote(run_id))} to "
                      "retry them", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


class _StopState:
    """What :func:`graceful_stop` saw: the signal that asked for the drain, and the run id to name."""

    signal: int | None = None
    run_id: str | None = None


_stop = _StopState()

#: The signals that stop a run as SIGTERM does (drain, mark it interrupted, exit 128 + the signal's
#: number), and how the stop is named: ``terminated`` (SIGTERM), ``hung up`` (SIGHUP).
_TERMINATING = {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGHUP: "hung up (SIGHUP)"}

#: Seconds a SIGTERM's drain may take before the process ends anyway (its runs marked
#: ``interrupted`` first): ``docker stop`` and ``timeout -k`` send SIGKILL about 10 s after SIGTERM.
TERM_GRACE_S = 8.0


def resume_command(run_id: str | None = None, *, note: bool = False) -> str:
    """The command line that resumes the current run: this process's own arguments, with
    ``--run-id`` added when the run id was generated (``agora`` as the program), and each Postgres
    URL in them (``--db URL``, ``--dev-db=URL``) without its password (:func:`~agora.traces.pg_sql.db_argument`).
    ``note``: followed by :data:`~agora.traces.pg_sql.PASSWORD_NOTE` when a password was left out."""
    run_id = run_id or _stop.run_id
    given = list(sys.argv[1:])
    args = [_arg_without_password(a) for a in given]
    if run_id and "--run-id" not in args and not any(a.startswith("--run-id=") for a in args):
        args += ["--run-id", run_id]
    command = shlex.join(["agora", *args])
    return f"{command} {PASSWORD_NOTE}" if note and args[:len(given)] != given else command


def _arg_without_password(arg: str) -> str:
    """A command-line argument that is a Postgres URL (or ``--option=URL``) without its password."""
    option, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
    return f"{option}{eq}{bare_url(value)}" if is_postgres_url(value) else arg


def _end_now(code: int, message: str) -> None:
    """Mark this process's live runs ``interrupted`` (not left ``running``), print ``message`` and
    end the process at once with ``code``."""
    from agora.graphs.recorded_runs import mark_live_runs

    marked = mark_live_runs("interrupted", "stopped at once: " + message)
    note = "the run is marked interrupted" if marked else "finished work is saved"
    with contextlib.suppress(OSError):  # (a terminal gone after SIGHUP must not keep the process alive)
        err_console.print(f"[yellow]stopped[/yellow]: {message}; model calls in flight abandoned; {note}; resume "
                          f"with: {escape(resume_command(note=True))}", highlight=False, soft_wrap=True)
        console.show_cursor(True)  # a progress display hides it
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


@contextlib.contextmanager
def graceful_stop(run_id: str | None = None) -> Iterator[RunControl]:
    """Ctrl-C or SIGTERM stops a run at the next step boundary instead of mid-step; a second signal
    at once.

    Yields the ``RunControl`` to pass to :func:`agora.graphs.runner.run_problems` (or
    ``run_duels``). The first SIGINT (or SIGTERM: what ``timeout``, ``docker stop`` and Slurm send)
    asks LangGraph to drain: the running step finishes and is checkpointed with every sample it
    drew, then ``GraphDrained`` is raised, the run is marked ``interrupted`` and :func:`user_errors`
    prints the resume hint and exits 130 (143 after SIGTERM, naming the command that resumes).
    A second signal ends the process at once (exit 130, or 143 for SIGTERM): model calls in flight
    run in worker threads that cannot be interrupted, and LangGraph would wait for them; the
    process's runs are marked ``interrupted`` first (:func:`agora.graphs.recorded_runs.mark_live_runs`).
    A SIGTERM's drain that takes more than :data:`TERM_GRACE_S` ends the same way. SIGHUP (the
    terminal closed, an ssh session dropped) is taken as SIGTERM is (exit 129), unless it was
    ignored when the run started (``nohup``): then it stays ignored. Finished
    questions and checkpointed steps are already on disk; the resumed run redoes the running step.
    ``run_id``: the run (or bench) id the resume hint names. Outside the main thread (where signal
    handlers cannot be set) it only yields the control.
    """
    control = RunControl()
    if threading.current_thread() is not threading.main_thread():
        yield control
        return
    _stop.signal, _stop.run_id = None, run_id
    timers: list[threading.Timer] = []

    def on_signal(signum: int, frame: Any) -> None:
        code = 128 + signum if signum in _TERMINATING else 130
        name = signal.Signals(signum).name
        if control.drain_requested:
            _end_now(code, "a second " + (name if signum in _TERMINATING else "Ctrl-C"))
        _stop.signal = signum
        if signum in _TERMINATING:
            control.request_drain("terminated")
            with contextlib.suppress(OSError):  # (after SIGHUP the terminal may be gone)
                err_console.print(f"[yellow]terminating[/yellow] ({name}) after the running step, which is saved; "
                                  f"at most {TERM_GRACE_S:g} s")
            timer = threading.Timer(TERM_GRACE_S, _end_now, (code, f"{name}, the running step took over "
                                                                   f"{TERM_GRACE_S:g} s to finish"))
            timer.daemon = True
            timers.append(timer)
            timer.start()
            return
        control.request_drain("interrupted")
        err_console.print("[yellow]stopping[/yellow] after the running step, which is saved "
                          "(model calls in flight finish first); Ctrl-C again to stop at once")

    caught = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # (under nohup it stays ignored)
        caught.append(signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in caught}
    try:
        yield control
    finally:
        for timer in timers:  # the drain ended in time
            timer.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_out_path(out: Path | None, option: str = "--out") -> None:
    """Refuse an output folder that names an existing file (or lies under one), or ``-`` (standard
    output, by the usual convention: never a folder named ``-`` unasked), before any work.

    Raises:
        ValueError: naming the option and the path.
    """
    if out is None:
        return
    if str(out) == "-":
        raise InputError(f"{option} -: it names an output folder, not standard output; give a folder name (for a "
                         "folder named '-', give its full path)")
    out = Path(out)
    for p in (out, *out.parents):
        if p.exists() and not p.is_dir():
            what = "names an existing file" if p == out else f"lies under the file {p}"
            raise InputError(f"{option} {out}: {what}; it must be a folder (give a new or existing folder)")
        if p.exists():
            return


def get_pool(path: Path | None) -> ModelPool:
    """The pool from ``--pool FILE``, or the embedded default pool."""
    return load_pool(path) if path is not None else default_pool()


def new_run_id(protocol: str) -> str:
    return f"{protocol}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def question_progress(total: int) -> Progress:
    return Progress(
        FieldColumn("{task.fields[label]}", style="bold"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), FieldColumn("{task.fields[status]}", style="dim"),  # user strings: no markup
        console=console, transient=False, disable=not sys.stdout.isatty() and total == 0,
    )


def fmt_pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}"


def fmt_ci(lo: float, hi: float) -> str:
    return "-" if lo != lo else f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def echo_kv(items: dict[str, Any]) -> None:
    for k, v in items.items():
        console.print(f"[bold]{escape(str(k))}[/bold]: {escape(str(v))}", highlight=False, soft_wrap=True)
