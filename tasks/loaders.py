"""Problem files: GSM8K, GSM-Hard, MATH and multiple-choice (MedQA, MMLU, ARC) JSONL.

Each loader turns one JSON line into a :class:`Problem`. A malformed line raises
:class:`TaskFormatError`, whose message names the file, the line number and the field.

Formats (``fmt`` argument of :func:`load_problems`):

* ``gsm8k``: ``question``, ``answer`` whose last line is ``#### N`` (one such line: two are refused): a number (thousands commas
  allowed, digits of any script read as ASCII: ``#### ٧`` is 7; ``#### seven`` is refused, as no
  answer could ever match it).
* ``gsm-hard``: ``input``, ``target`` (a finite number; an integer target compares exactly, others with a relative tolerance: docs/scoring.md).
* ``math``: ``problem`` with ``answer`` (text, or a number: ``4``, ``4.0`` and ``"4"`` are the same
  gold; ``true``, a list or an object is refused, not passed over for the solution), or ``solution``
  whose last ``\\boxed{...}`` (brace-matched) is the answer.
* ``mc``: ``question`` with one of: ``options`` (dict ``{"A": text, ...}``) and ``answer_idx``
  (letter, MedQA); ``choices`` (list) and ``answer`` (index, MMLU); ``choices`` (dict with
  ``text`` and ``label`` lists) and ``answerKey`` (ARC; also ARC's raw ``question`` object
  ``{"stem", "choices": [{"text", "label"}, ...]}``). Option labels are letters, case-insensitive
  (``a`` is option ``A``; two labels differing only in case are refused), and must be the first n
  letters (A, B, C, ... at most J). ARC's numeric labels must be ``1``..``n`` in order: label k is
  the k-th option (``"1"`` → A, ``"2"`` → B, ...); an ``answerKey`` that is not one of the labels,
  such as ``"0"`` or ``"11"``, is refused. Option texts must be strings (``null`` is refused, not
  shown as ``A. None``).
* ``prompts``: any of the above, or ``prompt``/``instruction``/``text`` alone (no gold answer),
  for protocols that need instructions only (duels).

Every format reads strict UTF-8 text, its lines ending in LF, CRLF or a bare CR (an old Mac
file), a UTF-8 byte-order mark ignored. A UTF-16 or UTF-32 file (a byte-order mark, or NUL bytes
in every other byte) is refused in one line naming that encoding and how to convert it. A line that
is not UTF-8, or a string holding a lone UTF-16 surrogate (the JSON escape ``"\\ud800"``, which no
UTF-8 text can hold and the trace database could not store), is refused with its file, line and
field. So are a NUL character (``"\\u0000"``, which a Postgres trace store cannot store), a key
given twice in one object (JSON parsers keep one of the two silently: ``{"answer": "#### 18",
"answer": "#### 7"}`` would score against 7), lines longer than :data:`MAX_LINE_BYTES` (no problem
is that long; such a line would be sent to every model and kept in every checkpoint), JSON nested
deeper than :data:`MAX_NESTING` levels and
integers of more digits than Python converts (``sys.get_int_max_str_digits()``, 4300 by default).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shlex
import sys
import unicodedata
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterator

from agora.tasks.errors import InputError, not_utf8
from agora.tasks.values import ascii_digits
from agora.tasks.problem import SAME_ID, Problem, id_key

#: Option letters of multiple-choice problems (answers are extracted among the first ``n_choices``).
LETTERS = "ABCDEFGHIJ"
FORMATS = ("gsm8k", "gsm-hard", "math", "mc", "synthetic", "prompts")
#: Deepest nesting of JSON arrays and objects a problem line may have (real ones have 3 or 4).
MAX_NESTING = 64
#: Longest problem line, in bytes (1 MiB): GSM8K, MATH, MedQA and ARC lines are a few kB; a longer
#: line is read no further than this and refused with its file and line.
MAX_LINE_BYTES = 1 << 20
#: A GSM8K gold answer after ``####`` (thousands commas removed): a plain decimal number.
_GSM8K_GOLD = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
#: A number whose commas are thousands separators (``1,234,567.5``): one to three digits, then groups of three.
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")
#: A lone UTF-16 surrogate (``\ud800``–``\udfff``): valid in a Python string, not in UTF-8 (refused in problems).
SURROGATE = re.compile(r"[\ud800-\udfff]")
#: What a problem's strings may not hold: a lone surrogate (no UTF-8 text holds one) or NUL (a
#: Postgres ``text`` or ``jsonb`` value cannot hold it; the question would fail at its first checkpoint).
UNSTORABLE = re.compile(r"[\ud800-\udfff\x00]")


def unstorable(char: str) -> str:
    """What is wrong with a character :data:`UNSTORABLE` matched, for a message."""
    if char == "\x00":
        return "a NUL character (\\u0000), which the trace database cannot store"
    return f"not UTF-8 text: a lone UTF-16 surrogate (\\u{ord(char):04x})"


class TaskFormatError(InputError):
    """A problem file line that cannot be read: ``file:line: field 'name': what is wrong``
    (``file: what is wrong`` for the file as a whole, ``line`` 0: missing, unreadable, a folder)."""

    def __init__(self, path: str | Path, line: int, field: str | None, message: str):
        self.path, self.line, self.field = str(path), line, field
        where = f"{self.path}:{line}" if line > 0 else self.path  # line 0: the file as a whole
        what = f"field '{field}': {message}" if field else message
        super().__init__(f"{where}: {what}")


def _require(record: dict, key: str, path: Path, line: int, types: tuple = (str,)) -> Any:
    if key not in record:
        raise TaskFormatError(path, line, key, "missing")
    value = record[key]
    if not isinstance(value, types) or (isinstance(value, str) and not value.strip()):
        want = " or ".join(t.__name__ for t in types)
        raise TaskFormatError(path, line, key, f"expected non-empty {want}, got {value!r:.60}")
    return value


def _without_thousands_commas(number: str, path: Path, line: int, field: str) -> str:
    """``number`` with its thousands commas removed (``1,234`` → ``1234``); commas that do not group
    thousands (``1,000,00``, a decimal comma ``4,5``) are refused: removing them gave another number."""
    if "," not in number:
        return number
    if not _THOUSANDS.fullmatch(number):
        raise TaskFormatError(path, line, field, f"{number!r:.60}: its commas do not separate thousands "
                                                 "(1,234,567); write the number without them")
    return number.replace(",", "")


def _gsm8k(rec: dict, path: Path, line: int) -> Problem:
    question = _require(rec, "question", path, line)
    answer = _require(rec, "answer", path, line)
    if "####" not in answer:
        raise TaskFormatError(path, line, "answer", "no '#### N' final answer")
    if (count := answer.count("####")) > 1:  # which one is meant is unknown: not silently the last
        finals = ", ".join("#### " + part.splitlines()[0].strip() if part.strip() else "####"
                           for part in answer.split("####")[1:])
        raise TaskFormatError(path, line, "answer", f"{count} '#### N' final answers ({finals:.80}); "
                                                    "a GSM8K answer has exactly one")
    gold = ascii_digits(answer.rsplit("####", 1)[1]).strip()  # "#### ٧" is 7
    if not gold:
        raise TaskFormatError(path, line, "answer", "empty final answer after '####'")
    gold = _without_thousands_commas(gold, path, line, "answer")
    if not _GSM8K_GOLD.fullmatch(gold):
        raise TaskFormatError(path, line, "answer", f"the final answer after '####' is not a number: {gold!r:.60}")
    return Problem(_id(rec, path, line), question.strip(), gold, "math", source="gsm8k")


def _gsm_hard(rec: dict, path: Path, line: int) -> Problem:
    question = _require(rec, "input", path, line)
    target = _require(rec, "target", path, line, (int, float, str))
    if isinstance(target, bool):
        raise TaskFormatError(path, line, "target", f"not a number: {target!r}")
    try:
        text = _without_thousands_commas(ascii_digits(str(target)).strip(), path, line, "target")
        whole = int(text) if re.fullmatch(r"[-+]?\d+", text) else None  # exactly: through float, 2**53 + 1 was 2**53
        value = float(text)
    except ValueError:
        raise TaskFormatError(path, line, "target", f"not a number: {target!r:.60}") from None
    if whole is not None:
        return Problem(_id(rec, path, line), question.strip(), str(whole), "math", source="gsm-hard")
    if not math.isfinite(value):  # NaN, Infinity, or beyond float range (1e400)
        raise TaskFormatError(path, line, "target", f"not a finite number: {target!r:.60}")
    gold = _whole(value) if value == int(value) else repr(value)
    return Problem(_id(rec, path, line), question.strip(), gold, "math", source="gsm-hard")


def _whole(value: float) -> str:
    """An integral float as the integer its shortest text names: ``1e23`` is ``10**23``, not the
    float's own ``99999999999999991611392`` (which no answer of 10**23 would match)."""
    return str(int(Decimal(repr(value))))


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces matched."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    j = i
    while j < len(text) and depth:
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
        j += 1
    if depth:
        return None
    return text[i : j - 1].strip()


