"""The task files of ``agora bench`` and the dev splits COMED's thresholds are calibrated on.

:func:`load_tasks` reads ``--tasks`` (test questions first, the file's last ``--dev N`` questions as
its dev split); :class:`DevSplit` is one dev split, for one task or all, and :func:`disjoint` keeps
a dev split's questions apart from every test question. :mod:`agora.runs.bench` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from agora.tasks.errors import InputError
from agora.tasks.loaders import detect_format, load_problems
from agora.tasks.problem import Problem
from agora.tasks.samples import sample_path
from agora.traces.resume import MAX_STORED_RUN_ID_CHARS, check_run_id


@dataclass(frozen=True, slots=True)
class TaskFile:
    """One task of a bench: its test questions and, for ``--dev N``, the dev questions after them."""

    name: str
    path: Path
    format: str
    problems: tuple[Problem, ...]
    dev: tuple[Problem, ...] = ()


_GENERIC = {"test", "dev", "train", "val", "valid", "validation", "data", "sample"}


def _task_name(path: Path, taken: set[str]) -> str:
    """The file's stem (``arc_challenge_test``), prefixed with its folder when the stem says
    nothing (``gsm8k/test.jsonl`` → ``gsm8k-test``) or is taken; run ids use it."""
    name = path.stem
    if name in _GENERIC or name in taken:
        name = f"{path.parent.name}-{name}" if path.parent.name else name
    base, i = name, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    return name


#: What a bench task file's refused format guess tells the user (agora bench has no --format).
BENCH_FORMAT_HINT = ("agora bench has no --format: give the file the fields of one format "
                     "(gsm8k: question and an answer with '####'; gsm-hard: input, target; math: problem, "
                     "answer or solution; mc: question, options or choices)")


def load_tasks(spec: str, limit: int | None = None, dev: int = 0) -> list[TaskFile]:
    """The task files of ``--tasks``: comma-separated paths, each optionally ``name=path`` (spaces
    around the name and the path are dropped), in any
    loader format (detected from the file); ``sample`` is the GSM8K sample shipped with Agora. The
    test questions are the first ``limit`` of each file (all without it); with ``dev``, the file's
    last ``dev`` questions form that task's dev split (and are never test questions). Taking them
    from the end keeps the dev split the same when a later rerun raises ``limit``.

    The same file given twice (the same file once its links are followed, whatever its name) is
    refused: it would count twice in the macro average. Two files of the same stem in different
    folders are two tasks; the second is named after its folder too (``<folder>-<stem>``).

    Raises:
        ValueError: no task, a file given twice, a duplicate name, a name that cannot be a run id
            part, a file without gold answers (``prompts``), or a file with fewer than ``limit + dev``
            problems.
        TaskFormatError: a file that cannot be read (file:line: field).
    """
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise InputError("--tasks: no task file given")
    tasks: list[TaskFile] = []
    taken: set[str] = set()
    seen: dict[object, int] = {}  # a file's identity (device, inode) -> its position in --tasks, from 1
    for position, item in enumerate(items, 1):
        name, sep, rest = item.partition("=")
        name, given = name.strip(), (rest if sep else item).strip()  # "name = path": neither keeps a space
        if not given:
            raise InputError(f"--tasks {item!r}: no task file after '=' (give name=path)")
        if given == "sample":
            path, fmt = sample_path("gsm8k")
            name = name if sep else "gsm8k-sample"
        else:
            path = Path(given)
            fmt = detect_format(path, hint=BENCH_FORMAT_HINT)
            name = name if sep else _task_name(path, taken)
        key = _file_identity(path)
        if key in seen:  # counted twice, it would weigh double in the macro average
            raise InputError(f"--tasks: {str(path)!r} is given twice (task files {seen[key]} and {position} are the "
                             "same file); give each task file once")
        seen[key] = position
        if not name or ":" in name or name in taken or name in ("all", "macro"):
            raise InputError(f"--tasks: task name {name!r} is empty, has ':', is reserved or is used twice; "
                             "name it with name=path")
        try:  # a part of the bench's run ids (<bench>:<task>:<protocol>): refused here, before any cell runs
            check_run_id(f"x{name}x", "--tasks", max_chars=MAX_STORED_RUN_ID_CHARS)
        except InputError:
            raise InputError(f"--tasks: task name {name!r} (from {str(path)!r}) holds a character a run id may not "
                             "(a control or invisible character) or is too long; name it with name=path") from None
        if fmt == "prompts":
            raise InputError(f"{path}: no gold answers (format prompts); a bench needs gold answers to score")
        problems = load_problems(path, fmt, None if dev else limit)
        if len(problems) < (limit or 1) + dev:
            raise InputError(f"{path}: {len(problems)} problems, fewer than --limit {limit or 1} + --dev {dev}"
                             if dev else f"{path}: no problems")
        held_out = problems[len(problems) - dev:] if dev else []
        test = problems[: len(problems) - dev][:limit]
        taken.add(name)
        tasks.append(TaskFile(name, path, fmt, tuple(test), tuple(held_out)))
    return tasks


def _file_identity(path: Path) -> object:
    """What tells two ``--tasks`` paths apart: the file's ``(device, inode)`` (a symbolic link, a
    hard link and ``./a.jsonl`` beside ``a.jsonl`` are the same file), else its resolved path."""
    try:
        st = path.stat()
    except OSError:
        return str(path.resolve())
    return (st.st_dev, st.st_ino)


@dataclass(frozen=True, slots=True)
class DevSplit:
    """Dev questions for COMED's calibration, for one task (``scope`` its name) or all (``*``)."""

    scope: str
    source: str
    """Where the questions come from, in words (a file, or the rows after a task's test questions)."""
    problems: tuple[Problem, ...]


def disjoint(dev: Sequence[Problem], tests: Sequence[Problem]) -> tuple[list[Problem], int]:
    """``dev`` without any question that is also a test question (same text), and how many went."""
    seen = {p.question.strip() for p in tests}
    kept = [p for p in dev if p.question.strip() not in seen]
    return kept, len(dev) - len(kept)
