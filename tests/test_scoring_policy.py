"""The scoring policy (docs/scoring.md, issue 15): every rule, and every case the issue found scored
leniently, with the value each one must score."""

import pytest

from agora.tasks import Extraction, answer_key, extract_answer, find_answer, is_correct

# ----------------------------------------------------------------------------- the issue's cases


@pytest.mark.parametrize(
    "output, kind, n_choices, gold, answer, correct",
    [
        # several values
        ("\\boxed{3, 20}", "math", 4, "20", "3, 20", False),
        ("25 or 20", "math", 4, "25", "25, 20", False),
        # equations: the value is the final right-hand side
        ("\\boxed{20 \\text{ chickens} - 80 \\text{ cups} = -60 \\text{ cups}}", "math", 4, "20", "-60", False),
        ("\\boxed{x = 5}", "math", 4, "5", "5", True),
        # unfinished work
        ("… Katy used 120 * 7 / (7 + 13) = <<120*7/(7+1", "math", 4, "42", None, False),
        # tolerance: integer golds compare exactly
        ("The answer is 123460.", "math", 4, "123456", "123460", False),
        # negation
        ("The answer is not 25.", "math", 4, "25", None, False),
        # self-correction
        ("The answer is B. Actually no, the answer is D.", "mc", 4, "D", "D", True),
        # multiple choice: letters only as letters
        ("The answer is a bit unclear; I think C.", "mc", 4, "C", "C", True),
        ("A or C", "mc", 4, "C", "A, C", False),
        ("Not A.", "mc", 4, "A", None, False),
        ("Answer: I believe B", "mc", 10, "B", "B", True),
    ],
)
def test_issue_cases(output, kind, n_choices, gold, answer, correct):
    assert extract_answer(output, kind, n_choices) == answer
    assert is_correct(extract_answer(output, kind, n_choices), gold, kind) is correct


def test_issue_cases_say_why():
    assert find_answer("… = <<120*7/(7+1").reason == "unfinished"
    assert find_answer("The answer is not 25.") == Extraction(None, "marker", "negated", span="not 25")
    assert find_answer("Not A.", "mc").reason == "negated"
    assert find_answer("\\boxed{3, 20}").several
    assert find_answer("A or C", "mc").several


# ----------------------------------------------------------------------------- which statement is final


@pytest.mark.parametrize(
    "output, answer, how",
    [
        ("So 3 + 4 = 7. The answer is 7.", "7", "marker"),
        ("Final Answer: The final answer is $\\boxed{\\frac{1}{2}}$. I hope it is correct.", "0.5", "marker"),
        ("We get $x = 2$, hence \\boxed{2}.", "2", "boxed"),
        ("9 * 2 = <<9*2=18>>18 dollars.\n#### 18", "18", "####"),
        ("She sells 9 eggs at $2 each: 9 * $2 = $18 every day.", "18", "fallback"),
        # the last explicit statement wins: a later answer corrects an earlier one
        ("The answer is 5. Hmm, wait, I added wrong. The answer is 6.", "6", "marker"),
        ("\\boxed{5}. Actually no, the answer is 6.", "6", "marker"),
        ("The answer is 5. Let me redo it: 2 + 4 = 6, so \\boxed{6}", "6", "boxed"),
        # a marker that names no value is not a statement
        ("The answer is the sum of 3 and 5, which is 8.", "8", "fallback"),
        # the fallback skips ordinals, labels and clock minutes
        ("She has 60 shells by her 10th birthday.", "60", "fallback"),
        ("So 16 people think horse #12 will win.", "16", "fallback"),
        ("She can start at 2:00 pm.", "2", "fallback"),
    ],
)
def test_final_statement(output, answer, how):
    found = find_answer(output)
    assert (found.answer, found.how) == (answer, how)