def _math(rec: dict, path: Path, line: int) -> Problem:
    problem = _require(rec, "problem", path, line)
    gold = rec.get("answer")
    if gold is not None and not isinstance(gold, str):  # a number is its text; anything else is refused
        if isinstance(gold, bool) or not isinstance(gold, (int, float)) or isinstance(gold, float) and not math.isfinite(gold):
            raise TaskFormatError(path, line, "answer", f"must be text or a number, not {type(gold).__name__} {gold!r:.60}")
        gold = str(gold) if isinstance(gold, int) or gold != int(gold) else _whole(gold)
    if not (isinstance(gold, str) and gold.strip()):
        solution = _require(rec, "solution", path, line)
        gold = last_boxed(solution)
        if not gold:
            raise TaskFormatError(path, line, "solution", "no \\boxed{...} answer")
    meta = {k: rec[k] for k in ("subject", "level") if k in rec}
    return Problem(_id(rec, path, line), problem.strip(), ascii_digits(gold).strip(), "math", source="math", meta=meta)


def _check_texts(letters: list[str], texts: list, field: str, path: Path, line: int) -> None:
    """Option texts are strings: ``null`` or a number would be shown to the models as ``A. None``."""
    for letter, text in zip(letters, texts):
        if not isinstance(text, str):
            raise TaskFormatError(path, line, field, f"option {letter} is not a string: {text!r:.60}")


