"""The docs stay true: each protocol page's Mermaid picture is the graph's current one, and its
Python snippets run."""

import json
import re
from pathlib import Path

import pytest

from agora.graphs import registry
from agora.tasks.loaders import FORMATS

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = {spec.docs: spec.compiled() for spec in registry.specs()}
"""Each registered protocol's page and its compiled graph (align.md, comed.md, ..., moa.md, debate.md)."""


def blocks(page: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_mermaid_matches_the_graph(page):
    [mermaid] = blocks(page, "mermaid")
    assert mermaid.strip() == PAGES[page].get_graph(xray=1).draw_mermaid().strip()


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(PAGES))
def test_python_snippets_run(page, capsys):
    snippets = blocks(page, "python")
    assert snippets
    for code in snippets:
        exec(compile(code, f"{DOCS / page}", "exec"), {})
    assert capsys.readouterr().out.strip()


def test_readme_lists_every_task_format():
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    [listed] = re.findall(r"--data FILE --format ([a-z0-9|-]+)`", readme)
    assert listed.split("|") == list(FORMATS)
    table = set(re.findall(r"^\| `([a-z0-9-]+)` \|", readme, flags=re.M))
    assert set(FORMATS) <= table


def test_the_protocol_tables_list_every_registered_protocol():
    """README.md's protocol table names each protocol's graph module; docs/README.md links its page and
    gives its Studio id. A protocol added to the registry must be added to both tables."""
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    docs_index = (DOCS / "README.md").read_text(encoding="utf-8")
    readme_rows = [line for line in readme.splitlines() if line.startswith("| ")]
    index_rows = [line for line in docs_index.splitlines() if line.startswith("| [")]
    for spec in registry.specs():
        module = spec.build.__module__
        assert any(f"`{module}`" in row for row in readme_rows), f"README.md: no protocol-table row for {module}"
        assert any(f"]({spec.docs})" in row and f"`{spec.graph_id}`" in row for row in index_rows), (
            f"docs/README.md: no row linking {spec.docs} with Studio id `{spec.graph_id}`")


def test_embedding_page_snippets_run_in_order(capsys, monkeypatch):
    """docs/embedding.md: your own models, the context rule, streaming, recording traces and the example
    app (examples/agent_app.py, on scripted models), run in order in one namespace, as a reader would."""
    monkeypatch.chdir(DOCS.parent)
    namespace: dict = {}
    for code in blocks("embedding.md", "python"):
        exec(compile(code, str(DOCS / "embedding.md"), "exec"), namespace)
    out = capsys.readouterr().out
    assert "DelegationContext: unknown field(s) pol; its fields are pool, config" in out
    assert "{'align': 'my-app-align'} {'align': 1}" in out
    assert "-> align: 7" in out and "agent-app-align  align  finished  1 question(s)" in out  # the example app


def test_the_embedding_and_studio_pages_are_linked_from_the_readme():
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "(docs/embedding.md)" in readme and "(docs/studio.md)" in readme


def test_the_studio_page_documents_the_safe_command_and_a_context_with_a_pool():
    page = (DOCS / "studio.md").read_text(encoding="utf-8")
    assert "agora studio" in page and "loaded from the internet" in page
    bodies = [json.loads(b) for b in re.findall(r"-d '(\{.*?\})'", page, flags=re.S)]
    assert any(b.get("context", {}).get("pool") == "tiny" for b in bodies), bodies


ISSUE_NUMBER = re.compile(r"\b(?:issues?|PR|pull request)[\s-]*#?\d+|(?:^|\()#\d+\b", re.IGNORECASE)
"""One of Agora's issue numbers (``issue 32``, ``issues 18 and 30``, ``(#41)``): work history, which a
user's page does not need (it stays in commit messages and ``benchmarks/README.md``). An upstream
project's (``llama.cpp #20824``) is a source a user may follow."""


def issue_numbers(text: str) -> list[str]:
    """``line: text`` of every issue number in ``text`` (code spans left out: ``horse #12`` is an example)."""
    return [f"{number}: {line.strip()}" for number, line in enumerate(text.splitlines(), 1)
            if ISSUE_NUMBER.search(re.sub(r"`[^`]*`", "", line))]


def test_the_checker_finds_issue_numbers():
    assert issue_numbers("the claims of issue 18 (CLAIMS)\nfixed (#41).\nIssues 18 and 30 say\nthe issue-32 sections\n") == [
        "1: the claims of issue 18 (CLAIMS)", "2: fixed (#41).", "3: Issues 18 and 30 say", "4: the issue-32 sections"]
    assert issue_numbers("labels (`horse #12`); see [§6](scoring.md#6-where-scoring-happens); (llama.cpp #20824)") == []


def test_readme_and_docs_cite_no_issue_numbers():
    pages = [DOCS.parent / "README.md", *sorted(DOCS.rglob("*.md"))]
    cited = {str(page.relative_to(DOCS.parent)): hits for page in pages
             if (hits := issue_numbers(page.read_text(encoding="utf-8")))}
    assert not cited, f"pages speak to users; issue numbers belong in commits and benchmarks/README.md: {cited}"


PRODUCT = ("agents", "models", "graphs", "traces", "runs", "training", "tasks", "cli")
"""The packages a user imports (not tests, not benchmarks)."""


def docstrings_and_comments(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every docstring (module, class, function) and every ``#`` comment of a module."""
    import ast
    import io
    import tokenize

    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for attempt in range(5):
        # CPython 3.11's AST builder keeps one recursion counter per interpreter, and a parse in another
        # thread (langchain-core parses function sources on graph threads a test left running) can make
        # this one fail with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905).
        try:
            tree = ast.parse(source)
            break
        except SystemError:
            if attempt == 4:
                raise
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.append((first.lineno, first.value.value))
    return found


def test_the_product_checker_reads_docstrings_and_comments():
    source = '''"""Module (issue 32)."""
x = "issue 7 in a string is not read"  # a comment (#41)


def f():
    """The report's issue-32 sections."""
'''
    hits = [(line, hit) for line, text in docstrings_and_comments(source) for hit in issue_numbers(text)]
    assert sorted(hits) == [(1, "1: Module (issue 32)."), (2, "1: # a comment (#41)"),
                            (6, "1: The report's issue-32 sections.")]


def test_product_docstrings_and_comments_cite_no_issue_numbers():
    root = DOCS.parent
    cited = [f"{path.relative_to(root)}:{line + int(hit.split(': ', 1)[0]) - 1}: {hit.split(': ', 1)[1]}"
             for package in PRODUCT for path in sorted((root / package).rglob("*.py"))
             for line, text in docstrings_and_comments(path.read_text(encoding="utf-8"))
             for hit in issue_numbers(text)]
    assert not cited, "docstrings and comments say what the code does; issue numbers belong in commits:\n" + "\n".join(cited)
