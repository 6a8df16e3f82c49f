"""Probes of the CLI, round 12: a negative ``--seed`` where the seed feeds a bootstrap or a random
generator that takes none (numpy's): before, each command ended in ``internal error: ValueError
expected non-negative integer`` and a traceback (``agora duel`` and ``agora select`` after their
models had been asked), and ``agora bench`` after every run had finished. Now the option refuses it
as it parses, exit 2, nothing asked. The models are a loopback stub (tests/openai_stub.py) or
scripted."""

from __future__ import annotations

import json

import pytest

import agora.cli.bench as bench_cli
from cli_runs import agora
from openai_stub import StubServer
from test_bench import bench_args, scripted_pool, write_tasks


def _pool(tmp_path, url):
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nbase_url = "{url}"\nmodel = "{m}"\n'
                            "max_retries = 0\n" for m in ("m1", "m2", "m3")))
    return pool


def _prompts(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": f"#### {2 * i}"}) + "\n"
                               for i in range(1, 4)))
    return prompts


def _refused_seed(code: int, output: str) -> None:
    assert code == 2, output
    assert "internal error" not in output and "Traceback" not in output
    assert output.strip() == "error: --seed: must be at least 0, got -1", output


@pytest.mark.parametrize("command", ["duel", "select", "evolve"])
def test_a_negative_seed_of_a_command_drawing_with_numpy_is_refused_before_any_model_is_asked(tmp_path, command):
    with StubServer() as server:
        pool, prompts = _pool(tmp_path, server.base_url), _prompts(tmp_path)
        args = {"duel": ("duel", "--pool", pool, "--instructions", prompts, "-D", "2", "-T", "1"),
                "select": ("select", "--pool", pool, "--prompts", prompts, "--simulate", "latency_s=-1",
                           "--budget-rounds", "2", "--sim-seeds", "1", "--out", tmp_path / "sel"),
                "evolve": ("evolve", "--pool", pool, "--instructions", prompts, "-D", "2", "-T", "1",
                           "--out", tmp_path / "evo")}[command]
        code, output = agora(*args, "--seed", "-1", "--db", tmp_path / "t.db")
        assert server.requests == []
    _refused_seed(code, output)
    assert not (tmp_path / "t.db").exists()


def test_a_negative_bootstrap_seed_of_replay_and_report_diversity_is_refused(tmp_path):
    with StubServer() as server:
        pool = _pool(tmp_path, server.base_url)
        db = tmp_path / "t.db"
        code, output = agora("converse", "--pool", pool, "--limit", "1", "--turns", "2", "--models", "m1,m2",
                             "--db", db, "--run-id", "cv")
        assert code == 0, output
        code, output = agora("run", "align", "--pool", pool, "--format", "synthetic", "--limit", "2", "--db", db,
                             "--run-id", "a1")
        assert code == 0, output
    _refused_seed(*agora("replay", "--db", db, "--run-id", "a1", "--rule", "plurality", "--seed", "-1"))
    _refused_seed(*agora("report", "diversity", "--db", db, "--out", tmp_path / "div", "--min-turns", "1",
                         "--panel-size", "2", "--seed", "-1"))
    # the seeds these commands did take still work: 0 and one beyond 64 bits
    for seed in ("0", str(2 ** 64)):
        code, output = agora("replay", "--db", db, "--run-id", "a1", "--rule", "plurality", "--seed", seed)
        assert code == 0, output
        code, output = agora("report", "diversity", "--db", db, "--out", tmp_path / f"div{seed}", "--min-turns", "1",
                             "--panel-size", "2", "--seed", seed)
        assert code == 0, output


def test_a_negative_bench_seed_is_refused_before_any_run(tmp_path, monkeypatch):
    """Before: every protocol ran on every task and the bench's report (its paired bootstrap) then
    failed with an internal error."""
    calls = []
    math_file, mc_file = write_tasks(tmp_path)
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: calls.append(path) or scripted_pool())
    code, output = agora(*bench_args(math_file, mc_file, tmp_path / "t.db", tmp_path / "b", "--seed", "-1"))
    _refused_seed(code, output)
    assert calls == [] and not (tmp_path / "t.db").exists()


