"""Bad input, fourth round: golds and replies in other scripts' digits, a reply that only repeats
the question, a bare variable after a boxed answer, ``export --force`` onto special files, run ids
with invisible characters, ``AGORA_*`` variables, damaged or crafted bundles, replay's options,
Studio without its extra. Each case is refused in one line naming what is wrong, or read right.
Fast (no real model)."""

import json
import sqlite3
from pathlib import Path

import pytest

import agora.cli.align as align_cli
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.tasks import load_problems
from agora.tasks.answers import find_answer
from agora.tasks.comparison import is_correct
from agora.tasks.values import ascii_digits
from cli_runs import agora, one_error_line


def write(path: Path, *lines) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n"
                            for line in lines), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- digits of other scripts

@pytest.mark.parametrize("digits, value", [("٧", "7"), ("７", "7"), ("१२", "12"), ("１,２５０", "1,250"), ("𝟕", "7")])
def test_digits_of_any_script_read_as_ascii(digits, value):
    assert ascii_digits(f"#### {digits}") == f"#### {value}"


def test_ascii_digits_leaves_other_compatibility_forms_alone():
    assert ascii_digits("x² + ½ = ﬁve") == "x² + ½ = ﬁve"  # NFKC would make this x2 + 1⁄2 = five


@pytest.mark.parametrize("gold_line, gold", [("#### ٧", "7"), ("#### ７", "7"), ("#### ١٢٣", "123")])
def test_a_gold_in_other_digits_loads_as_a_number_and_matches(tmp_path, gold_line, gold):
    data = write(tmp_path / "g.jsonl", {"question": "How many?", "answer": f"Count them.\n{gold_line}"})
    [problem] = load_problems(data, "gsm8k")
    assert problem.gold == gold
    assert is_correct(find_answer(f"The answer is {gold}.").answer, problem.gold)
    assert is_correct(find_answer(f"The answer is {gold}.").answer, gold_line.split()[-1])  # an unloaded gold too


@pytest.mark.parametrize("reply, answer", [("The answer is ٧.", "7"), ("#### ７", "7"), ("\\boxed{١٢}", "12"),
                                           ("So she has ٣ apples left.", "3")])
def test_a_reply_in_other_digits_is_read(reply, answer):
    found = find_answer(reply)
    assert found.answer == answer
    assert is_correct(found.answer, answer) and is_correct(found.answer, ascii_digits(answer))


@pytest.mark.parametrize("reply, answer", [("The answer is ٣٫٥.", "3.5"), ("The answer is ١٬٢٣٤.", "1234"),
                                           ("The answer is ３．５.", "3.5")])
def test_separators_of_other_scripts_between_digits_are_read(reply, answer):
    assert find_answer(reply).answer == answer  # not 3, the digits before the separator


@pytest.mark.parametrize("reply, answer", [("The answer is （Ｂ）.", "B"), ("Answer: Ｃ", "C")])
def test_fullwidth_option_letters_are_read(reply, answer):
    assert find_answer(reply, "mc").answer == answer


def test_a_reply_and_a_gold_in_two_scripts_compare_as_numbers():
    assert is_correct("٧", "７") and is_correct("7", "٧") and not is_correct("٨", "7")


def test_a_math_gold_in_other_digits_loads_as_ascii(tmp_path):
    data = write(tmp_path / "m.jsonl", {"problem": "Compute.", "solution": "So \\boxed{\\frac{١}{٢}}."})
    [problem] = load_problems(data, "math")
    assert problem.gold == "\\frac{1}{2}"


# ----------------------------------------------------------------------------- a reply that repeats the question

QUESTION = "Tom had 5 apples and ate 2, so he has 3 apples left. How many apples does Tom have left?"


@pytest.mark.parametrize("reply", [QUESTION, "Tom had 5 apples and ate 2, so he has 3 apples left.",
                                   f"Question: {QUESTION}"])
def test_a_reply_that_only_repeats_the_question_is_an_echo(reply):
    assert find_answer(reply).answer == "3"  # without the question: the number it repeats
    found = find_answer(reply, question=QUESTION)
    assert (found.answer, found.reason) == (None, "echo")


