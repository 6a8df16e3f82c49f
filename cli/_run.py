"""The run scaffold shared by the ``agora run <protocol>`` commands (not public).

A benchmark command is its settings dataclass and the shared scaffold: :func:`benchmark_command`
derives one option per settings field (named, documented and defaulted as the field) plus the shared
options and ``--config FILE.toml``, and its body loads the problems, opens the trace store, shows
progress, runs the protocol's registered graph through :func:`agora.graphs.runner.run_protocol`
(resumable, Ctrl-C drains), prints the method table and exits 1 when questions failed. A protocol
gets its command by setting ``run=RunCommand(...)`` in its spec (:func:`spec_commands`; ``agora run
moa`` and ``agora run debate`` are made so, with no CLI module); ``agora run align`` uses
:func:`load_benchmark` and :func:`run_benchmark` with its own options.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence, TypeVar

import typer
from rich.markup import escape

from agora.models.urls import shown_url
from agora.tasks.errors import InputError, bare_cr_as_lf, is_input, utf16_guess
from agora.models.pool import ModelPool
from agora.models.validation import recorded
from agora.cli._shared import (
    Source,
    Table,
    config_lead,
    console,
    exit_if_failed,
    fmt_ci,
    fmt_pct,
    graceful_stop,
    nonempty_path,
    new_run_id,
    question_progress,
    record_sources,
    source_lead,
)
from agora.graphs.context import settings_from
from agora.graphs.registry import get as protocol
from agora.graphs.runner import RunOutcome, run_protocol
from agora.tasks.loaders import FORMATS, detect_format, load_problems
from agora.tasks.problem import Problem
from agora.tasks.samples import sample_path
from agora.traces.report import method_table, run_totals, unknown_tokens_note
from agora.traces.store import TraceStore, check_run_id

Durability = Literal["async", "sync", "exit"]

# The options every benchmark command shares (one declaration, reused as defaults).
DATA = typer.Option(None, "--data", parser=nonempty_path, metavar="<path>",
                    help="Problem file (JSONL). Default: 5 GSM8K test problems shipped with Agora "
                         "(--format synthetic: generated arithmetic).")
FORMAT = typer.Option(None, "--format", help=f"One of {', '.join(FORMATS)}; guessed from the file when omitted.")
LIMIT = typer.Option(None, "--limit", min=1, help="Use the first N problems (default: all; 5 generated).")
POOL = typer.Option(None, "--pool", help="Pool file (TOML) or a built-in pool name (default, tiny, diverse; see "
                                         "`agora pool list`). Default: the embedded Qwen pool.")
DB = typer.Option("agora.db", "--db", help="Trace database: a SQLite file, or a postgresql:// URL (several workers may share a run there).")
RUN_ID = typer.Option(None, "--run-id", help="Run id; an existing id resumes that run.")
CONCURRENCY_HELP = ("Questions in flight at once. Default: 8 on the embedded llama.cpp pool (concurrent "
                    "requests share its decode batches), else 1; raise it for a served pool (vLLM batches "
                    "requests too).")
CONCURRENCY = typer.Option(None, "--concurrency", min=1, help=CONCURRENCY_HELP)
DURABILITY = typer.Option("async", "--durability", help="Checkpoint each question after every step (async, sync) "
                                                        "or only when it ends or stops (exit).")
CONFIG = typer.Option(None, "--config", help="Settings file (TOML): a table named after the protocol ([moa], "
                                             "[debate], [comed]) with its settings' fields; options given on the "
                                             "command line win over the file.")

S = TypeVar("S")


def config_table(config_file: Path, table: str, cls: type) -> tuple[dict[str, Any], str]:
    """The ``[table]`` of the TOML settings file ``config_file`` (field → value, not yet checked),
    and the file's text (where :func:`toml_key_line` finds a key's line).

    Raises:
        InputError: a missing or invalid file, or no ``[table]`` in it (the fields of ``cls`` listed).
    """
    path = Path(config_file)
    if path.is_dir():
        raise InputError(f"--config {path}: a folder, not a settings file; give the path of a TOML file")
    if not path.is_file():
        if path.exists():  # (read, a FIFO would block until a writer came)
            raise InputError(f"--config {path}: not a regular file (a FIFO, device or socket); give the path of a "
                             "TOML file")
        raise InputError(f"--config {path}: no such file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"--config {path}: cannot read it: {exc.strerror or exc}") from None
    utf16 = "it looks like UTF-16 (a byte-order mark or NUL bytes)"
    if utf16_guess(raw) is not None:  # (checked first: UTF-16 without a byte-order mark decodes as UTF-8, NULs)
        raise InputError(f"--config {path}: a settings file must be UTF-8 text; {utf16}: save it as UTF-8")
    try:
        text = raw.decode("utf-8-sig")  # a UTF-8 byte-order mark (a Windows editor's) is accepted, as in pool files
    except UnicodeDecodeError as exc:
        kind = utf16 if b"\x00" in raw[:64] else f"byte {exc.start} is not UTF-8"
        raise InputError(f"--config {path}: a settings file must be UTF-8 text; {kind}: save it as UTF-8") from None
    text = bare_cr_as_lf(text)
    try:
        values = tomllib.loads(text).get(table)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"--config {path}: invalid TOML: {exc}") from None
    except RecursionError:  # (tomllib recurses per nested array or inline table)
        raise InputError(f"--config {path}: invalid TOML: nested too deeply") from None
    if not isinstance(values, dict):
        raise InputError(f"--config {path}: no [{table}] table (fields: {', '.join(f.name for f in fields(cls))})")
    return values, text


#: A TOML key, bare or quoted; a dotted key is several, joined by ``.``.
_KEY_PART = r"""(?:"[^"\n]*"|'[^'\n]*'|[A-Za-z0-9_-]+)"""
_DOTTED_KEY = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_TABLE_LINE = re.compile(rf"^\s*\[\s*({_DOTTED_KEY})\s*\]\s*(?:#.*)?$")
_ARRAY_TABLE_LINE = re.compile(rf"^\s*\[\[\s*({_DOTTED_KEY})\s*\]\]\s*(?:#.*)?$")
_KEY_LINE = re.compile(rf"^\s*({_DOTTED_KEY})\s*=")


