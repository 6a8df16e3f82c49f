"""The Stackelberg iteration: duels → preference data → train each model → replace pool entries → repeat.

Hahn et al., "Multi-LLM Collaborative Alignment via Stackelberg Games" (arXiv 2609.39076, §2 and
App. C; protocols.md §2): after each iteration of ``D`` leader-selected duels, every follower is
trained on the data its duels produced (DPO on non-tied pairs, or GRPO with the reputation-weighted
peer-judge reward), and the trained models play the next iteration.

The duels are :func:`agora.runs.duel.run_duels`'s, unchanged: one duel run holds all ``T``
iterations (reputations, leader weights and the annealed schedules carry over), and it is played
one iteration per call. ``run_duels`` resumes after the last recorded duel, so each call continues
with the pool as it stands (trained members keep their names, hence their reputations), and an
``on_duel`` hook stops the call once iteration ``t``'s last duel is recorded.

**Checkpoint selection** on a validation split: each member's pairs of the iteration are split by
instruction; the held-out pairs score the new adapter and the member's current model with the
reference-free :func:`~agora.training.trainers.preference_accuracy`, and the new adapter replaces
the member only when it ranks at least as many held-out pairs right (without held-out pairs it
always does). Every artefact is in the trace DB: the duel run's tables, ``training_datasets``,
``checkpoints`` (``selected = 1`` for the ones that entered the pool) and a ``runs`` row
(protocol ``evolve``) whose summary lists each iteration's pool file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Sequence

from pydantic import model_validator

from agora.tasks.errors import InputError
from agora.models._files import safe_file_name
from agora.models.convert import is_gguf_source
from agora.models.pool import ModelPool, ModelSpec, pool_from_specs
from agora.models.validation import Rule, settings
from agora.graphs.duel import DuelConfig, DuelContext
from agora.runs.duel import run_duels
from agora.tasks.problem import Problem
from agora.traces.store import TraceStore
from agora.training.config import DPOSettings, GRPOSettings, SFTSettings
from agora.training.datasets import (
    PairFilter,
    dpo_rows,
    grpo_rows_from_duels,
    load_duels,
    load_preference_pairs,
    split_by_instruction,
)
from agora.training.pipeline import MemberRun, base_of, dpo_member, grpo_member, select_checkpoint, sft_member
from agora.training.pool_entries import spec_entry, trained_entry, write_pool_file
from agora.training.trainers import preference_accuracy
from agora.training.own_samples import VerifiedConfig, duel_samples, length_ratio_rule, normalise_question
from agora.training.verified import own_pairs, sft_rows

Algorithm = Literal["dpo", "grpo", "sft"]
DataSource = Literal["duels", "own"]
RewardName = Literal["judge", "correctness", "stored"]


@settings
class EvolveConfig:
    """Settings of the loop (duel settings, including ``T``, live in ``duel``)."""

    duel: DuelConfig = field(default_factory=DuelConfig)
    """The duel run: mode, ``D`` duels per iteration, ``T`` iterations, judges, leader."""
    algorithm: Annotated[Algorithm, Rule(lambda v: v in ("dpo", "grpo", "sft"), "EvolveConfig.algorithm must be 'dpo', 'grpo' or 'sft', got {value!r}")] = "dpo"
    """``dpo`` on the member's non-tied pairs, ``grpo`` on the instructions it duelled on, or ``sft`` on
    its own right answers (``data = "own"`` only)."""
    data: Annotated[DataSource, Rule(lambda v: v in ("duels", "own"), "EvolveConfig.data must be 'duels' or 'own', got {value!r}")] = "duels"
    """What ``dpo`` and ``sft`` learn from: ``duels``, the judges' preferences between the member and
    its opponents; ``own``, the member's own right answers over its own wrong ones to the same
    instruction across the iteration's duels, checked by the scorer against gold and length-matched
    (:func:`agora.training.own_samples.duel_samples`; instructions without gold give none)."""
    length_ratio: Annotated[float, length_ratio_rule("EvolveConfig.")] = 1.5
    """``own`` pairs: longer over shorter answer at most (0: no filter)."""
    sft: SFTSettings = field(default_factory=SFTSettings)
    train_models: tuple[str, ...] = ()
    """Members to train; empty = every member with local weights (GGUF or HF folder)."""
    validation_fraction: Annotated[float, Rule(lambda v: 0.0 <= v < 1.0, "EvolveConfig.validation_fraction must be in [0, 1), got {value}")] = 0.2
    """Share of a member's instructions held out to select its checkpoint."""
    min_margin: Annotated[float, Rule(lambda v: v >= 0, "EvolveConfig.min_margin must be >= 0, got {value}")] = 0.0
    """DPO: drop pairs with a smaller judge-score margin."""
    dpo: DPOSettings = field(default_factory=DPOSettings)
    grpo: GRPOSettings = field(default_factory=GRPOSettings)
    rewards: Annotated[tuple[RewardName, ...], Rule(lambda v: bool(v) and all(r in ("judge", "correctness", "stored") for r in v), "EvolveConfig.rewards must name judge, correctness or stored, got {value!r}")] = ("judge",)
    """GRPO rewards: ``judge`` (online peers, reputation-weighted, min–max per group: the paper's),
    ``correctness`` (gold answers), ``stored`` (judge scores of already duelled answers)."""
    serve_with: Annotated[str, Rule(lambda v: v in ("transformers", "llamacpp"), "EvolveConfig.serve_with must be 'transformers' or 'llamacpp', got {value!r}")] = "transformers"
    """How a selected member plays the next iteration: ``transformers`` (its dequantised weights and
    the adapter) or ``llamacpp`` (its GGUF with the adapter as a GGUF LoRA: the quantised model at
    llama.cpp's speed; members trained from an HF folder stay on transformers)."""

    @model_validator(mode="after")
    def _data_fits_algorithm(self) -> EvolveConfig:
        if self.algorithm == "grpo" and self.data != "duels":
            raise InputError("EvolveConfig.data 'own' feeds dpo and sft; grpo trains on the duels' instructions")
        if self.algorithm == "sft" and self.data != "own":
            raise InputError("EvolveConfig.algorithm 'sft' trains on the member's own right answers: set data 'own'")
        return self