@pytest.mark.parametrize("reply, answer", [
    (f"{QUESTION} He ate 2 of 5, so 5 - 2 = 3. The answer is 3.", "3"),  # restates, then answers
    ("3", "3"),  # a number the question also names is no passage copied from it
    ("He has 3 apples left.", "3"),
    (f"{QUESTION}\n#### 3", "3"),
])
def test_a_reply_that_answers_is_no_echo(reply, answer):
    assert find_answer(reply, question=QUESTION).answer == answer


@pytest.fixture
def echoing(monkeypatch):
    """``run align`` on scripted models that repeat the question back."""
    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=[QUESTION], cycle=True) for m in ("a", "b")})
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    return pool


def test_a_run_does_not_credit_replies_that_repeat_the_question(tmp_path, echoing):
    data = write(tmp_path / "g.jsonl", {"id": "q1", "question": QUESTION, "answer": "5 - 2 = 3\n#### 3"})
    db = tmp_path / "t.db"
    code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", "R")
    assert code == 0, output
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select method, answer, correct from results where run_id = 'R'").fetchall()
    assert rows and all(answer is None and correct == 0 for _m, answer, correct in rows), rows
    with sqlite3.connect(db) as conn:  # each sample's stored reading agrees, so replay does not credit it either
        calls = conn.execute("select answer, how from model_calls where run_id = 'R' and error is null").fetchall()
    assert calls and set(calls) == {(None, "echo")}  # flagged in the trace
    code, output = agora("report", "run", "R", "--db", db)
    assert code == 0, output
    assert f"warning: {len(calls)} samples only repeat the question (echo)" in output
    from agora.traces.store import TraceStore
    from agora.training.align_pairs import question_candidates

    store = TraceStore(db, readonly=True)
    [question] = store.protocol_questions("align", ["R"])
    candidates = question_candidates(store, question)  # DPO's re-scoring of the samples: no echo is "correct"
    assert candidates and not any(c.correct for c in candidates)
    code, output = agora("replay", "--db", db, "--run-id", "R", "--rule", "plurality", "--json")
    assert code == 0, output
    assert [row["correct"] for row in json.loads(output)["rows"]] == [False]


# ----------------------------------------------------------------------------- a bare variable after a box

@pytest.mark.parametrize("reply", [
    "\\boxed{5}\n\nThe final answer is \\( a \\), where a = 5.",
    "Let \\( a \\) be the side. Then \\boxed{5}. Therefore, the answer is \\( a \\).",
    "\\boxed{5} and the answer is a.",
])
def test_a_bare_variable_does_not_win_over_a_boxed_value(reply):
    found = find_answer(reply)
    assert (found.answer, found.how) == ("5", "boxed")


def test_a_bare_variable_alone_is_still_read():
    assert find_answer("The answer is \\( a \\).").answer == "a"
    assert find_answer("\\boxed{5}. Actually no, the answer is 6.").answer == "6"  # a value still corrects a box


# ----------------------------------------------------------------------------- export --force onto special files

@pytest.fixture
def small_db(tmp_path, monkeypatch):
    """A trace DB holding run ``R``: ALIGN on two questions, scripted models answering 4."""
    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=["The answer is 4."], cycle=True)
                                       for m in ("a", "b")})
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    data = write(tmp_path / "g.jsonl", {"id": "q1", "question": "What is 2 + 2?", "answer": "#### 4"},
                 {"id": "q2", "question": "What is 3 + 1?", "answer": "#### 4"})
    db = tmp_path / "t.db"
    code, output = agora("run", "align", "--data", data, "--db", db, "--run-id", "R")
    assert code == 0, output
    return db


def test_export_force_refuses_to_replace_a_fifo(small_db, tmp_path):
    import os
    import stat

    fifo = tmp_path / "pipe.agora.jsonl.gz"
    os.mkfifo(fifo)
    code, output = agora("export", "--db", small_db, "--run-id", "R", "--out", fifo, "--force")
    assert code == 2, output
    assert one_error_line(output) == (f"error: --out {fifo}: a FIFO (named pipe), not a regular file; a bundle "
                                      "replaces only a regular file or a symbolic link (--force or not): pick a "
                                      "file path")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the pipe


