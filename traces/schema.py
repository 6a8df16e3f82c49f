"""Trace schema: one page for every table Agora writes. All tables live in one SQLite file (WAL).

``runs``: one row per run (``run_id`` primary key).
    protocol, status (``running``/``finished``/``failed``/``interrupted``; ``failed``: an error, or
    questions that failed, listed in ``summary``), started_at, finished_at (ISO-8601 UTC),
    config (JSON of the protocol's settings), pool (JSON list of model specs), dataset (JSON: path,
    format, limit, count), code_revision (git commit or package version), host, summary (JSON).

``questions``: one row per answered question of a run (primary key ``run_id, question_id``); a
    question none of whose model calls succeeded has no row, only its ``model_calls`` rows, and a
    rerun retries it (docs/guarantees.md).
    idx (position in the dataset), source, kind (``math``/``mc``/``open``), question, gold,
    answer (the protocol's final answer), correct (0/1, NULL without gold), wall_s (seconds; a question resumed
    after a stop adds the steps its earlier sittings kept, not the time between sittings),
    model_calls, prompt_tokens, completion_tokens, detail (JSON: proposals, selection, ...),
    finished_at, n_choices (options of an ``mc`` question, as the scorer reads them; NULL in
    databases written before the column, until ``agora traces backfill``).

``results``: one row per question and method (primary key ``run_id, question_id, method``).
    The protocol itself and each baseline computed from the same candidates: answer, correct (NULL
    without gold, and when ``samples`` is 0: the method got no sample, its model calls failed),
    samples (candidates the method drew on), completion_tokens, latency_s (model seconds of
    those samples), how (how the answer was found, ``docs/scoring.md``: ``marker``, ``boxed``,
    ``####``, or ``fallback`` for an answer guessed from the output's last number or letter; NULL
    without an answer, and in databases written before the column existed), calls (requests the
    method's answer needed, N samples of one prompt being one request: COMED and its baselines, MoA,
    debate; NULL for protocols that count samples only, and in databases written before the column).
    shared_calls, shared_samples, shared_tokens, shared_latency_s (of calls, samples,
    completion_tokens and latency_s, the part drawn from ``agora bench``'s shared candidate pool,
    whose rows belong to the bench's candidates run; the method *added* the rest. NULL: nothing
    shared, or a database written before the columns).

``model_calls``: one row per generated sample or failed attempt (``call_id`` primary key).
    run_id, question_id, protocol, node (graph node), role (agent, judge, anchor, ...), agent,
    model, messages (JSON chat), completion, params (JSON sampling parameters), prompt_tokens,
    completion_tokens, latency_s, finish_reason, attempt (0-based retry count), error (NULL when
    the call succeeded), created_at (when the attempt began, UTC), partner (the model(s) whose
    answer the prompt showed, comma-separated: COMED peers, debate rounds after the first, the MoA
    aggregator; NULL for a call that answered alone). Answer-level columns, filled when
    the question is recorded (:func:`agora.tasks.answers.find_answer` with the question's kind and
    option count) and by ``agora traces backfill`` in older databases: answer (the sample's
    extracted canonical answer, NULL without one), how (``marker``, ``boxed``, ``####``,
    ``fallback``; ``echo`` when the output only repeats the question, ``docs/scoring.md``; ``none``
    when it has no answer otherwise; NULL: not extracted, i.e. a failed
    attempt, a call without a question row, or an old database not backfilled), sample_index
    (0-based position of the sample among its request's n samples; NULL for failed attempts),
    request_id (the ``call_id`` of the request's first sample: the n samples of one request share
    it). Member recipes (docs/models.md, "Recipes"): recipe (the recipe the member's entry names,
    e.g. ``pot``, when it rewrote this call; NULL for a member without a recipe, a call the recipe
    leaves alone such as a judge's, and old databases), program_run (JSON, program-of-thought
    only: ``{"program", "output", "error", "seconds"}``: the program taken from the reply, what it
    printed (at most 4000 characters), why it gave no answer (``NULL`` when it did: ``Type:
    message``, e.g. ``TimeoutError: ...``, ``NoOutput: ...``, ``NoProgram: ...``) and its run time
    in seconds, sandbox included; the row's ``completion`` is the text the protocol read:
    the program and ``The answer is <printed line>.``, or a text without an answer when the
    program failed).

A question's rows (question, results, its model calls) are written in one transaction, after the
question finished; rerunning a run id skips questions already in ``questions``, so a rerun
resumes and writes no duplicates. Protocols add their own tables (duels, reputations, ...) and
document them next to their module.
"""

from typing import Any, NotRequired

from typing_extensions import TypedDict

from agora.models.studio_schema import studio_schema

