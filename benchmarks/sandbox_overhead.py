"""The program-of-thought sandbox's overhead per sample (goal: at most 50 ms beside the model's seconds).

Measures, over ``--runs`` programs each, the wall time from :func:`agora.models.recipes.sandbox.run_program`
being called to its result (a warm worker: the first, which starts the worker and imports sympy,
is timed apart):

* ``trivial``: ``print(6 * 7)``: the sandbox alone (request, fork, limits, Landlock and seccomp,
  RestrictedPython compile, run, result file, folder removed, reply);
* ``gsm8k-like``: a typical model-written program (a function, arithmetic, ``fractions``);
* ``sympy``: ``sympy.solve`` of a quadratic (sympy is preloaded in the worker; the time is sympy's own);
* ``recipe``: the whole ``pot`` recipe's ``finish`` on a model reply (program extraction, run, answer text);
* ``fresh interpreter``: for comparison, ``python -I -c`` of the same trivial program, the design a
  pre-forked worker replaces.

Prints the median and p95 in ms, and the containment layers this machine gives.

    python benchmarks/sandbox_overhead.py --runs 200
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time

from agora.models.recipes.pot import ProgramOfThought
from agora.models.recipes.sandbox import SandboxLimits, run_program, sandbox_layers

PROGRAMS = {
    "trivial": "print(6 * 7)",
    "gsm8k-like": ("from fractions import Fraction\n\ndef solution():\n    eggs_per_day = 16\n    eaten = 3\n"
                   "    baked = 4\n    price = Fraction(2)\n    left = eggs_per_day - eaten - baked\n"
                   "    return left * price\n\nprint(solution())"),
    "sympy": "from sympy import symbols, solve\nx = symbols('x')\nprint(solve(x**2 - 5*x + 6, x))",
}
REPLY = "Here is the program:\n```python\n" + PROGRAMS["gsm8k-like"] + "\n```\nIt prints 18."


def _stats(times_s: list[float]) -> tuple[float, float]:
    ms = sorted(t * 1000 for t in times_s)
    p95 = ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]
    return statistics.median(ms), p95


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="programs per row (default 200)")
    ap.add_argument("--fresh-runs", type=int, default=20, help="fresh-interpreter runs (default 20)")
    args = ap.parse_args()
    limits = SandboxLimits()
    start = time.perf_counter()
    layers = sandbox_layers()  # starts the worker (imports RestrictedPython and sympy)
    first_s = time.perf_counter() - start
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, Python {platform.python_version()}, "
          f"{args.runs} runs per row")
    print(f"layers: {', '.join(layers)}")
    print(f"worker start (first program, imports sympy): {first_s * 1000:.0f} ms")
    print(f"{'row':<20} {'median ms':>10} {'p95 ms':>10}")
    for name, program in PROGRAMS.items():
        times = []
        for _ in range(args.runs):
            run = run_program(program, limits)
            assert run.ok, (name, run)
            times.append(run.seconds)
        print(f"{name:<20} {_stats(times)[0]:>10.1f} {_stats(times)[1]:>10.1f}")
    recipe = ProgramOfThought()
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        done = recipe.finish(REPLY)
        times.append(time.perf_counter() - t0)
        assert done.text.endswith("The answer is 18."), done
    print(f"{'recipe (finish)':<20} {_stats(times)[0]:>10.1f} {_stats(times)[1]:>10.1f}")
    times = []
    for _ in range(args.fresh_runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", PROGRAMS["trivial"]], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    print(f"{'fresh interpreter':<20} {_stats(times)[0]:>10.1f} {_stats(times)[1]:>10.1f}   "
          "(python -I -c, no RestrictedPython, no limits)")


if __name__ == "__main__":
    main()
