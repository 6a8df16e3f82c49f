"""Probe round 9: what a fresh user and an attacker found still wrong, each with its fix."""

from __future__ import annotations

from agora.models.recipes.sandbox import SandboxLimits, run_program

LIMITS = SandboxLimits(cpu_s=2, wall_s=6, memory_mb=256, output_bytes=4096)


def test_sympys_plot_interval_string_is_evaluated_restricted():
    """``sympy.plotting.pygletplot.plot_interval.PlotInterval("...")`` (importable without pyglet)
    ``eval``s its string with the interpreter's built-ins: ``__import__('os').getpid()`` ran and
    ``__builtins__`` held the interpreter's 150-odd names."""
    program = ("from sympy.plotting.pygletplot.plot_interval import PlotInterval\n"
               "print(PlotInterval(\"(None, 0, 1, __import__('os').getpid())\"))\n")
    run = run_program(program, LIMITS)
    assert run.status == "error"
    assert run.error.startswith('SyntaxError: Line 1: "__import__" is an invalid variable name'), run.error
    run = run_program(program.replace("__import__('os').getpid()", "len(open('x', 'w').name)"), LIMITS)
    assert run.error == "NameError: name 'open' is not defined"
    fine = ("from sympy.plotting.pygletplot.plot_interval import PlotInterval\n"
            "print(PlotInterval('(None, 0, 1, 4)'), PlotInterval(\"(Symbol('t'), 0, 2, 8)\"))\n")
    run = run_program(fine, LIMITS)
    assert (run.status, run.output) == ("ok", "[None,0,1,4] [t,0,2,8]\n"), run


def test_private_modules_and_sympys_test_helpers_are_not_importable(tmp_path):
    """``import sympy.utilities._compilation.util as u`` passed RestrictedPython (which refuses
    ``from sympy.utilities import _compilation``): ``u.sha256_of_file`` read any file, ``u.copy``
    copied one. ``sympy.testing.tmpfiles.TmpFileManager.cleanup()`` removes any folder it is given
    (only Landlock stopped it; without pytest installed it imports)."""
    cases = [
        ("import sympy.utilities._compilation.util as u\nprint(u.sha256_of_file('pyvenv.cfg'))",
         "ImportError: import of 'sympy.utilities._compilation.util' is not allowed (a private module)"),
        ("from sympy.utilities._compilation import util\nprint(util)",
         "ImportError: import of 'sympy.utilities._compilation' is not allowed (a private module)"),
        (f"from sympy.testing.tmpfiles import TmpFileManager\nTmpFileManager.tmp_folder({str(tmp_path)!r})\n"
         "TmpFileManager.cleanup()\nprint('removed')",
         "ImportError: import of 'sympy.testing.tmpfiles' is not allowed (sympy's test suite)"),
        ("import sympy.testing\nprint(1)", "ImportError: import of 'sympy.testing' is not allowed (sympy's test suite)"),
        ("from sympy import testing\nprint(testing)", "ImportError: import of 'sympy.testing' is not allowed (sympy's test suite)"),
    ]
    for program, error in cases:
        run = run_program(program, LIMITS)
        assert (run.status, run.error) == ("error", error), program
    assert tmp_path.exists()
    run = run_program("import sympy.ntheory.factor_ as f\nprint(f.factorint(12))", LIMITS)
    assert (run.status, run.output) == ("ok", "{2: 2, 3: 1}\n")