@dataclass
class MemberOutcome:
    """What happened to one member in one iteration."""

    model: str
    trained: bool
    reason: str = ""
    """Why it was not trained (no pairs...)."""
    steps: int = 0
    validation_pairs: int = 0
    accuracy_new: float | None = None
    accuracy_current: float | None = None
    selected: bool = False
    """True when the new adapter replaced the member in the pool."""
    adapter: str | None = None
    held_out_accuracy: float | None = None
    """Greedy accuracy of the member as it plays the next iteration (the new adapter when selected, else
    its current model) on the held-out problems; ``None`` without any."""


@dataclass
class IterationOutcome:
    iteration: int
    duels: int
    pairs: int
    members: list[MemberOutcome]
    pool_file: Path


@dataclass
class EvolveOutcome:
    run_id: str
    duel_run_id: str
    iterations: list[IterationOutcome]
    specs: list[ModelSpec]
    """The final pool."""
    base_held_out: dict[str, float] = field(default_factory=dict)
    """Each trained member's held-out accuracy before the first round (empty without held-out problems)."""


class _IterationDone(Exception):
    """Raised from ``run_duels``'s ``on_duel`` hook after an iteration's last duel is recorded."""


def trainable(specs: Sequence[ModelSpec], names: Sequence[str] = ()) -> list[str]:
    """Members to train: ``names`` (checked), or every member with local weights.

    Raises:
        ValueError: a named member that is not in the pool or has no local weights.
    """
    by_name = {s.name: s for s in specs}
    if names:
        for n in names:
            if n not in by_name:
                raise InputError(f"train model {n!r} is not in the pool ({', '.join(by_name)})")
            base_of(by_name[n])
        return list(names)
    out = []
    for s in specs:
        try:
            base_of(s)
        except ValueError:
            continue
        out.append(s.name)
    return out


def _spec_of(entry: dict[str, Any]) -> ModelSpec:
    known = set(ModelSpec.__dataclass_fields__) - {"extra"}
    return ModelSpec(**{k: v for k, v in entry.items() if k in known},
                     extra={k: v for k, v in entry.items() if k not in known})


