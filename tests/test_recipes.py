"""Member recipes: validation of pool entries (one line each), the registry, the built-in recipes on
scripted models (program-of-thought with a known answer), and their rows in the trace DB."""

from __future__ import annotations

import asyncio
import json

import pytest

from agora.graphs.moa import MoAContext, build_moa_graph
from agora.graphs.registry import get as protocol_spec
from agora.graphs.runner import run_problems
from agora.agents.moa import MoAConfig
from agora.models.pool import ModelPool, ModelSpec, PoolConfigError, PoolMember, SamplingParams, load_pool
from agora.models.recipes import ANSWER_ROLES, Recipe, get_recipe, recipe_names, register_recipe, unregister_recipe
from agora.models.recipes.pot import POT_REQUEST, answer_line, extract_program
from agora.models.testing import ScriptedChatModel
from agora.tasks.answers import find_answer
from agora.tasks.problem import Problem
from agora.traces.store import TraceStore

ENTRY = 'name = "m+x"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "x"\n'
COT_CHAT = [{"role": "system", "content": "Solve it. Reason in words."},
            {"role": "user", "content": "1 + 1?"}, {"role": "assistant", "content": "1 + 1 = 2. The answer is 2."},
            {"role": "user", "content": "What is 6 times 7? End with 'The answer is N.' where N is the final answer."}]


def pool_of(**members) -> ModelPool:
    """A pool of scripted members: name -> (model, recipe)."""
    return ModelPool([PoolMember(ModelSpec(name=name, backend="langchain", max_retries=0, recipe=recipe), model)
                      for name, (model, recipe) in members.items()])


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("line, message", [
    ('recipe = "pat"', "field 'recipe': unknown recipe 'pat'; choose one of cot, fewshot, persona, pot"),
    ("recipe = { cpu_s = 2 }", "field 'recipe.name': missing: say which recipe (cot, fewshot, persona, pot)"),
    ('recipe = { name = "pot", cpu = 2 }', "field 'recipe.cpu': recipe 'pot' has no setting 'cpu' (it takes name, "
     "roles, shots, cpu_s, wall_s, memory_mb, output_bytes, imports)"),
    ('recipe = { name = "pot", roles = ["agnet"] }', "field 'recipe.roles': unknown role 'agnet'; known roles: "
     "agent, candidate, member, proposer, aggregator, debater, chair, follower, principal, anchor, probe, peer, "
     "reviewer, speaker, judge, got ['agnet']"),
    ('recipe = { name = "pot", roles = ["nosuchrole", 5] }', "field 'recipe.roles': unknown role 'nosuchrole'; "
     "known roles: agent, candidate, member, proposer, aggregator, debater, chair, follower, principal, anchor, "
     "probe, peer, reviewer, speaker, judge, got ['nosuchrole', 5]"),
    ('recipe = { name = "pot", cpu_s = -1 }', "field 'recipe.cpu_s': input should be greater than or equal to 0.01, got -1"),
    ('recipe = { name = "pot", shots = 9 }', "field 'recipe.shots': input should be less than or equal to 3, got 9"),
    ('recipe = { name = "persona" }', "field 'recipe.persona': missing: recipe 'persona' needs 'persona'"),
    ('recipe = { name = "persona", persona = " " }', "field 'recipe.persona': must not be empty, got ' '"),
    ("recipe = 3", "field 'recipe': must be a recipe name or a table with name = ..., got 3"),
    ('recipe = { name = "pot", imports = ["math", "os"] }',
     "field 'recipe.imports': os may not be allowed (file system, processes or network), got ['math', 'os']"),
    ('recipe = { name = "fewshot", shots = [{ question = "q" }] }',
     "field 'recipe.shots.0.answer': missing: recipe 'fewshot' needs 'shots.0.answer'"),
])
def test_a_bad_recipe_is_one_line_naming_file_entry_and_field(tmp_path, line, message):
    path = tmp_path / "pool.toml"
    path.write_text(f"[[models]]\n{ENTRY}\n[[models]]\n{ENTRY.replace('m+x', 'm+y')}{line}\n")
    with pytest.raises(PoolConfigError) as err:
        load_pool(path)
    assert str(err.value) == f"{path}: models[1] (m+y): {message}"
    assert "\n" not in str(err.value)


