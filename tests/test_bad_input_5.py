"""Bad input and friction, fifth round: each refusal is one line naming the file, line, field or
option, raised before any work; internal faults surface as bugs, not as user errors."""

import sqlite3

import pytest
from typer.testing import CliRunner

from agora.cli.main import app

FAKE = "langchain_core.language_models.fake_chat_models:FakeListChatModel"


def fake_pool(tmp_path, names=("a", "b")):
    path = tmp_path / "pool.toml"
    path.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "langchain"\nclass = "{FAKE}"\n'
                            f'kwargs = {{responses = ["The answer is 4."]}}\n\n' for m in names))
    return path


def one_error(result, needle):
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0], result.output
    return errors[0]


def no_rows(db):
    if db.exists():
        with sqlite3.connect(db) as con:
            tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
            for table in ("runs", "model_calls"):
                if table in tables:
                    assert con.execute(f"select count(*) from {table}").fetchone()[0] == 0, table


# --- agora run slm-mux: the dev run is read before the run row and before any model is asked ---

@pytest.mark.parametrize("extra, needle", [
    (["--dev-run", "R0", "--dev-db", "missing.db"], "dev run 'R0': trace database missing.db not found"),
    (["--dev-run", "R0", "--dev-db", "."], "dev run 'R0': trace database . is a folder"),
])
def test_slm_mux_dev_run_checked_before_any_run_row(tmp_path, monkeypatch, extra, needle):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, ["run", "slm-mux", "--format", "synthetic", "--limit", "1", "--pool",
                                      str(fake_pool(tmp_path)), "--db", str(db), *extra])
    assert result.exit_code == 2, result.output
    one_error(result, needle)
    no_rows(db)


def test_slm_mux_dev_run_without_the_run_refused_before_any_run_row(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dev = tmp_path / "dev.db"
    from agora.traces.store import TraceStore
    TraceStore(dev).close()
    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, ["run", "slm-mux", "--format", "synthetic", "--limit", "1", "--pool",
                                      str(fake_pool(tmp_path)), "--db", str(db), "--dev-run", "R0",
                                      "--dev-db", str(dev)])
    assert result.exit_code == 2, result.output
    one_error(result, "dev run 'R0': no such run in")
    no_rows(db)


# --- AGORA_LLAMA_THREADS: ASCII digits, at most 512 ---

THREADS_WHAT = "(threads of the embedded llama.cpp engine); fix or unset it"