def next_spec(spec: ModelSpec, run: MemberRun, iteration: int, serve_with: str = "transformers") -> ModelSpec:
    """The spec a selected member plays the next iteration with: ``run``'s adapter on ``spec``'s
    weights, served by ``serve_with`` (``llamacpp`` only where the member has a GGUF; otherwise the
    transformers entry the training wrote)."""
    if serve_with == "llamacpp" and is_gguf_source(run.result.base):
        return _spec_of(trained_entry(spec, run.result, iteration, backend="llamacpp"))
    return _spec_of(run.entry)


def _duels_recorded(store: TraceStore, duel_run_id: str, iteration: int) -> int:
    return len(store.duel_rows((duel_run_id,), (iteration,)))


PoolFactory = Callable[[Sequence[ModelSpec]], ModelPool]


def play_iteration(store: TraceStore, duel_run_id: str, pool: ModelPool, problems: Sequence[Problem],
                   config: DuelConfig, iteration: int, on_event: Callable[[dict], None] | None = None) -> None:
    """Play iteration ``iteration`` of the duel run with ``pool`` (no-op when it is recorded)."""
    if _duels_recorded(store, duel_run_id, iteration) >= config.duels:
        return

    def stop_after(rec: dict[str, Any]) -> None:
        if on_event is not None:
            on_event({"event": "duel", "message": f"duel {rec['iteration']}:{rec['index']}: {rec['winner'] or 'tie'}"})
        if rec["iteration"] == iteration and rec["index"] == config.duels - 1 and iteration < config.iterations - 1:
            raise _IterationDone

    try:
        run_duels(store, duel_run_id, DuelContext(pool=pool, config=config, instructions=list(problems)),
                  on_event=on_event, on_duel=stop_after, pool_may_change=True)
    except _IterationDone:
        pass


def own_data(store: TraceStore, duel_run_id: str, t: int, name: str, cfg: EvolveConfig,
             spec: ModelSpec | None = None) -> tuple[list, list]:
    """``(pairs, sft rows)`` of member ``name``'s own verified answers in iteration ``t``'s duels; with
    its ``spec``, under the prompt it saw (its recipe's and system prompt), none when its recipe
    rewrites the reply (:func:`agora.training.own_samples.duel_samples`)."""
    vcfg = VerifiedConfig(model=name, length_ratio=cfg.length_ratio)
    samples = duel_samples(load_duels(store.db, run_ids=(duel_run_id,), iterations=(t,)), name, spec)
    return own_pairs(samples, vcfg), sft_rows(samples, vcfg)


def _train(store: TraceStore, run_id: str, duel_run_id: str, pool: ModelPool, spec: ModelSpec,
           cfg: EvolveConfig, t: int, out: Path, pairs: list[dict], val_rows: list[dict],
           sft: Sequence[dict] = ()) -> MemberRun:
    """Train one member on iteration ``t``'s data (GRPO prompts and SFT rows exclude the held-out
    instructions)."""
    source = {"duel_run": duel_run_id, "data": cfg.data}
    if cfg.algorithm == "dpo":
        flt = PairFilter(min_margin=cfg.min_margin, model=spec.name)
        return dpo_member(store, run_id, spec, pairs, out, cfg.dpo, flt, validation_fraction=cfg.validation_fraction,
                          iteration=t, source=source)
    if cfg.algorithm == "sft":
        held_out = {normalise_question(r["instruction"]) for r in val_rows}
        run = sft_member(store, run_id, spec, [r for r in sft if normalise_question(r["instruction"]) not in held_out],
                         out, cfg.sft,
                         iteration=t, source=source)
        run.validation_rows = val_rows
        if val_rows:
            run.validation_accuracy = preference_accuracy(run.result.base, str(run.result.adapter_dir), val_rows,
                                                          cfg.sft.threads)
        return run
    from agora.training import rewards as R

    held_out = {normalise_question(r["instruction"]) for r in val_rows}
    rows = [r for r in grpo_rows_from_duels(load_duels(store.db, run_ids=(duel_run_id,), iterations=(t,)),
                                            model=spec.name) if normalise_question(r["instruction"]) not in held_out]
    funcs: list[Any] = []
    for name in cfg.rewards:
        if name == "judge":
            ratings = pairs[-1]["reputations"] if pairs else None
            funcs.append(R.PeerJudgeReward(pool, spec.name,
                                           ratings=ratings, config=replace(cfg.duel.judge, presentation="single"),
                                           context={"run_id": run_id}))
        else:
            funcs.append(R.correctness_reward if name == "correctness" else R.stored_judge_reward)
    run = grpo_member(store, run_id, spec, rows, out, cfg.grpo, funcs, iteration=t, source={"duel_run": duel_run_id})
    run.validation_rows = val_rows
    if val_rows:
        run.validation_accuracy = preference_accuracy(run.result.base, str(run.result.adapter_dir), val_rows,
                                                      cfg.grpo.threads)
    return run


