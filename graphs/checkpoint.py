"""The runner's SQLite checkpointer: LangGraph's ``SqliteSaver``, usable from async graph runs.

``SqliteSaver`` has no async methods (it points to ``AsyncSqliteSaver``, which goes through
aiosqlite: a thread hop and a future per statement, ≈ 17 ms per ALIGN question here against
≈ 2 ms for the same statements run straight). The runner drives graphs with ``ainvoke`` on its own
event loop, so that nodes and checkpoint writes run inline instead of being handed to threads
(``benchmarks/orchestration.py``). :class:`InlineAsyncSqliteSaver` gives ``SqliteSaver`` the async
methods LangGraph calls there, each running the sync method inline: a local SQLite statement
(≈ 50–150 µs here) blocks the loop less than handing it to a thread costs.

By default it has ``SqliteSaver``'s tables, serialisation, locking and durability: every write is
committed before its method returns. With ``group_commit=True`` (the runner's choice) the writes
of finished tasks (``aput_writes``: one call per task, 9 per ALIGN question) share a commit: the
next checkpoint's (``aput`` commits at once), or one at most :attr:`~InlineAsyncSqliteSaver.commit_delay_s`
later while the event loop runs, or the owner's :meth:`~InlineAsyncSqliteSaver.commit` /
:meth:`~InlineAsyncSqliteSaver.close`; so does a thread's deletion (``delete_thread``). Each commit rewrites the pages it touched, so one commit
for a step's task writes instead of one each saves ≈ 1 ms per ALIGN question here. The owner
must call :meth:`~InlineAsyncSqliteSaver.commit` when a run ends or stops (the runner does, after
every question): after an error or an ``interrupt`` no checkpoint follows the last task writes,
and an event loop that closes drops the timer.

Deserialisation is strict (:func:`checkpoint_serializer`): a checkpoint may hold plain data
(what Agora's graph states hold: dicts, lists, strings, numbers), the types of
:data:`ALLOWED_TYPES` (LangGraph's ``Send``, ``Interrupt``, ``Command``; LangChain messages) and
those of LangGraph's own safe list (datetime, UUID, ...). A row naming any other type
(``os.system``, a class of another package) is refused with :class:`UnsafeCheckpointError`, which
names the checkpoint file and thread, before anything of it is imported or called: a checkpoint
file is data, and whoever can write it must not be able to run code in the process that resumes
from it. No pickle either.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.serde.base import maybe_add_typed_methods
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer, _is_safe_json_type
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Send
from agora.tasks.errors import InputError

#: The types (``(module, name)``) a checkpoint may hold besides plain data (dicts, lists, strings,
#: numbers, ``None``: all that Agora's graph states and ``Send`` payloads hold, TypedDicts included):
#: LangGraph's ``Send`` (fan-out tasks), ``Interrupt`` (CUPID's question to the user) and ``Command``,
#: and LangChain's messages. LangGraph's own safe list
#: (``langgraph.checkpoint.serde._msgpack.SAFE_MSGPACK_TYPES``: these, datetime, UUID, ...) is
#: allowed too. A graph that puts another type in state (a dataclass, a pydantic model) adds it here.
ALLOWED_TYPES: tuple[tuple[str, str], ...] = (
    ("langgraph.types", "Send"),
    ("langgraph.types", "Interrupt"),
    ("langgraph.types", "Command"),
    *(("langchain_core.messages." + module, name) for module, name in (
        ("human", "HumanMessage"), ("ai", "AIMessage"), ("system", "SystemMessage"), ("chat", "ChatMessage"),
        ("tool", "ToolMessage"), ("ai", "AIMessageChunk"))),
)


log = logging.getLogger(__name__)

#: The integers a checkpoint (msgpack) holds: signed and unsigned 64-bit.
_MSGPACK_INTS = (-(2**63), 2**64 - 1)


def _bounded(value: Any, found: list[int]) -> Any:
    """``value`` with every integer msgpack cannot hold replaced by ``None`` (appended to ``found``),
    through dicts, lists, tuples and ``Send`` payloads; other objects as they are."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if _MSGPACK_INTS[0] <= value <= _MSGPACK_INTS[1]:
            return value
        found.append(value)
        return None
    if isinstance(value, dict):
        return {k: _bounded(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_bounded(v, found) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_bounded(v, found) for v in value)
    if isinstance(value, Send):
        return Send(value.node, _bounded(value.arg, found))
    return value


class UnsafeCheckpointError(InputError):
    """A checkpoint row that names a type outside :data:`ALLOWED_TYPES` and LangGraph's safe list
    (nothing of it was imported or called)."""


class CorruptCheckpointError(InputError):
    """A checkpoint row that cannot be read back (an unknown serialization such as pickle, bytes
    that do not decode, metadata without its fields): changed or damaged outside Agora."""


#: What a damaged row raises inside LangGraph's readers (not SQLite's errors: those are the trace
#: store's to report).
_DAMAGED = (NotImplementedError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError)


def _checked(item: CheckpointTuple | None) -> CheckpointTuple | None:
    """``item``, or ``KeyError`` when a row LangGraph's loop wrote (its metadata has a ``source``) lacks
    the ``step`` the loop reads back: it would otherwise fail later, mid-run, as a bare
    ``KeyError: 'step'``. Rows put through the saver's API with other metadata pass."""
    meta = item.metadata if item is not None else None
    if isinstance(meta, dict) and "source" in meta and not isinstance(meta.get("step"), int):
        raise KeyError("metadata has no integer 'step'")
    return item

_loading = threading.local()  # .blocked: the types refused while this thread deserialises a value


def _on_serde_event(event: SerdeEvent) -> None:
    blocked = getattr(_loading, "blocked", None)
    if blocked is not None and event.get("kind") in ("msgpack_blocked", "msgpack_method_blocked"):
        blocked.append(".".join(filter(None, (event.get("module"), event.get("name"), event.get("method")))))


register_serde_event_listener(_on_serde_event)


class StrictSerializer(JsonPlusSerializer):
    """LangGraph's ``JsonPlusSerializer`` in strict mode (``allowed_msgpack_modules``: its safe list
    plus :data:`ALLOWED_TYPES`), no pickle, and a refused type raises :class:`UnsafeCheckpointError`
    instead of being replaced by its raw arguments."""

    def __init__(self, allowed: tuple[tuple[str, str], ...] = ALLOWED_TYPES) -> None:
        super().__init__(pickle_fallback=False, allowed_json_modules=None, allowed_msgpack_modules=allowed)
        self._agora_allowed = frozenset(allowed)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """As LangGraph's, but an integer msgpack cannot hold (beyond 64 bits: a server reporting
        10^30 usage tokens) does not break the checkpoint: such integers are written as ``None``,
        with a logged warning, and the write is tried again (only after the first attempt failed,
        so a normal step pays nothing)."""
        try:
            return super().dumps_typed(obj)
        except TypeError:  # "Integer exceeds 64-bit range", or "not serializable: Send" holding one
            found: list[int] = []
            cleaned = _bounded(obj, found)
            if not found:
                raise
            log.warning("a checkpoint write held %d integer(s) beyond 64 bits (e.g. %.3g), written as None: a model "
                        "server reported impossible usage numbers?", len(found), float(found[0]))
            return super().dumps_typed(cleaned)

    def _reviver(self, value: dict[str, Any]) -> Any:
        """Revive one object of a ``json``-typed row (the format before LangGraph's msgpack one):
        a constructor envelope (``{"lc": 1|2, "type": "constructor", "id": [...]}``) naming a type
        outside :data:`ALLOWED_TYPES` and LangGraph's safe list raises :class:`UnsafeCheckpointError`
        (LangGraph itself would drop it silently, or fail with a bare ``ValueError``)."""
        if isinstance(value, dict) and value.get("type") == "constructor" and value.get("lc") in (1, 2):
            ids = value.get("id")
            if not (isinstance(ids, list) and len(ids) >= 2 and all(isinstance(x, str) for x in ids)):
                raise UnsafeCheckpointError(f"a checkpoint holds a constructor with the id {str(ids)[:80]}, which "
                                            "Agora does not load; nothing of it was run. The file was changed outside "
                                            "Agora: delete it or use a new run id")
            dotted = ".".join(ids)
            allowed = (".".join(ids[:-1]), ids[-1]) in self._agora_allowed or _is_safe_json_type(ids)
            if value.get("lc") == 2 and not allowed:
                raise UnsafeCheckpointError(
                    f"a checkpoint holds {dotted}, a type Agora does not load from checkpoints (only plain data and "
                    "LangGraph's and LangChain's own types); nothing of it was run. The file was changed outside "
                    "Agora: delete it or use a new run id")
            try:
                return super()._reviver(value)
            except ValueError as exc:  # LangChain's own reviver refuses a type outside its namespaces
                raise UnsafeCheckpointError(
                    f"a checkpoint holds {dotted}, which LangChain refuses to load ({str(exc)[:120]}); nothing of it "
                    "was run. The file was changed outside Agora: delete it or use a new run id") from None
        return super()._reviver(value)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        outer = getattr(_loading, "blocked", None)
        _loading.blocked = blocked = []
        try:
            value = super().loads_typed(data)
        finally:
            _loading.blocked = outer
        if blocked:
            raise UnsafeCheckpointError(
                f"a checkpoint holds {', '.join(dict.fromkeys(blocked))}, a type Agora does not load from checkpoints "
                "(only plain data and LangGraph's and LangChain's own types); nothing of it was run. The file was "
                "changed outside Agora: delete it or use a new run id")
        return value


def checkpoint_serializer() -> StrictSerializer:
    """The serializer of Agora's checkpointers: strict, see :class:`StrictSerializer`."""
    return StrictSerializer()


class CheckedReads:
    """A saver's reads checked (put first in the bases, before the library's saver): every tuple
    :meth:`get_tuple` and :meth:`list` return passes :func:`_checked`, and a row naming a type
    outside the allow-list or that cannot be decoded is raised through the saver's own ``_where``
    (which names its file or database and the thread).

    Raises:
        UnsafeCheckpointError: the row names a type outside the allow-list (nothing run).
        CorruptCheckpointError: the row cannot be decoded.
    """

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            return _checked(super().get_tuple(config))  # type: ignore[misc]
        except _DAMAGED as exc:  # UnsafeCheckpointError is a ValueError, so among them
            raise self._where(exc, config) from None  # type: ignore[attr-defined]

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        try:
            for item in super().list(config, filter=filter, before=before, limit=limit):  # type: ignore[misc]
                yield _checked(item)
        except _DAMAGED as exc:
            raise self._where(exc, config) from None  # type: ignore[attr-defined]


class InlineAsync:
    """The async methods LangGraph's ``ainvoke`` calls on a checkpointer, run inline by the saver's
    sync ones (put first in the bases, before the sync saver): a checkpoint read or write is short
    and local, and a thread hop per step would cost more than it saves. ``alist`` reads every item
    first, so a consumer that stops early or awaits between items holds no lock of the saver's."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)  # type: ignore[attr-defined]

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for item in list(self.list(config, filter=filter, before=before, limit=limit)):  # type: ignore[attr-defined]
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)  # type: ignore[attr-defined]

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)  # type: ignore[attr-defined]

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)  # type: ignore[attr-defined]


class InlineAsyncSqliteSaver(CheckedReads, InlineAsync, SqliteSaver):
    """``SqliteSaver`` whose async methods run its sync ones inline (see the module docstring).

    Args:
        conn: an SQLite connection opened with ``check_same_thread=False``.
        serde: as for ``SqliteSaver``; default :func:`checkpoint_serializer` (strict).
        group_commit: let the async task writes of one step share a commit (then call
            :meth:`commit` when a run ends or stops).

    Meant for a local SQLite file used by one process; for a database shared over the network
    use an async saver (``AsyncSqliteSaver``, ``AsyncPostgresSaver``). Close it with :meth:`close`.
    """

    commit_delay_s: float = 0.005
    """With ``group_commit``: the longest time (seconds) a task's writes wait for a shared commit
    while the event loop runs."""

    def __init__(self, conn: sqlite3.Connection, *, serde: Any = None, group_commit: bool = False) -> None:
        super().__init__(conn, serde=serde if serde is not None else checkpoint_serializer())
        self.group_commit = group_commit
        self._local = threading.local()  # .defer: this thread's statement joins the shared commit
        self._pending = False  # uncommitted task writes in the connection's transaction
        self._timers: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}
        self._failure: sqlite3.Error | None = None  # a deferred commit's error, raised by the next call

    def with_allowlist(self, extra_allowlist: Any) -> "InlineAsyncSqliteSaver":
        """Add the types of a graph's schemas (LangGraph asks at compile time under
        ``LANGGRAPH_STRICT_MSGPACK``) to this saver's serializer, in place: a copy would keep its own
        pending-commit state, which :meth:`commit` would then miss."""
        if isinstance(self.serde, JsonPlusSerializer):
            self.serde = maybe_add_typed_methods(self.serde.with_msgpack_allowlist(extra_allowlist))
        return self

    @contextmanager
    def cursor(self, transaction: bool = True) -> Iterator[sqlite3.Cursor]:
        with self.lock:
            self.setup()
            cur = self.conn.cursor()
            try:
                yield cur
            finally:
                cur.close()
                if transaction:
                    if getattr(self._local, "defer", False):
                        self._pending = True
                    else:
                        self.conn.commit()
                        self._pending = False

    def _where(self, exc: Exception, config: RunnableConfig | None) -> ValueError:
        """``exc`` with the checkpoint file and thread in front (a damaged row becomes a
        :class:`CorruptCheckpointError`)."""
        try:
            path = next((row[2] for row in self.conn.execute("PRAGMA database_list") if row[1] == "main"), "")
        except sqlite3.Error:
            path = ""
        thread = ((config or {}).get("configurable") or {}).get("thread_id")
        where = ": ".join(str(x) for x in (path or "checkpoints", f"thread {thread!r}" if thread else None) if x)
        if isinstance(exc, UnsafeCheckpointError):
            return UnsafeCheckpointError(f"{where}: {exc}")
        detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        return CorruptCheckpointError(f"{where}: a checkpoint row cannot be read ({type(exc).__name__}: {detail}); "
                                      "the file was changed or damaged outside Agora: delete it or use a new run id")

    def commit(self) -> None:
        """Commit task writes still waiting for a shared commit (a no-op without any).

        Raises:
            sqlite3.Error: the commit failed (a full disk), or a deferred commit failed in the timer
                since the last call.
        """
        self._raise_failure()
        with self.lock:
            if self._pending:
                self.conn.commit()
                self._pending = False

    def close(self) -> None:
        """Commit what is pending and close the connection (closed even when the commit fails,
        e.g. on a full disk; the commit's error is raised then)."""
        try:
            self.commit()
        finally:
            with self.lock:
                for timer in self._timers.values():
                    timer.cancel()
                self._timers.clear()
            self.conn.close()

    def _commit_soon(self) -> None:
        loop = asyncio.get_running_loop()
        with self.lock:
            if loop not in self._timers:
                self._timers[loop] = loop.call_later(self.commit_delay_s, self._timer_fired, loop)

    def _timer_fired(self, loop: asyncio.AbstractEventLoop) -> None:
        with self.lock:
            self._timers.pop(loop, None)
        try:
            self.commit()
        except sqlite3.Error as exc:  # a full disk, an I/O error: raised by the run's next checkpoint call,
            # not logged by the event loop as a traceback per timer (the uncommitted writes are rolled back;
            # the resumed run redoes their tasks)
            with suppress(sqlite3.Error):
                self.conn.rollback()
            with self.lock:
                self._pending = False
                self._failure = exc

    def _raise_failure(self) -> None:
        """Raise (once) the error a deferred commit met in the timer."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        self._raise_failure()
        return self.put(config, checkpoint, metadata, new_versions)  # commits pending task writes too

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self._raise_failure()
        if not self.group_commit:
            self.put_writes(config, writes, task_id, task_path)
            return
        self._local.defer = True
        try:
            self.put_writes(config, writes, task_id, task_path)
        finally:
            self._local.defer = False
        self._commit_soon()

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread's checkpoints and writes; with ``group_commit`` the deletion is committed
        with the next commit (a thread the owner no longer needs: losing the deletion in a crash
        only leaves its rows behind)."""
        if not self.group_commit:
            super().delete_thread(thread_id)
            return
        self._local.defer = True
        try:
            super().delete_thread(thread_id)
        finally:
            self._local.defer = False