def test_multiple_choice_precedence_and_fallback():
    assert find_answer("\\boxed{C}", "mc") == Extraction("C", "boxed", span="C")
    assert find_answer("#### B", "mc").how == "####"
    assert find_answer("D. Mitochondria", "mc") == Extraction("D", "fallback", span="D")
    assert find_answer("The answer is B, not D.", "mc").answer == "B"
    assert find_answer("The correct option is (b).", "mc").answer == "B"
    assert find_answer("Answer: I", "mc", 10).answer == "I"  # "I" alone is the letter
    assert find_answer("The answer is B because A is too small.", "mc").answer == "B"
    assert find_answer("The answer is A, B, or C.", "mc").answer == "A, B, C"
    assert find_answer("Both A and C are correct.", "mc").answer == "A, C"
    assert find_answer("The answer is neither A nor B; it is C.", "mc").answer == "C"
    assert find_answer("The answer is not A or B, but C.", "mc").answer == "C"  # the negation covers the list
    assert find_answer("Not A or B.", "mc").reason == "negated"


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    "output, gold, answer, correct",
    [
        ("The answer is 5 to 7 apples.", "5", "5, 7", False),
        ("It is between 5 and 7.", "5", "5, 7", False),
        ("So it takes 5-7 hours.", "5", "5, 7", False),
        ("The answer is -5 to -3.", "-5", "-5, -3", False),
        ("The answer is 10 - 3.", "7", "7", True),  # with spaces, a hyphen is a subtraction
        ("The answer is 5 apples and 3 oranges.", "5", "5, 3", False),
        ("\\boxed{3 \\pm 2}", "5", "3, 2", False),
        ("The answer is either $15.50 or $15.50.", "15.5", "15.5", True),  # one value named twice
        ("\\boxed{3, 5, 7}", "3, 5, 7", "3, 5, 7", True),  # a list against a list gold
        ("\\boxed{x = 2 \\text{ or } x = 3}", "3, 2", "2, 3", True),  # in any order
        ("\\boxed{(3, 4]}", "(3,4]", "(3, 4]", True),  # an interval is one value
        ("\\boxed{y = 2x + 3}", "y = 2x + 3", "2x + 3", True),
        ("\\boxed{5x - 7y + 11z + 4 = 0}", "5x - 7y + 11z + 4 = 0", None, True),  # a relation stays whole
        ("The answer is 3 x 60 = 180", "180", "180", True),
        ("The answer is 25%.", "25", "25", True),
        ("The answer is $57.00", "57", "57", True),
        ("\\boxed{10,\\!080}", "10080", "10080", True),
        ("The answer is -\\frac{\\pi}{6}.", "-\\frac{\\pi}{6}", None, True),
        ("He has -7 degrees left.", "-7", "-7", True),
    ],
)
def test_values(output, gold, answer, correct):
    found = extract_answer(output)
    if answer is not None:
        assert found == answer
    assert is_correct(found, gold) is correct


def test_numbers_compare_exactly_for_integer_golds_and_with_tolerance_otherwise():
    assert not is_correct("123460", "123456")
    assert not is_correct("12.0001", "12")
    assert is_correct("12.0", "12")
    assert is_correct("3.3333", "3.3333333333333335")  # GSM-Hard float target: REL_TOL
    assert not is_correct("3.34", "3.3333333333333335")
    assert is_correct("0.5", "\\frac{1}{2}")


# ----------------------------------------------------------------------------- no answer


@pytest.mark.parametrize(
    "output, reason",
    [
        ("", "empty"),
        ("The answer is not 25.", "negated"),
        ("The answer isn't 25.", "negated"),
        ("It cannot be 25.", "negated"),
        ("The answer is 25, but I'm not sure.", "refusal"),
        ("I cannot determine the answer.", "refusal"),
        ("#### No valid solution.", "refusal"),
        ("It leaves 4 - 16 = -12 quarts, which is not possible. So it is not possible to determine the amount.",
         "refusal"),
        ("The house is worth 80,000 + 50,000 = $130,00", "unfinished"),
        ("The total is \\boxed{12 +", "unfinished"),
        ("So the total is 5 + 3 =", "unfinished"),
        ("Step 1: 5 + 3 = 8. Step 2:", "unfinished"),
        ("\\boxed{25", "unfinished"),
        ("#### 130,00", "unfinished"),
    ],
)
def test_no_answer(output, reason):
    found = find_answer(output)
    assert found.answer is None
    assert found.reason == reason
    assert not is_correct(found.answer, "25")


def test_negated_value_followed_by_its_correction_is_the_correction():
    assert extract_answer("The answer is not 25, it is 30.") == "30"


def test_a_finished_statement_before_a_cut_off_continuation_stands():
    assert extract_answer("The answer is 42.\n\nQuestion: Katy used <<120*7/(7+1") == "42"


def test_not_a_negation_of_the_value():
    assert extract_answer("So the length of the sticks that are not used is 16 millimeters.") == "16"


def test_several_values_group_as_one_vote():
    assert answer_key("25, 20") == "25, 20"
    assert answer_key(extract_answer("25 or 20")) == answer_key(extract_answer("The answer is 25 or 20.")) == "25, 20"


