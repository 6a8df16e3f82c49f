"""benchmarks/bench_ref2_phases.py (issue 32: the reference run's per-phase wall time): the union of a run's
overlapping question intervals, pauses cut out, and the COMED run split by method, on a hand-made DB."""

import importlib.util
import sqlite3
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_ref2_phases.py"
spec = importlib.util.spec_from_file_location("bench_ref2_phases", SCRIPT)
phases_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(phases_mod)


def test_union_of_overlapping_intervals_minus_pauses():
    # [0, 10] ∪ [5, 12] ∪ [20, 25] = 12 + 5 = 17 s; a pause [8, 22] overlaps 4 + 2 = 6 s of it
    assert phases_mod.union_length([(0, 10), (5, 12), (20, 25)]) == 17
    assert phases_mod.union_length([(0, 10), (5, 12), (20, 25)], [(8, 22)]) == 11


def test_pause_lines_are_read_with_the_date_of_their_start(tmp_path):
    f = tmp_path / "sittings.txt"
    f.write_text("start 2026-12-04T15:58:06Z commit x\n"
                 "pause 2026-12-04T16:08:43Z..16:15:15Z SIGSTOP (why)\n"
                 "end 2026-12-04T18:00:00Z rc 0\n")
    [(a, b)] = phases_mod.pauses(f)
    assert b - a == 6 * 60 + 32


def test_phases_split_a_comed_run_by_its_calls_latency(tmp_path):
    db = tmp_path / "t.db"
    con = sqlite3.connect(db)
    con.execute("create table questions (run_id, question_id, finished_at, wall_s, completion_tokens)")
    con.execute("create table model_calls (run_id, node, latency_s, error)")
    q = [("b:t:candidates", "q1", "2026-12-04T10:00:10+00:00", 10, 100),   # [0, 10] and [5, 12]: 12 s
         ("b:t:candidates", "q2", "2026-12-04T10:00:12+00:00", 7, 50),
         ("b:t:comed", "q1", "2026-12-04T10:01:00+00:00", 40, 30),         # [20, 60]: 40 s
         ("b:t:candidates-dev", "d1", "2026-12-04T09:59:00+00:00", 5, 9)]
    con.executemany("insert into questions values (?, ?, ?, ?, ?)", q)
    con.executemany("insert into model_calls values (?, ?, ?, ?)", [
        ("b:t:comed", "moa_aggregate", 10.0, None), ("b:t:comed", "debate_round", 10.0, None),
        ("b:t:comed", "council_review", 15.0, None), ("b:t:comed", "council_chair", 5.0, None),
        ("b:t:comed", "council_chair", 99.0, "failed"), ("b:t:comed", "probe", 0.0, None)])
    con.commit()
    out = phases_mod.phases(db, "b", None)
    assert out["runs"]["b:t:candidates"]["wall_s"] == pytest.approx(12.0)
    assert out["runs"]["b:t:candidates"]["tokens"] == 150
    # 40 s split by latency 10 : 10 : 20 (failed attempts left out)
    assert out["comed_split"]["b:t:comed"] == pytest.approx({"moa": 10.0, "debate": 10.0, "council": 20.0,
                                                             "comed": 0.0})
    assert out["first_edition_test_s"] == pytest.approx(12.0 + 20.0)
    assert out["council_s"] == pytest.approx(20.0) and out["dev_s"] == pytest.approx(5.0)


def test_the_time_between_sittings_is_cut_from_a_resumed_questions_interval(tmp_path):
    """A question resumed in a second sitting whose ``wall_s`` adds the first sitting's kept steps
    (session 18's runner) reaches back over the gap between sittings; the gap, from the last question
    finished before a ``start`` line to that start, is cut, so is a pause."""
    db = tmp_path / "t.db"
    con = sqlite3.connect(db)
    con.execute("create table questions (run_id, question_id, finished_at, wall_s, completion_tokens)")
    con.execute("create table model_calls (run_id, node, latency_s, error)")
    con.executemany("insert into questions values (?, ?, ?, ?, ?)", [
        ("b:t:candidates", "q1", "2026-12-04T10:00:10+00:00", 10, 1),    # sitting 1: [10:00:00, 10:00:10]
        ("b:t:candidates", "q2", "2026-12-04T11:00:05+00:00", 25, 1),  # 20 s kept before the stop + 5 s after
    ])
    con.commit()
    f = tmp_path / "sittings.txt"
    f.write_text("start 2026-12-04T10:00:00Z commit x\n"
                 "start 2026-12-04T11:00:00Z commit x\n"     # no end line: killed with the session
                 "pause 2026-12-04T11:00:01Z..11:00:02Z SIGSTOP (why)\n")
    assert phases_mod.gaps(phases_mod.sitting_starts(f), [phases_mod._ts("2026-12-04T10:00:10Z")]) == [
        (phases_mod._ts("2026-12-04T10:00:10Z"), phases_mod._ts("2026-12-04T11:00:00Z"))]
    out = phases_mod.phases(db, "b", f)
    # q1 10 s; q2's [10:59:40, 11:00:05] less the gap (to 11:00:00) and the 1 s pause: 4 s
    assert out["runs"]["b:t:candidates"]["wall_s"] == pytest.approx(14.0) and out["pauses_cut_s"] == 1.0
