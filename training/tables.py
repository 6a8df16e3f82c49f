"""Training tables of the trace store (one page, like :mod:`agora.traces.schema`).

``training_datasets``: one row per exported dataset split (``dataset_id`` primary key).
    run_id (the ``agora train`` or ``agora evolve`` run), iteration (NULL for ``agora train``),
    model (the trained pool member), kind (``dpo``/``grpo``/``sft``), split (``train``/``validation``),
    rows, instructions (distinct instructions), path (the JSONL file), filters (JSON: the
    :class:`~agora.training.datasets.PairFilter` or row source; DPO and SFT splits add
    ``source_runs``, the runs whose traces the rows came from), created_at.

``checkpoints``: one row per trained adapter (``checkpoint_id`` primary key).
    run_id, iteration, model, kind, base (model folder or ``builtin:...``), adapter (folder),
    previous_adapter (the run's starting point and reference model, NULL = base), rows, steps,
    final_loss, losses (JSON list), metrics (JSON), validation_accuracy (share of held-out pairs
    the checkpoint ranks right, NULL without validation pairs), selected (1 when it became the
    pool entry), wall_s, cpu_s, settings (JSON), created_at.

The ``runs`` table holds one row per ``agora train`` (protocol ``train-dpo``/``train-grpo``) and
per ``agora evolve`` (protocol ``evolve``); judge calls of a GRPO peer-judge reward go to
``model_calls`` with ``node = "grpo_reward"``.
"""

from __future__ import annotations

import json
from typing import Any

from agora.traces.store import TraceStore, now

TRAINING_DATASETS = {
    "dataset_id": str, "run_id": str, "iteration": int, "model": str, "kind": str, "split": str, "rows": int,
    "instructions": int, "path": str, "filters": str, "created_at": str,
}
CHECKPOINTS = {
    "checkpoint_id": str, "run_id": str, "iteration": int, "model": str, "kind": str, "base": str, "adapter": str,
    "previous_adapter": str, "rows": int, "steps": int, "final_loss": float, "losses": str, "metrics": str,
    "validation_accuracy": float, "selected": int, "wall_s": float, "cpu_s": float, "settings": str,
    "created_at": str,
}


def create_tables(store: TraceStore) -> None:
    """Create both tables if missing (idempotent)."""
    store.db["training_datasets"].create(TRAINING_DATASETS, pk="dataset_id", if_not_exists=True)
    store.db["checkpoints"].create(CHECKPOINTS, pk="checkpoint_id", if_not_exists=True)


def record_dataset(store: TraceStore, row: dict[str, Any]) -> None:
    """Upsert one ``training_datasets`` row (``filters`` may be a dict; it is stored as JSON)."""
    create_tables(store)
    row = {**row, "filters": json.dumps(row.get("filters"), default=str), "created_at": now()}
    with store.transaction() as db:
        db["training_datasets"].upsert(row, pk="dataset_id")


def record_checkpoint(store: TraceStore, row: dict[str, Any]) -> None:
    """Upsert one ``checkpoints`` row (``losses``, ``metrics``, ``settings`` stored as JSON)."""
    create_tables(store)
    row = {**row, "created_at": now(), **{k: json.dumps(row.get(k), default=str)
                                          for k in ("losses", "metrics", "settings")}}
    with store.transaction() as db:
        db["checkpoints"].upsert(row, pk="checkpoint_id")


def checkpoints(store: TraceStore, run_id: str) -> list[dict[str, Any]]:
    """A run's checkpoints by iteration and model."""
    if "checkpoints" not in store.db.table_names():
        return []
    return list(store.db.query("select * from checkpoints where run_id = ? order by iteration, model, created_at",
                               [run_id]))