def test_a_math_answer_given_as_a_number_is_the_gold_not_passed_over_for_the_solution(tmp_path):
    """Before: a MATH line whose ``answer`` is a JSON number was scored against its solution's
    ``\\boxed{}`` (here 5, not 4), and without a solution refused as "field 'solution': missing"."""
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(rec) + "\n" for rec in [
        {"problem": "What is 2 + 2?", "answer": 4, "solution": "Surely \\boxed{5}"},
        {"problem": "What is 3 + 3?", "answer": 6.0},
        {"problem": "What is 1 / 2?", "answer": 0.5}]))
    with StubServer() as server:
        code, output = agora("run", "align", "--pool", _pool(tmp_path, server.base_url), "--format", "math",
                             "--data", data, "--db", tmp_path / "t.db", "--run-id", "m")
        assert code == 0, output
    import sqlite3

    conn = sqlite3.connect(tmp_path / "t.db")
    try:
        golds = conn.execute("select question, gold, correct from questions order by idx").fetchall()
    finally:
        conn.close()
    assert golds == [("What is 2 + 2?", "4", 1), ("What is 3 + 3?", "6", 0), ("What is 1 / 2?", "0.5", 0)]


@pytest.mark.parametrize("answer, shown", [("true", "bool True"), ('["4"]', "list ['4']"), ('{"v": 4}', "dict {'v': 4}")])
def test_a_math_answer_that_is_not_text_or_a_number_is_refused_naming_it(tmp_path, answer, shown):
    data = tmp_path / "math.jsonl"
    data.write_text('{"problem": "What is 2 + 2?", "answer": ' + answer + ', "solution": "\\\\boxed{4}"}\n')
    code, output = agora("run", "align", "--pool", _pool(tmp_path, "http://127.0.0.1:9/v1"), "--format", "math",
                         "--data", data, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert f"math.jsonl:1: field 'answer': must be text or a number, not {shown}" in output
    assert not (tmp_path / "t.db").exists()


def test_a_member_name_with_a_newline_is_refused_in_one_line(tmp_path):
    """Before: the name was printed raw in the refusal's ``models[0] (...)``, splitting it over two lines."""
    pool = tmp_path / "pool.toml"
    pool.write_text('[[models]]\nname = "a\\nb"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    code, output = agora("run", "align", "--pool", pool, "--format", "synthetic", "--limit", "1", "--db", tmp_path / "t.db")
    assert code == 2, output
    assert output.splitlines() == [f"error: {pool}: models[0] ('a\\nb'): field 'name': 'a\\nb' holds the control "
                                   "character '\\n' at position 1; use visible characters"]


def test_top_level_keys_of_a_pool_file_that_nothing_reads_are_named_in_a_warning(tmp_path, caplog):
    """Before: a ``[defaults]`` table (or any key beside ``[[models]]``) was ignored without a word, so
    the settings a user put there silently did not apply."""
    import logging

    from agora.models.pool import load_pool

    pool = tmp_path / "pool.toml"
    pool.write_text('# my pool\nlabel = "mine"\n\n[defaults]\ntemperature = 0.2\n\n[[models]]\nname = "m1"\n'
                    'backend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    with caplog.at_level(logging.WARNING, logger="agora.pool"):
        loaded = load_pool(pool)
    assert loaded.names == ["m1"] and loaded["m1"].spec.temperature is None
    assert [r.getMessage() for r in caplog.records if "top-level" in r.getMessage()] == [
        f"{pool}:2: top-level keys 'label', 'defaults' are ignored: a pool file is read for its [[models]] tables "
        "only (a setting of every member goes in each [[models]] table)"]
    caplog.clear()
    pool.write_text('[[models]]\nname = "m1"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    with caplog.at_level(logging.WARNING, logger="agora.pool"):
        load_pool(pool)
    assert not [r for r in caplog.records if "top-level" in r.getMessage()]


def _settings_file_refusal(tmp_path, config) -> str:
    code, output = agora("run", "debate", "--format", "synthetic", "--limit", "1", "--pool",
                         _pool(tmp_path, "http://127.0.0.1:9/v1"), "--config", config, "--db", tmp_path / "t.db")
    assert code == 2, output
    assert "Traceback" not in output and len(output.splitlines()) == 1, output
    assert not (tmp_path / "t.db").exists()
    return output.strip()


def test_a_settings_file_with_a_byte_order_mark_is_read_and_its_lines_counted_as_written(tmp_path):
    """Before: ``invalid TOML: Invalid statement (at line 1, column 1)`` for a file a Windows editor saved
    with a UTF-8 byte-order mark (pool files accept one)."""
    config = tmp_path / "run.toml"
    config.write_text("\ufeff# my debate\n[debate]\nrounds = 100000\n", encoding="utf-8")
    assert _settings_file_refusal(tmp_path, config) == (
        f"error: --config {config}:3: [debate] DebateConfig.rounds must be at most 10 (each question costs "
        "agents × rounds model calls), got 100000")


def test_a_settings_file_that_cannot_be_read_as_toml_is_named_for_what_it_is(tmp_path):
    """Before: UTF-16 text gave ``'utf-8' codec can't decode byte 0xff`` (no file named), a folder or a
    FIFO ``no such file``, and arrays nested 2000 deep a ``RecursionError`` (exit 1, nothing printed)."""
    import os

    config = tmp_path / "run.toml"
    config.write_text("[debate]\nrounds = 2\n", encoding="utf-16")
    assert _settings_file_refusal(tmp_path, config) == (
        f"error: --config {config}: a settings file must be UTF-8 text; it looks like UTF-16 (a byte-order mark or "
        "NUL bytes): save it as UTF-8")
    assert _settings_file_refusal(tmp_path, tmp_path) == (
        f"error: --config {tmp_path}: a folder, not a settings file; give the path of a TOML file")
    os.mkfifo(tmp_path / "fifo")
    assert _settings_file_refusal(tmp_path, tmp_path / "fifo") == (
        f"error: --config {tmp_path / 'fifo'}: not a regular file (a FIFO, device or socket); give the path of a TOML file")
    config.write_text("a = " + "[" * 2000 + "]" * 2000 + "\n")
    assert _settings_file_refusal(tmp_path, config) == f"error: --config {config}: invalid TOML: nested too deeply"


def test_a_simulated_users_feature_given_twice_is_refused_before_any_model_is_asked(tmp_path):
    """Before: ``--simulate latency_s=1,latency_s=2`` ran a session as if only ``latency_s=2`` had been
    given (the last won, silently)."""
    with StubServer() as server:
        code, output = agora("select", "--pool", _pool(tmp_path, server.base_url), "--prompts", _prompts(tmp_path),
                             "--simulate", "latency_s=1,latency_s=2", "--budget-rounds", "2", "--sim-seeds", "1",
                             "--db", tmp_path / "t.db", "--out", tmp_path / "sel")
        assert server.requests == []
    assert code == 2, output
    assert output.strip() == ("error: theta 'latency_s=1,latency_s=2': feature 'latency_s' is given twice; give each "
                              "feature once")


@pytest.mark.parametrize("cls", ["agora.agents.duel:DuelConfig", "agora.agents.cupid:CupidConfig",
                                 "agora.agents.panel:DiversityConfig"])
def test_settings_whose_seed_feeds_numpys_generator_refuse_a_negative_one(cls):
    """From Python (or a settings file) as from the options: before, ``DuelConfig(seed=-1)`` was taken
    and the run ended in numpy's ``expected non-negative integer`` at its first draw."""
    import importlib

    module, name = cls.split(":")
    settings = getattr(importlib.import_module(module), name)
    with pytest.raises(ValueError, match=rf"^{name}\.seed must be an integer >= 0, got -1$"):
        settings(seed=-1)
    assert settings(seed=2 ** 70).seed == 2 ** 70
