"""The LLM council (agents/council.py, graphs/council.py) on a scripted pool whose replies read the
prompts: anonymised, self-excluding ballots shuffled per reviewer under a seed, the hand-computed
Borda aggregate, the chair's prompt and answer, hand-counted costs, shared candidates, and the
council in ``agora bench``'s methods and as a COMED baseline through the registry alone."""

import re

import pytest

from agora.agents.council import (
    CouncilConfig,
    aggregate,
    ballot_order,
    ballot_points,
    check_pool,
    label,
    parse_ranking,
)
from agora.agents.escalation import EscalationConfig, EscalationThresholds
from agora.graphs.question import question_seed
from agora.graphs.council import CouncilContext, CouncilOutput, build_council_graph
from agora.graphs.escalation import EscalationContext, build_escalation_graph
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.runs.bench_plan import BenchConfig, protocol_of, resolve_methods, sharing

Q = {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?", "question_id": "q1",
     "kind": "math", "gold": "7"}
TEXT = {"alpha": "Three plus four is seven. The answer is 7.",
        "beta": "Three times four... The answer is 8.",
        "gamma": "Count them: 7 apples. The answer is 7."}
#: Each reviewer's preference among the others' answers, best first (by whose answer the text is).
PREFERS = {"alpha": ["gamma", "beta"], "beta": ["alpha", "gamma"], "gamma": ["alpha", "beta"]}
OWNER = {text: model for model, text in TEXT.items()}
SHOWN = re.compile(r'(Response [A-Z]+):\n"(.*?)"', re.S)


def scripted_council():
    """alpha, beta, gamma: answer with TEXT; as reviewers, rank the shown answers by PREFERS (reading
    which text sits behind which label); as chair, answer 9. Every prompt is kept, by model."""
    prompts: dict[str, list[dict]] = {m: [] for m in TEXT}

    def make(model):
        def respond(messages, i):
            last = messages[-1]["content"]
            prompts[model].append({"messages": messages, "last": last})
            if "Answers from other council members" in last:
                labels = {OWNER[text]: lab for lab, text in SHOWN.findall(last)}
                ranked = [labels[m] for m in PREFERS[model] if m in labels]
                return "Checked them.\nFINAL RANKING:\n" + "\n".join(f"{k + 1}. {lab}" for k, lab in enumerate(ranked))
            if "As the chair" in last:
                return "Weighing the council: The answer is 9."
            return TEXT[model]
        return respond

    models = {m: ScriptedChatModel(respond=make(m)) for m in TEXT}
    return ModelPool.from_chat_models(models, max_retries=0), prompts


def run(config=None, inp=Q):
    pool, prompts = scripted_council()
    out = build_council_graph().compile().invoke(dict(inp), context=CouncilContext(pool, config or CouncilConfig()),
                                                 output_keys=[*CouncilOutput.__annotations__, "calls"])
    return out, prompts


def reviews_of(prompts, model):
    return [p for p in prompts[model] if "Answers from other council members" in p["last"]]


def test_ballots_are_anonymised_and_exclude_the_reviewers_own_answer():
    out, prompts = run()
    for model in TEXT:
        [review] = reviews_of(prompts, model)
        everything = "\n".join(m["content"] for m in review["messages"])
        assert not any(name in everything for name in TEXT)  # no model name anywhere in a reviewer's prompt
        assert TEXT[model] not in everything  # its own answer is never shown to it
        shown = [OWNER[text] for _lab, text in SHOWN.findall(review["last"])]
        assert sorted(shown) == sorted(m for m in TEXT if m != model)
        assert [lab for lab, _t in SHOWN.findall(review["last"])] == ["Response A", "Response B"]
    reviews = {r["model"]: r for r in out["reviews"]}
    assert all(reviews[m]["reviewer"] not in reviews[m]["shown"] for m in TEXT)
    assert all(c["partner"] and m not in c["partner"].split(",") for c in out["calls"] if c["node"] == "council_review"
               for m in [c["model"]])


def test_each_reviewer_has_its_own_seeded_permutation():
    members = list(range(6))
    orders = {r: ballot_order(r, members, 0, "q1") for r in members}
    assert all(r not in o and sorted(o) == [m for m in members if m != r] for r, o in orders.items())
    assert orders == {r: ballot_order(r, members, 0, "q1") for r in members}  # deterministic under the seed
    assert len({tuple(o) for o in orders.values()}) == 6  # per reviewer (6 distinct 5-permutations here)
    assert any(o != [m for m in members if m != r] for r, o in orders.items())  # shuffled, not member order
    assert ballot_order(0, members, 1, "q1") != orders[0] or ballot_order(0, members, 2, "q1") != orders[0]
    # the same permutation reaches the reviewer's prompt, run after run
    out1, _ = run()
    out2, _ = run()
    assert [r["shown"] for r in out1["reviews"]] == [r["shown"] for r in out2["reviews"]]
    assert sorted(out1["reviews"], key=lambda r: r["reviewer"])[0]["shown"] == ballot_order(0, [0, 1, 2], 0, "q1")


