"""Program-of-thought (``recipe = "pot"``): the model writes a Python program, Agora runs it in the
sandbox, and what the program prints is the member's answer.

PAL (Gao et al., "PAL: Program-aided Language Models", arXiv 2211.10435) and Program of Thoughts
(Chen et al., arXiv 2211.12588): the model reasons in code and the interpreter computes. As PAL
does, three separate steps: the prompt (:meth:`ProgramOfThought.prepare`), the program's extraction
from the reply (:func:`extract_program`: the first fenced ``python`` block), and its execution
(:func:`agora.models.recipes.sandbox.run_program`). A program that fails, runs out of time or
prints nothing is a failed sample: its text says so and gives no answer (never a wrong one), and
its trace row keeps the program and the error.

The prompt suits Qwen2.5-Coder-Instruct (the built-in pool): one complete program in a fenced
block that prints only the final answer; for a multiple-choice question the program prints the
option's letter. The printed last line becomes ``The answer is <line>.``, which the answer checker
(:mod:`agora.tasks.answers`) reads for both kinds.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

from pydantic import Field, StrictStr, field_validator, model_validator

from agora.tasks.errors import InputError
from agora.models.recipes.registry import Finished, Recipe
from agora.models.recipes.sandbox import DEFAULT_IMPORTS, SandboxLimits, imports_problem, run_program

POT_SYSTEM = ("You solve problems by writing Python. Write one complete Python program in a ```python code block "
              "that computes the answer and prints it with print(). Print only the final answer: a number for a "
              "math problem (exact, e.g. an integer or a fraction like 3/4, when you can), or the single letter of "
              "the correct option for a multiple-choice question. The program may import only: {imports}. It "
              "cannot read input or files.")
POT_REQUEST = "Write the Python program that prints the final answer."

POT_SHOTS: tuple[tuple[str, str], ...] = (
    ("Ana has 4 boxes with 6 pens in each box. She gives 5 pens to her brother. How many pens does she have left?",
     "```python\nboxes = 4\npens_per_box = 6\ngiven = 5\nprint(boxes * pens_per_box - given)\n```"),
    ("Which planet is closest to the Sun?\nA. Venus\nB. Mercury\nC. Earth\nD. Mars",
     "```python\n# Mercury has the smallest orbit of the planets.\nprint(\"B\")\n```"),
    ("What is the sum of the solutions of x^2 - 5x + 6 = 0?",
     "```python\nfrom fractions import Fraction\n# x^2 - 5x + 6 = (x - 2)(x - 3)\nroots = [Fraction(2), Fraction(3)]\n"
     "print(sum(roots))\n```"),
)

#: The protocols' closing instruction (``End with 'The answer is N.' ...``), replaced by the PoT request.
_FINISH = re.compile(r"\s*End with 'The answer is [^\n]*$")
#: A fence's label: what follows its opening backticks, after spaces and tabs.
_LABEL = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_ANSWER_PREFIX = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is|:|=)\s*", re.I)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of ``text`` as ``(label, body)`` pairs, in order: a fence opens at three
    backticks followed, on the same line, by an optional label (letters, digits, ``_+-`` after spaces
    or tabs) and the rest of that line; its body runs from the next line to the next three backticks,
    or to the end of ``text`` (a reply cut off before its closing fence). Three backticks with no line
    after them open nothing. One pass over ``text``: a regular expression that looked for the end of
    the line anew at each of a reply's backticks took time quadratic in its length (over a minute of
    CPU for 400 KB of repeated fences, in Agora's process)."""
    blocks = []
    at = text.find("```")
    while at != -1:
        line_end = text.find("\n", at + 3)
        if line_end == -1:  # no line after this fence, nor after any later one
            break
        label = _LABEL.match(text, at + 3, line_end).group(1)
        close = text.find("```", line_end + 1)
        blocks.append((label, text[line_end + 1:] if close == -1 else text[line_end + 1:close]))
        at = -1 if close == -1 else text.find("```", close + 3)
    return blocks


