"""DPO and GRPO with TRL on LoRA adapters; the trained adapter becomes a pool entry.

``train_dpo`` / ``train_grpo`` take a base model folder (an HF folder, or ``builtin:...`` converted by
:func:`agora.models.convert.export_hf`), rows from :mod:`agora.training.datasets`, an output folder
and settings (:mod:`agora.training.config`), and return a :class:`TrainResult`. The adapter lands in
``<out>/adapter`` (peft format, with the tokenizer and ``agora_train.json`` describing the run), which
``backend = "transformers"`` pool entries load in-process (:func:`trained_entry`) and vLLM serves with
``--enable-lora``.

**Reference = previous checkpoint** (protocols.md §2). First iteration: a fresh LoRA on the base
model; TRL computes the reference with the adapter disabled, i.e. the base model. Later iterations
pass ``adapter=<previous adapter>``: it is loaded trainable and TRL copies it into a frozen ``ref``
adapter (TRL ≥ 1.x DPO behaviour for a ``PeftModel`` without ``ref_model``), so the reference is the
previous iteration's model and the new adapter keeps training from it.

**Resumable** with ``settings.save_steps > 0``: the trainer checkpoints every that many steps under
``<out>/trainer/`` (only the last one kept) beside ``agora_resume.json``, a fingerprint of what is
trained (base, previous adapter, rows, settings but the thread count). A rerun into the same
folder with the same fingerprint resumes from the last checkpoint (transformers' own resume: the
optimiser, scheduler, RNG states and data order are restored, so the result is the uninterrupted
one); other rows or settings start afresh and the stale checkpoints are removed. The checkpoints
are removed once the adapter is saved.

Device handling is TRL/accelerate's: ``use_cpu`` and fp32 without CUDA, bf16 with it; the torch
thread count is set explicitly. Run the same code on several GPUs with ``accelerate launch``: every
process trains, only the main one (:func:`is_main_process`) writes the adapter, datasets and trace rows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from agora.training.config import DPOSettings, GRPOSettings, SFTSettings, TrainSettings

TRAIN_META = "agora_train.json"
RESUME_META = "agora_resume.json"

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What one training run produced."""

    kind: Literal["dpo", "grpo", "sft"]
    adapter_dir: Path
    """The saved peft adapter (load with ``PeftModel.from_pretrained(base, adapter_dir)``)."""
    base: str
    """Base model folder (or ``builtin:...``)."""
    previous_adapter: str | None
    """Adapter the run started from (its reference model), ``None`` for the base model."""
    rows: int
    """Training rows (DPO pairs or GRPO prompts)."""
    steps: int
    """Optimiser steps taken."""
    losses: list[float]
    """Training loss at each logged step."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Final training metrics and, with a validation set, ``eval_*`` metrics."""
    log_history: list[dict[str, Any]] = field(default_factory=list)
    """TRL's per-step logs (rewards, ``frac_reward_zero_std``, KL, ...)."""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    """CPU seconds of this process during training (all threads)."""

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["adapter_dir"] = str(self.adapter_dir)
        return d


def train_dtype() -> str:
    """Weight dtype for training: ``bfloat16`` on a CUDA device that supports it (the trainer's
    ``bf16`` mixed precision, :meth:`TrainSettings.common_args`), ``float32`` otherwise (CPU)."""
    import torch

    return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"


#: The packages of the ``train`` extra that training imports (pyproject.toml).
TRAIN_EXTRA = ("torch", "transformers", "trl", "peft", "datasets", "accelerate")


class MissingTrainExtra(ImportError, ValueError):
    """The ``train`` extra is not installed: one line naming the missing packages and the install command
    (a ``ValueError`` too, so the CLI prints it as a user error)."""


