"""URLs as messages show them: a URL's password (``user:PASSWORD@``, ``?password=``, ``?api_key=``) never printed
or logged. Used for a model server's base URL (``models``) and a Postgres trace store's URL (``traces``)."""

from __future__ import annotations

import re


#: A query parameter whose name says it holds a secret (``?password=``, ``?api_key=``, ``&access_token=``,
#: ``&sig=``): its value is shown as ``***``.
_SECRET_PARAMETER = re.compile(r"(?i)([?&][^=&#]*(?:password|passwd|key|token|secret|auth|credential|sig)[^=&#]*=)[^&#]*")


def shown_url(url: str) -> str:
    """``url`` with its password (``user:PASSWORD@``, ``?password=``, or a query parameter named as a
    key, token or secret: ``?api_key=``) shown as ``***``, for messages,
    logs and the ``runs`` table's readers; a URL without one is returned as it is. Never raises: a
    URL that does not parse (``[::1/db``, a port out of range) is redacted as libpq splits it (the
    user part ends at the last ``@`` before the first ``/?#``).

    >>> shown_url("postgresql://ann:secret@db.example/agora?sslmode=require")
    'postgresql://ann:***@db.example/agora?sslmode=require'
    >>> shown_url("http://127.0.0.1:8000/v1")
    'http://127.0.0.1:8000/v1'
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    password = url_password(url)
    if password is not None:  # user:PASSWORD@: the password, reserved characters and all, as ***
        user, _, after = rest.partition(":")
        rest = f"{user}:***{after[len(password):]}"
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    tail = _SECRET_PARAMETER.sub(r"\1***", tail)
    return f"{scheme}{sep}{netloc}{tail}"


def url_password(url: str) -> str | None:
    """The password written in ``url``'s ``user:PASSWORD@`` part as typed (percent-encoded or not),
    ``None`` when it has none. A password holding a character a URL reserves, left unencoded
    (``u:p/ss@host``, ``u:p@ss@host``, ``u:p#ss@host``), is read whole: up to the last ``@`` of the
    URL once the user name (up to the first ``:``, holding none of ``/?#@``) has one; a URL with a
    password and an ``@`` in its query too (``?application_name=a@b``) so has more read as its
    password, never less. ``host:5432/db?x=a@b`` has none. Never raises."""
    _, sep, rest = url.partition("://")
    user, colon, after = rest.partition(":")
    if not sep or not colon or any(c in user for c in "/?#@"):
        return None
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    if "@" not in after or "@" not in rest[:cut] and after[:cut - len(user) - 1].isdigit():
        return None  # no user part; or host:port, an @ further on (a query's application_name=a@b)
    return after[:after.rindex("@")]