def _key_path(dotted: str) -> tuple[str, ...]:
    """``a."b.c" . d`` → ``("a", "b.c", "d")`` (quotes taken off; escapes in a quoted key are not read)."""
    return tuple(next(g for g in m.groups() if g is not None)
                 for m in re.finditer(r""""([^"\n]*)"|'([^'\n]*)'|([A-Za-z0-9_-]+)""", dotted))


def _toml_value_end(rest: str, quote: str | None, depth: int) -> tuple[str | None, int]:
    """Read ``rest``, a line's TOML value text (or a further line of a value), from the state
    ``quote`` (the delimiter of an open multi-line string, ``\"\"\"`` or ``\'\'\'``, else ``None``)
    and ``depth`` (arrays and inline tables open); the state after it. One-line strings, escapes
    and comments are skipped, so a bracket or quote inside them counts for nothing."""
    i, end = 0, len(rest)
    while i < end:
        if quote is not None:  # inside a multi-line string: only its closing delimiter (and escapes)
            if quote == '"""' and rest[i] == "\\":
                i += 2
            elif rest.startswith(quote, i):
                i += 3
                while i < end and rest[i] == quote[0]:  # up to two quotes of the string before it
                    i += 1
                quote = None
            else:
                i += 1
            continue
        ch = rest[i]
        if ch == "#":
            break
        if rest.startswith('"""', i) or rest.startswith("'''", i):
            quote, i = rest[i:i + 3], i + 3
        elif ch == '"':
            i += 1
            while i < end and rest[i] != '"':
                i += 2 if rest[i] == "\\" else 1
            i += 1
        elif ch == "'":
            close = rest.find("'", i + 1)
            i = end if close < 0 else close + 1
        else:
            depth += (ch in "[{") - (ch in "]}")
            depth = max(depth, 0)
            i += 1
    return quote, depth


