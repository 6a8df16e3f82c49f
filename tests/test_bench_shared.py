"""Issue 32 items 1 and 4: one candidate pool per question shared by every protocol, shared and added
compute in the report, per-model self-consistency, and the best single model / COMED's anchor chosen
on dev (never on test questions), with a routed-anchor COMED beside it."""

import json
import re
import threading

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.graphs.question import take_shared
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.runs.shared import candidates_config
from agora.agents.delegation import DelegationConfig
from agora.agents.escalation import EscalationConfig
from agora.traces.store import TraceStore

TINY = ("smollm2-135m", "gemma3-270m")  # the tiny pool's members, in its order
A, B = TINY


def write_math(tmp_path, n=5):
    f = tmp_path / "arith.jsonl"
    f.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n"
                         for i in range(1, n + 1)))
    return f


def scripted_tiny(counter=None, a_right=lambda i, j: j > 0, b_right=lambda i, j: j == 0):
    """A scripted pool named like the tiny pool. ``a_right(i, j)``: whether A's sample j on "What is
    i + i?" is right (else it says 99); same for B (else 0). Any prompt showing other answers is right."""
    lock = threading.Lock()

    def make(model, right):
        def respond(chat, j):
            if counter is not None:
                with lock:
                    counter[model] = counter.get(model, 0) + 1
                    counter["total"] = counter.get("total", 0) + 1
            text = chat[-1]["content"]
            i = int(re.search(r"What is (\d+) \+", text).group(1))
            seen = any(s in text for s in ("Another model answered", "other agents", "Responses from several"))
            if seen or right(i, j):
                return f"The answer is {2 * i}."
            return f"The answer is {99 if model == A else 0}."
        return respond

    return ModelPool.from_chat_models({A: ScriptedChatModel(respond=make(A, a_right), latency_s=0.001),
                                       B: ScriptedChatModel(respond=make(B, b_right), latency_s=0.001)})


def args(f, db, out, *extra, run_id="s1"):
    return ["bench", "--tasks", str(f), "--db", str(db), "--out", str(out), "--run-id", run_id, "--max-tokens", "16",
            *extra]


def test_take_shared_returns_the_first_k_samples_with_their_rows_or_none():
    pool = {A: [{"model": A, "text": f"t{i}", "call_id": f"c{i}", "sample_index": i, "seed": 7, "prompt_tokens": 5,
                 "completion_tokens": 4, "latency_s": 0.5, "finish_reason": "stop"} for i in (2, 0, 1)]}
    got = take_shared({"shared_candidates": pool}, A, 2)
    assert [s.call_id for s in got] == ["c0", "c1"] and [s.text for s in got] == ["t0", "t1"]
    assert got[0].model == A and got[0].completion_tokens == 4 and got[0].seed == 7
    assert [s.call_id for s in take_shared({"shared_candidates": pool}, A, 1, start=2)] == ["c2"]
    assert take_shared({"shared_candidates": pool}, A, 4) is None  # not enough: the node draws
    assert take_shared({"shared_candidates": pool}, B, 1) is None and take_shared({}, A, 1) is None


def test_candidates_config_sizes_k_for_every_protocol_and_refuses_mixed_sampling():
    cfg = candidates_config(DelegationConfig(n_agents=4, k_samples=2, max_tokens=16),
                            EscalationConfig(n_anchor=3, max_tokens=16, debate_agents=3), TINY, ("moa", "debate"))
    assert cfg.k == 4 and cfg.models == TINY  # 2 ALIGN agents per model × 2 samples > N = 3
    assert candidates_config(DelegationConfig(max_tokens=16), EscalationConfig(n_anchor=5, max_tokens=16), TINY).k == 5
    with pytest.raises(ValueError, match="different max_tokens"):
        candidates_config(DelegationConfig(max_tokens=256), EscalationConfig(max_tokens=128), TINY)


