"""GRPO rewards on known completions (hand-computed values), with scripted judges."""

import json
import logging

import pytest

from agora.agents.judge import JudgeConfig
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.training.rewards import (
    PeerJudgeReward,
    completion_text,
    constant_groups,
    correctness_reward,
    group_bounds,
    minmax_per_group,
    stored_judge_reward,
)

P1 = [{"role": "user", "content": "2+3?"}]
P2 = [{"role": "user", "content": "Pick B."}]


def conv(text):
    return [{"role": "assistant", "content": text}]


def test_completion_text_and_groups():
    assert completion_text(conv("hi")) == "hi" and completion_text("plain") == "plain"
    assert group_bounds(["a", "a", "b", "b", "b", "a"]) == [(0, 2), (2, 5), (5, 6)]
    assert constant_groups([1.0, 1.0, 0.0, 1.0, None, None], [(0, 2), (2, 4), (4, 6)]) == [True, False, True]


def test_minmax_per_group_hand_computed():
    assert minmax_per_group([2.0, 6.0, 4.0, 5.0, 5.0], [(0, 3), (3, 5)]) == [0.0, 1.0, 0.5, 0.0, 0.0]
    assert minmax_per_group([7.0, 9.5], [(0, 2)]) == [0.0, 1.0]


def test_correctness_reward_on_known_completions(caplog):
    prompts = [P1, P1, P2, P2, P1]
    completions = [conv("2 + 3 = 5. The answer is 5."), conv("The answer is 6."), conv("The answer is B."),
                   conv("I think (B)."), conv("no idea")]
    metrics = {}
    with caplog.at_level(logging.INFO, logger="agora.training.rewards"):
        rewards = correctness_reward(prompts, completions, gold=["5", "5", "B", "B", None],
                                     kind=["math", "math", "mc", "mc", "math"],
                                     log_metric=lambda k, v: metrics.__setitem__(k, v))
    assert rewards == [1.0, 0.0, 1.0, 1.0, None]
    # groups: P1 (varies), P2 (both right: constant), P1 alone (no defined reward: constant)
    assert metrics == {"correctness/constant_groups": pytest.approx(2 / 3)}
    assert "2 of 3 groups have a constant reward" in caplog.text


def test_stored_judge_reward_matches_answers_or_texts():
    stored = json.dumps([{"text": "It is 5.", "model": "a", "score": 8.0},
                         {"text": "5, surely", "model": "b", "score": 6.0},
                         {"text": "The answer is 7.", "model": "c", "score": 2.0}])
    rewards = stored_judge_reward([P1] * 3, [conv("The answer is 5."), conv("The answer is 9."), conv("7")],
                                  judge_scores=[stored] * 3, kind=["math"] * 3)
    assert rewards == [7.0, None, 2.0]
    open_scores = json.dumps([{"text": "Paris.", "model": "a", "score": 9.0}])
    assert stored_judge_reward([P2] * 2, [conv(" Paris. "), conv("Lyon.")], judge_scores=[open_scores] * 2,
                               kind=["open", "open"]) == [9.0, None]


def _judge(scores: dict[str, int]):
    """A scripted judge replying with the score assigned to the judged response text."""
    def respond(messages, _i):
        shown = messages[-1]["content"].split("Response to be evaluated: ")[1].split("\n\n")[0]
        return json.dumps({"score": scores[shown]}) if shown in scores else "no idea"
    return ScriptedChatModel(respond=respond)


def test_peer_judge_reward_reputation_weighted_minmax_per_group(caplog):
    pool = ModelPool.from_chat_models({
        "policy": ScriptedChatModel(responses=[]),
        "a": _judge({"x": 8, "y": 2, "z": 6, "w": 6}),
        "b": _judge({"x": 4, "y": 6, "z": 6, "w": 6}),
    })
    reward = PeerJudgeReward(pool, "policy", ratings={"a": 300.0, "b": 100.0},
                             config=JudgeConfig(shots=0), context={"run_id": "r1"})
    assert reward.score("q1", "x") == pytest.approx((300 * 8 + 100 * 4) / 400)  # 7.0
    assert reward.score("q1", "y") == pytest.approx((300 * 2 + 100 * 6) / 400)  # 3.0
    # unparsable reply → judge fallback 5.0: (300 * 5 + 100 * 5) / 400 = 5.0
    assert reward.score("q1", "v") == pytest.approx(5.0)
    reward.records.clear()
    metrics = {}
    with caplog.at_level(logging.INFO, logger="agora.training.rewards"):
        out = reward(prompts=[P1, P1, P1, P2, P2], completions=[conv("x"), conv("y"), conv("v"), conv("z"), conv("w")],
                     instruction=["q1", "q1", "q1", "q2", "q2"], log_metric=lambda k, v: metrics.__setitem__(k, v))
    # group 1: 7, 3, 5 → 1, 0, .5; group 2: 6, 6 → constant → 0, 0
    assert out == pytest.approx([1.0, 0.0, 0.5, 0.0, 0.0])
    assert metrics == {"peer_judge/constant_groups": 0.5}
    assert "1 of 2 groups" in caplog.text
    assert len(reward.records) == 10 and {r["model"] for r in reward.records} == {"a", "b"}
    assert {(r["role"], r["node"], r["run_id"]) for r in reward.records} == {("judge", "grpo_reward", "r1")}


def test_peer_judge_reward_validation():
    pool = ModelPool.from_chat_models({"p": ScriptedChatModel(responses=[]), "a": ScriptedChatModel(responses=[])})
    assert [j.name for j in PeerJudgeReward(pool, "p").judges] == ["a"]
    with pytest.raises(ValueError, match="cannot judge"):
        PeerJudgeReward(pool, "p", judges=["a", "p"])
    with pytest.raises(ValueError, match="presentation"):
        PeerJudgeReward(pool, "p", config=JudgeConfig(presentation="pair"))
    with pytest.raises(ValueError, match="at least one judge"):
        PeerJudgeReward(ModelPool.from_chat_models({"p": ScriptedChatModel(responses=[])}), "p")
    with pytest.raises(KeyError, match="zz"):
        PeerJudgeReward(pool, "p", judges=["zz"])
