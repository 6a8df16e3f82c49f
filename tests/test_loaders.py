import json

import pytest
from typer.testing import CliRunner

from agora.tasks import TaskFormatError, load_problems, synthetic_problems
from agora.tasks.loaders import detect_format, last_boxed


def write(tmp_path, name, records):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_gsm8k(tmp_path):
    path = write(tmp_path, "g.jsonl", [{"question": "Q1?", "answer": "5 + 6 = 11\n#### 1,100"}])
    [p] = load_problems(path, "gsm8k")
    assert (p.question, p.gold, p.kind, p.id) == ("Q1?", "1100", "math", "g-1")
    assert detect_format(path) == "gsm8k"


def test_gsm_hard(tmp_path):
    path = write(tmp_path, "h.jsonl", [{"input": "Q?", "code": "...", "target": 3.5}, {"input": "R?", "target": 7.0}])
    p, q = load_problems(path, "gsm-hard")
    assert (p.gold, q.gold) == ("3.5", "7")
    assert detect_format(path) == "gsm-hard"


def test_math_answer_or_boxed_solution(tmp_path):
    path = write(tmp_path, "m.jsonl", [
        {"problem": "P1", "answer": "\\frac{1}{2}", "unique_id": "u1"},
        {"problem": "P2", "solution": "so $x=\\boxed{\\frac{a}{\\sqrt{b}}}$ and \\boxed{\\{1,2\\}}"},
    ])
    p1, p2 = load_problems(path, "math")
    assert (p1.id, p1.gold) == ("u1", "\\frac{1}{2}")
    assert p2.gold == "\\{1,2\\}"
    assert last_boxed("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"


def test_multiple_choice_formats(tmp_path):
    path = write(tmp_path, "mc.jsonl", [
        {"question": "MedQA?", "options": {"A": "x", "B": "y", "C": "z", "D": "w"}, "answer_idx": "C"},
        {"question": "MMLU?", "choices": ["a", "b", "c", "d"], "answer": 3, "subject": "s"},
        {"id": "arc1", "question": "ARC?", "choices": {"text": ["p", "q", "r"], "label": ["A", "B", "C"]}, "answerKey": "B"},
        {"id": "arc2", "question": "ARC2?", "choices": {"text": ["p", "q"], "label": ["1", "2"]}, "answerKey": "2"},
    ])
    medqa, mmlu, arc, arc2 = load_problems(path, "mc")
    assert (medqa.gold, medqa.n_choices) == ("C", 4)
    assert "C. z" in medqa.question
    assert (mmlu.gold, mmlu.kind) == ("D", "mc")
    assert (arc.gold, arc.n_choices) == ("B", 3)
    assert arc2.gold == "B" and "B. q" in arc2.question


@pytest.mark.parametrize(
    "fmt, line, needle",
    [
        ("gsm8k", '{"question": "Q?"}', "field 'answer': missing"),
        ("gsm8k", '{"question": "Q?", "answer": "no marker"}', "field 'answer': no '#### N'"),
        ("gsm-hard", '{"input": "Q?", "target": "abc"}', "field 'target': not a number"),
        ("math", '{"problem": "P", "solution": "no box"}', "field 'solution'"),
        ("mc", '{"question": "Q", "choices": ["a", "b"], "answer": 5}', "field 'answer'"),
        ("mc", '{"question": "Q", "options": {"A": "x", "B": "y"}, "answer_idx": "E"}', "field 'answer_idx'"),
        ("gsm8k", '{"question": "Q?", "answer": "#### 3"', "invalid JSON"),
        ("gsm8k", '[1, 2]', "expected a JSON object"),
    ],
)
def test_malformed_line_names_file_line_and_field(tmp_path, fmt, line, needle):
    good = {"gsm8k": {"question": "ok", "answer": "#### 1"}, "gsm-hard": {"input": "ok", "target": 1},
            "math": {"problem": "ok", "answer": "1"}, "mc": {"question": "ok", "choices": ["a", "b"], "answer": 0}}[fmt]
    path = write(tmp_path, "bad.jsonl", [good, "", line])
    with pytest.raises(TaskFormatError) as err:
        load_problems(path, fmt)
    assert str(err.value).startswith(f"{path}:3: ")
    assert needle in str(err.value)


def test_bare_prompts_are_detected_but_an_unknown_gold_field_is_not(tmp_path):
    for field in ("prompt", "instruction", "text", "question"):
        path = write(tmp_path, f"{field}.jsonl", [{field: "Write a haiku about rain."}])
        assert detect_format(path) == "prompts"
        [p] = load_problems(path, detect_format(path))
        assert (p.question, p.gold, p.kind) == ("Write a haiku about rain.", None, "open")
    # a gold answer in no known format is not silently dropped as a bare prompt
    path = write(tmp_path, "qa.jsonl", [{"question": "Q?", "answer": "42"}])
    with pytest.raises(TaskFormatError, match=r"qa.jsonl:1: cannot tell the format from fields \['answer', 'question'\]"):
        detect_format(path)


def test_converse_reads_a_prompts_file_without_format(tmp_path, monkeypatch):
    import agora.cli.converse as converse_cli
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.cli.main import app
    from agora.traces.store import TraceStore

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=lambda chat, i, m=m: f"{m} says hi")
                                       for m in ("a", "b")})
    monkeypatch.setattr(converse_cli, "load_pool", lambda path: pool)
    prompts = write(tmp_path, "prompts.jsonl", [{"prompt": "Say hi."}])
    result = CliRunner().invoke(app, ["converse", "--prompts", str(prompts), "--pool", "pool.toml", "--turns", "2",
                                      "--db", str(tmp_path / "t.db"), "--run-id", "c"])
    assert result.exit_code == 0, result.output
    assert "2 ordered pairs × 1 prompts prompts × 2 turns" in result.output
    calls = TraceStore(tmp_path / "t.db").calls("c:a>b")
    assert [(c["model"], c["partner"]) for c in calls] == [("a", None), ("b", "a")]