def toml_key_line(text: str, path: Sequence[str]) -> int | None:
    """The line (1-based) of the TOML document ``text`` that sets the key ``path`` (``("moa",
    "seed")``: ``seed`` of the ``[moa]`` table), read off the text (``tomllib`` keeps no
    positions): a ``key = ...`` line under its table's ``[header]`` (or a dotted key under a table
    above it), the header of the table ``path`` itself, else the line of the inline table that holds
    it (``moa = {seed = 1}``); ``None`` when none is found (an array of tables is not searched).
    Lines inside a multi-line string or array, and strings and comments, are not read as keys or
    headers (:func:`_toml_value_end`)."""
    target = tuple(path)
    table: tuple[str, ...] | None = ()
    inline: int | None = None
    quote: str | None = None
    depth = 0
    for n, row in enumerate(text.split("\n"), 1):
        if quote is not None or depth:  # a further line of a multi-line string or array: not a key
            quote, depth = _toml_value_end(row, quote, depth)
            continue
        header = _TABLE_LINE.match(row)
        if header is not None:
            table = _key_path(header.group(1))
            if table == target:
                return n
            continue
        if _ARRAY_TABLE_LINE.match(row):
            table = None  # keys of an array's table are not the settings'
            continue
        key = _KEY_LINE.match(row)
        if key is not None and table is not None:
            full = (*table, *_key_path(key.group(1)))
            if full == target:
                return n
            if inline is None and full == target[:len(full)] and "{" in row[key.end():]:
                inline = n
        quote, depth = _toml_value_end(row[key.end():] if key is not None else row, None, 0)
    return inline


def typed_options(ctx: typer.Context) -> set[str]:
    """The parameters of this command that were set on the command line (not defaults)."""
    # Typer vendors click (typer._click): compare the source by name, not by click's enum.
    return {k for k in ctx.params if getattr(ctx.get_parameter_source(k), "name", None) == "COMMANDLINE"}


def _file_sources(cls: type, values: dict[str, Any], file: Path, table: tuple[str, ...],
                  text: str) -> dict[str, dict[str, Source]]:
    """Settings class name → field → :class:`Source` of the ``values`` a ``--config`` file gives the
    settings ``cls`` from its table ``table`` (a path: ``("comed",)``), nested settings' own tables
    included (``[comed.thresholds]``: ``EscalationThresholds``)."""
    import typing
    from dataclasses import is_dataclass

    hints = typing.get_type_hints(cls)
    mine: dict[str, Source] = {}
    out = {cls.__name__: mine}
    for key, value in values.items():
        mine[key] = Source(file=file, table=".".join(table), line=toml_key_line(text, (*table, key)))
        nested = next((k for k in (hints.get(key), *typing.get_args(hints.get(key))) if is_dataclass(k)), None)
        if isinstance(value, dict) and nested is not None:
            for owner, sources in _file_sources(nested, value, file, (*table, key), text).items():
                out.setdefault(owner, {}).update(sources)
    return out


def settings(ctx: typer.Context, cls: type[S], config_file: Path | None, table: str, given: dict[str, Any],
             options: dict[str, tuple[str, ...]] | None = None) -> S:
    """The settings dataclass ``cls`` from the command's options (``given``: field → option value)
    and, with ``--config FILE``, the file's ``[table]``: a field the command line set wins, else the
    file's value, else ``given``'s (the option's default). ``options``: the parameters that set a
    field, when not the one named as the field (``{"n_anchor": ("samples",)}``); a field in the
    file that no option sets is taken from the file.

    Records where each field's value came from (:func:`agora.cli._shared.record_sources`): the
    option, or the file's table, key and line; a refusal of the field names it, here or when the
    settings are checked later (:func:`agora.cli._shared.with_option`).

    Raises:
        InputError: a missing or invalid file, no ``[table]`` in it, an unknown field (named, with
            the file's line), or a bad value (the settings' own check, naming the field, led by the
            option typed or the file's line that gave it).
    """
    options = options or {}
    record_sources(ctx, cls.__name__, {f.name: Source(options=options.get(f.name, (f.name,))) for f in fields(cls)})
    from_file: dict[str, Any] = {}
    text = ""
    if config_file is not None:
        file_values, text = config_table(config_file, table, cls)
        typed = typed_options(ctx)
        from_file = {k: v for k, v in file_values.items() if not any(o in typed for o in options.get(k, (k,)))}
        for owner, sources in _file_sources(cls, from_file, config_file, (table,), text).items():
            record_sources(ctx, owner, sources)
    try:
        return settings_from({**given, **from_file}, cls)
    except ValueError as exc:
        if config_file is None and not is_input(exc):  # not a refusal of the user's values: a bug, as it is
            raise
        message = str(exc)
        lead = source_lead(ctx, message)
        if lead is None and config_file is not None:  # names no field: an unknown one, or the file's table
            unknown = sorted(k for k in from_file if k not in {f.name for f in fields(cls)})
            lead = config_lead(config_file, table, toml_key_line(text, (table, unknown[0])) if unknown else None)
        raise InputError(f"{lead or ''}{message}") from None


