"""Self-improvement on the Qwen pool (issue 19): does one round of training on its own and its peers'
traces make Qwen2.5-Coder-0.5B better at held-out GSM8K? And does the Stackelberg leader make duels
more informative than uniform instructions?

One command, resumable, small defaults (about 1 CPU-hour; the full size about 13, see benchmarks/README.md)::

    AGORA_LLAMA_THREADS=1 python benchmarks/self_improvement.py                     # small
    python benchmarks/self_improvement.py --run-id si-full --train-questions 128 --eval-questions 250 \\
        --steps 32 --align-samples 4 --duels 32 --iterations 4 --generations 8 --grpo-prompts solved --threads 2

The own-data arms alone (the ALIGN traces, then each arm's training and its paired evaluation; about
3 CPU-hours per arm at this size is the budget to check against, not yet measured)::

    python benchmarks/self_improvement.py --run-id si-own --train-questions 128 --eval-questions 200 \\
        --align-samples 4 --steps 32 --phases align,train,eval --arms own-sft,own-dpo --threads 2 \\
        --record benchmarks/si-own/phases.json
    python benchmarks/self_improvement.py --run-id si-own ... --arms own-sft,own-dpo,agg   # and the aggregator

The aggregator on the 0.5B's own samples, with no ALIGN phase: the training candidates are a samples
run's (here si-own2's, 4 samples of each of the first 384 GSM8K training questions), the held-out ones a
run of the same kind on the first ``--eval-questions`` test questions, in the same database (a new run
id: ``--agg-eval-runs`` is a setting of the run)::

    AGORA_LLAMA_THREADS=2 agora run align --data ../shared/data/gsm8k/test.jsonl --limit 200 \
        --models qwen2.5-coder-0.5b -n 1 -k 4 --db /work/si-own2/samples.db --run-id si-own2:agg-eval
    python benchmarks/self_improvement.py --run-id si-agg --out /work/si-agg --train-questions 128 \
        --eval-questions 200 --steps 32 --phases train,eval --arms agg --samples-db /work/si-own2/samples.db \
        --samples-runs si-own2:samples --agg-eval-runs si-own2:agg-eval --threads 2 \
        --record benchmarks/si-agg/phases.json

Phases (each recorded in ``OUT/<run-id>/phases.json`` with its wall and CPU seconds once it finishes;
a rerun of the same ``--run-id`` skips finished phases, and the trace and evaluation phases resume
inside: finished questions, duels and evaluated batches are kept):

1. ``align-traces``: ALIGN on the training questions (GSM8K *train*) with the default pool, agents
   alternating the 0.5B and the 1.5B, ``--align-samples`` candidates each, every candidate logged.
2. ``duels-sparta``: ``--iterations × --duels`` Sparta duels on the same training questions with the
   embedded duel pool (the two Qwen models and a ``cautious`` persona of each): peer-judged pairs.
3. ``train:<arm>``, same training questions and ``--steps`` optimiser steps for each arm, a fresh
   LoRA on the 0.5B (q, k, v, o projections): ``align-dpo`` (DPO on ALIGN pairs: a correct candidate,
   the 0.5B's own or the 1.5B's, over an incorrect 0.5B candidate of the same question,
   :mod:`agora.training.align_pairs`), ``duel-dpo`` (DPO on the Sparta run's non-tied pairs),
   ``grpo`` (GRPO with the correctness reward, ``--generations`` completions per prompt), and two arms
   on the target's **own verified samples** (:mod:`agora.training.verified`; the phase-1 ALIGN run,
   or ``--samples-db``/``--samples-runs``, e.g. a bench's shared draws; the held-out questions are
   excluded by id and text): ``own-dpo`` (DPO on its own right answers over its own wrong ones to the
   same prompt, length-matched by ``--length-ratio``) and ``own-sft`` (rejection-sampling fine-tuning
   on its own right answers, at most ``--sft-per-question`` a question), and ``distill-sft`` (the same
   fine-tuning on ``--teacher``'s right answers, by default the 1.5B's, read from ``--samples-db``:
   rejection-sampling distillation); and ``agg``, the 0.5B trained
   as an **aggregator** (AggLM; :mod:`agora.training.aggregator`): GRPO with the scorer's reward on
   prompts that show a training question's n·k ALIGN candidates (both models'), hard and easy sets
   mixed (``--agg-sets``, ``--agg-easy-per-hard``); with ``--agg-eval-runs``, the sets are the target's
   own samples in ``--samples-db``/``--samples-runs`` instead (k: the commonest number of samples a
   question has there; no align-traces phase); ``--agg-recipe sft`` trains it by rejection sampling
   instead (:func:`agora.training.aggregator.aggregator_sft_rows`: each set with a right candidate, that
   candidate's text as the target; cheaper than GRPO on 2 cores). Each arm writes ``OUT/<run-id>/<arm>/pool.toml``:
   the default pool with the 0.5B served with its adapter.
4. ``eval:base``, ``eval:<arm>``: the 0.5B greedy on the first ``--eval-questions`` GSM8K *test*
   questions (never trained on), base weights and each adapter, same backend (``--eval-backend``:
   transformers in fp32 on the dequantised weights, or llamacpp on the pool's quantised GGUF with the
   adapter as a GGUF LoRA; the pool file serves the arm the same way), same prompt as the protocols;
   the paired difference after − before
   with its 95 % CI (normal approximation and bootstrap) and McNemar's exact p. Greedy llama.cpp
   decoding reproduces only on machines of one kind (AVX2 and AVX-512 kernels sum in other orders),
   so each arm is paired with a base evaluation from its own kind: when ``eval:base`` ran on another
   kind, ``eval:base@<isa>`` evaluates the base again here, and the two base runs' disagreement is
   the machine effect, printed.
   The aggregator is evaluated apart: ``align-eval`` runs ALIGN (same pool and settings as phase 1)
   on the held-out questions, then ``eval:agg`` (and ``eval:agg-base``, the untrained 0.5B as
   aggregator) answers each held-out question from all of its n·k candidates, paired against
   majority vote (the run's ``self_consistency``) and ALIGN's own answer on the same candidates.
   With ``--agg-eval-runs RUN[,RUN]`` there is no ``align-eval``: each held-out question's candidates
   are the target's samples of it in those runs of ``--samples-db`` (matched by question text), and
   ``eval:agg``/``eval:agg-base`` are paired against majority vote over them (plurality of the recorded
   answers, ties to the first); ALIGN is not in that comparison. Refused up front, before any phase,
   when a run is not in the database, shares a question with the training samples, or lacks a held-out
   question.
5. ``serve:<arm>``: the best arm's ``pool.toml`` loaded as a pool and run through the ALIGN graph (one
   agent, one greedy sample) on the first ``--serve-check`` held-out questions: the served adapter
   must answer as the evaluation did.
6. ``duels-stackelberg``: as phase 2 with the EXP3 leader (same duels, instructions, seed). The
   leader's claim compares it with phase 2 per iteration: share of non-tied duels and mean score
   gap, with 95 % CIs (no training involved).

``--record benchmarks/si-full/phases.json`` keeps a second copy of the book in the checkout, written
with every phase: a new machine (no ``OUT/<run-id>``) resumes from it. Evaluations (per-question
verdicts), the duels' table, the ALIGN solved sets (GRPO's prompts) and every cost come back; the
trace database and adapters do not, so a DPO arm whose trace phase ran on a lost machine is refused
with that reason, and the serve check runs on the best arm whose adapter is on this machine.

Figures are printed at the end (and with ``--report`` alone, from what is recorded) and saved to
``OUT/<run-id>/summary.json``. CPU seconds are the process's (all threads: llama.cpp and torch).
Where both evaluations' cut answers are known, the report adds the paired difference on the questions
neither cut at ``--max-tokens`` (is a gain more than fewer cut answers?).

Widening a measurement: ``--eval-offset 200 --eval-questions 200`` holds out test questions 201–400,
disjoint from a first run's 1–200, under a new ``--run-id`` (same training settings; the arm is
retrained and its base evaluated again on this machine). ``--pooled A/phases.json,B/phases.json
--arms ARM`` prints each record's paired figures and the figures pooled over all their questions (each
question's verdicts from its own record), refused when the records differ in a setting that changes
what is measured or share a question.

A second round: ``--target-adapter OUT/<run-id>/<arm>/adapter`` starts the target from a first round's
adapter; ``eval:base`` is then that model, and every arm trains it further (with ``--samples-db``
holding that model's own samples, e.g. ``agora run align --pool OUT/<run-id>/<arm>/pool.toml``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
from dataclasses import asdict, replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from agora.agents.delegation import DelegationConfig  # noqa: E402
from agora.agents.judge import JudgeConfig  # noqa: E402
from agora.models.llamacpp import default_threads  # noqa: E402
from agora.models.pool import builtin_pool_specs, load_pool, pool_from_specs  # noqa: E402
from agora.graphs.delegation import DelegationContext, build_delegation_graph  # noqa: E402
from agora.graphs.duel import DuelConfig, DuelContext, default_duel_specs  # noqa: E402
from agora.runs.duel import run_duels  # noqa: E402
from agora.graphs.runner import run_problems  # noqa: E402
from agora.tasks.loaders import load_problems  # noqa: E402
from agora.traces.store import TraceStore  # noqa: E402
from agora.training.align_pairs import (  # noqa: E402
    AlignPairConfig,
    align_target_pairs,
    candidate_stats,
    solved_questions,
)
from agora.agents.stats import mean_ci, mean_difference, proportion_ci, proportion_difference  # noqa: E402
from agora.training.evaluation import paired_difference  # noqa: E402
from agora.training.phases import PhaseBook, PhaseBookError, machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "gsm8k"
ARMS = ("align-dpo", "duel-dpo", "grpo", "own-dpo", "own-sft", "distill-sft", "agg")
#: Arms trained on verified samples (:mod:`agora.training.verified`): the target's own (``own-*``), or
#: ``--teacher``'s right answers for ``distill-sft`` (rejection-sampling distillation, RFT with a
#: stronger member's samples: arXiv 2308.01825 §4).
OWN_ARMS = ("own-dpo", "own-sft", "distill-sft")
PHASES = ("align", "duels", "train", "eval", "serve", "leader")
#: The built-in pool whose first member is trained and whose second is its peer (``--pool``; set by
#: :func:`configure`): ``default``, the 0.5B and the 1.5B; ``tiny`` (SmolLM2, Gemma) for a quick smoke run.
POOL = "default"
TARGET, PEER = (s.name for s in builtin_pool_specs(POOL))
BASE = builtin_pool_specs(POOL)[0].path
#: Settings a rerun of the same run id may change (what to run, how fast), not what is measured.
MUTABLE = ("phases", "arms", "threads", "eval_batch", "report", "serve_check", "dpo_micro_batch", "save_steps",
           "redo")
#: Settings added after the first recorded runs: left out of the book at their defaults, so those runs resume.
OMITTED_DEFAULTS = {"pool": "default", "grpo_prompts": "all", "eval_backend": "transformers", "length_ratio": 1.5,
                    "sft_per_question": 4, "samples_db": None, "samples_runs": "", "agg_sets": 2,
                    "agg_easy_per_hard": 1.0, "base_from": None, "agg_eval_runs": "", "teacher": None,
                    "eval_offset": 0, "target_adapter": None, "agg_recipe": "grpo"}
#: Settings a base evaluation adopted with --base-from must share with this run.
BASE_SETTINGS = ("pool", "eval_data", "eval_offset", "eval_questions", "max_tokens", "eval_backend", "target_adapter")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-id", default="si-small")
    ap.add_argument("--pool", default="default", choices=("default", "tiny"),
                    help="built-in pool: its first member is trained, the second is its peer (tiny: a smoke run)")
    ap.add_argument("--out", type=Path, default=Path("runs/self-improvement"))
    ap.add_argument("--train-data", type=Path, default=SHARED / "train.jsonl", help="GSM8K train split (JSONL)")
    ap.add_argument("--eval-data", type=Path, default=SHARED / "test.jsonl", help="GSM8K test split (JSONL)")
    ap.add_argument("--train-questions", type=int, default=16, help="training questions (seeded sample of train)")
    ap.add_argument("--eval-questions", type=int, default=20, help="held-out questions (first N of test); ≥ 200 for the full size")
    ap.add_argument("--eval-offset", type=int, default=0,
                    help="skip this many test questions first: the held-out set is questions offset+1 … "
                         "offset+N (a second, disjoint held-out set for a run that widens an earlier one)")
    ap.add_argument("--steps", type=int, default=4, help="optimiser steps of every arm")
    ap.add_argument("--align-samples", type=int, default=2, help="ALIGN candidates per agent (k)")
    ap.add_argument("--max-tokens", type=int, default=256, help="answer tokens: traces, GRPO completions, evaluation")
    ap.add_argument("--duels", type=int, default=4, help="duels per iteration (D), both modes")
    ap.add_argument("--iterations", type=int, default=2, help="duel iterations (T), both modes")
    ap.add_argument("--lr", type=float, default=5e-5, help="learning rate of every arm (constant after the warm-up)")
    ap.add_argument("--warmup-ratio", type=float, default=0.0,
                    help="share of the steps warming the learning rate up (the first step of a warm-up has lr 0)")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--beta", type=float, default=0.1, help="DPO β")
    ap.add_argument("--dpo-batch", type=int, default=4, help="DPO pairs per step")
    ap.add_argument("--dpo-micro-batch", type=int, default=1,
                    help="DPO pairs per forward pass (gradient accumulation makes up --dpo-batch; same update, "
                         "less memory: Qwen's 152k-token vocabulary makes the logits of a batch of 4 pairs ≈ 10 GB)")
    ap.add_argument("--max-length", type=int, default=768, help="DPO prompt + answer tokens")
    ap.add_argument("--generations", type=int, default=4, help="GRPO completions per prompt (G)")
    ap.add_argument("--grpo-prompts-per-step", type=int, default=1)
    ap.add_argument("--grpo-temperature", type=float, default=0.8)
    ap.add_argument("--grpo-prompts", default="all", choices=("all", "solved"),
                    help="GRPO prompts: every training question, or those some ALIGN candidate got right "
                         "(groups on the others are constant zeros); agg with --agg-recipe grpo: every candidate "
                         "set, or those holding a right candidate")
    ap.add_argument("--pairs-per-question", type=int, default=2, help="ALIGN pairs per training question, at most")
    ap.add_argument("--length-ratio", type=float, default=1.5,
                    help="own-dpo: keep a pair when its longer answer is at most this many times the shorter (0: off)")
    ap.add_argument("--sft-per-question", type=int, default=4,
                    help="own-sft, distill-sft: distinct right answers per question")
    ap.add_argument("--teacher", default=None,
                    help="distill-sft: the pool member whose verified right answers (in --samples-db/--samples-runs) "
                         "the target is fine-tuned on (default: the pool's second member, the 1.5B)")
    ap.add_argument("--agg-sets", type=int, default=2, help="agg: candidate sets per training question, at most")
    ap.add_argument("--agg-recipe", default="grpo", choices=("grpo", "sft", "sft-answer"),
                    help="agg: how the aggregator learns: grpo (AggLM: the scorer's reward on its own answers), sft "
                         "(rejection sampling: imitate a right candidate of each set that has one; cheaper) or "
                         "sft-answer (the same sets, the target only 'The answer is N.' of a right candidate: the "
                         "loss falls on the choice, not on copying a candidate's text)")
    ap.add_argument("--agg-easy-per-hard", type=float, default=1.0,
                    help="agg: sets whose majority is right kept per set whose majority is wrong (AggLM's mix)")
    ap.add_argument("--samples-db", type=Path, default=None,
                    help="own arms: the trace DB whose samples of the target they read (e.g. a bench's, with its "
                         "shared draws; default: this run's traces.db, its align-traces phase)")
    ap.add_argument("--samples-runs", default="",
                    help="own arms: comma-separated runs of --samples-db to read (default: every run there; in this "
                         "run's traces.db, the align-traces run)")
    ap.add_argument("--agg-eval-runs", default="",
                    help="agg: comma-separated runs of --samples-db holding the target's samples of the held-out "
                         "questions (e.g. `agora run align -n 1 -k 4` on the evaluation file); given, the arm trains "
                         "on the target's own samples in --samples-db/--samples-runs and is compared with majority "
                         "vote on these candidates, with no ALIGN phase (and no ALIGN in the comparison)")
    ap.add_argument("--base-from", type=Path, default=None,
                    help="another run's phases.json whose finished base evaluation (eval:base) this run pairs with "
                         "instead of recomputing it; refused unless pool, eval data and size, max tokens and backend "
                         "match (a base evaluation from another kind of machine is redone here, as always); with "
                         "--target-adapter, the first round's evaluation of that adapter (its eval:<arm>)")
    ap.add_argument("--target-adapter", default=None,
                    help="a second round: the target starts from this peft adapter folder (a previous run's "
                         "<arm>/adapter); its 'base' evaluation is this adapter and every arm trains it further "
                         "(LoRA options then do not apply); --samples-db should hold that model's own samples")
    ap.add_argument("--redo", default="",
                    help="comma-separated finished phases to compute again (e.g. eval:agg after a fix to how its "
                         "answers are read; an evaluation's answer file is kept, so only the reading is redone)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-steps", type=int, default=4,
                    help="a training checkpoint every this many steps: an interrupted arm resumes from the last one "
                         "(0: none, the arm restarts)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"phases to run ({','.join(PHASES)})")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"training arms ({','.join(ARMS)})")
    ap.add_argument("--serve-check", type=int, default=4, help="held-out questions re-run through the served pool file")
    ap.add_argument("--eval-batch", type=int, default=10, help="questions per generation batch in evaluation")
    ap.add_argument("--eval-backend", default="transformers", choices=("transformers", "llamacpp"),
                    help="evaluation and the served pool file: transformers (fp32, the dequantised weights "
                         "trained on) or llamacpp (the pool's quantised GGUF with the adapter as a GGUF LoRA)")
    ap.add_argument("--threads", type=int, default=default_threads(), help="torch threads (AGORA_LLAMA_THREADS: llama.cpp)")
    ap.add_argument("--report", action="store_true", help="print the figures recorded so far and stop (writes nothing)")
    ap.add_argument("--pooled", default="",
                    help="REC,REC[,...]: print each recorded run's paired figures for --arms and the figures "
                         "pooled over all their held-out questions (disjoint sets, e.g. --eval-offset), then stop "
                         "(writes nothing; the other options are ignored)")
    ap.add_argument("--record", type=Path, default=None,
                    help="a second copy of phases.json, written with every phase (e.g. benchmarks/si-full/phases.json "
                         "in the checkout): a machine without OUT/<run-id> resumes from it (evaluations and costs "
                         "come back; trace phases whose traces.db is lost must be rerun under a new run id)")
    args = ap.parse_args(argv)
    for name in ("phases", "arms"):
        allowed = PHASES if name == "phases" else ARMS
        picked = [x.strip() for x in getattr(args, name).split(",") if x.strip()]
        bad = [x for x in picked if x not in allowed]
        if bad:
            ap.error(f"--{name}: unknown {', '.join(bad)} (choose from {', '.join(allowed)})")
        setattr(args, name, picked)
    if args.target_adapter is not None:
        folder = Path(args.target_adapter)
        if not (folder / "adapter_config.json").is_file():
            ap.error(f"--target-adapter {folder}: not a peft adapter folder (no adapter_config.json)")
        args.target_adapter = str(folder.resolve())
    if args.eval_offset < 0:
        ap.error(f"--eval-offset: must be at least 0, got {args.eval_offset}")
    for path in (args.train_data, args.eval_data):
        if not path.is_file():
            ap.error(f"{path}: no such file (GSM8K JSONL; --train-data / --eval-data)")
    if args.base_from is not None and not args.base_from.is_file():
        ap.error(f"--base-from {args.base_from}: no such phases.json")
    if args.samples_db is not None and not args.samples_db.is_file():
        ap.error(f"--samples-db {args.samples_db}: no such trace database")
    eval_runs = split_runs(args.agg_eval_runs)
    if eval_runs and args.samples_db is None:
        ap.error("--agg-eval-runs names runs of --samples-db: give --samples-db too")
    both = [r for r in eval_runs if r in split_runs(args.samples_runs)]
    if both:
        ap.error(f"--agg-eval-runs {', '.join(both)} is also in --samples-runs: the held-out candidates would be "
                 "training data")
    if args.teacher is not None:
        if "distill-sft" not in args.arms:
            ap.error("--teacher is an option of --arms distill-sft; here it would be ignored")
        members = [s.name for s in builtin_pool_specs(args.pool)]
        if args.teacher not in members:
            ap.error(f"--teacher {args.teacher!r}: not a member of the {args.pool} pool ({', '.join(members)})")
    return args


def first_round_eval(args) -> str:
    """With ``--target-adapter`` and ``--base-from``: the phase of the first round's book that evaluated
    that adapter (``eval:<arm>`` of the arm whose ``train:<arm>`` wrote it), the second round's base.

    Raises:
        PhaseBookError: no finished evaluation of that adapter in the book."""
    try:
        phases = json.loads(Path(args.base_from).read_text(encoding="utf-8")).get("phases", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise PhaseBookError(f"{args.base_from}: not a readable phase book ({exc})") from None
    for name, phase in phases.items():
        adapter = (phase.get("result") or {}).get("adapter") if name.startswith("train:") else None
        if adapter and Path(adapter).resolve() == Path(args.target_adapter).resolve():
            arm = name[len("train:"):]
            if f"eval:{arm}" in phases:
                return f"eval:{arm}"
    raise PhaseBookError(f"--base-from {args.base_from}: no finished evaluation of the --target-adapter "
                         f"{args.target_adapter} there (its train:<arm> wrote another adapter, or eval:<arm> "
                         "has not finished)")


def split_runs(value: str | None) -> tuple[str, ...]:
    """A comma-separated list of run ids (``--samples-runs``, ``--agg-eval-runs``) as a tuple, blanks dropped."""
    return tuple(r.strip() for r in (value or "").split(",") if r.strip())


def settings_of(args: argparse.Namespace) -> dict:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
            if k not in ("out", "record") and not (k in OMITTED_DEFAULTS and v == OMITTED_DEFAULTS[k])}


def configure(args: argparse.Namespace) -> None:
    global POOL, TARGET, PEER, BASE
    POOL = args.pool
    specs = builtin_pool_specs(POOL)
    TARGET, PEER, BASE = specs[0].name, specs[1].name, specs[0].path


def problems_of(args: argparse.Namespace):
    train_all = load_problems(args.train_data, "gsm8k", None)
    random.Random(args.seed).shuffle(train_all)
    train = train_all[:args.train_questions]
    held_out = load_problems(args.eval_data, "gsm8k", args.eval_offset + args.eval_questions)[args.eval_offset:]
    if args.eval_offset and len(held_out) < args.eval_questions:  # a widening slice must be whole
        raise SystemExit(f"{args.eval_data}: {len(held_out)} held-out questions after --eval-offset "
                         f"{args.eval_offset}, not the {args.eval_questions} asked for")
    overlap = {p.question.strip() for p in train} & {p.question.strip() for p in held_out}
    if overlap:
        raise SystemExit(f"{len(overlap)} training questions are also held-out questions")
    return train, held_out


def log(message: str) -> None:
    print(message, flush=True)


# ----------------------------------------------------------------------------- phases


def align_phase(args, store: TraceStore, train, run: str = "align") -> dict:
    """ALIGN on ``train`` as run ``<run-id>:<run>`` (``align``: the training questions' traces;
    ``align-eval``: the held-out questions' candidates the aggregator arm is compared on)."""
    pool = pool_from_specs(builtin_pool_specs(POOL), source=f"builtin:{POOL}")
    config = DelegationConfig(n_agents=2, k_samples=args.align_samples, max_tokens=args.max_tokens,
                              seed=args.seed, models=(TARGET, PEER))
    run_id = f"{args.run_id}:{run}"
    n = len(train)
    count = [0]

    def progress(q) -> None:
        count[0] += 1
        right = {m: r.get("correct") for m, r in q.methods.items()}
        log(f"  align {q.problem.id} ({count[0]} this session, {n} in all): {q.wall_s:.0f} s, correct {right}")

    outcome = run_problems(build_delegation_graph(), train, store=store, run_id=run_id, protocol="align",
                           context=DelegationContext(pool=pool, config=config), config=asdict(config),
                           pool_description=pool.describe(),
                           dataset={"path": str(args.train_data if run == "align" else args.eval_data),
                                    "format": "gsm8k", "limit": n},
                           on_question=progress)
    if outcome.failed:
        raise SystemExit(f"align traces: {len(outcome.failed)} questions failed; rerun to retry them")
    if run != "align":
        return {"run_id": run_id, "questions": n, "candidates": candidate_stats(store, [run_id])}
    # The solved sets travel with phases.json, so GRPO's prompts need no traces.db (a new machine).
    return {"run_id": run_id, "questions": n, "candidates": candidate_stats(store, [run_id]),
            "solved": sorted(solved_questions(store, [run_id])),
            "solved_by_target": sorted(solved_questions(store, [run_id], models=[TARGET]))}


def duel_phase(args, store: TraceStore, train, mode: str) -> dict:
    cfg = DuelConfig(mode=mode, duels=args.duels, iterations=args.iterations, seed=args.seed,
                     max_tokens=args.max_tokens, shots=2, judge=JudgeConfig())
    pool = pool_from_specs(default_duel_specs(POOL), source="builtin:duel" if POOL == "default" else f"builtin:duel-{POOL}")
    run_id = f"{args.run_id}:duels-{mode}"
    total = args.duels * args.iterations

    def on_duel(rec) -> None:
        log(f"  {mode} duel {rec['duel_id']} ({rec['duel_number'] + 1}/{total}): "
            f"{' vs '.join(rec['followers'])} → {rec['winner'] or 'tie'}")

    run_duels(store, run_id, DuelContext(pool=pool, config=cfg, instructions=train),
              dataset={"path": str(args.train_data), "format": "gsm8k", "limit": len(train)}, on_duel=on_duel)
    rows = store.duel_rows([run_id])
    # what the leader's table needs travels with phases.json (the duels' traces.db may stay behind)
    return {"run_id": run_id, "duels": len(rows), "ties": sum(bool(r["tie"]) for r in rows),
            "table": [{k: r[k] for k in ("iteration", "tie", "margin", "instruction_id")} for r in rows]}


def _lora(args):
    from agora.training.config import LoraSettings

    return LoraSettings(r=args.lora_r, alpha=2 * args.lora_r, dropout=0.0)


def teacher_of(args, arm: str) -> str:
    """Whose answers arm ``arm`` learns from: ``--teacher`` (default: the pool's second member) for
    ``distill-sft``, the target itself for the other own arms."""
    if arm != "distill-sft":
        return TARGET
    return getattr(args, "teacher", None) or PEER


def own_data(args, store: TraceStore, held_out, arm: str = "own-sft") -> tuple:
    """The verified samples of :func:`teacher_of` ``arm`` (the target's own for the own arms):
    ``(config, samples, skipped)``, the held-out (evaluation) questions excluded by id and by text."""
    from agora.training.own_samples import HeldOut, VerifiedConfig, own_samples

    runs = split_runs(args.samples_runs)
    if args.samples_db is None and not runs:
        runs = (f"{args.run_id}:align",)
    source = TraceStore.reading(args.samples_db) if args.samples_db is not None else store
    if not runs and split_runs(getattr(args, "agg_eval_runs", "")):
        runs = training_runs(args, source)  # every run but the held-out candidates'
    cfg = VerifiedConfig(model=teacher_of(args, arm), run_ids=runs, held_out=HeldOut.from_problems(held_out),
                         length_ratio=args.length_ratio, max_pairs_per_question=args.pairs_per_question,
                         max_sft_per_question=args.sft_per_question)
    samples, skipped = own_samples(source, cfg)
    return cfg, samples, skipped


def train_phase(args, book: PhaseBook, store: TraceStore, train, arm: str, held_out=()) -> dict:
    from agora.training.config import DPOSettings, GRPOSettings
    from agora.training.datasets import PairFilter, grpo_rows_from_problems, load_preference_pairs
    from agora.training.pipeline import dpo_member, grpo_member
    from agora.training.rewards import correctness_reward
    from agora.training.pool_entries import spec_entry, trained_entry, write_pool_file

    specs = list(builtin_pool_specs(POOL))
    spec = next(s for s in specs if s.name == TARGET)
    if getattr(args, "target_adapter", None):  # a second round: trained further from the first's adapter
        spec = replace(spec, adapter=args.target_adapter)
    out = args.out / args.run_id / arm
    run_id = f"{args.run_id}:train:{arm}"
    common = dict(learning_rate=args.lr, lr_scheduler="constant_with_warmup", warmup_ratio=args.warmup_ratio,
                  max_steps=args.steps, threads=args.threads, seed=args.seed, lora=_lora(args),
                  save_steps=args.save_steps)
    if arm == "grpo":
        g = args.generations
        settings = GRPOSettings(**common, batch_size=g * args.grpo_prompts_per_step, num_generations=g,
                                max_completion_length=args.max_tokens, temperature=args.grpo_temperature)
        prompts = train
        if args.grpo_prompts == "solved":
            if not book.done("align-traces"):
                raise ValueError("--grpo-prompts solved needs the align-traces phase")
            recorded = book.result("align-traces").get("solved")  # older books: from traces.db
            solved = set(recorded) if recorded is not None else solved_questions(store, [f"{args.run_id}:align"])
            prompts = [p for p in train if p.id in solved]
            if not prompts:
                raise ValueError("--grpo-prompts solved: no ALIGN candidate was right on any training question")
        member = grpo_member(store, run_id, spec, grpo_rows_from_problems(prompts, shots=2), out, settings,
                             [correctness_reward], source={"questions": len(prompts), "reward": "correctness",
                                                           "prompts": args.grpo_prompts})
        extra = {"prompts": len(prompts)}
    elif arm == "agg":
        from agora.training.aggregator import aggregation_reward, aggregator_rows, aggregator_stats, candidate_sets
        from agora.training.own_samples import HeldOut, scored_samples

        g = args.generations
        settings = GRPOSettings(**common, batch_size=g * args.grpo_prompts_per_step, num_generations=g,
                                max_completion_length=args.max_tokens, temperature=args.grpo_temperature)
        if split_runs(args.agg_eval_runs):  # the target's own samples, k a question as the data has them
            samples, runs = agg_training_samples(args, held_out)
            agg_eval_sets(args, held_out, samples)  # refused before training: no, or overlapping, held-out candidates
            k = samples_per_question(samples)
            if k < 2:
                raise ValueError(f"{args.samples_db}: {TARGET} has {k} sample(s) a question in "
                                 f"{', '.join(runs) or 'no run'}; an aggregator needs at least 2")
            cfg = agg_config(args, k)
            where = {"samples_db": str(args.samples_db), "runs": list(runs), "model": TARGET}
        else:
            cfg = agg_config(args)
            samples, _ = scored_samples(store, (), [f"{args.run_id}:align"], HeldOut.from_problems(held_out))
            where = {"run": f"{args.run_id}:align"}
        sets = candidate_sets(samples, cfg)
        if args.grpo_prompts == "solved" and args.agg_recipe == "grpo":  # a set without a right candidate:
            sets = [x for x in sets if x["any_correct"]]  # every reward 0, a group with no signal
        if not sets:
            raise ValueError(f"no candidate sets of {cfg.k}: " + (
                "no training question has that many samples" if split_runs(args.agg_eval_runs)
                else "the align-traces phase's samples are not in traces.db"))
        if args.agg_recipe in ("sft", "sft-answer"):
            from agora.training.aggregator import aggregator_sft_rows
            from agora.training.config import SFTSettings
            from agora.training.pipeline import refuse_long_rows, sft_member

            micro = min(args.dpo_micro_batch, args.dpo_batch)
            if args.dpo_batch % micro:
                raise ValueError(f"--dpo-batch {args.dpo_batch} is not a multiple of --dpo-micro-batch {micro}")
            target = "answer" if args.agg_recipe == "sft-answer" else "text"
            rows = aggregator_sft_rows(sets, cfg, model=TARGET, target=target)
            if not rows:
                raise ValueError(f"no candidate set of {cfg.k} holds a right candidate"
                                 + (", finished and explicit" if target == "text" else "")
                                 + f": nothing for --agg-recipe {args.agg_recipe} to imitate")
            refuse_long_rows(row_tokens(rows, spec.path), args.max_length, "aggregator rows")
            settings = SFTSettings(**common, batch_size=micro, grad_accum=args.dpo_batch // micro,
                                   max_length=args.max_length)
            member = sft_member(store, run_id, spec, rows, out, settings,
                                source={"aggregate": cfg.k, "sets": len(sets), "recipe": args.agg_recipe, **where})
            extra = {"prompts": len(rows), "sets": len(sets), "recipe": args.agg_recipe,
                     "rows_by_difficulty": _count(r["difficulty"] for r in rows)}
        else:
            member = grpo_member(store, run_id, spec, aggregator_rows(sets, cfg), out, settings, [aggregation_reward],
                                 source={"aggregate": cfg.k, "sets": len(sets), "prompts": args.grpo_prompts, **where})
            extra = {"prompts": len(sets), "recipe": "grpo", "sets_kept": args.grpo_prompts}
        extra.update({"data": aggregator_stats(sets), "k": cfg.k, "source": where})
    elif arm in OWN_ARMS:
        from agora.training.config import SFTSettings
        from agora.training.pipeline import sft_member
        from agora.training.verified import own_pairs, sft_rows, verified_stats

        vcfg, samples, skipped = own_data(args, store, held_out, arm)
        if not samples:
            raise ValueError(f"no recorded samples of {vcfg.model} to learn from (the align-traces phase's traces.db "
                             "is on another machine, or --samples-db/--samples-runs hold none)")
        stats = verified_stats(samples, vcfg, skipped)
        source = {"verified": vcfg.describe(), "samples_db": str(args.samples_db or "traces.db"),
                  "answers_of": vcfg.model}
        micro = min(args.dpo_micro_batch, args.dpo_batch)
        if args.dpo_batch % micro:
            raise ValueError(f"--dpo-batch {args.dpo_batch} is not a multiple of --dpo-micro-batch {micro}")
        if arm == "own-dpo":
            pairs = own_pairs(samples, vcfg)
            if not pairs:
                raise ValueError(f"no pairs: no training question has both a right and a wrong answer of {TARGET} "
                                 "of matched length")
            settings = DPOSettings(**common, batch_size=micro, grad_accum=args.dpo_batch // micro,
                                   max_length=args.max_length, beta=args.beta)
            member = dpo_member(store, run_id, spec, pairs, out, settings, PairFilter(model=TARGET),
                                validation_fraction=0.0, source=source)
        else:
            settings = SFTSettings(**common, batch_size=micro, grad_accum=args.dpo_batch // micro,
                                   max_length=args.max_length)
            member = sft_member(store, run_id, spec, sft_rows(samples, vcfg), out, settings, source=source)
        extra = {"rows": len(member.train_rows), "questions": len({r["instruction"] for r in member.train_rows}),
                 "data": {k: stats[k] for k in ("questions", "samples", "correct", "sft_rows", "pairs",
                                                "pairs_before_length_filter", "pairs_after_length_filter",
                                                "sft_runs", "pair_runs", "skipped_calls")}}
    else:
        if arm == "align-dpo":
            pairs = align_target_pairs(store, AlignPairConfig(target=TARGET,
                                                              max_pairs_per_question=args.pairs_per_question),
                                       [f"{args.run_id}:align"])
            flt = PairFilter()
        else:
            duel_run = f"{args.run_id}:duels-sparta"
            flt = PairFilter(run_ids=(duel_run,))
            pairs = [p for p in load_preference_pairs(store) if p["run_id"] == duel_run]
        traced = (store.protocol_questions("align", [f"{args.run_id}:align"]) if arm == "align-dpo"
                  else store.duel_rows([f"{args.run_id}:duels-sparta"]))
        if not traced:  # the phase is in the record, its traces are on the machine that ran it
            raise ValueError(f"the traces this arm trains on are not in {args.out / args.run_id / 'traces.db'} "
                             "(the phase finished on another machine); rerun it under a new --run-id")
        if not pairs:
            raise ValueError("no pairs: " + ("no training question has both a correct candidate and an incorrect one "
                                             f"of {TARGET}" if arm == "align-dpo" else "every duel was a tie"))
        micro = min(args.dpo_micro_batch, args.dpo_batch)
        if args.dpo_batch % micro:
            raise ValueError(f"--dpo-batch {args.dpo_batch} is not a multiple of --dpo-micro-batch {micro}")
        settings = DPOSettings(**common, batch_size=micro, grad_accum=args.dpo_batch // micro,
                               max_length=args.max_length, beta=args.beta)
        member = dpo_member(store, run_id, spec, pairs, out, settings, flt, validation_fraction=0.0)
        extra = {"pairs": len(member.train_rows),
                 "questions": len({r["instruction"] for r in member.train_rows}),
                 "chosen_from": _count(r["chosen_model"] for r in member.train_rows),
                 "rejected_from": _count(r["rejected_model"] for r in member.train_rows)}
    res = member.result
    entry = trained_entry(spec, res, backend=args.eval_backend)  # served as it is evaluated
    pool_file = write_pool_file([entry if s.name == TARGET else spec_entry(s) for s in specs], out / "pool.toml")
    flat = [h["frac_reward_zero_std"] for h in res.log_history if "frac_reward_zero_std" in h]
    rewards = [h["reward"] for h in res.log_history if "reward" in h]
    return {"arm": arm, "adapter": str(res.adapter_dir), "pool_file": str(pool_file), "steps": res.steps,
            "rows": res.rows, "losses": res.losses, "train_cpu_s": res.cpu_s,
            "constant_groups": sum(flat) / len(flat) if flat else None,
            "mean_reward": sum(rewards) / len(rewards) if rewards else None, **extra}


def row_tokens(rows, base: str) -> list[int]:
    """Tokens of each prompt-completion row through ``base``'s chat template (what SFT trains on):
    :func:`agora.training.trainers.sft_row_tokens`, looked up here so tests can stand in for it."""
    from agora.training.trainers import sft_row_tokens

    return sft_row_tokens(rows, base)


def agg_config(args, k: int | None = None):
    """The aggregator's candidate sets: ``k`` candidates (default: every ALIGN candidate of a question,
    n·k = 2 × --align-samples), no exemplars (the prompt is then the solver prompt of a question that
    shows the candidates)."""
    from agora.training.aggregator import AggregatorDataConfig

    return AggregatorDataConfig(k=k or 2 * args.align_samples, sets_per_question=args.agg_sets,
                                easy_per_hard=args.agg_easy_per_hard, shots=0, seed=args.seed)


def training_runs(args, source: TraceStore) -> tuple[str, ...]:
    """The runs of ``--samples-db`` the arms learn from: ``--samples-runs``, else every run there but
    the ``--agg-eval-runs`` (the held-out candidates are never training data)."""
    named = split_runs(args.samples_runs)
    if named:
        return named
    held = set(split_runs(getattr(args, "agg_eval_runs", "")))
    return tuple(r for r in source.run_ids() if r not in held)


def agg_training_samples(args, held_out) -> tuple[list, tuple[str, ...]]:
    """The agg arm's training candidates when ``--agg-eval-runs`` is given: ``(samples, runs)``, the
    target's scored samples (:func:`agora.training.own_samples.scored_samples`, as a protocol read
    them) in :func:`training_runs` of ``--samples-db``, the held-out questions left out by id and text."""
    from agora.training.own_samples import HeldOut, scored_samples

    source = TraceStore.reading(args.samples_db)
    runs = training_runs(args, source)
    samples, _ = scored_samples(source, (TARGET,), runs, HeldOut.from_problems(held_out))
    return samples, runs


def samples_per_question(samples) -> int:
    """k of a samples run: the commonest number of samples a question has (ties: the larger; 0 without
    samples). A question with fewer (a failed call) gives no candidate set of k."""
    from collections import Counter

    from agora.training.own_samples import normalise_question

    sizes = Counter(Counter(normalise_question(s.question) for s in samples).values())
    return max(sizes, key=lambda n: (sizes[n], n)) if sizes else 0


def agg_eval_sets(args, held_out, train_samples=None) -> list[dict]:
    """Each held-out question with the target's samples of it in ``--agg-eval-runs`` (matched by
    question text, whitespace-insensitive), in held-out order: ``{"problem", "candidates": [OwnSample]
    (recorded order), "majority": the plurality answer or None, "majority_correct", "any_correct"}``,
    both scored against the held-out problem's gold. ``train_samples``: the arm's training samples
    (default: :func:`agg_training_samples`).

    Raises:
        ValueError: an eval run not in ``--samples-db``; an eval run sharing a question (by text) with
            the training samples; a held-out question without a sample of the target there.
    """
    from agora.tasks.scoring import score_answer
    from agora.training.aggregator import plurality_answer
    from agora.training.own_samples import normalise_question, scored_samples

    source = TraceStore.reading(args.samples_db)
    runs = split_runs(args.agg_eval_runs)
    known = source.run_ids()
    missing = [r for r in runs if r not in known]
    if missing:
        raise ValueError(f"{args.samples_db}: no run {', '.join(missing)} (runs there: {', '.join(known) or 'none'}); "
                         "sample the held-out questions first (benchmarks/README.md)")
    if train_samples is None:
        train_samples, _ = agg_training_samples(args, held_out)
    trained = {normalise_question(s.question): s.question_id for s in train_samples}
    for run in runs:
        shared = [q["question_id"] for q in source.questions(run) if normalise_question(q.get("question")) in trained]
        if shared:
            raise ValueError(f"{args.samples_db}: run {run} shares {len(shared)} question(s) with the training samples "
                             f"(first: {shared[0]}); the held-out candidates must come from questions never trained on")
    samples, _ = scored_samples(source, (TARGET,), runs)
    by_text: dict[str, list] = {}
    for s in samples:
        by_text.setdefault(normalise_question(s.question), []).append(s)
    lacking = [p.id for p in held_out if normalise_question(p.question) not in by_text]
    if lacking:
        raise ValueError(f"{args.samples_db}: {len(lacking)} of {len(held_out)} held-out questions have no sample of "
                         f"{TARGET} in {', '.join(runs)} (first: {lacking[0]}); sample the first "
                         f"{len(held_out)} of {args.eval_data} there")
    out = []
    for p in held_out:
        cands = by_text[normalise_question(p.question)]
        majority = plurality_answer([c.answer for c in cands])
        out.append({"problem": p, "candidates": cands, "majority": majority,
                    "majority_correct": bool(score_answer(majority, p.gold, p.kind)),
                    "any_correct": any(bool(score_answer(c.answer, p.gold, p.kind)) for c in cands)})
    return out


def _aggregate(args, name: str, adapter: str | None, items) -> list[dict]:
    """Greedy answers of the aggregator (``adapter``; ``None``: the base model) to ``items``, each
    ``(index, problem, candidate texts)``: one prompt per question showing its candidates, shuffled with
    seed ``--seed + index`` (the question's place among the held-out ones); rows as
    :func:`agora.training.evaluation.greedy_outcomes` writes them to ``eval/<name>.jsonl``."""
    from agora.training.aggregator import aggregation_problem
    from agora.training.evaluation import greedy_outcomes

    problems = [aggregation_problem(p, texts, seed=args.seed + n) for n, p, texts in items]

    def progress(done: int, total: int) -> None:
        log(f"  eval {name}: {done}/{total}")

    adapter = adapter if adapter is not None else getattr(args, "target_adapter", None)
    rows = greedy_outcomes(problems, BASE, adapter, args.out / args.run_id / "eval" / f"{name}.jsonl", shots=0,
                           max_tokens=args.max_tokens, batch_size=args.eval_batch, threads=args.threads,
                           progress=progress, backend=args.eval_backend)
    return [reread(row, p) for row, (_, p, _) in zip(rows, items, strict=True)]


def reread(row: dict, problem) -> dict:
    """``row`` (a greedy answer to an aggregation prompt) with its answer read again against the
    *question* rather than the prompt: the prompt shows the candidates, so an aggregator that answers
    with one of them word for word would otherwise be read as echoing its prompt (no answer)."""
    from agora.tasks import find_answer, is_correct

    found = find_answer(row["text"], problem.kind, problem.n_choices or 4, question=problem.question)
    return {**row, "answer": found.answer, "how": found.how,
            "correct": int(bool(is_correct(found.answer, problem.gold, problem.kind)))}


def agg_samples_eval_phase(args, held_out, name: str, adapter: str | None) -> dict:
    """The aggregator (``adapter``; ``None``: the base model as aggregator) on every held-out question's
    samples in ``--agg-eval-runs`` (:func:`agg_eval_sets`), greedy, with majority vote over the same
    candidates per question (``majority``, 0/1, paired with ``correct`` by position)."""
    sets = agg_eval_sets(args, held_out)
    rows = _aggregate(args, name, adapter, [(n, e["problem"], [c.text for c in e["candidates"]])
                                            for n, e in enumerate(sets)])
    return {"name": name, "adapter": adapter, "question_ids": [e["problem"].id for e in sets],
            "correct": [r["correct"] for r in rows], "majority": [int(e["majority_correct"]) for e in sets],
            "any_correct": [int(e["any_correct"]) for e in sets],
            "candidates_per_question": sum(len(e["candidates"]) for e in sets) / len(sets),
            "source": {"samples_db": str(args.samples_db), "runs": list(split_runs(args.agg_eval_runs)),
                       "model": TARGET}}


def agg_eval_phase(args, store: TraceStore, held_out, name: str, adapter: str | None) -> dict:
    """The aggregator (``adapter``; ``None``: the base model as aggregator) on every held-out question's
    n·k ALIGN candidates (phase ``align-eval``), greedy, against majority vote and ALIGN's own answer on
    the same candidates (the run's ``self_consistency`` and ``align`` results)."""
    run = f"{args.run_id}:align-eval"
    results = {(r["question_id"], r["method"]): r for r in store.results(run)}
    items, majority, align, shown = [], [], [], []
    for n, p in enumerate(held_out):
        texts = [c["completion"].strip() for c in store.calls(run, p.id)
                 if c.get("node") == "agent_sample" and not c.get("error") and (c.get("completion") or "").strip()]
        if not texts or (p.id, "align") not in results:
            continue
        items.append((n, p, texts))
        shown.append(len(texts))
        majority.append(int(bool(results[(p.id, "self_consistency")]["correct"])))
        align.append(int(bool(results[(p.id, "align")]["correct"])))
    if not items:
        raise ValueError(f"no held-out candidates: run the align-eval phase first ({run} in traces.db)")
    rows = _aggregate(args, name, adapter, items)
    return {"name": name, "adapter": adapter, "question_ids": [p.id for _, p, _ in items],
            "correct": [r["correct"] for r in rows], "majority": majority, "align": align,
            "candidates_per_question": sum(shown) / len(shown)}


def _count(values) -> dict:
    out: dict = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def eval_phase(args, held_out, name: str, adapter: str | None) -> dict:
    from agora.training.evaluation import greedy_outcomes

    def progress(done: int, total: int) -> None:
        log(f"  eval {name}: {done}/{total}")

    adapter = adapter if adapter is not None else getattr(args, "target_adapter", None)  # base: the start
    rows = greedy_outcomes(held_out, BASE, adapter, args.out / args.run_id / "eval" / f"{name}.jsonl",
                           max_tokens=args.max_tokens, batch_size=args.eval_batch, threads=args.threads,
                           progress=progress, backend=args.eval_backend)
    return {"name": name, "adapter": adapter, "question_ids": [r["question_id"] for r in rows],
            "correct": [r["correct"] for r in rows],
            "completion_tokens": sum(r["completion_tokens"] for r in rows) / max(1, len(rows)),
            "capped": sum(r["finish_reason"] == "length" for r in rows) / max(1, len(rows)),
            "capped_ids": [r["question_id"] for r in rows if r["finish_reason"] == "length"]}


def serve_phase(args, store: TraceStore, held_out, arm: str, pool_file: str, evaluated: dict) -> dict:
    pool = load_pool(pool_file)
    problems = held_out[:args.serve_check]
    config = DelegationConfig(n_agents=1, k_samples=1, temperature=0.0, max_tokens=args.max_tokens, models=(TARGET,))
    run_id = f"{args.run_id}:serve:{arm}"
    run_problems(build_delegation_graph(), problems, store=store, run_id=run_id, protocol="align",
                 context=DelegationContext(pool=pool, config=config), config=asdict(config),
                 pool_description=pool.describe(),
                 dataset={"path": str(args.eval_data), "format": "gsm8k", "limit": len(problems)})
    served = {r["question_id"]: int(bool(r["correct"])) for r in store.results(run_id) if r["method"] == "align"}
    bench = dict(zip(evaluated["question_ids"], evaluated["correct"]))
    ids = [p.id for p in problems]
    return {"arm": arm, "pool_file": pool_file, "questions": len(ids),
            "served_correct": sum(served.get(i, 0) for i in ids), "benchmark_correct": sum(bench[i] for i in ids),
            "agree": sum(served.get(i) == bench[i] for i in ids)}


# ----------------------------------------------------------------------------- figures


def duel_table(book: PhaseBook, store: TraceStore | None, run_id: str, mode: str) -> list[dict]:
    """The duels of one mode: from the phase's record (any machine), else from ``traces.db``
    (none when there is no store: a ``--report`` on a machine without the run folder)."""
    table = book.result(f"duels-{mode}").get("table")
    if table is not None:
        return table
    return store.duel_rows([f"{run_id}:duels-{mode}"]) if store is not None else []


def leader_table(rows_by_mode: dict[str, list[dict]]) -> dict:
    """The leader's claim: per mode and iteration, non-tie share and mean score gap with 95 % CIs.

    ``rows_by_mode``: ``{"sparta": rows, "stackelberg": rows}``, each row a duel with ``iteration``,
    ``tie``, ``margin`` (the judges' score gap) and ``instruction_id``."""
    out = {}
    for mode in ("sparta", "stackelberg"):
        rows = rows_by_mode[mode]
        per = {}
        for it in sorted({r["iteration"] for r in rows}):
            sel = [r for r in rows if r["iteration"] == it]
            non_tie = sum(not r["tie"] for r in sel)
            gaps = [float(r["margin"] or 0.0) for r in sel]
            share, lo, hi = proportion_ci(non_tie, len(sel))
            gap, glo, ghi = mean_ci(gaps)
            per[it] = {"duels": len(sel), "non_tie": non_tie, "share": share, "share_low": lo, "share_high": hi,
                       "gap": gap, "gap_low": glo, "gap_high": ghi,
                       "instructions": len({r["instruction_id"] for r in sel})}
        out[mode] = per
    # Where the leader acts (iteration 0 draws uniformly in both modes): pooled non-tie shares and mean
    # score gaps, Stackelberg minus Sparta.
    later = {m: [r for it, r in out[m].items() if int(it) >= 1] for m in out}
    s = {m: (sum(r["non_tie"] for r in rs), sum(r["duels"] for r in rs)) for m, rs in later.items()}
    d, lo, hi = proportion_difference(*s["stackelberg"], *s["sparta"])
    gaps = {m: [float(r["margin"] or 0.0) for r in rows_by_mode[m] if int(r["iteration"]) >= 1] for m in out}
    g, glo, ghi = mean_difference(gaps["stackelberg"], gaps["sparta"])
    out["leader_active"] = {"stackelberg": s["stackelberg"], "sparta": s["sparta"], "diff": d, "low": lo, "high": hi,
                            "gap": {m: mean_ci(v)[0] for m, v in gaps.items()},
                            "gap_diff": g, "gap_low": glo, "gap_high": ghi}
    return out


def pct(x: float | None, digits: int = 1) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}%"


