"""Built-in pools whose members carry recipes: the ``diverse`` pool (weights × recipe), by name."""

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agora.models import builtins as b
from agora.models.builtins import BUILTIN_POOLS, CANDIDATE_MEMBERS, DIVERSE, BuiltinMember
from agora.models.convert import resolve_gguf
from agora.models.pool import builtin_pool_specs, load_pool
from agora.models.recipes import recipe_from_entry
from agora.cli.main import app
import agora.cli._shared as shared_cli

_CHECKER = CANDIDATE_MEMBERS["qwen1.5b+checker"].recipe["persona"]
CANDIDATES = Path(__file__).resolve().parents[1] / "benchmarks" / "members" / "candidates.toml"


def test_the_diverse_pool_gives_model_specs_with_their_recipes():
    specs = builtin_pool_specs("diverse")
    assert [(s.name, s.path, s.recipe.describe() if s.recipe else None) for s in specs] == [
        ("qwen1.5b+checker", "builtin:qwen2.5-coder-1.5b", {"name": "persona", "persona": _CHECKER}),
        ("qwen1.5b+pot", "builtin:qwen2.5-coder-1.5b", {"name": "pot"}),
        ("qwen0.5b+pot", "builtin:qwen2.5-coder-0.5b", {"name": "pot"})]
    assert all(s.backend == "llamacpp" and s.n_ctx == 4096 and s.prompt_format == "chat" for s in specs)
    pool = load_pool("diverse")  # by name, as --pool diverse loads it (weights load lazily: no model here)
    assert pool.names == ["qwen1.5b+checker", "qwen1.5b+pot", "qwen0.5b+pot"] and pool.source == "builtin:diverse"
    assert [m.spec.recipe.name if m.spec.recipe else None for m in pool] == ["persona", "pot", "pot"]
    assert [d.get("recipe") for d in pool.describe()] == [{"name": "persona", "persona": _CHECKER}, {"name": "pot"}, {"name": "pot"}]
    # the pools without recipes are as before
    assert all(s.recipe is None for name in ("default", "tiny") for s in builtin_pool_specs(name))


def test_the_diverse_pool_is_one_line_of_candidate_names(monkeypatch):
    assert BUILTIN_POOLS["diverse"] == tuple(CANDIDATE_MEMBERS[n] for n in DIVERSE)
    monkeypatch.setitem(BUILTIN_POOLS, "diverse", tuple(CANDIDATE_MEMBERS[n] for n in ("qwen1.5b", "qwen1.5b+checker")))
    [cot, checker] = builtin_pool_specs("diverse")
    assert cot.recipe is None and checker.recipe.name == "persona"
    assert checker.recipe.persona.startswith("You are a meticulous checker")


def test_the_candidate_members_are_the_member_tables():
    """Same names, weights and recipes as benchmarks/members/candidates.toml, so a bench on the diverse
    pool reports members under the names the member table measured them by."""
    if not CANDIDATES.is_file():
        pytest.skip(f"{CANDIDATES} is not in this checkout")
    entries = tomllib.loads(CANDIDATES.read_text())["models"]
    assert [e["name"] for e in entries] == list(CANDIDATE_MEMBERS)
    for e in entries:
        m = CANDIDATE_MEMBERS[e["name"]]
        assert f"builtin:{m.key}" == e["path"]
        mine = None if m.recipe is None else recipe_from_entry(m.recipe if isinstance(m.recipe, str) else dict(m.recipe))
        theirs = None if "recipe" not in e else recipe_from_entry(e["recipe"])
        assert (mine and mine.describe()) == (theirs and theirs.describe()), e["name"]


def test_pool_show_and_list_name_the_diverse_pools_members_and_recipes(monkeypatch):
    result = CliRunner().invoke(app, ["pool", "show", "diverse", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["members"]
    assert [(r["member"], r["weights"], r["recipe"]) for r in rows] == [
        ("qwen1.5b+checker", "builtin:qwen2.5-coder-1.5b", {"name": "persona", "persona": _CHECKER}),
        ("qwen1.5b+pot", "builtin:qwen2.5-coder-1.5b", {"name": "pot"}),
        ("qwen0.5b+pot", "builtin:qwen2.5-coder-0.5b", {"name": "pot"})]
    table = CliRunner().invoke(app, ["pool", "show", "diverse"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "pool diverse: 3 members" in table.output and "persona" in table.output
    monkeypatch.setattr(shared_cli.console, "width", 400)  # the console's width is set when it is made: wide rows whole
    listed = CliRunner().invoke(app, ["pool", "list"])
    assert listed.exit_code == 0, listed.output
    assert "qwen1.5b+pot (builtin:qwen2.5-coder-1.5b, pot)" in listed.output
    assert "qwen2.5-coder-0.5b (builtin:qwen2.5-coder-0.5b)," in listed.output  # no recipe: as before
    rows = {r["model"]: r["pools"] for r in b.describe_builtins()}
    assert rows["builtin:qwen2.5-coder-0.5b"] == ["default", "diverse"] and rows["builtin:smollm2"] == ["tiny"]


def test_a_diverse_members_name_resolves_to_its_weights(monkeypatch):
    monkeypatch.setattr("agora.models.convert.resolve_builtin", lambda path: f"/cache/{path.removeprefix('builtin:')}.gguf")
    assert str(resolve_gguf("qwen1.5b+pot")) == "/cache/qwen2.5-coder-1.5b.gguf"
    assert BuiltinMember("x", "smollm2").recipe is None


def test_a_pool_file_with_the_diverse_entries_is_the_diverse_pool(tmp_path):
    """docs/recipes.md: the diverse pool's three entries in a pool file, each with n_ctx = 4096 and
    family = "qwen2.5", describe the same pool (a run resumes on either); without the family they do not."""
    from agora.traces.resume import _models

    if not CANDIDATES.is_file():
        pytest.skip(f"{CANDIDATES} is not in this checkout")
    text = CANDIDATES.read_text()
    entries = {e["name"]: e for e in tomllib.loads(text)["models"]}
    assert all(entries[n]["n_ctx"] == 4096 for n in DIVERSE)

    def pool_file(family: str | None) -> Path:
        lines = []
        for n in DIVERSE:
            e = entries[n]
            lines += ["[[models]]", f'name = "{n}"', f'path = "{e["path"]}"', "n_ctx = 4096"]
            lines += [f'family = "{family}"'] if family else []
            recipe = e.get("recipe")
            if isinstance(recipe, str):
                lines.append(f'recipe = "{recipe}"')
            elif recipe:
                lines += ["[models.recipe]", *(f"{k} = {json.dumps(v)}" for k, v in recipe.items())]
            lines.append("")
        path = tmp_path / f"diverse-{family}.toml"
        path.write_text("\n".join(lines))
        return path

    builtin = _models(load_pool("diverse").describe())
    assert _models(load_pool(pool_file("qwen2.5")).describe()) == builtin
    assert _models(load_pool(pool_file(None)).describe()) != builtin