def test_limit_and_missing_file(tmp_path):
    path = write(tmp_path, "g.jsonl", [{"question": f"Q{i}", "answer": f"#### {i}"} for i in range(5)])
    assert [p.gold for p in load_problems(path, "gsm8k", limit=2)] == ["0", "1"]
    with pytest.raises(TaskFormatError, match="file not found"):
        load_problems(tmp_path / "nope.jsonl", "gsm8k")
    with pytest.raises(TaskFormatError, match="unknown format"):
        load_problems(path, "csv")


def test_synthetic_is_seeded_and_correct():
    a, b = synthetic_problems(20, seed=3), synthetic_problems(20, seed=3)
    assert a == b
    assert synthetic_problems(20, seed=4) != a
    for p in a:
        assert int(p.gold) >= 0 and p.question.endswith("?")


def test_shared_gsm8k_and_mmlu_load(shared_data):
    gsm = load_problems(shared_data / "gsm8k" / "test.jsonl", "gsm8k", limit=3)
    assert gsm[0].gold == "18"
    mmlu = load_problems(shared_data / "mmlu" / "mmlu_dev.jsonl", "mc", limit=2)
    assert all(p.n_choices == 4 for p in mmlu)
    arc = load_problems(shared_data / "arc" / "arc_challenge_test.jsonl", "mc")
    assert len(arc) == 1172


def test_non_utf8_directory_and_empty_choices_are_named(tmp_path):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"question": "ok", "answer": "#### 1"}\n{"question": "caf\xe9", "answer": "#### 2"}\n')
    with pytest.raises(TaskFormatError, match=r"latin1.jsonl:2: not UTF-8"):
        load_problems(bad, "gsm8k")
    with pytest.raises(TaskFormatError, match="is a directory"):
        load_problems(tmp_path, "gsm8k")
    empty = write(tmp_path, "mc.jsonl", [{"question": "Q", "choices": [], "answer": 0}])
    with pytest.raises(TaskFormatError, match=r"mc.jsonl:1: field 'choices': fewer than two options"):
        load_problems(empty, "mc")


@pytest.mark.parametrize(
    "record, needle",
    [
        # ARC's raw format with choices that are not {"text", "label"} objects (was an AttributeError)
        ({"question": {"stem": "Q?", "choices": ["a", "b"]}, "answerKey": "A"}, "field 'question.choices': expected a list"),
        ({"question": {"stem": "Q?", "choices": "ab"}, "answerKey": "A"}, "field 'question.choices'"),
        # ARC numeric labels: label k is the k-th option; "0", "11" or a label not among the choices is refused
        ({"question": "Q?", "choices": {"text": ["p", "q"], "label": ["1", "2"]}, "answerKey": "0"},
         "field 'answerKey': '0' is not one of the labels ['1', '2']"),
        ({"question": "Q?", "choices": {"text": ["p", "q"], "label": ["1", "2"]}, "answerKey": "11"},
         "field 'answerKey': '11' is not one of the labels"),
        ({"question": "Q?", "choices": {"text": ["p", "q"], "label": ["1", "5"]}, "answerKey": "5"},
         "field 'choices': numeric labels must be 1, 2 in order"),
        ({"question": "Q?", "choices": {"text": ["p", "q"], "label": ["0", "1"]}, "answerKey": "1"},
         "field 'choices': numeric labels must be 1, 2"),
        ({"question": "Q?", "choices": {"text": ["p", "q"], "label": ["A", "C"]}, "answerKey": "C"},
         "field 'choices': option labels must be the letters A-B"),
        ({"question": "Q?", "choices": {"text": ["p", "q"], "label": "AB"}, "answerKey": "A"},
         "field 'choices': needs 'text' and 'label' lists"),
        # GSM-Hard targets that are not finite numbers (Infinity, 1e400: was an OverflowError; NaN: no file or line)
        ('{"input": "Q?", "target": Infinity}', "field 'target': not a finite number"),
        ('{"input": "Q?", "target": 1e400}', "field 'target': not a finite number"),
        ('{"input": "Q?", "target": NaN}', "field 'target': not a finite number"),
        ({"input": "Q?", "target": "-inf"}, "field 'target': not a finite number"),
        ({"input": "Q?", "target": True}, "field 'target': not a number"),
        # MedQA labels: case-insensitive (a is A), so A and a together are the same option twice
        ({"question": "Q?", "options": {"A": "x", "a": "y"}, "answer_idx": "A"},
         "field 'options': duplicate option labels ['A', 'A']"),
        ({"question": "Q?", "options": {"A": "x", "C": "y"}, "answer_idx": "A"},
         "field 'options': option labels must be the letters A-B"),
        ({"question": "Q?", "choices": [str(i) for i in range(11)], "answer": 0}, "field 'choices': 11 options; at most 10"),
    ],
)
def test_bad_multiple_choice_and_gsm_hard_lines_name_file_line_and_field(tmp_path, record, needle):
    fmt = "gsm-hard" if "input" in str(record) else "mc"
    path = write(tmp_path, "bad.jsonl", [{"input": "ok", "target": 1} if fmt == "gsm-hard" else
                                         {"question": "ok", "choices": ["a", "b"], "answer": 0}, record])
    with pytest.raises(TaskFormatError) as err:
        load_problems(path, fmt)
    assert str(err.value).startswith(f"{path}:2: "), str(err.value)
    assert needle in str(err.value)


