"""Probe round 11, the answer reader: numbers written in ways the reader took a wrong value from
(``docs/scoring.md``, section 3). Each was a silently wrong verdict: a value other than the one
written, scored right against that other value."""

from __future__ import annotations

import pytest

from agora.tasks.answers import find_answer
from agora.tasks.comparison import is_correct

KINDS = ("gsm8k", "math")


def _read(text: str, kind: str) -> str | None:
    return find_answer(text, kind, 4).answer


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text, value, was", [
    ("The answer is 0x10.", "16", "0"), ("#### 0x10", "16", "0"), ("\\boxed{0x10}", "16", "0"),
    ("#### 0b101", "5", "0"), ("The answer is 0o17.", "15", "0"), ("#### 0xff", "255", "0"),
    ("#### 0XFF", "255", "0"), ("In hexadecimal that is 0x1F.", "31", "0"),
])
def test_a_python_integer_literal_is_its_value_not_its_leading_zero(kind, text, value, was):
    """``0x10`` was read as ``0 x 10`` (a product, 0): credited against a gold of 0."""
    answer = _read(text, kind)
    assert answer == value, text
    assert is_correct(answer, value, kind) and not is_correct(answer, was, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_digits_grouped_by_underscores_are_one_number(kind):
    """``1_000`` was 1."""
    for text, value in [("The answer is 1_000.", "1000"), ("#### 1_000_000", "1000000"),
                        ("She has 12_500 stamps.", "12500")]:
        assert _read(text, kind) == value, text
        assert not is_correct(_read(text, kind), value[:2].rstrip("0") or "1", kind)
    # a base written as a subscript (MATH's 1011_2) is not a group of thousands
    assert _read("\\boxed{1011_2}", kind) == "1011"


def test_a_written_literal_compares_as_its_value_in_gold_and_answer():
    assert is_correct("0x10", "16") and is_correct("16", "0x10") and not is_correct("0x10", "0")
    assert is_correct("0b101", "5") and is_correct("0o17", "15")
    assert is_correct("1_000", "1000") and not is_correct("1_000", "1")


@pytest.mark.parametrize("kind", KINDS)
def test_a_whole_number_before_an_improper_fraction_is_two_values_not_a_mixed_number(kind):
    """``3 5/2`` was 5 (math-verify's reading of the two numbers side by side), credited against a gold
    of 5. A mixed number has a proper fraction (``3 1/2`` is 3.5); ``3 5/2`` is two values."""
    for text in ["The answer is 3 5/2.", "#### 3 5/2", "It takes 3 5/2 hours.", "The answer is 3\\frac{5}{2}.",
                 "\\boxed{3\\frac{5}{2}}", "#### 2 4/4"]:
        found = find_answer(text, kind, 4)
        assert found.several, text
        for gold in ("5", "5.5", "7.5", "3", "2.5", "3.5", "4"):
            assert not is_correct(found.answer, gold, kind), (text, gold)
    assert _read("The answer is 3 5/2.", kind) == "3, 2.5"
    assert _read("#### 2 4/4", kind) == "2, 1"
    # mixed numbers are unchanged
    assert _read("The answer is 3 1/2.", kind) == "3.5"
    assert _read("#### -2 3/4", kind) == "-2.75"
    assert not is_correct("3 5/2", "5") and is_correct("3 1/2", "7/2")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text, value", [
    ("The answer is 1 000 000.", "1000000"), ("#### 12 345", "12345"), ("The answer is 12 345.", "12345"),
    ("#### 1\u2009000", "1000"), ("#### 1\u202f000", "1000"), ("#### 1\u00a0000", "1000"),
    ("The answer is $1 250.50.", "1250.5"), ("She paid 1 000 000 dollars.", "1000000"),
    ("So the total is 2\u202f500 kg.", "2500"), ("#### 12 345 678", "12345678"), ("#### -1 000", "-1000"),
])
def test_thousands_grouped_by_spaces_are_one_number(kind, text, value):
    """``1 000 000`` was read as its groups (``1, 0`` by a statement, the last group ``0`` by the
    fallback)."""
    answer = _read(text, kind)
    assert answer == value, text
    assert is_correct(answer, value, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_numbers_side_by_side_that_are_not_groups_of_three_stay_several_values(kind):
    for text, values in [("#### 12 13", "12, 13"), ("#### 1 23", "1, 23"), ("#### 1234 567", "1234, 567"),
                         ("#### 12 345 6", "12, 345, 6"), ("#### 1 0000", "1, 0"), ("#### 3 100/200", "3.5")]:
        assert _read(text, kind) == values, text


def test_space_grouped_gold_answers_compare_as_one_number():
    assert is_correct("1000", "1 000") and is_correct("1 000", "1000") and is_correct("12345", "12\u202f345")
    assert not is_correct("1", "1 000") and not is_correct("0", "1 000")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text, value", [
    ("The answer is 3\\frac{1}{2}.", "3.5"), ("#### 3\\frac{1}{2}", "3.5"), ("The answer is $3\\frac{1}{2}$.", "3.5"),
    ("It takes 3\\frac{1}{2} hours.", "3.5"), ("The answer is -3\\frac{1}{2}.", "-3.5"),
    ("The answer is 3\\dfrac{1}{2}.", "3.5"), ("The answer is 3\\frac12.", "3.5"), ("The answer is 3 \\frac{1}{2}.", "3.5"),
    ("\\boxed{3\\frac{1}{2}}", "3.5"), ("It takes $3\\frac{1}{2}$ hours.", "3.5"),
])
def test_a_latex_mixed_number_is_its_whole_part_plus_its_fraction(kind, text, value):
    """``The answer is 3\\frac{1}{2}.`` was 3 (the plain reading stopped at the backslash);
    without a marker, ``It takes 3\\frac{1}{2} hours.`` was 2 (the last digit)."""
    answer = _read(text, kind)
    assert answer == value, text
    assert is_correct(answer, "7/2" if value == "3.5" else "-7/2", kind) and not is_correct(answer, "3", kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text", [
    "Final answer: **2\\cdot 3**", "Final answer: **2\\,\\cdot\\, 3**", "Final answer: **2\\cdot\\!3**",
    "Final answer: **2 \\times 3**.", "Final answer: 2\\,\\cdot\\,3", "Final answer: **\\$2\\cdot 3**",
    "**Final answer:** 2 \\; \\cdot \\; 3",
])
def test_a_latex_product_in_markdown_bold_is_its_value(kind, text):
    """``Final answer: **2\\,\\cdot\\, 3**`` was 2 (LaTeX spacing stopped the product), and with
    ``\\$`` before it the statement was skipped for the fallback's last number, 3."""
    answer = _read(text, kind)
    assert answer == "6", text
    assert not is_correct(answer, "2", kind) and not is_correct(answer, "3", kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("text, value", [
    ("The answer is 3 million.", "3000000"), ("#### 3 million", "3000000"), ("The answer is $3 million.", "3000000"),
    ("#### 1.5 million", "1500000"), ("He earns 2.5 billion dollars a year.", "2500000000"),
    ("The answer is 4 thousand.", "4000"), ("The answer is 3 hundred thousand.", "300000"),
    ("The answer is 2,500 thousand.", "2500000"), ("#### 1 trillion", "1000000000000"),
    ("The answer is $1.5k.", "1500"), ("The answer is $3M.", "3000000"),
    ("The answer is $2bn.", "2000000000"), ("\\boxed{3\\text{ million}}", "3000000"),
])
def test_a_number_with_a_scale_word_is_the_full_number(kind, text, value):
    """``3 million`` was 3: credited against a gold of 3, wrong against 3000000."""
    answer = _read(text, kind)
    assert answer == value, text
    written = next(w for w in text.replace("{", " ").split() if w[:1].isdigit() or w[:2].lstrip("$")[:1].isdigit())
    bare = written.strip("$").rstrip(".kMbn\\text").replace(",", "")
    assert is_correct(answer, value, kind) and not is_correct(answer, bare, kind), bare


def test_scale_words_compare_as_the_full_number_in_gold_and_answer():
    assert is_correct("3 million", "3000000") and not is_correct("3 million", "3")
    assert is_correct("3000000", "3 million")


@pytest.mark.parametrize("kind", KINDS)
def test_dozen_a_plural_scale_word_and_a_bare_k_are_units_not_multipliers(kind):
    """``7 dozen`` is 7 (dozens), as ``12 km`` is 12: GSM8K asks "how many dozens" (RouteLLM row 18,
    ``Claire will eat 7 dozens of eggs``, gold 7). A ``k`` after a number with no currency sign may be
    a variable (``4k``) or a unit: read as the number alone, never as a thousand times it."""
    assert _read("The answer is 7 dozen.", kind) == "7"
    assert _read("So Claire will eat 7 dozens of eggs.", kind) == "7"
    assert _read("The answer is 1.5k.", kind) == "1.5"
    assert _read("So the answer is 5k.", kind) == "5"
    # a plural counts units, as in place value: "3 hundreds" is 3
    assert _read("The answer is 3 hundreds.", kind) == "3"


@pytest.mark.parametrize("text, kind, value", [
    ("Final answer: *6*", "gsm8k", "6"), ("The answer is *6*.", "math", "6"), ("Final answer: __6__", "gsm8k", "6"),
    ("#### _6_", "gsm8k", "6"), ("Final answer: *2\\cdot 3*", "math", "6"), ("The answer is *$6*.", "gsm8k", "6"),
    ("Final answer: *B*", "mc", "B"), ("Final answer: *B* or *C*", "mc", "B, C"),
])
def test_a_value_in_markdown_italics_is_the_value(text, kind, value):
    """``Final answer: *6*`` was no answer ("unfinished": the output ended with a ``*``), and
    ``Final answer: __6__`` none at all; ``**6**`` (bold) was already 6."""
    assert find_answer(text, kind, 4).answer == value, text


@pytest.mark.parametrize("text, value", [
    ("The answer is 2*3*4.", "24"), ("The answer is 2 * 3 * 4.", "24"), ("The answer is **6**.", "6"),
    ("The answer is $x_1 + x_2$.", "x_1 + x_2"),
])
def test_products_and_subscripts_are_not_italics(text, value):
    assert find_answer(text, "math", 4).answer == value, text
