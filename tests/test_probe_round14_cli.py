"""Probes of the CLI, round 14: task files in UTF-16 or with old-Mac line endings, ``agora report
question`` on a calibrated ALIGN run whose dev database is gone, ``agora replay``'s rule listing,
and a new user's or an attacker's edge cases of task files, pool files, options, trace databases
and bundles. The models are scripted (tests/test_align_principal.py's pool) or a loopback stub
(tests/openai_stub.py), never a real one."""

from __future__ import annotations

import json

import pytest

import agora.cli.align as align_cli
from cli_runs import agora, one_error_line
from test_align_principal import pool_of

ROWS = [{"id": "q1", "question": "What is 3 + 4?", "answer": "#### 7"},
        {"id": "q2", "question": "What is 5 + 1?", "answer": "#### 6"}]
TEXT = "".join(json.dumps(r) + "\n" for r in ROWS)


@pytest.mark.parametrize("encoding, data, said", [
    ("utf-16", TEXT.encode("utf-16"), "UTF-16 (little-endian) with a byte-order mark; save it as UTF-8 (e.g. "
                                      "iconv -f UTF-16 -t UTF-8 {path} > copy.utf8"),
    ("utf-16-be bom", b"\xfe\xff" + TEXT.encode("utf-16-be"), "UTF-16 (big-endian) with a byte-order mark"),
    ("utf-16-le", TEXT.encode("utf-16-le"), "UTF-16 (little-endian), no byte-order mark; save it as UTF-8 (e.g. "
                                            "iconv -f UTF-16LE -t UTF-8 {path}"),
    ("utf-16-be", TEXT.encode("utf-16-be"), "UTF-16 (big-endian), no byte-order mark; save it as UTF-8 (e.g. "
                                            "iconv -f UTF-16BE -t UTF-8 {path}"),
    ("utf-32", TEXT.encode("utf-32"), "UTF-32 (little-endian) with a byte-order mark; save it as UTF-8 (e.g. "
                                      "iconv -f UTF-32 -t UTF-8"),
])
def test_a_utf16_task_file_is_named_as_such_with_how_to_convert_it(tmp_path, encoding, data, said):
    """Before: ``t.jsonl:1: not UTF-8 text (byte 1 of the line)`` (with a byte-order mark), or
    ``invalid JSON (Expecting property name enclosed in double quotes at column 2)`` (without one:
    NUL bytes are UTF-8), naming neither UTF-16 nor how to convert the file."""
    from agora.tasks.loaders import TaskFormatError, load_problems

    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    with pytest.raises(TaskFormatError) as refused:
        load_problems(path, "gsm8k")
    assert str(refused.value).startswith(f"{path}:1: not UTF-8 text: it looks like ")
    assert said.format(path=path) in str(refused.value)
    code, output = agora("run", "align", "--data", path, "--format", "gsm8k", "--db", tmp_path / "t.db")
    assert code == 2 and "it looks like UTF-" in one_error_line(output), output
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("ending", ["\r", "\r\n", "\n"])
def test_a_task_file_with_old_mac_line_endings_is_read_line_by_line(tmp_path, ending):
    """Before: a file whose lines end in a bare CR was one line: ``t.jsonl:1: invalid JSON (Extra
    data at column 56)``."""
    from agora.tasks.loaders import TaskFormatError, load_problems

    path = tmp_path / "t.jsonl"
    path.write_bytes(("\ufeff" + TEXT).replace("\n", ending).encode("utf-8"))
    assert [(p.id, p.gold) for p in load_problems(path, "gsm8k")] == [("q1", "7"), ("q2", "6")]
    # line numbers count each ending once, whatever it is
    path.write_bytes((TEXT + '{"id": "q3", "question": "x?"}\n').replace("\n", ending).encode("utf-8"))
    with pytest.raises(TaskFormatError) as refused:
        load_problems(path, "gsm8k")
    assert str(refused.value) == f"{path}:3: field 'answer': missing"


