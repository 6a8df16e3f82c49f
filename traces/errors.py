"""The trace store's errors: one line each, naming the file (or run) and what is wrong."""

from __future__ import annotations

from agora.tasks.errors import InputError


class TraceStoreError(InputError):
    """A trace database (or its checkpoints file) that cannot be opened or written; the message is
    one line naming the file and what is wrong."""


class RunLockedError(TraceStoreError):
    """The run id is being run by another live process (or thread) on the same trace database
    (:meth:`TraceStore.run_lock`); the message names its pid and host."""


class ResumeRefusedError(InputError):
    """A rerun of a run id with other options than the run was started with
    (:meth:`TraceStore.start_run`); the message names each setting that differs."""