def test_grpo_correctness_reward_applies_the_same_policy():
    from agora.training.rewards import correctness_reward

    completions = ["The answer is 20.", "\\boxed{3, 20}", "The answer is not 20.", "So 120 * 7 / (7 + 1",
                   "The answer is B. Actually no, the answer is C.", "A or C"]
    rewards = correctness_reward(prompts=["p"] * 6, completions=completions, gold=["20"] * 4 + ["C"] * 2,
                                 kind=["math"] * 4 + ["mc"] * 2)
    assert rewards == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]


# ----------------------------------------------------------------------------- the QA trial's hedges


@pytest.mark.parametrize(
    "output, kind, gold, answer, correct",
    [
        # "or maybe / possibly / perhaps / else" in the final statement: several values
        ("The answer is 12 or maybe 10", "math", "12", "12, 10", False),
        ("The answer is 12 or possibly 10", "math", "12", "12, 10", False),
        ("The answer is 12 or perhaps 10", "math", "12", "12, 10", False),
        ("The answer is 12 or else 10", "math", "12", "12, 10", False),
        ("The answer is 12, or possibly 10.", "math", "12", "12, 10", False),
        ("The answer is 12 (maybe 10).", "math", "12", "12, 10", False),
        ("The answer is 12 (or 13 if we count Bob).", "math", "12", "12, 13", False),
        ("The answer is B, or maybe C.", "mc", "B", "B, C", False),
        ("The answer is B (or C)", "mc", "B", "B, C", False),
        ("The answer is B (possibly C).", "mc", "B", "B, C", False),
        # \pm / ± outside a box: several values, as \boxed{3 \pm 1} is
        ("The answer is $3 \\pm 1$.", "math", "3", "3, 1", False),
        ("The answer is 3 \\pm 1", "math", "3", "3, 1", False),
        ("The answer is 3 ± 1", "math", "3", "3, 1", False),
        ("\\boxed{3 \\pm 1}", "math", "3", "3, 1", False),
        # doubt or a retraction in the sentence after the final statement
        ("The answer is 12. But I'm not sure.", "math", "12", None, False),
        ("The answer is 12 but I'm not sure.", "math", "12", None, False),
        ("The answer is B? I am not sure.", "mc", "B", None, False),
        ("The answer is 12. Just kidding, it is not 12.", "math", "12", None, False),
        ("The answer is A. Just kidding, not A.", "mc", "A", None, False),
        ("The answer is 12. Just kidding, it's 13.", "math", "13", "13", True),  # the retraction's own value
        ("The answer is \\boxed{12}. Alternatively, it could be 13.", "math", "12", "12, 13", False),
        ("The answer is B. Or maybe C.", "mc", "B", "B, C", False),
        # two bare values in one statement
        ("#### 12 13", "math", "12", "12, 13", False),
        ("#### 12 13", "math", "13", "12, 13", False),
        ("The answer is 12 13", "math", "13", "12, 13", False),
        # bounds, letter ranges, scientific notation, clock times
        ("The answer is at least 12.", "math", "12", None, False),
        ("The answer is no more than 12.", "math", "12", None, False),
        ("The answer is 12 or more.", "math", "12", None, False),
        ("The answer is A-C", "mc", "B", "A, B, C", False),
        ("The answer is A through C.", "mc", "A", "A, B, C", False),
        ("The answer is 1e1", "math", "10", "10", True),
        ("The answer is 2.5e-3.", "math", "0.0025", "0.0025", True),
        ("The answer is 12:30", "math", "12", "12:30", False),
        ("#### 2:00 pm", "math", "2", "2", True),  # on the hour: the hour, as in the fallback
    ],
)
def test_qa_trial_hedges(output, kind, gold, answer, correct):
    assert extract_answer(output, kind) == answer
    assert is_correct(extract_answer(output, kind), gold, kind) is correct


def test_a_number_past_a_floats_range_is_an_answer_not_a_crash():
    """Scientific notation past a float's range (1e400) stays the number as written (it is not 10**15
    or infinity): an answer a gold can match, not an OverflowError out of every protocol's scorer."""
    assert extract_answer("The answer is 1e400.", "math") == "1e400"
    assert extract_answer("The answer is -2E+400", "math") == "-2e400"
    assert is_correct(extract_answer("The answer is 1E400", "math"), "1e400", "math") is True
    assert is_correct(extract_answer("The answer is 1e400", "math"), "18", "math") is False
    assert extract_answer("The answer is 1e1", "math") == "10"  # in range: the integer


