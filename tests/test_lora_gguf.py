"""peft LoRA → GGUF LoRA (models/lora_gguf.py): names, shapes and alpha on a hand-written base GGUF,
the refusals, the pool entry, and (slow) llama.cpp moving the logits as peft does on SmolLM2-135M."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

from agora.models.lora_gguf import LoraConversionError, export_lora_gguf  # noqa: E402

HIDDEN, KV, LAYERS = 8, 4, 2


def base_gguf(path: Path, arch: str = "llama") -> Path:
    """A metadata-and-shapes-only base: q (8→8), k (8→4) per layer, as a model GGUF lists them."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(LAYERS)
    w.add_head_count(2)     # q: 2 heads of 4
    w.add_head_count_kv(1)  # k: 1 head of 4
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((HIDDEN, HIDDEN), dtype=np.float32))  # [out, in]
        w.add_tensor(f"blk.{i}.attn_k.weight", np.zeros((KV, HIDDEN), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def peft_folder(path: Path, r: int = 2, config: dict | None = None, extra: dict | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tensors = {}
    for i in range(LAYERS):
        for proj, out in (("q_proj", HIDDEN), ("k_proj", KV)):
            prefix = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = rng.standard_normal((r, HIDDEN)).astype(np.float32)
            tensors[f"{prefix}.lora_B.weight"] = rng.standard_normal((out, r)).astype(np.float32)
    tensors.update(extra or {})
    safetensors_numpy.save_file(tensors, str(path / "adapter_model.safetensors"))
    cfg = {"peft_type": "LORA", "r": r, "lora_alpha": 4, "bias": "none", "target_modules": ["q_proj", "k_proj"]}
    cfg.update(config or {})
    (path / "adapter_config.json").write_text(json.dumps(cfg))
    return path


def test_names_shapes_and_alpha_are_what_llamacpp_checks(tmp_path):
    base = base_gguf(tmp_path / "base.gguf")
    adapter = peft_folder(tmp_path / "adapter", r=2)
    out = export_lora_gguf(adapter, base)
    assert out == adapter / "adapter.gguf"
    reader = gguf.GGUFReader(str(out))
    assert reader.get_field("general.type").contents() == "adapter"
    assert reader.get_field("general.architecture").contents() == "llama"
    assert reader.get_field("adapter.type").contents() == "lora"
    assert reader.get_field("adapter.lora.alpha").contents() == 4.0
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}  # ggml order: innermost first
    assert len(shapes) == 2 * 2 * LAYERS
    # a.ne[0] = W.ne[0] (in), b.ne[1] = W.ne[1] (out), a.ne[1] = b.ne[0] = r
    assert shapes["blk.1.attn_q.weight.lora_a"] == (HIDDEN, 2)
    assert shapes["blk.1.attn_q.weight.lora_b"] == (2, HIDDEN)
    assert shapes["blk.0.attn_k.weight.lora_a"] == (HIDDEN, 2)
    assert shapes["blk.0.attn_k.weight.lora_b"] == (2, KV)
    # the values are peft's, unchanged: B·A is the same matrix
    src = safetensors_numpy.load_file(str(adapter / "adapter_model.safetensors"))
    data = {t.name: np.asarray(t.data) for t in reader.tensors}
    a = src["base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"]
    b = src["base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"]
    np.testing.assert_array_equal(data["blk.0.attn_k.weight.lora_a"].reshape(a.shape), a)
    # llama: each head's rotary halves interleaved, as llama.cpp stores attn_k: one head of 4 rows → 0, 2, 1, 3
    np.testing.assert_array_equal(data["blk.0.attn_k.weight.lora_b"].reshape(b.shape), b[[0, 2, 1, 3]])
    q = src["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]  # two heads of 4 rows
    np.testing.assert_array_equal(data["blk.0.attn_q.weight.lora_b"].reshape(q.shape), q[[0, 2, 1, 3, 4, 6, 5, 7]])


def test_other_architectures_keep_the_rows_as_peft_has_them(tmp_path):
    base = base_gguf(tmp_path / "base.gguf", arch="qwen2")
    adapter = peft_folder(tmp_path / "adapter")
    reader = gguf.GGUFReader(str(export_lora_gguf(adapter, base)))
    src = safetensors_numpy.load_file(str(adapter / "adapter_model.safetensors"))
    b = src["base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"]
    got = next(np.asarray(t.data) for t in reader.tensors if t.name == "blk.0.attn_k.weight.lora_b")
    np.testing.assert_array_equal(got.reshape(b.shape), b)


def test_rslora_alpha_becomes_alpha_times_sqrt_r_and_reconversion_is_cached(tmp_path):
    base = base_gguf(tmp_path / "base.gguf")
    adapter = peft_folder(tmp_path / "adapter", r=4, config={"use_rslora": True, "lora_alpha": 8})
    out = export_lora_gguf(adapter, base, tmp_path / "x.gguf")
    # peft scales by alpha/sqrt(r) = 4; llama.cpp by alpha'/r, so alpha' = 8·2 = 16
    assert gguf.GGUFReader(str(out)).get_field("adapter.lora.alpha").contents() == pytest.approx(8 * math.sqrt(4))
    stamp = out.stat().st_mtime_ns
    assert export_lora_gguf(adapter, base, out) == out and out.stat().st_mtime_ns == stamp  # current: not redone
    assert not (tmp_path / "x.gguf.part").exists()


@pytest.mark.parametrize("config, match", [
    ({"use_dora": True}, "use_dora"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"bias": "all"}, "field 'bias'"),
    ({"alpha_pattern": {"q_proj": 8}}, "alpha_pattern"),
    ({"fan_in_fan_out": True}, "fan_in_fan_out"),
    ({"peft_type": "IA3"}, "peft_type"),
])
def test_what_llamacpp_cannot_apply_is_refused_naming_the_field(tmp_path, config, match):
    base = base_gguf(tmp_path / "base.gguf")
    adapter = peft_folder(tmp_path / "adapter", config=config)
    with pytest.raises(LoraConversionError, match=match):
        export_lora_gguf(adapter, base)
    assert not (adapter / "adapter.gguf").exists()


def test_a_module_or_shape_the_base_lacks_is_refused(tmp_path):
    base = base_gguf(tmp_path / "base.gguf")
    extra = {"base_model.model.model.layers.0.mlp.up_proj.lora_A.weight": np.zeros((2, HIDDEN), np.float32),
             "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight": np.zeros((16, 2), np.float32)}
    with pytest.raises(LoraConversionError, match=r"'model.layers.0.mlp.up_proj' has no weight in base.gguf"):
        export_lora_gguf(peft_folder(tmp_path / "a1", extra=extra), base)
    wrong = {"base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight": np.zeros((6, 2), np.float32)}
    with pytest.raises(LoraConversionError, match=r"do not fit blk.1.attn_q.weight \(in 8, out 8\)"):
        export_lora_gguf(peft_folder(tmp_path / "a2", extra=wrong), base)
    with pytest.raises(LoraConversionError, match="no adapter_config.json"):
        export_lora_gguf(tmp_path, base)


def test_a_llamacpp_pool_entry_takes_a_peft_folder_or_a_gguf_adapter(tmp_path):
    from agora.models.pool import PoolConfigError, load_pool

    base = base_gguf(tmp_path / "base.gguf")
    adapter = peft_folder(tmp_path / "adapter")
    converted = export_lora_gguf(adapter, base)
    for value in (adapter, converted):
        pool_file = tmp_path / "pool.toml"
        pool_file.write_text(f'[[models]]\nname = "m"\nbackend = "llamacpp"\npath = "{base}"\nadapter = "{value}"\n')
        member = load_pool(pool_file)["m"]
        assert member.spec.adapter == str(value)
        assert member.chat_model.lora_path == str(converted)
    pool_file.write_text(f'[[models]]\nname = "m"\nbackend = "llamacpp"\npath = "{base}"\nadapter = "{tmp_path}"\n')
    with pytest.raises(PoolConfigError, match="field 'adapter': .* neither a peft adapter folder"):
        load_pool(pool_file)


def _next_token_logprobs(name: str, targets: list[str], tmp: Path, permute: bool = True):
    """Log-probabilities of the next token after one prompt: transformers on the dequantised weights
    without and with a random LoRA (peft), and llama.cpp on the GGUF without and with its conversion."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import agora.models.lora_gguf as lora_gguf
    from agora.models.convert import export_hf, resolve_gguf
    from agora.models.llamacpp import _load

    def log_softmax(x):
        x = np.asarray(x, dtype=np.float64)
        return x - x.max() - np.log(np.exp(x - x.max()).sum())

    gguf_file, folder = resolve_gguf(name), export_hf(name)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = tok("Question: Tom has 3 apples and buys 4 more. How many apples does Tom have?\nAnswer:")["input_ids"]
    torch.manual_seed(0)
    with torch.no_grad():
        before_hf = log_softmax(model(torch.tensor([ids])).logits[0, -1].numpy())
        lora = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules=targets,
                                                          init_lora_weights=False))
        after_hf = log_softmax(lora(torch.tensor([ids])).logits[0, -1].numpy())
    lora.save_pretrained(tmp / "adapter")
    saved = lora_gguf.ROPE_PERMUTED
    lora_gguf.ROPE_PERMUTED = saved if permute else frozenset()
    try:
        adapter = export_lora_gguf(tmp / "adapter", gguf_file, tmp / f"adapter-{permute}.gguf")
    finally:
        lora_gguf.ROPE_PERMUTED = saved

    def llamacpp(lora_path):
        llm = _load(str(gguf_file), 512, 2, lora_path)
        llm.reset()
        llm.eval(ids)  # without logits_all llama-cpp-python keeps no scores: read the context's last row
        return log_softmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)))

    return before_hf, after_hf, llamacpp(None), llamacpp(str(adapter))


def _agreement(before_hf, after_hf, before_ll, after_ll) -> dict:
    """How llama.cpp's change matches peft's, on the tokens either peft distribution gives > 0.1 %
    (the tail's log-probabilities are noise on both backends)."""
    top = (np.exp(before_hf) > 1e-3) | (np.exp(after_hf) > 1e-3)
    d_hf, d_ll = (after_hf - before_hf)[top], (after_ll - before_ll)[top]

    def kl(p, q):
        return float((np.exp(p) * (p - q)).sum())

    return {"corr": float(np.corrcoef(d_hf, d_ll)[0, 1]), "slope": float(d_hf @ d_ll / (d_hf @ d_hf)),
            "effect": kl(after_hf, before_hf), "miss": kl(after_hf, after_ll)}


@pytest.mark.slow
@pytest.mark.parametrize("name, targets", [
    ("builtin:smollm2", ["q_proj", "k_proj", "v_proj"]),                       # llama: q/k rows permuted
    ("builtin:qwen2.5-coder-0.5b", ["q_proj", "k_proj", "v_proj", "o_proj"]),  # qwen2: as in HF
])
def test_llamacpp_moves_the_next_token_distribution_as_peft_does(tmp_path, name, targets):
    """A random rank-8 LoRA (a change of the next-token distribution of KL ≈ 0.1–0.3 nats): the change
    in llama.cpp on the quantised GGUF matches peft's on the dequantised weights (measured: SmolLM2
    correlation 0.992, slope 0.998; Qwen2.5-0.5B 0.999, 0.997), and what is left between the two
    after the adapter is a tenth of its effect or less. On SmolLM2, the same adapter without the q/k
    row permutation does not match (measured 0.42 / 0.25 for q and k alone)."""
    got = _agreement(*_next_token_logprobs(name, targets, tmp_path))
    assert got["effect"] > 0.05, got
    assert got["corr"] > 0.97, got
    assert got["slope"] == pytest.approx(1.0, abs=0.1), got
    assert got["miss"] < 0.1 * got["effect"], got
    if name == "builtin:smollm2":
        wrong = _agreement(*_next_token_logprobs(name, targets, tmp_path / "unpermuted", permute=False))
        assert wrong["corr"] < 0.9 or abs(wrong["slope"] - 1) > 0.2, wrong


@pytest.mark.slow
def test_a_pool_entry_with_a_peft_adapter_generates_with_it_on_both_decoding_paths(tmp_path):
    """The batched decoder runs on a second llama.cpp context, which must get the adapter too: greedy
    text through a pool entry with ``adapter = <peft folder>`` starts the same on the batched and the
    sequential path, and not as the base model's does.

    Only the start is compared: the two contexts decode with different batch shapes, so their float
    sums differ in order and greedy texts part at the first near-tie. Measured on an AVX2 machine
    (and in CI): tuned "The three colours are:\\n\\nred, blue, green" then ", blue, blue" (batched)
    against "\\n\\nThe three are" (sequential); the base model parts after ten words likewise."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    from agora.models.convert import export_hf
    from agora.models.pool import SamplingParams, load_pool

    model = AutoModelForCausalLM.from_pretrained(export_hf("builtin:smollm2"), dtype=torch.float32)
    torch.manual_seed(1)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                      init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    pool_file = tmp_path / "pool.toml"
    pool_file.write_text('[[models]]\nname = "base"\npath = "builtin:smollm2"\n\n'
                         f'[[models]]\nname = "tuned"\npath = "builtin:smollm2"\nadapter = "{tmp_path / "adapter"}"\n')
    pool = load_pool(pool_file)
    messages = [{"role": "user", "content": "Name three colours."}]
    params = SamplingParams(n=1, temperature=0, max_tokens=24, seed=0)

    def greedy(name: str, batched: bool) -> str:
        pool[name].chat_model.batched = batched
        samples, records = pool.sample(name, messages, params)
        assert records[0]["error"] is None
        return samples[0].text

    tuned_batched, tuned_sequential = greedy("tuned", True), greedy("tuned", False)
    assert (tmp_path / "adapter" / "adapter.gguf").is_file()  # converted once, beside the peft files
    base_batched = greedy("base", True)
    shared = len(os.path.commonprefix([tuned_batched, tuned_sequential]))
    assert shared >= 24, (tuned_batched, tuned_sequential)
    assert len(os.path.commonprefix([tuned_batched, base_batched])) < shared, (tuned_batched, base_batched)


def test_a_trained_member_can_be_served_by_llamacpp_and_trained_on_from_there(tmp_path):
    from agora.models.pool import ModelSpec
    from agora.training.pipeline import base_of
    from agora.training.pool_entries import trained_entry
    from agora.training.trainers import TrainResult

    adapter = peft_folder(tmp_path / "adapter")
    result = TrainResult(kind="dpo", adapter_dir=adapter, base="builtin:smollm2", previous_adapter=None,
                         rows=1, steps=1, losses=[0.7])
    spec = ModelSpec(name="m", backend="llamacpp", path="builtin:smollm2", n_ctx=4096, temperature=0.3)
    entry = trained_entry(spec, result, 2, backend="llamacpp")
    assert entry == {"name": "m", "temperature": 0.3, "max_retries": 3, "cost_per_1k_tokens": 0.0,
                     "prompt_format": "chat", "n_ctx": 4096, "backend": "llamacpp", "path": "builtin:smollm2",
                     "adapter": str(adapter.resolve()), "iteration": 2}
    assert trained_entry(spec, result)["backend"] == "transformers"  # the default is unchanged
    hf = TrainResult(kind="dpo", adapter_dir=adapter, base=str(tmp_path), previous_adapter=None, rows=1, steps=1,
                     losses=[0.7])
    with pytest.raises(ValueError, match="not a GGUF: llama.cpp cannot serve its adapter"):
        trained_entry(spec, hf, backend="llamacpp")
    # the next round trains on from the peft folder; a GGUF LoRA cannot be trained further
    assert base_of(ModelSpec(name="m", backend="llamacpp", path="builtin:smollm2", adapter=str(adapter))) == (
        "builtin:smollm2", str(adapter))
    gguf_adapter = export_lora_gguf(adapter, base_gguf(tmp_path / "base.gguf"))
    with pytest.raises(ValueError, match="is a GGUF LoRA, which cannot be trained further"):
        base_of(ModelSpec(name="m", backend="llamacpp", path="builtin:smollm2", adapter=str(gguf_adapter)))


@pytest.mark.slow
def test_greedy_evaluation_on_llamacpp_with_an_adapter_resumes_and_matches_the_pool(tmp_path):
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    from agora.models.convert import export_hf
    from agora.models.pool import ModelPool, ModelSpec, PoolMember, SamplingParams, build_chat_model
    from agora.agents.prompts import solver_messages
    from agora.tasks.loaders import load_problems
    from agora.tasks.samples import sample_path
    from agora.training.evaluation import greedy_outcomes

    model = AutoModelForCausalLM.from_pretrained(export_hf("builtin:smollm2"), dtype=torch.float32)
    torch.manual_seed(2)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["v_proj"],
                                                      init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    problems = load_problems(*sample_path("gsm8k"), 2)
    out = tmp_path / "eval.jsonl"
    first = greedy_outcomes(problems[:1], "builtin:smollm2", str(tmp_path / "adapter"), out, max_tokens=12,
                            backend="llamacpp")
    both = greedy_outcomes(problems, "builtin:smollm2", str(tmp_path / "adapter"), out, max_tokens=12,
                           backend="llamacpp")
    assert [r["question_id"] for r in both] == [p.id for p in problems] and both[0] == first[0]
    assert len(out.read_text().splitlines()) == 2  # the first question was not redone
    spec = ModelSpec(name="m", backend="llamacpp", path="builtin:smollm2", adapter=str(tmp_path / "adapter"))
    pool = ModelPool([PoolMember(spec, build_chat_model(spec))])
    served, _ = pool.sample("m", solver_messages(problems[1], 2),
                            SamplingParams(n=1, temperature=0.0, max_tokens=12, seed=0))
    assert served[0].text == both[1]["text"]
    with pytest.raises(ValueError, match="backend 'vllm'"):
        greedy_outcomes(problems, "builtin:smollm2", None, tmp_path / "x.jsonl", backend="vllm")


def test_train_serve_with_llamacpp_needs_a_gguf_member_and_says_so_before_training(tmp_path):
    import sqlite_utils
    from typer.testing import CliRunner

    from agora.cli.main import app

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    pool = tmp_path / "pool.toml"
    pool.write_text(f'[[models]]\nname = "m1"\nbackend = "transformers"\npath = "{folder}"\n')
    from agora.traces.store import TraceStore

    db = tmp_path / "t.db"
    TraceStore(db)  # a trace DB (its tables, no run): one with no Agora table is refused before this check
    res = CliRunner().invoke(app, ["train", "dpo", "--db", str(db), "--model", "m1", "--pool", str(pool),
                                   "--out", str(tmp_path / "out"), "--serve-with", "llamacpp", "--run-id", "r"])
    assert res.exit_code == 2, res.output
    assert "--serve-with llamacpp: model 'm1' has no GGUF" in " ".join(res.output.split())
    assert list(sqlite_utils.Database(db)["runs"].rows) == []  # refused before any run row or training


def test_a_cached_conversion_is_redone_for_other_weights_or_another_base(tmp_path):
    import os
    import shutil

    base = base_gguf(tmp_path / "base.gguf")
    adapter = peft_folder(tmp_path / "adapter", r=2)
    out = export_lora_gguf(adapter, base)
    stamp = out.stat().st_mtime_ns
    assert export_lora_gguf(adapter, base) == out and out.stat().st_mtime_ns == stamp  # same files, same base
    # other weights copied in with their old mtimes (cp -p): the content decides, not the clock
    other = peft_folder(tmp_path / "other", r=4)
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        shutil.copy2(other / name, adapter / name)
        os.utime(adapter / name, ns=(1, 1))
    export_lora_gguf(adapter, base)
    assert {tuple(int(x) for x in t.shape) for t in gguf.GGUFReader(str(out)).tensors
            if t.name == "blk.0.attn_q.weight.lora_a"} == {(HIDDEN, 4)}
    # the same folder for another base of the same architecture and shapes: converted for that one
    bigger = base_gguf(tmp_path / "bigger.gguf")
    with bigger.open("ab") as fh:
        fh.write(b"\0" * 64)
    before = out.read_bytes()
    export_lora_gguf(adapter, bigger)
    assert out.read_bytes() != before and "bigger.gguf" in out.read_bytes().decode("latin-1")


def test_a_gguf_adapter_that_does_not_fit_is_refused_when_the_pool_loads(tmp_path):
    """llama.cpp refusing a LoRA leaves llama-cpp-python 0.3 with a NULL adapter that segfaults at the
    first decode: the pool checks the file against the model first."""
    from agora.models.pool import PoolConfigError, load_pool

    llama_base = base_gguf(tmp_path / "llama.gguf")
    qwen_base = base_gguf(tmp_path / "qwen.gguf", arch="qwen2")
    converted = export_lora_gguf(peft_folder(tmp_path / "adapter"), llama_base, tmp_path / "llama-lora.gguf")

    def load(path, adapter):
        pool_file = tmp_path / "pool.toml"
        pool_file.write_text(f'[[models]]\nname = "m"\nbackend = "llamacpp"\npath = "{path}"\nadapter = "{adapter}"\n')
        return load_pool(pool_file)

    with pytest.raises(PoolConfigError, match=r"field 'adapter': .*a LoRA for architecture 'llama', but qwen.gguf is 'qwen2'"):
        load(qwen_base, converted)
    with pytest.raises(PoolConfigError, match=r"field 'adapter': .*general.type is None, not 'adapter'"):
        load(llama_base, llama_base)  # a model file given as the adapter
    small = tmp_path / "small.gguf"  # same architecture, other shapes
    w = gguf.GGUFWriter(str(small), "llama")
    w.add_block_count(LAYERS)
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((6, 6), dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_k.weight", np.zeros((6, 6), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(PoolConfigError, match=r"does not fit blk.0.attn_\w.weight \(6, 6\) of small.gguf"):
        load(small, converted)
    assert load(llama_base, converted)["m"].chat_model.lora_path == str(converted)


def test_the_header_reader_agrees_with_gguf_py(tmp_path):
    from agora.models.lora_gguf import read_gguf_header

    base = base_gguf(tmp_path / "base.gguf")
    header = read_gguf_header(base)
    reader = gguf.GGUFReader(str(base))
    assert header.shapes == {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}
    assert header.get("general.architecture") == "llama" and header.get("llama.block_count") == LAYERS
    assert header.get("llama.attention.head_count") == 2
    (tmp_path / "cut.gguf").write_bytes(base.read_bytes()[:40])
    with pytest.raises(LoraConversionError, match="cut short"):
        read_gguf_header(tmp_path / "cut.gguf")
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(LoraConversionError, match="not a GGUF file"):
        read_gguf_header(tmp_path / "notes.txt")


def test_evolve_plays_a_selected_member_on_llamacpp_when_asked(tmp_path):
    from agora.models.pool import ModelSpec
    from agora.training.evolve import EvolveConfig, next_spec
    from agora.training.pipeline import MemberRun
    from agora.training.pool_entries import trained_entry
    from agora.training.trainers import TrainResult

    adapter = peft_folder(tmp_path / "adapter")
    spec = ModelSpec(name="q-cautious", backend="llamacpp", path="builtin:qwen2.5-coder-0.5b",
                     system_prompt="Be careful.", n_ctx=4096)
    result = TrainResult(kind="dpo", adapter_dir=adapter, base="builtin:qwen2.5-coder-0.5b", previous_adapter=None,
                         rows=1, steps=1, losses=[0.7])
    run = MemberRun("q-cautious", result, "ck", [], [], None, trained_entry(spec, result, 1))
    on_llama = next_spec(spec, run, 1, "llamacpp")
    assert (on_llama.backend, on_llama.path, on_llama.adapter, on_llama.system_prompt, on_llama.n_ctx) == (
        "llamacpp", "builtin:qwen2.5-coder-0.5b", str(adapter.resolve()), "Be careful.", 4096)
    assert on_llama.extra == {"iteration": 1}
    assert next_spec(spec, run, 1).backend == "transformers"  # the default, as before
    hf = TrainResult(kind="dpo", adapter_dir=adapter, base=str(tmp_path), previous_adapter=None, rows=1, steps=1,
                     losses=[0.7])
    hf_spec = ModelSpec(name="h", backend="transformers", path=str(tmp_path))
    hf_run = MemberRun("h", hf, "ck", [], [], None, trained_entry(hf_spec, hf, 1))
    assert next_spec(hf_spec, hf_run, 1, "llamacpp").backend == "transformers"  # no GGUF: stays on transformers
    with pytest.raises(ValueError, match="serve_with must be 'transformers' or 'llamacpp'"):
        EvolveConfig(serve_with="vllm")
