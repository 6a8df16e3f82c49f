"""Names every product module uses are defined: pyflakes' undefined-name check over the product code.

An error path that names an exception it never imported (``raise InputError(...)`` without the
import) passes every test that does not reach it and fails as ``NameError`` in front of a user; this
catches it without running the code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pyflakes_api = pytest.importorskip("pyflakes.api")
pyflakes_messages = pytest.importorskip("pyflakes.messages")
from pyflakes.reporter import Reporter  # noqa: E402 - after the importorskip above

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("tasks", "models", "agents", "traces", "graphs", "runs", "training", "cli", "benchmarks", "examples")


class _Collect(Reporter):
    """A pyflakes reporter that keeps the messages instead of printing them."""

    def __init__(self):
        super().__init__(None, None)
        self.found: list = []

    def flake(self, message):
        self.found.append(message)

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: syntax error: {msg}")

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")


def test_no_product_module_uses_an_undefined_name():
    files = [path for layer in PRODUCT for path in sorted((ROOT / layer).rglob("*.py"))]
    assert len(files) > 100
    reporter = _Collect()
    for path in files:
        pyflakes_api.checkPath(str(path), reporter)
    bad = [str(m) for m in reporter.found
           if isinstance(m, str) or isinstance(m, pyflakes_messages.UndefinedName)]
    assert not bad, "\n".join(bad)
