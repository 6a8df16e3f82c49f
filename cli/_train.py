"""What ``agora train dpo|grpo|sft`` share (each command is its own module, ``cli/train_*.py``): train
one pool member's LoRA adapter from a trace DB with TRL.

Defaults are the paper's (protocols.md §2); the flags scale them for CPU (``--lora-r 8 --max-steps
20 --lr 1e-4`` trains Gemma-3-270M in about a minute here). The result is a pool file beside the
adapter in which the member is served by its adapter (``backend = "transformers"``), ready for
``agora run align --pool OUT/pool.toml``.
"""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import Callable, Literal, Optional

import typer
from rich.markup import escape

from agora.models.urls import shown_url
from agora.tasks.errors import InputError
from agora.models.pool import ModelSpec, load_pool
from agora.cli._shared import console, echo_kv, err_console, settings_from_options
from agora.training.config import MAX_TRAIN_SEED
from agora.traces.store import TraceStore, store_backend


#: ``--serve-with`` values: how the result pool file serves the trained member.
ServeWith = Literal["transformers", "llamacpp"]
#: The ``--serve-with`` option of ``train dpo`` and ``train grpo`` (one declaration, as Typer allows).
SERVE_WITH_OPTION = typer.Option("transformers", "--serve-with", help="How OUT/pool.toml serves the trained member: "
                                 "transformers (the dequantised weights + peft) or llamacpp (its GGUF + the "
                                 "adapter as a GGUF LoRA, converted once).")
# Options every training command takes, declared once.
LORA_R_OPTION = typer.Option(None, "--lora-r", min=1, help="LoRA rank of a fresh adapter [default: 64].")
LORA_ALPHA_OPTION = typer.Option(None, "--lora-alpha", min=1, help="LoRA alpha [default: 16].")
LORA_DROPOUT_OPTION = typer.Option(None, "--lora-dropout", min=0.0, max=0.99, help="LoRA dropout [default: 0.1].")
THREADS_OPTION = typer.Option(None, "--threads", min=1, help="torch threads (default: free cores).")
#: ``--seed`` of the commands that train (``train dpo|grpo|sft``, ``evolve``): a negative one is refused
#: by the option, one above :data:`~agora.training.config.MAX_TRAIN_SEED` by the settings' own rule, in
#: one line naming ``--seed`` and the range, before anything runs.
SEED_OPTION = typer.Option(0, "--seed", min=0, help=f"Training seed, 0 to {MAX_TRAIN_SEED} (numpy's and torch's "
                           "seeds are 32-bit).")
SAVE_STEPS_OPTION = typer.Option(0, "--save-steps", min=0, help="A checkpoint every N optimiser steps in "
                                 "OUT/trainer/: rerunning the same command resumes an interrupted run from the "
                                 "last one (0: none).")


#: The parameters of the training commands that set :class:`~agora.training.config.TrainSettings`
#: fields (field → parameter), for :func:`~agora.cli._shared.settings_from_options`: a refusal names
#: the option given (``--lr: DPOSettings.learning_rate must be > 0, got 0``).
TRAIN_OPTIONS = {"learning_rate": "lr", "epochs": "epochs", "max_steps": "max_steps", "batch_size": "batch_size",
                 "grad_accum": "grad_accum", "max_length": "max_length", "threads": "threads", "seed": "seed",
                 "save_steps": "save_steps"}


PAIRS = ("duel", "own")
SOURCE_RUN_OPTION = typer.Option(None, "--source-run", help="Runs whose recorded samples are read for --pairs own "
                                 "and train sft (repeatable; default: every run of --db).")
HELD_OUT_OPTION = typer.Option(None, "--held-out", help="Questions never trained on: a problem file (JSONL, by id "
                               "and by text) or a .txt file of question ids, one a line.")
DATA_ONLY_OPTION = typer.Option(False, "--data-only", help="Write OUT/dataset/ (the JSONL rows and stats.json) and "
                                "stop: no training, no run recorded, no train extra needed.")


def verified_samples(db: str, model: str, source_run: list[str] | None, held_out: Path | None,
                     length_ratio: float = 1.5, per_question: int = 4, options: dict[str, str] | None = None,
                     model_option: str = "--model"):
    """``(config, samples, skipped)``: ``model``'s own verified samples in ``db``
    (:mod:`agora.training.verified`). ``options``: the command's parameters that set
    :class:`~agora.training.own_samples.VerifiedConfig` fields (field → parameter), so that a refused
    value names its option (``--length-ratio: VerifiedConfig.length_ratio must be >= 1 ...``);
    ``model_option``: the option that named ``model`` (``--teacher`` for another member's answers)."""
    from agora.training.own_samples import HeldOut, VerifiedConfig, own_samples

    check_sources(db, model, source_run, model_option)
    cfg = settings_from_options(VerifiedConfig, options or {}, model=model, run_ids=tuple(source_run or ()),
                                held_out=HeldOut.from_file(held_out) if held_out is not None else HeldOut(),
                                length_ratio=length_ratio, max_pairs_per_question=per_question,
                                max_sft_per_question=per_question)
    samples, skipped = own_samples(db, cfg)
    return cfg, samples, skipped


