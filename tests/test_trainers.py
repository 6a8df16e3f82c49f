"""Trainers end to end on a tiny random local model (no download), and one real Gemma DPO step (slow)."""

import json
import math

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from agora.models.pool import ModelSpec, PoolConfigError, SamplingParams, load_pool  # noqa: E402
from agora.tasks import synthetic_problems  # noqa: E402
from agora.training.config import DPOSettings, GRPOSettings, LoraSettings  # noqa: E402
from agora.training.datasets import dpo_rows, grpo_rows_from_problems  # noqa: E402
from agora.training.rewards import completion_text, correctness_reward  # noqa: E402
from agora.training.trainers import (  # noqa: E402
    TRAIN_META,
    preference_accuracy,
    train_dpo,
    train_grpo,
)
from agora.training.pool_entries import trained_entry, write_pool_file  # noqa: E402
from tiny_lm import build_tiny_lm  # noqa: E402

LORA = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=("q_proj", "v_proj"))
SYSTEM = {"role": "system", "content": "Solve the math problem ."}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(build_tiny_lm(tmp_path_factory.mktemp("tiny") / "model"))


def pairs():
    out = []
    for i, (a, b) in enumerate([(2, 3), (4, 5), (6, 1), (7, 2)]):
        out.append({"pair_id": f"p{i}", "run_id": "r", "iteration": 0, "prompt": f"Tom has {a} apples + {b} ?",
                    "prompt_messages": [SYSTEM, {"role": "user", "content": f"Tom has {a} apples + {b} ?"}],
                    "chosen": f"{a} + {b} = {a + b} . The answer is {a + b} .",
                    "rejected": f"The answer is {a * b} .", "chosen_model": "m1", "rejected_model": "m2",
                    "chosen_score": 8.0, "rejected_score": 3.0, "margin": 5.0})
    return out


def lora_weights(adapter_dir):
    from safetensors.torch import load_file

    return load_file(str(adapter_dir / "adapter_model.safetensors"))


def test_dpo_two_steps_then_continue_from_previous_adapter(tiny, tmp_path):
    settings = DPOSettings(max_steps=2, batch_size=2, learning_rate=5e-2, warmup_ratio=0.0, threads=1, lora=LORA)
    first = train_dpo(tiny, dpo_rows(pairs()), tmp_path / "it0", settings, eval_rows=dpo_rows(pairs())[:2])
    assert first.steps == 2 and len(first.losses) == 2 and all(math.isfinite(x) for x in first.losses)
    assert first.losses[0] == pytest.approx(math.log(2), abs=1e-3)  # fresh LoRA: policy = reference
    assert "eval_loss" in first.metrics and first.cpu_s > 0
    w0 = lora_weights(first.adapter_dir)
    b_keys = [k for k in w0 if "lora_B" in k]
    assert b_keys and all(w0[k].abs().sum() > 0 for k in b_keys)  # lora_B starts at zero: the weights moved
    assert not any(".ref." in k for k in w0)  # only the trained adapter is saved
    meta = json.loads((first.adapter_dir / TRAIN_META).read_text())
    assert meta["kind"] == "dpo" and meta["settings"]["beta"] == 0.1 and meta["previous_adapter"] is None

    # iteration 2 starts from iteration 1's adapter, which is also its reference: the first loss is log 2 again
    second = train_dpo(tiny, dpo_rows(pairs()), tmp_path / "it1", settings, adapter=str(first.adapter_dir))
    assert second.losses[0] == pytest.approx(math.log(2), abs=1e-3)
    w1 = lora_weights(second.adapter_dir)
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)
    assert second.previous_adapter == str(first.adapter_dir)


