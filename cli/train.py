"""``agora train dpo|grpo|sft``: train one pool member's LoRA adapter from a trace DB with TRL.

Defaults are the paper's (protocols.md §2); the flags scale them for CPU (``--lora-r 8 --max-steps
20 --lr 1e-4`` trains Gemma-3-270M in about a minute here). The result is a pool file beside the
adapter in which the member is served by its adapter (``backend = "transformers"``), ready for
``agora run align --pool OUT/pool.toml``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Literal, Optional

import typer
from rich.markup import escape

from agora.agents.judge import JudgeConfig
from agora.models.pool import ModelSpec, load_pool
from agora.cli._shared import MAX_SHOTS, MAX_TEMPERATURE, check_out_path, console, echo_kv, new_run_id, user_errors
from agora.cli._apps import train_app
from agora.traces.store import TraceStore, check_run_id

REWARDS = ("correctness", "stored", "judge")


#: ``--serve-with`` values: how the result pool file serves the trained member.
ServeWith = Literal["transformers", "llamacpp"]
#: The ``--serve-with`` option of ``train dpo`` and ``train grpo`` (one declaration, as Typer allows).
SERVE_WITH_OPTION = typer.Option("transformers", "--serve-with", help="How OUT/pool.toml serves the trained member: "
                                 "transformers (the dequantised weights + peft) or llamacpp (its GGUF + the "
                                 "adapter as a GGUF LoRA, converted once).")
SAVE_STEPS_OPTION = typer.Option(0, "--save-steps", min=0, help="A checkpoint every N optimiser steps in "
                                 "OUT/trainer/: rerunning the same command resumes an interrupted run from the "
                                 "last one (0: none).")


PAIRS = ("duel", "own")
SOURCE_RUN_OPTION = typer.Option(None, "--source-run", help="Runs whose recorded samples are read for --pairs own "
                                 "and train sft (repeatable; default: every run of --db).")
HELD_OUT_OPTION = typer.Option(None, "--held-out", help="Questions never trained on: a problem file (JSONL, by id "
                               "and by text) or a .txt file of question ids, one a line.")
DATA_ONLY_OPTION = typer.Option(False, "--data-only", help="Write OUT/dataset/ (the JSONL rows and stats.json) and "
                                "stop: no training, no run recorded, no train extra needed.")


def verified_samples(db: Path, model: str, source_run: list[str] | None, held_out: Path | None,
                     length_ratio: float = 1.5, per_question: int = 4):
    """``(config, samples, skipped)``: ``model``'s own verified samples in ``db``
    (:mod:`agora.training.verified`)."""
    from agora.training.verified import HeldOut, VerifiedConfig, own_samples

    cfg = VerifiedConfig(model=model, run_ids=tuple(source_run or ()),
                         held_out=HeldOut.from_file(held_out) if held_out is not None else HeldOut(),
                         length_ratio=length_ratio, max_pairs_per_question=per_question,
                         max_sft_per_question=per_question)
    samples, skipped = own_samples(db, cfg)
    return cfg, samples, skipped


def write_data_only(out: Path, splits: dict[str, list[dict]], stats: dict) -> None:
    """``--data-only``: the rows of each split as ``OUT/dataset/<split>.jsonl`` and ``stats.json``, reported."""
    import json

    from agora.training.datasets import export_jsonl

    folder = out / "dataset"
    for split, rows in splits.items():
        export_jsonl(rows, folder / f"{split}.jsonl")
    (folder / "stats.json").write_text(json.dumps(stats, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    echo_kv({**{f"{split} rows": len(rows) for split, rows in splits.items()}, "dataset": folder,
             **{k: stats[k] for k in ("questions", "samples", "correct", "pairs_before_length_filter",
                                      "pairs_after_length_filter", "pairs", "sft_rows") if k in stats},
             "source runs": ", ".join(stats.get("source_runs", [])) or "-"})


def require_train_extra() -> None:
    """Before a command that trains records anything: one line naming the ``train`` extra when it is missing."""
    from agora.training.trainers import check_train_extra

    check_train_extra()


def member_specs(pool: Path | None) -> list[ModelSpec]:
    """The specs of ``--pool``, or of the embedded duel pool (the pool ``agora duel`` uses by default)."""
    if pool is not None:
        return [m.spec for m in load_pool(pool)]
    from agora.graphs.duel import default_duel_specs

    return default_duel_specs()


def find_spec(specs: list[ModelSpec], name: str, pool: Path | None) -> ModelSpec:
    for spec in specs:
        if spec.name == name:
            return spec
    where = pool if pool is not None else "the embedded duel pool"
    hint = ""
    from agora.models.builtins import BUILTIN_POOLS

    holders = [p for p, members in BUILTIN_POOLS.items() if any(m == name for m, _ in members)]
    if holders and (pool is None or str(pool) not in holders):
        hint = f"; it is in the built-in pool '{holders[0]}': add --pool {holders[0]}"
    raise ValueError(f"--model {name!r} is not in {where} ({', '.join(s.name for s in specs)}){hint}")


def write_result_pool(specs: list[ModelSpec], entry: dict, out: Path) -> Path:
    """The source pool with the trained member replaced by ``entry`` (or, when ``entry`` has a name of its
    own, beside the untouched pool), as ``out/pool.toml``."""
    from agora.training.trainers import spec_entry, write_pool_file

    entries = [entry if s.name == entry["name"] else spec_entry(s) for s in specs]
    if entry["name"] not in {s.name for s in specs}:
        entries.append(entry)
    return write_pool_file(entries, out / "pool.toml")


def lora_settings(r: int | None, alpha: int | None, dropout: float | None, spec: ModelSpec | None = None):
    """The LoRA of a fresh adapter (unset values: the paper's r 64, α 16, dropout 0.1).

    Raises:
        ValueError: a LoRA option given for a member that already carries an adapter: training goes
            on from that adapter, whose shape cannot change.
    """
    from agora.training.config import LoraSettings

    if spec is not None and spec.adapter:
        given = [f"--lora-{k}" for k, v in (("r", r), ("alpha", alpha), ("dropout", dropout)) if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: model {spec.name!r} already carries the adapter {spec.adapter}, "
                             "and training goes on from it with its own LoRA shape; drop the option, or train a "
                             "fresh adapter from a pool entry without 'adapter'")
    d = LoraSettings()
    return LoraSettings(r=d.r if r is None else r, alpha=d.alpha if alpha is None else alpha,
                        dropout=d.dropout if dropout is None else dropout)


def report(run, pool_file: Path, store: TraceStore) -> None:
    res = run.result
    echo_kv({
        "adapter": res.adapter_dir, "rows": f"{res.rows} train, {len(run.validation_rows)} validation",
        "steps": res.steps, "loss": " → ".join(f"{x:.4f}" for x in (res.losses[:1] + res.losses[-1:])) or "-",
        "validation preference accuracy": "-" if run.validation_accuracy is None else f"{run.validation_accuracy:.3f}",
        "time": f"{res.wall_s:.0f} s wall, {res.cpu_s:.0f} s CPU", "pool file": pool_file, "traces": store.path,
    })
    console.print(f"use it: agora run align --pool {escape(shlex.quote(str(pool_file)))}", highlight=False)


def _threads(threads: Optional[int]) -> int:
    from agora.models.llamacpp import default_threads

    return threads or default_threads()


@train_app.command("dpo")
def train_dpo_cmd(
    db: Path = typer.Option(Path("agora.db"), "--db", help="Trace database with duels (preference_pairs) or ALIGN runs."),
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
    lora_r: Optional[int] = typer.Option(None, "--lora-r", min=1, help="LoRA rank of a fresh adapter [default: 64]."),
    lora_alpha: Optional[int] = typer.Option(None, "--lora-alpha", min=1, help="LoRA alpha [default: 16]."),
    lora_dropout: Optional[float] = typer.Option(None, "--lora-dropout", min=0.0, max=0.99,
                                                 help="LoRA dropout [default: 0.1]."),
    epochs: float = typer.Option(1.0, "--epochs"), max_steps: int = typer.Option(-1, "--max-steps",
                                                                                 help="> 0 overrides --epochs."),
    batch_size: int = typer.Option(4, "--batch-size", min=1), grad_accum: int = typer.Option(1, "--grad-accum", min=1),
    max_length: int = typer.Option(1024, "--max-length", min=8, help="Prompt + answer tokens kept."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch threads (default: free cores)."),
    seed: int = typer.Option(0, "--seed"),
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
            raise ValueError(f"--pairs {pairs_from!r} is not one of {', '.join(PAIRS)}")
        if not db.is_file():
            raise FileNotFoundError(f"{db}: no such trace database (run `agora duel` first)")
        if pairs_from == "own":
            from agora.training.verified import own_pairs, verified_stats

            given = [flag for flag, on in (("--align", align), ("--duel-run", duel_run), ("--iteration", iteration),
                                           ("--all-pairs", all_pairs), ("--min-margin", min_margin)) if on]
            if given:
                raise ValueError(f"{', '.join(given)}: duel-pair options; --pairs own reads the member's own samples "
                                 "(choose them with --source-run)")

            vcfg, samples, skipped = verified_samples(db, model, source_run, held_out, length_ratio, pairs_per_question)
            pairs, stats = own_pairs(samples, vcfg), verified_stats(samples, vcfg, skipped)
            source = {"pairs": "own", "verified": vcfg.describe()}
        else:
            from agora.training.verified import HeldOut

            if source_run:
                raise ValueError("--source-run chooses the runs of --pairs own; duel pairs are chosen with --duel-run")
            pairs = load_preference_pairs(db) + (align_pairs(db) if align else [])
            held = HeldOut.from_file(held_out) if held_out is not None else HeldOut()
            before = len(pairs)
            pairs = [p for p in pairs if not held.excludes("", p.get("prompt"))]
            stats = {"model": model, "pairs_read": before, "held_out_pairs": before - len(pairs)}
            source = {"pairs": "duel", "align": align, "held_out_questions": len(held)}
        flt = PairFilter(min_margin=min_margin, model=None if all_pairs else model,
                         run_ids=tuple(duel_run or ()), iterations=tuple(iteration or ()))
        if data_only:
            from agora.training.datasets import dpo_rows, split_by_instruction
            from agora.training.verified import source_runs

            rows = dpo_rows(pairs, flt)
            train, val = split_by_instruction(rows, validation, seed=seed)
            write_data_only(out, {"train": train, "validation": val},
                            {**stats, "rows": len(rows), "source": source, "filter": asdict(flt),
                             "source_runs": source_runs(pairs, [r["pair_id"] for r in rows])})
            return
        require_train_extra()
        specs = member_specs(pool)
        spec = find_spec(specs, model, pool)
        check_serve_with(spec, serve_with)
        settings = DPOSettings(learning_rate=lr, beta=beta, lora=lora_settings(lora_r, lora_alpha, lora_dropout, spec),
                               epochs=epochs, max_steps=max_steps, batch_size=batch_size, grad_accum=grad_accum,
                               max_length=max_length, threads=_threads(threads), seed=seed, save_steps=save_steps)
        run_id = new_run_id("train-dpo") if run_id is None else check_run_id(run_id)
        store = TraceStore(db)
        console.print(f"run [bold]{escape(run_id)}[/bold]: DPO of {escape(model)} from {escape(str(db))} ({len(pairs)} "
                      f"{pairs_from} pairs before filters)",
                      highlight=False)
        _train_and_record(
            store, run_id, "train-dpo", specs, out,
            config={"model": model, "settings": settings, "filter": flt},
            dataset={"db": str(db), "align": align, **source},
            train=lambda: dpo_member(store, run_id, spec, pairs, out, settings, flt, validation_fraction=validation,
                                     source=source),
            summary=lambda run: {"validation_accuracy": run.validation_accuracy}, serve_with=serve_with, spec=spec,
        )


@train_app.command("grpo")
def train_grpo_cmd(
    db: Path = typer.Option(Path("agora.db"), "--db", help="Trace database: duel instructions are the prompts "
                            "(unless --data), and the run is recorded there."),
    model: str = typer.Option(..., "--model", help="Pool member to train."),
    out: Path = typer.Option(..., "--out", help="Output folder: dataset/, adapter/, pool.toml."),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file (members, and the judges of --reward judge)."),
    reward: list[str] = typer.Option(["correctness"], "--reward", help=f"Reward(s): {', '.join(REWARDS)} "
                                     "(judge: the pool's other members score online)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Problem file (JSONL) with gold answers as prompts; "
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
    lora_r: Optional[int] = typer.Option(None, "--lora-r", min=1, help="LoRA rank of a fresh adapter [default: 64]."),
    lora_alpha: Optional[int] = typer.Option(None, "--lora-alpha", min=1, help="LoRA alpha [default: 16]."),
    lora_dropout: Optional[float] = typer.Option(None, "--lora-dropout", min=0.0, max=0.99,
                                                 help="LoRA dropout [default: 0.1]."),
    epochs: float = typer.Option(1.0, "--epochs"), max_steps: int = typer.Option(-1, "--max-steps"),
    batch_size: int = typer.Option(4, "--batch-size", min=1, help="Completions per step (a multiple of G)."),
    grad_accum: int = typer.Option(1, "--grad-accum", min=1),
    shots: int = typer.Option(2, "--shots", min=0, max=MAX_SHOTS, help="Worked exemplars in --data prompts."),
    judge_shots: int = typer.Option(2, "--judge-shots", min=0, max=2),
    threads: Optional[int] = typer.Option(None, "--threads", min=1),
    seed: int = typer.Option(0, "--seed"),
    aggregate: int = typer.Option(0, "--aggregate", min=0, help="Train an aggregator (AggLM): prompts show K "
                                  "recorded samples of a --db question (any model) to combine into one answer; "
                                  "reward: the scorer on its answer (0: off)."),
    sets_per_question: int = typer.Option(2, "--sets-per-question", min=1, help="--aggregate: candidate sets drawn "
                                          "per question, at most."),
    easy_per_hard: float = typer.Option(1.0, "--easy-per-hard", min=0.0, help="--aggregate: sets whose majority is "
                                        "right kept per set whose majority is wrong."),
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
        from agora.training.pipeline import grpo_member

        check_out_path(out)
        unknown = [r for r in reward if r not in REWARDS]
        if unknown:
            raise ValueError(f"--reward {unknown[0]!r} is not one of {', '.join(REWARDS)}")
        if aggregate and (data is not None or duel_run or all_prompts):
            raise ValueError("--aggregate reads its prompts from the samples recorded in --db: drop --data, "
                             "--duel-run and --all-prompts")
        if aggregate and set(reward) != {"correctness"}:
            raise ValueError("--aggregate trains with the scorer's reward only: drop --reward")
        if aggregate:
            rows, source, stats = aggregate_rows(db, aggregate, sets_per_question, easy_per_hard, source_run,
                                                 held_out, shots, seed, limit)
            if data_only:
                write_data_only(out, {"train": rows}, {**stats, "rows": len(rows), "source": source})
                return
        specs = member_specs(pool)
        spec = find_spec(specs, model, pool)
        check_serve_with(spec, serve_with)
        if name is not None and name != model and name in {s.name for s in specs}:
            raise ValueError(f"--name {name!r} is another member of the pool; give the trained member a new name")
        settings = GRPOSettings(learning_rate=lr, lora=lora_settings(lora_r, lora_alpha, lora_dropout, spec), epochs=epochs,
                                max_steps=max_steps, batch_size=batch_size, grad_accum=grad_accum,
                                num_generations=num_generations, max_completion_length=max_completion_length,
                                temperature=temperature, beta=kl_beta, threads=_threads(threads), seed=seed,
                                save_steps=save_steps)
        if data is None and fmt is not None:
            raise ValueError(f"--format {fmt} reads a --data file; without --data the prompts are the duels' "
                             "instructions in --db")
        if aggregate:  # rows and source read above
            pass
        elif data is not None:
            from agora.tasks.loaders import detect_format, load_problems

            if str(data) == "synthetic":
                problems = load_problems(None, "synthetic", limit or 64, seed=seed)
            else:
                problems = load_problems(data, fmt or detect_format(data), limit)
            rows, source = grpo_rows_from_problems(problems, shots), {"data": str(data), "limit": limit}
        else:
            if not db.is_file():
                raise FileNotFoundError(f"{db}: no such trace database (run `agora duel` first, or pass --data)")
            rows = grpo_rows_from_duels(load_duels(db, run_ids=tuple(duel_run or ())),
                                        model=None if all_prompts else model)[:limit]
            source = {"db": str(db), "duel_runs": duel_run, "all_prompts": all_prompts}
        if data_only:
            write_data_only(out, {"train": rows}, {"rows": len(rows), "source": source})
            return
        require_train_extra()
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
        _train_and_record(
            store, run_id, "train-grpo", specs, out,
            config={"model": model, "settings": settings, "rewards": reward, "aggregate": aggregate}, dataset=source,
            train=lambda: grpo_member(store, run_id, spec, rows, out, settings, funcs, source=source),
            serve_with=serve_with, spec=spec, name=name,
        )


def aggregate_rows(db: Path, k: int, sets_per_question: int, easy_per_hard: float, source_run: list[str] | None,
                   held_out: Path | None, shots: int, seed: int, limit: int | None):
    """``(rows, source, stats)`` of ``agora train grpo --aggregate K`` (:mod:`agora.training.aggregator`)."""
    from agora.training.aggregator import AggregatorDataConfig, aggregator_rows, aggregator_stats, candidate_sets
    from agora.training.verified import HeldOut, scored_samples

    if not db.is_file():
        raise FileNotFoundError(f"{db}: no such trace database (record samples first: agora bench, agora run ...)")
    held = HeldOut.from_file(held_out) if held_out is not None else HeldOut()
    cfg = AggregatorDataConfig(k=k, sets_per_question=sets_per_question, easy_per_hard=easy_per_hard, shots=shots,
                               seed=seed)
    samples, skipped = scored_samples(db, (), tuple(source_run or ()), held)
    sets = candidate_sets(samples, cfg)[:limit]
    stats = {**aggregator_stats(sets), "skipped_calls": skipped}
    source = {"db": str(db), "aggregate": k, "sets_per_question": sets_per_question, "easy_per_hard": easy_per_hard,
              "held_out_questions": len(held), "source_run_filter": list(source_run or ()),
              "source_runs": stats["source_runs"]}
    return aggregator_rows(sets, cfg), source, stats


@train_app.command("sft")
def train_sft_cmd(
    db: Path = typer.Option(Path("agora.db"), "--db", help="Trace database whose runs recorded the member's samples."),
    model: str = typer.Option(..., "--model", help="Pool member whose own right answers it is trained on."),
    out: Path = typer.Option(..., "--out", help="Output folder: dataset/, adapter/, pool.toml."),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file the member comes from (default: the "
                                        "embedded duel pool)."),
    source_run: Optional[list[str]] = SOURCE_RUN_OPTION,
    held_out: Optional[Path] = HELD_OUT_OPTION,
    per_question: int = typer.Option(4, "--per-question", min=1, help="Distinct right answers per prompt, at most."),
    data_only: bool = DATA_ONLY_OPTION,
    lr: float = typer.Option(1e-4, "--lr", help="Learning rate (LoRA)."),
    lora_r: Optional[int] = typer.Option(None, "--lora-r", min=1, help="LoRA rank of a fresh adapter [default: 64]."),
    lora_alpha: Optional[int] = typer.Option(None, "--lora-alpha", min=1, help="LoRA alpha [default: 16]."),
    lora_dropout: Optional[float] = typer.Option(None, "--lora-dropout", min=0.0, max=0.99,
                                                 help="LoRA dropout [default: 0.1]."),
    epochs: float = typer.Option(1.0, "--epochs"), max_steps: int = typer.Option(-1, "--max-steps",
                                                                                 help="> 0 overrides --epochs."),
    batch_size: int = typer.Option(4, "--batch-size", min=1), grad_accum: int = typer.Option(1, "--grad-accum", min=1),
    max_length: int = typer.Option(1024, "--max-length", min=8, help="Prompt + answer tokens kept."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch threads (default: free cores)."),
    seed: int = typer.Option(0, "--seed"),
    save_steps: int = SAVE_STEPS_OPTION,
    serve_with: ServeWith = SERVE_WITH_OPTION,
    run_id: Optional[str] = typer.Option(None, "--run-id"),
) -> None:
    """Rejection-sampling fine-tuning (STaR, RFT): SFT of a LoRA on the member's own right answers.

    The answers are the member's recorded samples (any run of --db) that the scorer finds right,
    finished and explicit; --held-out keeps evaluation questions out."""
    with user_errors():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from agora.training.verified import sft_rows, verified_stats

        check_out_path(out)
        if not db.is_file():
            raise FileNotFoundError(f"{db}: no such trace database (run `agora run`, `agora bench` or `agora comed` "
                                    "first)")
        vcfg, samples, skipped = verified_samples(db, model, source_run, held_out, per_question=per_question)
        rows, stats = sft_rows(samples, vcfg), verified_stats(samples, vcfg, skipped)
        source = {"verified": vcfg.describe()}
        if data_only:
            write_data_only(out, {"train": rows}, {**stats, "rows": len(rows), "source": source,
                                                   "source_runs": stats["sft_runs"]})
            return
        require_train_extra()
        from agora.training.config import SFTSettings
        from agora.training.pipeline import sft_member

        specs = member_specs(pool)
        spec = find_spec(specs, model, pool)
        check_serve_with(spec, serve_with)
        settings = SFTSettings(learning_rate=lr, lora=lora_settings(lora_r, lora_alpha, lora_dropout, spec),
                               epochs=epochs, max_steps=max_steps, batch_size=batch_size, grad_accum=grad_accum,
                               max_length=max_length, threads=_threads(threads), seed=seed, save_steps=save_steps)
        run_id = new_run_id("train-sft") if run_id is None else check_run_id(run_id)
        store = TraceStore(db)
        console.print(f"run [bold]{escape(run_id)}[/bold]: SFT of {escape(model)} on {len(rows)} of its own verified "
                      f"answers from {escape(str(db))}", highlight=False)
        _train_and_record(
            store, run_id, "train-sft", specs, out, config={"model": model, "settings": settings},
            dataset={"db": str(db), **source},
            train=lambda: sft_member(store, run_id, spec, rows, out, settings, source=source),
            serve_with=serve_with, spec=spec,
        )


def check_serve_with(spec: ModelSpec, serve_with: str) -> None:
    """Refuse ``--serve-with llamacpp`` for a member without a GGUF, before anything is loaded or trained.

    Raises:
        ValueError: ``llamacpp`` for a member without a GGUF.
    """
    from agora.models.convert import is_gguf_source

    path = str(spec.path or "")
    if serve_with == "llamacpp" and not is_gguf_source(path):
        raise ValueError(f"--serve-with llamacpp: model {spec.name!r} has no GGUF ({path or spec.backend}) for "
                         "llama.cpp to apply the adapter to; use --serve-with transformers")


def _train_and_record(store: TraceStore, run_id: str, protocol: str, specs, out: Path, *, config: dict,
                      dataset: dict, train, summary=lambda run: {}, serve_with: str = "transformers",
                      spec=None, name: str | None = None) -> None:
    """Run ``train()`` as trace run ``run_id``: the run row, a failed status if it raises, then the
    selected checkpoint, the summary and the result pool file (the member served by ``serve_with``).
    Under ``accelerate launch`` every process trains and only the main one writes."""
    from agora.training.pipeline import select_checkpoint
    from agora.training.trainers import is_main_process, trained_entry

    main = is_main_process()
    with contextlib.ExitStack() as held:
        if main:
            held.enter_context(store.run_lock(run_id))  # a second process on this run id is refused
            store.start_run(run_id, protocol, config=config, pool=[s.describe() for s in specs], dataset=dataset)
        try:
            run = train()
        except BaseException as exc:
            if main:
                store.finish_run(run_id, summary={"error": f"{type(exc).__name__}: {exc}"[:500]},
                                 status="interrupted" if isinstance(exc, KeyboardInterrupt) else "failed")
            raise
        if main:
            select_checkpoint(store, run.checkpoint_id)
            store.finish_run(run_id, summary={"adapter": str(run.result.adapter_dir), "steps": run.result.steps,
                                              **summary(run)})
            entry = run.entry if serve_with == "transformers" else trained_entry(spec, run.result, backend=serve_with)
            if name is not None:
                entry = {**entry, "name": name}
            report(run, write_result_pool(specs, entry, out), store)


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