def isa_of(book: PhaseBook, name: str) -> str | None:
    """The vector extension of the machine a finished phase ran on (None: not recorded)."""
    return (book.phases.get(name, {}).get("machine") or {}).get("isa")


def base_phase_here(book: PhaseBook) -> str:
    """The base evaluation to run on this machine: ``eval:base`` first, ``eval:base@<isa>`` when the
    recorded one ran on another kind of machine (or on one not recorded)."""
    if not book.done("eval:base") or isa_of(book, "eval:base") == machine()["isa"]:
        return "eval:base"
    return f"eval:base@{machine()['isa']}"


def base_for(book: PhaseBook, arm: str) -> str:
    """The finished base evaluation an arm is paired with: the one from the arm's kind of machine,
    else ``eval:base`` (a cross-machine pairing, flagged in the report)."""
    isa = isa_of(book, f"eval:{arm}")
    if isa is not None and book.done(f"eval:base@{isa}"):
        return f"eval:base@{isa}"
    return "eval:base"


def eval_rows(args, name: str) -> list[dict] | None:
    """The answers of evaluation ``name`` (``base``, an arm, ``base@avx512``) as written to
    ``OUT/<run-id>/eval/<name>.jsonl``; None when they are not on this machine (or unreadable)."""
    path = args.out / args.run_id / "eval" / f"{name}.jsonl"
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return None