def test_grpo_two_steps_and_adapter_as_pool_entry(tiny, tmp_path):
    rows = grpo_rows_from_problems(synthetic_problems(4, seed=3), shots=0)

    def length_reward(completions, **_):  # varies within a group, so the policy gets a gradient
        return [float(len(completion_text(c))) for c in completions]

    settings = GRPOSettings(max_steps=2, batch_size=4, num_generations=2, max_completion_length=6,
                            learning_rate=5e-2, warmup_ratio=0.0, threads=1, lora=LORA)
    result = train_grpo(tiny, rows, tmp_path / "grpo", [correctness_reward, length_reward], settings)
    assert result.steps == 2 and len(result.losses) == 2 and all(math.isfinite(x) for x in result.losses)
    logged = [h for h in result.log_history if "reward" in h]
    assert len(logged) == 2 and "rewards/correctness_reward/mean" in logged[0]
    weights = lora_weights(result.adapter_dir)
    assert any(w.abs().sum() > 0 for k, w in weights.items() if "lora_B" in k)

    member = ModelSpec(name="tiny-grpo", backend="llamacpp", path="x.gguf", system_prompt="Be brief .", family="t")
    entry = trained_entry(member, result, iteration=1)
    assert entry == {"name": "tiny-grpo", "family": "t", "system_prompt": "Be brief .", "max_retries": 3,
                     "cost_per_1k_tokens": 0.0, "prompt_format": "chat", "backend": "transformers", "path": tiny,
                     "adapter": str(result.adapter_dir), "iteration": 1}
    pool_file = write_pool_file([entry], tmp_path / "pool.toml")
    pool = load_pool(pool_file)
    spec = pool["tiny-grpo"].spec
    assert (spec.backend, spec.adapter, spec.extra) == ("transformers", str(result.adapter_dir), {"iteration": 1})
    assert spec.system_prompt == "Be brief ."
    samples, records = pool.sample("tiny-grpo", rows[0]["prompt"], SamplingParams(max_tokens=4, temperature=0.0))
    assert len(samples) == 1 and records[0]["error"] is None and samples[0].completion_tokens >= 1
    model, _tok = pool["tiny-grpo"].chat_model.loaded()
    assert type(model).__name__ == "PeftModelForCausalLM"


class _Stop(Exception):
    pass


def _callbacks(stop_at=None):
    """A callback recording the optimiser steps it sees, raising ``_Stop`` at step ``stop_at``."""
    from transformers import TrainerCallback

    class Watch(TrainerCallback):
        steps: list = []

        def on_step_end(self, args, state, control, **kw):
            Watch.steps.append(state.global_step)
            if state.global_step == stop_at:
                raise _Stop(stop_at)

    Watch.steps = []
    return Watch


def test_dpo_interrupted_then_resumed_equals_the_uninterrupted_run(tiny, tmp_path):
    settings = DPOSettings(max_steps=4, batch_size=1, learning_rate=5e-2, warmup_ratio=0.0, threads=1, lora=LORA,
                           save_steps=2)
    rows = dpo_rows(pairs())
    whole = train_dpo(tiny, rows, tmp_path / "whole", settings)
    assert whole.steps == 4 and not list((tmp_path / "whole" / "trainer").glob("checkpoint-*"))

    watch = _callbacks(stop_at=3)
    with pytest.raises(_Stop):
        train_dpo(tiny, rows, tmp_path / "cut", settings, callbacks=[watch()])
    assert [p.name for p in (tmp_path / "cut" / "trainer").glob("checkpoint-*")] == ["checkpoint-2"]
    watch = _callbacks()
    resumed = train_dpo(tiny, rows, tmp_path / "cut", settings, callbacks=[watch()])
    assert watch.steps == [3, 4]  # steps 1-2 came from the checkpoint
    assert resumed.steps == 4 and resumed.losses == pytest.approx(whole.losses, abs=1e-5)
    a, b = lora_weights(whole.adapter_dir), lora_weights(resumed.adapter_dir)
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not list((tmp_path / "cut" / "trainer").glob("checkpoint-*"))  # removed once the adapter is saved


def test_a_checkpoint_of_other_rows_is_not_resumed(tiny, tmp_path):
    settings = DPOSettings(max_steps=3, batch_size=1, learning_rate=5e-2, warmup_ratio=0.0, threads=1, lora=LORA,
                           save_steps=1)
    rows = dpo_rows(pairs())
    with pytest.raises(_Stop):
        train_dpo(tiny, rows, tmp_path / "run", settings, callbacks=[_callbacks(stop_at=2)()])
    watch = _callbacks()
    other = train_dpo(tiny, rows[::-1], tmp_path / "run", settings, callbacks=[watch()])
    assert watch.steps == [1, 2, 3] and other.losses[0] == pytest.approx(math.log(2), abs=1e-3)
    # without save_steps nothing is resumed either, and leftovers are cleared
    with pytest.raises(_Stop):
        train_dpo(tiny, rows, tmp_path / "run", settings, callbacks=[_callbacks(stop_at=2)()])
    watch = _callbacks()
    train_dpo(tiny, rows, tmp_path / "run", DPOSettings(**{**settings_kw(settings), "save_steps": 0}),
              callbacks=[watch()])
    assert watch.steps == [1, 2, 3]
    with pytest.raises(ValueError, match="save_steps"):
        DPOSettings(save_steps=-1)


