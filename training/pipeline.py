"""One pool member trained from a trace DB: datasets exported and recorded, adapter trained, checkpoint recorded.

Shared by ``agora train`` and ``agora evolve``. Folder layout under ``out``::

    out/dataset/train.jsonl, out/dataset/validation.jsonl   (TRL conversational rows)
    out/adapter/                                             (peft adapter + tokenizer + agora_train.json)

and rows in the ``training_datasets`` and ``checkpoints`` tables (:mod:`agora.training.tables`).
Under ``accelerate launch`` every process trains and only the main process writes files and rows;
the others return a :class:`MemberRun` with an empty ``checkpoint_id``.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from agora.tasks.errors import InputError
from agora.models.pool import ModelSpec
from agora.traces.store import TraceStore, call_rows
from agora.training import tables
from agora.training.config import DPOSettings, GRPOSettings, SFTSettings
from agora.training.datasets import PairFilter, dpo_rows, export_jsonl, split_by_instruction
from agora.training.verified import source_runs
from agora.training.trainers import (
    TrainResult,
    preference_accuracy,
    train_dpo,
    train_grpo,
    train_sft,
)
from agora.training.pool_entries import trained_entry
from agora.training.resume import is_main_process


def base_of(spec: ModelSpec) -> tuple[str, str | None]:
    """``(base, adapter)`` to train pool member ``spec`` from: its GGUF (``builtin:...`` or a
    ``.gguf`` path, converted on use) and its current peft adapter, its HF folder and current adapter,
    or a vllm HF folder.

    Raises:
        ValueError: a member served over an OpenAI-compatible API, a vllm model id that is not
        a local folder (no weights to train here), or a llamacpp member whose adapter is a GGUF file.
    """
    if spec.backend == "llamacpp":
        if spec.adapter and not Path(spec.adapter).is_dir():
            raise InputError(f"model {spec.name!r}: its adapter {spec.adapter} is a GGUF LoRA, which cannot be "
                             "trained further; point 'adapter' at the peft folder it was converted from")
        return spec.path, spec.adapter
    if spec.backend == "transformers":
        return spec.path, spec.adapter
    if spec.backend == "vllm" and spec.model and Path(spec.model).is_dir():
        return spec.model, None
    raise InputError(f"model {spec.name!r} ({spec.backend}) has no local weights to train; give it a llamacpp "
                     "(GGUF) or transformers (HF folder) pool entry")


@dataclass
class MemberRun:
    """One member's training: what was trained and how it did on held-out pairs."""

    model: str
    result: TrainResult
    checkpoint_id: str
    train_rows: list[dict[str, Any]]
    validation_rows: list[dict[str, Any]]
    validation_accuracy: float | None
    """:func:`~agora.training.trainers.preference_accuracy` of the new adapter on the validation
    pairs; ``None`` without any."""
    entry: dict[str, Any]
    """The pool entry serving the adapter in the member's place."""


def _record_split(store: TraceStore, run_id: str, iteration: int | None, model: str, kind: str, split: str,
                  rows: Sequence[dict[str, Any]], path: Path, filters: Any) -> None:
    export_jsonl(rows, path)
    tables.record_dataset(store, {
        "dataset_id": f"{run_id}:{iteration}:{model}:{kind}:{split}", "run_id": run_id, "iteration": iteration,
        "model": model, "kind": kind, "split": split, "rows": len(rows),
        "instructions": len({r["instruction"] for r in rows}), "path": str(path), "filters": filters})


def _checkpoint(store: TraceStore, run_id: str, iteration: int | None, model: str, result: TrainResult,
                settings: Any, accuracy: float | None) -> str:
    checkpoint_id = f"{run_id}:{iteration}:{model}:{uuid.uuid4().hex[:6]}"
    tables.record_checkpoint(store, {
        "checkpoint_id": checkpoint_id, "run_id": run_id, "iteration": iteration, "model": model,
        "kind": result.kind, "base": result.base, "adapter": str(result.adapter_dir),
        "previous_adapter": result.previous_adapter, "rows": result.rows, "steps": result.steps,
        "final_loss": result.losses[-1] if result.losses else None, "losses": result.losses,
        "metrics": result.metrics, "validation_accuracy": accuracy, "selected": 0, "wall_s": result.wall_s,
        "cpu_s": result.cpu_s, "settings": asdict(settings)})
    return checkpoint_id