def test_export_force_refuses_a_folder_and_replaces_a_file_or_a_symlink(small_db, tmp_path):
    import os

    folder = tmp_path / "d.agora.jsonl.gz"
    folder.mkdir()
    code, output = agora("export", "--db", small_db, "--run-id", "R", "--out", folder, "--force")
    assert code == 2 and "a folder, not a regular file" in one_error_line(output)
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    link = tmp_path / "link.agora.jsonl.gz"
    link.symlink_to(target)
    code, output = agora("export", "--db", small_db, "--run-id", "R", "--out", link, "--force")
    assert code == 0, output
    assert not link.is_symlink() and link.stat().st_size > 0 and target.read_text() == "keep me"
    code, output = agora("export", "--db", small_db, "--run-id", "R", "--out", link, "--force")  # a regular file now
    assert code == 0, output


def test_export_refuses_a_device_node(small_db, tmp_path):
    import os
    import stat

    device = tmp_path / "null"  # a device node of its own (never a system one: a regression would replace it)
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("making a device node needs root")
    code, output = agora("export", "--db", small_db, "--run-id", "R", "--out", device, "--force")
    assert code == 2 and f"{device}: a character device, not a regular file" in one_error_line(output)
    assert stat.S_ISCHR(os.lstat(device).st_mode)


# ----------------------------------------------------------------------------- run ids with invisible characters

@pytest.mark.parametrize("bad, said", [
    ("ab\u202ecd", "'ab\\u202ecd': holds the invisible format character '\\u202e' (RIGHT-TO-LEFT OVERRIDE) at "
                   "position 2"),
    ("a\u2066b", "'a\\u2066b': holds the invisible format character '\\u2066' (LEFT-TO-RIGHT ISOLATE) at position 1"),
    ("a\u200bb", "'a\\u200bb': holds the invisible format character '\\u200b' (ZERO WIDTH SPACE) at position 1"),
    ("a\u200db", "'a\\u200db': holds the invisible format character '\\u200d' (ZERO WIDTH JOINER) at position 1"),
    ("a\ufeffb", "'a\\ufeffb': holds the invisible format character '\\ufeff' (ZERO WIDTH NO-BREAK SPACE) at "
                 "position 1"),
    ("a\ud800b", "'a\\ud800b': holds the lone surrogate '\\ud800' at position 1 (half of a UTF-16 pair, not a "
                 "character)"),
])
def test_run_ids_with_invisible_characters_are_refused_naming_what_they_hold(tmp_path, small_db, bad, said):
    data = write(tmp_path / "q.jsonl", {"question": "What is 1 + 1?", "answer": "#### 2"})
    new_db = tmp_path / "new.db"
    for args, option in [(["run", "align", "--data", data, "--db", new_db, "--run-id", bad], "--run-id"),
                         (["report", "run", bad, "--db", small_db], "RUN_ID"),
                         (["export", "--db", small_db, "--run-id", bad, "--out", tmp_path / "x.agora.jsonl.gz"],
                          "--run-id")]:
        code, output = agora(*args)
        assert code == 2, (args, output)
        assert one_error_line(output) == (f"error: {option} {said}; run ids are printed and written to files, so use "
                                          "visible characters"), args
    assert not new_db.exists()


def test_run_ids_in_other_scripts_are_still_accepted(tmp_path, small_db):
    from agora.traces.store import check_run_id

    assert check_run_id("ablation-é-７-日本") == "ablation-é-７-日本"


# ----------------------------------------------------------------------------- AGORA_* variables

