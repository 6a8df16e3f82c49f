"""Duel tables of the trace store: writing duels, reading a run's state back, tables and plots.

Tables (documented in :mod:`agora.traces.schema`): ``duels``, ``reputation_snapshots``,
``leader_snapshots``, ``preference_pairs``. A duel's rows and its model calls are written in one
transaction (:func:`record_duel`), after the duel finished, so the tables always hold whole duels
and :func:`load_state` can continue a run from them. Records come from
:mod:`agora.graphs.duel` (``DuelRecord``); this module only maps them to rows and back.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from agora.tasks.errors import InputError
from agora.traces import schema
from agora.traces.store import TraceStore, call_rows, clean_rows, now


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def create_tables(store: TraceStore) -> None:
    """Create the four duel tables if missing (idempotent)."""
    db = store.db
    db["duels"].create(schema.DUELS, pk="duel_id", if_not_exists=True)
    db["duels"].create_index(["run_id", "duel_number"], if_not_exists=True)
    db["reputation_snapshots"].create(schema.REPUTATION_SNAPSHOTS, pk=("duel_id", "model"), if_not_exists=True)
    db["reputation_snapshots"].create_index(["run_id", "duel_number"], if_not_exists=True)
    db["leader_snapshots"].create(schema.LEADER_SNAPSHOTS, pk="duel_id", if_not_exists=True)
    db["leader_snapshots"].create_index(["run_id", "duel_number"], if_not_exists=True)
    db["preference_pairs"].create(schema.PREFERENCE_PAIRS, pk="pair_id", if_not_exists=True)
    db["preference_pairs"].create_index(["run_id", "iteration"], if_not_exists=True)


def instruction_fingerprint(ids: Sequence[str]) -> str:
    """CRC of the instruction ids in order: a rerun must use the same instruction pool."""
    return f"{len(ids)}:{zlib.crc32(chr(0).join(ids).encode()):08x}"


def check_same_run(store: TraceStore, run_id: str, config: dict[str, Any], fingerprint: str) -> None:
    """Refuse to resume ``run_id`` with other settings or instructions than it started with.

    Raises:
        ValueError: naming the differing settings, or the instruction pool.
    """
    run = store.get_run(run_id) or {}
    stored = json.loads(run.get("config") or "{}")
    wanted = json.loads(_json(config))
    changed = sorted(k for k in set(stored) | set(wanted) if stored.get(k) != wanted.get(k))
    if changed:
        detail = ", ".join(f"{k}: {stored.get(k)!r} → {wanted.get(k)!r}" for k in changed)
        raise InputError(f"run {run_id!r} in {store.path} was started with other settings ({detail}); "
                         f"rerun with the same settings to resume, or pass a new --run-id")
    dataset = json.loads(run.get("dataset") or "{}")
    if dataset.get("fingerprint") not in (None, fingerprint):
        raise InputError(f"run {run_id!r} in {store.path} was started on another instruction pool "
                         f"({dataset.get('fingerprint')} ≠ {fingerprint}); use the same file and --limit to resume")


@dataclass
class SavedState:
    """What a run's recorded duels say about where it stands."""

    done: set[str]
    """Ids of the recorded duels."""
    duels: int
    reputation: dict[str, Any]
    """A ``ReputationState`` (ratings, last-``W`` deltas per model, update count)."""
    leader: dict[str, Any] | None
    """The last ``LeaderState``, ``None`` before the first duel."""


def load_state(store: TraceStore, run_id: str, window: int) -> SavedState:
    """The state to continue ``run_id`` from: after its last recorded duel.

    Args:
        window: ``W``, how many of each model's most recent deltas to keep.
    """
    create_tables(store)
    db = store.db
    done = {r["duel_id"] for r in db.query("select duel_id from duels where run_id = ?", [run_id])}
    last = next(db.query("select max(duel_number) as n from duels where run_id = ?", [run_id]))["n"]
    ratings: dict[str, float] = {}
    deltas: dict[str, list[float]] = {}
    leader = None
    if last is not None:
        ratings = {r["model"]: r["rating"] for r in db.query(
            "select model, rating from reputation_snapshots where run_id = ? and duel_number = ?", [run_id, last])}
        for r in db.query("select model, delta from reputation_snapshots where run_id = ? and delta is not null "
                          "order by duel_number", [run_id]):
            deltas.setdefault(r["model"], []).append(r["delta"])
        row = next(db.query("select log_w_rest, log_w from leader_snapshots where run_id = ? and duel_number = ?",
                            [run_id, last]))
        leader = {"log_w_rest": row["log_w_rest"], "log_w": json.loads(row["log_w"])}
    reputation = {"ratings": ratings, "deltas": {m: d[-window:] for m, d in deltas.items()}, "updates": len(done)}
    return SavedState(done=done, duels=len(done), reputation=reputation, leader=leader)