def dpo_member(store: TraceStore, run_id: str, spec: ModelSpec, pairs: Sequence[dict[str, Any]], out: Path,
               settings: DPOSettings, flt: PairFilter, *, validation_fraction: float = 0.1,
               iteration: int | None = None, source: dict[str, Any] | None = None) -> MemberRun:
    """DPO of pool member ``spec`` on the ``pairs`` passing ``flt``, split by instruction. Each split's
    ``training_datasets`` row records the filter, ``source`` (how the pairs were made) and
    ``source_runs``: the runs its pairs came from.

    Raises:
        ValueError: no training pairs left after the filters and the split.
    """
    rows = dpo_rows(pairs, flt)
    train, validation = split_by_instruction(rows, validation_fraction, seed=settings.seed)
    check_dpo_split(spec.name, rows, train, validation, flt)
    main = is_main_process()
    if main:
        for split, part in (("train", train), ("validation", validation)):
            _record_split(store, run_id, iteration, spec.name, "dpo", split, part,
                          out / "dataset" / f"{split}.jsonl",
                          {**asdict(flt), **(source or {}),
                           "source_runs": source_runs(pairs, [r["pair_id"] for r in part])})
    base, adapter = base_of(spec)
    result = train_dpo(base, train, out, settings, adapter=adapter)
    if not main:
        return MemberRun(spec.name, result, "", train, validation, None, trained_entry(spec, result, iteration))
    accuracy = (preference_accuracy(base, str(result.adapter_dir), validation, settings.threads)
                if validation else None)
    checkpoint_id = _checkpoint(store, run_id, iteration, spec.name, result, settings, accuracy)
    return MemberRun(spec.name, result, checkpoint_id, train, validation, accuracy,
                     trained_entry(spec, result, iteration))



def check_dpo_split(name: str, rows: Sequence[dict[str, Any]], train: Sequence[dict[str, Any]],
                    validation: Sequence[dict[str, Any]], flt: PairFilter, note: str | None = None) -> None:
    """Refuse a DPO dataset of member ``name`` with no training row (``agora train dpo``, with or
    without ``--data-only``). ``note``: why a dataset of the member's own pairs is empty
    (:func:`agora.training.verified.empty_note`); without it, the duel pairs' filters are named.

    Raises:
        InputError: ``train`` is empty (naming the rows after the filters and those held out)."""
    if not train and note is not None:
        raise InputError(f"no preference pairs to train {name!r} on ({len(rows)} own pairs, {len(validation)} of "
                         f"them held out for validation): {note}")
    if not train:
        raise InputError(f"no preference pairs to train {name!r} on ({len(rows)} after the filters "
                         f"{asdict(flt)}, {len(validation)} held out); run more duels or relax --min-margin")


def check_sft_rows(name: str, rows: Sequence[dict[str, Any]], note: str | None = None) -> None:
    """Refuse an empty SFT dataset of member ``name`` (``agora train sft``, ``--data-only`` too).
    ``note``: what was read (:func:`agora.training.verified.empty_note`), said instead of the general reason.

    Raises:
        InputError: no rows."""
    if not rows:
        raise InputError(f"no verified answers to train {name!r} on: " + (
            note or "none of its recorded samples is right, finished and explicit (or every question is held out)"))