def names(value: Optional[str]) -> tuple[str, ...]:
    """``"a, b"`` → ``("a", "b")``; ``None`` → ``()``."""
    return tuple(m.strip() for m in value.split(",") if m.strip()) if value else ()


def member_names(value: Optional[str], option: str = "--models") -> tuple[str, ...]:
    """The pool members of a comma-separated option (``--models``, ``--train-models``): ``"a, b"`` →
    ``("a", "b")``, ``None`` → ``()``.

    Raises:
        InputError: a member named more than once (``--models a,a: 'a' named more than once; ...``), or
        an option given but naming no member (``--models ""``, ``--models ,,``), which would otherwise
        quietly mean the default (every member).
    """
    given = names(value)
    if value is not None and not given:
        raise InputError(f"{option} {value!r}: names no member; give comma-separated pool members, or leave "
                         f"{option} out for the default")
    twice = [m for m in dict.fromkeys(given) if given.count(m) > 1]
    if twice:
        raise InputError(f"{option} {value}: {', '.join(map(repr, twice))} named more than once; name each "
                         "member once")
    return given


def check_principal(principal: str | None, pool: ModelPool) -> None:
    """Refuse ``--principal NAME`` (ALIGN's model principal, ``DelegationConfig.principal``) when
    ``NAME`` is no member of ``pool``, before any run row or trace DB is written; ``None`` (no model
    principal) passes.

    Raises:
        InputError: one line naming ``--principal``, the name and the pool's members
            (``--principal: 'nobody' is not in the pool (a, b)``).
    """
    if principal is not None and principal not in pool:
        raise InputError(f"--principal: {principal!r} is not in the pool ({', '.join(pool.names)})")


def load_benchmark(data: Path | None, fmt: str | None, limit: int | None, seed: int,
                   load: Callable[..., list[Problem]] = load_problems) -> tuple[Path | None, str, list[Problem]]:
    """``(data, format, problems)``: ``--data`` in ``--format`` (guessed when omitted), the generated
    arithmetic for ``--format synthetic`` without a file, else the shipped GSM8K sample (``load``:
    the loader, :func:`agora.tasks.load_problems`).

    Raises:
        TaskFormatError / ValueError: a bad file or format (an unknown ``--format``, or one without
        ``--data`` that is neither ``synthetic`` nor the sample's ``gsm8k``), or no problems.
    """
    if fmt is not None and fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: unknown format; choose one of {', '.join(FORMATS)}")
    if data is None and fmt not in (None, "synthetic", "gsm8k"):
        raise InputError(f"--format {fmt} needs a file: give --data FILE; without one only --format synthetic "
                         "(generated arithmetic) and gsm8k (the shipped GSM8K sample) run")
    if data is None and fmt == "synthetic":
        return None, "synthetic", load(None, "synthetic", limit or 5, seed=seed)
    if data is None:
        data, fmt_name = sample_path("gsm8k")
    else:
        fmt_name = fmt or detect_format(data)
    problems = load(data, fmt_name, limit)
    if not problems:
        raise InputError(f"{data}: no problems to run")
    return data, fmt_name, problems