def held_out_accuracy(spec: ModelSpec, problems: Sequence[Problem], out_file: Path, max_tokens: int,
                      threads: int) -> float:
    """Greedy accuracy of pool member ``spec`` (its weights and adapter, on transformers, asked and read
    as the pool serves it: its system prompt and recipe) on ``problems``
    (:func:`agora.training.evaluation.greedy_outcomes`: resumable, one JSON line per question in ``out_file``)."""
    from agora.training.evaluation import greedy_outcomes

    base, adapter = base_of(spec)
    rows = greedy_outcomes(problems, base, adapter, out_file, max_tokens=max_tokens, threads=threads, member=spec)
    return sum(bool(r["correct"]) for r in rows) / len(rows)


def _recorded_config(cfg: EvolveConfig, duel_run_id: str) -> dict[str, Any]:
    """The settings the ``evolve`` run records (and a rerun under its id is compared with)."""
    recorded = asdict(cfg)
    # defaults added later are left out, so runs recorded before they existed resume
    for key, default in (("serve_with", "transformers"), ("data", "duels"), ("length_ratio", 1.5)):
        if recorded[key] == default:
            del recorded[key]
    if cfg.algorithm != "sft":
        del recorded["sft"]
    return {**recorded, "duel_run": duel_run_id}


def _problem_at(file: tuple[Path, str] | None, pid: str) -> str | None:
    """``path:line`` of problem ``pid`` in ``file`` (``(path, format)``), the path alone when its line is not
    found, ``None`` without a file."""
    from agora.tasks.loaders import problem_line

    if file is None or file[0] is None:
        return None
    line = problem_line(*file, pid)
    return f"{file[0]}:{line}" if line is not None else str(file[0])


def _overlap_refusal(overlap: Sequence[Problem], played: dict[str, Problem], held_out_file: tuple[Path, str] | None,
                     instructions_file: tuple[Path, str] | None) -> str:
    """One line naming the first held-out problem that is also an instruction (file and line where known)."""
    h = overlap[0]
    p = played[normalise_question(h.question)]
    text = normalise_question(h.question)
    text = text[:60] + ("..." if len(text) > 60 else "")
    where, source = _problem_at(held_out_file, h.id), _problem_at(instructions_file, p.id)
    more = f"; {len(overlap)} held-out problems in all are instructions" if len(overlap) > 1 else ""
    return (f"{where + ': ' if where else ''}held-out problem {h.id!r} ({text!r}) is also instruction {p.id!r} of the "
            f"duels ({source + '; ' if source else ''}texts compared with whitespace collapsed){more}; hold out "
            "problems the duels do not play")