def settings_kw(settings):
    from dataclasses import asdict

    d = asdict(settings)
    d["lora"] = settings.lora
    return d


def test_grpo_interrupted_then_resumed(tiny, tmp_path):
    rows = grpo_rows_from_problems(synthetic_problems(4, seed=3), shots=0)

    def length_reward(completions, **_):
        return [float(len(completion_text(c))) for c in completions]

    settings = GRPOSettings(max_steps=3, batch_size=2, num_generations=2, max_completion_length=6, seed=1,
                            learning_rate=5e-2, warmup_ratio=0.0, threads=1, lora=LORA, save_steps=1)
    whole = train_grpo(tiny, rows, tmp_path / "whole", [length_reward], settings)
    with pytest.raises(_Stop):
        train_grpo(tiny, rows, tmp_path / "cut", [length_reward], settings, callbacks=[_callbacks(stop_at=2)()])
    watch = _callbacks()
    resumed = train_grpo(tiny, rows, tmp_path / "cut", [length_reward], settings, callbacks=[watch()])
    assert watch.steps == [2, 3] and resumed.steps == 3  # checkpoint-1: step 2 stopped before its save
    assert [h["reward"] for h in resumed.log_history if "reward" in h] == pytest.approx(
        [h["reward"] for h in whole.log_history if "reward" in h])
    a, b = lora_weights(whole.adapter_dir), lora_weights(resumed.adapter_dir)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_preference_accuracy_is_complementary_under_swapping(tiny):
    rows = dpo_rows(pairs())
    swapped = [{**r, "chosen": r["rejected"], "rejected": r["chosen"]} for r in rows]
    acc = preference_accuracy(tiny, None, rows, threads=1)
    assert acc in (0.0, 0.25, 0.5, 0.75, 1.0)
    assert acc + preference_accuracy(tiny, None, swapped, threads=1) == pytest.approx(1.0)
    same = [{**r, "rejected": r["chosen"]} for r in rows]
    assert preference_accuracy(tiny, None, same, threads=1) == 0.0  # a tie is not a right ranking
    with pytest.raises(ValueError, match="at least one row"):
        preference_accuracy(tiny, None, [])


def test_settings_validation_and_bad_pool_adapter(tmp_path, tiny):
    with pytest.raises(ValueError, match="divisible by num_generations"):
        GRPOSettings(batch_size=3, num_generations=2)
    with pytest.raises(ValueError, match="num_generations"):
        GRPOSettings(num_generations=1)
    with pytest.raises(ValueError, match="beta"):
        DPOSettings(beta=0)
    with pytest.raises(ValueError, match="LoraSettings.r"):
        LoraSettings(r=0)
    bad = tmp_path / "pool.toml"
    bad.write_text(f'[[models]]\nname = "x"\nbackend = "transformers"\npath = "{tiny}"\nadapter = "nowhere"\n')
    with pytest.raises(PoolConfigError, match="field 'adapter': no adapter_config.json"):
        load_pool(bad)


@pytest.mark.slow
def test_real_gemma_lora_one_dpo_step(tmp_path):
    """One DPO step of a LoRA on the real Gemma-3-270M (converted from the embedded GGUF, cached)."""
    settings = DPOSettings(max_steps=1, batch_size=2, threads=2, max_length=256,
                           lora=LoraSettings(r=8, alpha=16))
    result = train_dpo("builtin:gemma3-270m", dpo_rows(pairs())[:2], tmp_path / "gemma", settings)
    assert result.steps == 1 and math.isfinite(result.losses[0])
    assert result.losses[0] == pytest.approx(math.log(2), abs=1e-3)
    assert (result.adapter_dir / "adapter_config.json").is_file()


