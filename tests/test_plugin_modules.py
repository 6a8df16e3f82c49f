"""A new recipe and a new backend are one module each: the `terse` recipe and the `echo` backend that
docs/architecture.md shows under "Adding a recipe" and "Adding a backend" run as written (read from
the page, not copied here). Installed the way the page says (its pyproject entry points, left on
``sys.path`` as pip leaves a package: the module and its ``.dist-info``), they are found by the
registries, and the page's pool file and ``agora`` commands run on them."""

import json
import re
import shlex
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agora.cli.main import app
from agora.models.pool import load_pool
from agora.models.recipes import get_recipe, unregister_recipe
from agora.models.registry import get_backend, unregister_backend

ROOT = Path(__file__).resolve().parents[1]


def section(title: str) -> str:
    """The text of the ``## title`` section of docs/architecture.md."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    return re.split(r"\n## ", page.split(f"\n## {title}\n", 1)[1], maxsplit=1)[0]


def fenced(text: str, lang: str) -> list[str]:
    """The ``lang`` code blocks of ``text``, indentation (of a block in a list item) removed."""
    return [re.sub(r"(?m)^  ", "", body) for body in re.findall(rf"```{lang}\n(.*?)```", text, re.S)]


def install(site: Path, module: str, python: str, pyproject: str) -> None:
    """Leave the package as ``pip install`` does: the module, and a ``.dist-info`` whose
    ``entry_points.txt`` has the page's ``[project.entry-points]``."""
    project = tomllib.loads(pyproject)["project"]
    dist = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir(parents=True)
    (site / f"{module}.py").write_text(python, encoding="utf-8")
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = [f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items())
             for group, points in project["entry-points"].items()]
    (dist / "entry_points.txt").write_text("\n".join(lines))


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The page's recipe and backend, each installed as the user's own package."""
    recipe, backend = section("Adding a recipe"), section("Adding a backend")
    site = tmp_path / "site"
    install(site, "agora_terse", fenced(recipe, "python")[0], fenced(recipe, "toml")[0])
    install(site, "agora_echo", fenced(backend, "python")[0], fenced(backend, "toml")[0])
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(tmp_path)
    yield backend
    unregister_recipe("terse")
    unregister_backend("echo")
    for name in ("agora_terse", "agora_echo"):
        sys.modules.pop(name, None)


def test_the_recipe_module_asks_for_one_line_and_keeps_the_last(plugins):
    terse = get_recipe("terse")(ask="One line.")
    assert terse.prepare([{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"}]) == [
        {"role": "system", "content": "S"}, {"role": "user", "content": "Q?\nOne line."}]
    assert terse.finish("6 + 7 = 13.\n\nThe answer is 13.\n").text == "The answer is 13."


def test_the_backend_module_validates_its_entry_and_builds_a_member(plugins, tmp_path):
    assert get_backend("echo").summary == "answers with its entry's reply"
    (tmp_path / "bad.toml").write_text('[[models]]\nname = "e"\nbackend = "echo"\nreply = 5\n')
    with pytest.raises(Exception, match=r"bad.toml: models\[0\] \(e\): field 'reply'"):
        load_pool(tmp_path / "bad.toml")


def test_the_page_pool_file_and_commands_run(plugins, tmp_path):
    _project, pool_toml = fenced(plugins, "toml")[:2]
    (tmp_path / "pool.toml").write_text(pool_toml, encoding="utf-8")
    [script] = fenced(plugins, "bash")
    printf, *commands = [line.split("  #")[0] for line in script.strip().splitlines()]
    subprocess.run(["bash", "-c", printf], cwd=tmp_path, check=True)  # the question file
    outputs = []
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "agora"
        result = CliRunner().invoke(app, argv[1:])
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    assert "echo" in outputs[0] and "terse" in outputs[0]  # agora pool list: the user's plug-ins
    db = sqlite3.connect(tmp_path / "runs.db")
    calls = db.execute("select model, recipe, messages, completion, answer from model_calls order by model").fetchall()
    assert [(m, r, c, a) for m, r, _msgs, c, a in calls] == [
        ("a", "terse", "The answer is 13.", "13"), ("b", None, "The answer is 12.", "12")]
    assert json.loads(calls[0][2])[-1]["content"].endswith("\nGive the answer in one line: 'The answer is N.'")
    [(answer, correct)] = db.execute("select answer, correct from questions").fetchall()
    assert (answer, correct) == ("13", 1)