def test_one_candidate_draw_per_question_and_model_shared_by_every_protocol(tmp_path, monkeypatch):
    f = write_math(tmp_path)
    counter = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_tiny(counter))
    db, out = tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, args(f, db, out, "--limit", "3", "--shared-candidates"))
    assert result.exit_code == 0, result.output
    store = TraceStore(db)
    # exactly one draw (one request of k = 3 samples) per (question, model), in the candidates run only
    draws = list(store.db.query(
        "select run_id, question_id, model, count(distinct request_id) as requests, count(*) as n from model_calls "
        "where node = 'candidates' group by run_id, question_id, model"))
    assert {(d["question_id"], d["model"]) for d in draws} == {(f"arith-{i}", m) for i in (1, 2, 3) for m in TINY}
    assert all(d["run_id"] == "s1:arith:candidates" and d["requests"] == 1 and d["n"] == 3 for d in draws)
    per_node = {r["node"]: r["n"] for r in store.db.query(
        "select node, count(*) as n from model_calls where partner is null and node != 'verify' group by node")}
    assert per_node == {"candidates": 18}  # no protocol drew an independent first answer of its own
    assert store.db.query("select count(*) as n from model_calls where node = 'debate_round'").__next__()["n"] == 9
    # the protocols' first steps point at the shared rows
    align_detail = json.loads(store.db.query(
        "select detail from questions where run_id = 's1:arith:align' and question_id = 'arith-1'").__next__()["detail"])
    assert {p["model"] for p in align_detail["proposals"]} == set(TINY)
    report = json.loads((out / "bench.json").read_text())
    cells = {c["method"]: c for c in report["cells"]}
    # ALIGN and its baselines: everything shared, nothing added
    assert cells["align"]["shared_samples_per_q"] == 6 and cells["align"]["added_calls_per_q"] == 0
    assert cells["self_consistency"]["added_samples_per_q"] == 0
    assert cells["single_agent"]["shared_samples_per_q"] == 1 and cells["single_agent"]["added_calls_per_q"] == 0
    # COMED's anchor: A's first N = 3 samples shared; MoA adds its aggregator, debate its second round
    assert cells["anchor"]["shared_samples_per_q"] == 3 and cells["anchor"]["added_calls_per_q"] == 0
    assert cells["moa"]["shared_calls_per_q"] == 2 and cells["moa"]["added_calls_per_q"] == 1
    assert cells["debate"]["shared_samples_per_q"] == 3 and cells["debate"]["added_calls_per_q"] == 3
    assert cells["moa"]["calls_per_q"] == 3 and cells["debate"]["calls_per_q"] == 5  # totals as before
    # accuracies from the same samples as the first edition's (answers depend on model and sample index)
    assert cells["self_consistency"]["accuracy"] == 1.0 and cells["single_agent"]["accuracy"] == 0.0  # A's sample 0
    [pool] = report["shared_pool"]
    assert (pool["calls_per_q"], pool["samples_per_q"], pool["tokens_per_q"]) == (2, 6, 24)
    sc = {x["model"]: x["accuracy"] for x in report["model_self_consistency"]}
    assert sc == {A: 1.0, B: 0.0}  # A right on samples 1, 2; B only on sample 0
    assert report["settings"]["shared"]["single_model"]["arith"]["on_dev"] is False
    md = (out / "bench.md").read_text()
    for text in ("## Shared and added compute", "| align | arith | 2.00 | 6.00 | 24.0 | **0.00** |",
                 "## Per-model self-consistency (free)", "NOT chosen on dev", "the pool cost 2.00 calls"):
        assert text in md, text
    # resuming redoes nothing: no model call at all
    again = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_tiny(again))
    assert CliRunner().invoke(app, args(f, db, out, "--limit", "3", "--shared-candidates")).exit_code == 0
    assert again == {}