def test_qa_trial_hedges_say_why():
    assert find_answer("The answer is 12 or maybe 10").several
    assert find_answer("The answer is B (or C)", "mc").several
    assert find_answer("The answer is 3 ± 1").several
    assert find_answer("#### 12 13") == Extraction("12, 13", "####", span="12 13", several=True)
    assert find_answer("The answer is 12. But I'm not sure.").reason == "refusal"
    assert find_answer("The answer is B? I am not sure.", "mc").reason == "refusal"
    assert find_answer("The answer is 12. Just kidding, it is not 12.").reason == "negated"
    assert find_answer("The answer is A. Just kidding, not A.", "mc").reason == "negated"
    assert find_answer("The answer is at least 12.") == Extraction(None, "marker", "bound", span="at least 12")
    assert find_answer("The answer is \\boxed{12}. Alternatively, it could be 13.").several


@pytest.mark.parametrize(
    "output, kind, answer",
    [
        # the sentence after: only its short lists of cues count
        ("The answer is 12. Maybe I should check: 3 * 4 = 12.", "math", "12"),
        ("The answer is 12. Alternatively, 3 * 4 = 12.", "math", "12"),  # the same value again
        ("The answer is 12. I am sure.", "math", "12"),
        ("The answer is 12.\n\nQuestion: what is 5 + 5?", "math", "12"),
        ("The answer is B. Alternatively, a student might pick A, which is wrong.", "mc", "B"),
        # one value: a mixed calculation, a subtraction, a unit
        ("The answer is 3 x 60 = 180", "math", "180"),
        ("The answer is 10 - 3.", "math", "7"),
        ("The answer is 12 km.", "math", "12"),
        ("The answer is B, not D.", "mc", "B"),
    ],
)
def test_qa_trial_narrow(output, kind, answer):
    assert extract_answer(output, kind) == answer


# ----------------------------------------------------------------------------- the fallback applies the policy (issue 33)


@pytest.mark.parametrize(
    "output, reason",
    [
        # a refusal in the guessed number's sentence: no credit, whatever number it names
        ("It cannot be determined whether she has 12 apples.", "refusal"),
        ("Without the price we cannot determine the total; if each costs $3, it is 12.", "refusal"),
        ("I don't know how many apples she has, maybe 12.", "refusal"),
        ("There is not enough information to find how many of the 12 apples are left.", "refusal"),
        ("I am unable to determine the number of apples in the 12 boxes.", "refusal"),
        ("She has 12 apples, I can't be sure though.", "refusal"),
        # a bound or an inequality is not a value
        ("So she needs at least 12 boxes.", "bound"),
        ("She can buy no more than 12 apples.", "bound"),
        ("So the number of apples is more than 12.", "bound"),
        ("It takes up to 12 hours.", "bound"),
        ("He needs 12 or more apples.", "bound"),
        ("Therefore x > 12.", "bound"),
        ("So x>=12", "bound"),
        ("So x ≥ 12.", "bound"),
        ("So 12 < x.", "bound"),
        ("So $x > 12$.", "bound"),
    ],
)
def test_the_fallback_gives_no_credit_to_a_refusal_or_a_bound(output, reason):
    found = find_answer(output)
    assert (found.answer, found.how, found.reason) == (None, "fallback", reason)
    assert not is_correct(found.answer, "12")


@pytest.mark.parametrize(
    "output",
    [
        "So 5 + 7 => 12.",  # an arrow, not ">"
        "Total: 5 + 7 -> 12.",
        "The costs add up to 12.",  # a total, not "up to"
        "Since 15 > 3, she keeps 12.",  # the inequality is not the guessed number's
        "We cannot use the 3 red ones. She has 12 apples.",  # another sentence, and no giving up
    ],
)
def test_the_fallback_still_reads_a_plain_value(output):
    assert find_answer(output) == Extraction("12", "fallback", span="12")


@pytest.mark.parametrize("output, answer, reason", [
    ("I'm not sure, but I think it's B.", None, "refusal"),
    ("I cannot determine whether it is B.", None, "refusal"),
    ("It is probably B. But I'm not sure.", None, "refusal"),  # doubt in the next sentence
    ("I don't know, C?", None, "refusal"),
    ("B is correct. None of the others fit.", "B", None),  # "none" alone is no refusal
    ("A is wrong. So B.", "B", None),
])
def test_the_multiple_choice_fallback_gives_no_credit_to_a_refusal(output, answer, reason):
    found = find_answer(output, "mc")
    assert (found.answer, found.how, found.reason) == (answer, "fallback", reason)
