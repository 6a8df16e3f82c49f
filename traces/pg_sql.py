"""SQLite-flavoured SQL and values as Postgres takes them, for
:class:`agora.traces.pg_database.PostgresDatabase`: the statement's dialect (:func:`to_postgres`),
the values written (:func:`_stored`, :func:`_storable`) and read back (:func:`_row`), and the URL
helpers: a driver's message without the password (:func:`without_password`), a ``--db`` value as a
printed command gives it (:func:`db_argument`, for every command a message suggests)."""

from __future__ import annotations

import logging
import re
import shlex
from decimal import Decimal
from typing import Any, Sequence
from urllib.parse import unquote, urlsplit

from agora.models.urls import shown_url, url_password
from agora.tasks.errors import InputError
from agora.traces.rows import _json

log = logging.getLogger(__name__)

#: URL schemes that open a Postgres store.
SCHEMES = ("postgresql", "postgres")


def is_postgres_url(path: Any) -> bool:
    """Whether ``path`` (a ``--db`` value) names a Postgres database (``postgresql://`` or ``postgres://``)."""
    return isinstance(path, str) and path.split("://", 1)[0].lower() in SCHEMES and "://" in path


#: What follows a printed command whose Postgres URL had a password (:func:`db_argument`).
PASSWORD_NOTE = "(the password is left out: set PGPASSWORD, or a ~/.pgpass line, to give it)"


def db_argument(db: Any) -> tuple[str, str]:
    """``db`` (a ``--db`` value: a SQLite path or a Postgres URL) as a printed command's ``--db``
    argument (shell-quoted), and a note to print after the command (``""`` when none is needed).

    A Postgres URL with a password (``user:PASSWORD@``, ``?password=``) is given without it, as
    ``psql`` users expect: libpq, which opens the URL, reads the password from ``PGPASSWORD`` or
    ``~/.pgpass``, and the note says so. The command then connects once the password is set there,
    and a command copied into a log or a chat does not carry it (``***`` in its place would not
    connect). Any other value is given as it is."""
    url = str(db)
    if not is_postgres_url(url):
        return shlex.quote(url), ""
    bare = bare_url(url)
    if bare == url:
        return shlex.quote(url), ""
    return shlex.quote(bare), PASSWORD_NOTE


def bare_url(url: str) -> str:
    """The Postgres URL ``url`` without its password (``user:PASSWORD@``, ``?password=``)."""
    scheme, sep, rest = url.partition("://")
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{host}"
    path, qsep, query = tail.partition("?")
    query, hsep, fragment = query.partition("#")
    kept = [part for part in query.split("&") if not part.lower().startswith("password=")] if qsep else []
    tail = path + ("?" + "&".join(kept) if any(kept) else "") + hsep + fragment
    return f"{scheme}{sep}{netloc}{tail}"


def without_password(text: str, url: str) -> str:
    """``text`` (a driver's message about ``url``) with ``url``'s password left out: the URL itself
    shown as :func:`~agora.models.urls.shown_url` does, and the password, as written and percent-decoded, as ``***``
    where the message quotes it as a password: a quoted token (``"p%40ss"``: libpq quotes a token
    it cannot decode), ``user:PASSWORD@`` or ``password=PASSWORD``. Elsewhere the same characters
    are the message's own (a password ``5432`` leaves ``port 5432`` alone). Never raises."""
    text = text.replace(url, shown_url(url))
    _, sep, rest = url.partition("://")
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    secrets = re.findall(r"(?i)[?&]password=([^&#]*)", tail)
    if sep and "@" in netloc and ":" in netloc.rsplit("@", 1)[0]:
        secrets.append(netloc.rsplit("@", 1)[0].split(":", 1)[1])
    password = url_password(url)
    if password:  # written with a reserved character unencoded: the parts libpq may read apart too
        secrets += [password, *re.split(r"[@/?#]", password)]
    for secret in list(secrets):
        secrets.append(unquote(secret))
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        s = re.escape(secret)
        text = re.sub(rf"([\"']){s}\1", r"\1***\1", text)
        text = re.sub(rf"(:){s}(@)", r"\1***\2", text)
        text = re.sub(rf"(?i)(password\s*=\s*){s}(?=[\s&#'\";,)]|$)", r"\1***", text)
    return text