def test_report_question_on_a_calibrated_run_whose_dev_db_is_gone_still_explains_it(tmp_path, monkeypatch):
    """Before: ``error: run 'C' was recorded with utility = calibrated, and replay cannot read its
    member reliabilities (...)`` and nothing else (exit 2): the recorded candidates, answers and
    scores were not shown."""
    pool, _ = pool_of(a=["The answer is 12."], b=["The answer is 7."], agg=["The answer is 12."])
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "Tom has 3 apples and buys 4 more. How many?",
                                "answer": "#### 7"}) + "\n")
    dev_db, db = tmp_path / "dev.db", tmp_path / "t.db"
    for where, run_id, extra in ((dev_db, "D", ()), (db, "C", ("--utility", "calibrated", "--dev-run", "D",
                                                               "--dev-db", dev_db))):
        code, output = agora("run", "align", "--data", data, "--db", where, "--run-id", run_id, "--models", "a,b",
                             "--concurrency", "1", *extra)
        assert code == 0, output
    code, output = agora("report", "question", "--db", db, "--run-id", "C", "--question-id", "q1", "--json")
    assert code == 0 and json.loads(output).get("notes", []) == [], output
    dev_db.unlink()
    code, output = agora("report", "question", "--db", db, "--run-id", "C", "--question-id", "q1")
    assert code == 0, output
    assert "Traceback" not in output and "error" not in output
    note = f"the calibrated utilities cannot be recomputed: dev run 'D': trace database {dev_db} not found"
    assert [line for line in output.splitlines() if line.startswith("note: ")] == [f"note: {note}"]
    code, output = agora("report", "question", "--db", db, "--run-id", "C", "--question-id", "q1", "--json")
    assert code == 0, output
    r = json.loads(output)
    assert r["notes"] == [note]
    assert sorted((s["model"], s["answer"], s["correct"]) for s in r["samples"]) == [
        ("a", "12", False)] * 3 + [("b", "7", True)] * 3
    methods = {m["method"]: m for m in r["methods"]}
    assert (methods["align"]["answer"], methods["align"]["correct"]) == ("7", True)
    assert methods["align"]["why"] == "recorded (rule align cannot recompute its calibrated utilities: see the note)"
    assert methods["best_of_n"]["why"] == ("recorded (rule best_of_n cannot recompute its calibrated utilities: "
                                           "see the note)")
    assert methods["self_consistency"]["why"] == "rule plurality: 0.50 of 6 votes; '12'×3, '7'×3"


def test_replay_lists_every_rules_parameters_with_defaults_optional_ones_too():
    """Before: ``align``'s row listed ``tau=0.5, proposal_rule='plurality'`` without the ``utility``
    it takes (``--param utility=calibrated``)."""
    from agora.cli.replay import rule_params
    from agora.traces.replay_rules import RULES

    assert rule_params(RULES["align"]) == "tau=0.5, proposal_rule='plurality', utility='agreement'"
    assert rule_params(RULES["best_of_n"]) == "proposal_rule='plurality', utility='agreement'"
    code, output = agora("replay")
    assert code == 0, output
    params: dict[str, list[str]] = {}  # rule → its parameters cell's lines (the table wraps them)
    rule = ""
    for line in output.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 5:
            rule = cells[0] or rule
            params.setdefault(rule, []).append(cells[2])
    assert " ".join(params["align"]).split() == "tau=0.5, proposal_rule='plurality', utility='agreement'".split()
    assert " ".join(params["best_of_n"]).split() == "proposal_rule='plurality', utility='agreement'".split()


# ---------------------------------------------------------------------------- round 14's own probes


@pytest.mark.parametrize("name, data, said", [
    ("t.jsonl.gz", None, "{path}:1: gzip-compressed, not JSONL text; decompress it first (gunzip -k {path})"),
    ("arr.jsonl", json.dumps(ROWS).encode(), "{path}:1: expected a JSON object, got list (a JSON array of the "
                                             "problems? A JSONL file holds one JSON object a line, not an array)"),
    ("pretty.jsonl", json.dumps(ROWS[0], indent=2).encode(),
     "{path}:1: invalid JSON (Expecting property name enclosed in double quotes at column 1) (one JSON object spread "
     "over several lines? A JSONL file holds each problem on one line)"),
])
def test_a_compressed_array_or_pretty_printed_task_file_is_named_for_what_it_is(tmp_path, name, data, said):
    """Before: ``t.jsonl.gz:1: not UTF-8 text (byte 2 of the line)``, ``expected a JSON object, got
    list`` and ``invalid JSON (Expecting property name ... at column 1)``, none saying what the file is."""
    import gzip

    from agora.tasks.loaders import TaskFormatError, load_problems

    path = tmp_path / name
    path.write_bytes(gzip.compress(TEXT.encode()) if data is None else data)
    with pytest.raises(TaskFormatError) as refused:
        load_problems(path, "gsm8k")
    assert str(refused.value) == said.format(path=path)


