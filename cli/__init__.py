"""The ``agora`` command line.

This folder is outside the design card's three because it composes all of them: it builds pools
(``agents``), runs protocol graphs (``graphs``) and training (``training``) and prints reports from
the trace store. Each command lives in its own module and registers itself on the shared Typer apps
of :mod:`agora.cli.main`.
"""
