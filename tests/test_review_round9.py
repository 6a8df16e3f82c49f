"""Review round 9: what a code review found still wrong, each with its fix."""

from __future__ import annotations

import logging
import socket

import pytest
from openai_stub import StubServer

from agora.models.pool import (ModelCallError, ModelSpec, PoolConfigError, SamplingParams, load_pool,
                               pool_from_specs)

MSG = [{"role": "user", "content": "What is 2 + 2?"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- 1. an endpoint's password


@pytest.mark.parametrize("line, shown", [
    ('base_url = "ftp://ann:s3cret@h/v1"', "field 'base_url': 'ftp://ann:***@h/v1' is not an http:// or https:// URL"),
    ('endpoints = ["http://ann:s3cret@/v1"]', "field 'endpoints': 'http://ann:***@/v1' has no host"),
    ('base_url = "http://ann:s3cret@h:99999/v1"', "field 'base_url': 'http://ann:***@h:99999/v1' is not a URL"),
])
def test_a_refused_base_url_is_shown_without_its_password(tmp_path, line, shown):
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "openai"\nmodel = "m"\n{line}\n', encoding="utf-8")
    with pytest.raises(PoolConfigError) as err:
        load_pool(pool)
    assert "s3cret" not in str(err.value)
    assert str(err.value).startswith(f"{pool}: models[0] (m): {shown}")


def test_an_unreachable_endpoint_is_logged_and_recorded_without_its_password(caplog):
    dead = f"127.0.0.1:{_free_port()}/v1"
    pool = pool_from_specs([ModelSpec(name="m", backend="openai", model="stub", max_retries=0,
                                      endpoints=(f"http://ann:s3cret@{dead}",))])
    with caplog.at_level(logging.ERROR, logger="agora.openai"), pytest.raises(ModelCallError) as info:
        pool.sample("m", MSG, SamplingParams())
    assert f"endpoint http://ann:***@{dead} is unreachable" in caplog.text
    assert f"http://ann:***@{dead}: " in info.value.records[0]["error"]
    assert "s3cret" not in caplog.text and "s3cret" not in str(info.value) and "s3cret" not in str(info.value.records)


def test_a_servers_error_names_its_endpoint_without_the_password(caplog):
    with StubServer(lambda path, body: (200, {"error": {"message": "bad key", "code": 401}})) as srv:
        url = srv.base_url.replace("http://", "http://ann:s3cret@")
        pool = pool_from_specs([ModelSpec(name="m", backend="openai", model="stub", max_retries=0, base_url=url)])
        samples, records = pool.sample("m", MSG, SamplingParams())
    shown = srv.base_url.replace("http://", "http://ann:***@")
    assert samples == [] and records[0]["error"] == \
        f"InvalidReplyError: model m at {shown} sent an error with status 200: bad key (401)"


# ----------------------------------------------------------------------------- 2. a suggested command that connects


class _StoreWithoutRuns:
    """A trace store whose database holds no ``runs`` table: all that the no-such-run check reads."""

    def __init__(self, path: str):
        self.path = path
        self.db = type("Db", (), {"table_names": staticmethod(lambda: [])})()

    def run_ids(self, prefix: str = "") -> list[str]:  # (the look-alike note reads them: none here)
        return []


@pytest.mark.parametrize("read", ["run_summary", "load_run"])
def test_no_such_run_suggests_a_command_without_the_password_that_connects(read):
    """The message showed ``--db postgresql://ann:***@h/db`` once the CLI masked it: a command that
    cannot connect (and, from Python, the URL with its password)."""
    from agora.traces.run_list import run_summary
    from agora.traces.run_trace import load_run

    store = _StoreWithoutRuns("postgresql://ann:s3cret@h:5432/db?sslmode=require")
    with pytest.raises(ValueError) as err:
        {"run_summary": run_summary, "load_run": load_run}[read](store, "r1")
    assert str(err.value) == (
        "postgresql://ann:***@h:5432/db?sslmode=require: no run 'r1' "
        "(`agora report runs --db 'postgresql://ann@h:5432/db?sslmode=require'` lists them "
        "(the password is left out: set PGPASSWORD, or a ~/.pgpass line, to give it))")


@pytest.mark.parametrize("read", ["run_summary", "load_run"])
def test_no_such_run_suggests_a_sqlite_path_quoted_as_a_shell_reads_it(read):
    from agora.traces.run_list import run_summary
    from agora.traces.run_trace import load_run

    store = _StoreWithoutRuns("my runs/t.db")
    with pytest.raises(ValueError) as err:
        {"run_summary": run_summary, "load_run": load_run}[read](store, "r1")
    assert str(err.value) == "my runs/t.db: no run 'r1' (`agora report runs --db 'my runs/t.db'` lists them)"


# ----------------------------------------------------------------------------- 3. --tasks "name= path"


def test_tasks_name_and_path_are_both_stripped(tmp_path):
    """``--tasks "mine= file.jsonl"`` kept the path's leading space: ' file.jsonl' was not found."""
    from pathlib import Path

    from agora.runs.bench_tasks import load_tasks

    path = tmp_path / "arith.jsonl"
    path.write_text('{"question": "What is 2 + 2?", "answer": "2 + 2 = 4\\n#### 4"}\n'
                    '{"question": "What is 3 + 4?", "answer": "3 + 4 = 7\\n#### 7"}\n', encoding="utf-8")
    copy = tmp_path / "arith2.jsonl"  # (the same file twice is refused: it would count twice)
    copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    mine, other, sample = load_tasks(f"mine = {path}, other=  {copy} ,gsm = sample")
    assert (mine.name, mine.path, mine.format) == ("mine", Path(path), "gsm8k")
    assert (other.name, other.path) == ("other", Path(copy))
    assert [p.gold for p in mine.problems] == ["4", "7"]
    assert sample.name == "gsm"


# ----------------------------------------------------------------------------- 4. the option a refusal names


def _said(args: list[str], message: str) -> str:
    """What :func:`agora.cli._shared.with_option` makes of ``message`` inside a command run with
    ``args`` (options ``--max-tokens``, ``--judge-max-tokens``, ``--proposers``, ``--dev-accuracy``)."""
    import typer
    from typer.testing import CliRunner

    from agora.cli._shared import with_option

    app = typer.Typer()

    @app.command()
    def run(max_tokens: int = typer.Option(64, "--max-tokens"), judge_max_tokens: int = typer.Option(64, "--judge-max-tokens"),
            proposers: str = typer.Option("m1", "--proposers"), dev_accuracy: str = typer.Option("", "--dev-accuracy")) -> None:
        print(with_option(message))

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output.strip()


@pytest.mark.parametrize("args, message, option", [
    # the refused value is another option's (--judge-max-tokens gave JudgeConfig.max_tokens): the field only
    (["--max-tokens", "64", "--judge-max-tokens", "2000"], "JudgeConfig.max_tokens must be at most 1000, got 2000", None),
    # no value in the message to tell where it came from: the field only
    (["--max-tokens", "64"], "JudgeConfig.max_tokens: more than the judge's context", None),
    # the option typed gave the refused value: named
    (["--max-tokens", "2000"], "JudgeConfig.max_tokens must be at most 1000, got 2000", "--max-tokens"),
    # one entry of the option typed, quoted by the message
    (["--proposers", "m1,zz"], "MoAConfig.proposers: 'zz' is not in the pool (m1, m2)", "--proposers"),
    (["--proposers", "m1"], "MoAConfig.proposers: 'zz' is not in the pool (m1, m2)", None),
    # a part of the option typed, as the settings read it (a=2 gives 2.0)
    (["--dev-accuracy", "a=2"], "DelegationConfig.dev_accuracy: a's accuracy must be a finite number in [0, 1], "
                                "got 2.0", "--dev-accuracy"),
    (["--dev-accuracy", "a=0.5"], "DelegationConfig.dev_accuracy: a's accuracy must be a finite number in [0, 1], "
                                  "got 2.0", None),
])
def test_a_typed_option_is_named_only_when_it_gave_the_refused_value(args, message, option):
    assert _said(args, message) == (f"{option}: {message}" if option else message)
