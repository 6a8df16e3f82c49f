"""A seeded generator of one- and two-step arithmetic word problems.

Written for this project: the one task on which the embedded 135M/270M models are above chance
(SmolLM2-135M-Instruct about 17% greedy, about 32% any-of-5-samples), so selection rules make a
visible difference. ``synthetic_problems(n, seed)`` is deterministic in ``(n, seed)``.
"""

from __future__ import annotations

import random

from agora.tasks.errors import InputError
from agora.tasks.problem import Problem

_NAMES = ["Tom", "Mia", "Ali", "Sara", "Ben", "Lena", "Omar", "Ivy", "Raj", "Nora"]
_ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "cookies", "cards", "shells"]


def _one_step(rng: random.Random) -> tuple[str, int]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b = rng.randint(2, 20), rng.randint(2, 20)
    op = rng.choice(["add", "sub", "mul"])
    if op == "add":
        return f"{name} has {a} {item}. {name} gets {b} more {item}. How many {item} does {name} have now?", a + b
    if op == "sub":
        a, b = max(a, b) + 1, min(a, b)
        return f"{name} has {a} {item}. {name} gives away {b} {item}. How many {item} does {name} have left?", a - b
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return f"{name} has {a} bags with {b} {item} in each bag. How many {item} does {name} have in total?", a * b


def _two_step(rng: random.Random) -> tuple[str, int]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 9)
    kind = rng.choice(["mul_add", "add_sub", "mul_sub"])
    if kind == "mul_add":
        return (f"{name} buys {a} boxes of {item} with {b} {item} in each box, and then finds {c} more {item}. "
                f"How many {item} does {name} have?"), a * b + c
    if kind == "add_sub":
        a, b = rng.randint(5, 20), rng.randint(2, 10)
        c = rng.randint(1, a + b - 1)
        return (f"{name} has {a} {item}, gets {b} more, and then gives {c} to a friend. "
                f"How many {item} does {name} have now?"), a + b - c
    c = rng.randint(1, a * b - 1)
    return (f"{name} has {a} packs of {item} with {b} {item} in each pack and uses {c} of them. "
            f"How many {item} are left?"), a * b - c


#: The most problems :func:`synthetic_problems` makes (a list in memory, about 400 MB at this bound);
#: ``--limit 99999999999999999999999`` generated until the process was killed.
MAX_SYNTHETIC = 1_000_000


def synthetic_problems(n: int = 10, seed: int = 0) -> list[Problem]:
    """``n`` arithmetic word problems (about half one-step, half two-step), ids ``synthetic-<seed>-<i>``.

    Raises:
        InputError: ``n`` below 0 or above :data:`MAX_SYNTHETIC` (named as ``--limit``)."""
    if n < 0:
        raise InputError(f"n must be >= 0, got {n}")
    if n > MAX_SYNTHETIC:
        raise InputError(f"--limit {n}: at most {MAX_SYNTHETIC:,} synthetic problems are generated; give a smaller --limit")
    rng = random.Random(seed)
    problems = []
    for i in range(n):
        question, answer = (_one_step if rng.random() < 0.5 else _two_step)(rng)
        problems.append(Problem(f"synthetic-{seed}-{i}", question, str(answer), "math", source="synthetic"))
    return problems
