"""Trained members served back as pool members: their recipes kept through the pool files the
training and the rounds write; ``agora evolve`` refusing to start without the ``train`` extra;
the runs a training read named in its run record; a trained aggregator named in the role
settings of the council and COMED as well as MoA's."""

import json
import sys

import pytest
import sqlite_utils

from agora.models.pool import ModelSpec, load_pool
from agora.training.pool_entries import spec_entry, trained_entry, write_pool_file
from agora.training.trainers import TrainResult

SHOTS = [{"question": "Tom has 1 + 1 ?", "answer": "1 + 1 = 2 . The answer is 2 ."},
         {"question": "Say \"hi\" = ?", "answer": "The answer is 0 ."}]
RECIPES = {"checker": {"name": "persona", "persona": "You check each step."},
           "coder": {"name": "pot"},
           "shot": {"name": "fewshot", "shots": SHOTS}}


def _hf_folder(tmp_path):
    """A folder a transformers pool entry accepts (its weights are never loaded here)."""
    folder = tmp_path / "base"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("{}")
    return str(folder)


def _result(tmp_path, base):
    adapter = tmp_path / "adapter"
    adapter.mkdir(exist_ok=True)
    (adapter / "adapter_config.json").write_text("{}")
    return TrainResult(kind="sft", adapter_dir=adapter, base=base, previous_adapter=None, rows=1, steps=1,
                       losses=[0.5])


def test_a_trained_member_keeps_its_recipe_through_the_pool_file(tmp_path):
    """A persona, a program-of-thought and a few-shot member, trained: each entry keeps its recipe
    (the few-shot set's exemplars included) and the written pool file loads back to the same recipes."""
    base = _hf_folder(tmp_path)
    specs = [ModelSpec(name=name, backend="transformers", path=base, recipe=recipe)
             for name, recipe in RECIPES.items()] + [ModelSpec(name="plain", backend="transformers", path=base)]
    result = _result(tmp_path, base)
    entries = [trained_entry(s, result, 1) for s in specs]
    assert [e.get("recipe") for e in entries] == [
        {"name": "persona", "persona": "You check each step."}, {"name": "pot"},
        {"name": "fewshot", "shots": SHOTS}, None]
    served = load_pool(write_pool_file(entries, tmp_path / "out" / "pool.toml"))
    assert {n: served[n].spec.recipe for n in RECIPES} == {s.name: s.recipe for s in specs[:3]}
    assert served["plain"].spec.recipe is None
    assert [served[n].spec.adapter for n in served.names] == [str(result.adapter_dir.resolve())] * 4
    # the untouched members of a round's pool file (spec_entry) read back the same way
    again = load_pool(write_pool_file([spec_entry(s) for s in specs], tmp_path / "again" / "pool.toml"))
    assert [again[s.name].spec.recipe for s in specs] == [s.recipe for s in specs]


def test_the_few_shot_exemplars_are_written_as_inline_tables(tmp_path):
    path = write_pool_file([{"name": "shot", "backend": "transformers", "path": _hf_folder(tmp_path),
                             "recipe": {"name": "fewshot", "shots": SHOTS[1:]}}], tmp_path / "pool.toml")
    assert path.read_text().splitlines()[-2:] == [
        'name = "fewshot"', 'shots = [{ "question" = "Say \\"hi\\" = ?", "answer" = "The answer is 0 ." }]']


def test_evolve_serves_a_recipe_member_back_with_its_recipe_on_either_backend(tmp_path):
    from agora.training.evolve import next_spec
    from agora.training.pipeline import MemberRun

    spec = ModelSpec(name="qwen0.5b+pot", backend="llamacpp", path="builtin:qwen2.5-coder-0.5b", recipe="pot",
                     n_ctx=4096)
    result = _result(tmp_path, "builtin:qwen2.5-coder-0.5b")
    run = MemberRun(spec.name, result, "ck", [], [], None, trained_entry(spec, result, 0))
    for serve_with in ("transformers", "llamacpp"):
        nxt = next_spec(spec, run, 0, serve_with)
        assert (nxt.backend, nxt.recipe, nxt.adapter) == (serve_with, spec.recipe, str(result.adapter_dir.resolve()))