def record_calls(store: TraceStore, run_id: str, protocol: str, duel_id: str, calls: Iterable[dict]) -> None:
    """Write model-call records of a duel (e.g. the failed attempts of an interrupted one)."""
    rows = clean_rows("model_calls", call_rows(calls, run_id, duel_id, protocol))
    if rows:
        with store.transaction() as db:
            db["model_calls"].upsert_all(rows, pk="call_id")


def record_duel(store: TraceStore, rec: dict[str, Any], calls: Iterable[dict[str, Any]]) -> None:
    """Write one finished duel (a ``DuelRecord``): its ``duels`` row, one reputation snapshot row
    per pool model, the leader snapshot, the preference pair (none for a tie) and its model
    calls, in one transaction. Upserts on primary keys, so writing a duel twice leaves one copy."""
    create_tables(store)
    created = now()
    run_id, duel_id, ins = rec["run_id"], rec["duel_id"], rec["instruction"]
    a, b = rec["answers"]
    judgements = rec["judgements"]
    duel = {
        "duel_id": duel_id, "run_id": run_id, "mode": rec["mode"], "iteration": rec["iteration"],
        "idx": rec["index"], "duel_number": rec["duel_number"], "instruction_id": ins["id"],
        "instruction": ins["question"], "gold": ins["gold"], "kind": ins["kind"],
        "instruction_probability": ins["probability"], "prompt_messages": _json(rec["prompt_messages"]),
        "model_a": a["model"], "model_b": b["model"], "opponent_probability": rec["opponent_probability"],
        "answer_a": a["text"], "answer_b": b["text"], "extracted_a": a["answer"], "extracted_b": b["answer"],
        "correct_a": _bool(a["correct"]), "correct_b": _bool(b["correct"]),
        "judgements": _json(judgements), "score_a": rec["scores"][0], "score_b": rec["scores"][1],
        "winner": rec["winner"], "tie": int(rec["winner"] is None), "margin": rec["margin"],
        "judge_calls": len(judgements), "parse_failures": sum(not j["parsed"] for j in judgements),
        "position_bias": rec["position_bias"], "reputations": _json(rec["ratings_before"]),
        "leader_reward": rec["leader_reward"], "created_at": created,
    }
    reps = [{"duel_id": duel_id, "run_id": run_id, "iteration": rec["iteration"], "duel_number": rec["duel_number"],
             "model": m, "rating": r, "sigma": rec["sigmas_after"][m], "delta": rec["deltas"].get(m),
             "created_at": created} for m, r in rec["ratings_after"].items()]
    leader = {"duel_id": duel_id, "run_id": run_id, "iteration": rec["iteration"], "duel_number": rec["duel_number"],
              "instruction_id": ins["id"], "probability": ins["probability"], "reward": rec["leader_reward"],
              "eta": rec["eta"], "updated": int(rec["leader_updated"]), "n_instructions": rec["n_instructions"],
              "log_w_rest": rec["leader_state"]["log_w_rest"], "log_w": _json(rec["leader_state"]["log_w"]),
              "created_at": created}
    pair = rec["pair"]
    rows_of_calls = clean_rows("model_calls", call_rows(calls, run_id, duel_id, rec["mode"]))
    [duel] = clean_rows("duels", [duel])  # a lone surrogate in a reply or instruction is stored as U+FFFD
    with store.transaction() as db:
        if rows_of_calls:
            db["model_calls"].upsert_all(rows_of_calls, pk="call_id")
        db["reputation_snapshots"].upsert_all(reps, pk=("duel_id", "model"))
        db["leader_snapshots"].upsert(leader, pk="duel_id")
        if pair is not None:
            [pair_row] = clean_rows("preference_pairs", [{
                **pair, "prompt_messages": _json(pair["prompt_messages"]), "judge_scores": _json(pair["judge_scores"]),
                "reputations": _json(pair["reputations"]), "created_at": created}])
            db["preference_pairs"].upsert(pair_row, pk="pair_id")
        db["duels"].upsert(duel, pk="duel_id")


def _bool(value: Any) -> int | None:
    return None if value is None else int(bool(value))


# ----------------------------------------------------------------------------- reading


