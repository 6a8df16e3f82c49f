"""benchmarks/member_table.py on scripted pools: each member's accuracy alone, its self-consistency,
and each pair's oracle, disagreement and error correlation against hand-computed values; the
measurement resumes without asking again; any pool TOML (recipes included) runs through it."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from openai_stub import StubServer, chat_reply

from agora.agents.stats import phi_coefficient
from agora.models.pool import ModelPool
from agora.models.testing import ScriptedChatModel
from agora.traces.store import TraceStore

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("member_table", ROOT / "benchmarks" / "member_table.py")
member_table = importlib.util.module_from_spec(spec)
sys.modules["member_table"] = member_table  # dataclasses look their module up
spec.loader.exec_module(member_table)


def task_file(path: Path, n: int = 5) -> Path:
    """``n`` GSM8K rows "What is 0 + i?" (gold i); with ``--limit 1 --dev 4`` the last four are dev."""
    path.write_text("".join(json.dumps({"question": f"What is 0 + {i}?", "answer": f"0 + {i} = {i}\n#### {i}"}) + "\n"
                            for i in range(1, n + 1)))
    return path


#: Per member, question gold -> its three samples' answers as offsets from the gold (0: right).
SCRIPT = {
    "a": {2: (0, 0, 0), 3: (0, 0, 0), 4: (0, 0, 0), 5: (0, 0, 0)},
    "b": {2: (0, 0, 0), 3: (0, 0, 0), 4: (1, 1, 0), 5: (1, 1, 1)},
    "c": {2: (0, 0, 0), 3: (2, 2, 2), 4: (1, 1, 1), 5: (1, 1, 1)},
}


def scripted(name: str) -> ScriptedChatModel:
    def respond(messages, i):
        gold = int(re.findall(r"What is 0 \+ (\d+)\?", messages[-1]["content"])[-1])
        return f"The answer is {gold + SCRIPT[name][gold][i]}."
    return ScriptedChatModel(respond=respond)


def rows(text: str) -> dict[tuple[str, ...], list[str]]:
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0] not in ("task", "---"):
            out[(cells[0], cells[1])] = cells[2:]
        elif len(cells) == 7 and cells[0] not in ("task", "---"):
            out[(cells[0], cells[1], cells[2])] = cells[3:]
    return out


def test_the_member_table_by_hand_and_resumed(tmp_path):
    models = {m: scripted(m) for m in SCRIPT}
    pool = ModelPool.from_chat_models(models, max_retries=0)
    f = task_file(tmp_path / "t.jsonl")
    argv = ["--tasks", f"t={f}", "--limit", "1", "--dev", "4", "--shots", "0", "--db", str(tmp_path / "m.db"),
            "--run-id", "m"]
    table = rows(member_table.main(argv, pool=pool))
    # acc@1: a 4/4; b (1 + 1 + 1/3 + 0)/4 = 7/12; c 1/4. SC@3: a 1, b 2/4, c 1/4
    assert table[("t", "a")][:3] == ["4", "100.0 [100.0, 100.0]", "100.0 [100.0, 100.0]"]
    assert table[("t", "b")][1].startswith("58.3 [") and table[("t", "b")][2].startswith("50.0 [")
    assert table[("t", "c")][1].startswith("25.0 [") and table[("t", "c")][2].startswith("25.0 [")
    # conf: b's shares 1, 1, 2/3, 1 -> 91.7
    assert table[("t", "b")][3].startswith("91.7 [")
    # pairs on the plurality answers: a-b oracle 1, differ on the last two; b-c oracle 2/4, differ on one
    assert table[("t", "a", "b")][:3] == ["4", "100.0 [100.0, 100.0]", "50.0 [0.0, 100.0]"]
    assert table[("t", "a", "b")][3] == "nan"  # a never errs: its errors correlate with nothing
    assert table[("t", "b", "c")][1].startswith("50.0 [") and table[("t", "b", "c")][2].startswith("25.0 [")
    # b errs on [0, 0, 1, 1], c on [0, 1, 1, 1]: phi = (2·1 − 0·1)/√(2·2·3·1) = 0.577
    assert table[("t", "b", "c")][3].startswith("+0.58 [")
    assert phi_coefficient([0, 0, 1, 1], [0, 1, 1, 1]) == pytest.approx(2 / 12 ** 0.5)
    assert table[("t", "a", "c")][2].startswith("75.0 [")
    # each member asked once per dev question (one request of k = 3), recorded as run m:t
    assert [len(m.calls) for m in models.values()] == [4, 4, 4]
    store = TraceStore(tmp_path / "m.db", readonly=True)
    assert len(store.calls("m:t")) == 36 and store.get_run("m:t")["protocol"] == "slm-mux"
    # resumed: nothing asked again, the same table
    again = rows(member_table.main(argv, pool=pool))
    assert [len(m.calls) for m in models.values()] == [4, 4, 4] and again == table
    assert rows(member_table.main([*argv, "--table-only"])) == table


def test_two_tasks_pool_into_all_and_any_pool_toml_runs(tmp_path):
    f1, f2 = task_file(tmp_path / "one.jsonl", 3), task_file(tmp_path / "two.jsonl", 4)
    with StubServer(lambda path, body: (200, chat_reply(body, ["The answer is 2."] * body.get("n", 1)))) as server:
        pool = tmp_path / "pool.toml"
        pool.write_text(f'[[models]]\nname = "m1"\nbackend = "openai"\nmodel = "m1"\nbase_url = "{server.base_url}"\n'
                        f'max_retries = 0\n\n[[models]]\nname = "m1+persona"\nbackend = "openai"\nmodel = "m1"\n'
                        f'base_url = "{server.base_url}"\nmax_retries = 0\n[models.recipe]\nname = "persona"\n'
                        f'persona = "You check every sum twice."\n')
        text = member_table.main(["--pool", str(pool), "--tasks", f"one={f1},two={f2}", "--limit", "1", "--dev", "2",
                                  "--k", "2", "--max-tokens", "16", "--db", str(tmp_path / "m.db"), "--run-id", "r"])
    table = rows(text)
    # one's dev questions: golds 2, 3 (every sample says 2: right once); two's: 3, 4 (never right)
    assert table[("one", "m1")][:2] == ["2", "50.0 [0.0, 100.0]"]
    assert table[("two", "m1+persona")][:2] == ["2", "0.0 [0.0, 0.0]"]
    assert table[("all", "m1")][:2] == ["4", "25.0 [0.0, 75.0]"]
    # the two members always agree: no disagreement; the oracle is either's accuracy
    assert table[("all", "m1", "m1+persona")][1:3] == ["25.0 [0.0, 75.0]", "0.0 [0.0, 0.0]"]
    recipes = {c["model"]: c["recipe"] for c in TraceStore(tmp_path / "m.db", readonly=True).calls("r:one")}
    assert recipes == {"m1": None, "m1+persona": "persona"}