def check_evolve(store: TraceStore | None, run_id: str, specs: Sequence[ModelSpec], problems: Sequence[Problem],
                 cfg: EvolveConfig, held_out: Sequence[Problem] = (), *,
                 held_out_file: tuple[Path, str] | None = None,
                 instructions_file: tuple[Path, str] | None = None) -> list[str]:
    """What :func:`evolve` refuses before its first duel, checked without recording anything (the
    command line asks it before it says that a run starts). Returns the members to train.

    Raises:
        InputError: a member to train that is not in the pool or has no local weights, a pool with no
            member to train, ``data = "own"`` with no instruction holding a gold answer (nothing to
            check an answer against), held-out problems without gold answers or that are also
            instructions of the duels (text compared with whitespace collapsed; one line naming the
            first such problem, its id, text and line of ``held_out_file`` and the instruction's line of
            ``instructions_file``, each ``(path, format)`` the problems were loaded from, when given).
        ResumeRefusedError: an existing ``run_id`` of ``store`` started with other settings, pool or
            instructions (:func:`agora.traces.resume.resume_refusal`; ``store`` ``None``: a new
            database, not checked).
    """
    from agora.traces.errors import ResumeRefusedError
    from agora.traces.resume import resume_refusal

    names = trainable(specs, cfg.train_models)
    if not names:
        raise InputError(f"no member of the pool ({', '.join(s.name for s in specs)}) has local weights to train "
                         "(a llamacpp GGUF or a transformers HF folder): the iterations would only play duels")
    if cfg.data == "own" and not any(p.gold is not None and p.kind in ("math", "mc") for p in problems):
        raise InputError(f"data 'own': none of the {len(problems)} instructions has a gold answer (math or "
                         "multiple choice) to check the members' answers against; give a problem file with gold "
                         "answers, or train on the judges' preferences (data 'duels')")
    no_gold = [p.id for p in held_out if p.gold is None or p.kind not in ("math", "mc")]
    if no_gold:
        where = _problem_at(held_out_file, no_gold[0])
        more = f" ({len(no_gold)} held-out problems in all have none)" if len(no_gold) > 1 else ""
        raise InputError(f"{where + ': ' if where else ''}held-out problem {no_gold[0]!r} has no gold answer to score "
                         f"against{more}; hold out problems with gold answers")
    played = {}
    for p in problems:
        played.setdefault(normalise_question(p.question), p)
    overlap = [p for p in held_out if normalise_question(p.question) in played]
    if overlap:
        raise InputError(_overlap_refusal(overlap, played, held_out_file, instructions_file))
    refused = None if store is None else resume_refusal(
        store, run_id, "evolve", _recorded_config(cfg, f"{run_id}-duels"), [s.describe() for s in specs],
        {"instructions": len(problems)})
    if refused is not None:
        raise ResumeRefusedError(refused)
    duels = None if store is None or store.get_run(run_id) is not None else store.get_run(f"{run_id}-duels")
    if duels is not None:  # another command's run under the id this run would play its duels as
        raise ResumeRefusedError(f"run id {run_id!r} would play its duels as run {run_id}-duels, which {store.path} "
                                 f"already holds (a {duels['protocol']} run of another command); pick a new --run-id")
    return names


