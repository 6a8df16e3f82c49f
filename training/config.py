"""Training settings (the TRL habit: settings here, behaviour in :mod:`agora.training.trainers`).

Defaults are the Stackelberg paper's (Hahn et al., arXiv 2609.39076, App. C; protocols.md §2):
DPO β = 0.1, lr 1e-6 cosine, warmup 0.1, LoRA r = 64, α = 16, dropout 0.1 on the q, k, v, o
projections, 1 epoch; GRPO G = 4 completions per prompt, KL β = 0, clip ε = 0.2, at most 256
completion tokens. ``agora train`` scales them for CPU by flags (smaller r, fewer steps, shorter
completions, a larger learning rate for LoRA).
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated

from pydantic import model_validator

from agora.tasks.errors import InputError
from agora.models.llamacpp import default_threads
from agora.models.pool import MAX_POOL_TEMPERATURE
from agora.models.validation import Rule, is_count, is_number, settings


@settings
class LoraSettings:
    """LoRA adapter shape (peft ``LoraConfig``)."""

    r: Annotated[int, Rule(lambda v: v >= 1, "LoraSettings.r must be >= 1, got {value}")] = 64
    """Rank of the update matrices."""
    alpha: Annotated[int, Rule(lambda v: v > 0, "LoraSettings.alpha must be > 0, got {value}")] = 16
    """Scaling ``lora_alpha`` (the update is scaled by ``alpha / r``)."""
    dropout: Annotated[float, Rule(lambda v: 0.0 <= v < 1.0, "LoraSettings.dropout must be in [0, 1), got {value}")] = 0.1
    target_modules: Annotated[tuple[str, ...], Rule(bool, "LoraSettings.target_modules must name at least one module")] = ("q_proj", "k_proj", "v_proj", "o_proj")
    """Module names the adapter wraps (attention projections of Llama/Gemma-style models)."""

    def peft_config(self):
        """The peft ``LoraConfig`` for a causal LM."""
        from peft import LoraConfig

        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=list(self.target_modules), task_type="CAUSAL_LM")


#: The largest seed a trainer takes (``2**32 - 1``): ``transformers.set_seed`` seeds numpy's legacy
#: generator, which refuses a seed outside ``[0, 2**32 - 1]``, at the start of training, after any
#: earlier work (``agora evolve``'s duels); a seed outside it is refused when the settings are built.
MAX_TRAIN_SEED = 2**32 - 1


@settings
class TrainSettings:
    """Settings every trainer shares."""

    learning_rate: Annotated[float, Rule(lambda v: v > 0, "learning_rate must be > 0, got {value}")] = 1e-6
    lr_scheduler: str = "cosine"
    """A transformers scheduler name (``cosine``, ``linear``, ``constant``...)."""
    warmup_ratio: Annotated[float, Rule(lambda v: 0.0 <= v < 1.0, "warmup_ratio must be in [0, 1), got {value}")] = 0.1
    """Share of the steps spent warming the learning rate up linearly."""
    epochs: Annotated[float, Rule(is_number, "epochs must be a finite number, got {value!r}")] = 1.0
    max_steps: Annotated[int, Rule(is_count, "max_steps must be an integer, got {value!r}")] = -1
    """When > 0, train this many optimiser steps instead of ``epochs``."""
    batch_size: Annotated[int, Rule(lambda v: v >= 1, "batch_size must be >= 1, got {value}")] = 4
    """Rows per device per step (GRPO: completions per device per step)."""
    grad_accum: Annotated[int, Rule(lambda v: v >= 1, "grad_accum must be >= 1, got {value}")] = 1
    """Gradient accumulation steps."""
    max_length: Annotated[int, Rule(lambda v: v >= 1, "max_length must be >= 1, got {value}")] = 1024
    """DPO: prompt + completion tokens kept (the prompt's start is kept)."""
    seed: Annotated[int, Rule(lambda v: is_count(v) and 0 <= v <= MAX_TRAIN_SEED,
                              f"seed must be an integer in [0, {MAX_TRAIN_SEED}] (numpy's and torch's seeds are "
                              "32-bit), got {value!r}")] = 0
    """Seeds the trainer's numpy, torch and Python generators (``transformers.set_seed``), the
    validation split and the data order: an integer in ``[0, MAX_TRAIN_SEED]``."""
    threads: Annotated[int, Rule(lambda v: v >= 1, "threads must be >= 1, got {value}")] = field(default_factory=default_threads)
    """torch CPU threads (default: the cores this process may use)."""
    logging_steps: Annotated[int, Rule(lambda v: v >= 1, "logging_steps must be >= 1, got {value}")] = 1
    save_steps: Annotated[int, Rule(lambda v: v >= 0, "save_steps must be >= 0 (0: no checkpoints), got {value}")] = 0
    """When > 0, a resumable checkpoint (adapter, optimiser, scheduler, RNG states) every this many
    optimiser steps in ``<out>/trainer/checkpoint-N``; a rerun into the same folder with the same
    rows and settings resumes from the last one (:mod:`agora.training.trainers`). 0: none."""
    lora: LoraSettings = field(default_factory=LoraSettings)

    @model_validator(mode="after")
    def _some_steps(self) -> TrainSettings:
        if self.epochs <= 0 and self.max_steps <= 0:
            raise InputError("epochs must be > 0 unless max_steps is set")
        return self

    def common_args(self, output_dir: str) -> dict:
        """Keyword arguments shared by ``DPOConfig`` and ``GRPOConfig``.

        CPU (no CUDA device): ``use_cpu=True`` and no bf16; with CUDA, bf16 where supported. Nothing
        else depends on the device, so ``accelerate launch`` runs the same code on several GPUs.
        """
        import torch

        gpu = torch.cuda.is_available()
        return dict(
            output_dir=output_dir, learning_rate=self.learning_rate, lr_scheduler_type=self.lr_scheduler,
            warmup_steps=self.warmup_ratio, num_train_epochs=self.epochs, max_steps=self.max_steps,
            per_device_train_batch_size=self.batch_size, per_device_eval_batch_size=self.batch_size,
            gradient_accumulation_steps=self.grad_accum, seed=self.seed, logging_steps=self.logging_steps,
            use_cpu=not gpu, bf16=gpu and torch.cuda.is_bf16_supported(), report_to="none",
            **(dict(save_strategy="steps", save_steps=self.save_steps, save_total_limit=1) if self.save_steps
               else dict(save_strategy="no")),
            activation_checkpointing=False, dataloader_num_workers=0, disable_tqdm=True,
        )


@settings
class DPOSettings(TrainSettings):
    """DPO settings (protocols.md §2)."""

    beta: Annotated[float, Rule(lambda v: v > 0, "beta must be > 0, got {value}")] = 0.1
    """DPO temperature β: strength of the implicit KL pull towards the reference."""


@settings
class GRPOSettings(TrainSettings):
    """GRPO settings (protocols.md §2, Stackelberg GRPO)."""

    num_generations: Annotated[int, Rule(lambda v: v >= 2, "num_generations must be >= 2 (a group of one has no advantage), got {value}")] = 4
    """Completions per prompt ``G`` (the group of the group-relative advantage)."""
    max_completion_length: Annotated[int, Rule(lambda v: v >= 1, "max_completion_length must be >= 1, got {value}")] = 256
    temperature: Annotated[float, Rule(lambda v: 0 < v <= MAX_POOL_TEMPERATURE, f"temperature must be in (0, {MAX_POOL_TEMPERATURE}], got {{value}}")] = 1.0
    """Sampling temperature of the completions."""
    beta: Annotated[float, Rule(lambda v: is_number(v) and v >= 0, "beta must be a finite number >= 0, got {value!r}")] = 0.0
    """KL coefficient (0: no reference model is loaded)."""
    epsilon: Annotated[float, Rule(lambda v: is_number(v) and v > 0, "epsilon must be a finite number > 0, got {value!r}")] = 0.2
    """PPO-style clip range of the importance ratio."""

    @model_validator(mode="after")
    def _groups(self) -> GRPOSettings:
        if (self.batch_size * self.grad_accum) % self.num_generations:
            raise InputError(f"batch_size × grad_accum ({self.batch_size} × {self.grad_accum}) must be divisible by "
                             f"num_generations ({self.num_generations})")
        return self



@settings
class SFTSettings(TrainSettings):
    """Supervised fine-tuning on verified answers (rejection-sampling fine-tuning: STaR, arXiv
    2203.14465; RFT, arXiv 2308.01825). The loss is on the completion tokens only (TRL's
    ``completion_only_loss`` for prompt-completion rows); ``max_length`` keeps prompt + completion."""
