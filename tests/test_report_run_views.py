"""``agora report run`` shows what ``agora run`` showed: a COMED run's decisions and rescues/harms, tokens
of samples whose model reports no usage, and (``--disagree A B``) the questions two methods answer
differently. A hand-made COMED run of 4 questions with known counts."""

import json

from typer.testing import CliRunner

from agora.cli.main import app
from agora.traces.store import TraceStore

#: question → (decision, outcome, escalated, anchor's answer, comed's answer); gold 4 for every question
QUESTIONS = {
    "q1": ("accept", "accept", False, "4", "4"),            # both right
    "q2": ("escalate", "escalate", True, "5", "4"),          # a rescue
    "q3": ("verify", "verify_escalate", True, "4", "6"),     # a harm
    "q4": ("verify", "verify_accept", False, "7", "7"),      # both wrong
}


def comed_run(path):
    store = TraceStore(path)
    store.start_run("c", "comed", config={}, pool=[{"name": "m"}], dataset={})
    for idx, (qid, (decision, outcome, escalated, anchor, final)) in enumerate(QUESTIONS.items()):
        calls = [{"call_id": f"{qid}-a", "model": "m", "node": "anchor", "role": "anchor",
                  "completion": f"The answer is {anchor}.", "prompt_tokens": 10, "completion_tokens": 5},
                 {"call_id": f"{qid}-b", "model": "m", "node": "escalate", "role": "peer",  # no usage reported
                  "completion": f"The answer is {final}.", "prompt_tokens": None, "completion_tokens": None}]
        methods = {"comed": {"answer": final, "correct": final == "4", "samples": 2, "completion_tokens": 5},
                   "anchor": {"answer": anchor, "correct": anchor == "4", "samples": 1, "completion_tokens": 5}}
        store.record_question("c", "comed", {"question_id": qid, "idx": idx, "kind": "math", "question": f"{qid}?",
                                             "gold": "4", "answer": final, "correct": final == "4",
                                             "detail": {"decision": decision, "outcome": outcome,
                                                        "escalated": escalated}}, methods, calls)
    store.finish_run("c")
    store.close()
    return path


def report(*args):
    result = CliRunner().invoke(app, ["report", "run", *map(str, args)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_report_run_of_a_comed_run_shows_its_decisions_rescues_and_harms(tmp_path):
    db = comed_run(tmp_path / "t.db")
    text = " ".join(report("c", "--db", db).split())
    assert "decisions: accept 1/4 (25.0%), verify 2/4 (50.0%), escalate 1/4 (25.0%); verify → accept 1, " \
           "verify → escalate 1" in text
    assert "rescue–harm over 4 questions (2 escalated): Acc(COMED) − Acc(anchor) = 2/4 − 2/4 = 0.0 pp = " \
           "rescues 1 − harms 1" in text
    out = json.loads(report("c", "--db", db, "--json"))
    assert out["comed"]["decisions"] == {"accept": 1, "escalate": 1, "verify": 2}
    assert {k: out["comed"]["rescue_harm"][k] for k in ("n", "rescues", "harms", "escalated")} == \
        {"n": 4, "rescues": 1, "harms": 1, "escalated": 2}


def test_report_run_says_when_some_samples_tokens_are_unknown_as_agora_run_does(tmp_path):
    db = comed_run(tmp_path / "t.db")
    text = " ".join(report("c", "--db", db).split())
    assert "20 generated tokens (+ unknown for 4 samples whose model reports no usage)," in text


def test_report_run_lists_the_questions_two_methods_answer_differently(tmp_path):
    db = comed_run(tmp_path / "t.db")
    out = json.loads(report("c", "--db", db, "--json", "--disagree", "anchor", "comed"))
    assert out["disagree"] == [
        {"question_id": "q2", "gold": "4", "anchor": {"answer": "5", "correct": False},
         "comed": {"answer": "4", "correct": True}},
        {"question_id": "q3", "gold": "4", "anchor": {"answer": "4", "correct": True},
         "comed": {"answer": "6", "correct": False}}]
    text = report("c", "--db", db, "--disagree", "anchor", "comed")
    assert "questions where anchor and comed answer differently: 2" in " ".join(text.split())
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]
    assert ["q2", "4", "5 (wrong)", "4 (right)"] in rows and ["q3", "4", "4 (right)", "6 (wrong)"] in rows
    result = CliRunner().invoke(app, ["report", "run", "c", "--db", str(db), "--disagree", "anchor", "moa"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"error: {db}: run 'c' has no method 'moa' (its methods: anchor, comed)" in " ".join(result.output.split())