def test_aggregate_ranking_is_the_hand_computed_normalised_borda():
    out, _ = run()
    # alpha(0) is ranked first by beta and gamma: Borda 1, rank 1; gamma(2): first for alpha, second for
    # beta: 0.5, 1.5; beta(1): last for alpha and gamma: 0, 2
    assert [(s["model"], s["borda"], s["mean_rank"], s["ballots"]) for s in out["ranking"]] == [
        ("alpha", 1.0, 1.0, 2), ("gamma", 0.5, 1.5, 2), ("beta", 0.0, 2.0, 2)]
    assert {r["model"]: r["ranking"] for r in out["reviews"]} == {"alpha": [2, 1], "beta": [0, 2], "gamma": [0, 1]}
    # a ballot that leaves answers out ties them at the mean of the remaining ranks
    assert ballot_points([7, 8, 9], [2]) == {9: (1.0, 1.0), 7: (2.5, 0.25), 8: (2.5, 0.25)}
    assert ballot_points([4], []) == {4: (1.0, 1.0)}
    table = aggregate([([1, 2], [1]), ([0, 2], []), ([0, 1], [0, 1])], [0, 1, 2])
    # 0: 0.5 (tie), 1 → 0.75; 1: 0 and 0 → 0.0; 2: 1 and 0.5 → 0.75, mean rank 1.25 < 0's 1.25? (0: 1.5, 1 → 1.25)
    assert [(s.member, s.borda, s.mean_rank) for s in table] == [(0, 0.75, 1.25), (2, 0.75, 1.25), (1, 0.0, 2.0)]


def test_parse_ranking_reads_the_final_ranking_section():
    assert parse_ranking("Response A is wrong.\nFINAL RANKING:\n1. Response C\n2. Response A\n3. Response B", 3) == [2, 0, 1]
    assert parse_ranking("final ranking: Response B, Response B, Response Q, Response A", 2) == [1, 0]
    assert parse_ranking("I like Response B best, then Response A", 2) == [1, 0]  # no header: the whole text
    assert parse_ranking("no idea", 2) == [] and parse_ranking(None, 2) == []
    assert [label(i) for i in (0, 1, 25, 26)] == ["Response A", "Response B", "Response Z", "Response AA"]


def test_the_chair_sees_every_answer_and_the_ranking_and_its_answer_is_the_method():
    out, prompts = run()
    [chair] = [p for p in prompts["alpha"] if "As the chair" in p["last"]]  # the first member chairs by default
    assert all(TEXT[m] in chair["last"] for m in TEXT)
    assert "Answer 1 (1.00), Answer 3 (0.50), Answer 2 (0.00)" in chair["last"]
    assert out["chair"] == "alpha" and out["answer"] == "9"
    m = out["methods"]
    assert (m["council"]["answer"], m["council"]["correct"]) == ("9", False)
    assert (m["council_top"]["answer"], m["council_top"]["correct"]) == ("7", True)  # alpha's, ranked first
    assert (m["council_vote"]["answer"], m["council_vote"]["correct"]) == ("7", True)  # 7, 8, 7
    # hand-counted: 3 first answers, 3 ballots, 1 chair
    assert (m["council"]["calls"], m["council_top"]["calls"], m["council_vote"]["calls"]) == (7, 6, 3)
    assert m["council_vote"]["completion_tokens"] == sum(len(t.split()) for t in TEXT.values())
    nodes = [c["node"] for c in out["calls"]]
    assert sorted(nodes) == sorted(["council_answer"] * 3 + ["council_review"] * 3 + ["council_chair"])
    other, _ = run(CouncilConfig(chair="gamma"))
    assert other["chair"] == "gamma"


def test_config_and_pool_checks_name_the_field():
    with pytest.raises(ValueError, match="members"):
        CouncilConfig(members=("a",))
    with pytest.raises(ValueError, match="review_max_tokens"):
        CouncilConfig(review_max_tokens=0)
    with pytest.raises(ValueError, match="CouncilConfig.chair: 'z'"):
        check_pool(CouncilConfig(chair="z"), ["a", "b"])
    with pytest.raises(ValueError, match="at least two members"):
        check_pool(CouncilConfig(), ["a"])


