"""``agora train sft``: rejection-sampling SFT of one pool member's LoRA adapter on its own
verified answers (or, with ``--teacher``, another member's: distillation; or, with ``--aggregate K``,
as an aggregator on right candidates of recorded candidate sets) from any recorded run, with TRL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional

import typer
from rich.markup import escape

from agora.cli._shared import MAX_SHOTS, check_out_path, console, new_run_id, settings_from_options, user_errors
from agora.cli._apps import train_app
from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.traces.store import TraceStore, check_run_id, store_backend
from agora.cli._train import (DATA_ONLY_OPTION, HELD_OUT_OPTION, LORA_ALPHA_OPTION, LORA_DROPOUT_OPTION, LORA_R_OPTION,
                              THREADS_OPTION, TRAIN_OPTIONS, SAVE_STEPS_OPTION, SEED_OPTION, SERVE_WITH_OPTION,
                              SOURCE_RUN_OPTION, EASY_PER_HARD_OPTION, SETS_PER_QUESTION_OPTION, ServeWith,
                              aggregate_sets, check_row_lengths, check_serve_with, find_spec, lora_settings,
                              member_specs, llama_threads, refuse_aggregate_only, require_train_extra,
                              train_and_record, verified_samples, write_data_only)


@train_app.command("sft")
def train_sft_cmd(
    db: str = typer.Option("agora.db", "--db", help="Trace database whose runs recorded the member's samples (a "
                            "SQLite file or a postgresql:// URL)."),
    model: str = typer.Option(..., "--model", help="Pool member trained (on its own right answers, unless --teacher)."),
    teacher: Optional[str] = typer.Option(None, "--teacher", help="Member whose recorded right answers --model is "
                                          "trained on instead of its own (distillation; e.g. a larger member)."),
    out: Path = typer.Option(..., "--out", help="Output folder: dataset/, adapter/, pool.toml."),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file the member comes from (default: the "
                                        "embedded duel pool)."),
    source_run: Optional[list[str]] = SOURCE_RUN_OPTION,
    held_out: Optional[Path] = HELD_OUT_OPTION,
    per_question: int = typer.Option(4, "--per-question", min=1, help="Distinct right answers per prompt, at most."),
    aggregate: int = typer.Option(0, "--aggregate", min=0, help="Train an aggregator by rejection sampling: "
                                  "prompts show K recorded samples of a --db question (any model), as grpo "
                                  "--aggregate shows them; the target is a right, finished, explicit one of them "
                                  "(sets without one give no row) (0: off)."),
    target: Literal["text", "answer"] = typer.Option(
        "text", "--target", help="--aggregate: what a row teaches: text (a right candidate's whole text) or answer "
        "(only 'The answer is N.' of a right candidate: the loss falls on the choice; any right candidate counts)."),
    sets_per_question: int = SETS_PER_QUESTION_OPTION,
    easy_per_hard: float = EASY_PER_HARD_OPTION,
    shots: int = typer.Option(2, "--shots", min=0, max=MAX_SHOTS, help="--aggregate: worked exemplars in the "
                              "prompts (as MoA's --shots, where the aggregator serves)."),
    name: Optional[str] = typer.Option(None, "--name", help="Name of the trained member in OUT/pool.toml, beside the "
                                       "untouched pool (default: it replaces --model)."),
    data_only: bool = DATA_ONLY_OPTION,
    lr: float = typer.Option(1e-4, "--lr", help="Learning rate (LoRA)."),
    lora_r: Optional[int] = LORA_R_OPTION,
    lora_alpha: Optional[int] = LORA_ALPHA_OPTION,
    lora_dropout: Optional[float] = LORA_DROPOUT_OPTION,
    epochs: float = typer.Option(1.0, "--epochs"), max_steps: int = typer.Option(-1, "--max-steps",
                                                                                 help="> 0 overrides --epochs."),
    batch_size: int = typer.Option(4, "--batch-size", min=1), grad_accum: int = typer.Option(1, "--grad-accum", min=1),
    max_length: int = typer.Option(1024, "--max-length", min=8, help="Prompt + answer tokens kept (--aggregate: a "
                                   "longer row is refused before training; not checked with --data-only)."),
    threads: Optional[int] = THREADS_OPTION,
    seed: int = SEED_OPTION,
    save_steps: int = SAVE_STEPS_OPTION,
    serve_with: ServeWith = SERVE_WITH_OPTION,
    run_id: Optional[str] = typer.Option(None, "--run-id"),
) -> None:
    """Rejection-sampling fine-tuning (STaR, RFT): SFT of a LoRA on the member's own right answers.

    The answers are the member's recorded samples (any run of --db) that the scorer finds right,
    finished and explicit; --held-out keeps evaluation questions out. With --teacher, they are that
    member's samples instead (rejection-sampling distillation), and --model is the one trained.

    With --aggregate K, --model is trained as an aggregator: each prompt shows K recorded samples
    of a --db question (any model's; hard and easy sets mixed as in grpo --aggregate) and the target
    is a right, finished, explicit one (--target answer: only the sentence naming a right candidate's
    answer); serve it as MoA's --aggregator (--name keeps the base)."""
    with user_errors():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from agora.training.verified import empty_note, sft_rows, verified_stats

        check_out_path(out)
        own_only = {"--teacher": teacher is not None, "--per-question": per_question != 4}
        if aggregate and any(own_only.values()):
            raise InputError("--aggregate imitates a right candidate of each candidate set (any model's samples): "
                             f"drop {', '.join(flag for flag, given in own_only.items() if given)}")
        refuse_aggregate_only(aggregate, {"--target": target != "text", "--sets-per-question": sets_per_question != 2,
                                          "--easy-per-hard": easy_per_hard != 1.0, "--shots": shots != 2})
        if store_backend(db) is None and not Path(db).is_file():
            raise FileNotFoundError(f"{db}: no such trace database (run `agora run`, `agora bench` or `agora comed` "
                                    "first)")
        if aggregate:
            rows, source, stats, note = aggregator_sft_data(db, model, aggregate, sets_per_question, easy_per_hard,
                                                            source_run, held_out, shots, seed, target)
        else:
            answers_of = teacher if teacher is not None else model
            vcfg, samples, skipped = verified_samples(db, answers_of, source_run, held_out, per_question=per_question,
                                                      model_option="--teacher" if teacher is not None else "--model")
            rows, stats = sft_rows(samples, vcfg), verified_stats(samples, vcfg, skipped)
            source = {"verified": vcfg.describe(), **({"teacher": teacher} if teacher is not None else {})}
            note = empty_note(stats, pairs=False)
        from agora.training.config import SFTSettings
        from agora.training.pipeline import check_sft_rows

        def sft_settings(spec=None) -> SFTSettings:  # checked alike with --data-only
            return settings_from_options(
                SFTSettings, TRAIN_OPTIONS, learning_rate=lr, lora=lora_settings(lora_r, lora_alpha, lora_dropout, spec),
                epochs=epochs, max_steps=max_steps, batch_size=batch_size, grad_accum=grad_accum,
                max_length=max_length, threads=llama_threads(threads), seed=seed, save_steps=save_steps)

        if data_only:
            sft_settings()
            runs = {} if aggregate else {"source_runs": stats["sft_runs"]}  # (--aggregate: every candidate's)
            write_data_only(out, {"train": rows}, {**stats, "rows": len(rows), "source": source, **runs},
                            training_check=lambda: check_sft_rows(model, rows, note))
            return
        require_train_extra()
        from agora.training.pipeline import sft_member

        specs = member_specs(pool)
        spec = find_spec(specs, model, pool)
        check_serve_with(spec, serve_with)
        if name is not None and name != model and name in {s.name for s in specs}:
            raise InputError(f"--name {name!r} is another member of the pool; give the trained member a new name")
        settings = sft_settings(spec)
        check_sft_rows(model, rows, note)  # before a run is recorded
        if aggregate:  # (TRL would cut a longer row's completion)
            check_row_lengths(rows, spec, max_length, "aggregator rows")
        run_id = new_run_id("train-sft") if run_id is None else check_run_id(run_id)
        store = TraceStore(db)
        if aggregate:
            what = f"as an aggregator ({aggregate} candidates a prompt) on {len(rows)} right candidates"
        else:
            whose = "its own" if teacher is None else f"{escape(teacher)}'s"
            what = f"on {len(rows)} of {whose} verified answers"
        console.print(f"run [bold]{escape(run_id)}[/bold]: SFT of {escape(model)} {what} from "
                      f"{escape(shown_url(db))}", highlight=False)
        config = {"model": model, **({"teacher": teacher} if teacher is not None else {}), "settings": settings,
                  **({"aggregate": aggregate, "recipe": "sft", "target": target} if aggregate else {})}
        train_and_record(
            store, run_id, "train-sft", specs, out, config=config,
            dataset=source if aggregate else {"db": shown_url(db), **source, "source_runs": stats["sft_runs"]},
            train=lambda: sft_member(store, run_id, spec, rows, out, settings, source=source),
            serve_with=serve_with, spec=spec, name=name,
        )


def aggregator_sft_data(db: str, model: str, k: int, sets_per_question: int, easy_per_hard: float,
                        source_run: list[str] | None, held_out: Path | None, shots: int, seed: int,
                        target: str = "text"):
    """``(rows, source, stats, note)`` of ``agora train sft --aggregate K``: the candidate sets of
    :func:`~agora.cli._train.aggregate_sets` made SFT rows for ``model``
    (:func:`~agora.training.aggregator.aggregator_sft_rows`, its ``target``); ``source`` adds
    ``recipe: "sft"``, ``target`` and ``sets`` (drawn; those without a usable right candidate give no row), ``stats`` adds
    ``rows_by_difficulty``; ``note``: why there is no row, or ``None``.

    Raises:
        InputError: as :func:`~agora.cli._train.aggregate_sets`."""
    from collections import Counter

    from agora.training.aggregator import aggregator_sft_rows

    sets, cfg, source, stats = aggregate_sets(db, k, sets_per_question, easy_per_hard, source_run, held_out, shots,
                                              seed)
    rows = aggregator_sft_rows(sets, cfg, model=model, target=target)
    note = stats.pop("empty_note", None)
    if sets and not rows:
        what = "right, finished, explicit candidate to imitate" if target == "text" else "right candidate to name"
        note = f"none of the {len(sets)} candidate sets drawn holds a {what}"
    stats["rows_by_difficulty"] = dict(Counter(r["difficulty"] for r in rows))
    return rows, {**source, "recipe": "sft", "target": target, "sets": len(sets)}, stats, note