def changed_outputs(args, arm: str, base: str = "base") -> int | None:
    """Held-out answers whose text differs from the base model's (training moved the model even when
    the verdicts did not change); None when an evaluation's answers are not on this machine."""
    before, after = eval_rows(args, base), eval_rows(args, arm)
    if before is None or after is None:
        return None
    texts = {r["question_id"]: r["text"] for r in after}
    return sum(texts.get(r["question_id"]) != r["text"] for r in before)


def capped_ids(args, book, name: str) -> set[str] | None:
    """Held-out questions whose answer the evaluation ``name`` (``eval:base``, ``eval:<arm>``) cut at
    ``--max-tokens``: from the record, else from its answers on this machine; None when neither has them."""
    result = book.result(name)
    if "capped_ids" in result:
        return set(result["capped_ids"])
    rows = eval_rows(args, name[len("eval:"):])
    return None if rows is None else {r["question_id"] for r in rows if r.get("finish_reason") == "length"}


def uncapped_difference(args, book, arm: str, paired: str) -> dict | None:
    """The arm's paired difference on the questions neither evaluation cut at the budget (is the gain
    more than fewer cut answers?), with how many gains had the base cut and how many losses the arm cut;
    None when the cut answers are not known."""
    base_cut, arm_cut = capped_ids(args, book, paired), capped_ids(args, book, f"eval:{arm}")
    if base_cut is None or arm_cut is None:
        return None
    ids, before = book.result(paired)["question_ids"], book.result(paired)["correct"]
    after = book.result(f"eval:{arm}")["correct"]
    keep = [i for i, q in enumerate(ids) if q not in base_cut and q not in arm_cut]
    d = paired_difference([before[i] for i in keep], [after[i] for i in keep])
    d["gained_where_base_cut"] = sum(1 for q, b, a in zip(ids, before, after) if a > b and q in base_cut)
    d["lost_where_arm_cut"] = sum(1 for q, b, a in zip(ids, before, after) if a < b and q in arm_cut)
    d["base_cut"], d["arm_cut"] = len(base_cut), len(arm_cut)
    return d


