"""Probes of the CLI, round 17: integer options out of range or not integers (``--limit 0``, ``-k
-1``, a full-width digit, a minus sign from a word processor, a number of 5000 digits) and required
options left out, which got typer's usage box of five lines where float options already got
Agora's one line; and the same task file given twice to ``agora bench --tasks``, which counted it
twice in the macro average. Nothing here reaches a model: each command is refused as it parses
(the pool is fake, ``FakeListChatModel`` in a ``--pool`` TOML)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli_runs import agora, fake_pool

_pool = fake_pool


def _data(folder: Path, name: str = "q.jsonl", n: int = 2) -> Path:
    path = folder / name
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"})
                            + "\n" for i in range(1, n + 1)))
    return path


# ---------------------------------------------------------------------------------- integer options


@pytest.mark.parametrize("args, said", [
    (("run", "align", "--limit", "0"), "error: --limit: must be at least 1, got 0"),
    (("run", "align", "-n", "0"), "error: --agents: must be at least 1, got 0"),
    (("run", "align", "-k", "-1"), "error: --samples: must be at least 1, got -1"),
    (("run", "align", "--max-tokens", "0"), "error: --max-tokens: must be an integer from 1 to 1000000, got 0"),
    (("run", "align", "--limit", "two"), "error: --limit: must be an integer, got 'two'"),
    (("run", "align", "--limit", "1.5"), "error: --limit: must be an integer, got '1.5'"),
    (("run", "align", "--limit", "\uff15"),
     "error: --limit: must be an integer, got '\uff15' (it holds FULLWIDTH DIGIT FIVE; type ASCII digits and '-')"),
    (("run", "align", "--limit", "\u22121"),
     "error: --limit: must be an integer, got '\u22121' (it holds MINUS SIGN; type ASCII digits and '-')"),
    (("run", "align", "--limit", "1_000"), "error: --limit: must be an integer, got '1_000'"),
    (("run", "align", "--limit", "1" + "0" * 5000),
     "error: --limit: must be at least 1, got 1" + "0" * 39 + "... (5001 characters)"),
    (("converse", "--turns", "0"), "error: --turns: must be at least 2, got 0"),
    (("bench", "--tasks", "x.jsonl", "--debate-rounds", "0"), "error: --debate-rounds: must be at least 1, got 0"),
    (("duel", "--instructions", "x.jsonl", "--judge-shots", "3"),
     "error: --judge-shots: must be an integer from 0 to 2, got 3"),
])
def test_an_integer_option_refused_as_it_is_parsed_is_one_line(tmp_path, args, said):
    """Before: typer's usage box (``Invalid value for '--limit': Input should be greater than or
    equal to 1``); a full-width ``５`` was "unable to parse string as an integer" without saying why."""
    code, output = agora(*args, "--pool", _pool(tmp_path), "--db", tmp_path / "t.db")
    assert code == 2 and output.strip() == said, output
    assert not (tmp_path / "t.db").exists()


def test_integer_options_still_take_numbers_spaces_and_a_plus_sign():
    import typer

    from agora.cli._apps import bounded_int

    parse = bounded_int(1, 8, "--limit")
    assert [parse(v) for v in ("1", " 8 ", "+3", 5, None)] == [1, 8, 3, 5, None]
    assert bounded_int(None, None, "--seed")("-7") == -7
    with pytest.raises(typer.BadParameter, match=r"^must be an integer from 1 to 8, got 9$"):
        bounded_int(1, 8)("9")


def test_every_integer_option_has_the_parser_and_keeps_its_default():
    """Each ``int`` option of every command parses through :func:`bounded_int`, its bounds those
    it declared (so ``--help`` and the defaults are unchanged)."""
    import inspect

    from agora.cli.main import app

    def commands(typer_app):
        for info in typer_app.registered_commands:
            yield info.callback
        for group in typer_app.registered_groups:
            yield from commands(group.typer_instance)

    seen = 0
    for callback in commands(app):
        for param in inspect.signature(callback).parameters.values():
            option = param.default
            if getattr(option, "param_decls", None) is not None and param.annotation in (int, "int"):
                assert option.parser is not None, (callback.__name__, param.name)
                if option.default not in (None, ...):
                    assert option.parser(option.default) == option.default
                seen += 1
    assert seen > 40


@pytest.mark.parametrize("args, said", [
    (("duel",), "error: --instructions: required option, not given"),
    (("report", "question", "--run-id", "r", "--db", "{t}/t.db"), "error: --question-id: required option, not given"),
    (("export", "--db", "{t}/t.db", "--run-id", "r"), "error: --out: required option, not given"),
    (("import",), "error: BUNDLE: required argument, not given"),
    (("train", "dpo", "--out", "{t}/o"), "error: --model: required option, not given"),
])
def test_a_required_option_left_out_is_one_line(tmp_path, args, said):
    """Before: typer's usage box (``Missing option '--instructions'.``)."""
    code, output = agora(*[a.format(t=tmp_path) for a in args])
    assert code == 2 and output.strip() == said, output
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------- the same task twice


def test_the_same_task_file_twice_is_refused_naming_it_and_its_positions(tmp_path):
    """Before: ``--tasks a.jsonl,a.jsonl`` ran the file twice (the second as ``<folder>-a``) and the
    macro average counted it twice. A link to it or a path spelt otherwise is the same file."""
    data = _data(tmp_path, "a.jsonl")
    os.symlink(data, tmp_path / "link.jsonl")
    db = tmp_path / "t.db"
    for spec, first, second, shown in [(f"{data},{data}", 1, 2, data),
                                       (f"{data},{_data(tmp_path, 'b.jsonl')},x={tmp_path}/./a.jsonl", 1, 3,
                                        f"{tmp_path}/a.jsonl"),
                                       (f"{tmp_path / 'link.jsonl'},{data}", 1, 2, data)]:
        code, output = agora("bench", "--tasks", spec, "--pool", _pool(tmp_path), "--db", db)
        assert code == 2 and output.strip() == (f"error: --tasks: '{shown}' is given twice (task files {first} and "
                                                f"{second} are the same file); give each task file once"), output
    assert not db.exists()


def test_two_task_files_of_the_same_stem_are_two_tasks(tmp_path):
    from agora.runs.bench_tasks import load_tasks

    (tmp_path / "other").mkdir()
    one, two = _data(tmp_path, "a.jsonl"), _data(tmp_path / "other", "a.jsonl", n=3)
    first, second = load_tasks(f"{one},{two}")
    assert (first.name, len(first.problems)) == ("a", 2)
    assert (second.name, len(second.problems)) == ("other-a", 3)