def test_dev_chosen_best_model_is_single_agent_and_comeds_anchor(tmp_path, monkeypatch):
    """A (the first pool model) is always wrong, B always right: with --dev the bench picks B on the
    dev questions, single_agent is B's first sample and COMED's fixed anchor is B; comed_routed runs."""
    f = write_math(tmp_path, n=6)
    pool = lambda path: scripted_tiny(a_right=lambda i, j: False, b_right=lambda i, j: True)  # noqa: E731
    monkeypatch.setattr(bench_cli, "get_pool", pool)
    db, out = tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, args(f, db, out, "--limit", "3", "--dev", "3", "--shared-candidates",
                                          "--embedding", "tfidf", "--protocols", "align,comed"))
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    chosen = report["settings"]["shared"]["single_model"]["arith"]
    assert chosen["model"] == B and chosen["on_dev"] is True and chosen["dev_means"] == {A: 0.0, B: 1.0}
    store = TraceStore(db)
    assert {q["question_id"] for q in store.questions("s1:arith:candidates-dev")} == {"arith-4", "arith-5", "arith-6"}
    cells = {c["method"]: c for c in report["cells"]}
    assert cells["single_agent"]["accuracy"] == 1.0 and cells["single_agent"]["protocol"] == "candidates"
    anchors = {json.loads(q["detail"])["route"]["anchor"] for q in store.questions("s1:arith:comed")}
    assert anchors == {B} and cells["anchor"]["accuracy"] == 1.0
    assert "comed_routed" in cells and cells["comed_routed"]["questions"] == 3
    routed = [json.loads(q["detail"])["route"] for q in store.questions("s1:arith:comed-routed")]
    assert all(r["routed"] and r["anchor"] == B for r in routed)  # the dev router ranks B first
    [cal] = report["calibration"]
    assert f"{B}, the best single model on dev" in cal["source"]
    claim = next(c for c in report["claims"] if "dev-chosen best single model (" in c["claim"])
    assert "chosen on the dev split" in claim["note"]
    # the same model at matched samples: its own majority over its 3 samples in the pool (issue 32, item 6)
    sc = next(c for c in report["claims"] if "dev-chosen best single model's own self-consistency" in c["claim"])
    best = claim["claim"].split("(")[1].split(")")[0]
    assert f"({B}, majority over its 3.0 samples in the shared pool)" in sc["claim"] and f"({best})" in sc["claim"]
    assert sc["value"] == cells[best]["accuracy"] - 1.0 and sc["questions"] == 3 and sc["holds"] == "too few questions"


def test_a_first_edition_bench_id_is_refused_with_shared_candidates_and_resumes_without(tmp_path, monkeypatch):
    f = write_math(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_tiny())
    db, out = tmp_path / "t.db", tmp_path / "b"
    assert CliRunner().invoke(app, args(f, db, out, "--limit", "2", "--protocols", "align",
                                               "--no-shared-candidates")).exit_code == 0
    result = CliRunner().invoke(app, args(f, db, out, "--limit", "3", "--protocols", "align", "--shared-candidates"))
    assert result.exit_code == 2
    assert "was run before shared candidates" in result.output and "--no-shared-candidates" in result.output
    again = CliRunner().invoke(app, args(f, db, out, "--limit", "3", "--protocols", "align", "--no-shared-candidates"))
    assert again.exit_code == 0, again.output
    assert len(TraceStore(db).finished_questions("s1:arith:align")) == 3


@pytest.mark.slow
def test_shared_candidates_on_the_real_tiny_pool(tmp_path):
    """`agora bench --pool tiny --limit 3 --shared-candidates`: one draw per (question, model)."""
    db, out = tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, ["bench", "--tasks", "sample", "--limit", "3", "--pool", "tiny", "--db", str(db),
                                      "--out", str(out), "--run-id", "e2e", "--shared-candidates", "--agents", "2",
                                      "--samples", "2", "--max-tokens", "24", "--probe-max-tokens", "8",
                                      "--debate-agents", "2", "--protocols", "align,comed,moa"])
    assert result.exit_code == 0, result.output
    store = TraceStore(db)
    draws = list(store.db.query("select question_id, model, count(distinct request_id) as requests from model_calls "
                                "where node = 'candidates' group by question_id, model"))
    assert len(draws) == 3 * 2 and all(d["requests"] == 1 for d in draws)
    assert not list(store.db.query("select 1 from model_calls where node in ('agent_sample', 'anchor', 'moa_propose')"))
    assert "## Shared and added compute" in (out / "bench.md").read_text()