def held_out_by_text(held_out: Path | None, what: str):
    """``--held-out`` for data matched by question text only (``what``: ``"duel pairs"``), as a
    :class:`~agora.training.own_samples.HeldOut`; empty without it.

    Raises:
        InputError: a file of question ids (``.txt``): nothing in that data carries the ids, so
            nothing would be held out."""
    from agora.training.own_samples import HeldOut

    if held_out is None:
        return HeldOut()
    held = HeldOut.from_file(held_out)
    if held.question_ids and not held.questions:
        raise InputError(f"--held-out {held_out}: a file of question ids, but {what} carry no question ids (they are "
                         "matched by question text): give the held-out problem file (JSONL) instead")
    return held


#: Tables any of which makes a database one Agora's training commands read (runs, calls, duels, pairs).
TRAINING_TABLES = frozenset({"runs", "model_calls", "duels", "preference_pairs"})


def refuse_no_traces(db: str) -> None:
    """Refuse a SQLite ``db`` holding none of :data:`TRAINING_TABLES` (a zero-byte file, a database
    of another tool), in :func:`agora.traces.run_list.not_a_trace_store`'s words: read for training
    data it gave an empty dataset or a refusal of ``--model`` ("no recorded call") that hid that the
    file holds no traces at all. A ``postgresql://`` URL is left to its store.

    Raises:
        InputError: ``<db>: holds no Agora traces (no runs table; ...)``."""
    from agora.traces.run_list import not_a_trace_store

    if store_backend(db) is not None:
        return
    store = TraceStore(db, readonly=True)
    try:
        if TRAINING_TABLES.isdisjoint(store.db.table_names()):
            raise InputError(not_a_trace_store(store) or f"{db}: holds no Agora traces")
    finally:
        store.close()


def check_sources(db: str, model: str | None, source_run: list[str] | None, model_option: str = "--model") -> None:
    """Refuse, in one line naming the known ones, a ``--source-run`` that is not a run of ``db`` and
    a ``--model`` with no recorded call in those runs (else the datasets would be silently empty;
    ``model`` ``None``: any model's samples are read, only the runs are checked).

    Raises:
        ValueError: an unknown run or member; a database with no Agora table (:func:`refuse_no_traces`)."""
    from agora.traces.store import TraceStore

    refuse_no_traces(db)
    store = TraceStore(db, readonly=True)
    tables = set(store.db.table_names())
    runs = [r for (r,) in store.db.execute("select run_id from runs order by rowid")] if "runs" in tables else []

    def listed(names: list[str]) -> str:
        return ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "") or "none"

    for run in source_run or ():
        if run not in runs:
            raise InputError(f"--source-run {run!r}: no such run in {shown_url(db)} (its runs: {listed(runs)})")
    _warn_running(store, db, list(dict.fromkeys(source_run or runs)), model)
    if model is None:
        return
    if "model_calls" not in tables:
        members = []
    elif source_run:
        marks = ", ".join("?" for _ in source_run)
        members = [m for (m,) in store.db.execute(
            f"select distinct model from model_calls where run_id in ({marks}) order by model", list(source_run))]
    else:
        members = [m for (m,) in store.db.execute("select distinct model from model_calls order by model")]
    if model not in members:
        where = f"runs {', '.join(source_run)} of {shown_url(db)}" if source_run else shown_url(db)
        raise InputError(f"{model_option} {model!r}: no recorded call of it in {where} (members recorded: "
                         f"{listed(members)})")


