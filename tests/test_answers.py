import pytest

from agora.tasks.answers import extract_answer
from agora.tasks.comparison import answer_key, is_correct


@pytest.mark.parametrize(
    "output, gold",
    [
        ("She sells 2,125 of them. The answer is 2,125.", "2125"),
        ("The total cost is $18.", "18"),
        ("He walks 12 km in all. The answer is 12 km.", "12"),
        ("The temperature drops to -7 degrees. The answer is -7.", "-7"),
        ("So the answer is \\frac{1}{2}.", "0.5"),
        ("The answer is 0.5", "\\frac{1}{2}"),
        ("The answer is 3.3333", "3.3333333333333335"),  # GSM-Hard float within tolerance
        ("#### 72", "72"),
        ("\\boxed{\\sqrt{2}}", "\\sqrt{2}"),
    ],
)
def test_math_answers_match_gold(output, gold):
    assert is_correct(extract_answer(output), gold)


@pytest.mark.parametrize(
    "output, gold",
    [
        ("The answer is 19.", "18"),
        ("The answer is 3.4", "3.3333333333333335"),
        ("The answer is -7.", "7"),
    ],
)
def test_wrong_math_answers_are_wrong(output, gold):
    assert not is_correct(extract_answer(output), gold)


@pytest.mark.parametrize("output", ["", "   ", "I don't know.", "no idea, sorry"])
def test_unparsable_output_is_never_correct(output):
    answer = extract_answer(output)
    assert answer is None
    assert not is_correct(answer, "0")
    assert not is_correct(answer, "A", "mc")


def test_answer_key_groups_equivalent_answers():
    assert answer_key("\\frac{1}{2}") == answer_key("0.5") == "0.5"
    assert answer_key("2,125") == answer_key("2125") == "2125"
    assert answer_key("12.0") == "12"


@pytest.mark.parametrize(
    "output, letter",
    [
        ("The answer is B.", "B"),
        ("Answer: (C)", "C"),
        ("D. Mitochondria", "D"),
        ("I think the correct option is A", "A"),
    ],
)
def test_multiple_choice_letters(output, letter):
    assert extract_answer(output, "mc", 4) == letter
    assert is_correct(letter, letter, "mc")


def test_multiple_choice_ignores_letters_beyond_options():
    assert extract_answer("The answer is E.", "mc", 4) is None
    assert not is_correct("B", "C", "mc")
