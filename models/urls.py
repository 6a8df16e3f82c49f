"""URLs as messages show them: a URL's password (``user:PASSWORD@``, ``?password=``) never printed
or logged. Used for a model server's base URL (``models``) and a Postgres trace store's URL (``traces``)."""

from __future__ import annotations

import re


def shown_url(url: str) -> str:
    """``url`` with its password (``user:PASSWORD@``, ``?password=``) shown as ``***``, for messages,
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
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    tail = re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", tail)
    return f"{scheme}{sep}{netloc}{tail}"