def test_cli_train_dpo_then_align_uses_the_adapter(tiny, tmp_path):
    import sqlite_utils
    from typer.testing import CliRunner

    from agora.cli.main import app

    db = tmp_path / "t.db"
    rows = [{**p, "prompt_messages": json.dumps(p["prompt_messages"]), "duel_id": p["pair_id"], "judge_scores": "{}",
             "reputations": "{}", "gold": None, "kind": None, "created_at": "t"} for p in pairs()]
    sqlite_utils.Database(db)["preference_pairs"].insert_all(rows, pk="pair_id")
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m1"\nbackend = "transformers"\npath = "{tiny}"\nsystem_prompt = "Be brief ."\n')
    out = tmp_path / "out"
    runner = CliRunner()
    res = runner.invoke(app, ["train", "dpo", "--db", str(db), "--model", "m1", "--pool", str(pool), "--out", str(out),
                              "--max-steps", "2", "--batch-size", "2", "--lora-r", "4", "--lr", "1e-2",
                              "--validation", "0.25", "--threads", "1", "--run-id", "tr1", "--save-steps", "1"])
    assert res.exit_code == 0, res.output
    assert "validation preference accuracy" in res.output
    assert not list((out / "trainer").glob("checkpoint-*"))  # checkpoints go once the adapter is saved
    trained = load_pool(out / "pool.toml")["m1"].spec
    assert (trained.adapter, trained.system_prompt) == (str(out / "adapter"), "Be brief .")
    store = sqlite_utils.Database(db)
    ck = list(store["checkpoints"].rows)
    assert [(c["run_id"], c["model"], c["steps"], c["selected"]) for c in ck] == [("tr1", "m1", 2, 1)]
    assert ck[0]["validation_accuracy"] in (0.0, 1.0)  # one held-out instruction, one pair
    splits = {r["split"]: r["rows"] for r in store["training_datasets"].rows}
    assert splits == {"train": 3, "validation": 1}
    assert next(store.query("select status from runs where run_id = 'tr1'"))["status"] == "finished"

    res = runner.invoke(app, ["run", "align", "--pool", str(out / "pool.toml"), "--limit", "1", "-n", "1", "-k", "1",
                              "--max-tokens", "3", "--db", str(tmp_path / "align.db"), "--run-id", "a1"])
    assert res.exit_code == 0, res.output
    calls = list(sqlite_utils.Database(tmp_path / "align.db")["model_calls"].rows)
    assert [(c["model"], c["error"]) for c in calls] == [("m1", None)]

    res = runner.invoke(app, ["train", "dpo", "--db", str(db), "--model", "nobody", "--pool", str(pool),
                              "--out", str(out)])
    assert res.exit_code == 2 and "'nobody' is not in" in res.output

    # training on from the adapter keeps its LoRA shape: a LoRA option is refused, not ignored
    res = runner.invoke(app, ["train", "dpo", "--db", str(db), "--model", "m1", "--pool", str(out / "pool.toml"),
                              "--out", str(tmp_path / "out2"), "--lora-r", "8", "--max-steps", "1"])
    assert res.exit_code == 2 and "--lora-r: model 'm1' already carries the adapter" in res.output