def _agora(*args):
    from typer.testing import CliRunner

    from agora.cli.main import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_evolve_without_the_train_extra_is_one_line_before_any_duel(tmp_path, monkeypatch):
    """Before: the run was recorded and its duels played (hours on a CPU pool), then training failed."""
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` raises ImportError, as when it is not installed
    instructions = tmp_path / "i.jsonl"
    instructions.write_text(json.dumps({"id": "i1", "prompt": "2+3?"}) + "\n")
    pool = tmp_path / "pool.toml"  # members that cannot answer: a duel played would say so
    pool.write_text("".join(f'[[models]]\nname = "{n}"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                            f'model = "x"\nmax_retries = 0\n' for n in "abc"))
    out = _agora("evolve", "--instructions", instructions, "--pool", pool, "--db", tmp_path / "t.db",
                 "--out", tmp_path / "o", "-T", 1, "-D", 1)
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert [line for line in out.output.splitlines() if line.strip()] == [
        "error: training needs the 'train' extra (missing: trl): pip install 'agora-llm[train]' (or -e '.[train]' in "
        "a checkout)"]
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "o").exists()


@pytest.fixture
def tiny(tmp_path):
    pytest.importorskip("trl")
    from tiny_lm import build_tiny_lm

    return build_tiny_lm(tmp_path / "tiny")


def test_a_training_run_names_the_runs_it_read_in_its_run_record(tmp_path, tiny):
    """The ``runs`` row of ``agora train sft`` and ``train dpo --pairs own`` lists the runs its rows
    came from (``source_runs``), not only the ``--source-run`` filter (empty: every run)."""
    from test_verified_data import HELD, call, question

    db = tmp_path / "t.db"
    d = sqlite_utils.Database(db)
    d["runs"].insert_all([{"run_id": r, "protocol": "align"} for r in ("a1", "a2", "a3")], pk="run_id")
    d["questions"].insert_all([question("a1", "q1", 0, "What is 2+3?", "5"),
                               question("a2", "q1", 0, "What is 2+3?", "5"),
                               question("a3", "q2", 0, "What is 1+1?", "2")], pk=("run_id", "question_id"))
    d["model_calls"].insert_all([
        call("c1", "a1", "q1", "2+3=5. The answer is 5.", 10, "5", "marker", role="agent"),
        call("c2", "a2", "q1", "2+3=6. The answer is 6.", 10, "6", "marker", role="agent"),
        call("c3", "a3", "q2", "The answer is 3.", 5, "3", "marker", role="agent", messages=HELD),  # no right one
    ], pk="call_id")
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "transformers"\npath = "{tiny}"\n')
    common = ("--db", db, "--model", "m", "--pool", pool, "--max-steps", 1, "--batch-size", 1, "--lora-r", 2,
              "--lr", "1e-2", "--threads", 1)
    assert _agora("train", "sft", *common, "--out", tmp_path / "sft", "--run-id", "sft-1").exit_code == 0
    out = _agora("train", "dpo", "--pairs", "own", *common, "--validation", 0, "--out", tmp_path / "dpo",
                 "--run-id", "dpo-1")
    assert out.exit_code == 0, out.output
    recorded = {r["run_id"]: json.loads(r["dataset"]) for r in d["runs"].rows if r["run_id"] in ("sft-1", "dpo-1")}
    assert recorded["sft-1"]["source_runs"] == ["a1"]
    assert recorded["dpo-1"]["source_runs"] == ["a1", "a2"]
    assert recorded["dpo-1"]["verified"]["run_ids"] == [] and recorded["dpo-1"]["pairs"] == "own"


def test_an_aggregator_entry_is_named_as_the_councils_chair_and_in_comeds_roles(tmp_path, tiny):
    """A trained aggregator sits in its pool file beside the untouched members (``--name agg``); each
    protocol's role setting names it like any member: the council's chair, COMED's probe (the
    verify step's second opinion) and the aggregator of COMED's MoA baseline."""
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{n}"\nbackend = "transformers"\npath = "{tiny}"\n'
                            for n in ("m", "m2", "agg")))
    problems = tmp_path / "p.jsonl"
    problems.write_text(json.dumps({"id": "t1", "question": "Tom has 1 + 2 ?", "answer": "So #### 3"}) + "\n")
    common = ("--pool", pool, "--data", problems, "--max-tokens", 2, "--shots", 0)
    out = _agora("run", "council", *common, "--members", "m,m2", "--chair", "agg", "--db", tmp_path / "c.db",
                 "--run-id", "c1")
    assert out.exit_code == 0, out.output
    calls = list(sqlite_utils.Database(tmp_path / "c.db")["model_calls"].rows)
    assert {c["model"] for c in calls if c["role"] == "chair" and c["error"] is None} == {"agg"}
    config = tmp_path / "comed.toml"  # explore: the probe runs whatever the anchor's confidence
    config.write_text('[comed]\nexplore = true\nshots = 0\nbaselines = ["moa"]\nmoa_proposers = ["m", "m2"]\n'
                      'moa_aggregator = "agg"\n')
    out = _agora("run", "comed", "--pool", pool, "--data", problems, "--max-tokens", 2, "--config", config,
                 "--anchor", "m", "--probe", "agg", "--probe-max-tokens", 2, "--db", tmp_path / "e.db", "--run-id", "e1")
    assert out.exit_code == 0, out.output
    calls = list(sqlite_utils.Database(tmp_path / "e.db")["model_calls"].rows)
    roles = {(c["role"], c["model"]) for c in calls if c["error"] is None}
    assert {("probe", "agg"), ("aggregator", "agg"), ("anchor", "m")} <= roles
    assert {m for r, m in roles if r in ("probe", "aggregator")} == {"agg"}


def test_a_recipe_members_own_words_are_its_data_and_a_rewritten_reply_is_a_candidate_only(tmp_path):
    """A persona's or a few-shot set's replies are the model's own words (the recipe changed the
    prompt, which the trace records): they make SFT rows and pairs. Program-of-thought's recorded
    completion is the program's result, not what the model wrote: left out of its own data (and a
    recipe not installed here likewise), kept as a candidate for an aggregator."""
    from test_verified_data import call, question

    from agora.training.own_samples import VerifiedConfig, own_samples, rewrites_reply, scored_samples
    from agora.training.verified import own_pairs, sft_rows

    assert {r: rewrites_reply(r) for r in ("cot", "persona", "fewshot", "pot", "nosuch")} == {
        "cot": False, "persona": False, "fewshot": False, "pot": True, "nosuch": True}
    db = tmp_path / "t.db"
    d = sqlite_utils.Database(db)
    d["runs"].insert({"run_id": "b:gsm8k:candidates", "protocol": "candidates"}, pk="run_id")
    d["questions"].insert(question("b:gsm8k:candidates", "q1", 0, "What is 2+3?", "5"), pk=("run_id", "question_id"))
    persona = [{"role": "system", "content": "You check each step.\n\nSolve."}, {"role": "user", "content": "What is 2+3?"}]
    run = "b:gsm8k:candidates"
    d["model_calls"].insert_all([
        call("p1", run, "q1", "2+3=5. The answer is 5.", 10, "5", "marker", model="chk", recipe="persona",
             messages=persona, t=1),
        call("p2", run, "q1", "2+3=6. The answer is 6.", 10, "6", "marker", model="chk", recipe="persona",
             messages=persona, t=2),
        call("t1", run, "q1", "```python\nprint(2+3)\n```\nThe answer is 5.", 12, "5", "marker", model="pot",
             recipe="pot", t=3),
        call("x1", run, "q1", "The answer is 5.", 4, "5", "marker", model="plug", recipe="nosuch", t=4),
    ], pk="call_id")
    samples, skipped = own_samples(db, VerifiedConfig(model="chk"))
    assert [(s.call_id, s.correct, s.messages[0]["content"]) for s in samples] == [
        ("p1", True, "You check each step.\n\nSolve."), ("p2", False, "You check each step.\n\nSolve.")]
    cfg = VerifiedConfig(model="chk")
    assert [(r["call_id"], r["prompt"]) for r in sft_rows(samples, cfg)] == [("p1", persona)]
    assert [p["pair_id"] for p in own_pairs(samples, cfg)] == ["b:gsm8k:candidates:q1:p1>p2"]
    assert skipped["recipe"] == 0
    for member in ("pot", "plug"):
        none, skipped = own_samples(db, VerifiedConfig(model=member))
        assert none == [] and skipped["recipe"] == 1
    everyone, skipped = scored_samples(db)
    assert [(s.call_id, s.correct) for s in everyone] == [("p1", True), ("p2", False), ("t1", True), ("x1", True)]
    assert skipped["recipe"] == 0


def test_member_messages_are_the_chat_the_pool_sends():
    """The prompt a member saw, rebuilt from the protocol's: the pool's own record of the call agrees,
    with the recipe applied to the call's role or not."""
    from agora.models.pool import ModelPool, PoolMember, SamplingParams
    from agora.models.testing import ScriptedChatModel
    from agora.training.own_samples import member_messages

    protocol = [{"role": "system", "content": "Solve."}, {"role": "user", "content": "2+3?"}]
    for recipe in ({"name": "persona", "persona": "You check."}, {"name": "persona", "persona": "You check.",
                                                                  "roles": ["agent"]}, {"name": "pot"}, None):
        spec = ModelSpec(name="m", backend="openai", base_url="http://unused", model="x", system_prompt="Be brief.",
                         recipe=recipe)
        pool = ModelPool([PoolMember(spec, ScriptedChatModel(responses=["The answer is 5."], cycle=True))])
        _, records = pool.sample("m", protocol, SamplingParams(n=1, max_tokens=8), context={"role": "follower"})
        assert records[0]["messages"] == member_messages(spec, protocol, "follower")
    persona = ModelSpec(name="m", backend="openai", base_url="http://unused", model="x", system_prompt="Be brief.",
                        recipe={"name": "persona", "persona": "You check."})
    assert member_messages(persona, protocol, "follower") == [
        {"role": "system", "content": "Be brief."}, {"role": "system", "content": "You check.\n\nSolve."},
        {"role": "user", "content": "2+3?"}]


def test_a_recipe_members_duel_answers_under_the_prompt_it_saw():
    """evolve --data own: a persona member's own answers are paired under its persona's prompt; a
    program-of-thought member's duel answers (the recipe's text) give it no own data."""
    from agora.training.own_samples import VerifiedConfig, duel_samples
    from agora.training.verified import own_pairs

    prompt = [{"role": "user", "content": "2+3?"}]

    def duel(n, a, extracted):
        return {"duel_id": f"d:0:{n}", "run_id": "d", "instruction_id": "i1", "instruction": "2+3?", "gold": "5",
                "kind": "math", "prompt_messages": prompt, "model_a": "m", "model_b": "x", "answer_a": a,
                "answer_b": "No.", "extracted_a": extracted, "extracted_b": None}

    duels = [duel(0, "2+3=5. The answer is 5.", "5"), duel(1, "2+3=4. The answer is 4.", "4")]
    persona = ModelSpec(name="m", backend="transformers", path="x", recipe={"name": "persona", "persona": "Check."})
    samples = duel_samples(duels, "m", persona)
    assert [s.messages for s in samples] == [({"role": "system", "content": "Check."}, prompt[0])] * 2
    [pair] = own_pairs(samples, VerifiedConfig(model="m"))
    assert pair["prompt_messages"] == [{"role": "system", "content": "Check."}, prompt[0]]
    assert duel_samples(duels, "m", ModelSpec(name="m", backend="transformers", path="x", recipe="pot")) == []
    assert [s.messages for s in duel_samples(duels, "m")] == [tuple(prompt)] * 2  # no spec: as recorded


def test_the_held_out_score_asks_and_reads_a_member_as_the_pool_serves_it(tmp_path, monkeypatch):
    """A member's held-out score (agora evolve --held-out) is the member's: its system prompt and
    recipe frame the prompt, and the recipe reads the reply (here one that keeps the first word)."""
    import agora.models.hf_backend as hf
    from agora.agents.prompts import solver_messages
    from agora.models.recipes import Finished, Recipe
    from agora.tasks import Problem
    from agora.training.evaluation import greedy_outcomes
    from agora.training.evolve import held_out_accuracy

    class FirstWord(Recipe):
        name = "firstword"
        summary = "the reply's first word is the answer"

        def prepare(self, messages):
            return [{"role": "system", "content": "One word."}, messages[-1]]

        def finish(self, text):
            return Finished(f"The answer is {text.split()[0]}.")

    class FakeModel:
        prompts: list = []

        def __init__(self, **_):
            pass

        def generate_texts(self, batch, temperature):
            FakeModel.prompts += batch
            return [{"text": "5 then 6", "completion_tokens": 3, "finish_reason": "stop"} for _ in batch]

    monkeypatch.setattr(hf, "TransformersChatModel", FakeModel)
    problems = [Problem("h1", "What is 2+3?", "5")]
    spec = ModelSpec(name="m", backend="transformers", path="x", system_prompt="Be brief.", recipe=FirstWord())
    [row] = greedy_outcomes(problems, "x", None, tmp_path / "a.jsonl", shots=0, member=spec)
    assert (row["text"], row["reply"], row["answer"], row["correct"]) == ("The answer is 5.", "5 then 6", "5", 1)
    assert FakeModel.prompts[-1] == [{"role": "system", "content": "Be brief."},
                                     {"role": "system", "content": "One word."}, solver_messages(problems[0], 0)[-1]]
    [plain] = greedy_outcomes(problems, "x", None, tmp_path / "b.jsonl", shots=0)  # the weights alone
    assert (plain["text"], plain["correct"], "reply" in plain) == ("5 then 6", 0, False)
    assert held_out_accuracy(spec, problems, tmp_path / "c.jsonl", 8, 1) == 1.0


def test_cli_evolve_on_own_answers_records_the_held_out_score_before_the_rounds(tmp_path, tiny):
    """``agora evolve --data own --algo sft --held-out FILE`` from the command line: each member's
    held-out score before the first round is printed and in the run's summary (random tiny members
    never answer right, so none has own data to train on, and each says why)."""
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "t{i}"\nbackend = "transformers"\npath = "{tiny}"\n\n' for i in range(3)))
    instructions = tmp_path / "i.jsonl"
    instructions.write_text(json.dumps({"question": "Tom has 2 apples + 3 ?", "answer": "So #### 5"}) + "\n")
    held = tmp_path / "h.jsonl"
    held.write_text(json.dumps({"id": "h1", "question": "Mia has 1 + 1 ?", "answer": "So #### 2"}) + "\n")
    out = _agora("evolve", "--instructions", instructions, "--data", "own", "--algo", "sft", "--held-out", held,
                 "-T", 1, "-D", 1, "--max-tokens", 3, "--judge-max-tokens", 3, "--judge-shots", 0, "--pool", pool,
                 "--db", tmp_path / "e.db", "--out", tmp_path / "o", "--run-id", "ev", "--threads", 1,
                 "--max-steps", 1, "--train-models", "t0")
    assert out.exit_code == 0, out.output
    assert "held-out score before the first round: t0 0.00" in out.output
    assert "no verified answers to train 't0' on" in out.output
    d = sqlite_utils.Database(tmp_path / "e.db")
    summary = json.loads(next(d.query("select summary from runs where run_id = 'ev'"))["summary"])
    assert summary["base_held_out"] == {"t0": 0.0}
    [member] = summary["iterations"][0]["members"]
    assert (member["model"], member["trained"], member["held_out_accuracy"]) == ("t0", False, None)
    assert (tmp_path / "o" / "ev" / "held_out" / "base-t0.jsonl").is_file()