def _or_dash(value) -> str:
    return "—" if value is None else str(value)


def interval(lo: float, hi: float, digits: int = 1) -> str:
    return f"[{pct(lo, digits)}, {pct(hi, digits)}]"


def pp_interval(lo: float, hi: float) -> str:
    return f"[{100 * lo:+.1f}, {100 * hi:+.1f}] pp"


def aggregator_report(book: PhaseBook) -> dict:
    """The trained aggregator against majority vote (and, on ALIGN's candidates, against ALIGN) on the
    same held-out candidates, and against the untrained model as aggregator, paired question by question
    (printed and returned: label → :func:`agora.training.evaluation.paired_difference`, with
    ``"untrained vs majority vote"`` when the untrained aggregator ran). On the target's own samples
    (``--agg-eval-runs``) ALIGN is not in the comparison, and the report says so."""
    agg = book.result("eval:agg")
    n = len(agg["correct"])
    source = agg.get("source")
    where = (f"{source['model']}'s own samples ({', '.join(source['runs'])})" if source
             else "ALIGN candidates")
    log(f"\nAggregator on the held-out questions' {where} ({agg['candidates_per_question']:.1f} a question, n = {n}):")
    if source:
        log("  ALIGN is not in this comparison: these candidates are one model's samples, not an ALIGN run")
    _, lo, hi = proportion_ci(sum(agg["correct"]), n)
    log(f"  trained aggregator {pct(sum(agg['correct']) / n)} {interval(lo, hi)}")
    out = {}
    rows = [("majority vote", agg["majority"])] + ([("ALIGN", agg["align"])] if "align" in agg else [])
    base = book.result("eval:agg-base") if book.done("eval:agg-base") else None
    if base is not None and base.get("question_ids", agg.get("question_ids")) != agg.get("question_ids"):
        log("  untrained aggregator: other questions than the trained one's, not paired")
        base = None
    if base is not None:
        rows.append(("untrained aggregator", base["correct"]))
    for label, other in rows:
        d = paired_difference(other, agg["correct"])
        _, lo, hi = proportion_ci(sum(other), n)
        log(f"  vs {label:<21} {pct(sum(other) / n)} {interval(lo, hi)}: {d['diff'] * 100:+.1f} pp "
            f"{pp_interval(d['wald_low'], d['wald_high'])} (bootstrap {pp_interval(d['boot_low'], d['boot_high'])}), "
            f"+{d['gained']}/−{d['lost']}, McNemar p {d['mcnemar_p']:.3f}")
        out[label] = d
    if base is not None:  # does the untrained model already beat voting? (what training adds is the row above)
        d = paired_difference(agg["majority"], base["correct"])
        log(f"  untrained vs majority vote: {d['diff'] * 100:+.1f} pp {pp_interval(d['wald_low'], d['wald_high'])}, "
            f"+{d['gained']}/−{d['lost']}, McNemar p {d['mcnemar_p']:.3f}")
        out["untrained vs majority vote"] = d
    if "any_correct" in agg:
        log(f"  a right candidate on {sum(agg['any_correct'])} of {n} questions (a selector's ceiling)")
    return out


