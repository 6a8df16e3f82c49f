"""Shared candidates: the samples a protocol run took from ``agora bench``'s candidates run instead of
drawing its own, mapped back to the roles that took them (:func:`shared_takes`) and counted
(:func:`shared_totals`)."""

from __future__ import annotations

from agora.tasks.errors import InputError
from agora.traces.store import TraceStore, answer_fields


#: The key a protocol run's recorded settings (``runs.config``) carry when it took ``agora bench``'s
#: shared candidates: the id of the candidates run they were drawn in (the same key as
#: :data:`agora.runs.shared.SHARED_KEY`, which lives above this layer).
SHARED_KEY = "shared_candidates"


#: The methods of COMED's SLM-MUX dense baseline (:mod:`agora.graphs.slm_mux`): a question recording
#: any of them ran SLM-MUX's members, whose samples may be shared ones.
MUX_METHODS = ("slm-mux", "mux_vote", "mux_top")


def shared_takes(store: TraceStore, run_id: str, details: dict[str, dict] | None = None, *,
                 baselines: bool = True) -> dict[str, list[dict]]:
    """The shared candidates run ``run_id`` took, per question: question id → the samples its first
    stage took from the bench's candidates run (its recorded ``config[SHARED_KEY]``), mapped the way
    the protocol took them (:func:`agora.graphs.question.take_shared`), as dicts with the
    ``model_calls`` fields ``call_id``, ``model``, ``answer``, ``how``, ``completion``,
    ``prompt_tokens``, ``completion_tokens``, ``latency_s``, plus ``node`` and ``role`` as the
    protocol saw them, ``agent``, ``sample_index`` (0-based within the taker's share) and
    ``shared_from`` (the candidates run). Empty for a run that took none.

    - ALIGN: agent ``i`` plays ``models[i % len(models)]`` (``config.models``, else the candidates
      run's models, which are the pool's); the ``j``-th agent on a model takes that model's samples
      ``j·k .. j·k + k − 1`` (role ``agent``, node ``agent_sample``).
    - COMED: the anchor (``detail.route.anchor``) takes its model's first ``n_anchor`` samples
      (role ``anchor``, node ``anchor``). With ``baselines`` (the default), on a question that
      recorded an SLM-MUX method (:data:`MUX_METHODS`), SLM-MUX's member ``i`` plays the pool's
      ``i``-th model (the candidates run's ``models``) and takes that model's first ``n_anchor``
      samples (role ``member``, node ``mux_sample``, agent ``i``: COMED's baseline samples ``k = N``
      per member, :func:`agora.graphs.slm_mux.comed_slm_mux`). MoA's, debate's and the council's
      first steps, which take shared samples too, are not mapped (no replay rule reads them).

    An agent, anchor or member with rows of its own in ``run_id`` drew its own samples (the shared
    pool was too small, or missing for the question) and takes nothing here. ``details``: question id →
    its recorded ``detail`` (read from ``questions`` when ``None``).

    Raises:
        ValueError: (one line naming the run) the mapping cannot be rebuilt from what is stored: the
            candidates run is missing, the run's settings lack ``n_agents``/``k_samples``/``n_anchor``,
            the pool's models are unknown, a question has neither its own rows nor enough shared
            samples, or the shared samples no longer give the answers the run recorded (the
            anchor's, ALIGN's proposals).
    """
    import json

    run = store.get_run(run_id) if "runs" in store.db.table_names() else None
    config = (store.run_config(run_id) or {}) if run is not None else {}
    source = config.get(SHARED_KEY)
    if not source:
        return {}
    protocol = run["protocol"]

    def refuse(why: str) -> ValueError:
        return InputError(f"run {run_id!r} took shared candidates from {source!r}, but {why}: its replay and "
                          "report would be wrong, so they are refused")

    if protocol not in ("align", "comed"):
        raise refuse(f"the trace tools map shared samples for align and comed runs only, not {protocol}")
    cand_run = store.get_run(source)
    if cand_run is None:
        raise refuse("that run is not in this database")
    if details is None:
        details = {q["question_id"]: json.loads(q.get("detail") or "{}") or {} for q in store.questions(run_id)}
    have = set(store.db["model_calls"].columns_dict)
    cols = ["call_id", "question_id", "model", "completion", "prompt_tokens", "completion_tokens", "latency_s",
            "error"] + [c for c in ("answer", "how", "sample_index") if c in have]
    pools: dict[str, dict[str, list[dict]]] = {}
    for r in store.db.query(f"select {', '.join(cols)} from model_calls where run_id = ? and node = 'candidates' "
                            "order by rowid", [source]):
        if r["question_id"] in details:
            pools.setdefault(r["question_id"], {}).setdefault(r["model"], []).append(r)
    for per in pools.values():  # as agora.graphs.candidates.shared_from_rows: successful rows, by sample index
        for m, rows in per.items():
            per[m] = [r for r in sorted(rows, key=lambda r: r.get("sample_index") or 0) if not r["error"]]
    own = {(r["question_id"], r["node"], r["agent"]) for r in store.db.query(
        "select distinct question_id, node, agent from model_calls where run_id = ?", [run_id])}
    own |= {(q, node, "any") for q, node, _agent in own}

    def take(qid: str, model: str, start: int, k: int, node: str, role: str, agent: int | None) -> list[dict]:
        mine = pools.get(qid, {}).get(model, [])
        if len(mine) < start + k:
            raise refuse(f"question {qid!r}: {node} ({model}) has no rows of its own and {source!r} holds "
                         f"{len(mine)} of the {start + k} samples of {model} it would have taken")
        out = []
        for i, r in enumerate(mine[start:start + k]):
            answer, how = r.get("answer"), r.get("how")
            if how is None:  # not extracted: an old database
                q = store.db.query("select kind, n_choices from questions where run_id = ? and question_id = ?",
                                   [run_id, qid])
                q = next(q, {}) or {}
                answer, how = answer_fields(r["completion"], q.get("kind") or "math", q.get("n_choices"))
            out.append({"call_id": r["call_id"], "node": node, "role": role, "agent": agent, "model": model,
                        "sample_index": i, "answer": answer, "how": how, "completion": r["completion"],
                        "prompt_tokens": r["prompt_tokens"] or 0, "completion_tokens": r["completion_tokens"] or 0,
                        "latency_s": r["latency_s"] or 0.0, "shared_from": source})
        return out

    takes: dict[str, list[dict]] = {}
    if protocol == "align":
        n, k = config.get("n_agents"), config.get("k_samples")
        models = list(config.get("models") or (store.run_config(source) or {}).get("models") or [])
        if not n or not k:
            raise refuse("its recorded settings lack n_agents or k_samples")
        if not models:
            raise refuse(f"neither it nor {source!r} records the pool's models (which model each agent played)")
        for qid, detail in details.items():
            got: list[dict] = []
            for i in range(int(n)):
                model = models[i % len(models)]
                if (qid, "agent_sample", i) in own:
                    continue
                share = sum(1 for a in range(i) if models[a % len(models)] == model)
                got += take(qid, model, share * int(k), int(k), "agent_sample", "agent", i)
            by_agent = {}
            for s in got:
                by_agent.setdefault(s["agent"], []).append(s)
            for p in (detail or {}).get("proposals") or []:  # the answers the run proposed from them
                mine, idx = by_agent.get(p.get("agent")), p.get("candidate_index")
                if mine is not None and isinstance(idx, int) and 0 <= idx < len(mine) and \
                        mine[idx]["answer"] != p.get("answer"):
                    raise refuse(f"question {qid!r}: agent {p.get('agent')}'s sample {idx} in {source!r} answers "
                                 f"{mine[idx]['answer']!r}, the run recorded {p.get('answer')!r}")
            takes[qid] = got
    else:
        n = config.get("n_anchor")
        if not n:
            raise refuse("its recorded settings lack n_anchor")
        muxed = set()
        if baselines and "results" in store.db.table_names():
            muxed = {r["question_id"] for r in store.db.query(
                f"select distinct question_id from results where run_id = ? and method in "
                f"({', '.join('?' * len(MUX_METHODS))})", [run_id, *MUX_METHODS])} & set(details)
        pool_models = list((store.run_config(source) or {}).get("models") or [])
        if muxed and not pool_models:
            raise refuse(f"{source!r} records no pool models (which model each SLM-MUX member played)")
        for qid in sorted(muxed):  # COMED's SLM-MUX baseline: member i on the pool's i-th model, k = N
            for i, model in enumerate(pool_models):
                if (qid, "mux_sample", i) not in own:
                    share = pool_models[:i].count(model)
                    takes.setdefault(qid, []).extend(
                        take(qid, model, share * int(n), int(n), "mux_sample", "member", i))
        for qid, detail in details.items():
            if (qid, "anchor", "any") in own:
                continue
            model = ((detail or {}).get("route") or {}).get("anchor") or ((detail or {}).get("anchor") or {}).get("model")
            if not model:
                raise refuse(f"question {qid!r} records no anchor model")
            got = take(qid, model, 0, int(n), "anchor", "anchor", None)
            recorded = ((detail or {}).get("anchor") or {}).get("answers")
            if recorded is not None and list(recorded) != [s["answer"] for s in got]:
                raise refuse(f"question {qid!r}: the anchor's samples in {source!r} answer "
                             f"{[s['answer'] for s in got]}, the run recorded {list(recorded)}")
            takes[qid] = got + takes.get(qid, [])
    return takes


def shared_totals(store: TraceStore, run_id: str) -> dict[str, object]:
    """The shared part of a run's cost (:func:`shared_takes`): ``shared_from`` (the candidates run,
    ``None`` for a run that took none), ``shared_calls`` (distinct shared ``model_calls`` rows, one per
    sample), ``shared_prompt_tokens``, ``shared_completion_tokens``: those its first stage took (ALIGN's
    agents, COMED's anchor; COMED's dense baselines' shares are each method's ``shared_samples``). Not
    in :func:`run_totals`, which counts the run's own rows only; the shared rows are the candidates run's.

    Raises:
        ValueError: as :func:`shared_takes`.
    """
    source = (store.run_config(run_id) or {}).get(SHARED_KEY) if "runs" in store.db.table_names() else None
    rows = {s["call_id"]: s for got in shared_takes(store, run_id, baselines=False).values() for s in got}
    return {"shared_from": source or None, "shared_calls": len(rows),
            "shared_prompt_tokens": sum(s["prompt_tokens"] for s in rows.values()),
            "shared_completion_tokens": sum(s["completion_tokens"] for s in rows.values())}
