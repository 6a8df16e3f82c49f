"""The shared Typer apps every command module registers on (``agora``, ``agora run``, ``report``,
``calibrate``, ``train``). Kept apart from :mod:`agora.cli.main`, which imports every command module,
so that a command imports the apps and not the module that imports it (no import cycle)."""

from __future__ import annotations

import inspect
import math
import types
import typing
from typing import Any, Callable

import typer
from typer.core import TyperGroup
from typer.models import OptionInfo
from rich.markup import escape
from typer._click import exceptions as click_errors  # typer's own click (it vendors one)

from agora.models.environment import EnvironmentVariableError, check_environment, unknown_variables


def _command_words(ctx: Any) -> str:
    """The command a usage error is about, as a user types it (``agora report runs``), whatever
    program name the root was given (a test's ``CliRunner`` calls it ``root``)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["agora", *reversed(names)])


#: Typer's shell-completion options, which ``agora`` leaves out (``add_completion=False``).
_COMPLETION_OPTIONS = ("--show-completion", "--install-completion")


def usage_error_line(exc: click_errors.UsageError) -> str:
    """Agora's one ``error:`` line for a usage error typer would show in a box of five lines: an
    unknown option or command, an extra argument, an option without its value, a value its type
    refuses. It names the command and points to its ``--help``:
    ``error: agora report runs: Got unexpected extra argument (EXTRA); see 'agora report runs --help'``."""
    from agora.cli._shared import error_line

    where = _command_words(exc.ctx)
    if isinstance(exc, click_errors.NoSuchOption) and exc.option_name in _COMPLETION_OPTIONS:
        return (f"error: {exc.option_name}: agora installs no shell completion (its commands are listed by "
                "'agora --help')")
    message = " ".join(exc.format_message().split()).rstrip(".")
    if exc.ctx is None:  # (typer's parser gives no context for an option left without its value)
        return error_line(f"error: {message}")
    return error_line(f"error: {where}: {message}; see '{where} --help'")


def name_too_long(exc: OSError) -> str | None:
    """The line that says a path's file name is too long for the file system (``ENAMETOOLONG``,
    which any command meets in ``--db``, ``--out`` or a bench's ``bench-<id>`` folder before it
    writes anything): ``error: PATH: the file name is too long (300 bytes; a file system takes at
    most 255 per name): give a shorter one`` (or the whole path's length, over 4095 bytes, or for a
    file system with a lower limit, that a name is too long for it); ``None`` for any other error.
    Control characters in the path are shown escaped (:func:`agora.cli._shared.error_line`)."""
    import errno
    import os

    from agora.cli._shared import error_line

    if exc.errno != errno.ENAMETOOLONG or exc.filename is None:
        return None
    path = os.fsdecode(exc.filename)
    longest = max((len(os.fsencode(part)) for part in path.split(os.sep)), default=0)
    if longest > 255:
        why = f"the file name is too long ({longest} bytes; a file system takes at most 255 per name)"
    elif len(os.fsencode(path)) >= 4096:
        why = f"the path is too long ({len(os.fsencode(path))} bytes; at most 4095)"
    else:
        why = "a name in it is too long for this file system"
    return error_line(f"error: {path}: {why}: give a shorter one")


class _AgoraGroup(TyperGroup):
    """The ``agora`` group: a required option or argument left out of a command is Agora's one line
    and exit 2 (``error: --tasks: required option, not given``) instead of typer's usage box, and so
    is every other usage error (:func:`usage_error_line`), of ``agora`` itself or of a command below it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click_errors.UsageError as exc:  # ``agora --bogus``: before any command is chosen
            typer.echo(usage_error_line(exc), err=True)
            raise typer.Exit(2) from None

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as exc:  # a --db, --out or report folder name the file system cannot hold
            line = name_too_long(exc)
            if line is None:
                raise
            typer.echo(line, err=True)
            raise typer.Exit(2) from None
        except click_errors.UsageError as exc:
            if type(exc).__name__ != "MissingParameter" or getattr(exc, "param", None) is None:
                typer.echo(usage_error_line(exc), err=True)
                raise typer.Exit(2) from None
            param = exc.param
            opts = [o for o in getattr(param, "opts", ()) if o.startswith("--")] or list(getattr(param, "opts", ()))
            if getattr(param, "param_type_name", "") == "argument" or not opts:
                named, kind = str(getattr(param, "metavar", None) or param.name or "argument").upper(), "argument"
            else:
                named, kind = opts[0], "option"
            typer.echo(f"error: {named}: required {kind}, not given", err=True)
            raise typer.Exit(2) from None