def test_a_spec_made_in_python_is_checked_as_the_pool_file_is():
    with pytest.raises(PoolConfigError, match=r"^model 'q': field 'recipe': unknown recipe 'pat'"):
        ModelSpec(name="q", backend="langchain", recipe="pat")
    spec = ModelSpec(name="q", backend="langchain", recipe={"name": "pot", "cpu_s": 1})
    assert (spec.recipe.name, spec.recipe.cpu_s, spec.recipe.wall_s) == ("pot", 1.0, 4.0)
    assert spec.describe()["recipe"] == {"name": "pot", "cpu_s": 1.0}
    assert "recipe" not in ModelSpec(name="q", backend="langchain").describe()  # run records as before


def test_a_pool_file_names_two_recipes_on_the_same_weights(tmp_path):
    path = tmp_path / "pool.toml"
    path.write_text(f"[[models]]\n{ENTRY.replace('m+x', 'q')}\n[[models]]\n{ENTRY.replace('m+x', 'q+pot')}"
                    'recipe = { name = "pot", cpu_s = 1, imports = ["math", "fractions"] }\n\n'
                    f"[[models]]\n{ENTRY.replace('m+x', 'q+persona')}"
                    '[models.recipe]\nname = "persona"\npersona = "You are a careful accountant."\n')
    pool = load_pool(path)
    assert [(m.name, m.spec.recipe and m.spec.recipe.label()) for m in pool] == [
        ("q", None), ("q+pot", "pot(cpu_s=1.0, imports=['math', 'fractions'])"), ("q+persona",
                                                                                 "persona(persona=You are a careful accountant.)")]
    assert [d.get("recipe") for d in pool.describe()] == [
        None, {"name": "pot", "cpu_s": 1.0, "imports": ["math", "fractions"]},
        {"name": "persona", "persona": "You are a careful accountant."}]


# ----------------------------------------------------------------------------- registry


def test_the_registry_lists_the_built_in_recipes_and_takes_a_new_one():
    assert recipe_names()[:4] == ["cot", "fewshot", "persona", "pot"]
    assert get_recipe("pot").runs_programs and not get_recipe("cot").runs_programs
    with pytest.raises(KeyError, match="unknown recipe 'nope'; choose one of cot, fewshot, persona, pot"):
        get_recipe("nope")

    class Shout(Recipe):
        name = "shout"
        summary = "upper-case replies"

        def finish(self, text):
            from agora.models.recipes import Finished
            return Finished(text.upper(), {})

    register_recipe(Shout)
    try:
        assert get_recipe("shout") is Shout and "shout" in recipe_names()
        with pytest.raises(ValueError, match="already registered"):
            register_recipe(type("Other", (Recipe,), {"name": "shout"}))
        pool = pool_of(q=(ScriptedChatModel(responses=["the answer is b."]), "shout"))
        [s], [r] = pool.sample("q", [{"role": "user", "content": "?"}], context={"role": "agent"})
        assert s.text == r["completion"] == "THE ANSWER IS B." and r["recipe"] == "shout"
    finally:
        unregister_recipe("shout")
    assert "shout" not in recipe_names()
    with pytest.raises(TypeError, match="subclass of agora.models.recipes.Recipe"):
        register_recipe(dict)
    with pytest.raises(ValueError, match="name must be an identifier"):
        register_recipe(type("Bad", (Recipe,), {"name": "a-b"}))


# ----------------------------------------------------------------------------- the recipes


def test_no_recipe_sends_and_records_exactly_what_the_protocol_asked():
    model = ScriptedChatModel(responses=["The answer is 42."])
    [s], [r] = pool_of(q=(model, None)).sample("q", COT_CHAT, context={"role": "agent"})
    assert r["messages"] == COT_CHAT and s.text == "The answer is 42."
    assert not {"recipe", "program", "program_error"} & set(r)