def _warn_running(store: TraceStore, db: str, runs: list[str], model: str | None) -> None:
    """A warning on stderr naming the runs of ``runs`` whose status is still ``running`` and that
    recorded calls (of ``model`` when given): their samples so far are read, and a rerun of the same
    command may read more (a run stopped without finishing, its process killed, stays ``running`` too)."""
    if not runs or "model_calls" not in store.db.table_names():
        return
    cols = {c.name for c in store.db["runs"].columns}
    if "status" not in cols:
        return
    marks = ", ".join("?" for _ in runs)
    found = {r for (r,) in store.db.execute(
        f"select run_id from runs where status = 'running' and run_id in ({marks}) and exists (select 1 from "
        f"model_calls c where c.run_id = runs.run_id{' and c.model = ?' if model is not None else ''})",
        [*runs, *([model] if model is not None else [])])}
    running = [r for r in runs if r in found]  # (in the order of runs: rowid is SQLite's alone)
    if running:
        named = ", ".join(map(repr, running[:5])) + (f" and {len(running) - 5} more" if len(running) > 5 else "")
        err_console.print(f"[yellow]warning:[/yellow] source run{'s' if len(running) > 1 else ''} {escape(named)} of "
                          f"{escape(shown_url(db))} {'are' if len(running) > 1 else 'is'} still running (or stopped "
                          "without finishing): the samples recorded so far are read, and the same command run later "
                          "may read more", highlight=False, soft_wrap=True)


def check_pair_sources(db: str, pairs: list[dict], flt) -> None:
    """Refuse, in one line naming the known ones, a ``--duel-run`` with no pair in ``db`` and a
    ``--model`` in none of its pairs (else the datasets would be silently empty).

    Raises:
        ValueError: an unknown run or member."""
    runs = sorted({str(p.get("run_id")) for p in pairs})
    for run in flt.run_ids:
        if run not in runs:
            raise InputError(f"--duel-run {run!r}: no preference pair of such a run in {shown_url(db)} "
                             "(runs with pairs: "
                             f"{', '.join(runs) or 'none'})")
    members = sorted({str(p[k]) for p in pairs for k in ("chosen_model", "rejected_model") if p.get(k) is not None})
    if flt.model is not None and flt.model not in members:
        raise InputError(f"--model {flt.model!r}: in no preference pair of {shown_url(db)} (members in pairs: "
                         f"{', '.join(members) or 'none'})")


#: The files ``--data-only`` writes in ``OUT/dataset/`` (by dataset kind: train, train + validation).
DATASET_FILES = frozenset({"train.jsonl", "validation.jsonl", "stats.json"})


def write_data_only(out: Path, splits: dict[str, list[dict]], stats: dict,
                    training_check: Callable[[], None] | None = None) -> None:
    """``--data-only``: the rows of each split as ``OUT/dataset/<split>.jsonl`` and ``stats.json``, reported.

    Each file is written beside its place and moved there whole, ``stats.json`` last, so an
    interrupted write leaves the previous dataset's files (or none), never a cut one; a dataset file
    of another kind left in the folder (``validation.jsonl`` of a DPO dataset under an SFT one) is
    removed, so the folder holds this dataset only.

    ``training_check`` is what training would refuse the dataset for (an empty one): the data and its
    statistics are still written (they say why it is empty), and its message is printed as a
    warning on stderr; the exit status stays 0.

    Raises:
        InputError: ``OUT/dataset`` or a file in it cannot be written (a file, a folder, read-only)."""
    import json
    import os

    from agora.training.datasets import export_jsonl

    folder = out / "dataset"
    files = {f"{split}.jsonl": rows for split, rows in splits.items()}
    try:
        for name, rows in files.items():
            export_jsonl(rows, folder / f".{name}.partial")
        (folder / ".stats.json.partial").write_text(json.dumps(stats, indent=2, ensure_ascii=False, default=str),
                                                    encoding="utf-8")
        for name in DATASET_FILES - set(files) - {"stats.json"}:  # another kind of dataset's split
            if (folder / name).is_file():
                (folder / name).unlink()
        for name in (*files, "stats.json"):
            os.replace(folder / f".{name}.partial", folder / name)
    except OSError as exc:  # OUT/dataset or a file in it is something else (a file, a folder), or not writable
        where = getattr(exc, "filename2", None) or exc.filename or folder  # (a move's target, else the file)
        raise InputError(f"--out {out}: cannot write {where}: {exc.strerror or exc}") from None
    finally:  # (an interrupted or refused write leaves no partial file behind)
        for name in (*files, "stats.json"):
            with contextlib.suppress(OSError):
                (folder / f".{name}.partial").unlink(missing_ok=True)
    echo_kv({**{f"{split} rows": len(rows) for split, rows in splits.items()}, "dataset": folder,
             **{k: stats[k] for k in ("questions", "samples", "correct", "pairs_before_length_filter",
                                      "pairs_after_length_filter", "pairs", "sft_rows") if k in stats},
             "source runs": ", ".join(stats.get("source_runs", [])) or "-"})
    if training_check is not None:
        try:
            training_check()
        except InputError as refused:
            err_console.print(f"[yellow]warning:[/yellow] {escape(str(refused))} (training would refuse this dataset)",
                              highlight=False, soft_wrap=True)


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

    holders = [p for p, members in BUILTIN_POOLS.items() if any(m.name == name for m in members)]
    if holders and (pool is None or str(pool) not in holders):
        hint = f"; it is in the built-in pool '{holders[0]}': add --pool {holders[0]}"
    raise InputError(f"--model {name!r} is not in {where} ({', '.join(s.name for s in specs)}){hint}")