def refuse_long_rows(lengths: Sequence[int], max_length: int, what: str) -> None:
    """Refuse SFT rows of which any is longer than ``max_length`` tokens (``lengths``: each row's
    tokens, :func:`agora.training.trainers.sft_row_tokens`): TRL cuts a row at ``max_length`` from its
    end, so the completion, what is learnt, would be cut first (or lost). ``what``: the rows, as the
    message names them (``"aggregator rows"``).

    Raises:
        InputError: a row over ``max_length``, in one line naming ``--max-length``, how many rows are
            over and the longest one's tokens."""
    over = [n for n in lengths if n > max_length]
    if over:
        raise InputError(f"{len(over)} of {len(lengths)} {what} are longer than --max-length {max_length} tokens "
                         f"(longest {max(over)}); raise --max-length")


def check_grpo_rows(name: str, rows: Sequence[dict[str, Any]], note: str | None = None) -> None:
    """Refuse an empty GRPO prompt set of member ``name`` (``agora train grpo``, ``--data-only`` too);
    ``note``: why it is empty, ending the message.

    Raises:
        InputError: no rows."""
    if not rows:
        raise InputError(f"no prompts to train {name!r} on" + (f": {note}" if note else ""))


def sft_member(store: TraceStore, run_id: str, spec: ModelSpec, rows: Sequence[dict[str, Any]], out: Path,
               settings: SFTSettings, *, iteration: int | None = None, source: dict[str, Any] | None = None
               ) -> MemberRun:
    """Rejection-sampling fine-tuning of pool member ``spec`` on its own verified answers (``rows``:
    :func:`agora.training.verified.sft_rows`); the ``training_datasets`` row records ``source`` and
    the runs the rows came from (``source_runs``, unless ``source`` names them: an aggregator's rows
    show candidates of more runs than their targets come from).

    Raises:
        ValueError: no rows.
    """
    check_sft_rows(spec.name, rows)
    main = is_main_process()
    if main:
        _record_split(store, run_id, iteration, spec.name, "sft", "train", rows, out / "dataset" / "train.jsonl",
                      {"source_runs": sorted({r["run_id"] for r in rows}), **(source or {})})
    base, adapter = base_of(spec)
    result = train_sft(base, rows, out, settings, adapter=adapter)
    if not main:
        return MemberRun(spec.name, result, "", list(rows), [], None, trained_entry(spec, result, iteration))
    checkpoint_id = _checkpoint(store, run_id, iteration, spec.name, result, settings, None)
    return MemberRun(spec.name, result, checkpoint_id, list(rows), [], None, trained_entry(spec, result, iteration))


def grpo_member(store: TraceStore, run_id: str, spec: ModelSpec, rows: Sequence[dict[str, Any]], out: Path,
                settings: GRPOSettings, reward_funcs: Sequence[Any], *, iteration: int | None = None,
                source: Any = None) -> MemberRun:
    """GRPO of pool member ``spec`` on prompt-only ``rows``; judge calls of online rewards (their
    ``records``) are written to ``model_calls``.

    Raises:
        ValueError: no rows.
    """
    check_grpo_rows(spec.name, rows)
    main = is_main_process()
    if main:
        _record_split(store, run_id, iteration, spec.name, "grpo", "train", rows, out / "dataset" / "train.jsonl",
                      source)
    base, adapter = base_of(spec)
    result = train_grpo(base, rows, out, reward_funcs, settings, adapter=adapter)
    if not main:  # judge calls of this process's completions stay unrecorded (the main process records its own)
        return MemberRun(spec.name, result, "", list(rows), [], None, trained_entry(spec, result, iteration))
    calls = call_rows([c for f in reward_funcs for c in getattr(f, "records", [])], run_id, f"grpo:{spec.name}",
                      "train-grpo")
    if calls:
        with store.transaction() as db:
            db["model_calls"].upsert_all(calls, pk="call_id")
    checkpoint_id = _checkpoint(store, run_id, iteration, spec.name, result, settings, None)
    return MemberRun(spec.name, result, checkpoint_id, list(rows), [], None, trained_entry(spec, result, iteration))


def select_checkpoint(store: TraceStore, checkpoint_id: str) -> None:
    """Mark a checkpoint as the one that entered the pool."""
    with store.transaction() as db:
        db["checkpoints"].update(checkpoint_id, {"selected": 1})