def check_train_extra() -> None:
    """Import the ``train`` extra's packages, so that a command that trains fails before it records
    anything.

    Raises:
        MissingTrainExtra: a package is missing (or fails to import), e.g. ``training needs the 'train'
        extra (missing: trl): pip install 'agora-llm[train]' (or -e '.[train]' in a checkout)``.
    """
    import importlib

    missing = []
    for name in TRAIN_EXTRA:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingTrainExtra(f"training needs the 'train' extra (missing: {', '.join(missing)}): "
                                "pip install 'agora-llm[train]' (or -e '.[train]' in a checkout)")


def load_policy(base: str, adapter: str | None = None, threads: int | None = None):
    """``(model, tokenizer)`` for training: base weights in :func:`train_dtype` (fp32 on CPU, bf16 on a
    CUDA GPU; the trainer moves the model to its device), ``adapter`` loaded trainable when given.

    Raises:
        OSError: unreadable folder or adapter.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agora.models.hf_backend import resolve_model_folder

    if threads:
        torch.set_num_threads(threads)
    folder = resolve_model_folder(base)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, train_dtype()))
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
    return model, tokenizer


def _fingerprint(kind: str, base: str, adapter: str | None, rows: Sequence[dict[str, Any]],
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
    run without the fingerprint file.
    """
    trainer_dir = Path(trainer_dir)
    meta = trainer_dir / RESUME_META
    stale = _checkpoints(trainer_dir)
    if save_steps:
        same = meta.is_file() and json.loads(meta.read_text(encoding="utf-8")).get("fingerprint") == fingerprint
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
    _drop_checkpoints(trainer_dir)
    if save_steps:
        trainer_dir.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps({"fingerprint": fingerprint}), encoding="utf-8")
    return None


def _drop_checkpoints(trainer_dir: Path) -> None:
    for p in _checkpoints(trainer_dir):
        shutil.rmtree(p)
    (trainer_dir / RESUME_META).unlink(missing_ok=True)


def _finish(kind: str, trainer, tokenizer, out_dir: Path, base: str, adapter: str | None, rows: int,
            settings: TrainSettings, eval_rows: int, start: tuple[float, float]) -> TrainResult:
    metrics = {k: float(v) for k, v in trainer.state.log_history[-1].items() if isinstance(v, (int, float))}
    if eval_rows:
        metrics.update({k: float(v) for k, v in trainer.evaluate().items() if isinstance(v, (int, float))})
    adapter_dir = out_dir / "adapter"
    main = trainer.accelerator.is_main_process
    if main:
        trainer.model.save_pretrained(adapter_dir, selected_adapters=["default"])
        tokenizer.save_pretrained(adapter_dir)
    losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]
    result = TrainResult(kind=kind, adapter_dir=adapter_dir, base=base, previous_adapter=adapter, rows=rows,
                         steps=int(trainer.state.global_step), losses=losses, metrics=metrics,
                         log_history=list(trainer.state.log_history),
                         wall_s=time.perf_counter() - start[0], cpu_s=time.process_time() - start[1])
    if main:
        (adapter_dir / TRAIN_META).write_text(json.dumps(
            {**result.describe(), "settings": asdict(settings), "log_history": None}, indent=2, default=str))
    trainer.accelerator.wait_for_everyone()
    if main:
        _drop_checkpoints(out_dir / "trainer")
    return result


def is_main_process() -> bool:
    """True in a plain run, and only in the global rank-0 process of an ``accelerate launch`` or
    ``torchrun`` run (which alone writes files and trace rows; every process trains).

    Read from the launcher's ``RANK`` variable, so calling it does not initialise accelerate's
    state before the trainer chooses its device.
    """
    return int(os.environ.get("RANK", "0")) == 0


def _check_finite(kind: str, losses: Sequence[float]) -> None:
    if any(not math.isfinite(x) for x in losses):
        raise FloatingPointError(f"{kind}: training loss became non-finite ({list(losses)}); lower the learning rate")