def test_arc_numeric_labels_map_by_position_and_medqa_letters_are_case_insensitive(tmp_path):
    path = write(tmp_path, "mc.jsonl", [
        {"id": "n", "question": "N?", "choices": {"text": ["p", "q", "r", "s", "t"], "label": ["1", "2", "3", "4", "5"]},
         "answerKey": "5"},
        {"id": "raw", "question": {"stem": "Raw?", "choices": [{"text": "p", "label": "1"}, {"text": "q", "label": "2"}]},
         "answerKey": "1"},
        {"id": "lower", "question": "L?", "options": {"a": "x", "b": "y", "c": "z"}, "answer_idx": "c"},
        {"id": "upper", "question": "U?", "options": {"A": "x", "B": "y"}, "answer_idx": "b"},
    ])
    n, raw, lower, upper = load_problems(path, "mc")
    assert (n.gold, n.n_choices) == ("E", 5) and n.question.endswith("E. t")
    assert (raw.gold, raw.n_choices, raw.question) == ("A", 2, "Raw?\nA. p\nB. q")
    assert (lower.gold, lower.n_choices) == ("C", 3) and "C. z" in lower.question
    assert upper.gold == "B"


def test_a_read_error_names_the_file(tmp_path, monkeypatch):
    import errno
    import pathlib

    path = write(tmp_path, "g.jsonl", [{"question": "Q", "answer": "#### 1"}] * 3)
    real_open = pathlib.Path.open

    class Failing:
        def __init__(self, fh):
            self.fh, self.n = fh, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def __iter__(self):
            return self

        def __next__(self):
            self.n += 1
            if self.n == 2:
                raise OSError(errno.EIO, "Input/output error")
            return next(self.fh)

        def readline(self, size=-1):  # the loader reads bounded lines
            return next(self, b"")

    monkeypatch.setattr(pathlib.Path, "open", lambda self, *a, **k: Failing(real_open(self, *a, **k)))
    with pytest.raises(TaskFormatError, match=r"g.jsonl:2: cannot read the file: Input/output error"):
        load_problems(path, "gsm8k")

    def denied(self, *a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(pathlib.Path, "open", denied)
    with pytest.raises(TaskFormatError, match=r"g.jsonl: cannot read the file: Permission denied"):
        load_problems(path, "gsm8k")


def test_synthetic_with_a_file_is_refused(tmp_path):
    path = write(tmp_path, "g.jsonl", [{"question": "Q", "answer": "#### 1"}])
    with pytest.raises(TaskFormatError, match="format 'synthetic' generates its problems and reads no file"):
        load_problems(path, "synthetic")
    assert len(load_problems(None, "synthetic", 3)) == 3


def test_detect_format_and_every_format_check_lines_strictly(tmp_path):
    """Issue 33: the strict checks sit in ``iter_records``, so format detection and the prompts
    format refuse a lone surrogate or deep nesting too (file, line, field)."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"prompt": "Hi", "x": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(TaskFormatError, match=r"deep.jsonl:1: .*JSON nested more than 64 levels deep"):
        detect_format(deep)
    lone = tmp_path / "lone.jsonl"
    lone.write_text('{"prompt": "ok"}\n{"prompt": "Hi \\udc00"}\n')
    with pytest.raises(TaskFormatError, match=r"lone.jsonl:2: field 'prompt': not UTF-8 text: a lone UTF-16 surrogate"):
        load_problems(lone, "prompts")
    gold = tmp_path / "gold.jsonl"
    for answer in ("#### 1,234", "#### -7", "#### 2.5"):  # numbers still load
        gold.write_text(json.dumps({"question": "Q?", "answer": answer}) + "\n")
        assert load_problems(gold, "gsm8k")[0].gold == answer[5:].replace(",", "")