def write_result_pool(specs: list[ModelSpec], entry: dict, out: Path) -> Path:
    """The source pool with the trained member replaced by ``entry`` (or, when ``entry`` has a name of its
    own, beside the untouched pool), as ``out/pool.toml``."""
    from agora.training.pool_entries import spec_entry, write_pool_file

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
            raise InputError(f"{', '.join(given)}: model {spec.name!r} already carries the adapter {spec.adapter}, "
                             "and training goes on from it with its own LoRA shape; drop the option, or train a "
                             "fresh adapter from a pool entry without 'adapter'")
    d = LoraSettings()
    return settings_from_options(LoraSettings, {"r": "lora_r", "alpha": "lora_alpha", "dropout": "lora_dropout"},
                                 r=d.r if r is None else r, alpha=d.alpha if alpha is None else alpha,
                                 dropout=d.dropout if dropout is None else dropout)


def report(run, pool_file: Path, store: TraceStore) -> None:
    res = run.result
    echo_kv({
        "adapter": res.adapter_dir, "rows": f"{res.rows} train, {len(run.validation_rows)} validation",
        "steps": res.steps, "loss": " → ".join(f"{x:.4f}" for x in (res.losses[:1] + res.losses[-1:])) or "-",
        "validation preference accuracy": "-" if run.validation_accuracy is None else f"{run.validation_accuracy:.3f}",
        "time": f"{res.wall_s:.0f} s wall, {res.cpu_s:.0f} s CPU", "pool file": pool_file, "traces": shown_url(str(store.path)),
    })
    console.print(f"use it: agora run align --pool {escape(shlex.quote(str(pool_file)))}", highlight=False)


def llama_threads(threads: Optional[int]) -> int:
    from agora.models.llamacpp import default_threads

    return threads or default_threads()


def check_serve_with(spec: ModelSpec, serve_with: str) -> None:
    """Refuse ``--serve-with llamacpp`` for a member without a GGUF, before anything is loaded or trained.

    Raises:
        ValueError: ``llamacpp`` for a member without a GGUF.
    """
    from agora.models.convert import is_gguf_source

    path = str(spec.path or "")
    if serve_with == "llamacpp" and not is_gguf_source(path):
        raise InputError(f"--serve-with llamacpp: model {spec.name!r} has no GGUF ({path or spec.backend}) for "
                         "llama.cpp to apply the adapter to; use --serve-with transformers")


def train_and_record(store: TraceStore, run_id: str, protocol: str, specs, out: Path, *, config: dict,
                     dataset: dict, train, summary=lambda run: {}, serve_with: str = "transformers",
                     spec=None, name: str | None = None) -> None:
    """Run ``train()`` as trace run ``run_id``: the run row, a failed status if it raises, then the
    selected checkpoint, the summary and the result pool file (the member served by ``serve_with``).
    Under ``accelerate launch`` every process trains and only the main one writes."""
    from agora.training.pipeline import select_checkpoint
    from agora.training.pool_entries import trained_entry
    from agora.training.resume import is_main_process

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


# ------------------------------------------------------------------ --aggregate K (train grpo, train sft)

SETS_PER_QUESTION_OPTION = typer.Option(2, "--sets-per-question", min=1, help="--aggregate: candidate sets drawn "
                                        "per question, at most.")
EASY_PER_HARD_OPTION = typer.Option(1.0, "--easy-per-hard", min=0.0, help="--aggregate: sets whose majority is "
                                    "right kept per set whose majority is wrong.")


def refuse_aggregate_only(aggregate: int, given: dict[str, object]) -> None:
    """Refuse options of ``--aggregate K`` given without it (``given``: option → whether it was
    given, in the order named), in one line naming them.

    Raises:
        InputError: any of them given while ``aggregate`` is 0."""
    named = [flag for flag, was_given in given.items() if was_given]
    if named and not aggregate:
        raise InputError(f"{', '.join(named)}: options of --aggregate K (its candidate sets); "
                         "without it they would be ignored")