def test_program_of_thought_runs_the_program_and_its_print_is_the_answer():
    model = ScriptedChatModel(responses=["Sure.\n```python\nfrom fractions import Fraction\nx = 6 * 7\nprint(x)\n```\n"
                                         "This prints 42."])
    [s], [r] = pool_of(q=(model, "pot")).sample("q", COT_CHAT, SamplingParams(n=1), context={"role": "agent"})
    assert s.text == "```python\nfrom fractions import Fraction\nx = 6 * 7\nprint(x)\n```\nThe answer is 42."
    assert find_answer(s.text, "math").answer == "42" and r["completion"] == s.text
    assert (r["recipe"], r["program"], r["program_output"], r["program_error"]) == (
        "pot", "from fractions import Fraction\nx = 6 * 7\nprint(x)", "42\n", None)
    assert 0 < r["program_s"] < 10
    # the model saw PoT's prompt: its system prompt and two program exemplars, then the question
    # without the chain-of-thought closing line
    sent = r["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert sent[0]["content"].startswith("You solve problems by writing Python.") and "```python" in sent[2]["content"]
    assert sent[-1]["content"] == f"What is 6 times 7?\n\n{POT_REQUEST}"


def test_program_of_thought_on_a_multiple_choice_question_prints_the_letter():
    model = ScriptedChatModel(responses=['```python\nprint("C")\n```'])
    [s], _ = pool_of(q=(model, "pot")).sample("q", [{"role": "user", "content": "Pick.\nA. x\nB. y\nC. z"}])
    assert find_answer(s.text, "mc", 3).answer == "C"


@pytest.mark.parametrize("reply, error", [
    ("I think it is 42.", "NoProgram: the reply holds no Python program"),
    ("```python\nx = 42\n```", "NoOutput: the program printed nothing"),
    ("```python\nprint(1 / 0)\n```", "ZeroDivisionError: division by zero"),
    ("```python\nimport os\nprint(os.getcwd())\n```", "ImportError: import of 'os' is not allowed"),
])
def test_a_failed_program_is_a_failed_sample_with_its_error_never_a_wrong_answer(reply, error):
    model = ScriptedChatModel(responses=[reply])
    [s], [r] = pool_of(q=(model, "pot")).sample("q", COT_CHAT, context={"role": "agent"})
    assert r["program_error"].startswith(error)
    for kind in ("math", "mc"):
        assert find_answer(s.text, kind).answer is None
    assert s.text.startswith("The program failed (") and r["error"] is None  # a sample, not a failed attempt


def test_a_recipe_leaves_a_judges_call_alone_and_runs_under_asample():
    model = ScriptedChatModel(responses=['{"score": 7}', "```python\nprint(2 ** 5)\n```"])
    pool = pool_of(q=(model, "pot"))
    [judged], [jr] = pool.sample("q", COT_CHAT, context={"role": "judge"})
    assert judged.text == '{"score": 7}' and jr["messages"] == COT_CHAT and "recipe" not in jr
    [s], [r] = asyncio.run(pool.asample("q", COT_CHAT, context={"role": "proposer"}))
    assert s.text.endswith("The answer is 32.") and r["recipe"] == "pot"
    assert "judge" not in ANSWER_ROLES and "proposer" in ANSWER_ROLES


def test_persona_and_fewshot_rewrite_the_prompt():
    model = ScriptedChatModel(responses=["The answer is 42."] * 2)
    pool = pool_of(p=(model, {"name": "persona", "persona": "You are terse."}),
                   f=(model, {"name": "fewshot", "shots": [{"question": "2 + 2?", "answer": "The answer is 4."}]}))
    _, [r] = pool.sample("p", COT_CHAT, context={"role": "agent"})
    assert r["messages"] == [{"role": "system", "content": "You are terse.\n\nSolve it. Reason in words."}, *COT_CHAT[1:]]
    _, [r] = pool.sample("f", COT_CHAT, context={"role": "agent"})
    assert r["messages"] == [COT_CHAT[0], {"role": "user", "content": "2 + 2?"},
                             {"role": "assistant", "content": "The answer is 4."}, COT_CHAT[-1]]


def test_program_extraction_and_the_answer_line():
    assert extract_program("a\n```text\n1\n```\n```python\nprint(2)\n```\n```python\nprint(3)\n```") == "print(2)"
    assert extract_program("```\nprint(3)\n```") == "print(3)"
    assert extract_program("print(4)") == "print(4)"  # no fence, but Python
    assert extract_program("The answer is 4.") is None
    assert extract_program("```python\nprint(5)") == "print(5)"  # cut off before the closing fence
    # nested past the compiler's limits: no program (a failed sample), not a RecursionError
    assert extract_program("1+" * 500_000 + "1") is None
    assert extract_program("-" * 1_000_000 + "1") is None
    assert answer_line("step 1\n\nAnswer: 3/4.\n") == "3/4"
    assert answer_line("The answer is B\n") == "B"
    assert answer_line("  \n") == ""


# ----------------------------------------------------------------------------- in the trace DB


def moa_run(store: TraceStore, recipe: str | None = "pot", run_id: str = "moa") -> None:
    """One MoA question (6 times 7): ``q`` proposes 41 in words; ``q+pot`` (under ``recipe``)
    proposes and aggregates with a program printing 42."""
    cot = ScriptedChatModel(respond=lambda chat, i: "6 * 7 = 41. The answer is 41.")
    pot = ScriptedChatModel(respond=lambda chat, i: "```python\nprint(6 * 7)\n```" if recipe else "The answer is 42.")
    pool = pool_of(**{"q": (cot, None), "q+pot": (pot, recipe)})
    problem = Problem(id="q1", question="What is 6 times 7?", gold="42", kind="math")
    run_problems(build_moa_graph(), [problem], store=store, run_id=run_id, protocol="moa",
                 context=MoAContext(pool, MoAConfig(aggregator="q+pot")), config={}, pool_description=pool.describe(),
                 dataset={}, detail=protocol_spec("moa").detail)


def test_the_member_table_lists_the_pool_in_its_order_then_other_models_by_name(tmp_path):
    """Members in the order of the run's pool (here z before a, whichever drew first: MoA's
    proposers draw concurrently), never in the order concurrent calls finished."""
    from agora.traces.members import member_rows

    store = TraceStore(tmp_path / "t.db")
    say = ScriptedChatModel(respond=lambda chat, i: "The answer is 42.")
    pool = pool_of(**{"z": (say, None), "a": (ScriptedChatModel(respond=lambda chat, i: "```python\nprint(42)\n```"),
                                              "pot")})
    problem = Problem(id="q1", question="What is 6 times 7?", gold="42", kind="math")
    for _ in range(3):
        run_problems(build_moa_graph(), [problem], store=store, run_id="r", protocol="moa",
                     context=MoAContext(pool, MoAConfig(aggregator="a")), config={}, pool_description=pool.describe(),
                     dataset={}, detail=protocol_spec("moa").detail)
        assert [m.model for m in member_rows(store, "r")] == ["z", "a"]
    store.db["runs"].update("r", {"pool": "not json"})  # no readable pool: by name
    assert [m.model for m in member_rows(store, "r")] == ["a", "z"]


def test_the_run_report_has_a_member_table_when_the_pool_has_recipes(tmp_path):
    from dataclasses import asdict

    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.members import has_recipes, member_rows

    db = tmp_path / "t.db"
    store = TraceStore(db)
    moa_run(store, "pot", "with")
    moa_run(store, None, "without")
    assert has_recipes(store, "with") and not has_recipes(store, "without")
    rows = {m.model: m for m in member_rows(store, "with")}
    assert {k: v for k, v in asdict(rows["q"]).items() if k != "program_s_median"} == {
        "model": "q", "recipe": None, "samples": 1, "answered": 1, "correct": 0, "scored": 1, "programs": 0,
        "program_failures": 0, "scored_failures": 0}
    pot = rows["q+pot"]
    assert (pot.recipe, pot.samples, pot.correct, pot.accuracy, pot.programs, pot.program_failures) == (
        "pot", 2, 2, 1.0, 2, 0)
    assert 0 < pot.program_s_median < 10 and rows["q"].program_s_median is None
    out = CliRunner().invoke(app, ["report", "run", "with", "--db", str(db)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "members (weights × recipe" in out.output and "2 of 2" not in out.output and "0 of 2" in out.output
    plain = CliRunner().invoke(app, ["report", "run", "without", "--db", str(db)], env={"COLUMNS": "200"})
    assert plain.exit_code == 0 and "members" not in plain.output  # a pool without recipes: the report as before
    as_json = json.loads(CliRunner().invoke(app, ["report", "run", "with", "--db", str(db), "--json"]).output)
    # in the order the members first drew a sample: MoA's proposers draw concurrently, so either first
    assert sorted((m["model"], m["recipe"], m["correct"]) for m in as_json["members"]) == [("q", None, 0),
                                                                                          ("q+pot", "pot", 2)]
    assert "members" not in json.loads(CliRunner().invoke(app, ["report", "run", "without", "--db", str(db),
                                                                "--json"]).output)


def test_moa_with_a_pot_member_records_recipe_and_program_per_sample():
    store = TraceStore(":memory:")
    moa_run(store)
    results = {r["method"]: (r["answer"], r["correct"]) for r in store.results("moa")}
    assert results == {"moa": ("42", 1), "proposal_vote": ("41", 0)}  # the tie goes to the first proposal
    rows = sorted(store.calls("moa"), key=lambda r: (r["model"], r["node"]))
    assert [(r["model"], r["node"], r["recipe"], r["answer"]) for r in rows] == [
        ("q", "moa_propose", None, "41"), ("q+pot", "moa_aggregate", "pot", "42"), ("q+pot", "moa_propose", "pot", "42")]
    run = json.loads(rows[1]["program_run"])
    assert (run["program"], run["output"], run["error"]) == ("print(6 * 7)", "42\n", None) and run["seconds"] > 0
    assert rows[0]["program_run"] is None
    # the aggregator's prompt is PoT's, with q's proposal shown
    sent = json.loads(rows[1]["messages"])
    assert sent[0]["content"].startswith("You solve problems by writing Python") and "41" in sent[-1]["content"]
    assert json.loads(store.get_run("moa")["pool"])[1]["recipe"] == {"name": "pot"}


@pytest.mark.slow
def test_program_of_thought_on_the_embedded_qwen_answers_a_gsm8k_question():
    """The PoT prompt on the real Qwen2.5-Coder-1.5B (greedy): a fenced program whose print is the answer."""
    from agora.agents.prompts import solver_messages
    from agora.models.pool import pool_from_specs
    from agora.tasks.loaders import load_problems

    from pathlib import Path

    [problem] = load_problems(Path(__file__).parents[1] / "tasks" / "data" / "gsm8k_test_sample.jsonl", "gsm8k", 1)
    pool = pool_from_specs([ModelSpec(name="q+pot", backend="llamacpp", path="builtin:qwen2.5-coder-1.5b",
                                      n_ctx=4096, recipe="pot")])
    [s], [r] = pool.sample("q+pot", solver_messages(problem), SamplingParams(n=1, temperature=0.0, max_tokens=256,
                                                                             seed=0), context={"role": "agent"})
    assert r["program_error"] is None and "print(" in r["program"]
    assert problem.gold == "18" and find_answer(s.text, "math").answer == "18"


def test_a_bundle_carries_the_recipe_and_program_columns(tmp_path):
    from agora.traces.bundle_export import export_bundle
    from agora.traces.bundle_import import import_bundle

    store = TraceStore(tmp_path / "a.db")
    moa_run(store)
    export_bundle(store, tmp_path / "b.jsonl.gz", ["moa"])
    other = TraceStore(tmp_path / "c.db")
    import_bundle(tmp_path / "b.jsonl.gz", other)
    key = lambda r: r["call_id"]  # noqa: E731
    columns = ("call_id", "model", "recipe", "program_run", "completion", "answer")
    assert [tuple(r[c] for c in columns) for r in sorted(other.calls("moa"), key=key)] == \
        [tuple(r[c] for c in columns) for r in sorted(store.calls("moa"), key=key)]
    assert sum(r["recipe"] == "pot" for r in other.calls("moa")) == 2


@pytest.mark.parametrize("command", ["align", "moa", "debate", "council", "comed"])
def test_a_pool_file_with_a_pot_member_runs_each_protocol_through_the_cli(tmp_path, command):
    import sqlite_utils
    from openai_stub import StubServer, chat_reply
    from typer.testing import CliRunner

    from agora.cli.main import app

    def handler(path, body):
        pot = body["messages"][0]["content"].startswith("You solve problems by writing Python")
        return 200, chat_reply(body, ["```python\nprint(2 + 2)\n```" if pot else "The answer is 4."])

    with StubServer(handler) as server:
        pool = tmp_path / "pool.toml"
        pool.write_text("".join(f'[[models]]\nname = "{name}"\nbackend = "openai"\nmodel = "m"\nbase_url = '
                                f'"{server.base_url}"\nmax_retries = 0\n{extra}\n'
                                for name, extra in (("m", ""), ("m+pot", 'recipe = "pot"\n'))))
        db = tmp_path / "t.db"
        out = CliRunner().invoke(app, ["run", command, "--format", "synthetic", "--limit", "1", "--pool", str(pool),
                                       "--db", str(db), "--run-id", "r"])
        assert out.exit_code == 0, out.output
    rows = list(sqlite_utils.Database(db).query("select model, recipe, program_run, answer, node, role from model_calls "
                                                "where error is null"))
    pot = [r for r in rows if r["model"] == "m+pot" and r["recipe"] == "pot"]
    assert pot and all(json.loads(r["program_run"])["output"] == "4\n" and r["answer"] == "4" for r in pot)
    assert all(r["recipe"] is None for r in rows if r["model"] == "m")


def test_agora_serve_writes_the_members_recipes_into_its_pool_file(tmp_path):
    from agora.models.serving import ServedPool, ServerPlan

    specs = [ModelSpec(name="q+pot", backend="vllm", model="/hf/q", recipe={"name": "pot", "cpu_s": 1}),
             ModelSpec(name="remote+persona", backend="openai", base_url="http://gpu-a:8000/v1", model="R",
                       recipe={"name": "persona", "persona": "You are terse."})]
    served = ServedPool(specs)
    served.plans = [ServerPlan(specs[0], "/hf/q", 18500, [], {})]
    (tmp_path / "pool.toml").write_text(served.pool_toml())
    pool = load_pool(tmp_path / "pool.toml")
    assert [(m.name, m.spec.backend, m.spec.recipe.describe()) for m in pool] == [
        ("q+pot", "openai", {"name": "pot", "cpu_s": 1.0}),
        ("remote+persona", "openai", {"name": "persona", "persona": "You are terse."})]


def test_program_of_thought_without_restrictedpython_is_refused_when_the_pool_loads(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "RestrictedPython" else real(name, *a))
    path = tmp_path / "pool.toml"
    path.write_text(f'[[models]]\n{ENTRY}recipe = "pot"\n')
    with pytest.raises(PoolConfigError) as err:
        load_pool(path)
    assert str(err.value) == (f"{path}: models[0] (m+x): field 'recipe': program-of-thought needs RestrictedPython "
                              "for its sandbox: pip install RestrictedPython")


def test_agora_bench_runs_on_a_pool_with_a_pot_member(tmp_path, monkeypatch):
    """The bench's protocols on a pool of a chain-of-thought member and a program-of-thought one:
    complete, and the PoT member's samples in the bench's runs carry recipe and program."""
    import re

    import sqlite_utils
    from typer.testing import CliRunner

    import agora.cli.bench as bench_cli
    from agora.cli.main import app
    from test_bench import write_tasks

    def respond(chat, i):
        text = chat[-1]["content"]
        m = re.search(r"What is (\d+) \+", text)
        if chat[0]["content"].startswith("You solve problems by writing Python"):
            return f"```python\nprint({m.group(1)} * 2)\n```" if m else '```python\nprint("A")\n```'
        return f"The answer is {2 * int(m.group(1)) + 1}." if m else "The answer is B."

    pool = pool_of(**{"q": (ScriptedChatModel(respond=respond), None), "q+pot": (ScriptedChatModel(respond=respond), "pot")})
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: pool)
    math_file, mc_file = write_tasks(tmp_path, n_math=2, n_mc=2)
    db, out = tmp_path / "t.db", tmp_path / "b"
    result = CliRunner().invoke(app, ["bench", "--tasks", f"{math_file},{mc_file}", "--db", str(db), "--out", str(out),
                                      "--run-id", "b1", "--max-tokens", "16"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    assert report["complete"] is True
    rows = list(sqlite_utils.Database(db).query("select model, recipe, program_run, answer, node, role from model_calls "
                                                "where error is null and sample_index is not null"))
    pot = [r for r in rows if r["model"] == "q+pot" and r["role"] != "reviewer"]
    bad = [r for r in pot if r["recipe"] != "pot" or json.loads(r["program_run"] or "{}").get("error") is not None]
    assert pot and not bad, sorted({(r["node"], r["role"]) for r in bad})
    assert {r["answer"] for r in pot} <= {"2", "4", "A"} and {r["answer"] for r in rows if r["model"] == "q"} <= {"3", "5", "B"}
    # the council's reviews are asked as the protocol asks them, whatever the member's recipe
    reviews = [r for r in rows if r["model"] == "q+pot" and r["role"] == "reviewer"]
    assert reviews and all(r["recipe"] is None and r["program_run"] is None for r in reviews)


def test_a_database_from_before_recipes_reads_and_gains_the_columns(tmp_path):
    import sqlite3

    from agora.traces.members import has_recipes, member_rows

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # model_calls as it was: no recipe, no program_run
        conn.execute("create table model_calls (call_id text primary key, run_id text, question_id text, model text, "
                     "error text, sample_index integer, answer text, created_at text)")
        conn.execute("create table questions (run_id text, question_id text, gold text, kind text, "
                     "primary key (run_id, question_id))")
        conn.execute("insert into model_calls values ('c1', 'r', 'q', 'm', null, 0, '4', '2026-01-01')")
        conn.execute("insert into questions values ('r', 'q', '4', 'math')")
    old = TraceStore(path, readonly=True)
    assert not has_recipes(old, "r")
    [row] = member_rows(old, "r")
    assert (row.model, row.recipe, row.samples, row.correct, row.programs) == ("m", None, 1, 1, 0)
    assert {"recipe", "program_run"} <= set(TraceStore(path).db["model_calls"].columns_dict)  # a writer adds them


def test_the_question_report_names_each_samples_recipe(tmp_path):
    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.question_report import question_report

    db = tmp_path / "t.db"
    store = TraceStore(db)
    moa_run(store)
    report = question_report(store, "moa", "q1")
    assert sorted((s["model"], s["node"], s["recipe"]) for s in report["samples"]) == [
        ("q", "moa_propose", None), ("q+pot", "moa_aggregate", "pot"), ("q+pot", "moa_propose", "pot")]
    out = CliRunner().invoke(app, ["report", "question", "--db", str(db), "--run-id", "moa", "--question-id", "q1"],
                             env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "q+pot [pot]" in out.output


def _set_program_runs(db, run_id, values):
    """Overwrite the ``program_run`` of the run's program samples, in call order, with ``values``."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        ids = [r[0] for r in conn.execute("select call_id from model_calls where run_id = ? and program_run is not "
                                          "null order by created_at, call_id", [run_id])]
        for call_id, value in zip(ids, values):
            conn.execute("update model_calls set program_run = ? where call_id = ?", [value, call_id])
    return ids


def test_a_failed_program_sample_is_failed_in_the_reports_and_left_out_of_the_members_accuracy(tmp_path):
    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.members import member_rows
    from agora.traces.question_report import question_report

    db = tmp_path / "t.db"
    store = TraceStore(db)
    moa_run(store, "pot", "with")  # q+pot: two samples, both 42 (right)
    failed = json.dumps({"program": "print(1/0)", "output": None, "error": "ZeroDivisionError", "seconds": 0.01})
    [first, _] = _set_program_runs(db, "with", [failed])
    store.db.execute("update model_calls set answer = null where call_id = ?", [first])
    store.db.conn.commit()
    pot = {m.model: m for m in member_rows(store, "with")}["q+pot"]
    assert (pot.scored, pot.correct, pot.scored_failures, pot.program_failures) == (2, 1, 1, 1)
    assert pot.accuracy == 0.5 and pot.answered_accuracy == 1.0  # 1 right of 1 answered, the failed one left out
    out = CliRunner().invoke(app, ["report", "run", "with", "--db", str(db)], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "100.0 (1/1)" in out.output and "1 of 2" in out.output  # right / answered; the failed one beside
    report = question_report(store, "with", "q1")
    marks = {s["call_id"]: (s["correct"], s["program_failed"]) for s in report["samples"]}
    assert marks[first] == (None, True) and sorted(marks.values(), key=str).count((True, False)) == 1
    out = CliRunner().invoke(app, ["report", "question", "--db", str(db), "--run-id", "with", "--question-id", "q1"],
                             env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    row = next(line for line in out.output.splitlines() if "q+pot [pot]" in line and " None " in line)
    assert "│ failed " in row and "│ no " not in row


def test_an_unreadable_stored_program_run_is_a_failed_program_in_the_reports_never_a_crash(tmp_path):
    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.members import member_rows

    db = tmp_path / "t.db"
    store = TraceStore(db)
    moa_run(store, "pot", "with")
    _set_program_runs(db, "with", ["not json {", json.dumps({"seconds": "slow"})])
    pot = {m.model: m for m in member_rows(store, "with")}["q+pot"]
    assert (pot.programs, pot.program_failures, pot.program_s_median) == (2, 2, None)
    for args in (["report", "run", "with"], ["report", "question", "--run-id", "with", "--question-id", "q1"]):
        out = CliRunner().invoke(app, [*args, "--db", str(db)], env={"COLUMNS": "250"})
        assert out.exit_code == 0 and "Traceback" not in out.output, out.output


@pytest.mark.parametrize("value, message", [
    ("not json {", '"not json {" is not JSON'),
    (json.dumps({"seconds": "slow"}), 'seconds "slow" is not a number of seconds or null'),
    (json.dumps({"error": 3}), "error 3 is not a text or null"),
    ("[1]", '"[1]" is not a JSON object'),
])
def test_import_refuses_a_program_run_that_is_not_the_stores_json_naming_file_line_and_field(tmp_path, value,
                                                                                            message):
    import gzip

    from typer.testing import CliRunner

    from agora.cli.main import app
    from agora.traces.bundle_export import export_bundle

    store = TraceStore(tmp_path / "a.db")
    moa_run(store)
    export_bundle(store, tmp_path / "b.jsonl.gz", ["moa"])
    lines = gzip.open(tmp_path / "b.jsonl.gz", "rt", encoding="utf-8").read().splitlines()
    head = json.loads(lines[0])
    at = list(head["tables"]["model_calls"]["columns"]).index("program_run")
    rows, line = [json.loads(x) for x in lines[1:]], None
    for i, row in enumerate(rows):
        if line is None and row.get("t") == "model_calls" and row["v"][at]:
            row["v"][at], line = value, i + 2
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt", encoding="utf-8") as f:
        f.write("\n".join([lines[0]] + [json.dumps(r) for r in rows]) + "\n")
    out = CliRunner().invoke(app, ["import", str(bad), "--db", str(tmp_path / "n.db")], env={"COLUMNS": "300"})
    assert out.exit_code == 2, out.output
    assert f"{bad}:{line}: model_calls.program_run: {message}; nothing was imported" in out.output.replace("\n", "")
    assert not (tmp_path / "n.db").exists()
