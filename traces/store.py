"""SQLite trace store on sqlite-utils (schema: :mod:`agora.traces.schema`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import re
import sqlite3
import subprocess
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import sqlite_utils

try:  # POSIX: a run id's live-run lock (TraceStore.run_lock); elsewhere runs are not locked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from agora.tasks.answers import find_answer
from agora.traces import schema


#: Seconds a write waits for a lock held by another connection or process (SQLite's busy
#: timeout) before it fails with "database is locked".
BUSY_TIMEOUT_S = 30.0

#: ``pool`` fields that say how a model is reached, not which model answers: a resumed run may
#: change them (a server restarted on another port), unlike any other field of the pool.
TRANSPORT_FIELDS = ("base_url", "endpoints", "timeout_s", "max_retries", "api_key")
#: The same for a member's ``options`` and a ``langchain`` member's ``options.kwargs`` (the LangChain
#: class's own names for its endpoint, credentials, client and timeouts: ``ChatOpenAI``,
#: ``ChatOllama``, ``ChatAnthropic``...): the same model served elsewhere gives the same samples.
TRANSPORT_KWARGS = frozenset(TRANSPORT_FIELDS) | {
    "openai_api_base", "api_base", "endpoint", "endpoint_url", "azure_endpoint", "anthropic_api_url",
    "openai_api_key", "anthropic_api_key", "google_api_key", "timeout", "request_timeout",
    "default_request_timeout", "http_client", "http_async_client", "default_headers", "default_query",
    "client_kwargs", "async_client_kwargs", "sync_client_kwargs", "openai_proxy", "proxy", "keep_alive",
    "organization", "openai_organization"}


log = logging.getLogger(__name__)


class TraceStoreError(ValueError):
    """A trace database (or its checkpoints file) that cannot be opened or written; the message is
    one line naming the file and what is wrong."""


class RunLockedError(TraceStoreError):
    """The run id is being run by another live process (or thread) on the same trace database
    (:meth:`TraceStore.run_lock`); the message names its pid and host."""


class ResumeRefusedError(ValueError):
    """A rerun of a run id with other options than the run was started with
    (:meth:`TraceStore.start_run`); the message names each setting that differs."""


def describe_sqlite_error(path: str | Path, exc: BaseException) -> str:
    """One line for an SQLite (or file-system) error on the database ``path``."""
    msg = str(exc)
    low = msg.lower()
    if "disk is full" in low or isinstance(exc, OSError) and exc.errno == 28:  # SQLITE_FULL, ENOSPC
        return (f"{path}: the disk is full ({msg}); free some space, then rerun with the same --run-id to "
                "resume (what was recorded is kept)")
    if "disk i/o error" in low:  # SQLITE_IOERR: a write refused (a file-size limit, a full or failing device)
        return (f"{path}: a disk I/O error ({msg}: a full disk or file-size limit, or a failing device); fix it, then "
                "rerun with the same --run-id to resume (what was recorded is kept)")
    if "locked" in low or "busy" in low:
        return (f"{path}: the database is locked by another process (waited {BUSY_TIMEOUT_S:g} s); "
                "try again once it is done")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return f"{path}: not an SQLite database, or a corrupt one ({msg})"
    if "readonly" in low or "read-only" in low or isinstance(exc, PermissionError):
        return f"{path}: not writable ({msg})"
    if "unable to open" in low:
        return f"{path}: cannot open the database file (does its folder exist, and is it writable?)"
    return f"{path}: {msg}"


def check_db_path(path: str | Path) -> None:
    """Refuse a database path that is a folder or not a regular file (``/dev/null``) before SQLite
    opens it.

    Raises:
        TraceStoreError: naming the path.
    """
    p = Path(path)
    if p.is_dir():
        raise TraceStoreError(f"{path}: is a folder, not a database file")
    if p.exists() and not p.is_file():
        raise TraceStoreError(f"{path}: not a regular file (a database needs one)")


#: Tables Agora writes besides the core ones (:data:`agora.traces.schema.TABLES`): a database that
#: holds only these (and SQLite's own) is Agora's; any other table without the core ones marks a
#: database of another tool, which a writable store refuses to touch (:func:`schema_problem`).
OWN_TABLES = frozenset({"duels", "reputation_snapshots", "leader_snapshots", "preference_pairs", "benches",
                        "bench_cells"})


def schema_problem(conn: sqlite3.Connection) -> str | None:
    """Why an existing SQLite database cannot take Agora's traces, as one phrase, or ``None``.

    Read-only (``sqlite_master`` and ``PRAGMA table_info``), against the declared schema
    (:data:`agora.traces.schema.TABLES`, ``PRIMARY_KEYS``), so a column added there is checked
    without changing this function. Accepted: an empty database; core tables with Agora's primary
    key that lack columns (an older Agora's database, e.g. without those of ``ADDED_COLUMNS``: the
    store adds them, every Agora column being nullable, NULL in old rows); extra columns that are
    nullable or have a default (a newer Agora's, whose rows this one writes without them).
    Refused: tables of another tool and none of Agora's; a core table that is a view; a core table
    with another primary key, or with an extra ``NOT NULL`` column without a default (an insert
    would fail after the first question's work).
    """
    objects = {name: kind for kind, name in conn.execute(
        "select type, name from sqlite_master where type in ('table', 'view')")}
    core = [t for t in schema.TABLES if t in objects]
    if not core:
        foreign = sorted(n for n in objects if not n.startswith("sqlite_") and n not in OWN_TABLES)
        if foreign:
            shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
            return f"not an Agora trace database (it holds {shown}, and no runs table); give --db a new file"
        return None
    for table in core:
        if objects[table] != "table":
            return f"{table} is a {objects[table]}, not a table: not a trace database Agora can write"
        info = conn.execute(f"PRAGMA table_info([{table}])").fetchall()  # cid, name, type, notnull, default, pk
        have = {r[1]: r for r in info}
        pk = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
        want = schema.PRIMARY_KEYS[table]
        if pk != want:
            return (f"table {table} has primary key ({', '.join(pk) or 'none'}), Agora's has ({', '.join(want)}): "
                    "a database of another tool or version; give --db a new file")
        required = [n for n, r in have.items() if n not in schema.TABLES[table] and r[3] and r[4] is None and not r[5]]
        if required:
            return (f"table {table} has NOT NULL column(s) {', '.join(required)} without a default, which this "
                    "Agora does not write (a database of a newer version?); upgrade Agora or give --db a new file")
    return None


def readonly_uri(path: str | Path) -> str:
    """The SQLite URI that opens ``path`` for reading without creating anything beside it.

    ``?mode=ro`` alone is not enough for a database in WAL mode: SQLite then creates its ``-shm``
    and ``-wal`` files and, being read-only, cannot remove them on close. When the file is in WAL
    mode (header byte 18 is 2) and no ``-wal`` file exists (no connection has it open and every
    commit is in the main file), ``immutable=1`` is added, so SQLite reads the main file alone. A
    writer that opens it during the read is not seen (a report of a run that starts meanwhile
    shows it as it was). With a ``-wal`` file present (a live run) the normal read-only open is
    used and reads that run's latest commits.
    """
    p = Path(path).resolve()
    uri = f"{p.as_uri()}?mode=ro"
    try:
        with open(p, "rb") as f:
            header = f.read(20)
    except OSError:
        return uri
    wal_mode = len(header) == 20 and header[:16] == b"SQLite format 3\x00" and header[18] == 2
    if wal_mode and not Path(f"{p}-wal").exists():
        uri += "&immutable=1"
    return uri


def check_schema(path: str | Path) -> None:
    """Refuse an existing database that cannot take Agora's traces (:func:`schema_problem`) before
    anything is written to it: it is opened read-only, so its journal mode, tables and columns are
    left as they were. A missing or empty file passes (the store creates the schema).

    Raises:
        TraceStoreError: naming the file and the problem.
    """
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return
    try:
        conn = sqlite3.connect(readonly_uri(p), uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            problem = schema_problem(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise TraceStoreError(describe_sqlite_error(path, exc)) from None
    if problem:
        raise TraceStoreError(f"{path}: {problem} (nothing was written to it)")


#: Characters a run id may not hold: C0/C1 control characters (a bell, a newline, an escape),
#: line and paragraph separators, and lone surrogates; they hide in terminals, logs and file names.
_RUN_ID_BAD = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def check_run_id(run_id: Any, option: str = "--run-id") -> str:
    """``run_id`` if it is a usable run id, else a one-line refusal naming ``option``: the one check
    every command that takes a run id (``--run-id``, ``--thread``, ``--dev-run-id``, a bundle's
    runs) and :meth:`TraceStore.start_run` apply, before anything is created.

    Refused: a non-string, an empty or blank id, leading or trailing white space, and control
    characters (:data:`_RUN_ID_BAD`, shown escaped in the message).

    Raises:
        ValueError: naming ``option`` and the id as Python writes it (``'a\\x07b'``).
    """
    if not isinstance(run_id, str):
        raise ValueError(f"{option}: a run id is text, got {run_id!r}")
    if not run_id.strip():
        raise ValueError(f"{option} {run_id!r}: a blank run id; give a name (letters, digits, - _ : . …)")
    bad = _RUN_ID_BAD.search(run_id)
    if bad:
        raise ValueError(f"{option} {run_id!r}: holds the control character {bad.group()!r} at position "
                         f"{bad.start()}; run ids are printed and written to files, so use visible characters")
    if run_id != run_id.strip():
        raise ValueError(f"{option} {run_id!r}: leading or trailing white space in a run id; remove it")
    return run_id


def lock_path(db_path: str | Path, run_id: str) -> Path:
    """The live-run lock file of ``run_id`` on the trace database ``db_path``:
    ``<db>.locks/<sha256 of the run id>.lock`` (any run id gives a safe, distinct file name)."""
    p = Path(db_path)
    digest = hashlib.sha256(str(run_id).encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return p.with_name(p.name + ".locks") / f"{digest}.lock"


@contextlib.contextmanager
def run_lock(db_path: str | Path, run_id: str) -> Iterator[None]:
    """Hold the live-run lock of ``run_id`` on the database ``db_path`` while the block runs.

    An exclusive ``flock`` on :func:`lock_path`, taken without waiting: the kernel releases it when
    the holder ends however it ends (``kill -9`` included), so a lock left by a dead process is
    simply taken over; the file holds the holder's pid, host and start time for the refusal
    message. Two threads of one process are refused as two processes are (a lock belongs to an
    open file). The file is removed when the block ends. Taken once per run, not per step.
    ``":memory:"`` databases and systems without ``fcntl`` (Windows) are not locked.

    Raises:
        RunLockedError: another live process (or thread) holds the lock; names its pid and host.
        TraceStoreError: the lock folder cannot be created.
    """
    if str(db_path) == ":memory:" or fcntl is None:
        yield
        return
    path = lock_path(db_path, run_id)
    while True:
        try:
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # the folder was removed by a holder releasing its lock: again
            continue
        except OSError as exc:
            raise TraceStoreError(f"{path.parent}: cannot create the run lock ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").split("\n")
            os.close(fd)
            who = (f"pid {holder[0]} on {holder[1]}, since {holder[2]}" if len(holder) >= 3 and holder[0]
                   else "a process that is starting")
            raise RunLockedError(f"run id {run_id!r} is being run by another process ({who}) on {db_path}; wait "
                                 "for it to end (or stop it), or pick a new --run-id") from None
        try:  # the file may have been unlinked by its last holder between our open and flock: retry
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{platform.node()}\n{now()}\n{run_id}\n".encode("utf-8", "replace"), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)  # releases the flock
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # when no other run holds a lock there


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def code_revision() -> str:
    """The git commit of the installed source tree, else the package version."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5, check=False)
        if out.returncode == 0 and out.stdout.strip():
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                   capture_output=True, text=True, timeout=5, check=False).stdout.strip()
            return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "agora-llm " + version("agora-llm")
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"


class _LockedDatabase(sqlite_utils.Database):
    """A :class:`sqlite_utils.Database` whose :meth:`query` and :meth:`execute` hold the store's lock.

    The store's one connection is shared by the threads of the questions in flight. sqlite-utils runs
    every ``query`` inside a savepoint of one fixed name (``sqlite_utils_query``) and commits after an
    ``execute`` that found no transaction open; two threads doing either at once on one connection
    release each other's savepoint ("no such savepoint: sqlite_utils_query", which stopped a bench
    with 8 questions in flight) or commit another thread's half-written transaction. The lock is the
    store's own re-entrant lock, so a store method that already holds it (its writes) goes on. Rows of
    a ``query`` are still read lazily, after the lock is let go (one SQLite connection serialises its
    statements itself)."""

    def __init__(self, *args: Any, lock: threading.RLock, **kwargs: Any):
        self.lock = lock  # (before sqlite-utils' own __init__, which already executes statements)
        super().__init__(*args, **kwargs)

    def query(self, *args: Any, **kwargs: Any):  # noqa: D102 - as sqlite_utils.Database.query
        with self.lock:
            return super().query(*args, **kwargs)

    def execute(self, *args: Any, **kwargs: Any):  # noqa: D102 - as sqlite_utils.Database.execute
        with self.lock:
            return super().execute(*args, **kwargs)


class TraceStore:
    """The trace database. Thread-safe in one process: one re-entrant lock around its writes and
    around every ``db.query``/``db.execute`` on its shared connection (:class:`_LockedDatabase`).

    Args:
        path: SQLite file (created with its tables if missing). ``":memory:"`` for tests.
        readonly: open an existing file for reading only: nothing is created or written, not
            even the schema (reports).

    Raises:
        TraceStoreError: the path is a folder or not a regular file, not an SQLite database (or a
            corrupt one), cannot be created or written, stays locked by another process for
            :data:`BUSY_TIMEOUT_S`, or (``readonly``) does not exist.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = str(path)
        self.readonly = readonly
        self._lock = threading.RLock()
        if self.path == ":memory:":
            self.db = _LockedDatabase(memory=True, lock=self._lock)
            self._create()
            return
        check_db_path(self.path)
        try:
            self.db = self._open()
        except (sqlite3.Error, OSError) as exc:
            raise TraceStoreError(describe_sqlite_error(self.path, exc)) from None

    def _open(self) -> sqlite_utils.Database:
        if self.readonly:
            if not Path(self.path).is_file():
                raise TraceStoreError(f"{self.path}: no such trace database")
            conn = sqlite3.connect(readonly_uri(self.path), uri=True,
                                   timeout=BUSY_TIMEOUT_S, check_same_thread=False)
            conn.execute("select count(*) from sqlite_master").fetchone()  # not a database: fails here
            return _LockedDatabase(conn, lock=self._lock)
        check_schema(self.path)  # read-only: a database of another tool or version is left untouched
        parent = Path(self.path).parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceStoreError(f"{self.path}: cannot create its folder {parent} ({exc.strerror})") from None
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        db = _LockedDatabase(conn, lock=self._lock)
        # WAL without an fsync per commit, as the runner's checkpointer (runner.open_checkpointer):
        # ≈ 0.5 ms less per recorded question here. A crashed process loses nothing; a crashed
        # OS at most the last questions, which the rerun redoes (their checkpoints or a fresh run).
        db.enable_wal()
        db.execute("PRAGMA synchronous=NORMAL")
        self.db = db
        self._create()
        return db

    def _create(self) -> None:
        db = self.db
        db["runs"].create(schema.RUNS, pk="run_id", if_not_exists=True)
        db["questions"].create(schema.QUESTIONS, pk=("run_id", "question_id"), if_not_exists=True)
        db["results"].create(schema.RESULTS, pk=("run_id", "question_id", "method"), if_not_exists=True)
        db["model_calls"].create(schema.MODEL_CALLS, pk="call_id", if_not_exists=True)
        for table, columns in schema.TABLES.items():  # databases written before some columns existed
            have = db[table].columns_dict  # (ADDED_COLUMNS; schema_problem let only such a database in)
            for column, kind in columns.items():
                if column not in have:
                    db[table].add_column(column, kind)
        db["model_calls"].create_index(["run_id", "question_id"], if_not_exists=True)
        db["results"].create_index(["run_id", "method"], if_not_exists=True)

    # ------------------------------------------------------------------ runs

    def start_run(self, run_id: str, protocol: str, *, config: Any, pool: Any, dataset: Any,
                  pool_may_change: bool = False) -> bool:
        """Create the run, or mark an existing one running again. Returns True when resuming.

        ``pool_may_change``: a run whose members change between resumes by design (``agora
        evolve``'s duel run: each iteration's members carry newly trained adapters) stores the new
        pool instead of refusing it.

        Raises:
            ValueError: a run id that :func:`check_run_id` refuses (blank, control characters); the
                run id exists for another protocol, or with other settings, another
                pool (its models and their settings; how they are reached, :data:`TRANSPORT_FIELDS`,
                may change) or another dataset (format, edited questions, or a path whose file holds
                other questions: :meth:`data_changes`): resuming would mix two experiments in one run.
        """
        check_run_id(run_id, "run id")
        with self._lock, self.db.conn:
            existing = self.get_run(run_id)
            if existing is not None:
                if existing["protocol"] != protocol:
                    raise ResumeRefusedError(f"run id {run_id!r} already holds a {existing['protocol']} run in "
                                             f"{self.path}; pick a new --run-id")
                before = self._run_json(existing, "dataset") or {}
                now_ds = json.loads(_json(dataset)) or {}
                changed, details = self.data_changes(run_id, before, now_ds)
                if existing["config"] != _json(config):
                    changed.append("settings")
                    details += _differences(json.loads(_json(config)), self._run_json(existing, "config"))
                pool_note = ""
                if not pool_may_change:
                    old_pool, new_pool = _models(self._run_json(existing, "pool")), _models(json.loads(_json(pool)))
                    if old_pool != new_pool:
                        changed.append("pool")
                        pool_note = "\n  pool: " + "; ".join(_pool_differences(new_pool, old_pool)[:4])
                if changed:
                    said = f" ({'; '.join(details[:4])})" if details else ""
                    raise ResumeRefusedError(
                        f"run id {run_id!r} in {self.path} was started with other {', '.join(changed)}{said}; "
                        f"rerun with the same options to resume it, or pick a new --run-id{pool_note}")
                update: dict[str, Any] = {"status": "running", "finished_at": None}
                if pool_may_change:
                    update["pool"] = _clean_text(_json(pool))
                if isinstance(before, dict) and isinstance(now_ds, dict) and isinstance(now_ds.get(QUESTION_HASHES), dict):
                    # questions first seen now (a larger --limit) are checked from now on too, and
                    # counted: the run's limit and count say what it holds, not what it started with
                    hashes = {**now_ds[QUESTION_HASHES], **(before.get(QUESTION_HASHES) or {})}
                    grown = {**before, QUESTION_HASHES: hashes}
                    if "count" in before:
                        grown["count"] = len(hashes)
                    if "limit" in before and "limit" in now_ds:
                        old_limit, new_limit = before["limit"], now_ds["limit"]
                        grown["limit"] = (None if old_limit is None or new_limit is None
                                          else max(old_limit, new_limit))
                    update["dataset"] = _clean_text(_json(grown))
                self.db["runs"].update(run_id, update)
                return True
            self.db["runs"].insert({
                "run_id": run_id, "protocol": protocol, "status": "running", "started_at": now(),
                "finished_at": None, "config": _clean_text(_json(config)), "pool": _clean_text(_json(pool)),
                "dataset": _clean_text(_json(dataset)), "code_revision": code_revision(), "host": platform.node(),
                "summary": None,
            })
            return False

    def data_changes(self, run_id: str, before: Any, now_ds: Any) -> tuple[list[str], list[str]]:
        """What differs between the dataset run ``run_id`` was started on (``before``, its ``runs.dataset``)
        and the one a resume gives (``now_ds``): ``(["path", "format"] or a part, ["data path: X here, Y
        in the run", ...])``, the fields :meth:`start_run` refuses; ``([], [])`` for the same data.

        A data file at another path (a bench or run moved to another machine, ``agora export`` /
        ``agora import``) is the same data when it holds the same questions: the questions both
        calls select (same ids) have the same content hash (:func:`question_hash`: text with options,
        gold, kind). A run recorded before per-question hashes (no :data:`QUESTION_HASHES` key) is
        compared on its recorded questions (the ``questions`` rows: text, gold, kind). The run's
        stored dataset keeps the path it was started on (its provenance; a bench's spec names the
        files of its latest call); the path stays a difference when no question can be compared
        (no hashes given now, or no question in common).

        Raises:
            ResumeRefusedError: questions of the run differ now: edited in the same file (naming
                them), or in the file at another path (naming the run id, both paths and how many
                of the questions compared differ).
        """
        if not isinstance(before, dict) or not isinstance(now_ds, dict):
            return [], []
        changed = [k for k in ("path", "format") if before.get(k) != now_ds.get(k)]
        hint = ""
        if changed == ["path"]:  # the same format at another path: the same data if it holds the same questions
            compared, differ = self._compared_questions(run_id, before, now_ds)
            old_name, new_name = (Path(str(d.get("path") or "")).name for d in (before, now_ds))
            if (not compared and old_name != new_name and before.get(QUESTION_HASHES)
                    and now_ds.get(QUESTION_HASHES)):
                hint = (f" (none of its question ids is one of the run's; questions without an `id` field are "
                        f"numbered from the file's name: if it holds the same questions, name it {old_name!r} as before)")
            if differ:
                raise ResumeRefusedError(
                    f"run id {run_id!r} in {self.path} was started on {_shown(before.get('path'), 500)} and is "
                    f"resumed on {_shown(now_ds.get('path'), 500)}: {len(differ)} of the {compared} questions "
                    f"compared differ (text, gold or options; e.g. {', '.join(repr(q) for q in differ[:3])}); "
                    "resume on a file holding the same questions, or pick a new --run-id")
            if compared:
                changed = []
        if changed:
            return changed, [f"data {k}: {_shown(now_ds.get(k))} here, {_shown(before.get(k))} in the run"
                             + (hint if k == "path" else "") for k in changed]
        edited = _changed_questions(before.get(QUESTION_HASHES), now_ds.get(QUESTION_HASHES))
        if edited:
            shown = ", ".join(repr(q) for q in edited[:5]) + (f" and {len(edited) - 5} more" if len(edited) > 5 else "")
            raise ResumeRefusedError(
                f"run id {run_id!r} in {self.path}: the data changed since the run started: question(s) "
                f"{shown} differ from the ones the run was started on (text, gold or options); rerun "
                "with the original file to resume it, or pick a new --run-id")
        return [], []

    def _compared_questions(self, run_id: str, before: dict[str, Any], now_ds: dict[str, Any]) -> tuple[int, list[str]]:
        """``(questions compared, ids of those that differ)`` between a run's questions and the
        hashes ``now_ds`` gives (:data:`QUESTION_HASHES`; ``(0, [])`` without them): the run's
        stored hashes, else its recorded ``questions`` rows (an ``mc`` row's option count is read
        from its text when the row has none, as the loaders render options)."""
        now_hashes = now_ds.get(QUESTION_HASHES)
        if not isinstance(now_hashes, dict):
            return 0, []
        old = before.get(QUESTION_HASHES)
        if isinstance(old, dict):
            common = [q for q in now_hashes if q in old]
            return len(common), [q for q in common if old[q] != now_hashes[q]]
        differ, compared = [], 0
        for r in self.db.query("select question_id, question, gold, kind, n_choices from questions where run_id = ? "
                               "order by idx, question_id", [run_id]):
            if r["question_id"] not in now_hashes:
                continue
            compared += 1
            counts = {r["n_choices"], option_count(r["question"], r["kind"])}
            if now_hashes[r["question_id"]] not in {question_hash(r["question"], r["gold"], r["kind"], n) for n in counts}:
                differ.append(r["question_id"])
        return compared, differ

    def run_lock(self, run_id: str) -> contextlib.AbstractContextManager[None]:
        """The live-run lock of ``run_id`` on this database (:func:`run_lock`): a driver holds it
        while it runs the run, so a second process given the same run id is refused.

        Raises:
            RunLockedError: another live process holds it.
        """
        return run_lock(self.path, run_id)

    def _run_json(self, row: dict[str, Any], column: str) -> Any:
        """The JSON column ``column`` of a ``runs`` row, decoded.

        Raises:
            TraceStoreError: the value is not JSON (the row was changed outside Agora): names the
                database, the run and the column.
        """
        try:
            return json.loads(row[column] or "null")
        except (TypeError, ValueError) as exc:
            raise TraceStoreError(f"{self.path}: runs row {row['run_id']!r}, column {column}: not valid JSON ({exc}); "
                                  "the row was changed outside Agora: repair it or pick a new --run-id") from None

    def finish_run(self, run_id: str, summary: Any = None, status: str = "finished") -> None:
        """Mark the run ``status`` (``finished``, ``failed``, ``interrupted``) with its summary.

        On a full disk the write is tried once more after a WAL checkpoint (which lets SQLite reuse
        the space of its write-ahead log), so that a run stopped by a full disk is not left
        ``running`` when it can be helped.
        """
        update = {"status": status, "finished_at": now(), "summary": _clean_text(_json(summary))}
        try:
            with self._lock, self.db.conn:
                self.db["runs"].update(run_id, update)
        except sqlite3.OperationalError as exc:
            if "full" not in str(exc).lower():
                raise
            with self._lock:
                with contextlib.suppress(sqlite3.Error):
                    self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                with self.db.conn:
                    self.db["runs"].update(run_id, update)

    @staticmethod
    def mark_stopped(path: str | Path, run_id: str, status: str = "interrupted", summary: Any = None,
                     timeout_s: float = 2.0) -> bool:
        """Set a ``running`` run's status from outside its store (a signal handler about to end the
        process: the store's own connection may be in the middle of a write), through a connection
        of its own that waits at most ``timeout_s`` for SQLite's lock. Returns whether the row was
        marked; never raises (``":memory:"``: nothing to mark)."""
        if str(path) == ":memory:":
            return False
        try:
            conn = sqlite3.connect(str(path), timeout=timeout_s)
            try:
                with conn:
                    cur = conn.execute("update runs set status = ?, finished_at = ?, summary = ? "
                                       "where run_id = ? and status = 'running'",
                                       [status, now(), _clean_text(_json(summary)), run_id])
                return cur.rowcount > 0
            finally:
                conn.close()
        except (sqlite3.Error, OSError, UnicodeError):
            return False

    def get_run(self, run_id: str) -> dict | None:
        rows = list(self.db["runs"].rows_where("run_id = ?", [run_id]))
        return rows[0] if rows else None

    # ------------------------------------------------------------------ questions

    def run_ids(self, prefix: str = "") -> list[str]:
        """The ids of the runs in this DB that start with ``prefix`` (all by default), oldest first."""
        if not self._has("runs"):
            return []
        return [r["run_id"] for r in self.db.query("select run_id from runs order by rowid")
                if r["run_id"].startswith(prefix)]

    def question_times(self, run_ids: Sequence[str]) -> dict[str, tuple[int, float]]:
        """Run id → (questions recorded, their mean wall seconds), for the runs that have any."""
        if not run_ids or not self._has("questions"):
            return {}
        marks = ",".join("?" * len(run_ids))
        rows = self.db.query(f"select run_id, count(*) as n, avg(wall_s) as wall from questions "
                             f"where run_id in ({marks}) group by run_id", list(run_ids))
        return {r["run_id"]: (r["n"], float(r["wall"] or 0.0)) for r in rows}

    def finished_questions(self, run_id: str) -> set[str]:
        """Ids of questions already recorded for ``run_id`` (a rerun skips them; failed questions
        are not recorded, so a rerun retries them)."""
        return {r["question_id"] for r in self.db.query(
            "select question_id from questions where run_id = ?", [run_id])}

    def record_question(
        self,
        run_id: str,
        protocol: str,
        question: dict[str, Any],
        results: dict[str, dict[str, Any]],
        calls: Iterable[dict[str, Any]],
    ) -> None:
        """Write one finished question, its per-method results and its model calls, atomically.

        Upserts on primary keys, so writing the same question twice leaves one copy. A method
        whose answer drew on no sample (``samples == 0``: its model calls failed) is stored with
        ``correct`` NULL: failed, not wrong (:func:`agora.traces.report.method_table` counts it
        as failed).
        """
        qid = question["question_id"]
        n_choices = question.get("n_choices") or option_count(question.get("question"), question.get("kind"))
        rows = call_rows(calls, run_id, qid, protocol, kind=question.get("kind"), n_choices=n_choices)
        ok = [c for c in rows if not c["error"]]
        row = {
            "run_id": run_id, "question_id": qid, "idx": question.get("idx"), "source": question.get("source"),
            "kind": question.get("kind"), "question": question.get("question"), "gold": question.get("gold"),
            "answer": question.get("answer"), "correct": _bool(question.get("correct")),
            "wall_s": question.get("wall_s"), "model_calls": len(ok),
            "prompt_tokens": sum(c["prompt_tokens"] or 0 for c in ok),
            "completion_tokens": sum(c["completion_tokens"] or 0 for c in ok),
            "detail": _json(question.get("detail")), "finished_at": now(), "n_choices": n_choices,
        }
        result_rows = [{"run_id": run_id, "question_id": qid, "method": method, "answer": r.get("answer"),
                        "correct": None if r.get("samples") == 0 else _bool(r.get("correct")),
                        "samples": r.get("samples"),
                        "completion_tokens": r.get("completion_tokens"),
                        "latency_s": r.get("latency_s"), "how": r.get("how"), "calls": r.get("calls"),
                        # issue 32: the part drawn from a bench's shared candidate pool (NULL: none)
                        "shared_calls": r.get("shared_calls"), "shared_samples": r.get("shared_samples"),
                        "shared_tokens": r.get("shared_completion_tokens"),
                        "shared_latency_s": r.get("shared_latency_s")}
                       for method, r in results.items()]
        with self._lock, self.db.conn:
            # One statement per table, not sqlite-utils' two per row (33 → 3 statements for an
            # ALIGN question: ≈ 2.2 → 0.7 ms, the runner's per-question cost; orchestration.py).
            _upsert(self.db.conn, "model_calls", rows, ("call_id",))
            _upsert(self.db.conn, "results", result_rows, ("run_id", "question_id", "method"))
            _upsert(self.db.conn, "questions", [row], ("run_id", "question_id"))

    def record_calls(self, run_id: str, protocol: str, question_id: str, calls: Iterable[dict[str, Any]]) -> None:
        """Write model-call records without a question row: the attempts of a question that failed
        (no answer recorded, retried by a rerun) or was aborted by an unreachable model."""
        rows = call_rows(calls, run_id, question_id, protocol)
        with self._lock, self.db.conn:
            _upsert(self.db.conn, "model_calls", rows, ("call_id",))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """Hold the write lock and one SQLite transaction (committed on exit, rolled back on error);
        for protocol tables written together with their model calls (:func:`call_row`)."""
        with self._lock, self.db.conn:
            yield self.db

    def results(self, run_id: str) -> list[dict]:
        return list(self.db.query(
            "select r.*, q.idx from results r join questions q using (run_id, question_id) "
            "where r.run_id = ? order by q.idx, r.method", [run_id]))

    def questions(self, run_id: str) -> list[dict]:
        return list(self.db["questions"].rows_where("run_id = ?", [run_id], order_by="idx"))

    def calls(self, run_id: str, question_id: str | None = None) -> list[dict]:
        if question_id is None:
            return list(self.db["model_calls"].rows_where("run_id = ?", [run_id]))
        return list(self.db["model_calls"].rows_where("run_id = ? and question_id = ?", [run_id, question_id]))

    # ------------------------------------------------------------------ readers for training and reports

    @classmethod
    def reading(cls, db: str | Path | TraceStore | sqlite_utils.Database) -> TraceStore:
        """A store to read ``db``: a store as is, an open ``sqlite_utils.Database`` wrapped (nothing
        created or migrated in it), a path opened ``readonly``.

        Raises:
            FileNotFoundError: a path that is not a file.
            TraceStoreError: as :class:`TraceStore` with ``readonly=True``.
        """
        if isinstance(db, TraceStore):
            return db
        if isinstance(db, sqlite_utils.Database):
            store = cls.__new__(cls)
            store.path, store.readonly, store._lock, store.db = "<database>", True, threading.RLock(), db
            return store
        if not Path(db).is_file():
            raise FileNotFoundError(f"{db}: trace database not found")
        return cls(db, readonly=True)

    def _has(self, table: str) -> bool:
        return table in self.db.table_names()

    def protocol_questions(self, protocol: str, run_ids: Sequence[str] = ()) -> list[dict]:
        """Recorded questions of the runs of ``protocol`` (of ``run_ids`` when given), by run and index;
        ``[]`` when the DB has no questions."""
        if not self._has("questions") or not self._has("runs"):
            return []
        where, params = "r.protocol = ?", [protocol]
        if run_ids:
            where += f" and q.run_id in ({', '.join('?' for _ in run_ids)})"
            params += list(run_ids)
        return list(self.db.query(
            f"select q.* from questions q join runs r using (run_id) where {where} order by q.run_id, q.idx", params))

    def first_call_messages(self, run_id: str, question_id: str, node: str, agent: int | None = None) -> list | None:
        """The prompt (messages, decoded) of the first successful call ``node`` made for a question
        (by ``agent`` when given), or ``None``."""
        if not self._has("model_calls"):
            return None
        where, params = "run_id = ? and question_id = ? and node = ? and error is null", [run_id, question_id, node]
        if agent is not None:
            where += " and agent = ?"
            params.append(agent)
        rows = list(self.db.query(f"select messages from model_calls where {where} limit 1", params))
        if not rows or rows[0]["messages"] in (None, ""):
            return None
        value = rows[0]["messages"]
        return json.loads(value) if isinstance(value, str) else value

    def preference_pairs(self) -> list[dict]:
        """Every ``preference_pairs`` row (JSON columns as stored), by run, iteration, time and id;
        ``[]`` without the table (a DB without duels)."""
        if not self._has("preference_pairs"):
            return []
        return list(self.db.query("select * from preference_pairs order by run_id, iteration, created_at, pair_id"))

    def duel_rows(self, run_ids: Sequence[str] = (), iterations: Sequence[int] = ()) -> list[dict]:
        """``duels`` rows (ties included) of ``run_ids`` / ``iterations`` (all when empty), in play order;
        ``[]`` without the table."""
        if not self._has("duels"):
            return []
        where, params = ["1 = 1"], []
        if run_ids:
            where.append(f"run_id in ({', '.join('?' for _ in run_ids)})")
            params += list(run_ids)
        if iterations:
            where.append(f"iteration in ({', '.join('?' for _ in iterations)})")
            params += list(iterations)
        return list(self.db.query(f"select * from duels where {' and '.join(where)} order by run_id, duel_number", params))

    def close(self) -> None:
        self.db.close()


def call_rows(calls: Iterable[dict[str, Any]], run_id: str, question_id: str, protocol: str, *,
              kind: str | None = None, n_choices: int | None = None) -> list[dict[str, Any]]:
    """The ``model_calls`` rows of trace records (:meth:`ModelPool.sample` records), with the
    messages of records that share their request's prompt (``messages_of``) filled back in, each
    sample's ``sample_index`` and ``request_id`` (from ``messages_of``: a request's first sample has
    none, its others point at it), and, when the question's ``kind`` is given, each sample's
    extracted ``answer`` and ``how`` (:func:`answer_fields`)."""
    calls = list(calls)
    encoded: dict[str, str] = {}
    for c in calls:
        if c.get("messages") is not None:
            encoded[c["call_id"]] = _json(c["messages"])
    rows, taken = [], {}
    for c in calls:
        row = call_row(c, run_id, question_id, protocol,
                       messages=encoded.get(c["call_id"]) or encoded.get(c.get("messages_of")))
        if not c.get("error"):
            request = c.get("messages_of") or c["call_id"]
            row["request_id"], row["sample_index"] = request, taken.get(request, 0)
            taken[request] = row["sample_index"] + 1
            if kind is not None:
                row["answer"], row["how"] = answer_fields(c.get("completion"), kind, n_choices)
        rows.append(row)
    return rows


#: An option line of a multiple-choice question as the loaders write it (``A. text``).
_OPTION_LINE = re.compile(r"^[A-J]\. ", re.MULTILINE)


def option_count(question: str | None, kind: str | None) -> int | None:
    """The option count of an ``mc`` question read from its text (its ``A. ...`` lines, as the
    loaders write them), ``None`` for other kinds or a text without option lines."""
    if kind != "mc" or not question:
        return None
    return len(_OPTION_LINE.findall(question)) or None


def answer_fields(completion: str | None, kind: str | None, n_choices: int | None) -> tuple[str | None, str | None]:
    """``(answer, how)`` of one sample for the ``model_calls`` columns: the scorer's reading
    (:func:`agora.tasks.answers.find_answer` with ``kind`` and ``n_choices``, 4 options when
    unknown, as the graphs read it); ``how`` is ``"none"`` for an output without an answer, and
    ``(None, None)`` for no completion or no kind (not extracted)."""
    if completion is None or kind is None:
        return None, None
    found = find_answer(completion, kind, n_choices or 4)  # type: ignore[arg-type]
    return (found.answer, found.how) if found.answer is not None else (None, "none")


def backfill(store: "TraceStore", run_ids: Sequence[str] = ()) -> dict[str, int]:
    """Fill the answer-level columns of an older database (``agora traces backfill``), once:
    ``questions.n_choices`` from the question text, and, for model calls of recorded questions
    that lack them, ``answer``/``how`` (:func:`answer_fields`) and ``sample_index``/``request_id``.
    The samples of one request share their ``created_at``, node, agent and model (the pool stamps a
    request's start on each), so they are grouped on those and numbered in write order (rowid).
    Rows already filled are left alone, so a second backfill changes nothing. Returns counts:
    ``questions`` and ``calls`` updated.

    Raises:
        TraceStoreError: a read-only store.
    """
    if store.readonly:
        raise TraceStoreError(f"{store.path}: opened read-only; backfill needs to write")
    where, params = "", []
    if run_ids:
        where = f" and q.run_id in ({', '.join('?' for _ in run_ids)})"
        params = list(run_ids)
    db = store.db
    counts = {"questions": 0, "calls": 0}
    with store._lock, db.conn:
        qs = list(db.query(f"select run_id, question_id, kind, question, n_choices from questions q where 1 = 1{where}",
                           params))
        meta = {}
        for q in qs:
            n = q["n_choices"] or option_count(q["question"], q["kind"])
            meta[q["run_id"], q["question_id"]] = (q["kind"], n)
            if q["n_choices"] is None and n is not None:
                db.execute("update questions set n_choices = ? where run_id = ? and question_id = ?",
                           [n, q["run_id"], q["question_id"]])
                counts["questions"] += 1
        rows = db.query(
            "select c.rowid as rid, c.call_id, c.run_id, c.question_id, c.node, c.agent, c.model, c.created_at, "
            "c.completion, c.how, c.sample_index from model_calls c join questions q using (run_id, question_id) "
            f"where c.error is null{where} order by c.rowid", params)
        firsts: dict[tuple, tuple[str, int]] = {}
        updates = []
        for r in rows:
            key = (r["run_id"], r["question_id"], r["node"], r["agent"], r["model"], r["created_at"])
            request, index = firsts.get(key, (r["call_id"], -1))
            firsts[key] = (request, index + 1)
            if r["how"] is not None and r["sample_index"] is not None:
                continue
            kind, n = meta[r["run_id"], r["question_id"]]
            answer, how = answer_fields(r["completion"], kind, n)
            updates.append((answer, how, index + 1, request, r["call_id"]))
        db.conn.executemany("update model_calls set answer = ?, how = ?, sample_index = ?, request_id = ? "
                            "where call_id = ?", updates)
        counts["calls"] = len(updates)
    return counts


def call_row(c: dict[str, Any], run_id: str, question_id: str, protocol: str, *,
             messages: str | None = None) -> dict[str, Any]:
    """The ``model_calls`` row of one trace record ``c`` (a :meth:`ModelPool.sample` record);
    ``question_id`` is used when the record has none; ``messages``: the messages as JSON, when
    known (a record with ``messages_of`` has none of its own: use :func:`call_rows`)."""
    return {
        "call_id": c["call_id"], "run_id": run_id, "question_id": c.get("question_id", question_id),
        "protocol": protocol, "node": c.get("node"), "role": c.get("role"), "agent": c.get("agent"),
        "partner": c.get("partner"),
        "model": c.get("model"), "messages": messages if messages is not None else _json(c.get("messages")), "completion": c.get("completion"),
        "params": _json(c.get("params")), "prompt_tokens": c.get("prompt_tokens", 0),
        "completion_tokens": c.get("completion_tokens", 0), "latency_s": c.get("latency_s"),
        "finish_reason": c.get("finish_reason"), "attempt": c.get("attempt", 0),
        "error": c.get("error"), "created_at": c.get("created_at") or now(),
        "answer": None, "how": None, "sample_index": None, "request_id": None,
    }


def _upsert(conn: Any, table: str, rows: list[dict[str, Any]], pk: tuple[str, ...]) -> None:
    """Insert ``rows`` (all with the first row's keys) into ``table``, updating those columns of
    rows whose primary key ``pk`` exists: sqlite-utils' ``upsert_all`` in one ``executemany``.
    Lists and dicts are stored as JSON, as sqlite-utils does."""
    if not rows:
        return
    cols = list(rows[0])
    names = ", ".join(f"[{c}]" for c in cols)
    updates = ", ".join(f"[{c}] = excluded.[{c}]" for c in cols if c not in pk)
    sql = (f"INSERT INTO [{table}] ({names}) VALUES ({', '.join('?' * len(cols))}) "
           f"ON CONFLICT ({', '.join(f'[{c}]' for c in pk)}) DO UPDATE SET {updates}")
    params = [tuple(_json(v) if isinstance(v, (dict, list, tuple)) else v for v in (r[c] for c in cols)) for r in rows]
    try:
        conn.executemany(sql, params)
    except (UnicodeEncodeError, OverflowError):  # a lone surrogate (a model's reply, a gold answer) or an
        # integer past SQLite's 64 bits (a server's token count): the rows again, made valid
        conn.executemany(sql, _clean_rows(table, rows, params))  # upserts: rows written before are rewritten


#: The key of ``runs.dataset`` holding each question's content hash (:func:`question_hash`), which a
#: resume compares (:meth:`TraceStore.start_run`).
QUESTION_HASHES = "question_sha256"


def question_hash(question: str, gold: str | None, kind: str | None = None, n_choices: int | None = None) -> str:
    """A short content hash of one question as a run asks and scores it: its text (options
    included, as the loaders render them), gold answer, kind and option count (16 hex digits of
    SHA-256; lone surrogates hashed as they are)."""
    text = json.dumps([question, gold, kind, n_choices or 0], ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def _changed_questions(before: Any, now_hashes: Any) -> list[str]:
    """Ids whose hash differs between the run's stored hashes and this call's (ids in only one of
    them are not compared: a larger or smaller ``--limit``); ``[]`` when either has none (a run
    started before hashes were stored)."""
    if not isinstance(before, dict) or not isinstance(now_hashes, dict):
        return []
    return [qid for qid, h in now_hashes.items() if qid in before and before[qid] != h]


def _shown(value: Any, width: int = 40) -> str:
    """``value`` as JSON in at most about ``width`` characters; a long string keeps its quotes and
    both ends (a path's file name is at its end), a long other value its start."""
    if isinstance(value, str) and len(value) > width - 2:
        keep = width - 3
        value = value[:keep // 3] + "…" + value[-(keep - keep // 3):]
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width + 10 else text[:width - 1] + "…"


def _differences(here: Any, there: Any, prefix: str = "") -> list[str]:
    """``"field: X here, Y in the run"`` for each leaf of two JSON values (settings) that differs,
    with dotted names for nested fields."""
    if isinstance(here, dict) and isinstance(there, dict):
        out: list[str] = []
        for key in dict.fromkeys([*here, *there]):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in there:
                out.append(f"{name}: {_shown(here[key])} here, unset in the run")
            elif key not in here:
                out.append(f"{name}: unset here, {_shown(there[key])} in the run")
            else:
                out += _differences(here[key], there[key], name)
        return out
    if isinstance(here, list) and isinstance(there, list) and len(here) == len(there):
        out = []
        for i, (a, b) in enumerate(zip(here, there)):
            out += _differences(a, b, f"{prefix}[{i}]")
        return out
    return [] if here == there else [f"{prefix or 'value'}: {_shown(here)} here, {_shown(there)} in the run"]


def _pool_differences(here: Any, there: Any) -> list[str]:
    """What differs between two pools (lists of model descriptions): members, then fields by member name."""
    def by_name(pool: Any) -> dict[str, Any]:
        if not isinstance(pool, list):
            return {}
        return {str(m.get("name", i)) if isinstance(m, dict) else str(i): m for i, m in enumerate(pool)}

    a, b = by_name(here), by_name(there)
    if list(a) != list(b):
        return [f"members {', '.join(a) or 'none'} here, {', '.join(b) or 'none'} in the run"]
    out = []
    for name in a:
        out += [f"{name}.{d}" for d in _differences(a[name], b[name])]
    return out or ["the pools differ"]


#: A lone UTF-16 surrogate (``\ud800``–``\udfff``): valid in a Python string, not in UTF-8 or SQLite.
_SURROGATE = re.compile("[\ud800-\udfff]")


#: The integers SQLite stores (64-bit signed); :func:`_clean_text` makes others NULL.
_INT_RANGE = (-(2**63), 2**63 - 1)


def _clean_text(value: Any) -> Any:
    """``value`` with lone surrogates replaced by U+FFFD (a surrogate pair becomes its character),
    ``None`` for an integer SQLite cannot store; anything else unchanged."""
    if isinstance(value, int) and not isinstance(value, bool) and not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
        return None
    if not isinstance(value, str) or not _SURROGATE.search(value):
        return value
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _clean_rows(table: str, rows: list[dict[str, Any]], params: list[tuple]) -> list[tuple]:
    """``params`` with lone surrogates replaced (:func:`_clean_text`), one warning per row changed."""
    cols = list(rows[0])
    out = []
    for row, values in zip(rows, params):
        cleaned = tuple(_clean_text(v) for v in values)
        changed = [c for c, a, b in zip(cols, values, cleaned) if a is not b]
        if changed:
            key = row.get("call_id") or row.get("question_id") or row.get("run_id")
            log.warning("%s row %s: lone UTF-16 surrogates (not valid UTF-8) in %s recorded as U+FFFD, or an "
                        "integer beyond 64 bits as NULL",
                        table, key, ", ".join(changed))
        out.append(cleaned)
    return out


def clean_rows(table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (dicts) made storable: lone surrogates as U+FFFD, integers beyond 64 bits as NULL
    (:func:`_clean_text`), one logged warning per row changed. For writers that do not go through
    :meth:`TraceStore.record_question` (duels, sessions)."""
    if not rows:
        return rows
    cleaned = []
    for row in rows:
        [values] = _clean_rows(table, [row], [tuple(row.values())])
        cleaned.append(dict(zip(row, values)))
    return cleaned


def _bool(value: Any) -> int | None:
    return None if value is None else int(bool(value))


def _models(pool: Any) -> Any:
    """A pool description without :data:`TRANSPORT_FIELDS` (what a resume compares), nor
    :data:`TRANSPORT_KWARGS` in a member's ``options`` and ``options.kwargs`` (a ``langchain``
    member's ``base_url``, like an ``openai`` member's)."""
    def member(m: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in m.items() if k not in TRANSPORT_FIELDS}
        options = out.get("options")
        if isinstance(options, dict):
            options = {k: v for k, v in options.items() if k not in TRANSPORT_KWARGS}
            if isinstance(options.get("kwargs"), dict):
                options["kwargs"] = {k: v for k, v in options["kwargs"].items() if k not in TRANSPORT_KWARGS}
            out["options"] = options
        return out

    if isinstance(pool, list):
        return [member(m) if isinstance(m, dict) else m for m in pool]
    return pool