RUNS = {
    "run_id": str, "protocol": str, "status": str, "started_at": str, "finished_at": str,
    "config": str, "pool": str, "dataset": str, "code_revision": str, "host": str, "summary": str,
}
QUESTIONS = {
    "run_id": str, "question_id": str, "idx": int, "source": str, "kind": str, "question": str,
    "gold": str, "answer": str, "correct": int, "wall_s": float, "model_calls": int,
    "prompt_tokens": int, "completion_tokens": int, "detail": str, "finished_at": str,
    "n_choices": int,
}
RESULTS = {
    "run_id": str, "question_id": str, "method": str, "answer": str, "correct": int,
    "samples": int, "completion_tokens": int, "latency_s": float, "how": str, "calls": int,
    "shared_calls": int, "shared_samples": int, "shared_tokens": int, "shared_latency_s": float,
}
MODEL_CALLS = {
    "call_id": str, "run_id": str, "question_id": str, "protocol": str, "node": str, "role": str,
    "agent": int, "model": str, "messages": str, "completion": str, "params": str,
    "prompt_tokens": int, "completion_tokens": int, "latency_s": float, "finish_reason": str,
    "attempt": int, "error": str, "created_at": str, "partner": str,
    "answer": str, "how": str, "sample_index": int, "request_id": str, "recipe": str, "program_run": str,
}

#: The core tables every run writes, by name (column → Python type): what the store creates, what a
#: bundle (:mod:`agora.traces.bundle`) carries and what a schema check compares a database with.
TABLES: dict[str, dict[str, type]] = {"runs": RUNS, "questions": QUESTIONS, "results": RESULTS,
                                      "model_calls": MODEL_CALLS}
#: Primary key of each core table.
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "runs": ("run_id",), "questions": ("run_id", "question_id"),
    "results": ("run_id", "question_id", "method"), "model_calls": ("call_id",),
}
#: Columns added to a core table after its first release, oldest first. A writable store adds the
#: ones a database lacks when it opens it (nullable: NULL in old rows); readers treat a missing one
#: as unknown (NULL). Every other column of :data:`TABLES` is required.
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "model_calls": ("partner", "answer", "how", "sample_index", "request_id", "recipe", "program_run"),
    "results": ("how", "calls", "shared_calls", "shared_samples", "shared_tokens", "shared_latency_s"),
    "questions": ("n_choices",),
}

# ----------------------------------------------------------------------------- duels (protocols.md §2)
# Written by agora.runs.duel.run_duels through agora.traces.duels.record_duel: one transaction per
# finished duel (its four kinds of rows and its model calls, whose question_id is the duel id and
# whose role is follower or judge; a judge's partner is the follower whose answer it scored, or
# both followers "a,b" when shown both). Duel ids are "<run_id>:<iteration>:<index>"; a rerun of
# a run id continues after its last recorded duel, from the snapshots below.
#
# ``duels``: one row per duel (``duel_id`` primary key).
#     run_id, mode (sparta/stackelberg), iteration, idx (index within the iteration), duel_number
#     (0-based position in the run), instruction_id, instruction (text), gold, kind, instruction_
#     probability (the leader's p_k when drawn), prompt_messages (JSON chat the followers were sent,
#     before a member's own system prompt), model_a (active follower), model_b (opponent),
#     opponent_probability, answer_a, answer_b, extracted_a/_b (final answers, math and mc),
#     correct_a/_b (0/1 against gold, NULL without), judgements (JSON list, one per judge call:
#     judge, target, slot, position, score, parsed, reply, call_id), score_a, score_b (reputation-
#     weighted judge scores s̄, Sparta Eq. 8: the GRPO reward), winner (model, NULL on a tie), tie
#     (0/1), margin (|score_a − score_b|), judge_calls, parse_failures (replies scored the 5.0
#     fallback), position_bias (mean first-minus-second score, NULL unless judged in both orders),
#     reputations (JSON model → R before the duel), leader_reward (r_k), created_at.
#
# ``reputation_snapshots``: one row per duel and pool model (primary key ``duel_id, model``).
#     run_id, iteration, duel_number, model, rating (R after the duel), sigma (σ after), delta
#     (applied change, NULL for models not in the duel), created_at.
#
# ``leader_snapshots``: one row per duel (``duel_id`` primary key).
#     run_id, iteration, duel_number, instruction_id, probability (p_k), reward (r_k), eta (step
#     used), updated (0/1: 0 in Sparta mode, whose leader stays uniform), n_instructions (K),
#     log_w_rest (normalised log weight shared by every instruction not in log_w), log_w (JSON
#     instruction id → normalised log weight after the duel), created_at.
#
# ``preference_pairs``: one row per non-tied duel (``pair_id`` primary key, = duel_id); ties give none.
#     run_id, duel_id, iteration, prompt (the instruction), prompt_messages (JSON chat the followers
#     saw), chosen, rejected (the winner's and loser's answers), chosen_model, rejected_model,
#     chosen_score, rejected_score (s̄), margin (chosen_score − rejected_score, > 0), judge_scores
#     (JSON {"chosen": {judge: score}, "rejected": {judge: score}}), reputations (JSON model → R
#     at the time of the duel), gold, kind (NULL for plain prompts), created_at.

