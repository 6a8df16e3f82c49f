"""``agora train grpo``: GRPO of one pool member's LoRA adapter on prompts from a trace DB, with
the rewards ``--reward`` names (or AggLM aggregation with ``--aggregate``), with TRL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.agents.judge import JudgeConfig
from agora.models.pool import load_pool
from agora.cli._shared import (MAX_SHOTS, MAX_TEMPERATURE, check_out_path, console, new_run_id, nonempty_path,
                               settings_from_options, user_errors)
from agora.cli._apps import train_app
from agora.traces.store import TraceStore, check_run_id, store_backend
from agora.cli._train import (DATA_ONLY_OPTION, HELD_OUT_OPTION, LORA_ALPHA_OPTION, LORA_DROPOUT_OPTION, LORA_R_OPTION,
                              THREADS_OPTION, SAVE_STEPS_OPTION, SEED_OPTION, SERVE_WITH_OPTION, TRAIN_OPTIONS,
                              SOURCE_RUN_OPTION, ServeWith, check_serve_with, find_spec, lora_settings, member_specs,
                              EASY_PER_HARD_OPTION, SETS_PER_QUESTION_OPTION, aggregate_sets, held_out_by_text,
                              held_out_set, llama_threads, refuse_aggregate_only, require_train_extra,
                              refuse_no_traces, train_and_record, write_data_only)


REWARDS = ("correctness", "stored", "judge")


@train_app.command("grpo")
def train_grpo_cmd(
    db: str = typer.Option("agora.db", "--db", help="Trace database (a SQLite file or a postgresql:// URL): duel "
                           "instructions are the prompts (unless --data), and the run is recorded there."),
    model: str = typer.Option(..., "--model", help="Pool member to train."),
    out: Path = typer.Option(..., "--out", help="Output folder: dataset/, adapter/, pool.toml."),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file (members, and the judges of --reward judge)."),
    reward: list[str] = typer.Option(["correctness"], "--reward", help=f"Reward(s): {', '.join(REWARDS)} "
                                     "(judge: the pool's other members score online)."),
    data: Optional[Path] = typer.Option(None, "--data", parser=nonempty_path, metavar="<path>",
                                        help="Problem file (JSONL) with gold answers as prompts; "
                                        "'synthetic' for generated arithmetic."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Problem file format (guessed when omitted)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1),
    all_prompts: bool = typer.Option(False, "--all-prompts", help="Every duel instruction, not only the member's."),
    duel_run: Optional[list[str]] = typer.Option(None, "--duel-run", help="Only instructions of these duel runs."),
    num_generations: int = typer.Option(4, "--num-generations", min=2, help="Completions per prompt (G)."),
    max_completion_length: int = typer.Option(256, "--max-completion-length", min=1),
    temperature: float = typer.Option(1.0, "--temperature", min=0.01, max=MAX_TEMPERATURE),
    kl_beta: float = typer.Option(0.0, "--kl-beta", min=0.0, help="KL coefficient (paper: 0)."),
    lr: float = typer.Option(1e-6, "--lr"),
    lora_r: Optional[int] = LORA_R_OPTION,
    lora_alpha: Optional[int] = LORA_ALPHA_OPTION,
    lora_dropout: Optional[float] = LORA_DROPOUT_OPTION,
    epochs: float = typer.Option(1.0, "--epochs"), max_steps: int = typer.Option(-1, "--max-steps"),
    batch_size: int = typer.Option(4, "--batch-size", min=1, help="Completions per step (a multiple of G)."),
    grad_accum: int = typer.Option(1, "--grad-accum", min=1),
    shots: int = typer.Option(2, "--shots", min=0, max=MAX_SHOTS, help="Worked exemplars in --data prompts."),
    judge_shots: int = typer.Option(2, "--judge-shots", min=0, max=2),
    threads: Optional[int] = THREADS_OPTION,
    seed: int = SEED_OPTION,
    aggregate: int = typer.Option(0, "--aggregate", min=0, help="Train an aggregator (AggLM): prompts show K "
                                  "recorded samples of a --db question (any model) to combine into one answer; "
                                  "reward: the scorer on its answer (0: off)."),
    sets_per_question: int = SETS_PER_QUESTION_OPTION,
    easy_per_hard: float = EASY_PER_HARD_OPTION,
    source_run: Optional[list[str]] = SOURCE_RUN_OPTION,
    held_out: Optional[Path] = HELD_OUT_OPTION,
    name: Optional[str] = typer.Option(None, "--name", help="Name of the trained member in OUT/pool.toml, beside the "
                                       "untouched pool (default: it replaces --model)."),
    data_only: bool = DATA_ONLY_OPTION,
    save_steps: int = SAVE_STEPS_OPTION,
    serve_with: ServeWith = SERVE_WITH_OPTION,
    run_id: Optional[str] = typer.Option(None, "--run-id"),
) -> None:
    """GRPO of a LoRA adapter with correctness, stored-judge or online peer-judge rewards, or of an aggregator."""
    with user_errors():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from agora.training.config import GRPOSettings
        from agora.training.datasets import grpo_rows_from_duels, grpo_rows_from_problems, load_duels
        from agora.training.pipeline import check_grpo_rows, grpo_member

        check_out_path(out)
        unknown = [r for r in reward if r not in REWARDS]
        if unknown:
            raise InputError(f"--reward {unknown[0]!r} is not one of {', '.join(REWARDS)}")
        if aggregate and (data is not None or duel_run or all_prompts):
            raise InputError("--aggregate reads its prompts from the samples recorded in --db: drop --data, "
                             "--duel-run and --all-prompts")
        if aggregate and set(reward) != {"correctness"}:
            raise InputError("--aggregate trains with the scorer's reward only: drop --reward")
        refuse_aggregate_only(aggregate, {"--source-run": source_run, "--sets-per-question": sets_per_question != 2,
                                          "--easy-per-hard": easy_per_hard != 1.0})

        def grpo_settings(spec=None) -> GRPOSettings:  # checked alike with --data-only
            options = {**TRAIN_OPTIONS, "num_generations": "num_generations",
                       "max_completion_length": "max_completion_length", "temperature": "temperature",
                       "beta": "kl_beta"}
            del options["max_length"]  # not an option of train grpo
            return settings_from_options(
                GRPOSettings, options, learning_rate=lr, lora=lora_settings(lora_r, lora_alpha, lora_dropout, spec),
                epochs=epochs, max_steps=max_steps, batch_size=batch_size, grad_accum=grad_accum,
                num_generations=num_generations, max_completion_length=max_completion_length,
                temperature=temperature, beta=kl_beta, threads=llama_threads(threads), seed=seed,
                save_steps=save_steps)

        note = None  # why an --aggregate dataset is empty
        if aggregate:
            from agora.training.aggregator import aggregator_rows

            sets, cfg, source, stats = aggregate_sets(db, aggregate, sets_per_question, easy_per_hard, source_run,
                                                      held_out, shots, seed, limit)
            rows, note = aggregator_rows(sets, cfg), stats.pop("empty_note", None)
            if data_only:
                grpo_settings()
                write_data_only(out, {"train": rows}, {**stats, "rows": len(rows), "source": source},
                                training_check=lambda: check_grpo_rows(model, rows, note))
                return
        specs = member_specs(pool)
        spec = find_spec(specs, model, pool)
        check_serve_with(spec, serve_with)
        if name is not None and name != model and name in {s.name for s in specs}:
            raise InputError(f"--name {name!r} is another member of the pool; give the trained member a new name")
        settings = grpo_settings(spec)
        if data is None and fmt is not None:
            raise InputError(f"--format {fmt} reads a --data file; without --data the prompts are the duels' "
                             "instructions in --db")
        if aggregate:  # rows and source read above
            pass
        elif data is not None:
            from agora.tasks.loaders import detect_format, load_problems

            if str(data) == "synthetic":
                problems = load_problems(None, "synthetic", limit or 64, seed=seed)
            else:
                problems = load_problems(data, fmt or detect_format(data), limit)
            held = held_out_set(held_out)
            kept = [p for p in problems if not held.excludes(p.id, p.question)]
            rows, source = grpo_rows_from_problems(kept, shots), {"data": str(data), "limit": limit,
                                                                  "held_out_prompts": len(problems) - len(kept)}
            if problems and not kept:
                note = f"all {len(problems)} problems read from {data} are held out by --held-out {held_out}"
        else:
            if store_backend(db) is None and not Path(db).is_file():
                raise FileNotFoundError(f"{db}: no such trace database (run `agora duel` first, or pass --data)")
            refuse_no_traces(db)
            held = held_out_by_text(held_out, "duel instructions")
            every = grpo_rows_from_duels(load_duels(db, run_ids=tuple(duel_run or ())),
                                         model=None if all_prompts else model)
            kept = [r for r in every if not held.excludes("", r["instruction"])]
            rows = kept[:limit]
            if every and not kept:
                note = f"all {len(every)} duel instructions read are held out by --held-out {held_out}"
            elif not every:
                played = "" if all_prompts else f" of {model}"
                note = (f"no duel{played} recorded in {shown_url(db)}"
                        + (f" runs {', '.join(duel_run)}" if duel_run else "")
                        + ("" if all_prompts else " (--all-prompts: every duel's instruction)")
                        + "; play duels first (agora duel), or give problems with --data")
            source = {"db": shown_url(db), "duel_runs": duel_run, "all_prompts": all_prompts,
                      "held_out_prompts": len(every) - len(kept)}
        if data_only:
            write_data_only(out, {"train": rows}, {"rows": len(rows), "source": source},
                            training_check=lambda: check_grpo_rows(model, rows, note))
            return
        require_train_extra()
        check_grpo_rows(model, rows, note)  # before a run is recorded
        run_id = new_run_id("train-grpo") if run_id is None else check_run_id(run_id)
        store = TraceStore(db)
        if aggregate:
            from agora.training.aggregator import aggregation_reward

            funcs = [aggregation_reward]
        else:
            funcs = reward_functions(reward, store, run_id, model, pool, judge_shots)
        what = f"an aggregator ({aggregate} candidates a prompt)" if aggregate else "GRPO"
        console.print(f"run [bold]{escape(run_id)}[/bold]: {what} of {escape(model)} on {len(rows)} prompts, rewards "
                      f"{escape(', '.join(reward))}", highlight=False)
        train_and_record(
            store, run_id, "train-grpo", specs, out,
            config={"model": model, "settings": settings, "rewards": reward, "aggregate": aggregate}, dataset=source,
            train=lambda: grpo_member(store, run_id, spec, rows, out, settings, funcs, source=source),
            serve_with=serve_with, spec=spec, name=name,
        )


def reward_functions(names: list[str], store: TraceStore, run_id: str, model: str, pool: Path | None,
                     judge_shots: int) -> list:
    """The TRL reward callables named by ``--reward``; ``judge`` weights judges by their latest
    reputation in the DB's duels (equal weights without duels)."""
    from agora.training import rewards

    funcs = []
    for name in dict.fromkeys(names):
        if name == "correctness":
            funcs.append(rewards.correctness_reward)
        elif name == "stored":
            funcs.append(rewards.stored_judge_reward)
        else:
            from agora.graphs.duel import duel_pool
            from agora.training.datasets import load_preference_pairs

            the_pool = duel_pool(load_pool(pool) if pool is not None else None)
            pairs = load_preference_pairs(store.db)
            ratings = pairs[-1]["reputations"] if pairs else None
            funcs.append(rewards.PeerJudgeReward(the_pool, model, ratings=ratings,
                                                 config=JudgeConfig(shots=judge_shots), context={"run_id": run_id}))
    return funcs