def test_first_answers_come_from_the_shared_candidate_pool_when_given():
    shared = {m: [{"model": m, "text": TEXT[m], "call_id": f"c-{m}", "sample_index": 0, "seed": 1, "prompt_tokens": 5,
                   "completion_tokens": 4, "latency_s": 0.5, "finish_reason": "stop"}] for m in TEXT}
    out, prompts = run(inp={**Q, "shared_candidates": shared})
    assert not any(c["node"] == "council_answer" for c in out["calls"])  # no new draw
    assert all(not [p for p in prompts[m] if p["last"] == Q["question"]] for m in TEXT)
    vote = out["methods"]["council_vote"]
    assert (vote["calls"], vote["shared_calls"], vote["shared_samples"]) == (3, 3, 3)  # counted in full, all shared
    council = out["methods"]["council"]
    assert (council["calls"], council["shared_calls"]) == (7, 3)  # 3 ballots and the chair added


def test_the_council_is_in_the_bench_and_a_comed_baseline_through_the_registry():
    assert resolve_methods("council") == ("council", "council_top", "council_vote")
    every = list(protocol_of())  # the council after MoA and debate (dense order 30), before SLM-MUX (40)
    assert every[every.index("debate") + 1:every.index("debate") + 4] == ["council", "council_top", "council_vote"]
    assert set(protocol_of()[m] for m in ("council", "council_top", "council_vote")) == {"comed"}
    assert sharing()["council_vote"].startswith("the council's first answers")
    assert BenchConfig().baselines == ("moa", "debate", "council", "slm-mux")
    assert BenchConfig(methods=("comed", "council_top")).baselines == ("council",)
    pool, _ = scripted_council()
    cfg = EscalationConfig(thresholds=EscalationThresholds(0.5, 0.34), anchor="beta", baselines=("council",))
    graph = build_escalation_graph().compile()
    assert "council" in graph.get_graph().nodes
    out = graph.invoke(dict(Q), context=EscalationContext(pool, cfg), output_keys=["methods", "calls", "costs"])
    assert [m for m in out["methods"] if m.startswith("council")] == ["council", "council_top", "council_vote"]
    assert out["methods"]["council"]["answer"] == "9" and out["methods"]["council_top"]["answer"] == "7"
    assert out["methods"]["council"]["calls"] == out["costs"]["council"]["calls"] == 7
    assert [c["model"] for c in out["calls"] if c["node"] == "council_chair"] == ["beta"]  # COMED's anchor chairs


def test_comed_hands_the_shared_pool_to_the_council_and_the_bench_says_so():
    from agora.runs.bench_plan import shared_methods

    shared = {m: [{"model": m, "text": TEXT[m], "call_id": f"c-{m}-{j}", "sample_index": j, "seed": 1,
                   "prompt_tokens": 5, "completion_tokens": 4, "latency_s": 0.5, "finish_reason": "stop"}
                  for j in range(3)] for m in TEXT}
    pool, _ = scripted_council()
    cfg = EscalationConfig(thresholds=EscalationThresholds(0.5, 0.34), anchor="alpha", baselines=("council",))
    out = build_escalation_graph().compile().invoke({**Q, "shared_candidates": shared},
                                                    context=EscalationContext(pool, cfg), output_keys=["methods", "calls"])
    assert not any(c["node"] in ("anchor", "council_answer") for c in out["calls"])  # both took the pool's samples
    assert (out["methods"]["council_vote"]["shared_calls"], out["methods"]["council"]["shared_calls"]) == (3, 3)
    _methods, texts = shared_methods({"council": "comed"}, sharing(), BenchConfig(), routed=False)
    assert texts["council_vote"].startswith("the shared pool") and texts["moa"].startswith("the shared pool")


def test_agora_run_council_and_comeds_baselines_option(tmp_path, monkeypatch):
    import json

    import agora.cli._shared as shared
    from typer.testing import CliRunner

    from agora.cli.comed import _baselines
    from agora.cli.main import app

    monkeypatch.setattr(shared, "get_pool", lambda path: scripted_council()[0])
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question": Q["question"], "answer": "#### 7"}) + "\n")
    out = CliRunner().invoke(app, ["run", "council", "--data", str(data), "--pool", "x", "--db", str(tmp_path / "t.db"),
                                   "--chair", "gamma"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "3 members, chair gamma" in out.output and "council_top" in out.output
    assert _baselines("moa,council") == ("moa", "council") and _baselines("none") == ()
    with pytest.raises(ValueError, match="unknown \\['vote'\\]; choose from moa, debate, council"):
        _baselines("vote")