DUELS = {
    "duel_id": str, "run_id": str, "mode": str, "iteration": int, "idx": int, "duel_number": int,
    "instruction_id": str, "instruction": str, "gold": str, "kind": str, "instruction_probability": float,
    "prompt_messages": str, "model_a": str, "model_b": str, "opponent_probability": float,
    "answer_a": str, "answer_b": str, "extracted_a": str, "extracted_b": str, "correct_a": int,
    "correct_b": int, "judgements": str, "score_a": float, "score_b": float, "winner": str, "tie": int,
    "margin": float, "judge_calls": int, "parse_failures": int, "position_bias": float,
    "reputations": str, "leader_reward": float, "created_at": str,
}
REPUTATION_SNAPSHOTS = {
    "duel_id": str, "run_id": str, "iteration": int, "duel_number": int, "model": str, "rating": float,
    "sigma": float, "delta": float, "created_at": str,
}
LEADER_SNAPSHOTS = {
    "duel_id": str, "run_id": str, "iteration": int, "duel_number": int, "instruction_id": str,
    "probability": float, "reward": float, "eta": float, "updated": int, "n_instructions": int,
    "log_w_rest": float, "log_w": str, "created_at": str,
}
PREFERENCE_PAIRS = {
    "pair_id": str, "run_id": str, "duel_id": str, "iteration": int, "prompt": str, "prompt_messages": str,
    "chosen": str, "rejected": str, "chosen_model": str, "rejected_model": str, "chosen_score": float,
    "rejected_score": float, "margin": float, "judge_scores": str, "reputations": str, "gold": str,
    "kind": str, "created_at": str,
}


# ----------------------------------------------------------------------------- typed records
# What graphs hand the runner, typed once (TypedDicts: plain dicts in state, readable by Studio).


class CallRecord(TypedDict, total=False):
    """One model call as the pool returns it (a ``model_calls`` row before the store adds run_id
    and protocol): one per generated sample, one per failed attempt."""

    call_id: str
    question_id: str
    node: str
    role: str
    agent: int | None
    model: str
    messages: list[dict[str, Any]]
    completion: str | None
    params: dict[str, Any]
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float | None
    finish_reason: str | None
    attempt: int
    error: str | None
    created_at: str
    partner: str | None
    recipe: NotRequired[str | None]
    """The member's recipe when it rewrote this call (``model_calls.recipe``)."""
    program: NotRequired[str | None]
    """Program-of-thought: the program run (``model_calls.program_run``, with the three below)."""
    program_output: NotRequired[str | None]
    program_error: NotRequired[str | None]
    program_s: NotRequired[float | None]


@studio_schema()
class Cost(TypedDict):
    """What a step or a method spent."""

    calls: int
    """Requests sent (one prompt to one model; its N samples count once)."""
    samples: int
    completion_tokens: int
    """Decoded tokens."""
    latency_s: float
    """Model seconds."""
    shared_calls: NotRequired[int]
    """Of ``calls``, the requests whose samples came from the bench's shared candidate pool
    (:class:`agora.graphs.question.SharedCandidate`): drawn once per question for every protocol, not
    this method's added compute. Absent (old rows, a run outside a bench): 0. Added = total − shared."""
    shared_samples: NotRequired[int]
    """Of ``samples``, those taken from the shared pool."""
    shared_completion_tokens: NotRequired[int]
    """Of ``completion_tokens``, those of shared samples."""
    shared_latency_s: NotRequired[float]
    """Of ``latency_s``, the model seconds of shared samples."""


#: The shared part of a :class:`Cost` (each field's total is the Cost field without ``shared_``).
SHARED_COST_FIELDS = ("shared_calls", "shared_samples", "shared_completion_tokens", "shared_latency_s")


def added_cost(cost: dict[str, Any]) -> dict[str, Any]:
    """What a method added beyond the shared pool: each total minus its shared part (a cost or
    results row without shared fields added everything). Keys: calls, samples, completion_tokens,
    latency_s (``None`` where the total is unknown)."""
    out: dict[str, Any] = {}
    for f in SHARED_COST_FIELDS:
        total, shared = cost.get(f[len("shared_"):]), cost.get(f) or 0
        out[f[len("shared_"):]] = None if total is None else total - shared
    return out


@studio_schema()
class MethodResult(TypedDict):
    """One ``results`` row as a graph writes it under ``state["methods"][method]``."""

    answer: str | None
    correct: bool | None
    """``None`` without a gold answer."""
    samples: int
    """Samples this method's answer drew on (0: its calls failed)."""
    completion_tokens: int
    latency_s: float
    calls: NotRequired[int]
    """Requests the answer needed (``results.calls``); protocols that count samples only leave it out."""
    how: NotRequired[str | None]
    """How the answer was found in the first output that gives it (``docs/scoring.md``;
    ``fallback``: guessed from the output's last number or letter); ``None`` without an answer."""
    shared_calls: NotRequired[int]
    """Of ``calls`` (or of the requests its samples came from), those of the shared candidate pool
    (:class:`Cost`); ``results.shared_calls``. Absent: nothing shared."""
    shared_samples: NotRequired[int]
    """Of ``samples``, those from the shared candidate pool (``results.shared_samples``)."""
    shared_completion_tokens: NotRequired[int]
    """Of ``completion_tokens``, those of shared samples (``results.shared_tokens``)."""
    shared_latency_s: NotRequired[float]
    """Of ``latency_s``, the model seconds of shared samples (``results.shared_latency_s``)."""
