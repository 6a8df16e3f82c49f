"""``agora train dpo``: DPO of one pool member's LoRA adapter on preference pairs from a trace DB
(duel pairs, ALIGN pairs, or the member's own right-over-wrong answers), with TRL."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.cli._shared import check_out_path, console, new_run_id, settings_from_options, user_errors
from agora.cli._apps import train_app
from agora.traces.store import TraceStore, check_run_id, store_backend
from agora.cli._train import (DATA_ONLY_OPTION, HELD_OUT_OPTION, LORA_ALPHA_OPTION, LORA_DROPOUT_OPTION, LORA_R_OPTION,
                              THREADS_OPTION, TRAIN_OPTIONS, PAIRS, SAVE_STEPS_OPTION, SEED_OPTION, SERVE_WITH_OPTION,
                              SOURCE_RUN_OPTION, ServeWith, check_serve_with, find_spec, lora_settings, member_specs,
                              llama_threads, require_train_extra, train_and_record, verified_samples, write_data_only,
                              check_pair_sources, held_out_by_text, refuse_no_traces)


@train_app.command("dpo")
def train_dpo_cmd(
    db: str = typer.Option("agora.db", "--db", help="Trace database with duels (preference_pairs) or ALIGN runs (a "
                            "SQLite file or a postgresql:// URL)."),
    model: str = typer.Option(..., "--model", help="Pool member to train (its pairs, unless --all-pairs)."),
    out: Path = typer.Option(..., "--out", help="Output folder: dataset/, adapter/, pool.toml."),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file the member comes from (default: the "
                                        "embedded duel pool)."),
    all_pairs: bool = typer.Option(False, "--all-pairs", help="Train on every pair, not only the member's duels."),
    min_margin: float = typer.Option(0.0, "--min-margin", min=0.0, help="Drop pairs whose judge-score margin is "
                                     "smaller (ties are always dropped)."),
    validation: float = typer.Option(0.1, "--validation", min=0.0, max=0.9, help="Share of instructions held out."),
    align: bool = typer.Option(False, "--align", help="Add ALIGN pairs (correct over incorrect proposals)."),
    pairs_from: str = typer.Option("duel", "--pairs", help="duel: the DB's duel pairs (with --align, ALIGN's); own: "
                                   "the member's own right answers over its own wrong ones to the same prompt, from "
                                   "any recorded run, checked by the scorer and length-matched."),
    source_run: Optional[list[str]] = SOURCE_RUN_OPTION,
    held_out: Optional[Path] = HELD_OUT_OPTION,
    length_ratio: float = typer.Option(1.5, "--length-ratio", min=0.0, help="--pairs own: keep a pair when its "
                                       "longer answer is at most this many times the shorter (0: no filter)."),
    pairs_per_question: int = typer.Option(4, "--pairs-per-question", min=1, help="--pairs own: pairs per prompt, "
                                           "at most."),
    data_only: bool = DATA_ONLY_OPTION,
    duel_run: Optional[list[str]] = typer.Option(None, "--duel-run", help="Only pairs of these runs (repeatable)."),
    iteration: Optional[list[int]] = typer.Option(None, "--iteration", help="Only pairs of these duel iterations."),
    lr: float = typer.Option(1e-6, "--lr", help="Learning rate (paper: 1e-6; ~1e-4 for short CPU runs)."),
    beta: float = typer.Option(0.1, "--beta", help="DPO β."),
    lora_r: Optional[int] = LORA_R_OPTION,
    lora_alpha: Optional[int] = LORA_ALPHA_OPTION,
    lora_dropout: Optional[float] = LORA_DROPOUT_OPTION,
    epochs: float = typer.Option(1.0, "--epochs"), max_steps: int = typer.Option(-1, "--max-steps",
                                                                                 help="> 0 overrides --epochs."),
    batch_size: int = typer.Option(4, "--batch-size", min=1), grad_accum: int = typer.Option(1, "--grad-accum", min=1),
    max_length: int = typer.Option(1024, "--max-length", min=8, help="Prompt + answer tokens kept."),
    threads: Optional[int] = THREADS_OPTION,
    seed: int = SEED_OPTION,
    save_steps: int = SAVE_STEPS_OPTION,
    serve_with: ServeWith = SERVE_WITH_OPTION,
    run_id: Optional[str] = typer.Option(None, "--run-id"),
) -> None:
    """DPO of a LoRA adapter on the member's non-tied duel pairs; reference = its current weights."""
    with user_errors():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from agora.training.config import DPOSettings
        from agora.training.datasets import PairFilter, align_pairs, load_preference_pairs
        from agora.training.pipeline import dpo_member

        check_out_path(out)
        if pairs_from not in PAIRS:
            raise InputError(f"--pairs {pairs_from!r} is not one of {', '.join(PAIRS)}")
        if store_backend(db) is None and not Path(db).is_file():
            first = "`agora run` or `agora bench`" if pairs_from == "own" else "`agora duel`"
            raise FileNotFoundError(f"{db}: no such trace database (run {first} first)")
        refuse_no_traces(db)
        if pairs_from == "own":
            from agora.training.verified import empty_note, own_pairs, verified_stats

            given = [flag for flag, on in (("--align", align), ("--duel-run", duel_run), ("--iteration", iteration),
                                           ("--all-pairs", all_pairs), ("--min-margin", min_margin)) if on]
            if given:
                raise InputError(f"{', '.join(given)}: duel-pair options; --pairs own reads the member's own samples "
                                 "(choose them with --source-run)")

            vcfg, samples, skipped = verified_samples(db, model, source_run, held_out, length_ratio, pairs_per_question,
                                                      {"length_ratio": "length_ratio",
                                                       "max_pairs_per_question": "pairs_per_question"})
            pairs, stats = own_pairs(samples, vcfg), verified_stats(samples, vcfg, skipped)
            source = {"pairs": "own", "verified": vcfg.describe()}
            note = empty_note(stats, pairs=True)
        else:
            if source_run:
                raise InputError("--source-run chooses the runs of --pairs own; duel pairs are chosen with --duel-run")
            pairs = load_preference_pairs(db) + (align_pairs(db) if align else [])
            held = held_out_by_text(held_out, "duel and ALIGN pairs" if align else "duel pairs")
            before = len(pairs)
            pairs = [p for p in pairs if not held.excludes("", p.get("prompt"))]
            stats = {"model": model, "pairs_read": before, "held_out_pairs": before - len(pairs)}
            source = {"pairs": "duel", "align": align, "held_out_questions": len(held)}
            note = None
        flt = PairFilter(min_margin=min_margin, model=None if all_pairs else model,
                         run_ids=tuple(duel_run or ()), iterations=tuple(iteration or ()))

        def dpo_settings(spec=None) -> DPOSettings:  # checked alike with --data-only
            return settings_from_options(
                DPOSettings, {**TRAIN_OPTIONS, "beta": "beta"}, learning_rate=lr, beta=beta,
                lora=lora_settings(lora_r, lora_alpha, lora_dropout, spec), epochs=epochs, max_steps=max_steps,
                batch_size=batch_size, grad_accum=grad_accum, max_length=max_length, threads=llama_threads(threads),
                seed=seed, save_steps=save_steps)

        from agora.training.datasets import dpo_rows, split_by_instruction
        from agora.training.pipeline import check_dpo_split
        from agora.training.verified import source_runs

        if data_only:
            if pairs_from != "own":
                check_pair_sources(db, pairs, flt)
            dpo_settings()
            rows = dpo_rows(pairs, flt)
            train, val = split_by_instruction(rows, validation, seed=seed)
            write_data_only(out, {"train": train, "validation": val},
                            {**stats, "rows": len(rows), "source": source, "filter": asdict(flt),
                             "source_runs": source_runs(pairs, [r["pair_id"] for r in rows])},
                            training_check=lambda: check_dpo_split(model, rows, train, val, flt, note))
            return
        require_train_extra()
        specs = member_specs(pool)
        spec = find_spec(specs, model, pool)
        check_serve_with(spec, serve_with)
        if pairs_from != "own":  # a member or duel run in no pair: refused before any run row or model load
            check_pair_sources(db, pairs, flt)
        settings = dpo_settings(spec)
        rows = dpo_rows(pairs, flt)  # an empty training split is refused before a run is recorded
        check_dpo_split(model, rows, *split_by_instruction(rows, validation, seed=seed), flt, note)
        run_id = new_run_id("train-dpo") if run_id is None else check_run_id(run_id)
        store = TraceStore(db)
        console.print(f"run [bold]{escape(run_id)}[/bold]: DPO of {escape(model)} from {escape(shown_url(db))} "
                      f"({len(pairs)} "
                      f"{pairs_from} pairs before filters)",
                      highlight=False)
        train_and_record(
            store, run_id, "train-dpo", specs, out,
            config={"model": model, "settings": settings, "filter": flt},
            dataset={"db": shown_url(db), "align": align, **source,
                     "source_runs": source_runs(pairs, [r["pair_id"] for r in rows])},
            train=lambda: dpo_member(store, run_id, spec, pairs, out, settings, flt, validation_fraction=validation,
                                     source=source),
            summary=lambda run: {"validation_accuracy": run.validation_accuracy}, serve_with=serve_with, spec=spec,
        )