def run_benchmark(name: str, problems: Sequence[Problem], *, context: Any, config: Any, pool: ModelPool, db: str | Path,
                  run_id: str | None, data: Path | None, fmt_name: str, limit: int | None, label: str,
                  durability: Durability = "async", concurrency: int | None = 1) -> tuple[TraceStore, str, RunOutcome]:
    """Run the registered benchmark protocol ``name`` on ``problems`` and record it in ``db``.

    ``concurrency=None``: the pool's :meth:`~agora.models.pool.ModelPool.suggested_concurrency`.
    Returns the store, the run id and the runner's outcome (the caller prints its report).
    """
    spec = protocol(name)
    run_id = new_run_id(name) if run_id is None else check_run_id(run_id)  # refused before the DB is created
    if concurrency is None:
        concurrency = min(pool.suggested_concurrency(), max(1, len(problems)))
    store = TraceStore(db)
    in_flight = f", {concurrency} questions in flight" if concurrency > 1 else ""
    progress = question_progress(len(problems))
    task = progress.add_task(name, total=len(problems), label=name, status="")

    def started(_: RunOutcome) -> None:  # the run's row accepted: a refused rerun prints only its error
        console.print(f"run [bold]{escape(run_id)}[/bold]: {counted(len(problems), escape(fmt_name) + ' problem')}, "
                      f"{escape(label)}, pool {escape(', '.join(pool.names))}{in_flight}", highlight=False)
        progress.start()

    try:
        with graceful_stop(run_id) as control:
            outcome = run_protocol(
                spec.name, problems, store=store, run_id=run_id, context=context,
                config=recorded(config), pool_description=pool.describe(),
                dataset={"path": str(data) if data else None, "format": fmt_name, "limit": limit},
                on_event=lambda e: progress.update(task, status=e.get("message", "")[:70]),
                on_question=lambda q: progress.advance(task),
                durability=durability, concurrency=concurrency, control=control, on_start=started,
            )
            progress.update(task, completed=len(problems), status="done")
    finally:
        if progress.live.is_started:  # (stopping one never started prints a newline on a non-terminal)
            progress.stop()
    if outcome.skipped:
        console.print(f"resumed: {outcome.skipped} of {len(problems)} questions already done", highlight=False)
    held = len(store.finished_questions(run_id))
    if held > len(problems):  # resumed with a smaller --limit: the tables below are the whole run's
        console.print(f"the run holds {held} questions (an earlier sitting ran more); the tables below cover all "
                      f"{held}", highlight=False)
    return store, run_id, outcome


def counted(n: int, noun: str) -> str:
    """``1 gsm8k problem``, ``3 gsm8k problems`` (``noun`` singular)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def print_methods(store: TraceStore, run_id: str, title: str, order: Sequence[str]) -> None:
    """The method table (accuracy, CI, requests/samples/tokens per question) and the run's totals."""
    rows = method_table(store, run_id, order=order)
    totals = run_totals(store, run_id)
    table = Table(title=escape(title))
    for col in ("method", "questions", "failed", "accuracy %", "95% CI", "samples/q", "gen. tokens", "model time s"):
        table.add_column(col, justify="left" if col == "method" else "right", no_wrap=col == "method")
    for r in rows:
        table.add_row(escape(r.method), str(r.questions), str(r.failed), fmt_pct(r.accuracy), fmt_ci(r.ci_low, r.ci_high),
                      f"{r.samples_per_question:.1f}", str(r.completion_tokens), f"{r.model_time_s:.1f}")
    console.print(table)
    console.print(f"samples drawn: {int(totals['calls'])} (failed attempts: {int(totals['failed'])}), generated tokens: "
                  f"{int(totals['completion_tokens'])}{unknown_tokens_note(totals)}, question time: {totals['wall_s']:.1f} s; traces: {escape(shown_url(str(store.path)))}",
                  highlight=False)


def finish(store: TraceStore, run_id: str, outcome: RunOutcome, total: int, title: str, order: Sequence[str]) -> None:
    """Print the report, then exit 1 when questions failed (listing them)."""
    print_methods(store, run_id, title, order)
    exit_if_failed(outcome, total, run_id)