def held_out_set(held_out: Path | None):
    """The questions of ``--held-out`` (:class:`~agora.training.own_samples.HeldOut`; empty without it)."""
    from agora.training.own_samples import HeldOut

    return HeldOut.from_file(held_out) if held_out is not None else HeldOut()


def aggregate_sets(db: str, k: int, sets_per_question: int, easy_per_hard: float, source_run: list[str] | None,
                   held_out: Path | None, shots: int, seed: int, limit: int | None = None):
    """``(sets, cfg, source, stats)`` of ``--aggregate K`` (:mod:`agora.training.aggregator`): the
    candidate sets drawn from the scored samples of any model in ``db`` (``--source-run`` runs, the
    ``--held-out`` questions left out; the first ``limit``), the
    :class:`~agora.training.aggregator.AggregatorDataConfig` that drew them (and writes their prompts),
    the dataset's source (``db``, ``aggregate``, ``sets_per_question``, ``easy_per_hard``, ``shots``,
    ``held_out_questions``, ``source_run_filter``, and ``source_runs``: the runs of every candidate) and
    :func:`~agora.training.aggregator.aggregator_stats` with ``skipped_calls`` and, when no set was
    drawn, ``empty_note`` (:func:`empty_sets_note`, then the calls not read by reason).

    Raises:
        InputError: a bad ``--aggregate``, ``--sets-per-question`` or ``--easy-per-hard`` (naming it), or a
            ``--source-run`` that is not a run of ``db``. FileNotFoundError: no such database."""
    from agora.training.aggregator import AggregatorDataConfig, aggregator_stats, candidate_sets
    from agora.training.own_samples import scored_samples
    from agora.training.verified import calls_not_read

    if store_backend(db) is None and not Path(db).is_file():
        raise FileNotFoundError(f"{db}: no such trace database (record samples first: agora bench, agora run ...)")
    check_sources(db, None, source_run)
    held = held_out_set(held_out)
    cfg = settings_from_options(AggregatorDataConfig, {"k": "aggregate", "sets_per_question": "sets_per_question",
                                                       "easy_per_hard": "easy_per_hard"},
                                k=k, sets_per_question=sets_per_question, easy_per_hard=easy_per_hard, shots=shots,
                                seed=seed)
    samples, skipped = scored_samples(db, (), tuple(source_run or ()), held)
    sets = candidate_sets(samples, cfg)[:limit]
    stats = {**aggregator_stats(sets), "skipped_calls": skipped}
    if not sets:
        stats["empty_note"] = empty_sets_note(samples, k, easy_per_hard) + calls_not_read(skipped)
    source = {"db": shown_url(db), "aggregate": k, "sets_per_question": sets_per_question,
              "easy_per_hard": easy_per_hard, "shots": shots,
              "held_out_questions": len(held), "source_run_filter": list(source_run or ()),
              "source_runs": stats["source_runs"]}
    return sets, cfg, source, stats


def empty_sets_note(samples, k: int, easy_per_hard: float) -> str:
    """Why ``--aggregate K`` drew no candidate set from ``samples`` (scored samples of any model), in
    one clause: too few samples per question, or only sets whose majority is right (easy) and none
    to keep them beside."""
    from collections import defaultdict

    from agora.training.own_samples import normalise_question

    per_question: dict[str, set[str]] = defaultdict(set)
    for s in samples:
        per_question[normalise_question(s.question)].add(s.call_id)
    most = max(map(len, per_question.values()), default=0)
    if most < k:
        return (f"no question has {k} recorded samples to show (the most for one question: {most}, over "
                f"{len(per_question)} questions with gold); lower --aggregate or record more samples")
    return (f"every candidate set drawn has a right majority (easy) and none a wrong one (hard), and "
            f"--easy-per-hard {easy_per_hard:g} keeps that many easy sets per hard one")


def check_row_lengths(rows: list[dict], spec: ModelSpec, max_length: int, what: str) -> None:
    """Refuse prompt-completion ``rows`` of which any is longer than ``--max-length`` tokens through
    ``spec``'s tokenizer and chat template (loads the tokenizer only): TRL's SFT cuts a row at
    ``max_length`` from its end, so the completion, what is learnt, would be cut first (or lost).
    ``what``: the rows, as the message names them (``"aggregator rows"``).

    Raises:
        InputError: a row over ``max_length``, in one line naming ``--max-length``, how many rows are
            over and the longest one's tokens."""
    from agora.training.pipeline import base_of, refuse_long_rows
    from agora.training.trainers import sft_row_tokens

    refuse_long_rows(sft_row_tokens(rows, base_of(spec)[0]), max_length, what)
