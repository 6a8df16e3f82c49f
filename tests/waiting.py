"""Waiting on an event rather than for a time: :func:`wait_until` polls a condition up to a
generous deadline and fails with a line naming what it waited for (and a log tail where one is
given), so a test holds on a busy machine and says why when it does not."""

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], what: str, *, timeout_s: float = 300.0,
               alive: Callable[[], bool] | None = None, log: Path | Callable[[], str] | None = None,
               interval_s: float = 0.05) -> T:
    """Call ``predicate`` until it returns a truthy value and return that value.

    ``what``: the event waited for, named in the failure message. ``timeout_s`` (seconds): the
    deadline, generous because a shared 2-core machine can be minutes slow. ``alive``: called each
    poll; once it returns False (the process waited on has exited) the wait fails at once.
    ``log``: a file path, or a callable giving text, whose last 4000 characters end the message.
    ``interval_s`` (seconds): the poll interval, which orders nothing.

    Raises ``pytest.fail`` (``Failed``) on the deadline or when ``alive`` turns False."""
    start = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value
        elapsed = time.monotonic() - start
        stopped = alive is not None and not alive()
        if stopped or elapsed > timeout_s:
            reason = "the process it depends on exited" if stopped else f"no sign of it in {timeout_s:.0f} s"
            tail = ""
            if log is not None:
                text = log() if callable(log) else (log.read_text(errors="replace") if log.is_file() else "")
                tail = f"\n--- log tail ---\n{text[-4000:]}"
            pytest.fail(f"waited {elapsed:.1f} s for {what}: {reason}{tail}", pytrace=False)
        time.sleep(interval_s)  # the poll interval