def _format_options(question: str, letters: list[str], texts: list[str]) -> str:
    options = "\n".join(f"{letter}. {str(text).strip()}" for letter, text in zip(letters, texts))
    return f"{question.strip()}\n{options}"


def _check_letters(letters: list[str], field: str, path: Path, line: int) -> None:
    """Option labels must be the first n letters (any order): answers are read as A..J."""
    if len(letters) < 2:
        raise TaskFormatError(path, line, field, "fewer than two options")
    if len(letters) > len(LETTERS):
        raise TaskFormatError(path, line, field, f"{len(letters)} options; at most {len(LETTERS)} (A-J) are supported")
    if len(set(letters)) != len(letters):
        raise TaskFormatError(path, line, field, f"duplicate option labels {letters} (labels are case-insensitive)")
    if set(letters) != set(LETTERS[: len(letters)]):
        raise TaskFormatError(path, line, field, f"option labels must be the letters A-{LETTERS[len(letters) - 1]}, "
                              f"got {letters}")


def _mc(rec: dict, path: Path, line: int) -> Problem:
    question = _require(rec, "question", path, line, (str, dict))
    if isinstance(question, dict):  # ARC's raw format: {"stem": ..., "choices": [{"text", "label"}, ...]}
        raw = question.get("choices")
        if not isinstance(raw, list) or not all(isinstance(c, dict) and "text" in c and "label" in c for c in raw):
            raise TaskFormatError(path, line, "question.choices",
                                  f"expected a list of {{\"text\", \"label\"}} objects, got {raw!r:.60}")
        rec = {**rec, "choices": {"text": [c["text"] for c in raw], "label": [c["label"] for c in raw]}}
        question = _require(question, "stem", path, line)
    if "options" in rec:  # MedQA; letters are case-insensitive: "a" is option A
        options = _require(rec, "options", path, line, (dict,))
        letters = [str(k).strip().upper() for k in options]
        texts = list(options.values())
        _check_letters(letters, "options", path, line)
        _check_texts(letters, texts, "options", path, line)
        gold = str(_require(rec, "answer_idx", path, line)).strip().upper()
        gold_field = "answer_idx"
    elif isinstance(rec.get("choices"), dict):  # ARC
        choices = rec["choices"]
        labels, texts = choices.get("label"), choices.get("text")
        if not isinstance(labels, list) or not isinstance(texts, list) or not labels or len(labels) != len(texts):
            raise TaskFormatError(path, line, "choices", "needs 'text' and 'label' lists of equal length")
        letters = [str(x).strip().upper() for x in labels]
        gold = str(_require(rec, "answerKey", path, line)).strip().upper()
        gold_field = "answerKey"
        if all(x.isascii() and x.isdigit() for x in letters):  # a few ARC items label options 1..n
            numbers = [str(i) for i in range(1, len(letters) + 1)]
            if letters != numbers:
                raise TaskFormatError(path, line, "choices", f"numeric labels must be {', '.join(numbers)} in order "
                                      f"(label k is the k-th option), got {letters}")
            if gold not in numbers:
                raise TaskFormatError(path, line, gold_field, f"{gold!r} is not one of the labels {numbers}")
            if len(numbers) > len(LETTERS):
                raise TaskFormatError(path, line, "choices", f"{len(numbers)} options; at most {len(LETTERS)} are supported")
            letters, gold = list(LETTERS[: len(numbers)]), LETTERS[int(gold) - 1]
        _check_letters(letters, "choices", path, line)
        _check_texts(letters, texts, "choices", path, line)
    elif isinstance(rec.get("choices"), list):  # MMLU
        texts = rec["choices"]
        if len(texts) < 2:
            raise TaskFormatError(path, line, "choices", "fewer than two options")
        if len(texts) > len(LETTERS):
            raise TaskFormatError(path, line, "choices", f"{len(texts)} options; at most {len(LETTERS)} (A-J) are supported")
        letters = list(LETTERS[: len(texts)])
        _check_texts(letters, texts, "choices", path, line)
        answer = rec.get("answer")
        if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(texts):
            gold = letters[answer]
        elif isinstance(answer, str) and answer.strip().upper() in letters:
            gold = answer.strip().upper()
        else:
            raise TaskFormatError(path, line, "answer", f"expected an index 0-{len(texts) - 1} or a letter, got {answer!r:.40}")
        gold_field = "answer"
    else:
        raise TaskFormatError(path, line, "options", "no 'options' (MedQA) or 'choices' (MMLU, ARC)")
    if gold not in letters:
        raise TaskFormatError(path, line, gold_field, f"{gold!r} is not one of the options {letters}")
    meta = {k: rec[k] for k in ("subject", "meta_info") if k in rec}
    return Problem(
        _id(rec, path, line), _format_options(question, letters, texts), gold, "mc",
        n_choices=len(letters), source="mc", meta=meta,
    )


