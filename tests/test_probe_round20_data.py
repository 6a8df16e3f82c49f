"""Probes of the trace data path and the training data commands, round 20: a bundle exported under a
plain ``.jsonl`` name (it was gzip all the same), a zero-byte ``--db`` read for training data ("no
recorded call"), an export of a look-alike run id ("no run", naming no run), the ``--aggregate``
empty-dataset warning without the calls it did not read; then new kinds of bad input. Every figure
by hand, on scripted trace DBs; no model is loaded."""

from __future__ import annotations

import gzip
import json
import sqlite3
import sys
from pathlib import Path

import pytest
import sqlite_utils

sys.path.insert(0, str(Path(__file__).parent))
from cli_runs import agora, one_error_line  # noqa: E402
from test_probe_round16_data import ROWS, RUN, _record, counts  # noqa: E402
from test_probe_round19_data import RIGHT  # noqa: E402

from agora.traces.bundle_reading import check_bundle  # noqa: E402


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """Run R's database (ALIGN, members a and b, q1 and q2: 23 rows)."""
    return _record(tmp_path_factory.mktemp("r20"))


# ------------------------------------------------------------------ known 1: --out without .gz


@pytest.mark.parametrize("name", ["s.jsonl", "s.agora.jsonl", "bundle"])
def test_a_bundle_exported_under_a_plain_name_is_plain_json_lines_and_imports(recorded, tmp_path, name):
    """``--out s.jsonl`` wrote gzip under a name that says JSON Lines text: ``head s.jsonl`` printed
    binary. A name not ending in ``.gz`` now gets plain JSON Lines (the same lines), and ``agora
    import`` reads it back row for row."""
    out = tmp_path / name
    code, output = agora("export", "--db", recorded, "--run-id", RUN, "--out", out)
    assert code == 0, output
    assert "plain JSON Lines, not compressed" in " ".join(output.split()), output
    raw = out.read_bytes()
    assert raw[:2] != b"\x1f\x8b"
    lines = raw.decode("utf-8").splitlines()
    assert json.loads(lines[0])["runs"] == [RUN] and json.loads(lines[-1])["end"] is True
    assert len(lines) == 1 + sum(ROWS.values()) + 1
    gz = tmp_path / "s.agora.jsonl.gz"  # the same rows as the compressed bundle
    assert agora("export", "--db", recorded, "--run-id", RUN, "--out", gz)[0] == 0
    assert gzip.decompress(gz.read_bytes()).splitlines()[1:-1] == raw.splitlines()[1:-1]  # (the header: its time)
    assert check_bundle(out)["runs"] == [RUN]
    code, output = agora("import", out, "--db", tmp_path / "t.db")
    assert code == 0, output
    assert counts(tmp_path / "t.db") == ROWS


def test_a_gzip_bundle_under_a_plain_name_still_imports(recorded, tmp_path):
    """A bundle an earlier Agora wrote as gzip under ``s.jsonl`` is read by its content."""
    gz = tmp_path / "s.agora.jsonl.gz"
    assert agora("export", "--db", recorded, "--run-id", RUN, "--out", gz)[0] == 0
    old = tmp_path / "s.jsonl"
    old.write_bytes(gz.read_bytes())
    code, output = agora("import", old, "--db", tmp_path / "t.db")
    assert code == 0, output
    assert counts(tmp_path / "t.db") == ROWS


# ------------------------------------------------------------------ known 2: a zero-byte --db for training


@pytest.mark.parametrize("flags", [("sft",), ("dpo", "--pairs", "own", "--validation", 0), ("dpo",),
                                   ("sft", "--aggregate", 2, "--shots", 0), ("grpo", "--aggregate", 2)])
def test_a_zero_byte_training_db_is_said_to_hold_no_traces(tmp_path, flags):
    """``error: --model 'm': no recorded call of it in z.db (members recorded: none)`` (and for duel
    pairs 'in no preference pair'; --aggregate wrote an empty dataset with a warning) of a file that
    is empty: not an Agora trace database at all."""
    db = tmp_path / "z.db"
    db.write_bytes(b"")
    code, output = agora("train", flags[0], "--data-only", "--db", db, "--model", "m", "--out", tmp_path / "o",
                         *flags[1:])
    assert code == 2, output
    assert one_error_line(output) == (f"error: {db}: holds no Agora traces (no runs table; an empty database, or "
                                      "one a run is creating right now)")
    assert db.read_bytes() == b"" and not (tmp_path / "o").exists()


# ------------------------------------------------------------------ known 3: export of a look-alike run id


def test_export_of_a_look_alike_run_id_names_the_run_it_looks_like(recorded, tmp_path):
    """Before: ``no run 'R.' (`agora report runs` lists them)`` only; report run and replay name the
    run the id looks like."""
    out = tmp_path / "x.agora.jsonl.gz"
    code, output = agora("export", "--db", recorded, "--run-id", "R.", "--out", out)
    assert code == 2, output
    assert one_error_line(output) == (f"error: {recorded}: no run 'R.' (`agora report runs` lists them); the run 'R' "
                                      "looks like it (yours ends in '.')")
    code, output = agora("export", "--db", recorded, "--run-id", "R.", "--run-id", "x", "--out", out)
    assert code == 2, output
    assert one_error_line(output) == (f"error: {recorded}: no run 'R.', 'x' (`agora report runs` lists them); for "
                                      "'R.': the run 'R' looks like it (yours ends in '.')")
    assert not out.exists()


# ------------------------------------------------------------------ known 4: --aggregate's empty warning


def test_the_aggregate_empty_warning_counts_the_calls_it_did_not_read(tmp_path):
    """The other empty-dataset warnings end ``calls not read: no_gold 2``; --aggregate's did not."""
    db = tmp_path / "a.db"
    d = sqlite_utils.Database(db)
    d["runs"].insert({"run_id": "r", "protocol": "x"}, pk="run_id")
    d["model_calls"].insert_all(RIGHT, pk="call_id")
    for command, what in (("sft", "verified answers"), ("grpo", "prompts")):
        code, output = agora("train", command, "--aggregate", 2, "--data-only", "--db", db, "--model", "m", "--out",
                             tmp_path / command)
        assert code == 0, output
        assert (f"warning: no {what} to train 'm' on: no question has 2 recorded samples to show (the most for one "
                "question: 0, over 0 questions with gold); lower --aggregate or record more samples; calls not read: "
                "no_gold 2 (training would refuse this dataset)") in " ".join(output.split()), output
