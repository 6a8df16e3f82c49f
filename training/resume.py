"""Resuming an interrupted training run: the fingerprint of what a run trains, the checkpoint to
resume from (:func:`resume_point`), the removal of stale checkpoints, and :func:`is_main_process`
(only rank 0 of a multi-process run touches the folder).

The trainer checkpoints every ``settings.save_steps`` steps under ``<out>/trainer/`` beside
``agora_resume.json`` (:data:`RESUME_META`); a rerun with the same fingerprint resumes from the last
checkpoint (transformers' own resume), other rows or settings start afresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from agora.training.config import TrainSettings

RESUME_META = "agora_resume.json"

log = logging.getLogger("agora.training.trainers")


def run_fingerprint(kind: str, base: str, adapter: str | None, rows: Sequence[dict[str, Any]],
                 settings: TrainSettings, extra: Any = None) -> str:
    """sha256 of what a run trains: a checkpoint resumes only a run with the same one."""
    what = {k: v for k, v in asdict(settings).items() if k not in ("threads", "save_steps", "logging_steps")}
    blob = json.dumps({"kind": kind, "base": base, "adapter": adapter, "rows": list(rows), "settings": what,
                       "extra": extra}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _checkpoints(trainer_dir: Path) -> list[Path]:
    return sorted(p for p in trainer_dir.glob("checkpoint-*") if p.is_dir())


def resume_point(trainer_dir: str | Path, fingerprint: str, save_steps: int) -> str | None:
    """The checkpoint to resume from, or ``None`` (and the folder readied for a fresh run).

    With ``save_steps`` 0 nothing is resumed. A folder whose ``agora_resume.json`` names another
    fingerprint holds another run's checkpoints: they are removed (logged), as is anything left by a
    run without a readable fingerprint file (:func:`recorded_fingerprint`).
    """
    trainer_dir = Path(trainer_dir)
    meta = trainer_dir / RESUME_META
    stale = _checkpoints(trainer_dir)
    if save_steps:
        same = recorded_fingerprint(meta) == fingerprint
        if same and stale:
            from transformers.trainer_utils import get_last_checkpoint

            last = get_last_checkpoint(str(trainer_dir))
            if last:
                log.info("resuming training from %s", last)
                return last
    if not is_main_process():  # under accelerate launch only rank 0 touches the folder
        return None
    if save_steps and stale:
        log.warning("%s: checkpoints of another training run (other rows or settings) removed: %s",
                    trainer_dir, ", ".join(p.name for p in stale))
    drop_checkpoints(trainer_dir)
    if save_steps:
        trainer_dir.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps({"fingerprint": fingerprint}), encoding="utf-8")
    return None


def recorded_fingerprint(meta: Path) -> str | None:
    """The fingerprint ``agora_resume.json`` (``meta``) records; ``None`` when the file is missing or
    unreadable (cut short by an interruption while it was written, or not the JSON object Agora
    writes): the checkpoints beside it are then another run's, removed rather than resumed."""
    try:
        recorded = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8
        return None
    return recorded.get("fingerprint") if isinstance(recorded, dict) else None


def drop_checkpoints(trainer_dir: Path) -> None:
    for p in _checkpoints(trainer_dir):
        shutil.rmtree(p)
    (trainer_dir / RESUME_META).unlink(missing_ok=True)



def is_main_process() -> bool:
    """True in a plain run, and only in the global rank-0 process of an ``accelerate launch`` or
    ``torchrun`` run (which alone writes files and trace rows; every process trains).

    Read from the launcher's ``RANK`` variable, so calling it does not initialise accelerate's
    state before the trainer chooses its device.
    """
    return int(os.environ.get("RANK", "0")) == 0