def check_url(url: str) -> None:
    """Raise ``ValueError`` (one line: the URL without its password and what is wrong) when ``url``
    does not parse as a URL: an IPv6 host without its ``]``, a port that is not a number in 0-65535."""
    try:
        parts = urlsplit(url)
        parts.port  # the port is parsed on access
    except ValueError as exc:
        hint = "; an IPv6 host goes in brackets: postgresql://user@[::1]:5432/db" if "IPv6" in str(exc) else ""
        raise InputError(f"{shown_url(url)}: not a valid Postgres URL ({exc}){hint}") from None
    # libpq decodes the %-escapes of each part as UTF-8 text; one that is not (%C3 alone, %FF) would fail
    # later as a bare codec error naming nothing
    for field, raw in (("user name", parts.username), ("password", parts.password), ("database name", parts.path),
                       ("query", parts.query)):
        try:
            unquote(raw or "", errors="strict")
        except UnicodeDecodeError:
            raise InputError(f"{shown_url(url)}: the {field}'s %-escapes do not decode as UTF-8 text; write it in "
                             "UTF-8 with each byte %-encoded (e.g. é as %C3%A9)") from None



_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"])*\"|\[[A-Za-z_][A-Za-z0-9_ ]*\]|\?|%")


_PRAGMA_TABLE_INFO = re.compile(r"\s*PRAGMA\s+table_info\(\[?([A-Za-z_][A-Za-z0-9_]*)\]?\)\s*$", re.I)
_CREATE_TABLE = re.compile(r"\s*CREATE\s+TABLE\s", re.I)
_INSERT_OR_IGNORE = re.compile(r"^(\s*)INSERT\s+OR\s+IGNORE\s+INTO\s(.*?)(;?\s*)$", re.I | re.S)


def to_postgres(sql: str, with_params: bool = True) -> str:
    """SQLite-flavoured SQL as Postgres reads it: ``?`` → ``%s``, ``[name]`` → ``"name"``, a literal
    ``%`` doubled when parameters are passed; string literals are left alone.

    >>> to_postgres("select [a] from t where b = ? and c like 'x%?'")
    'select "a" from t where b = %s and c like \\'x%%?\\''
    """
    def sub(m: re.Match[str]) -> str:
        tok = m.group()
        if tok == "?":
            return "%s"
        if tok == "%":
            return "%%" if with_params else "%"
        if tok.startswith("["):
            return '"' + tok[1:-1] + '"'
        if tok.startswith("'") and with_params:
            return tok.replace("%", "%%")
        return tok

    out = _TOKEN.sub(sub, sql)
    ignore = _INSERT_OR_IGNORE.match(out)
    if ignore:  # SQLite's INSERT OR IGNORE: a row whose key exists is skipped
        out = f"{ignore.group(1)}INSERT INTO {ignore.group(2)} ON CONFLICT DO NOTHING"
    return out


def _value(v: Any) -> Any:
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, memoryview):
        return bytes(v)
    return v


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {k: _value(v) for k, v in r.items() if k != "rowid"}


def _storable(v: Any) -> Any:
    """``v`` as Postgres can store it where SQLite stores it as is: a NUL character (which Postgres
    text refuses) as U+FFFD, an integer beyond 64 bits as ``None`` (SQLite's store makes the same
    one NULL), each with a logged warning (the rest of the row is kept)."""
    if isinstance(v, str):
        if "\x00" in v:
            log.warning("a NUL character (which Postgres text cannot hold) recorded as U+FFFD")
            return v.replace("\x00", "\ufffd")
        return v
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v <= 2**63 - 1:
        log.warning("an integer beyond 64 bits (%.3g) recorded as NULL", float(v))
        return None
    return v


def _stored(v: Any) -> Any:
    """A value as sqlite-utils stores it: lists and dicts as JSON text, booleans as 0/1; then
    :func:`_storable`."""
    if isinstance(v, (dict, list, tuple)):
        return _storable(_json(v))
    if isinstance(v, bool):
        return int(v)
    return _storable(v)



def _params(params: Sequence[Any] | dict | None) -> Any:
    if params is None:
        return None
    if isinstance(params, dict):
        return {k: _storable(v) for k, v in params.items()}
    return [_storable(v) for v in params]  # (lists stay lists: ``= ANY(?)``)