def train_dpo(base: str, train_rows: Sequence[dict[str, Any]], out_dir: str | Path,
              settings: DPOSettings = DPOSettings(), *, eval_rows: Sequence[dict[str, Any]] = (),
              adapter: str | None = None, callbacks: Sequence[Any] = ()) -> TrainResult:
    """DPO (TRL ``DPOTrainer``, sigmoid loss, Rafailov et al. 2023 Eq. 7) of a LoRA adapter.

    Args:
        base: base model folder or ``builtin:...``.
        train_rows / eval_rows: conversational preference rows (:func:`agora.training.datasets.dpo_rows`).
        out_dir: run folder; the adapter goes to ``out_dir/adapter``.
        settings: :class:`~agora.training.config.DPOSettings`.
        adapter: previous iteration's adapter: trained further, and the reference model.
        callbacks: transformers ``TrainerCallback`` objects added to the trainer's.

    With ``settings.save_steps`` a rerun into ``out_dir`` resumes (module docstring).

    Raises:
        ValueError: no training rows. FloatingPointError: a non-finite loss.
    """
    from trl import DPOConfig, DPOTrainer

    from agora.training.datasets import to_dataset

    start = (time.perf_counter(), time.process_time())
    out_dir = Path(out_dir)
    model, tokenizer = load_policy(base, adapter, settings.threads)
    keep = ("prompt", "chosen", "rejected")  # TRL's columns; the metadata stays in the exported files
    train = to_dataset([{k: r[k] for k in keep} for r in train_rows])
    evals = to_dataset([{k: r[k] for k in keep} for r in eval_rows]) if eval_rows else None
    args = DPOConfig(**settings.common_args(str(out_dir / "trainer")), beta=settings.beta,
                     max_length=settings.max_length, eval_strategy="no")
    trainer = DPOTrainer(model=model, args=args, train_dataset=train, eval_dataset=evals,
                         processing_class=tokenizer, peft_config=None if adapter else settings.lora.peft_config(),
                         callbacks=list(callbacks) or None)
    fingerprint = _fingerprint("dpo", base, adapter, [{k: r[k] for k in keep} for r in train_rows], settings)
    trainer.train(resume_from_checkpoint=resume_point(out_dir / "trainer", fingerprint, settings.save_steps))
    result = _finish("dpo", trainer, tokenizer, out_dir, base, adapter, len(train), settings, len(eval_rows), start)
    _check_finite("dpo", result.losses)
    return result


def train_sft(base: str, train_rows: Sequence[dict[str, Any]], out_dir: str | Path,
              settings: SFTSettings = SFTSettings(), *, adapter: str | None = None,
              callbacks: Sequence[Any] = ()) -> TrainResult:
    """Supervised fine-tuning (TRL ``SFTTrainer``, loss on the completion tokens) of a LoRA adapter on
    conversational prompt-completion rows (:func:`agora.training.verified.sft_rows`): rejection-sampling
    fine-tuning on a member's own verified answers (STaR, arXiv 2203.14465; RFT, arXiv 2308.01825).

    Args:
        base: base model folder or ``builtin:...``.
        train_rows: ``{"prompt": [...messages...], "completion": [{"role": "assistant", ...}]}`` rows.
        out_dir: run folder; the adapter goes to ``out_dir/adapter``.
        adapter: a previous adapter, trained further.

    With ``settings.save_steps`` a rerun into ``out_dir`` resumes (module docstring).

    Raises:
        ValueError: no training rows. FloatingPointError: a non-finite loss.
    """
    from trl import SFTConfig, SFTTrainer

    from agora.training.datasets import to_dataset

    start = (time.perf_counter(), time.process_time())
    out_dir = Path(out_dir)
    keep = ("prompt", "completion")  # TRL's columns; the metadata stays in the exported files
    train = to_dataset([{k: r[k] for k in keep} for r in train_rows])
    model, tokenizer = load_policy(base, adapter, settings.threads)
    args = SFTConfig(**settings.common_args(str(out_dir / "trainer")), max_length=settings.max_length,
                     completion_only_loss=True, eval_strategy="no")
    trainer = SFTTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer,
                         peft_config=None if adapter else settings.lora.peft_config(),
                         callbacks=list(callbacks) or None)
    fingerprint = _fingerprint("sft", base, adapter, [{k: r[k] for k in keep} for r in train_rows], settings)
    trainer.train(resume_from_checkpoint=resume_point(out_dir / "trainer", fingerprint, settings.save_steps))
    result = _finish("sft", trainer, tokenizer, out_dir, base, adapter, len(train), settings, 0, start)
    _check_finite("sft", result.losses)
    return result


