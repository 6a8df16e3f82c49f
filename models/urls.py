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
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    tail = _SECRET_PARAMETER.sub(r"\1***", tail)
    return f"{scheme}{sep}{netloc}{tail}"
