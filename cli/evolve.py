"""``agora evolve``: the Stackelberg iteration (duels → datasets → training → new pool) from the CLI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.models import safe_file_name
from agora.agents.exp3 import Exp3Config
from agora.agents.judge import JudgeConfig
from agora.cli._shared import (Table, check_out_path, console, from_options, new_run_id, settings_from_options,
                               user_errors)
from agora.cli._apps import app
from agora.cli._run import member_names
from agora.cli._train import SEED_OPTION, TRAIN_OPTIONS, ServeWith, lora_settings, member_specs, require_train_extra
from agora.tasks.loaders import FORMATS, load_problems
from agora.traces.store import TraceStore, check_run_id, store_backend
from agora.models.contract import MAX_TOKENS_LIMIT

#: Progress lines printed (the duels' own events are too many on a terminal).
LOOP_EVENTS = {"iteration", "train", "skip", "selected", "kept"}


@app.command("evolve", short_help="The Stackelberg iteration: duels, preference data, LoRA training, new "
                                   "pool; T times.")
def evolve_cmd(
    instructions: Path = typer.Option(..., "--instructions", help="Instruction file (JSONL), as for agora duel."),
    fmt: str = typer.Option("prompts", "--format", help=f"One of {', '.join(FORMATS)}."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use the first N instructions."),
    iterations: int = typer.Option(8, "--iterations", "-T", min=1, help="Iterations T (duels, then training)."),
    duels: int = typer.Option(64, "--duels", "-D", min=1, help="Duels per iteration D."),
    mode: str = typer.Option("stackelberg", "--mode", help="stackelberg or sparta duels."),
    algo: str = typer.Option("dpo", "--algo", help="dpo (non-tied pairs), grpo (peer-judge reward) or sft (the "
                             "member's own right answers; --data own)."),
    data: str = typer.Option("duels", "--data", help="What dpo and sft learn from: duels (the judges' preferences) "
                             "or own (each member's own right answers over its own wrong ones to the same "
                             "instruction, checked against gold)."),
    length_ratio: float = typer.Option(1.5, "--length-ratio", min=0.0, help="--data own: longer over shorter "
                                       "answer of a pair at most (0: no filter)."),
    held_out: Optional[Path] = typer.Option(None, "--held-out", help="Problem file (JSONL with gold): every trained "
                                            "member's greedy accuracy on it before the first round and after each."),
    held_out_limit: Optional[int] = typer.Option(None, "--held-out-limit", min=1, help="Use its first N problems."),
    reward: list[str] = typer.Option(["judge"], "--reward", help="GRPO rewards: judge, correctness, stored."),
    train_models: Optional[str] = typer.Option(None, "--train-models", help="Comma-separated members to train "
                                               "(default: every member with local weights)."),
    validation: float = typer.Option(0.2, "--validation", min=0.0, max=0.9, help="Held-out share of instructions "
                                     "per member, for checkpoint selection."),
    min_margin: float = typer.Option(0.0, "--min-margin", min=0.0),
    max_tokens: int = typer.Option(64, "--max-tokens", min=1, max=MAX_TOKENS_LIMIT,
                                   help="Max tokens of a follower's answer."),
    judge_max_tokens: int = typer.Option(64, "--judge-max-tokens", min=1, max=MAX_TOKENS_LIMIT),
    judge_shots: int = typer.Option(2, "--judge-shots", min=0, max=2),
    lr: float = typer.Option(1e-6, "--lr", help="Learning rate (paper: 1e-6; ~1e-4 for short CPU runs)."),
    lora_r: int = typer.Option(64, "--lora-r", min=1), lora_alpha: int = typer.Option(16, "--lora-alpha", min=1),
    lora_dropout: float = typer.Option(0.1, "--lora-dropout", min=0.0, max=0.99),
    epochs: float = typer.Option(1.0, "--epochs"), max_steps: int = typer.Option(-1, "--max-steps"),
    batch_size: int = typer.Option(4, "--batch-size", min=1), grad_accum: int = typer.Option(1, "--grad-accum", min=1),
    num_generations: int = typer.Option(4, "--num-generations", min=2, help="GRPO completions per prompt."),
    max_completion_length: int = typer.Option(256, "--max-completion-length", min=1, help="GRPO completion cap."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1),
    seed: int = SEED_OPTION,
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file, at least 3 models (default: the "
                                        "embedded duel pool)."),
    db: str = typer.Option("agora.db", "--db", help="Trace database: a SQLite file or a postgresql:// URL."),
    out: Path = typer.Option(Path("runs/evolve"), "--out", help="Datasets, adapters and per-iteration pool files."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id; an existing id resumes its duels."),
    serve_with: ServeWith = typer.Option("transformers", "--serve-with", help="How a selected member plays the "
                                         "next iteration: transformers (dequantised weights + peft) or llamacpp "
                                         "(its GGUF + the adapter as a GGUF LoRA; HF-folder members stay on "
                                         "transformers)."),
) -> None:
    """T iterations of: D duels → each member's preference data → LoRA training → the trained
    models replace their pool entries (when they do no worse on held-out pairs) → next iteration."""
    with user_errors("duels"):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        check_out_path(out)  # a file there would stop the loop only after the first iteration's duels
        trained = member_names(train_models, "--train-models")  # before any work
        if algo == "grpo" and data == "own":
            raise InputError("--algo grpo --data own: GRPO trains on the duels' instructions, not on stored answers; "
                             "use --algo grpo --data duels (the default), --algo dpo --data own or --algo sft --data own")
        if algo == "sft" and data != "own":
            raise InputError(f"--algo sft --data {data}: SFT trains on each member's own right answers; use --algo sft "
                             "--data own, or --algo dpo / --algo grpo with --data duels")
        for flag, given, needs in (  # options the run would silently ignore
                ("--held-out-limit", held_out_limit is not None and held_out is None, "--held-out FILE"),
                ("--length-ratio", length_ratio != 1.5 and data != "own", "--data own"),
                ("--min-margin", min_margin != 0.0 and data == "own", "--data duels (the judges' score margins)"),
                ("--reward", list(reward) != ["judge"] and algo != "grpo", "--algo grpo"),
                ("--num-generations", num_generations != 4 and algo != "grpo", "--algo grpo"),
                ("--max-completion-length", max_completion_length != 256 and algo != "grpo", "--algo grpo")):
            if given:
                raise InputError(f"{flag}: an option of {needs}; here it would be ignored")
        require_train_extra()  # one line naming the extra, before any duel is played or run recorded
        from agora.models.llamacpp import default_threads
        from agora.models.pool import pool_from_specs
        from agora.graphs.duel import DuelConfig, duel_pool
        from agora.training.config import DPOSettings, GRPOSettings, SFTSettings
        from agora.training.evolve import EvolveConfig, evolve

        problems = load_problems(instructions, fmt, limit)
        if not problems:
            raise InputError(f"{instructions}: no instructions")
        specs = member_specs(pool)
        duel_pool(pool_from_specs(specs, source=str(pool or "builtin:duel")))  # >= 3 members, before any work
        common = dict(learning_rate=lr, lora=lora_settings(lora_r, lora_alpha, lora_dropout), epochs=epochs,
                      max_steps=max_steps, batch_size=batch_size, grad_accum=grad_accum,
                      threads=threads or default_threads(), seed=seed)
        from_options(DuelConfig, mode="mode", duels="duels", iterations="iterations", seed="seed",
                     max_tokens="max_tokens")
        from_options(JudgeConfig, max_tokens="judge_max_tokens", shots="judge_shots")
        duel = DuelConfig(mode=mode, duels=duels, iterations=iterations, seed=seed, max_tokens=max_tokens,
                          judge=JudgeConfig(max_tokens=judge_max_tokens, shots=judge_shots), leader=Exp3Config())
        trained_by = {k: v for k, v in TRAIN_OPTIONS.items() if k in common}  # field → the option setting it
        dpo = settings_from_options(DPOSettings, trained_by, **common)
        grpo = settings_from_options(
            GRPOSettings, {**trained_by, "num_generations": "num_generations",
                           "max_completion_length": "max_completion_length"},
            **common, num_generations=num_generations, max_completion_length=max_completion_length,
        ) if algo == "grpo" else GRPOSettings()
        sft = settings_from_options(SFTSettings, trained_by, **common) if algo == "sft" else SFTSettings()
        cfg = settings_from_options(
            EvolveConfig, {"algorithm": "algo", "train_models": "train_models", "validation_fraction": "validation",
                           "min_margin": "min_margin", "rewards": "reward", "serve_with": "serve_with",
                           "data": "data", "length_ratio": "length_ratio"},
            duel=duel, algorithm=algo, train_models=trained, validation_fraction=validation, min_margin=min_margin,
            dpo=dpo, grpo=grpo, rewards=tuple(reward), serve_with=serve_with, data=data, length_ratio=length_ratio,
            sft=sft)
        held, held_file = [], None
        if held_out is not None:
            from agora.tasks.loaders import detect_format

            held_file = (held_out, detect_format(held_out))
            held = load_problems(*held_file, held_out_limit)
        run_id = new_run_id("evolve") if run_id is None else check_run_id(run_id)
        from agora.training.evolve import check_evolve

        existing = store_backend(db) is not None or Path(db).is_file()
        # every refusal before the run line (nothing recorded; a new database is not created)
        check_evolve(TraceStore(db) if existing else None, run_id, specs, problems, cfg, held,
                     held_out_file=held_file, instructions_file=(instructions, fmt))
        store = TraceStore(db)
        console.print(f"run [bold]{escape(run_id)}[/bold]: {iterations} iterations × {duels} duels ({mode}), {algo} on "
                      f"{len(problems)} instructions, pool {escape(', '.join(s.name for s in specs))}", highlight=False)
        outcome = evolve(store, run_id, specs, problems, cfg, out / safe_file_name(run_id), held_out=held,
                         on_event=lambda e: console.print(escape(e["message"]), highlight=False)
                         if e.get("event") in LOOP_EVENTS else None)
        table = Table(title=f"evolve run {escape(run_id)}")
        for col in ("iteration", "duels", "pairs", "model", "trained", "steps", "held-out", "acc. new", "acc. current",
                    "in pool", "held-out score"):
            table.add_column(col, justify="left" if col == "model" else "right")
        for it in outcome.iterations:
            for m in it.members:
                table.add_row(str(it.iteration), str(it.duels), str(it.pairs), escape(m.model), "yes" if m.trained else "no",
                              str(m.steps), str(m.validation_pairs), _f(m.accuracy_new), _f(m.accuracy_current),
                              "new" if m.selected else "kept", _f(m.held_out_accuracy))
        console.print(table)
        if outcome.base_held_out:
            console.print("held-out score before the first round: " + ", ".join(
                f"{escape(m)} {x:.2f}" for m, x in outcome.base_held_out.items()), highlight=False)
        console.print(f"final pool: {escape(str(outcome.iterations[-1].pool_file))}; traces: {escape(shown_url(db))} "
                      f"(duel run "
                      f"{escape(outcome.duel_run_id)}, tables checkpoints and training_datasets)", highlight=False)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"
