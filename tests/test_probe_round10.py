"""Probe round 10: what a fresh user and an attacker found still wrong, each with its fix."""

from __future__ import annotations

from agora.models.recipes.sandbox import SandboxLimits, run_program

LIMITS = SandboxLimits(cpu_s=2, wall_s=6, memory_mb=256, output_bytes=4096)


def test_lambdifys_import_lines_go_through_the_programs_import_check():
    """``lambdify`` ``exec``s ``from M import k`` for each name in its printer's ``module_imports``
    (a public attribute a program's ``_lambdacode`` given through ``Function('f', **{...})`` can add
    to) and the import commands of its ``MODULES`` table (a public dict): both ran with the
    interpreter's ``__import__``, and the generated code called ``os.getpid()``."""
    through_printer = (
        "import sympy\nx = sympy.Symbol('x')\n"
        "def code(self, printer):\n    printer.module_imports['os'].add('getpid')\n    return 'getpid()'\n"
        "f = sympy.Function('f', **{'_lambdacode': code, '_pythoncode': code, '_mpmathcode': code})\n"
        "print(sympy.lambdify(x, f(x))(1))\n")
    run = run_program(through_printer, LIMITS)
    assert run.status == "error" and run.error.startswith("ImportError: lambdify may only run import lines"), run
    through_table = (
        "import sympy\nfrom sympy.utilities.lambdify import MODULES\nx = sympy.Symbol('x')\n"
        "MODULES['math'] = ({}, {}, {}, ('from posix import getpid',))\n"
        "print(sympy.lambdify(x, sympy.Function('getpid')(), modules='math')(1))\n")
    run = run_program(through_table, LIMITS)
    assert (run.status, run.error) == ("error", "ImportError: Cannot import 'math' with 'from posix import getpid' "
                                                "command"), run
    through_eval = through_table.replace("'from posix import getpid'", "\"import_module('sympy') or 1\"")
    run = run_program(through_eval, LIMITS)
    assert run.status == "error" and run.error.startswith(
        "ImportError: lambdify may only run import_module('name') in the sandbox"), run
    fine = ("import sympy\nx = sympy.Symbol('x')\n"
            "print(sympy.lambdify(x, sympy.sin(x) + sympy.gamma(x))(1.0), sympy.lambdify(x, x**2, 'mpmath')(3),"
            " sympy.lambdify(x, sympy.sqrt(x), 'math')(4))\n")
    run = run_program(fine, LIMITS)
    assert (run.status, run.output) == ("ok", "1.8414709848078965 9 2.0\n"), run


def test_sympys_interactive_session_and_timing_helper_are_not_reachable():
    """``sympy.interactive.session.init_python_session()`` is a ``code.InteractiveConsole``: its
    ``runsource("import posix; pid = posix.getpid()")`` ran with the interpreter's built-ins (the
    pid was then read from ``console.locals``); ``sympy.utilities.timeutils.timed(f, setup=...)``
    hands ``setup`` to ``timeit``, which compiled and ran ``__import__('posix').getpid()``."""
    closed = "is not allowed (it runs code outside the sandbox)"
    cases = [
        ("from sympy.interactive.session import init_python_session\nc = init_python_session()\n"
         "c.runsource('import posix; pid = posix.getpid()')\nprint(c.locals.get('pid'))",
         f"ImportError: import of 'sympy.interactive.session' {closed}"),
        ("from sympy.utilities.timeutils import timed\n"
         "print(timed(lambda: 1, setup=\"raise ValueError(str(__import__('posix').getpid()))\"))",
         f"ImportError: import of 'sympy.utilities.timeutils' {closed}"),
        ("import sympy\nprint(sympy.init_session)",
         "AttributeError: 'init_session' belongs to the module 'sympy.interactive.session', which is not allowed "
         "(it runs code outside the sandbox)"),
        ("import sympy\nprint(sympy.interactive.session)",
         "AttributeError: 'session' is the module 'sympy.interactive.session', which is not allowed"),
        ("import sympy.utilities\nprint(sympy.utilities.timeutils)",
         "AttributeError: 'timeutils' is the module 'sympy.utilities.timeutils', which is not allowed"),
    ]
    for program, error in cases:
        run = run_program(program, LIMITS)
        assert (run.status, run.error) == ("error", error), program
    run = run_program("import sympy\nsympy.init_printing(use_unicode=False)\nprint(sympy.sqrt(8))", LIMITS)
    assert (run.status, run.output) == ("ok", "2*sqrt(2)\n"), run


def test_an_integral_expression_past_a_floats_integers_is_its_exact_integer():
    """A value written as an expression (``10000000000000000000001*3``, ``2^{70}+1``,
    ``100000000000000000001/1``) was rounded through ``float``: the reply ``...001*3`` was extracted
    as ``30000000000000000000000`` and scored right against that gold (its value is ``...003``);
    ``2^{70}+1`` was the vote of ``2^{70}``."""
    from agora.tasks.answers import find_answer
    from agora.tasks.comparison import answer_key
    from agora.tasks.scoring import score_answer

    assert find_answer("The answer is 10000000000000000000001*3.", "math").answer == "30000000000000000000003"
    assert score_answer("10000000000000000000001*3", "30000000000000000000000", "math") is False
    assert score_answer("10000000000000000000001*3", "30000000000000000000003", "math") is True
    assert answer_key("2^{70}+1") == str(2 ** 70 + 1) != answer_key("2^{70}") == str(2 ** 70)
    assert answer_key("100000000000000000001/1") == "100000000000000000001"
    assert answer_key("-(2^{60}+1)") == str(-(2 ** 60 + 1))
    assert answer_key("\\frac{2^{64}+2}{2}") == str(2 ** 63 + 1)
    assert answer_key("4/2") == "2" and answer_key("1.5*2") == "3" and answer_key("1e16") == "10000000000000000"


