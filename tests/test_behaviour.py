"""Cue detectors: tokens, lexicon matching, rates, and the hedging lexicon on hand-written sentences."""

import math

import pytest

from agora.agents.behaviour import (
    CHALLENGE,
    DEFAULT_DETECTORS,
    HEDGING,
    REPAIR,
    CueDetector,
    LexiconDetector,
    count_tokens,
    measure,
    rate_per_100,
    tokens,
)


def test_tokens_are_lowercased_words_with_inner_apostrophes():
    assert tokens("I'm re-checking 3.5, don’t PANIC!") == ["i'm", "re", "checking", "3", "5", "don't", "panic"]
    assert count_tokens("") == 0
    assert count_tokens("  \n ") == 0
    assert count_tokens("The answer is 42.") == 4


def test_rate_per_100_tokens():
    assert rate_per_100(1, 4) == 25.0
    assert rate_per_100(3, 200) == 1.5
    assert math.isnan(rate_per_100(0, 0))


# Hand-written validation sentences for the hedging lexicon: (sentence, hedge cues a reader counts).
HEDGE_SENTENCES = [
    ("The answer is 12.", 0),
    ("I think the answer is 12.", 1),
    ("The answer might be 12, but I'm not sure.", 2),
    ("Perhaps we should add them first; it seems the total is roughly 40.", 3),
    ("It is possible that the second step is off.", 1),            # one phrase, not "possible" twice
    ("Maybe. Possibly. Probably.", 3),
    ("In my opinion the result is likely correct.", 2),
    ("If I'm not mistaken, the train arrives at approximately 5 pm.", 2),
    ("This tends to happen when values are generally small.", 2),
    ("The result could be 7 or could have been 8.", 2),
    ("I could not find any error.", 0),                             # ability, not a hedge
    ("You are right: 3 + 4 = 7.", 0),
    ("I believe she may come, and I suppose that is fine.", 3),
    ("It appears to be correct, as far as I know.", 2),
    ("I don't think that is correct.", 0),                          # a challenge, not a hedge
    ("There's a chance the data is uncertain.", 2),
    ("I THINK so, PERHAPS.", 2),                                    # case does not matter
    ("I’m unsure whether it’s possible.", 2),                       # typographic apostrophes
]


@pytest.mark.parametrize("sentence,expected", HEDGE_SENTENCES)
def test_hedging_lexicon_on_hand_written_sentences(sentence, expected):
    assert HEDGING.count(sentence) == expected, HEDGING.matches(sentence)


def test_longest_match_first_without_overlap():
    assert HEDGING.matches("it is possible that it might be") == ["it is possible", "might"]
    det = LexiconDetector("x", ("a b", "a b c", "b"))
    assert det.matches("a b c b a b") == ["a b c", "b", "a b"]
    assert det.count("A-B-C") == 1.0  # hyphens split tokens the same way in text and phrases


@pytest.mark.parametrize("sentence,expected", [
    ("Wait, actually I made a mistake: it is 9.", 3),
    ("Let me re-check the sum. Sorry, I mean 14.", 3),
    ("The answer is 9.", 0),
    ("On second thought, scratch that.", 2),
])
def test_repair_lexicon_exploratory(sentence, expected):
    assert REPAIR.exploratory and REPAIR.count(sentence) == expected, REPAIR.matches(sentence)


@pytest.mark.parametrize("sentence,expected", [
    ("I disagree: that's wrong, the total should be 12.", 3),
    ("However, your second step is incorrect.", 2),
    ("I agree with you, the answer is 12.", 0),
    ("I don't think 5 is right; it is not correct.", 2),
])
def test_challenge_lexicon_exploratory(sentence, expected):
    assert CHALLENGE.exploratory and CHALLENGE.count(sentence) == expected, CHALLENGE.matches(sentence)


def test_lexicons_share_no_phrase():
    seen = {}
    for det in (HEDGING, REPAIR, CHALLENGE):
        for phrase in det.phrases:
            key = tuple(tokens(phrase))
            assert key not in seen, f"{phrase!r} is in {seen.get(key)} and {det.name}"
            seen[key] = det.name
    assert not HEDGING.exploratory


def test_measure_counts_and_rates_per_detector():
    cues = measure("Actually, I think that is wrong. However, it might work.")
    # tokens: actually i think that is wrong however it might work = 10
    assert cues.tokens == 10
    # hedging: i think, might; repair: actually; challenge: that is wrong, however
    assert cues.counts == {"hedging": 2.0, "repair": 1.0, "challenge": 2.0}
    assert cues.rates == {"hedging": 20.0, "repair": 10.0, "challenge": 20.0}
    empty = measure("")
    assert empty.tokens == 0 and all(math.isnan(v) for v in empty.rates.values())


def test_a_classifier_can_replace_a_lexicon():
    class HalfPerSentence:
        name = "hedging"
        exploratory = True

        def count(self, text):
            return 0.5 * text.count(".")

    clf = HalfPerSentence()
    assert isinstance(clf, CueDetector)
    cues = measure("One two. Three four.", [clf, REPAIR])
    assert cues.counts == {"hedging": 1.0, "repair": 0.0}
    assert cues.rates["hedging"] == 25.0


def test_bad_detectors_are_rejected():
    with pytest.raises(ValueError, match="unique"):
        measure("x", [HEDGING, HEDGING])
    with pytest.raises(ValueError, match="empty"):
        LexiconDetector("x", ())
    with pytest.raises(ValueError, match="no word tokens"):
        LexiconDetector("x", ("...",))
    assert [d.name for d in DEFAULT_DETECTORS] == ["hedging", "repair", "challenge"]
