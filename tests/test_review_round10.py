"""Review round 10: what a code review found still wrong, each with its fix."""

from __future__ import annotations

import tomllib

import pytest

from agora.cli._run import toml_key_line
from agora.tasks.answers import find_answer
from agora.tasks.comparison import is_correct
from agora.tasks.values import plain_numerals

KINDS = ("gsm8k", "math")


# ----------------------------------------------------------------------------- 1. $4k+1$ is inline math


@pytest.mark.parametrize("text", ["The answer is $4k+1$.", "The answer is $4k + 1$.", "So $n = 2k$ for some k.",
                                  "The area is $3M$, where $M$ is the mass."])
def test_a_variable_after_a_number_in_inline_math_is_not_a_money_multiplier(text):
    """``$4k+1$`` is LaTeX inline math (4·k + 1), not 4000 dollars plus 1: it was read as 4001."""
    assert plain_numerals(text) == text


@pytest.mark.parametrize("kind", KINDS)
def test_an_inline_math_answer_with_a_variable_is_not_thousands(kind):
    answer = find_answer("The answer is $4k+1$.", kind, 4).answer
    assert answer != "4001" and not is_correct(answer, "4001", kind)


@pytest.mark.parametrize("text, plain", [
    ("He earned $1.5k.", "He earned $1500."),
    ("It cost $2k and then $500 more.", "It cost $2000 and then $500 more."),
    ("It cost $2k (that is $2,000).", "It cost $2000 (that is $2,000)."),
    ("The prize is \\$3M$.", "The prize is \\$3000000$."),  # an escaped \$ is money
    ("It costs €2k.", "It costs €2000."),
])
def test_money_with_a_suffix_is_still_the_full_amount(text, plain):
    assert plain_numerals(text) == plain


# ----------------------------------------------------------------------------- 2. 1/2 million


@pytest.mark.parametrize("text", ["The answer is 1/2 million.", "It takes 2 1/2 million steps."])
def test_a_scale_word_after_a_fraction_does_not_scale_its_denominator(text):
    """``1/2 million`` became ``1/2000000`` (5e-7); the fraction is left as written."""
    assert plain_numerals(text) == text


# ----------------------------------------------------------------------------- 3. the --config line


@pytest.mark.parametrize("name, text, line", [
    ("an array of arrays", '[moa]\nweights = [\n  [1]\n]\nseed = 3\n', 5),
    ("an array of arrays of strings", '[moa]\npairs = [\n  ["a"],\n  ["b"]\n]\nseed = 3\n', 6),
    ("triple quotes in a comment", '[moa]\ntop_p = 1  # see """x\nseed = 3\n', 3),
    ("triple quotes in a one-line string", "[moa]\nnote = \"it's ''' here\"\nseed = 3\n", 3),
    ("an escaped quote in a multi-line string", '[moa]\nnote = """a \\""" b"""\nseed = 3\n', 3),
    ("a multi-line string", '[moa]\nnote = """\nseed = 9\n"""\nseed = 3\n', 5),
    ("a multi-line literal string", "[moa]\nnote = '''\n[other]\nseed = 9\n'''\nseed = 3\n", 6),
    ("a string ending in quotes", '[moa]\nnote = """a""""\nseed = 3\n', 3),
    ("an array closed later", '[moa]\nproposers = [\n  "a", # a comment ]\n  "b",\n]\nseed = 3\n', 6),
    ("the same key in another table", '[other]\nseed = 1\n[moa]\nseed = 3\n', 4),
])
def test_the_config_line_of_a_key_past_arrays_strings_and_comments(name, text, line):
    """A line of a multi-line array (``[1]``) was read as a table header, and triple quotes in a
    comment or a one-line string as the start of a multi-line string: the key after them had no
    line (or, with ``["moa"]`` in an array, another table's)."""
    assert tomllib.loads(text)["moa"]["seed"] == 3  # (valid TOML)
    assert toml_key_line(text, ("moa", "seed")) == line, name


def test_an_array_element_that_looks_like_a_header_is_not_a_table():
    text = '[bench]\nxs = [\n  ["moa"]\n]\nseed = 1\n[moa]\nseed = 3\n'
    assert tomllib.loads(text)["moa"]["seed"] == 3
    assert toml_key_line(text, ("moa", "seed")) == 7  # was 5: bench's seed