@pytest.mark.parametrize("value, said", [
    ("\u0663", "AGORA_LLAMA_THREADS='\u0663': not written in ASCII digits 0-9 " + THREADS_WHAT),  # Arabic-Indic 3
    ("\uff14", "AGORA_LLAMA_THREADS='\uff14': not written in ASCII digits 0-9 " + THREADS_WHAT),  # fullwidth 4
    ("513", "AGORA_LLAMA_THREADS='513': above 512, the most it takes " + THREADS_WHAT),
    ("100000000000000000000", "AGORA_LLAMA_THREADS='100000000000000000000': above 512, the most it takes "
                              + THREADS_WHAT),
])
def test_llama_threads_refused_in_one_line(tmp_path, monkeypatch, value, said):
    from agora.models._chat import default_threads

    monkeypatch.setenv("AGORA_LLAMA_THREADS", value)
    result = CliRunner().invoke(app, ["report", "runs", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 2, result.output
    assert one_error(result, said) == "error: " + said
    with pytest.raises(ValueError) as raised:
        default_threads()  # from Python: the same line
    assert str(raised.value) == said


def test_llama_threads_bounds_accepted(monkeypatch):
    from agora.models._chat import default_threads

    for value, threads in (("1", 1), ("512", 512), (" +7 ", 7)):
        monkeypatch.setenv("AGORA_LLAMA_THREADS", value)
        assert default_threads() == threads


def test_llama_threads_with_thousands_of_digits_is_checked_like_any_other(monkeypatch):
    """More digits than Python's int() reads (4,300) is still a value above 512, in one line naming
    the variable (not int()'s own error); leading zeros count for nothing, however many."""
    from agora.models._chat import default_threads

    huge = "9" * 5000
    monkeypatch.setenv("AGORA_LLAMA_THREADS", huge)
    with pytest.raises(ValueError) as raised:
        default_threads()
    assert str(raised.value) == f"AGORA_LLAMA_THREADS={huge!r}: above 512, the most it takes " + THREADS_WHAT
    monkeypatch.setenv("AGORA_LLAMA_THREADS", "0" * 5000 + "7")
    assert default_threads() == 7
    monkeypatch.setenv("AGORA_LLAMA_THREADS", "0" * 5000)
    with pytest.raises(ValueError, match="not a whole number from 1"):
        default_threads()


def test_lease_seconds_in_non_ascii_digits_refused(monkeypatch):
    from agora.models.environment import EnvironmentVariableError, env_value

    monkeypatch.setenv("AGORA_LEASE_S", "\u0663\u0660")  # float() reads it as 30.0
    with pytest.raises(EnvironmentVariableError, match="^AGORA_LEASE_S='\u0663\u0660': not written in ASCII digits"):
        env_value("AGORA_LEASE_S")
    monkeypatch.setenv("AGORA_LEASE_S", "30")
    assert env_value("AGORA_LEASE_S") == "30"


# --- recipes: control characters in a persona or a shot, odd sandbox imports ---

def recipe_pool(tmp_path, recipe: str):
    path = tmp_path / "pool.toml"
    path.write_text(f'[[models]]\nname = "ok"\nbackend = "langchain"\nclass = "{FAKE}"\n'
                    f'kwargs = {{responses = ["x"]}}\n\n'
                    f'[[models]]\nname = "m"\nbackend = "langchain"\nclass = "{FAKE}"\n'
                    f'kwargs = {{responses = ["x"]}}\nrecipe = {recipe}\n', encoding="utf-8")
    return path


def pool_error(path) -> str:
    from agora.models.pool import load_pool

    with pytest.raises(ValueError) as raised:
        load_pool(path)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("recipe, said", [
    ('{ name = "persona", persona = "You are\\u0000 careful." }',
     "field 'recipe.persona': control character U+0000 at position 7"),
    ('{ name = "persona", persona = "Be \\u001b[31mred" }', "field 'recipe.persona': control character U+001B at position 3"),
    ('{ name = "fewshot", shots = [{ question = "1+1?", answer = "The answer is 2.\\u0007" }] }',
     "control character U+0007 at position 16"),
])
def test_recipe_text_with_control_characters_refused(tmp_path, recipe, said):
    path = recipe_pool(tmp_path, recipe)
    message = pool_error(path)
    assert message.startswith(f"{path}: models[1] (m): "), message
    assert said in message, message


def test_recipe_text_newlines_and_tabs_kept(tmp_path):
    from agora.models.pool import load_pool

    path = recipe_pool(tmp_path, '{ name = "persona", persona = "You are careful.\\n\\tCheck every sum." }')
    pool = load_pool(path)
    assert [m.spec.recipe.persona for m in pool if m.name == "m"] == ["You are careful.\n\tCheck every sum."]


def test_sandbox_imports_name_the_bad_entries(tmp_path):
    pytest.importorskip("RestrictedPython")
    from agora.models.recipes.sandbox import SandboxLimits

    path = recipe_pool(tmp_path, '{ name = "pot", imports = ["math", "os.path", "fractions", "1bad"] }')
    message = pool_error(path)
    assert message.startswith(f"{path}: models[1] (m): field 'recipe.imports': 'os.path', '1bad': not top-level "
                              "module names"), message
    with pytest.raises(ValueError, match=r"^imports: 'os\.path', 3: not top-level module names"):
        SandboxLimits(imports=("math", "os.path", 3))


# --- a Postgres URL that does not parse: named, without its password ---

@pytest.mark.parametrize("url, said", [
    ("postgresql://u:secret@[::1/db", "error: postgresql://u:***@[::1/db: not a valid Postgres URL (Invalid IPv6 URL); "
                                      "an IPv6 host goes in brackets: postgresql://user@[::1]:5432/db"),
    ("postgresql://u:secret@h:99999/db", "error: postgresql://u:***@h:99999/db: not a valid Postgres URL (Port out of "
                                         "range 0-65535)"),
])
def test_a_postgres_url_that_does_not_parse_is_named(url, said):
    pytest.importorskip("psycopg")
    result = CliRunner().invoke(app, ["report", "runs", "--db", url])
    assert result.exit_code == 2, result.output
    assert one_error(result, said) == said
    assert "secret" not in result.output


def test_shown_url_redacts_without_raising():
    from agora.models.urls import shown_url

    assert shown_url("postgresql://u:secret@[::1/db") == "postgresql://u:***@[::1/db"
    assert shown_url("postgresql://u:secret@[::1]:5432/db") == "postgresql://u:***@[::1]:5432/db"
    assert shown_url("postgresql://u:p@ss@Host:5432/db?sslmode=require") == "postgresql://u:***@Host:5432/db?sslmode=require"
    assert shown_url("postgresql:///db?host=/run/pg&password=secret&user=u") == \
        "postgresql:///db?host=/run/pg&password=***&user=u"
    assert shown_url("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.parametrize("password", ["5432", "a"])
def test_without_password_masks_the_password_not_the_same_characters_elsewhere(password):
    """A short password (``5432``, ``a``) is masked where the message quotes it as the password,
    not in the port, the host or any word that happens to contain it."""
    from agora.traces.pg_sql import without_password

    url = f"postgresql://ann:{password}@127.0.0.1:5432/db"
    said = ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  password '
            'authentication failed for user "ann"')
    assert without_password(said, url) == said
    assert without_password(f'invalid percent-encoded token: "{password}"', url) == \
        'invalid percent-encoded token: "***"'
    assert without_password(f"in {url} (user=ann password={password} port=5432)", url) == \
        "in postgresql://ann:***@127.0.0.1:5432/db (user=ann password=*** port=5432)"
    query = f"postgresql://ann@127.0.0.1:5432/db?password={password}"
    assert without_password(f"{said} in {query}", query) == \
        f"{said} in postgresql://ann@127.0.0.1:5432/db?password=***"


# --- recipe roles: the known roles are the roles the protocols write ---

def written_roles() -> set[str]:
    """Every literal trace role in graphs/ and agents/: ``call_context(problem, node, ROLE)`` (and its
    alias ``_context``), ``solo_answer_node(context, seed, node, ROLE, ...)`` and ``{"role": ROLE}``
    in a call's trace context (chat-message roles left out)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    chat = {"system", "user", "assistant"}
    found: set[str] = set()
    for folder in ("graphs", "agents"):
        for path in (root / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call):
                    name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                    at = {"call_context": 2, "_context": 2, "solo_answer_node": 3}.get(name)
                    if at is not None and len(node.args) > at and isinstance(node.args[at], ast.Constant):
                        found.add(node.args[at].value)
                elif isinstance(node, ast.Dict):
                    for key, value in zip(node.keys, node.values):
                        if (isinstance(key, ast.Constant) and key.value == "role" and isinstance(value, ast.Constant)
                                and isinstance(value.value, str) and value.value not in chat):
                            found.add(value.value)
    return found


def test_known_recipe_roles_are_the_roles_protocols_write():
    from agora.models.recipes.registry import ANSWER_ROLES, KNOWN_ROLES

    written = written_roles()
    # hand-checked: ALIGN agent; candidates candidate; council member/reviewer/chair; SLM-MUX member; MoA
    # proposer/aggregator; debate debater; duel follower; COMED anchor/probe/peer; conversation speaker; judge;
    # ALIGN's model principal (--principal) principal
    assert written == {"agent", "candidate", "member", "reviewer", "chair", "proposer", "aggregator", "debater",
                       "follower", "anchor", "probe", "peer", "speaker", "judge", "principal"}
    assert set(KNOWN_ROLES) == written and len(KNOWN_ROLES) == len(written)
    assert set(ANSWER_ROLES) <= written


def test_a_recipe_may_name_comeds_escalation_peers(tmp_path):
    from agora.models.pool import load_pool

    pool = load_pool(recipe_pool(tmp_path, '{ name = "persona", persona = "Check twice.", roles = ["peer"] }'))
    recipe = next(m.spec.recipe for m in pool if m.name == "m")
    assert recipe.applies({"role": "peer"}) and not recipe.applies({"role": "anchor"})
    message = pool_error(recipe_pool(tmp_path, '{ name = "persona", persona = "x", roles = ["router"] }'))
    assert "field 'recipe.roles': unknown role 'router'" in message, message


# --- agora report question / agora replay on an SLM-MUX run: the slm_mux rule reproduces it ---

def said(*answers):
    return [f"So the answer is {a}." for a in answers]


@pytest.fixture
def mux_db(tmp_path):
    """Run ``mux``: two questions, k = 3, three scripted members, each answering its three replies on
    every question: reliable 7,7,7 (confidence 1), wrong1 8,8,9 and wrong2 8,8,5 (2/3 each): slm-mux 7,
    mux_vote 8 (four votes to three). Run ``tie``: one question, a 7,7,1 and b 8,8,2 (2/3 each), dev
    accuracies a 0.25, b 0.75."""
    from agora.graphs.runner import run_protocol
    from agora.graphs.slm_mux import SLMMuxContext
    from agora.agents.slm_mux import SLMMuxConfig
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.tasks import Problem
    from agora.traces.store import TraceStore

    db = tmp_path / "mux.db"
    store = TraceStore(db)
    problems = [Problem(id=f"q{i}", question=f"Tom has 3 apples and buys 4 more ({i}). How many?", gold="7",
                        kind="math") for i in (1, 2)]
    models = {"reliable": ScriptedChatModel(responses=said(7, 7, 7), cycle=True),
              "wrong1": ScriptedChatModel(responses=said(8, 8, 9), cycle=True),
              "wrong2": ScriptedChatModel(responses=said(8, 8, 5), cycle=True)}
    run_protocol("slm-mux", problems, store=store, run_id="mux",
                 context=SLMMuxContext(ModelPool.from_chat_models(models, max_retries=0)),
                 config={}, pool_description=[], dataset={})
    # a confidence tie (a: 7,7,1; b: 8,8,2; both 2/3) that the dev accuracies break for b
    tied = {"a": ScriptedChatModel(responses=said(7, 7, 1), cycle=True),
            "b": ScriptedChatModel(responses=said(8, 8, 2), cycle=True)}
    run_protocol("slm-mux", problems[:1], store=store, run_id="tie",
                 context=SLMMuxContext(ModelPool.from_chat_models(tied, max_retries=0),
                                       SLMMuxConfig(dev_accuracy={"a": 0.25, "b": 0.75})),
                 config={}, pool_description=[], dataset={})
    store.close()
    return db


def test_report_question_explains_slm_mux_by_its_rule(mux_db):
    import json

    result = CliRunner().invoke(app, ["report", "question", "--db", str(mux_db), "--run-id", "mux",
                                      "--question-id", "q1", "--json"])
    assert result.exit_code == 0, result.output
    why = {m["method"]: (m["answer"], m["why"]) for m in json.loads(result.output)["methods"]}
    assert why["slm-mux"] == ("7", "rule slm_mux: member 0 (reliable) is the most self-consistent; member 0 "
                                   "(reliable) '7' at 1.00; member 1 (wrong1) '8' at 0.67; member 2 (wrong2) '8' at 0.67")
    assert why["mux_vote"][0] == "8" and why["mux_vote"][1].startswith("rule plurality: 0.44 of 9 votes; '8'×4, '7'×3")
    assert "no replay rule" not in why["slm-mux"][1]


def test_replaying_slm_mux_reproduces_its_answers(mux_db):
    from agora.traces.replay import replay, reproduced
    from agora.traces.replay_rules import RULES, parse_params
    from agora.traces.run_trace import load_run
    from agora.traces.store import TraceStore

    store = TraceStore(mux_db, readonly=True)
    run = load_run(store, "mux")
    assert reproduced(run, replay(run, "slm_mux"), "slm-mux") == (2, 2)
    assert reproduced(run, replay(run, "plurality"), "mux_vote") == (2, 2)
    tie = load_run(store, "tie")
    row = replay(tie, "slm_mux").rows[0]
    assert (row.answer, row.correct, row.samples) == ("8", False, 6)  # b's dev 0.75 beats a's 0.25
    assert "(a confidence tie: dev accuracy, then order)" in row.why
    assert reproduced(tie, replay(tie, "slm_mux"), "slm-mux") == (1, 1)
    # k=1: each member's first sample, all confidences 1.0: the earlier member (reliable) answers 7
    first = replay(run, "slm_mux", parse_params(RULES["slm_mux"], ["k=1"], run)).rows[0]
    assert (first.answer, first.samples) == ("7", 3)
    with pytest.raises(ValueError, match=r"^--param k=-1: must be >= 0"):
        replay(run, "slm_mux", parse_params(RULES["slm_mux"], ["k=-1"], run))


# --- a bundle with a lone surrogate: file, line and column ---

@pytest.fixture
def exported(tmp_path, monkeypatch):
    """Run ``R`` (ALIGN, one question, scripted models answering 4) exported: the bundle's lines as text."""
    import gzip
    import json

    import agora.cli.align as align_cli
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(responses=["The answer is 4."], cycle=True)
                                       for m in ("a", "b")})
    monkeypatch.setattr(align_cli, "get_pool", lambda path: pool)
    data = tmp_path / "g.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    db, out = tmp_path / "t.db", tmp_path / "r.agora.jsonl.gz"
    for argv in (["run", "align", "--data", str(data), "--db", str(db), "--run-id", "R"],
                 ["export", "--db", str(db), "--run-id", "R", "--out", str(out)]):
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 0, result.output
    with gzip.open(out, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.mark.parametrize("table, old, new, said", [
    ("questions", "What is 2 + 2?", "What is 2 \\ud800+ 2?", "questions.question: a lone surrogate (\\ud800 at character 10"),
    ("results", '"align", "4"', '"align", "4\\udc00"', "results.answer: a lone surrogate (\\udc00 at character 1"),
    ("model_calls", '"agent_sample"', '"agent\\udfff"', "model_calls.node: a lone surrogate (\\udfff at character 5"),
])
def test_bundle_with_a_lone_surrogate_names_file_line_and_column(exported, tmp_path, table, old, new, said):
    import gzip
    import json

    lines = list(exported)
    at = next(i for i, line in enumerate(lines) if line.startswith("{") and json.loads(line).get("t") == table
              and old in line)
    lines[at] = lines[at].replace(old, new, 1)
    bundle = tmp_path / "bad.agora.jsonl.gz"
    with gzip.open(bundle, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    db = tmp_path / "into.db"
    result = CliRunner().invoke(app, ["import", str(bundle), "--db", str(db)])
    assert result.exit_code == 2, result.output
    line = one_error(result, said)
    assert line.startswith(f"error: {bundle}:{at + 1}: {said}") and line.endswith("nothing was imported"), line
    no_rows(db)


# --- a KeyError from Agora's own code is a bug, not a user error ---

def test_an_internal_key_error_is_not_printed_as_a_user_error():
    from agora.cli._shared import user_errors

    with pytest.raises(KeyError) as raised:
        with user_errors():
            {"comed": 1}["comed_routed"]  # a lookup in code that went wrong
    assert raised.value.args == ("comed_routed",)


def test_an_internal_key_error_in_a_command_surfaces_with_its_traceback(tmp_path, monkeypatch):
    import agora.cli.runs as runs_cli

    def broken(*args, **kwargs):
        return {}["comed_routed"]

    monkeypatch.setattr(runs_cli, "run_rows", broken)
    db = tmp_path / "t.db"
    from agora.traces.store import TraceStore
    TraceStore(db).close()
    result = CliRunner().invoke(app, ["report", "runs", "--db", str(db)])
    assert isinstance(result.exception, KeyError) and result.exit_code == 1, result.output
    assert "error: comed_routed" not in result.output
    assert "internal error: KeyError 'comed_routed' (a bug in Agora, not in your input" in result.output


def test_a_name_the_user_gave_is_still_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", "align", "--format", "synthetic", "--limit", "1", "--pool",
                                      str(fake_pool(tmp_path)), "--db", str(tmp_path / "t.db"), "--models", "a,nosuch"])
    assert result.exit_code == 2, result.output
    one_error(result, "error: model 'nosuch' is not in the pool (a, b)")
    from agora.graphs.registry import get
    from agora.models.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="unknown protocol 'nosuch'"):
        get("nosuch")


