"""Trace bundles: one or more runs (or a whole bench) as one compressed, versioned file that any trace
database can import (``agora export`` / ``agora import``; format: ``docs/traces.md``).

A bundle is gzip-compressed JSON Lines (``*.agora.jsonl.gz``; under a name not ending in ``.gz``, the
same lines as plain text, :func:`agora.traces.bundle_export.compressed`):

1. a header object: ``format`` (:data:`FORMAT`), ``version`` (:data:`VERSION`), ``created_at``,
   ``code_revision`` (of the exporting tree), ``runs`` (run ids), ``benches`` (bench ids), and
   ``tables``: per table its ``columns`` (name → SQLite type, in row order) and ``primary_key``;
2. one line per row: ``{"t": table, "v": [values in the header's column order]}``, tables in the
   header's order (``runs`` first), rows in their database order (model calls keep their call
   order, which sample indices and "first call" readers rely on);
3. a footer ``{"end": true, "rows": {table: count}, "sha256": hex, "header_sha256": hex}``: an import
   without it, or with other counts, is a truncated file and writes nothing; ``sha256``
   (:data:`DIGEST_KEY`) is the SHA-256 of the row lines and ``header_sha256``
   (:data:`HEADER_DIGEST_KEY`) that of the header line, and an import whose rows or header give
   another writes nothing either (a line altered or damaged since export, though it still parses: a
   run id, a table's column order). A footer without one of them (a bundle written before bundles
   carried it) leaves that part unchecked, as before.

Tables: the core ones (:data:`agora.traces.schema.TABLES`) and every other table with a ``run_id``
column and a primary key (duels, reputation and leader snapshots, preference pairs, ...), each
restricted to the bundle's runs; with a bench, its ``benches`` and ``bench_cells`` rows. The gzip
header carries no time stamp or file name (only the JSON header's ``created_at`` differs between two
exports of the same rows).

Import (:func:`agora.traces.bundle_import.import_bundle`) inserts rows whose primary key is new and
skips identical ones, in one transaction: importing a bundle twice adds nothing. Refused, writing
nothing: a row whose key exists with other content and a new row for a run already there (both unless
``force``: the bundle's rows win), a run id that already exists as another run (other protocol, start
time or settings) rather than mixed, and orphan ``results`` or ``model_calls`` rows (a question the
bundle's ``questions`` lack for that run; a failed question's calls are not orphans). Before the
database is touched, the whole bundle is checked (:func:`agora.traces.bundle_reading.check_bundle`):
each row's table, shape and value types (:data:`agora.traces.bundle_schema.SCHEMA_TYPES`), its run among
the header's, and no key given two contents.

Export carries along the shared candidates run of a bench run that took its samples from one
(:data:`SHARED_CANDIDATES_KEY`).

This module holds the format (its constants, :class:`BundleError`, :class:`BundleSummary`); writing
is :mod:`agora.traces.bundle_export`, reading and checking a file :mod:`agora.traces.bundle_reading`,
the table schemas rows are checked against :mod:`agora.traces.bundle_schema`, loading into a store
:mod:`agora.traces.bundle_import`.
"""


from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field
from pathlib import Path

from agora.tasks.errors import InputError
from agora.traces.store import TraceStore

FORMAT = "agora-trace-bundle"
VERSION = 1
"""Bundle format version; an importer reads versions up to its own and refuses newer ones."""
SUFFIX = ".agora.jsonl.gz"
DIGEST_KEY = "sha256"
"""The footer's key for the SHA-256 (hex) of the row lines: every line between header and footer, in
file order, as UTF-8 text ending in its newline (``"\\n"``)."""
HEADER_DIGEST_KEY = "header_sha256"
"""The footer's key for the SHA-256 (hex) of the header line (line 1, as UTF-8 text ending in its
newline). Kept apart from :data:`DIGEST_KEY` so that the rows' checksum means what it always meant:
bundles written before it existed import as they did, and an older Agora still reads newer bundles."""
BENCH_TABLES = ("benches", "bench_cells")
SHARED_CANDIDATES_KEY = "shared_candidates"
"""The key of a run's recorded settings (``runs.config``) naming the run it took its shared candidate
samples from (:data:`agora.runs.shared.SHARED_KEY`; spelled here because traces may not import runs):
an export of that run carries the candidates run along."""

FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class BundleError(InputError):
    """A bundle that cannot be written or read; the message names the file and what is wrong."""


@dataclass(frozen=True, slots=True)
class BundleSummary:
    path: Path
    runs: tuple[str, ...]
    benches: tuple[str, ...]
    rows: dict[str, int]
    """Rows written (export) or added (import) per table."""
    bytes: int
    """Size of the bundle file."""
    skipped: int = 0
    """Rows already in the database with the same content (import; not counting :attr:`repeated`)."""
    replaced: int = 0
    """Rows whose primary key existed with other content, replaced by the bundle's (import ``force``)."""
    carried: dict[str, str] = field(default_factory=dict)
    """Export: runs added because a requested run took its shared candidates from them (candidates
    run → the run that named it in its settings, :data:`SHARED_CANDIDATES_KEY`)."""
    repeated: int = 0
    """Import: rows the bundle holds more than once, identically (its second and later copies); skipped."""
    missing_shared: dict[str, str] = field(default_factory=dict)
    """Import: runs of the bundle that took shared candidates from a run that is neither in the bundle
    nor in the database (run → its candidates run). They are imported, but their report and replay
    are refused (:func:`agora.traces.shared_candidates.shared_takes`) until that run is imported too."""


def shared_source(store: TraceStore, run_id: str) -> str | None:
    """The candidates run whose samples ``run_id`` took (its config's :data:`SHARED_CANDIDATES_KEY`), or None."""
    config = (store.get_run(run_id) or {}).get("config")
    try:
        config = json.loads(config) if isinstance(config, str) else config
    except json.JSONDecodeError:
        return None
    source = config.get(SHARED_CANDIDATES_KEY) if isinstance(config, dict) else None
    return source if isinstance(source, str) and source else None