_PROMPT_KEYS = ("prompt", "instruction", "text", "question", "problem", "input")
#: Fields the other formats read a gold answer from; a record with one of them is not a bare prompt.
_GOLD_KEYS = {"answer", "target", "solution", "answer_idx", "answerKey"}


def _prompt(rec: dict, path: Path, line: int) -> Problem:
    for loader in (_gsm8k, _mc, _math, _gsm_hard):
        try:
            return loader(rec, path, line)
        except TaskFormatError:
            continue
    for key in _PROMPT_KEYS:
        value = rec.get(key)
        if isinstance(value, str) and value.strip():
            if key == "instruction" and isinstance(rec.get("input"), str) and rec["input"].strip():
                value = f"{value.strip()}\n\n{rec['input'].strip()}"
            return Problem(_id(rec, path, line), value.strip(), None, "open", source="prompts")
    for key in _PROMPT_KEYS:  # a prompt field that is there but not text is named as such
        if key in rec and not isinstance(rec[key], str):
            raise TaskFormatError(path, line, key, f"must be text, not {type(rec[key]).__name__} {rec[key]!r:.60}")
    raise TaskFormatError(path, line, "prompt", f"no text field (one of {', '.join(_PROMPT_KEYS)})")


_LOADERS: dict[str, Callable[[dict, Path, int], Problem]] = {
    "gsm8k": _gsm8k,
    "gsm-hard": _gsm_hard,
    "math": _math,
    "mc": _mc,
    "prompts": _prompt,
}


