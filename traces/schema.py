"""Trace schema: one page for every table Agora writes. All tables live in one SQLite file (WAL).

``runs``: one row per run (``run_id`` primary key).
    protocol, status (``running``/``finished``/``failed``), started_at, finished_at (ISO-8601 UTC),
    config (JSON of the protocol's settings), pool (JSON list of model specs), dataset (JSON: path,
    format, limit, count), code_revision (git commit or package version), host, summary (JSON).

``questions``: one row per finished question of a run (primary key ``run_id, question_id``).
    idx (position in the dataset), source, kind (``math``/``mc``/``open``), question, gold,
    answer (the protocol's final answer), correct (0/1, NULL without gold), wall_s (seconds),
    model_calls, prompt_tokens, completion_tokens, detail (JSON: proposals, selection, ...),
    finished_at.

``results``: one row per question and method (primary key ``run_id, question_id, method``).
    The protocol itself and each baseline computed from the same candidates: answer, correct,
    samples (candidates the method drew on), completion_tokens, latency_s (model seconds of
    those samples).

``model_calls``: one row per generated sample or failed attempt (``call_id`` primary key).
    run_id, question_id, protocol, node (graph node), role (agent, judge, anchor, ...), agent,
    model, messages (JSON chat), completion, params (JSON sampling parameters), prompt_tokens,
    completion_tokens, latency_s, finish_reason, attempt (0-based retry count), error (NULL when
    the call succeeded), created_at, partner (the model(s) whose answer the prompt showed, comma-
    separated: COMED peers, debate rounds after the first, the MoA aggregator; NULL for a call that
    answered alone).

A question's rows (question, results, its model calls) are written in one transaction, after the
question finished; rerunning a run id skips questions already in ``questions``, so a rerun
resumes and writes no duplicates. Protocols add their own tables (duels, reputations, ...) and
document them next to their module.
"""

RUNS = {
    "run_id": str, "protocol": str, "status": str, "started_at": str, "finished_at": str,
    "config": str, "pool": str, "dataset": str, "code_revision": str, "host": str, "summary": str,
}
QUESTIONS = {
    "run_id": str, "question_id": str, "idx": int, "source": str, "kind": str, "question": str,
    "gold": str, "answer": str, "correct": int, "wall_s": float, "model_calls": int,
    "prompt_tokens": int, "completion_tokens": int, "detail": str, "finished_at": str,
}
RESULTS = {
    "run_id": str, "question_id": str, "method": str, "answer": str, "correct": int,
    "samples": int, "completion_tokens": int, "latency_s": float,
}
MODEL_CALLS = {
    "call_id": str, "run_id": str, "question_id": str, "protocol": str, "node": str, "role": str,
    "agent": int, "model": str, "messages": str, "completion": str, "params": str,
    "prompt_tokens": int, "completion_tokens": int, "latency_s": float, "finish_reason": str,
    "attempt": int, "error": str, "created_at": str, "partner": str,
}