# --- agora train dpo on duel pairs: an unknown member or duel run is refused with or without --data-only ---

@pytest.mark.parametrize("flags, message", [
    (("--model", "c"), "error: --model 'c': in no preference pair of {db} (members in pairs: a, b)"),
    (("--model", "a", "--duel-run", "nosuch"),
     "error: --duel-run 'nosuch': no preference pair of such a run in {db} (runs with pairs: duel-1)"),
])
def test_duel_pairs_of_an_unknown_member_refused_before_training(tmp_path, monkeypatch, duel_pairs_db, flags, message):
    import sqlite_utils

    import agora.cli.train_dpo as train_dpo

    monkeypatch.setattr(train_dpo, "require_train_extra", lambda: None)  # as with the train extra installed

    db = duel_pairs_db
    pool = fake_pool(tmp_path, ("a", "b", "c"))  # c is a pool member that no pair names
    result = CliRunner().invoke(app, ["train", "dpo", *flags, "--pool", str(pool), "--db", str(db),
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    assert [line for line in result.output.splitlines() if line.strip()] == [message.format(db=db)]
    assert not (tmp_path / "o").exists()
    tables = set(sqlite_utils.Database(db).table_names())
    assert "runs" not in tables or sqlite_utils.Database(db)["runs"].count == 0


# --- no private name is imported from another package ---

def test_no_private_name_is_imported_across_packages():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for package in ("tasks", "models", "agents", "traces", "graphs", "runs", "training", "cli", "benchmarks"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agora."):
                    private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                    if private and node.module.split(".")[1] != package:
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {node.module} {private}")
    assert found == []


# --- agora train: a --model not in the pool names the built-in pool that has it ---

def test_a_train_model_not_in_the_pool_names_the_builtin_pool_holding_it(tmp_path):
    from agora.cli._train import find_spec
    from agora.models.pool import load_pool

    specs = [m.spec for m in load_pool(fake_pool(tmp_path))]
    with pytest.raises(ValueError) as raised:  # was "too many values to unpack (expected 2)"
        find_spec(specs, "smollm2-135m", tmp_path / "pool.toml")
    assert str(raised.value) == (f"--model 'smollm2-135m' is not in {tmp_path / 'pool.toml'} (a, b); it is in the "
                                 "built-in pool 'tiny': add --pool tiny")
    with pytest.raises(ValueError, match=r"^--model 'nosuch' is not in .* \(a, b\)$"):
        find_spec(specs, "nosuch", tmp_path / "pool.toml")


# --- the format-guess refusal is an 'error:' line like every other ---

def test_the_format_guess_refusal_is_a_lowercase_error_line(tmp_path):
    data = tmp_path / "odd.jsonl"
    data.write_text('{"foo": 1}\n')
    result = CliRunner().invoke(app, ["run", "align", "--data", str(data), "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [f"error: {data}:1: cannot tell the format from fields ['foo']; pass --format "
                                          "(gsm8k, gsm-hard, math, mc, synthetic, prompts)"]