def _id(rec: dict, path: Path, line: int) -> str:
    """The line's id: its ``id``, ``unique_id``, ``task_id`` or ``question_id`` (text or a whole
    number), else ``<file stem>-<line>``. An id of another type (an object, a list, ``true``, ``1.5``)
    or holding a control or invisible format character (a newline, U+202E) is refused: ids are
    printed in reports and typed back (``agora report question ID``). Spaces around an id are
    dropped (``"q1 "`` is ``q1``), so two ids that print alike are one id, refused as a duplicate."""
    for key in ("id", "unique_id", "task_id", "question_id"):
        if key not in rec or rec[key] is None:
            continue
        value = rec[key]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise TaskFormatError(path, line, key, f"an id is text or a whole number, got {type(value).__name__} {value!r:.60}")
        text = str(value).strip()
        if not text:
            continue
        for at, ch in enumerate(text):
            if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
                raise TaskFormatError(path, line, key, f"{text!r:.60} holds the control or invisible character {ch!r} at "
                                                       f"position {at}; ids are printed and typed, so use visible characters")
        return text
    return f"{path.stem}-{line}"


def _check_record(record: Any, path: Path, line: int) -> None:
    """Refuse a decoded line holding a lone UTF-16 surrogate (JSON ``"\\ud800"``) or a NUL
    (``"\\u0000"``) in a key or a string, or nested deeper than :data:`MAX_NESTING`; the field is named by its path
    (``choices[1]``, ``question.stem``). Iterative: a deep record cannot exhaust the stack."""
    todo: list[tuple[Any, str, int]] = [(record, "", 0)]
    while todo:
        value, field, depth = todo.pop()
        if isinstance(value, str):
            bad = UNSTORABLE.search(value)
            if bad:
                raise TaskFormatError(path, line, field or None, unstorable(bad.group(0)))
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth >= MAX_NESTING:
            top = re.split(r"[.\[]", field, maxsplit=1)[0]  # the line's field it is in
            raise TaskFormatError(path, line, top or None, f"JSON nested more than {MAX_NESTING} levels deep")
        items = list(value.items() if isinstance(value, dict) else enumerate(value))
        for key, item in reversed(items):  # popped in order: the first bad field is named
            if isinstance(key, str) and (bad := UNSTORABLE.search(key)):
                raise TaskFormatError(path, line, field or None, f"{unstorable(bad.group(0))} in the key {key!r:.60}")
            name = f"{field}[{key}]" if isinstance(key, int) else (f"{field}.{key}" if field else key)
            todo.append((item, name, depth + 1))


class _RepeatedKey(ValueError):
    """A JSON object that gives one key twice (``key``: the key)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook``: the object as a dict, refusing a key given twice.

    Raises:
        _RepeatedKey: naming the key."""
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return record


#: Where a bare CR (an old Mac file's line ending: a CR not followed by LF) ends a line.
_AFTER_BARE_CR = re.compile(rb"(?<=\r)(?!\n)")


def _read_lines(fh: Any, size: int) -> Iterator[bytes]:
    """The lines of the binary file ``fh``, each with its ending (LF, CRLF or a bare CR), read
    ``size`` bytes at most at a time (``fh.readline(size)``): a line longer than ``size`` comes out
    at least ``size`` bytes long and cut there, so that the caller refuses it without reading it whole.

    Raises:
        OSError: from ``fh.readline``.
    """
    pending = b""
    while True:
        chunk = fh.readline(size)
        data = pending + chunk
        if not data:
            return
        pieces = [p for p in _AFTER_BARE_CR.split(data) if p]
        whole = not chunk or chunk.endswith(b"\n")  # the end of a line (or of the file): every piece is a line
        pending = b"" if whole else pieces.pop()  # (read on: a line cut by size, or between a CR and its LF)
        if len(pending) >= size:  # a line too long: the caller refuses it
            pieces.append(pending)
            pending = b""
        yield from pieces