def duel_runs(store: TraceStore) -> list[str]:
    """Run ids that have duels, most recently started last."""
    if "duels" not in store.db.table_names():
        return []
    return [r["run_id"] for r in store.db.query(
        "select run_id, min(created_at) as t from duels group by run_id order by t, run_id")]


def duels(store: TraceStore, run_id: str) -> list[dict[str, Any]]:
    """A run's ``duels`` rows in play order, JSON columns decoded."""
    rows = store.db.query("select * from duels where run_id = ? order by duel_number", [run_id])
    return [{**r, "judgements": json.loads(r["judgements"]), "reputations": json.loads(r["reputations"]),
             "prompt_messages": json.loads(r["prompt_messages"])} for r in rows]


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One pool member's standing after a run."""

    model: str
    reputation: float
    sigma: float
    duels: int
    wins: int
    losses: int
    ties: int
    judge_calls: int
    """Scores this model gave as a judge."""
    parse_failures: int
    """Of those, replies that did not parse (scored the fallback)."""

    @property
    def win_rate(self) -> float:
        return self.wins / self.duels if self.duels else math.nan

    @property
    def tie_rate(self) -> float:
        return self.ties / self.duels if self.duels else math.nan


def model_table(store: TraceStore, run_id: str) -> list[ModelRow]:
    """Per model: final reputation and σ, duels won/lost/tied, judge parse failures; by reputation."""
    rows = duels(store, run_id)
    if not rows:
        return []
    final = {r["model"]: r for r in store.db.query(
        "select model, rating, sigma from reputation_snapshots where run_id = ? and duel_number = ?",
        [run_id, rows[-1]["duel_number"]])}
    counts = ("duels", "wins", "losses", "ties", "judge_calls", "parse_failures")
    stats = {m: dict.fromkeys(counts, 0) for m in final}
    for r in rows:
        for m in (r["model_a"], r["model_b"]):
            s = stats.setdefault(m, dict.fromkeys(counts, 0))
            s["duels"] += 1
            s["ties" if r["tie"] else ("wins" if r["winner"] == m else "losses")] += 1
        for j in r["judgements"]:
            s = stats.setdefault(j["judge"], dict.fromkeys(counts, 0))
            s["judge_calls"] += 1
            s["parse_failures"] += int(not j["parsed"])
    out = [ModelRow(model=m, reputation=final[m]["rating"] if m in final else math.nan,
                    sigma=final[m]["sigma"] if m in final else math.nan, **s) for m, s in stats.items()]
    return sorted(out, key=lambda r: -r.reputation)


def summary(store: TraceStore, run_id: str) -> dict[str, Any]:
    """Totals of a run: duels, ties, pairs written, judge calls and parse-failure rate, mean
    position bias (``None`` unless judged in both orders)."""
    row = next(store.db.query(
        "select count(*) as duels, coalesce(sum(tie), 0) as ties, coalesce(sum(judge_calls), 0) as judge_calls, "
        "coalesce(sum(parse_failures), 0) as parse_failures, avg(position_bias) as position_bias "
        "from duels where run_id = ?", [run_id]))
    pairs = next(store.db.query("select count(*) as n from preference_pairs where run_id = ?", [run_id]))["n"]
    rate = row["parse_failures"] / row["judge_calls"] if row["judge_calls"] else math.nan
    return {**row, "pairs": pairs, "parse_failure_rate": rate,
            "tie_rate": row["ties"] / row["duels"] if row["duels"] else math.nan}


def reputation_history(store: TraceStore, run_id: str) -> tuple[list[int], dict[str, list[float]]]:
    """Reputation trajectories: x = duels played (0 = before the first), model → ratings."""
    rows = duels(store, run_id)
    if not rows:
        return [], {}
    first = rows[0]["reputations"]
    history = {m: [r] for m, r in first.items()}
    xs = [0]
    by_duel: dict[int, dict[str, float]] = {}
    for r in store.db.query("select duel_number, model, rating from reputation_snapshots where run_id = ? "
                            "order by duel_number", [run_id]):
        by_duel.setdefault(r["duel_number"], {})[r["model"]] = r["rating"]
    for n in sorted(by_duel):
        xs.append(n + 1)
        for m, rating in by_duel[n].items():
            history.setdefault(m, [math.nan] * (len(xs) - 1)).append(rating)
        for m, values in history.items():
            if len(values) < len(xs):
                values.append(values[-1])
    return xs, history