def report(args, book: PhaseBook, store: TraceStore | None) -> dict:
    summary: dict = {"run_id": args.run_id, "settings": book.settings, "costs": book.costs()}
    log(f"\n== self-improvement {args.run_id}: {args.train_questions} training questions (GSM8K train), "
        f"{args.eval_questions} held-out (GSM8K test"
        f"{f', after the first {args.eval_offset}' if getattr(args, 'eval_offset', 0) else ''}), {args.steps} steps per arm ==")
    if book.settings.get("target_adapter"):
        log(f"A second round: {TARGET} starts from the adapter {book.settings['target_adapter']}; 'base' below is "
            "that model, and every arm trained it further")
    if book.done("align-traces"):
        log("\nALIGN candidates on the training questions (per model):")
        for model, s in book.result("align-traces")["candidates"].items():
            log(f"  {model:<22} {s['candidates']:>4} candidates, {pct(s['correct_share'])} correct, "
                f"{pct(s['any_correct_share'])} of questions with one correct, {pct(s['capped_share'])} capped")
    trained = {arm: book.result(f"train:{arm}") for arm in ARMS if book.done(f"train:{arm}")}
    if trained:
        log("\nTraining arms:")
        for arm, t in trained.items():
            if arm == "agg":
                data = t["data"]
                src = t.get("source") or {}
                sets = t.get("sets", t["prompts"])
                what = (f"{sets} candidate sets of {t.get('k', '?')} ({data['hard']} hard, {data['easy']} "
                        f"easy; majority right on {data['majority_correct']}, a right candidate in "
                        f"{data['any_correct']}; from {', '.join(src.get('runs') or [src.get('run', 'ALIGN traces')])})"
                        + (f", SFT on a right candidate of {t['prompts']} of them (by difficulty: "
                           f"{t.get('rows_by_difficulty')})" if t.get("recipe") in ("sft", "sft-answer")
                           else f", mean reward {t['mean_reward']:.3f}"))
            elif arm in OWN_ARMS:
                data = t["data"]
                whose = "own" if arm != "distill-sft" else f"{teacher_of(args, arm)}'s"
                what = (f"{t['rows']} {'pairs' if arm == 'own-dpo' else 'answers'} from {t['questions']} questions "
                        f"({data['samples']} {whose} samples, {data['correct']} right; pairs "
                        f"{data['pairs_before_length_filter']} → {data['pairs_after_length_filter']} by the length "
                        f"filter → {data['pairs']} kept)")
            elif arm != "grpo":
                what = (f"{t.get('pairs')} pairs from {t.get('questions')} questions (chosen {t.get('chosen_from')}, "
                        f"rejected {t.get('rejected_from')})")
            else:
                what = (f"{t['prompts']} prompts, mean reward {t['mean_reward']:.3f}, constant-reward groups "
                        f"{pct(t['constant_groups'], 0)}")
            loss = f"loss {t['losses'][0]:.3f} → {t['losses'][-1]:.3f}" if t["losses"] else "no loss logged"
            log(f"  {arm:<10} {t['steps']} steps, {what}, {loss}")
    if book.done("eval:base"):
        base = book.result("eval:base")
        log(f"\nHeld-out greedy accuracy of {TARGET} (n = {len(base['correct'])}):")
        log(f"  {'model':<12} {'accuracy':>9} {'95% CI':>16} {'after−before':>13} {'95% CI (normal)':>18} "
            f"{'95% CI (boot)':>18} {'+/−':>7} {'McNemar p':>10} {'changed':>8}  paired with")
        summary["eval"] = {"base": base["correct"]}
        bases = ["eval:base"] + sorted(n for n in book.phases if n.startswith("eval:base@"))
        for name in bases:
            b = book.result(name)
            _, lo, hi = proportion_ci(sum(b["correct"]), len(b["correct"]))
            label = "base" + name[len("eval:base"):]
            log(f"  {label:<12} {pct(sum(b['correct']) / len(b['correct'])):>9} {interval(lo, hi):>16}"
                f"{'':>80}  {isa_of(book, name) or 'machine not recorded'}")
            summary["eval"][label] = b["correct"]
        for name in bases[1:]:  # the same weights and questions on two kinds of machine
            label, b = name[len("eval:"):], book.result(name)
            d = paired_difference(base["correct"], b["correct"])
            log(f"  machine effect, {label} − base: {d['diff'] * 100:+.1f} pp "
                f"{pp_interval(d['wald_low'], d['wald_high'])}, verdicts +{d['gained']}/−{d['lost']} of "
                f"{len(b['correct'])}, answers changed {_or_dash(changed_outputs(args, label))}")
            summary["eval"][f"machine_effect:{label}"] = d
        for arm in ARMS:
            if arm == "agg" or not book.done(f"eval:{arm}"):  # the aggregator is compared on its own below
                continue
            after, paired = book.result(f"eval:{arm}"), base_for(book, arm)
            d = paired_difference(book.result(paired)["correct"], after["correct"])
            _, lo, hi = proportion_ci(sum(after["correct"]), len(after["correct"]))
            same = isa_of(book, paired) is not None and isa_of(book, paired) == isa_of(book, f"eval:{arm}")
            changed = changed_outputs(args, arm, paired[len("eval:"):])
            log(f"  {arm:<12} {pct(d['after']):>9} {interval(lo, hi):>16} {d['diff'] * 100:>+11.1f}pp "
                f"{pp_interval(d['wald_low'], d['wald_high']):>18} "
                f"{pp_interval(d['boot_low'], d['boot_high']):>18} "
                f"{'+%d/−%d' % (d['gained'], d['lost']):>7} {d['mcnemar_p']:>10.3f} {_or_dash(changed):>8}  "
                f"{paired[len('eval:'):]}{'' if same else ' (other or unrecorded machine: includes the machine effect)'}")
            summary["eval"][arm] = {"correct": after["correct"], "paired": d, "paired_with": paired,
                                    "same_machine": same, "changed": changed}
            u = uncapped_difference(args, book, arm, paired)
            if u is not None:
                log(f"  {'':<12} answers cut at {args.max_tokens} tokens: base {u['base_cut']}, {arm} "
                    f"{u['arm_cut']}; {u['gained_where_base_cut']} of the +{d['gained']} were cut by the base, "
                    f"{u['lost_where_arm_cut']} of the −{d['lost']} by the arm; on the {u['n']} questions neither "
                    f"cut: {u['diff'] * 100:+.1f} {pp_interval(u['wald_low'], u['wald_high'])}, "
                    f"+{u['gained']}/−{u['lost']}")
                summary["eval"][arm]["uncapped"] = u
    if book.done("eval:agg"):
        summary["aggregator"] = aggregator_report(book)
    for arm in ARMS:
        if book.done(f"serve:{arm}"):
            s = book.result(f"serve:{arm}")
            log(f"\nServed back ({s['pool_file']}, ALIGN graph, 1 agent, greedy): {s['served_correct']}/{s['questions']} "
                f"correct vs {s['benchmark_correct']}/{s['questions']} in the benchmark; same verdict on "
                f"{s['agree']}/{s['questions']}")
    if book.done("duels-stackelberg") and book.done("duels-sparta"):
        table = leader_table({m: duel_table(book, store, args.run_id, m) for m in ("sparta", "stackelberg")})
        summary["leader"] = table
        log("\nThe leader's claim (same duels, instructions and seed; no training):")
        log(f"  {'mode':<12} {'iter':>4} {'duels':>5} {'non-tie':>8} {'95% CI':>16} {'mean gap':>9} {'95% CI':>14} "
            f"{'instr.':>6}")
        for mode in ("sparta", "stackelberg"):
            for it, r in table[mode].items():
                log(f"  {mode:<12} {it:>4} {r['duels']:>5} {pct(r['share'], 0):>8} "
                    f"{interval(r['share_low'], r['share_high'], 0):>16} {r['gap']:>9.2f} "
                    f"{'[%.2f, %.2f]' % (r['gap_low'], r['gap_high']):>14} {r['instructions']:>6}")
        la = table["leader_active"]
        (s1, n1), (s2, n2) = la["stackelberg"], la["sparta"]
        log(f"  iterations ≥ 1 (the leader acts): non-tie Stackelberg {s1}/{n1}, Sparta {s2}/{n2}, difference "
            f"{'—' if math.isnan(la['diff']) else '%+.0f pp' % (100 * la['diff'])} {pp_interval(la['low'], la['high'])}")
        log(f"  iterations ≥ 1: mean score gap Stackelberg {la['gap']['stackelberg']:.2f}, Sparta "
            f"{la['gap']['sparta']:.2f}, difference {la['gap_diff']:+.2f} [{la['gap_low']:+.2f}, {la['gap_high']:+.2f}]")
    costs = book.costs()
    if costs:
        log("\nCost per phase (process CPU, all threads):")
        total = 0.0
        for name, c in costs.items():
            total += c["cpu_s"]
            log(f"  {name:<20} {c['wall_s'] / 60:>7.1f} min wall {c['cpu_s'] / 3600:>7.3f} CPU-h")
        log(f"  {'total':<20} {'':>16} {total / 3600:>7.3f} CPU-h")
    if book.attempts:
        log("\nUnfinished phases (interrupted or failed; cost of their attempts so far; a rerun resumes them):")
        for name, c in book.attempts.items():
            log(f"  {name:<20} {c['wall_s'] / 60:>7.1f} min wall {c['cpu_s'] / 3600:>7.3f} CPU-h, "
                f"{c['attempts']} attempt(s)")
        summary["interrupted"] = book.attempts
    return summary