app = typer.Typer(help="Agora: multi-LLM protocols as LangGraph state machines on local models.", cls=_AgoraGroup,
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
run_app = typer.Typer(help="Run a protocol on a benchmark and print its method table.", no_args_is_help=True)
report_app = typer.Typer(help="Reports and plots from a trace database.", no_args_is_help=True)
calibrate_app = typer.Typer(help="Calibrate a protocol's thresholds on a dev split.", no_args_is_help=True)
train_app = typer.Typer(help="Train models from traces (DPO, GRPO) with TRL.", no_args_is_help=True)


@app.callback()
def _check_environment() -> None:
    """Every ``AGORA_*`` variable is checked before any command runs (:mod:`agora.models.environment`):
    a bad value is one line naming it and exit 2; a set one Agora does not read is a warning. Log
    lines on stderr show control characters escaped (:func:`agora.cli._shared.show_logs_visibly`)."""
    from agora.cli._shared import show_logs_visibly

    show_logs_visibly()
    for line in unknown_variables():
        typer.echo(f"warning: {line}", err=True)
    try:
        check_environment()
    except EnvironmentVariableError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


app.add_typer(run_app, name="run")
app.add_typer(report_app, name="report")
app.add_typer(calibrate_app, name="calibrate")
app.add_typer(train_app, name="train")


#: Help texts already escaped, as ``(id(obj), attribute) -> obj`` (the object kept, so its id stays its own).
_ESCAPED: dict[tuple[int, str], object] = {}


def escape_help(typer_app: typer.Typer) -> None:
    """Escape rich markup in every help text below ``typer_app`` (command docstrings and ``help=``,
    option and group help), so that Typer's rich help shows ``[moa]`` or ``[default: 64]`` as
    written instead of reading them as markup tags and dropping them. Each text is escaped once,
    however often this is called (option declarations are shared between commands); call it after
    every command is registered."""

    def once(obj: object, attr: str) -> None:
        value = getattr(obj, attr, None)
        if isinstance(value, str) and (id(obj), attr) not in _ESCAPED:
            _ESCAPED[id(obj), attr] = obj
            setattr(obj, attr, escape(value))

    once(typer_app.info, "help")
    for info in typer_app.registered_commands:
        if info.callback is None:
            continue
        if info.help is None:
            info.help = inspect.getdoc(info.callback)
        once(info, "help")
        once(info, "short_help")
        try:
            hints = typing.get_type_hints(info.callback)
        except Exception:  # noqa: BLE001 - an annotation that does not resolve: its options keep typer's parsing
            hints = {}
        for param in inspect.signature(info.callback).parameters.values():
            once(param.default, "help")
            _refuse_in_memory_db(param.default)
            _parse_finite(param.default, hints.get(param.name), param.name)
            _parse_bounded_int(param.default, hints.get(param.name), param.name)
    for group in typer_app.registered_groups:
        once(group, "help")
        if group.typer_instance is not None:
            escape_help(group.typer_instance)


#: The options naming a trace database that a command writes into or reads.
DB_OPTIONS = ("--db", "--dev-db")


def _in_memory_db(ctx: typer.Context, param: typer.CallbackParam, value: object) -> object:
    """Refuse SQLite's in-memory database ``:memory:`` as a trace database (one ``error:`` line, exit
    2): a run's traces would be gone when the command ends, and a report would read an empty one."""
    if value == ":memory:":
        typer.echo(f"error: {param.opts[0]} :memory:: SQLite's in-memory database keeps nothing once the command "
                   "ends; give a database file (e.g. agora.db) or a postgresql:// URL", err=True)
        raise typer.Exit(2)
    return value


def _refuse_in_memory_db(option: object) -> None:
    """Give ``option``, a command's ``--db`` or ``--dev-db`` declaration without a callback of its
    own, the check :func:`_in_memory_db`."""
    if isinstance(option, OptionInfo) and option.callback is None and set(option.param_decls or ()) & set(DB_OPTIONS):
        option.callback = _in_memory_db


def _bounds_text(low: float | None, high: float | None) -> str:
    """``a finite number from 0 to 1``, ``a finite number >= 0``, ``a finite number``."""
    if low is not None and high is not None:
        return f"a finite number from {low:g} to {high:g}"
    if low is not None:
        return f"a finite number >= {low:g}"
    if high is not None:
        return f"a finite number <= {high:g}"
    return "a finite number"


def _option_name(option: OptionInfo, param_name: str) -> str:
    """The name a user types for ``option`` (its first ``--long`` declaration, else typer's
    ``--param-name``)."""
    decls = [d for d in (option.param_decls or ()) if d.startswith("--")]
    return decls[0] if decls else "--" + param_name.replace("_", "-")


def finite_float(low: float | None = None, high: float | None = None,
                 name: str | None = None) -> Callable[[Any], float | None]:
    """A ``parser=`` for a float option: the value as a float in ``[low, high]`` (``None``: unbounded
    on that side), NaN and infinities refused whatever the bounds (typer's own check let ``nan``
    through a range, or answered ``Input should be greater than or equal to 0`` without saying that
    NaN was the problem).

    With ``name`` (the option, e.g. ``--lambda``) a refused value is Agora's one line on stderr and
    exit 2 (``error: --lambda: must be a finite number, got nan``) instead of typer's usage box.

    Raises:
        typer.BadParameter: without ``name``: ``must be a finite number from 0 to 1, got nan``.
        typer.Exit: with ``name``, after the ``error:`` line.
    """
    want = _bounds_text(low, high)

    def refuse(value: Any) -> typer.BadParameter | typer.Exit:
        try:
            float(value)
            shown = str(value).strip()
        except (TypeError, ValueError):
            shown = repr(value)
        message = f"must be {want}, got {shown}"
        if name is None:
            return typer.BadParameter(message)
        typer.echo(f"error: {name}: {message}", err=True)
        return typer.Exit(2)

    def parse(value: Any) -> float | None:
        if value is None:
            return None
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise refuse(value) from None
        if not math.isfinite(x) or (low is not None and x < low) or (high is not None and x > high):
            raise refuse(value)
        return x

    return parse


def _parse_finite(option: object, annotation: Any, param_name: str) -> None:
    """Give ``option``, a ``float`` (or ``Optional[float]``) option declaration without a parser of its
    own, :func:`finite_float` with its ``min``, ``max`` and name."""
    if not isinstance(option, OptionInfo) or option.parser is not None:
        return
    optional_float = (typing.get_origin(annotation) in (typing.Union, types.UnionType)
                      and set(typing.get_args(annotation)) == {float, type(None)})
    if annotation is not float and not optional_float:
        return
    option.parser = finite_float(option.min, option.max, _option_name(option, param_name))
    option.metavar = option.metavar or "FLOAT"


def _int_bounds_text(low: int | None, high: int | None) -> str:
    """``at least 1``, ``at most 3``, ``an integer from 1 to 8192``, ``an integer``."""
    if low is not None and high is not None:
        return f"an integer from {low} to {high}"
    if low is not None:
        return f"at least {low}"
    if high is not None:
        return f"at most {high}"
    return "an integer"


#: The most characters of a refused value an ``error:`` line quotes (a 5000-digit number stays readable).
_SHOWN_CHARS = 40


def bounded_int(low: int | None = None, high: int | None = None,
                name: str | None = None) -> Callable[[Any], int | None]:
    """A ``parser=`` for an integer option: the value (ASCII digits, an optional sign, surrounding
    spaces) as an ``int`` in ``[low, high]`` (``None``: unbounded on that side).

    With ``name`` (the option, e.g. ``--limit``) a refused value is Agora's one line on stderr and
    exit 2 (``error: --limit: must be at least 1, got 0``; ``error: --limit: must be an integer,
    got 'two'``) instead of typer's usage box. Only ASCII digits are read: Python's ``int`` would take
    ``'1_000'`` and Arabic-Indic digits, which a shell user did not mean to type; a full-width digit
    or a minus sign from a word processor (U+2212) is refused, saying so.

    Raises:
        typer.BadParameter: without ``name``: ``must be at least 1, got 0``.
        typer.Exit: with ``name``, after the ``error:`` line.
    """
    want = _int_bounds_text(low, high)

    def refuse(message: str) -> typer.BadParameter | typer.Exit:
        if name is None:
            return typer.BadParameter(message)
        from agora.cli._shared import error_line

        typer.echo(error_line(f"error: {name}: {message}"), err=True)
        return typer.Exit(2)

    def shown(text: str) -> str:
        return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}... ({len(text)} characters)"

    def parse(value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value)
            core = text.strip()
            digits = core[1:] if core[:1] in "+-" else core
            if not (digits and digits.isascii() and digits.isdigit()):
                odd = next((c for c in core if not c.isascii()), None)
                hint = ""
                if odd is not None:
                    import unicodedata

                    hint = f" (it holds {unicodedata.name(odd, f'U+{ord(odd):04X}')}; type ASCII digits and '-')"
                raise refuse(f"must be an integer, got {shown(text)!r}{hint}")
            try:
                number = int(core)
            except ValueError:  # more digits than Python converts (4300)
                raise refuse(f"must be {want}, got {shown(core)}") from None
        if (low is not None and number < low) or (high is not None and number > high):
            raise refuse(f"must be {want}, got {shown(str(number))}")
        return number

    return parse


def _parse_bounded_int(option: object, annotation: Any, param_name: str) -> None:
    """Give ``option``, an ``int`` (or ``Optional[int]``) option declaration without a parser of its
    own, :func:`bounded_int` with its ``min``, ``max`` and name."""
    if not isinstance(option, OptionInfo) or option.parser is not None or getattr(option, "click_type", None) is not None:
        return
    optional_int = (typing.get_origin(annotation) in (typing.Union, types.UnionType)
                    and set(typing.get_args(annotation)) == {int, type(None)})
    if annotation is not int and not optional_int:
        return
    option.parser = bounded_int(option.min, option.max, _option_name(option, param_name))
    option.metavar = option.metavar or "INTEGER"