RewardFunc = Callable[..., list]


def train_grpo(base: str, rows: Sequence[dict[str, Any]], out_dir: str | Path, reward_funcs: Sequence[RewardFunc],
               settings: GRPOSettings = GRPOSettings(), *, adapter: str | None = None,
               reward_weights: Sequence[float] | None = None, callbacks: Sequence[Any] = ()) -> TrainResult:
    """GRPO (TRL ``GRPOTrainer``; Shao et al. 2024, DeepSeekMath Eq. 3) of a LoRA adapter.

    Args:
        base: base model folder or ``builtin:...``.
        rows: prompt-only rows (:mod:`agora.training.datasets`); their columns reach the rewards.
        reward_funcs: TRL reward callables (:mod:`agora.training.rewards`).
        settings: :class:`~agora.training.config.GRPOSettings` (``batch_size × grad_accum`` must be
            divisible by ``num_generations``).
        adapter: previous iteration's adapter, trained further.
        reward_weights: one weight per reward function (default 1 each).
        callbacks: transformers ``TrainerCallback`` objects added to the trainer's.

    With ``settings.save_steps`` a rerun into ``out_dir`` resumes (module docstring).

    Raises:
        ValueError: no rows or no reward function. FloatingPointError: a non-finite loss.
    """
    from trl import GRPOConfig, GRPOTrainer

    from agora.training.datasets import to_dataset

    if not reward_funcs:
        raise ValueError("train_grpo needs at least one reward function")
    start = (time.perf_counter(), time.process_time())
    out_dir = Path(out_dir)
    model, tokenizer = load_policy(base, adapter, settings.threads)
    train = to_dataset(list(rows))
    args = GRPOConfig(**settings.common_args(str(out_dir / "trainer")), num_generations=settings.num_generations,
                      max_completion_length=settings.max_completion_length, temperature=settings.temperature,
                      beta=settings.beta, epsilon=settings.epsilon,
                      reward_weights=list(reward_weights) if reward_weights is not None else None)
    trainer = GRPOTrainer(model=model, reward_funcs=list(reward_funcs), args=args, train_dataset=train,
                          processing_class=tokenizer, peft_config=None if adapter else settings.lora.peft_config(),
                          callbacks=list(callbacks) or None)
    rewards = [getattr(f, "__name__", repr(f)) for f in reward_funcs]
    fingerprint = _fingerprint("grpo", base, adapter, rows, settings, {"rewards": rewards, "weights": reward_weights})
    trainer.train(resume_from_checkpoint=resume_point(out_dir / "trainer", fingerprint, settings.save_steps))
    result = _finish("grpo", trainer, tokenizer, out_dir, base, adapter, len(train), settings, 0, start)
    _check_finite("grpo", result.losses)
    return result


