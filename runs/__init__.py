"""The drivers: code that runs graphs, but is not a graph.

A driver takes a pool, a trace store and settings, invokes one or more compiled graphs from
:mod:`agora.graphs` (with their checkpointer and a run row, through
:func:`agora.graphs.recorded_runs.recorded_run`), and records what they did; nothing here is a protocol.

| module | driver | what it runs |
|---|---|---|
| :mod:`agora.runs.bench` | ``run_bench`` (its plan: :mod:`agora.runs.bench_plan`; its task files: :mod:`agora.runs.bench_tasks`) | every protocol of a bench on every task file, as ordinary resumable runs |
| :mod:`agora.runs.duel` | ``run_duels`` | ``T × D`` duels of the duel graph, reputations and leader weights carried from duel to duel |
| :mod:`agora.runs.selection` | ``run_session``, ``session_settings`` | a CUPID session, answering the graph's ``ask_user`` interrupts through a ``choose`` callback |
| :mod:`agora.runs.report` | ``write_report``, ``build_report`` | not a driver: a bench's report (claims, ``bench.md``, the PNG) from :mod:`agora.traces.bench`'s data |

Layers: ``cli > training > runs > graphs > traces > agents > models > tasks``. A driver imports
graphs and the layers below; ``training`` and ``cli`` import drivers; no graph imports a driver.
``run_problems`` (one graph over a problem list) stays in :mod:`agora.graphs.runner`, which the
graphs' own tests and the registry use.
"""