def leader_weights(store: TraceStore, run_id: str, top: int = 20) -> tuple[list[str], np.ndarray]:
    """Normalised leader weights ``w_k`` after each duel for the ``top`` instructions whose weight
    moved most from uniform (largest ``max_t |log(K·w_k(t))|``).

    Returns:
        ``(instruction_ids, matrix)`` with ``matrix`` of shape ``(len(ids), duels)``.
    """
    rows = list(store.db.query("select n_instructions, log_w_rest, log_w from leader_snapshots where run_id = ? "
                               "order by duel_number", [run_id]))
    if not rows:
        return [], np.zeros((0, 0))
    states = [(r["log_w_rest"], json.loads(r["log_w"])) for r in rows]
    ids = sorted({k for _, lw in states for k in lw})
    k_total = rows[0]["n_instructions"]
    logs = np.array([[lw.get(i, rest) for rest, lw in states] for i in ids]).reshape(len(ids), len(states))
    moved = np.abs(logs + math.log(k_total)).max(axis=1, initial=0.0)
    order = np.argsort(-moved, kind="stable")[:top]
    return [ids[i] for i in order], np.exp(logs[order])


def win_rates(store: TraceStore, run_id: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Pairwise outcomes: ``(models, wins, games)`` with ``wins[i, j]`` = duels ``i`` won against
    ``j`` and ``games[i, j]`` = duels between them (ties count as games, not wins)."""
    rows = duels(store, run_id)
    models = [r.model for r in model_table(store, run_id)]
    pos = {m: i for i, m in enumerate(models)}
    wins = np.zeros((len(models), len(models)))
    games = np.zeros_like(wins)
    for r in rows:
        i, j = pos[r["model_a"]], pos[r["model_b"]]
        games[i, j] += 1
        games[j, i] += 1
        if r["winner"] is not None:
            w, l = (i, j) if r["winner"] == r["model_a"] else (j, i)
            wins[w, l] += 1
    return models, wins, games


def plot_duels(store: TraceStore, run_id: str, out_dir: str | Path, top: int = 20) -> list[Path]:
    """Write ``reputation.png`` (trajectories), ``leader_weights.png`` (heatmap of the ``top``
    most-changed instructions over duels) and ``win_rates.png`` (pairwise matrix) to ``out_dir``.

    Raises:
        ValueError: the run has no duels.
    """
    from matplotlib.figure import Figure

    if not duels(store, run_id):
        raise InputError(f"{store.path}: run {run_id!r} has no duels")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []

    xs, history = reputation_history(store, run_id)
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for m, values in sorted(history.items(), key=lambda kv: -kv[1][-1]):
        ax.plot(xs, values, label=m, linewidth=1.5)
    ax.set(xlabel="duels played", ylabel="reputation R", title=f"Reputation trajectories ({run_id})")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    paths.append(out / "reputation.png")
    fig.savefig(paths[-1], dpi=120)

    ids, weights = leader_weights(store, run_id, top)
    fig = Figure(figsize=(9, 0.35 * max(len(ids), 4) + 1.5), layout="constrained")
    ax = fig.add_subplot()
    if ids:
        image = ax.imshow(weights, aspect="auto", interpolation="nearest", cmap="viridis")
        ax.set_yticks(range(len(ids)), [i[:28] for i in ids], fontsize="small")
        fig.colorbar(image, ax=ax, label="normalised weight $w_k$")
    else:
        ax.text(0.5, 0.5, "leader weights never moved (uniform leader)", ha="center", va="center",
                transform=ax.transAxes)
    ax.set(xlabel="duel", title=f"Leader weights, {len(ids)} most-changed instructions ({run_id})")
    paths.append(out / "leader_weights.png")
    fig.savefig(paths[-1], dpi=120)

    models, wins, games = win_rates(store, run_id)
    rate = np.divide(wins, games, out=np.full_like(wins, np.nan), where=games > 0)
    fig = Figure(figsize=(1.3 * len(models) + 3, 1.1 * len(models) + 2), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(rate, vmin=0, vmax=1, cmap="RdYlGn")
    for i in range(len(models)):
        for j in range(len(models)):
            if games[i, j]:
                ax.text(j, i, f"{int(wins[i, j])}/{int(games[i, j])}", ha="center", va="center", fontsize="small")
    ax.set_xticks(range(len(models)), models, rotation=30, ha="right", fontsize="small")
    ax.set_yticks(range(len(models)), models, fontsize="small")
    ax.set(xlabel="opponent", ylabel="model", title="Win rate of row against column (wins/duels; ties are no win)")
    fig.colorbar(image, ax=ax, label="win rate")
    paths.append(out / "win_rates.png")
    fig.savefig(paths[-1], dpi=120)
    return paths
