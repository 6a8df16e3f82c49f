"""Trace bundles (issue 30 item 5): ``agora export`` → ``agora import`` into an empty DB gives the same
reports, replays and DPO rows as the original; importing twice adds nothing; truncated, newer and
conflicting bundles are refused without writing anything."""

import gzip
import json
import sqlite3

import pytest
from typer.testing import CliRunner

import agora.cli.bench as bench_cli
from agora.cli.main import app
from agora.training.datasets import align_pairs, dpo_rows
from agora.traces.bench import bench_report
from agora.traces.bench_spec import read_bench_spec
from agora.traces.bundle import FORMAT, VERSION
from agora.traces.bundle_reading import read_header
from agora.traces.store import TraceStore
from test_bench import bench_args, scripted_pool, write_tasks


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bundle")
    math_file, mc_file = write_tasks(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
        result = CliRunner().invoke(app, bench_args(math_file, mc_file, tmp / "t.db", tmp / "b"))
    assert result.exit_code == 0, result.output
    bundle = tmp / "b1.agora.jsonl.gz"
    result = CliRunner().invoke(app, ["export", "--db", str(tmp / "t.db"), "--bench-id", "b1", "--out", str(bundle)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "4 runs" in result.output
    return tmp / "t.db", bundle


def table_counts(db):
    with sqlite3.connect(db) as conn:
        have = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
        return {t: conn.execute(f"select count(*) from [{t}]").fetchone()[0] if t in have else 0
                for t in ("runs", "questions", "results", "model_calls", "benches", "bench_cells")}


def outputs(db):
    """What a user reads from a trace DB: reports, replays, DPO rows, the bench report."""
    run = CliRunner()
    out = {"runs": run.invoke(app, ["report", "runs", "--db", str(db), "--json"]).output}
    for r in ("b1:arith:align", "b1:quiz:comed"):
        out[f"run {r}"] = run.invoke(app, ["report", "run", r, "--db", str(db), "--json"]).output
    out["question"] = run.invoke(app, ["report", "question", "--db", str(db), "--run-id", "b1:arith:align",
                                       "--question-id", "arith-3", "--json"]).output
    for r, rule, extra in (("b1:arith:align", "align", ["--param", "tau=0.9"]), ("b1:arith:align", "plurality", []),
                           ("b1:quiz:comed", "comed", []),
                           ("b1:arith:align", "weighted_vote", ["--dev-run-id", "b1:quiz:align"])):
        out[f"replay {r} {rule}"] = run.invoke(app, ["replay", "--db", str(db), "--run-id", r, "--rule", rule,
                                                     "--json", *extra]).output
    out["dpo"] = dpo_rows(align_pairs(db))
    store = TraceStore(db, readonly=True)
    report = bench_report(store, read_bench_spec(store, "b1"))
    report.pop("generated_at")
    out["bench"] = json.dumps(report, sort_keys=True, default=str)
    return out


def test_export_then_import_into_an_empty_db_reads_exactly_like_the_original(exported, tmp_path):
    db, bundle = exported
    head = read_header(bundle)
    assert (head["format"], head["version"]) == (FORMAT, VERSION)
    assert head["runs"] == ["b1:arith:align", "b1:arith:comed", "b1:quiz:align", "b1:quiz:comed"]
    assert head["tables"]["model_calls"]["primary_key"] == ["call_id"]
    assert "answer" in head["tables"]["model_calls"]["columns"]
    copy = tmp_path / "copy.db"
    result = CliRunner().invoke(app, ["import", str(bundle), "--db", str(copy)])
    assert result.exit_code == 0, result.output
    assert "rows skipped: none" in result.output
    assert table_counts(copy) == table_counts(db)
    want, got = outputs(db), outputs(copy)
    # ALIGN pairs: arith, agent 0 right over agent 1's plurality "0" (4); quiz, agent 1's A over agent 0's B (3)
    assert len(want["dpo"]) == 7
    for key in want:
        assert got[key] == want[key], key
    assert json.loads(want["replay b1:arith:align align"])["rows"]


def test_importing_twice_adds_nothing(exported, tmp_path):
    _, bundle = exported
    copy = tmp_path / "copy.db"
    assert CliRunner().invoke(app, ["import", str(bundle), "--db", str(copy)]).exit_code == 0
    before = table_counts(copy)
    result = CliRunner().invoke(app, ["import", str(bundle), "--db", str(copy)])
    assert result.exit_code == 0 and "rows added: none" in result.output
    assert table_counts(copy) == before
    assert f"rows skipped: {sum(before.values())} identical to rows already in {copy}\n" in result.output


def test_a_truncated_newer_or_conflicting_bundle_is_refused_and_writes_nothing(exported, tmp_path):
    db, bundle = exported
    lines = gzip.open(bundle, "rt", encoding="utf-8").read().splitlines()
    cut = tmp_path / "cut.agora.jsonl.gz"
    with gzip.open(cut, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines[:-1]) + "\n")  # no footer
    target = tmp_path / "t.db"
    result = CliRunner().invoke(app, ["import", str(cut), "--db", str(target)])
    assert result.exit_code == 2 and "truncated" in result.output
    assert table_counts(target)["model_calls"] == 0
    newer = tmp_path / "newer.agora.jsonl.gz"
    with gzip.open(newer, "wt", encoding="utf-8") as f:
        f.write("\n".join([json.dumps({**json.loads(lines[0]), "version": VERSION + 1})] + lines[1:]) + "\n")
    result = CliRunner().invoke(app, ["import", str(newer), "--db", str(target)])
    assert result.exit_code == 2 and f"reads versions up to {VERSION}" in result.output
    # the same run id, started at another time: another run, refused rather than mixed
    other = TraceStore(tmp_path / "other.db")
    other.start_run("b1:arith:align", "align", config={}, pool=[], dataset={})
    other.close()
    result = CliRunner().invoke(app, ["import", str(bundle), "--db", str(tmp_path / "other.db")])
    assert result.exit_code == 2 and "already exists" in result.output and "as another run" in result.output
    assert table_counts(tmp_path / "other.db")["model_calls"] == 0
    notgz = tmp_path / "x.agora.jsonl.gz"
    notgz.write_text("hello")
    result = CliRunner().invoke(app, ["import", str(notgz), "--db", str(target)])
    assert result.exit_code == 2 and "not a readable gzip bundle" in result.output


def test_export_refuses_unknown_runs_and_exports_single_runs(exported, tmp_path):
    db, _ = exported
    result = CliRunner().invoke(app, ["export", "--db", str(db), "--run-id", "nope", "--out", str(tmp_path / "x.gz")])
    assert result.exit_code == 2 and "no run 'nope'" in result.output
    one = tmp_path / "one.agora.jsonl.gz"
    assert CliRunner().invoke(app, ["export", "--db", str(db), "--run-id", "b1:quiz:comed", "--out",
                                    str(one)]).exit_code == 0
    copy = tmp_path / "one.db"
    assert CliRunner().invoke(app, ["import", str(one), "--db", str(copy)]).exit_code == 0
    counts = table_counts(copy)
    assert counts["runs"] == 1 and counts["questions"] == 3 and counts["benches"] == 0


def test_import_refuses_rows_of_runs_the_header_does_not_list_or_new_rows_for_an_existing_run(exported, tmp_path):
    _, bundle = exported
    lines = gzip.open(bundle, "rt", encoding="utf-8").read().splitlines()
    head = json.loads(lines[0])
    target = tmp_path / "t.db"
    assert CliRunner().invoke(app, ["import", str(bundle), "--db", str(target)]).exit_code == 0
    before = table_counts(target)

    def write(name, rows):
        p = tmp_path / name
        with gzip.open(p, "wt", encoding="utf-8") as f:
            f.write("\n".join(rows) + "\n")
        return p

    # a questions row re-labelled with a run id the header does not list
    qcols = list(head["tables"]["questions"]["columns"])
    qline = next(json.loads(x) for x in lines[1:] if json.loads(x).get("t") == "questions")
    v = list(qline["v"])
    v[qcols.index("run_id")] = "not-in-header"
    evil = write("e1.gz", [lines[0], json.dumps({"t": "questions", "v": v})] + lines[1:])
    result = CliRunner().invoke(app, ["import", str(evil), "--db", str(target)])
    assert result.exit_code == 2 and "questions: run_id 'not-in-header' is not one of the bundle header's runs" in result.output
    # a new question injected into a run that already exists in the target
    v = list(qline["v"])
    v[qcols.index("question_id")] = "injected-1"
    runs_end = max(i for i, x in enumerate(lines) if json.loads(x).get("t") == "runs")
    evil = write("e2.gz", lines[:runs_end + 1] + [json.dumps({"t": "questions", "v": v})] + lines[runs_end + 1:])
    result = CliRunner().invoke(app, ["import", str(evil), "--db", str(target)])
    assert result.exit_code == 2 and "already exists" in result.output and "identical rows" in result.output
    assert table_counts(target) == before


def test_a_tampered_header_column_is_refused_naming_the_file_and_field(exported, tmp_path):
    _, bundle = exported
    lines = gzip.open(bundle, "rt", encoding="utf-8").read().splitlines()
    head = json.loads(lines[0])
    cols = head["tables"]["runs"]["columns"]
    head["tables"]["runs"]["columns"] = {('run_id" TEXT); DROP x' if c == "run_id" else c): ty for c, ty in cols.items()}
    bad = tmp_path / "bad.gz"
    with gzip.open(bad, "wt", encoding="utf-8") as f:
        f.write("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    result = CliRunner().invoke(app, ["import", str(bad), "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2
    assert f"{bad}:1: tables.runs.columns: " in result.output and "not a plain column name" in result.output


def test_export_refuses_an_existing_out_and_a_bad_import_creates_no_database(exported, tmp_path):
    db, bundle = exported
    keep = tmp_path / "keep.txt"
    keep.write_text("mine")
    result = CliRunner().invoke(app, ["export", "--db", str(db), "--bench-id", "b1", "--out", str(keep)])
    assert result.exit_code == 2 and "the file exists" in result.output and "--force" in result.output
    assert keep.read_text() == "mine"
    assert CliRunner().invoke(app, ["export", "--db", str(db), "--bench-id", "b1", "--out", str(keep),
                                    "--force"]).exit_code == 0
    lines = gzip.open(bundle, "rt", encoding="utf-8").read().splitlines()
    cut = tmp_path / "cut.gz"
    with gzip.open(cut, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines[:-1]) + "\n")
    result = CliRunner().invoke(app, ["import", str(cut), "--db", str(tmp_path / "new.db")])
    assert result.exit_code == 2 and "truncated" in result.output
    assert not (tmp_path / "new.db").exists()


def _rewrite(bundle, out, edit_head=None, edit_row=None):
    lines = gzip.open(bundle, "rt", encoding="utf-8").read().splitlines()
    head = json.loads(lines[0])
    if edit_head:
        edit_head(head)
    rows = [json.loads(x) for x in lines[1:]]
    if edit_row:
        rows = [edit_row(r) for r in rows]
    with gzip.open(out, "wt", encoding="utf-8") as f:
        f.write("\n".join([json.dumps(head)] + [json.dumps(r) for r in rows]) + "\n")
    return out


def _copy_db(db, to):
    with sqlite3.connect(db) as src, sqlite3.connect(to) as dst:
        src.backup(dst)
    return to


def test_export_onto_its_own_database_is_refused_and_the_database_survives(exported, tmp_path):
    db, _ = exported
    copy = _copy_db(db, tmp_path / "copy.db")
    before = copy.read_bytes()
    result = CliRunner().invoke(app, ["export", "--db", str(copy), "--bench-id", "b1", "--out", str(copy), "--force"])
    assert result.exit_code == 2 and "that is the trace database being exported" in result.output
    assert copy.read_bytes() == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")]  # no temporary file left behind


def test_a_refused_import_leaves_an_existing_databases_schema_unchanged(exported, tmp_path):
    """The header's new tables and columns are made in the import's transaction: a refusal later in the
    file (here a run that exists with other content) rolls them back; a table name that is not plain
    is refused before anything is read."""
    db, bundle = exported
    target = _copy_db(db, tmp_path / "t.db")
    schema = lambda: list(sqlite3.connect(target).execute("select name, sql from sqlite_master order by name"))  # noqa: E731
    before = schema()

    def extra(head):
        head["tables"]["runs"]["columns"]["extra"] = "TEXT"
        head["tables"]["notes2"] = {"columns": {"run_id": "TEXT", "x": "TEXT"}, "primary_key": ["run_id"]}

    def changed(row):
        if row.get("t") == "runs":
            row["v"] = [row["v"][0], "moa"] + row["v"][2:] + ["x"]
        return row

    bad = _rewrite(bundle, tmp_path / "bad.gz", extra, changed)
    result = CliRunner().invoke(app, ["import", str(bad), "--db", str(target)])
    assert result.exit_code == 2 and "already exists" in result.output, result.output
    assert schema() == before
    evil = _rewrite(bundle, tmp_path / "evil.gz",
                    lambda h: h["tables"].__setitem__("x]; drop table runs; --", {"columns": {"run_id": "TEXT"}}))
    result = CliRunner().invoke(app, ["import", str(evil), "--db", str(target)])
    assert result.exit_code == 2 and f"{evil}:1: tables: " in result.output and "not a plain table name" in result.output
    assert schema() == before


def test_an_integer_beyond_64_bits_is_refused_in_one_line(exported, tmp_path):
    _, bundle = exported
    cols = {}

    def big(row):
        if row.get("t") == "questions" and not cols:
            cols["done"] = True
            row["v"] = [10**30 if isinstance(v, int) and not isinstance(v, bool) else v for v in row["v"]]
        return row

    bad = _rewrite(bundle, tmp_path / "big.gz", edit_row=big)
    result = CliRunner().invoke(app, ["import", str(bad), "--db", str(tmp_path / "n.db")])
    assert result.exit_code == 2 and "beyond SQLite's 64-bit integers" in result.output, result.output
    assert not (tmp_path / "n.db").exists()


@pytest.mark.parametrize("interrupt_at", [3, 17, 40])
def test_a_partial_bench_moved_as_a_bundle_resumes_on_another_machine(tmp_path, monkeypatch, interrupt_at):
    """A long bench outlives the machine it started on: interrupted (in its dev phase, before it records
    its spec, at the 3rd call; in its test runs after), exported, imported into an empty DB (a new
    machine's), and resumed there, it ends with the results of a bench run in one go (the reference run
    is carried between sessions this way: benchmarks/bench_ref.sh)."""
    math_file, mc_file = write_tasks(tmp_path)
    args = lambda db, out: bench_args(math_file, mc_file, db, out, "--dev", "1",  # noqa: E731
                                      design="--shared-candidates")
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    r0 = CliRunner().invoke(app, args(tmp_path / "ref.db", tmp_path / "ref")); assert r0.exit_code == 0, r0.output
    counter = {}
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool(counter, interrupt_at=[interrupt_at]))
    cut = CliRunner().invoke(app, args(tmp_path / "old.db", tmp_path / "old"))
    assert cut.exit_code == 130, cut.output
    bundle = tmp_path / "partial.agora.jsonl.gz"
    moved = CliRunner().invoke(app, ["export", "--db", str(tmp_path / "old.db"), "--bench-id", "b1", "--out", str(bundle)])
    assert moved.exit_code == 0, moved.output
    assert ("benches b1" in moved.output) == (interrupt_at > 3), moved.output  # no spec yet in the dev phase
    db = tmp_path / "new.db"
    loaded = CliRunner().invoke(app, ["import", str(bundle), "--db", str(db)])
    assert loaded.exit_code == 0, loaded.output
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    result = CliRunner().invoke(app, args(db, tmp_path / "new"))
    assert result.exit_code == 0, result.output
    key = "select run_id, question_id, method, answer, correct from results order by run_id, question_id, method"
    assert list(TraceStore(db).db.query(key)) == list(TraceStore(tmp_path / "ref.db").db.query(key))
    want = json.loads((tmp_path / "ref" / "bench.json").read_text())
    got = json.loads((tmp_path / "new" / "bench.json").read_text())
    untimed = lambda cells: [{k: v for k, v in c.items() if not k.endswith("_s_per_q")} for c in cells]  # noqa: E731
    assert got["complete"] and untimed(got["cells"]) == untimed(want["cells"])


def _partial_bench_imported(tmp_path, monkeypatch, interrupt_at):
    """A bench run in one go (``ref.db``), and the same bench interrupted at the ``interrupt_at``-th model
    call, exported and imported into ``new.db``; returns the task files and the new DB."""
    math_file, mc_file = write_tasks(tmp_path)
    args = lambda db, out: bench_args(math_file, mc_file, db, out, "--dev", "1",  # noqa: E731
                                      design="--shared-candidates")
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    r0 = CliRunner().invoke(app, args(tmp_path / "ref.db", tmp_path / "ref")); assert r0.exit_code == 0, r0.output
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool({}, interrupt_at=[interrupt_at]))
    assert CliRunner().invoke(app, args(tmp_path / "old.db", tmp_path / "old")).exit_code == 130
    bundle = tmp_path / "partial.agora.jsonl.gz"
    assert CliRunner().invoke(app, ["export", "--db", str(tmp_path / "old.db"), "--bench-id", "b1",
                                    "--out", str(bundle)]).exit_code == 0
    db = tmp_path / "new.db"
    assert CliRunner().invoke(app, ["import", str(bundle), "--db", str(db)]).exit_code == 0
    monkeypatch.setattr(bench_cli, "get_pool", lambda path: scripted_pool())
    return math_file, mc_file, db


