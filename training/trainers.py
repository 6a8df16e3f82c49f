"""DPO and GRPO with TRL on LoRA adapters; the trained adapter becomes a pool entry.

``train_dpo`` / ``train_grpo`` take a base model folder (an HF folder, or ``builtin:...`` converted by
:func:`agora.models.convert.export_hf`), rows from :mod:`agora.training.datasets`, an output folder
and settings (:mod:`agora.training.config`), and return a :class:`TrainResult`. The adapter lands in
``<out>/adapter`` (peft format, with the tokenizer and ``agora_train.json`` describing the run), which
``backend = "transformers"`` pool entries load in-process (:func:`agora.training.pool_entries.trained_entry`)
and vLLM serves with ``--enable-lora``.

**Reference = previous checkpoint** (protocols.md §2). First iteration: a fresh LoRA on the base
model; TRL computes the reference with the adapter disabled, i.e. the base model. Later iterations
pass ``adapter=<previous adapter>``: it is loaded trainable and TRL copies it into a frozen ``ref``
adapter (TRL ≥ 1.x DPO behaviour for a ``PeftModel`` without ``ref_model``), so the reference is the
previous iteration's model and the new adapter keeps training from it.

**Resumable** with ``settings.save_steps > 0`` (:mod:`agora.training.resume`): the trainer checkpoints every that many steps under
``<out>/trainer/`` (only the last one kept) beside ``agora_resume.json``, a fingerprint of what is
trained (base, previous adapter, rows, settings but the thread count). A rerun into the same
folder with the same fingerprint resumes from the last checkpoint (transformers' own resume: the
optimiser, scheduler, RNG states and data order are restored, so the result is the uninterrupted
one); other rows or settings start afresh and the stale checkpoints are removed. The checkpoints
are removed once the adapter is saved.

Device handling is TRL/accelerate's: ``use_cpu`` and fp32 without CUDA, bf16 with it; the torch
thread count is set explicitly. Run the same code on several GPUs with ``accelerate launch``: every
process trains, only the main one (:func:`agora.training.resume.is_main_process`) writes the adapter, datasets and trace rows.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from agora.tasks.errors import InputError
from agora.training.config import DPOSettings, GRPOSettings, SFTSettings, TrainSettings
from agora.training.resume import drop_checkpoints, resume_point, run_fingerprint

TRAIN_META = "agora_train.json"

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


class MissingTrainExtra(ImportError, InputError):
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


def sft_row_tokens(rows: Sequence[dict[str, Any]], base: str) -> list[int]:
    """Tokens of each conversational prompt-completion row (``{"prompt": [...], "completion": [...]}``)
    through ``base``'s tokenizer and chat template, the whole conversation as SFT trains on it (what
    ``SFTSettings.max_length`` bounds); loads the tokenizer only (``base``: a folder or ``builtin:...``,
    resolved as :func:`load_policy` does).

    Raises:
        OSError: unreadable folder."""
    from transformers import AutoTokenizer

    from agora.models.hf_backend import resolve_model_folder

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_folder(base))
    return [len(tokenizer.apply_chat_template([*r["prompt"], *r["completion"]], tokenize=True,
                                              return_dict=True)["input_ids"]) for r in rows]


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
        drop_checkpoints(out_dir / "trainer")
    return result



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
    fingerprint = run_fingerprint("dpo", base, adapter, [{k: r[k] for k in keep} for r in train_rows], settings)
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
    fingerprint = run_fingerprint("sft", base, adapter, [{k: r[k] for k in keep} for r in train_rows], settings)
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
        raise InputError("train_grpo needs at least one reward function")
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
    fingerprint = run_fingerprint("grpo", base, adapter, rows, settings, {"rewards": rewards, "weights": reward_weights})
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
        raise InputError("preference_accuracy needs at least one row")
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