def test_a_dangling_or_looping_symlink_as_task_file_is_named_as_a_link(tmp_path):
    """Before: ``file not found`` for a path that ``ls`` lists."""
    from agora.tasks.loaders import TaskFormatError, load_problems

    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "gone.jsonl")
    (tmp_path / "loop.jsonl").symlink_to(tmp_path / "loop.jsonl")
    for name, said in (("dangling.jsonl", f"a symbolic link to {tmp_path / 'gone.jsonl'}, which does not exist"),
                       ("loop.jsonl", "a symbolic link that links back to itself (a loop); give the file it should "
                                      "point to")):
        with pytest.raises(TaskFormatError) as refused:
            load_problems(tmp_path / name, "gsm8k")
        assert str(refused.value) == f"{tmp_path / name}: {said}"
    with pytest.raises(TaskFormatError, match=r"nope.jsonl: file not found$"):
        load_problems(tmp_path / "nope.jsonl", "gsm8k")


POOL = '[[models]]\nname = "m"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\nmax_retries = 0\n'


def test_a_pool_or_settings_file_in_utf16_without_a_mark_or_with_old_mac_endings(tmp_path):
    """Before: a UTF-16 pool file without a byte-order mark gave ``invalid TOML: Invalid initial
    character for a key part (at line 1, column 2)`` (NUL bytes decode as UTF-8), and a pool or
    ``--config`` file whose lines end in a bare CR ``invalid TOML: Expected newline or end of
    document after a statement (at line 1, column 9)``."""
    from agora.cli._run import config_table
    from agora.models.pool import PoolConfigError, load_pool
    from agora.agents.debate import DebateConfig
    from agora.tasks.errors import InputError

    pool = tmp_path / "pool.toml"
    pool.write_bytes(POOL.encode("utf-16-le"))
    with pytest.raises(PoolConfigError) as refused:
        load_pool(pool)
    assert str(refused.value) == (f"{pool}: a pool file must be UTF-8 text; it looks like UTF-16 (a byte-order mark "
                                  "or NUL bytes): save it as UTF-8")
    pool.write_bytes(POOL.replace("\n", "\r").encode())
    assert load_pool(pool).names == ["m"]
    config = tmp_path / "run.toml"
    config.write_bytes("[debate]\rrounds = 2\r".encode("utf-16-be"))
    with pytest.raises(InputError, match="a settings file must be UTF-8 text; it looks like UTF-16"):
        config_table(config, "debate", DebateConfig)
    config.write_bytes(b"[debate]\rrounds = 2\r")
    assert config_table(config, "debate", DebateConfig)[0] == {"rounds": 2}


def test_a_misspelt_built_in_pool_name_is_answered_with_the_near_one(tmp_path):
    code, output = agora("run", "align", "--pool", "defualt", "--format", "synthetic", "--db", tmp_path / "t.db")
    assert code == 2
    assert one_error_line(output) == ("error: defualt: pool file not found (built-in pools: default, tiny, diverse; did "
                                      "you mean default?)")


@pytest.mark.parametrize("args", [
    ("run", "align", "--format", "synthetic", "--limit", "1", "--pool", "POOL", "--db", ":memory:"),
    ("report", "runs", "--db=:memory:"),
    ("export", "--db", ":memory:", "--out", "x.gz"),
    ("run", "align", "--format", "synthetic", "--limit", "1", "--pool", "POOL", "--utility", "calibrated",
     "--dev-run", "d1", "--dev-db", ":memory:"),
])
def test_sqlites_in_memory_database_as_trace_database_is_refused(tmp_path, args):
    """Before: ``agora run align --db :memory:`` ran every question and printed ``traces: :memory:``
    (exit 0): every trace was gone when the command ended. A report said ``:memory:: no such trace
    database``."""
    from openai_stub import StubServer

    with StubServer() as server:
        pool = tmp_path / "pool.toml"
        pool.write_text(POOL.replace("http://127.0.0.1:9/v1", server.base_url) + POOL.replace(
            "http://127.0.0.1:9/v1", server.base_url).replace('"m"', '"m2"'))
        code, output = agora(*[pool if a == "POOL" else a for a in args])
    assert code == 2, output
    option = "--dev-db" if "--dev-db" in args else "--db"
    assert one_error_line(output) == (f"error: {option} :memory:: SQLite's in-memory database keeps nothing once the "
                                      "command ends; give a database file (e.g. agora.db) or a postgresql:// URL")
