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