def _copied(files, folder):
    folder.mkdir()
    for f in files:
        (folder / f.name).write_text(f.read_text())
    return [folder / f.name for f in files]


RESULTS = "select run_id, question_id, method, answer, correct from results order by run_id, question_id, method"


@pytest.mark.parametrize("interrupt_at", [3, 40])
def test_a_moved_bench_resumes_on_task_files_at_another_path_holding_the_same_questions(tmp_path, monkeypatch,
                                                                                           interrupt_at):
    """On another machine the task files sit elsewhere: the imported bench resumes on copies in another
    folder (same names, so the same task names and run ids) and ends with the results of a bench run in
    one go; its runs keep the paths they started on, its spec names the files it was resumed on."""
    math_file, mc_file, db = _partial_bench_imported(tmp_path, monkeypatch, interrupt_at)
    done_before = TraceStore(db).db.execute("select count(*) from questions").fetchone()[0]
    moved_math, moved_mc = _copied([math_file, mc_file], tmp_path / "elsewhere")
    result = CliRunner().invoke(app, bench_args(moved_math, moved_mc, db, tmp_path / "new", "--dev", "1",
                                                design="--shared-candidates"))
    assert result.exit_code == 0, result.output
    store = TraceStore(db)
    assert list(store.db.query(RESULTS)) == list(TraceStore(tmp_path / "ref.db").db.query(RESULTS))
    assert done_before > 0 or interrupt_at == 3
    want = json.loads((tmp_path / "ref" / "bench.json").read_text())
    got = json.loads((tmp_path / "new" / "bench.json").read_text())
    untimed = lambda cells: [{k: v for k, v in c.items() if not k.endswith("_s_per_q")} for c in cells]  # noqa: E731
    assert got["complete"] and untimed(got["cells"]) == untimed(want["cells"])
    dev_path = json.loads(store.get_run("b1:arith:candidates-dev")["dataset"])["path"]  # started before the move
    assert dev_path.startswith(f"{math_file}: its last 1 questions"), dev_path
    assert [t.path for t in read_bench_spec(store, "b1").tasks] == [str(moved_math), str(moved_mc)]


def test_a_moved_bench_whose_task_file_holds_edited_questions_is_refused_naming_both_paths(tmp_path, monkeypatch):
    math_file, mc_file, db = _partial_bench_imported(tmp_path, monkeypatch, 40)
    moved_math, moved_mc = _copied([math_file, mc_file], tmp_path / "elsewhere")
    moved_math.write_text(moved_math.read_text().replace("What is 2 + 2?", "What is 2 + 3?"))  # a test question
    before = table_counts(db), read_bench_spec(TraceStore(db), "b1")
    result = CliRunner().invoke(app, bench_args(moved_math, moved_mc, db, tmp_path / "new", "--dev", "1",
                                                design="--shared-candidates"))
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())  # the console wraps long lines
    assert (f"run id 'b1:arith:candidates' in {db} was started on \"{math_file}\" and is resumed on \"{moved_math}\": "
            "1 of the 3 questions compared differ (text, gold or options; e.g. 'arith-2')") in line, result.output
    assert (table_counts(db), read_bench_spec(TraceStore(db), "b1")) == before  # nothing run, the spec as it was