def test_the_default_bench_on_a_users_chat_openai_that_ignores_n_and_sometimes_replies_empty(tmp_path, monkeypatch):
    """`agora bench` (shared candidates, the default) on two ChatOpenAI members of a user's own, on the
    loopback stub: one ignores n, the other answers the first request of every prompt with empty
    content. Each (question, model) still gets its k shared samples, every one non-empty and seeded."""
    from langchain_openai import ChatOpenAI
    from openai_stub import StubServer, chat_reply

    seen: dict[str, int] = {}

    def empty_first(path, body):
        key = body["messages"][-1]["content"]
        seen[key] = seen.get(key, 0) + 1
        return 200, chat_reply(body, texts=[""] if seen[key] == 1 else ["The answer is 2."])

    with StubServer(lambda p, b: (200, chat_reply(b, choices=1, texts=["The answer is 2."]))) as one, \
            StubServer(empty_first) as empty:
        user = {"ignores-n": ChatOpenAI(base_url=one.base_url, api_key="k", model="m", max_retries=0, timeout=5),
                "empty-first": ChatOpenAI(base_url=empty.base_url, api_key="k", model="m", max_retries=0, timeout=5)}
        monkeypatch.setattr(bench_cli, "get_pool", lambda path: ModelPool.from_chat_models(user))
        db, out = tmp_path / "t.db", tmp_path / "b"
        result = CliRunner().invoke(app, ["bench", "--tasks", str(write_math(tmp_path, n=2)), "--db", str(db),
                                          "--out", str(out), "--run-id", "u", "--protocols", "align",
                                          "--max-tokens", "16"])
        ignored = [(b["messages"][-1]["content"], b["seed"]) for b in one.bodies()]
    assert result.exit_code == 0, result.output
    store = TraceStore(db)
    rows = list(store.db.query("select question_id, model, completion from model_calls where "
                               "run_id = 'u:arith:candidates' and error is null"))
    per = {}
    for r in rows:
        per.setdefault((r["question_id"], r["model"]), []).append(r)
    assert len(per) == 2 * 2 and all(len(v) == 3 for v in per.values())  # k = 3 shared samples each
    assert all(r["completion"] for r in rows)  # an empty reply is retried, never a candidate
    by_prompt: dict[str, list[int]] = {}
    for prompt, seed in ignored:
        by_prompt.setdefault(prompt, []).append(seed)
    assert len(by_prompt) == 2 and all(s == [s[0], s[0] + 1, s[0] + 2] for s in by_prompt.values())  # seed + i
    report = json.loads((out / "bench.json").read_text())
    assert {c["method"] for c in report["cells"]} >= {"align", "self_consistency", "single_agent"}


def test_claim_three_holds_both_comeds_against_every_dense_baseline_the_bench_ran(tmp_path, monkeypatch):
    """Issue 32, item 6: COMED with its dev-best anchor and with its routed anchor, each against MoA,
    debate and the council (the baselines the bench recorded, read from its settings, not a fixed
    list), each with its own rescues and harms; bench.md shows the routed COMED's decisions too."""
    f = write_math(tmp_path, n=6)
    pool = lambda path: scripted_tiny(a_right=lambda i, j: False, b_right=lambda i, j: True)  # noqa: E731
    monkeypatch.setattr(bench_cli, "get_pool", pool)
    db, out = tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, args(f, db, out, "--limit", "3", "--dev", "3", "--shared-candidates",
                                          "--embedding", "tfidf", "--protocols", "comed,moa,debate,council"))
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    assert report["settings"]["comed"]["baselines"] == ["moa", "debate", "council"]
    third = [c["claim"].split(" in accuracy")[0] for c in report["claims"] if " ≥ " in c["claim"]]
    assert third == ["COMED ≥ moa", "COMED ≥ debate", "COMED ≥ council", "COMED (routed anchor) ≥ moa",
                     "COMED (routed anchor) ≥ debate", "COMED (routed anchor) ≥ council"]
    [routed] = report["comed_routed"]
    assert (routed["task"], routed["questions"], routed["rescues"], routed["harms"]) == ("arith", 3, 0, 0)
    assert routed["anchor_correct"] == routed["comed_correct"] == 3  # B, the routed anchor, is always right
    claims = {c["claim"].split(" in accuracy")[0]: c for c in report["claims"]}
    assert claims["COMED (routed anchor) ≥ council"]["questions"] == 3
    assert claims["COMED (routed anchor) ≥ council"]["holds"] == "too few questions"
    assert "## COMED with the routed anchor (`comed_routed`): decisions, rescues and harms" in (out / "bench.md").read_text()