def test_scientific_notation_inside_an_expression_is_a_power_of_ten_not_eulers_number():
    """``1e2/8`` was read by math-verify as 1·e·2/8 (Euler's number): the reply ``The answer is
    1e2/8.`` was extracted as ``0.6795704571`` (12.5 is right), ``2e5+1`` as ``28.1828182846``."""
    from agora.tasks.answers import find_answer
    from agora.tasks.comparison import answer_key
    from agora.tasks.scoring import score_answer

    assert find_answer("The answer is 1e2/8.", "math").answer == "12.5"
    assert score_answer("1e2/8", "12.5", "math") is True
    assert answer_key("2e5+1") == "200001" and answer_key("1E2/4") == "25" and answer_key("2.5e-3*2") == "0.005"
    assert answer_key("1e400/3") == "1e400/3"  # past a float's range: as written, not 1·e·400/3
    assert answer_key("e^2") == "7.3890560989" and answer_key("1e3") == "1000"  # Euler's number where written


def test_pythons_power_operator_in_an_answer_is_a_power_not_digits_run_together():
    """Every ``**`` was taken for Markdown bold and removed: ``The answer is 2**3.`` was extracted as
    ``23`` (8 is right), ``(2+1)**2`` as ``6`` (the implicit product of ``(2+1)2``; 9 is right).
    Bold around a value (``**42**``) is still bold."""
    from agora.tasks.answers import find_answer

    for text, answer in [("The answer is 2**3.", "8"), ("The answer is (2+1)**2.", "9"), ("The answer is 2**10.", "1024"),
                         ("\\boxed{2**3}", "8"), ("The answer is **42**.", "42"), ("**Answer:** 17", "17"),
                         ("The answer is **3*4**.", "12"), ("**The answer is 9.**", "9"),
                         ("The answer is **4**, **5**.", "4, 5")]:
        assert find_answer(text, "math").answer == answer, text


def test_latex_operators_and_thousands_between_numbers_in_plain_text_are_read():
    """A plain-text answer with LaTeX between its numbers was read as its first number:
    ``The answer is 2 \\cdot 3.`` as ``2`` (scored right against a gold of 2), ``6 \\div 2`` as
    ``6``, ``1\\,000`` and ``1{,}000`` as ``1``; ``2^{10}`` was no answer ("unfinished")."""
    from agora.tasks.answers import find_answer

    for text, answer in [("The answer is 2 \\cdot 3.", "6"), ("Final answer: 2\\cdot 3", "6"),
                         ("The answer is 2 \\times 3 apples, since each box has 3.", "6"),
                         ("The answer is 6 \\div 2.", "3"), ("The answer is 1\\,000 dollars.", "1000"),
                         ("The answer is 1{,}000.", "1000"), ("The answer is 10,\\!080.", "10080"),
                         ("The answer is 1\\,000\\,000.", "1000000"), ("The answer is 2^{10}.", "1024"),
                         ("The answer is 2^{-1}.", "0.5"), ("The answer is 3 \\cdot 10^{5}.", "300000"),
                         ("The answer is \\frac{1}{2}.", "0.5"), ("The answer is 12.", "12")]:
        assert find_answer(text, "math").answer == answer, text


def test_a_mixed_number_is_its_whole_part_plus_its_fraction():
    """``The answer is 3 1/2.`` was extracted as ``1`` and ``2 3/4 cups`` as ``3`` (math-verify's
    reading of the two numbers side by side): scored right against golds of 1 and 3. Without a
    marker, ``It takes 3 1/2 hours.`` was ``0.5`` (its last number, the fraction alone)."""
    from agora.tasks.answers import find_answer
    from agora.tasks.scoring import score_answer

    for text, answer in [("The answer is 3 1/2.", "3.5"), ("The answer is 2 3/4 cups.", "2.75"), ("#### 3 1/2", "3.5"),
                         ("The answer is -2 1/4.", "-2.25"), ("The answer is 7 1/2 hours.", "7.5"),
                         ("The answer is 3/4.", "0.75"), ("The answer is 12 13.", "12, 13"),
                         ("It takes 3 1/2 hours.", "3.5"), ("She used 2 3/4 cups of flour.", "2.75"),
                         ("He ate 1/2 of it.", "0.5")]:
        assert find_answer(text, "math").answer == answer, text
    assert score_answer("3 1/2", "1", "math") is False and score_answer("3 1/2", "3.5", "math") is True


def test_a_number_next_to_a_bracket_is_a_product():
    """math-verify reads ``2(3)`` as 2 + 3: ``The answer is 2(3).`` was extracted as ``5`` (6 is
    right), ``(2)(3)`` as 5, ``6 / 2 (3)`` as 1.2."""
    from agora.tasks.answers import find_answer
    from agora.tasks.comparison import answer_key

    assert find_answer("The answer is 2(3).", "math").answer == "6"
    assert answer_key("(2)(3)") == "6" and answer_key("-2(3)") == "-6" and answer_key("6 / 2 (3)") == "9"
    assert answer_key("3(4+1)") == "15" and answer_key("x(3)") == "x(3)" and answer_key("(1, 2)") == "(1, 2)"