def evolve(store: TraceStore, run_id: str, specs: Sequence[ModelSpec], problems: Sequence[Problem],
           cfg: EvolveConfig, out_dir: str | Path, *, on_event: Callable[[dict], None] | None = None,
           make_pool: PoolFactory = pool_from_specs, held_out: Sequence[Problem] = (),
           held_out_max_tokens: int = 256) -> EvolveOutcome:
    """Run ``cfg.duel.iterations`` Stackelberg iterations from the pool ``specs``.

    Args:
        store: the trace DB (duels, datasets, checkpoints and the ``evolve`` run are recorded there).
        run_id: the evolve run; its duel run is ``<run_id>-duels``.
        specs: the starting pool (at least 3 members).
        problems: the leader's instruction pool.
        out_dir: ``it<t>/<model>/`` folders (datasets, adapters) and ``it<t>/pool.toml``.
        on_event: progress callback (``{"event", "message", ...}``).
        make_pool: builds each iteration's pool from its specs (tests put scripted judges in).
        held_out: problems (never among ``problems``, compared by text with whitespace collapsed:
            :func:`~agora.training.own_samples.normalise_question`) each trained member is scored on after every
            iteration, greedy (``MemberOutcome.held_out_accuracy``; the summary's ``base_held_out`` holds
            each member's score before the first round); files ``out_dir/held_out/``.

    Raises:
        ValueError: bad members or settings (see :func:`trainable`, :func:`~agora.runs.duel.run_duels`).
    """
    out_dir = Path(out_dir)
    specs = list(specs)
    names = check_evolve(store, run_id, specs, problems, cfg, held_out)
    duel_run_id = f"{run_id}-duels"
    store.start_run(run_id, "evolve", config=_recorded_config(cfg, duel_run_id),
                    pool=[s.describe() for s in specs], dataset={"instructions": len(problems)})
    emit = on_event or (lambda e: None)
    outcome = EvolveOutcome(run_id, duel_run_id, [], specs)
    threads = cfg.dpo.threads
    try:
        base_scores = {name: held_out_accuracy(next(s for s in specs if s.name == name), held_out,
                                               out_dir / "held_out" / f"base-{safe_file_name(name)}.jsonl",
                                               held_out_max_tokens, threads) for name in names} if held_out else {}
        outcome.base_held_out = base_scores
        for t in range(cfg.duel.iterations):
            emit({"event": "iteration", "message": f"iteration {t}: duels", "iteration": t})
            pool = make_pool(specs)
            play_iteration(store, duel_run_id, pool, problems, cfg.duel, t, on_event)
            pairs = [p for p in load_preference_pairs(store.db) if p["run_id"] == duel_run_id and p["iteration"] == t]
            members = []
            for name in names:
                spec = next(s for s in specs if s.name == name)
                mine_pairs, sft = own_data(store, duel_run_id, t, name, cfg, spec) if cfg.data == "own" else (pairs, [])
                mine = dpo_rows(mine_pairs, PairFilter(min_margin=cfg.min_margin, model=name))
                val_rows = split_by_instruction(mine, cfg.validation_fraction, seed=cfg.dpo.seed)[1]
                emit({"event": "train", "message": f"iteration {t}: training {name} ({cfg.algorithm}, {cfg.data})"})
                try:
                    run = _train(store, run_id, duel_run_id, pool, spec, cfg, t,
                                 out_dir / f"it{t}" / safe_file_name(name), mine_pairs, val_rows, sft)
                except ValueError as exc:
                    members.append(MemberOutcome(name, trained=False, reason=str(exc)))
                    emit({"event": "skip", "message": f"iteration {t}: {name} not trained: {exc}"})
                    continue
                m = MemberOutcome(name, trained=True, steps=run.result.steps, validation_pairs=len(val_rows),
                                  accuracy_new=run.validation_accuracy, adapter=str(run.result.adapter_dir))
                if val_rows:
                    base, adapter = base_of(spec)
                    m.accuracy_current = preference_accuracy(base, adapter, val_rows, cfg.dpo.threads)
                m.selected = m.accuracy_current is None or m.accuracy_new >= m.accuracy_current
                if m.selected:
                    select_checkpoint(store, run.checkpoint_id)
                    specs = [next_spec(spec, run, t, cfg.serve_with) if s.name == name else s for s in specs]
                if held_out:
                    now = _spec_of(run.entry) if m.selected else spec  # scored as trained: transformers + adapter
                    m.held_out_accuracy = held_out_accuracy(now, held_out, out_dir / "held_out" /
                                                            f"it{t}-{safe_file_name(name)}.jsonl",
                                                            held_out_max_tokens, threads)
                members.append(m)
                emit({"event": "selected" if m.selected else "kept",
                      "message": f"iteration {t}: {name} " + ("→ new adapter" if m.selected else "keeps its model")
                      + (f" (held-out accuracy {m.accuracy_new:.2f} vs {m.accuracy_current:.2f})"
                         if m.accuracy_current is not None else " (no held-out pairs)")})
            pool_file = write_pool_file([spec_entry(s) for s in specs], out_dir / f"it{t}" / "pool.toml")
            outcome.iterations.append(IterationOutcome(t, _duels_recorded(store, duel_run_id, t), len(pairs),
                                                       members, pool_file))
        outcome.specs = specs
        store.finish_run(run_id, summary={"duel_run": duel_run_id, "base_held_out": base_scores, "iterations": [
            {"iteration": it.iteration, "duels": it.duels, "pairs": it.pairs, "pool_file": str(it.pool_file),
             "members": [asdict(m) for m in it.members]} for it in outcome.iterations]})
    except BaseException:
        store.finish_run(run_id, status="failed")
        raise
    return outcome