@pytest.mark.parametrize("name, value, said", [
    ("AGORA_LLAMA_THREADS", "abc", "error: AGORA_LLAMA_THREADS='abc': not a whole number from 1 (threads of the "
                                   "embedded llama.cpp engine); fix or unset it"),
    ("AGORA_LLAMA_THREADS", "0", "error: AGORA_LLAMA_THREADS='0': not a whole number from 1 (threads of the "
                                 "embedded llama.cpp engine); fix or unset it"),
    ("AGORA_LLAMA_SHARE_BATCHES", "false", "error: AGORA_LLAMA_SHARE_BATCHES='false': not 0 or 1 (`0`: each "
                                           "embedded request decodes alone (reproducible whatever runs beside "
                                           "it)); fix or unset it"),
    ("AGORA_POOL_DIR", "/no/such/folder", "error: AGORA_POOL_DIR='/no/such/folder': no such folder (folder a "
                                          "relative pool-file path in a graph's context is read from); fix or "
                                          "unset it"),
])
def test_a_bad_agora_variable_stops_every_command_in_one_line(tmp_path, monkeypatch, name, value, said):
    monkeypatch.setenv(name, value)
    for args in (["report", "runs", "--db", tmp_path / "none.db"], ["pool", "list"]):
        code, output = agora(*args)
        assert code == 2, output
        assert one_error_line(output) == said


def test_a_cache_dir_that_is_a_file_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    from agora.models.builtins import cache_dir
    from agora.models.environment import EnvironmentVariableError

    afile = tmp_path / "cache"
    afile.write_text("")
    monkeypatch.setenv("AGORA_CACHE_DIR", str(afile))
    code, output = agora("pool", "list")
    assert code == 2
    assert one_error_line(output) == (f"error: AGORA_CACHE_DIR={str(afile)!r}: a file, not a folder (folder of the "
                                      "joined built-in GGUF files (under `gguf/`)); fix or unset it")
    monkeypatch.setenv("AGORA_CACHE_DIR", str(afile / "below"))
    with pytest.raises(EnvironmentVariableError, match=f"{afile} is a file, so no folder can be made there"):
        cache_dir()  # from Python: the same check where the variable is read
    monkeypatch.setenv("AGORA_CACHE_DIR", str(tmp_path / "new"))
    assert cache_dir() == tmp_path / "new" / "gguf"  # a folder still to be made is fine


def test_threads_from_python_name_the_variable(monkeypatch):
    from agora.models._chat import default_threads

    monkeypatch.setenv("AGORA_LLAMA_THREADS", "abc")
    with pytest.raises(ValueError, match=r"^AGORA_LLAMA_THREADS='abc': not a whole number from 1"):
        default_threads()
    monkeypatch.setenv("AGORA_LLAMA_THREADS", "3")
    assert default_threads() == 3


def test_an_unknown_agora_variable_is_a_warning_naming_the_closest(tmp_path, monkeypatch):
    monkeypatch.setenv("AGORA_LLAMA_THREAD", "2")
    code, output = agora("report", "runs", "--db", tmp_path / "none.db")
    assert ("warning: AGORA_LLAMA_THREAD is set, but Agora reads no such variable (did you mean "
            "AGORA_LLAMA_THREADS?)") in output.splitlines()