def extract_program(text: str) -> str | None:
    """The program of a reply: the first fenced block labelled ``python``/``py`` (else the first
    fenced block), or the whole reply when it has no fence and parses as Python; ``None`` otherwise."""
    blocks = [(lang.lower(), body) for lang, body in fenced_blocks(text or "")]
    for lang, body in blocks:
        if lang in ("python", "py", "python3") and body.strip():
            return body.strip("\n")
    for lang, body in blocks:
        if not lang and body.strip():
            return body.strip("\n")
    if not blocks and text and text.strip():
        try:  # a syntax check that builds no Python AST objects: CPython 3.11's ast.parse can raise a
            # spurious SystemError while another thread parses too (python/cpython#106905)
            compile(text, "<reply>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            # a reply nested too deep for the compiler (a million unary minuses) is no program either
            return None
        return text.strip("\n")
    return None


def answer_line(output: str) -> str:
    """The answer in a program's output: its last non-empty line, without an ``Answer:``/``The
    answer is`` prefix or a final full stop, at most 200 characters."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    line = _ANSWER_PREFIX.sub("", lines[-1]) if lines else ""
    return line.rstrip(".").strip()[:200]


def no_answer(error: str) -> str:
    """The text of a failed sample: names the error's type, gives no answer (the checker reads it as none)."""
    kind = re.match(r"[A-Za-z]+", error or "")
    return f"The program failed ({kind.group(0) if kind else 'Error'}), so this reply gives no answer."


class ProgramOfThought(Recipe):
    """Program-of-thought: the settings of the prompt and of the sandbox."""

    name = "pot"
    summary = "program-of-thought: the model writes a Python program; its printed result is the answer (sandboxed)"
    runs_programs = True

    shots: int = Field(default=2, ge=0, le=len(POT_SHOTS))
    """Worked program exemplars before the question (0 to 3)."""
    cpu_s: float = Field(default=2.0, ge=0.01, le=600)
    """CPU seconds a program may use."""
    wall_s: float = Field(default=4.0, ge=0.01, le=600)
    """Wall-clock seconds before a program is killed."""
    memory_mb: int = Field(default=512, ge=16, le=65_536)
    """MiB of memory a program may allocate."""
    output_bytes: int = Field(default=65_536, ge=16, le=64 * 2**20)
    """Bytes a program may print."""
    imports: tuple[StrictStr, ...] = DEFAULT_IMPORTS
    """Modules a program may import (never os, sys, subprocess, socket, numpy...: file system, processes, network)."""

    @field_validator("imports")
    @classmethod
    def _safe_imports(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if problem := imports_problem(value):
            raise InputError(problem)
        return value

    @model_validator(mode="after")
    def _sandbox_installed(self) -> "ProgramOfThought":
        if importlib.util.find_spec("RestrictedPython") is None:
            raise InputError("program-of-thought needs RestrictedPython for its sandbox: pip install RestrictedPython")
        return self

    @property
    def limits(self) -> SandboxLimits:
        return SandboxLimits(cpu_s=self.cpu_s, wall_s=self.wall_s, memory_mb=self.memory_mb,
                             output_bytes=self.output_bytes, imports=self.imports)

    def prepare(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """PoT's system prompt and exemplars, then the protocol's last user turn (its closing
        ``End with 'The answer is ...'`` replaced by :data:`POT_REQUEST`); the protocol's own
        system prompt and chain-of-thought exemplars are dropped."""
        last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        question = _FINISH.sub("", str(last["content"])) if last else ""
        chat = [{"role": "system", "content": POT_SYSTEM.format(imports=", ".join(self.imports))}]
        for q, a in POT_SHOTS[: self.shots]:
            chat += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        return chat + [{"role": "user", "content": f"{question.rstrip()}\n\n{POT_REQUEST}"}]

    def finish(self, text: str) -> Finished:
        """Run the reply's program: ``The answer is <printed line>.`` after the program, or a text
        without an answer when it fails. Fields: ``program``, ``program_output``, ``program_error``,
        ``program_s``."""
        program = extract_program(text)
        if program is None:
            error = "NoProgram: the reply holds no Python program"
            return Finished(no_answer(error), {"program": None, "program_output": None, "program_error": error,
                                               "program_s": 0.0})
        run = run_program(program, self.limits)
        fields = {"program": program, "program_output": run.output[:4000], "program_error": run.failure,
                  "program_s": round(run.seconds, 6)}
        answer = answer_line(run.output) if run.ok else ""
        if not answer:
            fields["program_error"] = run.failure or "NoAnswer: the output has no answer line"
            return Finished(no_answer(fields["program_error"]), fields)
        return Finished(f"```python\n{program}\n```\nThe answer is {answer}.", fields)


RECIPE = ProgramOfThought
