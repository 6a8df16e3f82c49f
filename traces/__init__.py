"""The trace store: every run, question, method result and model call, in SQLite.

This folder is outside the design card's three because all of them meet here: graphs' runs write
it (through the runner, never from inside a node), ``agora.training`` reads it to build TRL
datasets, and reports and routers read it. Schema and table docs: :mod:`agora.traces.schema`.

Public surface::

    from agora.traces import TraceStore
"""

from agora.traces.store import TraceStore, code_revision

__all__ = ["TraceStore", "code_revision"]