def test_every_agora_variable_in_the_source_is_listed_and_documented():
    import re

    from agora.models.environment import VARIABLES

    root = Path(__file__).resolve().parents[1]
    used = set()
    for folder in ("agents", "cli", "graphs", "models", "runs", "tasks", "traces", "training", "benchmarks", "tests"):
        for path in (root / folder).rglob("*.py"):
            used |= set(re.findall(r"\bAGORA_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
    listed = {v.name for v in VARIABLES}
    used -= {"AGORA_LLAMA_THREAD"}  # the misspelling the test above sets
    assert used <= listed, sorted(used - listed)
    page = (root / "docs" / "environment.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in page for name in listed), sorted(n for n in listed if f"| `{n}` |" not in page)


# ----------------------------------------------------------------------------- bundles from elsewhere

@pytest.fixture
def bundle(small_db, tmp_path):
    """Run ``R`` of :func:`small_db` exported: its lines as parsed JSON."""
    out = tmp_path / "r.agora.jsonl.gz"
    code, output = agora("export", "--db", small_db, "--run-id", "R", "--out", out)
    assert code == 0, output
    return bundle_lines(out)


def bundle_lines(path):
    import gzip

    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_bundle(path, lines):
    import gzip

    with gzip.open(path, "wt", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def refused_import(bundle_path, db):
    code, output = agora("import", bundle_path, "--db", db)
    assert code == 2, output
    assert not Path(db).exists()  # nothing created
    return one_error_line(output)


@pytest.mark.parametrize("footer, said", [
    ({"end": True, "rows": [3, 4]}, "footer.rows: [3, 4] is not an object of row counts per table"),
    ({"end": True, "rows": {"runs": "one"}}, "footer.rows.runs: \"one\" is not a row count (an integer from 0)"),
    ({"end": "yes", "rows": {}}, "footer.end: \"yes\" is not true"),
])
def test_a_footer_of_the_wrong_shape_is_one_line(bundle, tmp_path, footer, said):
    bad = write_bundle(tmp_path / "bad.agora.jsonl.gz", bundle[:-1] + [footer])
    line = refused_import(bad, tmp_path / "target.db")
    assert line == f"error: {bad}:{len(bundle)}: {said}; nothing was imported"


def test_a_row_nested_100000_deep_is_one_line_not_a_recursion_error(bundle, tmp_path):
    deep = '{"t": "runs", "v": ' + "[" * 100_000 + "]" * 100_000 + "}"
    bad = write_bundle(tmp_path / "bad.agora.jsonl.gz", [bundle[0], deep] + bundle[1:])
    line = refused_import(bad, tmp_path / "target.db")
    assert line == f"error: {bad}:2: JSON nested deeper than 16 arrays or objects (a row is 2 deep); nothing was imported"


def test_a_number_of_thousands_of_digits_is_one_line_naming_its_line(bundle, tmp_path):
    """A number longer than Python's json reads (4,300 digits) is refused like any line that is not
    a bundle row: file and line, one line (not json's own ValueError)."""
    lines = [json.dumps(x) for x in bundle]
    lines[1] = '{"t": "runs", "v": [' + "7" * 5000 + "]}"
    bad = write_bundle(tmp_path / "bad.agora.jsonl.gz", lines)
    line = refused_import(bad, tmp_path / "target.db")
    assert line == (f"error: {bad}:2: a number of more than 4,300 digits (no bundle value is that long); "
                    "nothing was imported")


def test_brackets_inside_texts_are_no_nesting(bundle, tmp_path, small_db):
    from agora.traces.bundle_reading import _too_deep

    assert not _too_deep(json.dumps({"t": "model_calls", "v": ["[" * 500 + "{" * 500, 1]}))
    assert _too_deep("[" * 17 + "]" * 17)


def test_a_line_over_the_bound_is_refused_before_it_is_read_whole(bundle, tmp_path, monkeypatch):
    import agora.traces.bundle_reading as bundle_module

    monkeypatch.setattr(bundle_module, "MAX_LINE_CHARS", 20_000)  # (the header is a few kB)
    # 100,000 characters: past 4 x the bound in bytes, found in the fast first pass; 30,000: in the rows' pass
    for at, size in ((1, 100_000), (3, 30_000)):
        lines = [json.dumps(x) for x in bundle]
        lines.insert(at, json.dumps({"t": "runs", "v": ["x" * size]}))
        bad = write_bundle(tmp_path / f"bad{at}.agora.jsonl.gz", lines)
        line = refused_import(bad, tmp_path / "target.db")
        assert line == (f"error: {bad}:{at + 1}: a line longer than 20,000 characters (no bundle row is that long); "
                        "nothing was imported")


def test_missing_rows_are_found_from_the_footer_before_any_row_is_read(bundle, tmp_path):
    calls = [i for i, x in enumerate(bundle) if x.get("t") == "model_calls"]
    lines = [x for i, x in enumerate(bundle) if i not in calls[-3:]]  # three rows cut out of the middle...
    lines[1] = {"t": "no_such_table", "v": []}  # ...and line 2 is bad too: the footer's count is read first
    bad = write_bundle(tmp_path / "bad.agora.jsonl.gz", lines)
    line = refused_import(bad, tmp_path / "target.db")
    n = sum(1 for x in bundle if "t" in x)
    assert line == (f"error: {bad}: the footer counts {n} rows, the file holds {n - 3} lines between its header and "
                    "footer: rows are missing; nothing was imported")


@pytest.mark.parametrize("edit, said", [
    (lambda t: t["questions"].update(primary_key=["question_id"]),
     "tables.questions.primary_key: ['question_id'], but Agora's questions table has ['run_id', 'question_id']"),
    (lambda t: t["questions"]["columns"].update(correct="TEXT"),
     "tables.questions.columns.correct: declared \"TEXT\", but Agora's questions.correct is an integer (INTEGER)"),
    (lambda t: t["runs"]["columns"].pop("protocol"),
     "tables.runs.columns: no protocol column, which Agora's runs table has"),
])
def test_a_table_with_agoras_name_must_have_agoras_schema(bundle, tmp_path, edit, said):
    head = json.loads(json.dumps(bundle[0]))
    edit(head["tables"])
    rows = bundle[1:]
    if "protocol" not in head["tables"]["runs"]["columns"]:  # keep the rows the header's shape
        cols = list(bundle[0]["tables"]["runs"]["columns"])
        at = cols.index("protocol")
        rows = [{**x, "v": x["v"][:at] + x["v"][at + 1:]} if x.get("t") == "runs" else x for x in rows]
    bad = write_bundle(tmp_path / "bad.agora.jsonl.gz", [head] + rows)
    line = refused_import(bad, tmp_path / "target.db")
    assert line == (f"error: {bad}:1: {said}; the header is damaged or tampered with; nothing was imported")


def test_an_intact_bundle_still_imports(bundle, tmp_path):
    good = write_bundle(tmp_path / "good.agora.jsonl.gz", bundle)
    code, output = agora("import", good, "--db", tmp_path / "target.db")
    assert code == 0 and "imported" in output, output


# ----------------------------------------------------------------------------- "finished questions are saved"

def test_read_only_commands_do_not_say_finished_questions_are_saved(small_db, monkeypatch):
    import agora.cli.runs as runs_cli

    def locked(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(runs_cli, "run_rows", locked)
    code, output = agora("report", "runs", "--db", small_db)
    assert code == 2
    line = one_error_line(output)
    assert "locked" in line and "saved" not in output and "resume" not in output

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runs_cli, "run_rows", interrupted)
    code, output = agora("report", "runs", "--db", small_db)
    assert (code, output.strip()) == (130, "interrupted")


def test_a_running_command_still_says_what_is_saved(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(align_cli, "load_problems", interrupted)
    code, output = agora("run", "align", "--limit", "1", "--db", tmp_path / "t.db")
    assert code == 130
    assert "interrupted: finished questions are saved; rerun with the same --run-id to resume" in output


# ----------------------------------------------------------------------------- replay's options

@pytest.mark.parametrize("extra, said", [
    (["--rule", "weighted_vote", "--dev-run-id", "R"],
     "error: --dev-run-id R: the replayed run itself; weights measured on the questions they then score would count "
     "each answer's own correctness; give a run on other (dev) questions"),
    (["--rule", "align", "--param", "tau=0.9", "--param", "tau=0.5"],
     "error: --param tau: given twice (tau=0.9 and tau=0.5); give it once"),
    (["--rule", "plurality", "--param", "roles="],
     "error: --param roles=: an empty value; give one, or leave --param roles out for the protocol's default "
     "(agent on this align run)"),
    (["--rule", "plurality", "--param", "roles= , "],
     "error: --param roles= , : an empty value; give one, or leave --param roles out for the protocol's default "
     "(agent on this align run)"),
])
def test_replay_refuses_self_weights_a_repeated_param_and_an_empty_value(small_db, extra, said):
    code, output = agora("replay", "--db", small_db, "--run-id", "R", *extra)
    assert code == 2, output
    assert one_error_line(output) == said


def test_replay_still_takes_one_param_each(small_db):
    code, output = agora("replay", "--db", small_db, "--run-id", "R", "--rule", "plurality", "--param", "roles=agent")
    assert code == 0, output


# ----------------------------------------------------------------------------- agora studio without its extra

def test_studio_without_the_dev_server_is_one_line_before_any_url(monkeypatch, tmp_path):
    import agora.cli.studio as studio_cli

    monkeypatch.setattr(studio_cli, "SERVER_MODULES", ("langgraph_api", "agora_no_such_server_module"))
    started = []
    monkeypatch.setattr(studio_cli.subprocess, "Popen", lambda *a, **k: started.append(a))
    code, output = agora("studio", "--config", Path(__file__).resolve().parents[1] / "langgraph.json")
    assert code == 2 and not started
    assert one_error_line(output) == ("error: agora studio needs LangGraph's dev server (agora_no_such_server_module "
                                      "not installed), which Agora's dev extra installs: pip install "
                                      "\"agora-llm[dev]\" (in a checkout: pip install -e \".[dev]\")")
    assert "http://" not in output


def test_a_program_variable_takes_a_path_or_a_name_on_path():
    from agora.models.environment import EnvironmentVariableError, env_value

    assert env_value("AGORA_VLLM_PYTHON", {"AGORA_VLLM_PYTHON": "python3"}) == "python3"
    with pytest.raises(EnvironmentVariableError, match=r"^AGORA_VLLM_PYTHON='/no/such/python': no such program file"):
        env_value("AGORA_VLLM_PYTHON", {"AGORA_VLLM_PYTHON": "/no/such/python"})


@pytest.mark.parametrize("name", ["QUESTIONS", "Model_Calls"])
def test_a_table_spelled_in_another_case_is_agoras_table_to_sqlite(bundle, tmp_path, name):
    head = json.loads(json.dumps(bundle[0]))
    head["tables"][name] = {"columns": {"run_id": "TEXT", "evil": "TEXT"}, "primary_key": []}
    bad = write_bundle(tmp_path / "bad.agora.jsonl.gz", [head] + bundle[1:])
    line = refused_import(bad, tmp_path / "target.db")
    assert line == (f"error: {bad}:1: tables: {name!r} and {name.lower()!r} name one table (SQLite ignores the case "
                    "of table names); the header is damaged or tampered with")
    del head["tables"][name.lower()]
    rows = [x for x in bundle[1:] if x.get("t") != name.lower()]
    rows[-1] = {**rows[-1], "rows": {t: n for t, n in rows[-1]["rows"].items() if t != name.lower()}}
    bad = write_bundle(tmp_path / "bad2.agora.jsonl.gz", [head] + rows)
    line = refused_import(bad, tmp_path / "target.db")
    assert line == (f"error: {bad}:1: tables: {name!r} is Agora's {name.lower()} table spelled in another case; the "
                    "header is damaged or tampered with")


def test_importing_a_device_or_a_folder_says_what_it_is(tmp_path):
    import os

    code, output = agora("import", tmp_path, "--db", tmp_path / "target.db")
    assert code == 2
    assert one_error_line(output) == (f"error: {tmp_path}: a folder, not a bundle file; give the path of an "
                                      ".agora.jsonl.gz file")
    if os.path.exists("/dev/zero"):  # read from, never written
        code, output = agora("import", "/dev/zero", "--db", tmp_path / "target.db")
        assert code == 2 and one_error_line(output).startswith("error: /dev/zero: a character device, not a bundle")
    assert not (tmp_path / "target.db").exists()


def test_a_bench_table_with_another_key_is_refused(bundle, tmp_path):
    head = json.loads(json.dumps(bundle[0]))
    head["tables"]["bench_cells"] = {"columns": {"bench_id": "TEXT", "task": "TEXT", "method": "TEXT"},
                                     "primary_key": ["bench_id"]}
    bad = write_bundle(tmp_path / "bad.agora.jsonl.gz", [head] + bundle[1:])
    line = refused_import(bad, tmp_path / "target.db")
    assert line == (f"error: {bad}:1: tables.bench_cells.primary_key: ['bench_id'], but Agora's bench_cells table has "
                    "['bench_id', 'task', 'method']; the header is damaged or tampered with; nothing was imported")


def test_grpo_correctness_gives_an_echo_of_the_prompt_nothing():
    from agora.training.rewards import correctness_reward

    conversational = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": QUESTION}]
    rewards = correctness_reward(prompts=[QUESTION, conversational, QUESTION],
                                 completions=[QUESTION, [{"role": "assistant", "content": QUESTION}],
                                              "5 - 2 = 3. The answer is 3."],
                                 gold=["3", "3", "3"], kind=["math", "math", "math"])
    assert rewards == [0.0, 0.0, 1.0]