# ----------------------------------------------------------------------------- commands from settings


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstring under each field of a settings dataclass (whitespace collapsed)."""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body, docs = tree.body[0].body, {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.replace("``", "").split())
    return docs


#: Settings fields whose comma-separated option lists pool members, each at most once (:func:`member_names`):
#: ``--models`` (debate, slm-mux), ``--members`` (council), ``--proposers`` (moa).
MEMBER_LISTS = frozenset({"models", "members", "proposers"})


def _field_option(f: Any, hint: Any, doc: str) -> tuple[Any, Any, Callable[[Any], Any]]:
    """``(annotation, typer.Option, to_field)`` of one settings field: tuples of names as a
    comma-separated option, ``X | None`` as an optional ``X``; the settings check the values."""
    import types
    import typing
    from dataclasses import MISSING

    default = f.default if f.default is not MISSING else f.default_factory()
    flag = "--" + f.name.replace("_", "-")
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        shown = ",".join(default) or None
        convert = (lambda v: member_names(v, flag)) if f.name in MEMBER_LISTS else names
        return Optional[str], typer.Option(shown, flag, help=f"{doc} (comma-separated)"), convert
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return Optional[inner], typer.Option(default, flag, help=doc), lambda v: v
    return hint, typer.Option(default, flag, help=doc), lambda v: v


#: The options every generated command has after its settings' (parameter → annotation, option);
#: a settings field may not take one of these names.
SHARED_PARAMS: dict[str, tuple[Any, Any]] = {
    "pool": (Optional[Path], POOL), "db": (str, DB), "run_id": (Optional[str], RUN_ID),
    "concurrency": (Optional[int], CONCURRENCY), "durability": (Durability, DURABILITY), "config_file": (Optional[Path], CONFIG),
}


def benchmark_command(name: str, cls: type, *, short_help: str, help: str, context: Callable[..., Any],
                      check: Callable[[Any, list[str]], Any], label: Callable[[Any, list[str]], str],
                      methods: Sequence[str], title: str) -> Callable[..., None]:
    """Register ``agora run <name>``: one option per field of the settings dataclass ``cls`` (named and
    documented as the field, defaults from it), the shared options and ``--config FILE.toml``
    (its ``[name]`` table); the body is the shared scaffold. ``check(config, pool names)`` refuses
    settings the pool cannot play, ``label`` describes the run in its first line. The command builds
    its context as ``context(pool, config)``.

    Raises:
        ValueError: a settings field named as a shared option (``limit``, ``pool``, ``db``...).
    """
    import inspect
    import typing

    from agora.cli import _shared
    from agora.cli._apps import run_app

    reserved = {"ctx", "data", "fmt", "format", "limit", *SHARED_PARAMS}
    clash = sorted(f.name for f in fields(cls) if f.name in reserved)
    if clash:
        raise InputError(f"agora run {name}: settings field(s) {', '.join(clash)} of {cls.__name__} clash with the "
                         f"shared options; rename them (reserved: {', '.join(sorted(reserved))})")
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    converters: dict[str, Callable[[Any], Any]] = {}
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
    common = [("data", Optional[Path], DATA), ("fmt", Optional[str], FORMAT), ("limit", Optional[int], LIMIT)]
    for f in fields(cls):
        annotation, option, convert = _field_option(f, hints[f.name], docs.get(f.name, ""))
        converters[f.name] = convert
        common.append((f.name, annotation, option))
    common += [(param, annotation, option) for param, (annotation, option) in SHARED_PARAMS.items()]
    for param, annotation, option in common:
        params.append(inspect.Parameter(param, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option,
                                        annotation=annotation))

    def command(ctx: typer.Context, **values: Any) -> None:
        get_pool = _shared.get_pool  # looked up per call: tests patch agora.cli._shared.get_pool
        with _shared.user_errors("questions"):
            data, fmt_name, problems = load_benchmark(values["data"], values["fmt"], values["limit"],
                                                      values.get("seed", 0))
            config = settings(ctx, cls, values["config_file"], name,
                              {f: convert(values[f]) for f, convert in converters.items()})
            the_pool = get_pool(values["pool"])
            check(config, the_pool.names)  # a refusal names the option or --config line of its field
            the_context = context(the_pool, config)
            store, run_id, outcome = run_benchmark(
                name, problems, context=the_context, config=config, pool=the_pool, db=values["db"],
                run_id=values["run_id"], data=data, fmt_name=fmt_name, limit=values["limit"],
                label=label(config, the_pool.names), durability=values["durability"],
                concurrency=values["concurrency"])
            finish(store, run_id, outcome, len(problems), f"{title} run {run_id}", methods)

    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = f"run_{name}"
    command.__doc__ = help
    return run_app.command(name, short_help=short_help)(command)


def spec_commands() -> list[str]:
    """Register ``agora run <name>`` for every registered protocol whose spec sets ``run``
    (:class:`~agora.graphs.spec.RunCommand`) and whose command no CLI module registered already.
    Returns the names registered. Called once by :mod:`agora.cli.main`."""
    from agora.cli._apps import run_app
    from agora.graphs.registry import specs

    taken = {c.name for c in run_app.registered_commands}
    made = []
    for spec in specs():
        if spec.run is None or spec.name in taken:
            continue
        r = spec.run
        benchmark_command(
            spec.name, spec.config, context=spec.context, check=r.check or (lambda config, names: None),
            methods=spec.methods, title=r.title or spec.name, short_help=r.short_help, help=r.help,
            label=r.label or (lambda config, names: spec.name))
        made.append(spec.name)
    return made