#: Settings pooled records may differ in: where and how fast they ran, and which held-out questions.
POOLED_MAY_DIFFER = set(MUTABLE) | {"run_id", "eval_offset", "samples_db", "base_from", "record", "pooled",
                                    "eval_data", "train_data"}


class RecordedBook:
    """A finished run's ``phases.json`` read as a :class:`PhaseBook` is (``phases``, ``done``, ``result``),
    for :func:`pooled_report`."""

    def __init__(self, path: Path):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"--pooled {path}: not a readable phases.json ({exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("phases"), dict):
            raise SystemExit(f"--pooled {path}: not a phases.json (no 'phases' object)")
        self.path, self.settings, self.phases = path, data.get("settings") or {}, data["phases"]

    def done(self, name: str) -> bool:
        return name in self.phases

    def result(self, name: str):
        return self.phases[name]["result"]


def pooled_report(paths: list[Path], arms: list[str]) -> dict:
    """Each record's paired figures for every arm in ``arms`` it evaluated, then the same figures over
    the union of their held-out questions (each question's arm and base verdicts from its own record,
    so from one machine; the records' adapters are separate trainings of the same recipe).

    Returns ``{arm: {"runs": [...], "pooled": paired_difference(...)}}``.

    Raises:
        SystemExit: a record is unreadable, the records differ in a setting that changes what is
            measured (training data, steps, pool, ...; not the held-out slice or the machine), or two
            records share a held-out question."""
    books = [RecordedBook(p) for p in paths]
    first = books[0]
    for other in books[1:]:
        keys = (set(first.settings) | set(other.settings)) - POOLED_MAY_DIFFER
        changed = sorted(k for k in keys if first.settings.get(k, OMITTED_DEFAULTS.get(k))
                         != other.settings.get(k, OMITTED_DEFAULTS.get(k)))
        if changed:
            raise SystemExit(f"--pooled: {other.path} was run with other settings than {first.path} ("
                             + "; ".join(f"{k} {first.settings.get(k)!r} vs {other.settings.get(k)!r}" for k in changed)
                             + "): its figures are not the same measurement")
        names = {Path(str(b.settings.get("eval_data", ""))).name for b in (first, other)}
        if len(names) > 1:
            raise SystemExit(f"--pooled: {other.path} evaluated on {' and '.join(sorted(names))}: not one test set")
    out: dict = {}
    for arm in arms:
        have = [b for b in books if b.done(f"eval:{arm}")]
        if not have:
            continue
        seen: dict[str, Path] = {}
        before, after, runs = [], [], []
        log(f"\n{arm}, paired with the base evaluated on the same machine, per run and pooled:")
        for b in have:
            paired = base_for(b, arm)
            if not b.done(paired):
                raise SystemExit(f"--pooled {b.path}: no finished base evaluation to pair eval:{arm} with")
            ids, base, arm_row = b.result(paired)["question_ids"], b.result(paired)["correct"], b.result(f"eval:{arm}")
            if arm_row["question_ids"] != ids:
                raise SystemExit(f"--pooled {b.path}: eval:{arm} and {paired} are not on the same questions")
            for q in ids:
                if q in seen:
                    raise SystemExit(f"--pooled: held-out question {q} is in both {seen[q]} and {b.path}: the sets "
                                     "must be disjoint (--eval-offset)")
                seen[q] = b.path
            d = paired_difference(base, arm_row["correct"])
            runs.append({"record": str(b.path), "questions": f"{ids[0]} … {ids[-1]}", "paired": d,
                         "machine": isa_of(b, f"eval:{arm}")})
            log(f"  {b.settings.get('run_id', b.path)} ({ids[0]} … {ids[-1]}, n = {d['n']}, "
                f"{isa_of(b, f'eval:{arm}') or 'machine not recorded'}): base {pct(d['before'])}, {arm} "
                f"{pct(d['after'])}, {d['diff'] * 100:+.1f} {pp_interval(d['wald_low'], d['wald_high'])}, "
                f"+{d['gained']}/−{d['lost']}, McNemar p {d['mcnemar_p']:.3f}")
            before += base
            after += arm_row["correct"]
        d = paired_difference(before, after)
        n = d["n"]
        _, blo, bhi = proportion_ci(sum(before), n)
        _, alo, ahi = proportion_ci(sum(after), n)
        log(f"  pooled (n = {n}): base {pct(d['before'])} {interval(blo, bhi)}, {arm} {pct(d['after'])} "
            f"{interval(alo, ahi)}: {d['diff'] * 100:+.1f} {pp_interval(d['wald_low'], d['wald_high'])} "
            f"(bootstrap {pp_interval(d['boot_low'], d['boot_high'])}), +{d['gained']}/−{d['lost']}, "
            f"McNemar p {d['mcnemar_p']:.3f}")
        out[arm] = {"runs": runs, "pooled": d}
    if not out:
        raise SystemExit(f"--pooled: no record evaluated {', '.join(arms)}")
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.pooled:
        pooled_report([Path(p.strip()) for p in args.pooled.split(",") if p.strip()], args.arms)
        return
    configure(args)
    run_dir = args.out / args.run_id
    try:
        book = PhaseBook(run_dir / "phases.json", settings_of(args), mutable=MUTABLE, record=args.record,
                         read_only=args.report)
        if args.base_from is not None and not args.report:
            source = first_round_eval(args) if args.target_adapter else "eval:base"
            same = {k: OMITTED_DEFAULTS.get(k) for k in BASE_SETTINGS if not (args.target_adapter and
                                                                           k == "target_adapter")}
            if book.adopt("eval:base", args.base_from, same=same, source=source):
                log(f"eval:base adopted from {args.base_from} ({source})")
        for name in split_runs(args.redo):
            if not args.report:
                log(f"phase {name}: " + ("marked to be redone" if book.redo(name) else "not finished, nothing to redo"))
    except PhaseBookError as exc:
        raise SystemExit(str(exc)) from None
    # --report writes nothing: no traces.db is created where the run folder is missing
    store = TraceStore(run_dir / "traces.db") if not args.report or (run_dir / "traces.db").is_file() else None
    if not args.report:
        train, held_out = problems_of(args)
        agg_pending = [n for n in ("train:agg", "eval:agg", "eval:agg-base")
                       if n.split(":")[0] in args.phases and not book.done(n)]
        if "agg" in args.arms and split_runs(args.agg_eval_runs) and agg_pending:
            try:  # refused now, not after the other arms' hours: no eval run, or one overlapping training
                agg_eval_sets(args, held_out)
            except ValueError as exc:
                raise SystemExit(f"--agg-eval-runs: {exc}") from None
        import torch

        def terminate(signum, frame):  # SIGTERM (a job runner, a session's end) stops like Ctrl-C: the
            raise KeyboardInterrupt  # unfinished phase's cost is booked, checkpoints stay for the rerun

        signal.signal(signal.SIGTERM, terminate)

        torch.set_num_threads(args.threads)

        def phase(name: str, fn) -> None:
            if book.done(name):
                log(f"phase {name}: finished earlier, skipped")
                return
            log(f"phase {name}")
            book.run(name, fn)

        if "align" in args.phases:
            phase("align-traces", lambda: align_phase(args, store, train))
        if "duels" in args.phases or "leader" in args.phases:  # Sparta is also the leader's baseline
            phase("duels-sparta", lambda: duel_phase(args, store, train, "sparta"))
        for arm in args.arms:  # each arm trained then evaluated, so figures come arm by arm
            if "train" in args.phases:
                needs = ("align-traces" if arm == "align-dpo" or (arm == "agg" and not split_runs(args.agg_eval_runs))
                         or (arm in OWN_ARMS and args.samples_db is None)
                         else "duels-sparta" if arm == "duel-dpo" else None)
                if needs and not book.done(needs):
                    log(f"skip train:{arm}: phase {needs} has not finished")
                    continue
                try:
                    phase(f"train:{arm}", lambda arm=arm: train_phase(args, book, store, train, arm, held_out))
                except ValueError as exc:  # no pairs: reported, the other arms go on
                    log(f"train:{arm} failed: {exc}")
            if arm == "agg" and "eval" in args.phases and book.done("train:agg"):
                adapter = book.result("train:agg")["adapter"]
                if split_runs(args.agg_eval_runs):  # the held-out candidates are already sampled
                    phase("eval:agg", lambda adapter=adapter: agg_samples_eval_phase(args, held_out, "agg", adapter))
                    phase("eval:agg-base", lambda: agg_samples_eval_phase(args, held_out, "agg-base", None))
                    continue
                # the held-out questions' candidates, then the aggregator and the base model as aggregator
                phase("align-eval", lambda: align_phase(args, store, held_out, "align-eval"))
                phase("eval:agg", lambda adapter=adapter: agg_eval_phase(args, store, held_out, "agg", adapter))
                phase("eval:agg-base", lambda: agg_eval_phase(args, store, held_out, "agg-base", None))
                continue
            if "eval" in args.phases and book.done(f"train:{arm}"):
                # the arm first: its adapter lives only on this machine, the base evaluation anywhere
                adapter = book.result(f"train:{arm}")["adapter"]
                phase(f"eval:{arm}", lambda arm=arm, adapter=adapter: eval_phase(args, held_out, arm, adapter))
        if "serve" in args.phases and args.serve_check > 0:
            evaluated = [a for a in ARMS if a != "agg" and book.done(f"eval:{a}")  # and its adapter here
                         and Path(book.result(f"train:{a}")["adapter"]).is_dir()]
            if evaluated:  # the arm with the most right answers (ties: the first in ARMS)
                best = max(evaluated, key=lambda a: (sum(book.result(f"eval:{a}")["correct"]), -ARMS.index(a)))
                pool_file = book.result(f"train:{best}")["pool_file"]
                phase(f"serve:{best}", lambda: serve_phase(args, store, held_out, best, pool_file,
                                                          book.result(f"eval:{best}")))
        # the member arms' pairing (the aggregator arm pairs with majority vote and needs none); on
        # another kind of machine than the recorded one: again, here
        if "eval" in args.phases and any(a != "agg" for a in args.arms):
            name = base_phase_here(book)
            phase(name, lambda: eval_phase(args, held_out, name[len("eval:"):], None))
        if "leader" in args.phases:
            phase("duels-stackelberg", lambda: duel_phase(args, store, train, "stackelberg"))
    summary = report(args, book, store)
    if args.report:
        return
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    log(f"\nrecorded in {run_dir} (phases.json, traces.db, eval/, <arm>/pool.toml, summary.json)")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted: finished phases and the unfinished one's progress are kept; rerun the same "
              "command to resume", file=sys.stderr)
        sys.exit(130)