def preference_accuracy(base: str, adapter: str | None, rows: Sequence[dict[str, Any]],
                        threads: int | None = None) -> float:
    """Share of preference rows whose chosen answer the model finds likelier than the rejected one.

    Compares ``log π(chosen | prompt)`` with ``log π(rejected | prompt)`` (sums of token
    log-probabilities, both rendered with the tokenizer's chat template as TRL renders them).
    Reference-free, so checkpoints trained against different references compare on the same
    held-out pairs (checkpoint selection in ``agora evolve``). Equal log-probabilities count as wrong.

    Raises:
        ValueError: no rows.
    """
    import torch

    if not rows:
        raise ValueError("preference_accuracy needs at least one row")
    model, tokenizer = load_policy(base, adapter, threads)
    if torch.cuda.is_available():
        model.to("cuda")
    model.eval()

    def logp(prompt: list[dict], completion: list[dict]) -> float:
        prompt_ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                   return_dict=True)["input_ids"]
        full = tokenizer.apply_chat_template(prompt + completion, tokenize=True, return_dict=True)["input_ids"]
        start = next((i for i, (a, b) in enumerate(zip(prompt_ids, full)) if a != b), min(len(prompt_ids), len(full)))
        ids = torch.tensor([full], device=model.device)
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0, :-1].float()
        token_logps = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0]
        return float(token_logps[max(start, 1) - 1:].sum())

    right = sum(logp(r["prompt"], r["chosen"]) > logp(r["prompt"], r["rejected"]) for r in rows)
    return right / len(rows)


#: Spec fields a trained entry keeps from the member it replaces (persona, sampling, cost, labels).
_KEPT = ("name", "family", "system_prompt", "temperature", "max_retries", "cost_per_1k_tokens", "prompt_format")


def trained_entry(spec, result: TrainResult, iteration: int | None = None, *,
                  backend: str = "transformers") -> dict[str, Any]:
    """The ``[[models]]`` entry serving ``result``'s adapter in place of pool member ``spec``.

    Same name, persona and sampling settings as ``spec``, and the ``iteration`` it came from.
    ``backend = "transformers"``: the base folder (or ``builtin:...``, dequantised) and the adapter,
    in-process on CPU or GPU. ``backend = "llamacpp"``: the member's GGUF with the adapter applied by
    llama.cpp (converted once to ``<adapter>/adapter.gguf``, :mod:`agora.models.lora_gguf`): the
    quantised weights the pool served before training, at llama.cpp's speed.

    Raises:
        ValueError: ``llamacpp`` for a model trained from an HF folder (no GGUF to apply it to), or
            an unknown backend.
    """
    if backend not in ("transformers", "llamacpp"):
        raise ValueError(f"backend {backend!r}: a trained member is served by 'transformers' or 'llamacpp'")
    entry = {k: getattr(spec, k) for k in _KEPT if getattr(spec, k) not in (None, "")}
    # Absolute paths: a pool file reads relative paths relative to itself, not to the working directory.
    base = result.base if result.base.startswith("builtin:") else str(Path(result.base).resolve())
    if backend == "llamacpp":
        from agora.models.convert import is_gguf_source

        if not is_gguf_source(base):
            raise ValueError(f"model {spec.name!r} was trained from {base}, not a GGUF: llama.cpp cannot serve its "
                             "adapter (use backend 'transformers')")
        if getattr(spec, "backend", None) == "llamacpp":
            entry["n_ctx"] = spec.n_ctx
    entry.update(backend=backend, path=base, adapter=str(Path(result.adapter_dir).resolve()))
    if iteration is not None:
        entry["iteration"] = iteration
    return entry


def spec_entry(spec) -> dict[str, Any]:
    """A pool member's spec as a ``[[models]]`` entry (its ``extra`` keys back at the top level)."""
    d = spec.describe()
    return {**{k: v for k, v in d.items() if k != "extra"}, **d.get("extra", {})}


def write_pool_file(entries: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ``[[models]]`` entries as a TOML pool file (scalars, lists, and one level of tables)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(str(v), ensure_ascii=False)  # a TOML basic string

    lines = []
    for e in entries:
        lines.append("[[models]]")
        lines += [f"{k} = {value(v)}" for k, v in e.items() if v is not None and not isinstance(v, dict)]
        for k, table in ((k, v) for k, v in e.items() if isinstance(v, dict)):
            lines.append(f"[models.{k}]")
            lines += [f"{tk} = {value(tv)}" for tk, tv in table.items() if tv is not None]
        lines.append("")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