def test_evolve_two_iterations_on_tiny_models_with_scripted_judges(tiny, tmp_path):
    import zlib

    from agora.models.pool import ModelPool, PoolMember, build_chat_model
    from agora.models.testing import ScriptedChatModel
    from agora.graphs.duel import DuelConfig
    from agora.traces.store import TraceStore
    from agora.training import tables
    from agora.training.evolve import EvolveConfig, evolve

    def respond(messages, _i):
        last = messages[-1]["content"]
        if "Response to be evaluated: " in last:  # judge: a score that depends on the answer's text
            shown = last.split("Response to be evaluated: ")[1].split("\n\n")[0]
            return '{"score": %d}' % (1 + zlib.crc32(shown.encode()) % 10)
        return "The answer is 5 ."

    specs = [ModelSpec(name="tiny-a", backend="transformers", path=tiny),
             ModelSpec(name="tiny-b", backend="transformers", path=tiny, system_prompt="Be brief ."),
             ModelSpec(name="judge-1", backend="openai", base_url="http://unused", model="x"),
             ModelSpec(name="judge-2", backend="openai", base_url="http://unused", model="x")]

    def make_pool(current):
        return ModelPool([PoolMember(s, ScriptedChatModel(respond=respond) if s.name.startswith("judge")
                                     else build_chat_model(s)) for s in current])

    train = DPOSettings(max_steps=1, batch_size=2, learning_rate=5e-2, warmup_ratio=0.0, threads=1, lora=LORA)
    cfg = EvolveConfig(duel=DuelConfig(duels=6, iterations=2, max_tokens=4), validation_fraction=0.3, dpo=train)
    store = TraceStore(tmp_path / "e.db")
    outcome = evolve(store, "ev1", specs, synthetic_problems(6, seed=1), cfg, tmp_path / "out", make_pool=make_pool)

    db = store.db
    assert [r["n"] for r in db.query("select count(*) as n from duels where run_id = 'ev1-duels' group by iteration "
                                     "order by iteration")] == [6, 6]
    assert [it.iteration for it in outcome.iterations] == [0, 1]
    assert next(db.query("select status from runs where run_id = 'ev1'"))["status"] == "finished"
    assert next(db.query("select status from runs where run_id = 'ev1-duels'"))["status"] == "finished"
    checkpoints = tables.checkpoints(store, "ev1")
    trained = [(m.model, it.iteration) for it in outcome.iterations for m in it.members if m.trained]
    assert {t for _, t in trained} == {0, 1} and sorted((c["model"], c["iteration"]) for c in checkpoints) == sorted(trained)
    assert any(c["iteration"] == 1 and c["previous_adapter"] for c in checkpoints)
    datasets = {(r["model"], r["iteration"], r["split"]) for r in db["training_datasets"].rows}
    assert {(m, t, "train") for m, t in trained} <= datasets
    for it in outcome.iterations:
        pool = load_pool(it.pool_file)
        assert pool.names == ["tiny-a", "tiny-b", "judge-1", "judge-2"]
        for m in it.members:
            spec = pool[m.model].spec
            if m.selected:  # the new adapter is the member's pool entry, its persona kept
                assert (spec.adapter, spec.extra["iteration"]) == (m.adapter, it.iteration)
                assert spec.system_prompt == next(s.system_prompt for s in specs if s.name == m.model)
    selected = {c["checkpoint_id"] for c in checkpoints if c["selected"]}
    assert len(selected) == sum(m.selected for it in outcome.iterations for m in it.members)
    # iteration 1 starts from the adapter iteration 0 put in the pool (its reference model)
    for c in checkpoints:
        if c["iteration"] == 1:
            first = [d for d in checkpoints if d["iteration"] == 0 and d["model"] == c["model"] and d["selected"]]
            assert c["previous_adapter"] == (first[0]["adapter"] if first else None)


def test_cli_evolve_runs_duels_and_reports_members_without_pairs(tiny, tmp_path):
    import sqlite_utils
    from typer.testing import CliRunner

    from agora.cli.main import app

    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "t{i}"\nbackend = "transformers"\npath = "{tiny}"\n\n' for i in range(3)))
    instructions = tmp_path / "i.jsonl"
    instructions.write_text('{"question": "Tom has 2 apples + 3 ?", "answer": "5"}\n')
    res = CliRunner().invoke(app, ["evolve", "--instructions", str(instructions), "--iterations", "1", "--duels", "2",
                                   "--max-tokens", "3", "--judge-max-tokens", "3", "--judge-shots", "0",
                                   "--pool", str(pool), "--db", str(tmp_path / "e.db"), "--out", str(tmp_path / "o"),
                                   "--run-id", "ev", "--threads", "1", "--max-steps", "1"])
    assert res.exit_code == 0, res.output
    db = sqlite_utils.Database(tmp_path / "e.db")
    assert next(db.query("select count(*) as n from duels where run_id = 'ev-duels'"))["n"] == 2
    assert next(db.query("select status from runs where run_id = 'ev'"))["status"] == "finished"
    # random tiny judges never parse: every duel is a tie, so no member has pairs to train on
    assert "not trained" in res.output and (tmp_path / "o" / "ev" / "it0" / "pool.toml").is_file()