def missing_reason(path: Path) -> str:
    """Why ``path``, which does not exist, cannot be read: not found, or a symbolic link whose target
    does not exist or that links back to itself (``ls`` lists the link, so "not found" would puzzle)."""
    if not path.is_symlink():
        return "file not found"
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 and 3.12: a loop
        return "a symbolic link that links back to itself (a loop); give the file it should point to"
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # Python 3.13: a loop is an OSError
            return "a symbolic link that links back to itself (a loop); give the file it should point to"
    return f"a symbolic link to {os.readlink(path)}, which does not exist"


def iter_records(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for each non-blank line of a JSONL file (1-based lines).

    Raises:
        TaskFormatError: a missing, unreadable or non-UTF-8 file, something other than a regular
        file (a FIFO, ``/dev/zero``), a read error (``OSError``), a line that is not a JSON object,
        JSON nested deeper than :data:`MAX_NESTING`, an integer too long to convert, a key given
        twice in one object, a line longer than :data:`MAX_LINE_BYTES`, or a string holding a lone
        UTF-16 surrogate or a NUL; the message names the file and line (and the field).
    """
    path = Path(path)
    number = 0
    try:
        if path.is_dir():
            raise TaskFormatError(path, 0, None, "is a directory, not a JSONL file")
        if not path.exists():
            raise TaskFormatError(path, 0, None, missing_reason(path))
        if not path.is_file():  # a FIFO would block, /dev/zero never ends
            raise TaskFormatError(path, 0, None, "not a regular file (a FIFO, device or socket); give a JSONL file")
        fh = path.open("rb")
    except OSError as exc:  # permission denied, I/O error, ...
        raise TaskFormatError(path, 0, None, f"cannot read the file: {exc.strerror or exc}") from None
    with fh:
        lines = _read_lines(fh, MAX_LINE_BYTES + 2)  # bounded (room for "\r\n"): a huge line is never read whole
        while True:
            try:
                raw_bytes = next(lines, b"")
            except OSError as exc:  # a read error mid-file: the line being read
                raise TaskFormatError(path, number + 1, None, f"cannot read the file: {exc.strerror or exc}") from None
            if not raw_bytes:
                break
            number += 1
            if number == 1:
                utf16 = not_utf8(path, raw_bytes)
                if utf16 is not None:
                    raise TaskFormatError(path, 1, None, utf16)
                if raw_bytes.startswith(b"\x1f\x8b"):
                    raise TaskFormatError(path, 1, None, "gzip-compressed, not JSONL text; decompress it first "
                                          f"(gunzip -k {shlex.quote(str(path))})")
            if len(raw_bytes.rstrip(b"\r\n")) > MAX_LINE_BYTES:
                raise TaskFormatError(path, number, None, f"a line longer than {MAX_LINE_BYTES:,} bytes (no problem is "
                                      "that long: is this a JSONL file with one problem a line?)")
            try:
                raw = raw_bytes.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise TaskFormatError(path, number, None, f"not UTF-8 text (byte {exc.start + 1} of the line)") from None
            if not raw.strip():
                continue
            try:
                record = json.loads(raw, object_pairs_hook=_no_repeated_keys)
            except _RepeatedKey as exc:
                raise TaskFormatError(path, number, exc.key, "given twice in one JSON object (which one is meant?)") from None
            except json.JSONDecodeError as exc:
                spread = (" (one JSON object spread over several lines? A JSONL file holds each problem on one line)"
                          if raw.strip() in ("{", "[") else "")
                at = "" if exc.msg.endswith(" at") else " at"  # ("Unterminated string starting at")
                raise TaskFormatError(path, number, None, f"invalid JSON ({exc.msg}{at} column {exc.colno}){spread}") from None
            except RecursionError:  # the C decoder's bound (about 1000 levels) on Python's stack
                raise TaskFormatError(path, number, None, f"JSON nested more than {MAX_NESTING} levels deep") from None
            except ValueError as exc:  # an integer longer than sys.get_int_max_str_digits()
                what = (f"an integer of more than {sys.get_int_max_str_digits()} digits" if "digits" in str(exc)
                        else str(exc))
                raise TaskFormatError(path, number, None, f"invalid JSON ({what})") from None
            if not isinstance(record, dict):
                array = (" (a JSON array of the problems? A JSONL file holds one JSON object a line, not an array)"
                         if isinstance(record, list) and record and all(isinstance(r, dict) for r in record) else "")
                raise TaskFormatError(path, number, None, f"expected a JSON object, got {type(record).__name__}{array}")
            _check_record(record, path, number)
            yield number, record


def load_problems(path: str | Path | None, fmt: str, limit: int | None = None, seed: int = 0) -> list[Problem]:
    """Load up to ``limit`` problems from ``path`` in format ``fmt`` (one of :data:`FORMATS`).

    ``fmt="synthetic"`` generates problems with :func:`synthetic_problems` and takes no ``path``.

    Raises:
        TaskFormatError: unknown format, missing file, a file with ``fmt="synthetic"``, a
        malformed line (file, line, field), or an id given twice, also as a spelling that is the
        same id once compared as ids are (:func:`agora.tasks.problem.id_key`: ``q1`` and ``q1 ``
        or ``ｑ１``; naming both and the first one's line).
    """
    if fmt == "synthetic":
        if path is not None:
            raise TaskFormatError(path, 0, None, "format 'synthetic' generates its problems and reads no file; "
                                  "leave out the file, or choose the file's format "
                                  f"({', '.join(f for f in FORMATS if f != 'synthetic')})")
        from agora.tasks.synthetic import synthetic_problems

        return synthetic_problems(limit or 10, seed=seed)
    if fmt not in _LOADERS:
        raise TaskFormatError(path or "-", 0, None, f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if path is None:
        raise TaskFormatError("-", 0, None, f"format {fmt!r} needs a file")
    loader = _LOADERS[fmt]
    problems: list[Problem] = []
    seen: dict[str, tuple[str, int]] = {}  # id_key → (the id as written, its line)
    for number, record in iter_records(path):
        problem = loader(record, Path(path), number)
        first = seen.get(id_key(problem.id))
        if first is not None and first[0] == problem.id:
            raise TaskFormatError(path, number, "id", f"duplicate id {problem.id!r}")
        if first is not None:
            raise TaskFormatError(path, number, "id", f"id {problem.id!r} and id {first[0]!r} of line {first[1]} are "
                                  f"{SAME_ID}; give each question an id of its own")
        seen[id_key(problem.id)] = (problem.id, number)
        problems.append(problem)
        if limit is not None and len(problems) >= limit:
            break
    return problems


def problem_line(path: str | Path, fmt: str, problem_id: str) -> int | None:
    """The line of the problem file ``path`` (format ``fmt``) that holds the problem ``problem_id``
    (1-based), or ``None`` (not there, or a format that reads no file): for refusals that name a
    problem by its file and line after the file was loaded."""
    if fmt not in _LOADERS:
        return None
    for number, record in iter_records(path):
        if _LOADERS[fmt](record, Path(path), number).id == problem_id:
            return number
    return None


def detect_format(path: str | Path, hint: str | None = None) -> str:
    """Guess a problem file's format from its first record's fields: a text field of ``prompts``
    (``prompt``, ``instruction``, ``text``, ...) with no gold-answer field is ``prompts``.
    ``hint``: what the refusal tells the user to do (default: pass ``--format``, for commands
    that have it).

    Raises:
        TaskFormatError: the fields match no known format.
    """
    for number, rec in iter_records(path):
        if "input" in rec and "target" in rec:
            return "gsm-hard"
        if "question" in rec and isinstance(rec.get("answer"), str) and "####" in rec["answer"]:
            return "gsm8k"
        if "problem" in rec and ("answer" in rec or "solution" in rec):
            return "math"
        if "options" in rec or "choices" in rec or isinstance(rec.get("question"), dict):
            return "mc"
        if not _GOLD_KEYS & rec.keys() and any(isinstance(rec.get(k), str) and rec[k].strip() for k in _PROMPT_KEYS):
            return "prompts"
        raise TaskFormatError(path, number, None, f"cannot tell the format from fields {sorted(rec)}; "
                              + (hint or f"pass --format ({', '.join(FORMATS)})"))
    raise TaskFormatError(path, 0, None, "file has no records")
