"""The orchestrator's ceiling, measured by simulation: how many questions per second one Agora
process (the real runner, :func:`agora.graphs.runner.run_protocol`, checkpointed and traced) drives
through simulated vLLM replicas, what it spends per model call, how fast the trace store takes its
rows, and how many GPUs' worth of vLLM that keeps busy.

**The replicas** are stub OpenAI-compatible servers, one asyncio process serving every replica on a
port of its own (127.0.0.1 only; it exits when this script does, or after ``--fleet-max-s``). Each
request is answered after the time a vLLM replica would take, drawn per request:

* output length per choice: log-normal, median ``--median-tokens`` (80) and σ ``--sigma-tokens``
  (0.7), capped at the request's ``max_tokens``: a mean of ≈ 100 tokens, the reference run's ALIGN
  figure (591 generated tokens per question over 6 samples, benchmarks/README.md "Reference run,
  second edition");
* time per output token: log-normal around ``--tpot-ms`` (8 ms, σ 0.2) for a replica with few
  sequences in flight, and never less than ``sequences in flight / --gpu-tok-s`` (12,500 output
  tokens/s): a roofline, flat while decoding is memory-bound, then throughput-bound. 8 ms per token
  single-stream and 12,500 tokens/s at saturation are published vLLM figures for an 8B model in
  BF16 on one H100 (≈ 75 tokens/s single-stream on an A100, about half an H100's bandwidth);
  Agora's own Qwen 0.5B/1.5B decode faster, so the GPU counts below are a lower bound for them;
* time to the first token: 20 ms plus the prompt at 20,000 tokens/s (4 characters a token).

A replica's **busy share** is the time-average of ``min(1, sequences in flight / (gpu_tok_s ×
tpot))``: 1 when its batch is large enough to reach the saturated throughput (a request's n
sequences count until its longest ends, so the sum over replicas is an upper bound). The GPUs'
worth of vLLM kept busy is the orchestrator's generated tokens/s over ``--gpu-tok-s``; and, since
the orchestrator is CPU-bound, what one free core would drive: 1 / (CPU seconds per question).

**What it runs**: ALIGN (2 agents × 3 samples, ``max_tokens`` 256: 2 requests and 6 ``model_calls``
rows a question) on synthetic arithmetic questions, with ``--concurrency`` questions in flight,
through two pool members of ``backend = "openai"``, each over half the replicas (its endpoint
list). Printed per replica count: questions/s, model requests/s and samples/s, the orchestrator's
CPU seconds per request (its own process only; the stub fleet's CPU is printed apart), the trace
store's rows per second of time spent writing them, the replicas' busy sum. Separately, the trace
store alone (``--insert-only`` or first in every run): rows/s of the runner's write path
(``TraceStore.record_question``: one question, its 4 results and 6 model calls per transaction),
on SQLite and, with ``--postgres``, on Postgres. Goal: ≥ 5,000 rows/s on SQLite.

**N workers on one Postgres run** (``--workers 2,4``, with ``--postgres``): N worker processes run
the same ALIGN run, one run id in one Postgres database, as ``agora run`` / ``agora bench`` started
N times do (the runner's claims, :mod:`agora.traces.claims`: each question done once), against one
stub fleet of each ``--replicas`` count, ``--concurrency`` questions in flight per worker. The
workers import and open their store first, then start together; the figures: total questions/s
and model requests/s (first start to last end), each worker's questions and CPU per request (its
CPU over its share of the requests, in proportion to the questions it recorded), the store's rows
per second (of the workers' ``record_question`` time, and of wall time), the run's row status.

**Resumable**: each figure set is saved in ``--out`` (JSON) as it completes and skipped by a rerun;
an interrupted run resumes its trace run (the same run id, finished questions kept) and its figures
then count the questions of that sitting only (said in the record).

Usage::

    python benchmarks/orchestrator_ceiling.py --questions 200 --replicas 8 --work /tmp/ceiling   # a quick look
    python benchmarks/orchestrator_ceiling.py --questions 10000 --replicas 8,32,128 --work ceiling
    python benchmarks/orchestrator_ceiling.py --insert-only --postgres auto   # the store's rate, both stores
    python benchmarks/orchestrator_ceiling.py --questions 10000 --replicas 128 --stores none \
        --workers 2,4 --postgres auto --work ceiling                        # N workers on one Postgres run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

FILLER = ("First, read the numbers in the question. Then combine them step by step, checking each "
          "intermediate result before going on. ") * 64


# ----------------------------------------------------------------------------- the stub fleet


class Replica:
    """One simulated vLLM replica: the latency model of the module docstring and its counters."""

    def __init__(self, rng: random.Random, args: argparse.Namespace):
        self.rng = rng
        self.args = args
        self.in_flight = 0  # sequences (a request of n choices is n sequences)
        self.requests = 0
        self.samples = 0
        self.tokens = 0
        self.busy_s = 0.0
        self.last = time.monotonic()
        self.saturating = args.gpu_tok_s * args.tpot_ms / 1000.0  # sequences that reach gpu_tok_s

    def advance(self) -> None:
        now = time.monotonic()
        self.busy_s += min(1.0, self.in_flight / self.saturating) * (now - self.last)
        self.last = now

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        a, rng = self.args, self.rng
        n = int(body.get("n") or 1)
        max_tokens = int(body.get("max_tokens") or 256)
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages") or [])
        prompt_chars += len(str(body.get("prompt", "")))
        prompt_tokens = max(1, prompt_chars // 4)
        lengths = [min(max_tokens, max(1, round(rng.lognormvariate(math.log(a.median_tokens), a.sigma_tokens))))
                   for _ in range(n)]
        self.advance()
        self.in_flight += n
        tpot = max(a.tpot_ms / 1000.0 * rng.lognormvariate(0.0, a.sigma_tpot), self.in_flight / a.gpu_tok_s)
        latency = 0.020 + prompt_tokens / 20000.0 + max(lengths) * tpot
        try:
            await asyncio.sleep(latency * a.time_scale)
        finally:
            self.advance()
            self.in_flight -= n
        self.requests += 1
        self.samples += n
        self.tokens += sum(lengths)
        choices = []
        for i, length in enumerate(lengths):
            answer = f" The answer is {rng.randint(2, 40)}."
            text = FILLER[:max(0, 4 * length - len(answer))] + answer
            choices.append({"index": i, "finish_reason": "length" if length >= max_tokens else "stop",
                            "message": {"role": "assistant", "content": text}})
        return {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "stub"), "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": sum(lengths),
                          "total_tokens": prompt_tokens + sum(lengths)}}


def _response(status: int, payload: Any) -> bytes:
    data = json.dumps(payload).encode()
    reason = {200: "OK", 404: "Not Found", 400: "Bad Request"}.get(status, "OK")
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: keep-alive\r\n\r\n").encode() + data


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replica: Replica,
                            fleet: list[Replica], started: float) -> None:
    """HTTP/1.1 with keep-alive, just enough of it for the OpenAI client (Content-Length bodies)."""
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            headers: dict[str, str] = {}
            while True:
                header = await reader.readline()
                if header in (b"\r\n", b"\n", b""):
                    break
                key, _, value = header.decode("latin-1").partition(":")
                headers[key.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length") or 0))
            method, path = line.decode("latin-1").split(" ")[:2]
            if method == "GET" and path.rstrip("/").endswith("/v1/models"):
                out = _response(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
            elif method == "GET" and path.rstrip("/").endswith("/stats"):
                for r in fleet:
                    r.advance()
                out = _response(200, {"elapsed_s": time.monotonic() - started, "cpu_s": time.process_time(),
                                      "replicas": [{"requests": r.requests, "samples": r.samples, "tokens": r.tokens,
                                                    "busy_s": r.busy_s} for r in fleet]})
            elif method == "POST" and path.endswith("/completions"):
                out = _response(200, await replica.complete(json.loads(body or b"{}")))
            else:
                out = _response(404, {"error": {"message": f"no route {method} {path}"}})
            writer.write(out)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def _fleet(args: argparse.Namespace) -> None:
    parent = os.getppid()
    started = time.monotonic()
    fleet = [Replica(random.Random(args.seed * 1000 + i), args) for i in range(args.replicas)]
    servers = []
    for replica in fleet:
        servers.append(await asyncio.start_server(
            lambda r, w, rep=replica: _serve_connection(r, w, rep, fleet, started), "127.0.0.1", 0, backlog=1024))
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    Path(args.ready).write_text(json.dumps({"ports": ports, "pid": os.getpid()}))
    deadline = started + args.fleet_max_s
    while time.monotonic() < deadline and os.getppid() == parent:  # bounded: ends with its parent
        await asyncio.sleep(1.0)
    for s in servers:
        s.close()


class Fleet:
    """The stub fleet as a child process (a context manager): ``urls`` of its replicas, ``stats()``."""

    def __init__(self, args: argparse.Namespace, replicas: int):
        self.args, self.replicas = args, replicas
        self.ready = Path(tempfile.mkdtemp(prefix="agora-fleet-")) / "ready.json"

    def __enter__(self) -> "Fleet":
        a = self.args
        cmd = [sys.executable, __file__, "--fleet", "--replicas", str(self.replicas), "--ready", str(self.ready),
               "--seed", str(a.seed), "--fleet-max-s", str(a.fleet_max_s), "--time-scale", str(a.time_scale),
               "--median-tokens", str(a.median_tokens), "--sigma-tokens", str(a.sigma_tokens),
               "--tpot-ms", str(a.tpot_ms), "--sigma-tpot", str(a.sigma_tpot), "--gpu-tok-s", str(a.gpu_tok_s)]
        self.proc = subprocess.Popen(cmd)
        deadline = time.monotonic() + 120
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("orchestrator_ceiling.py: the stub fleet did not start")
            time.sleep(0.1)
        time.sleep(0.1)  # the file is written whole before its size is final on some file systems
        self.ports = json.loads(self.ready.read_text())["ports"]
        self.urls = [f"http://127.0.0.1:{p}/v1" for p in self.ports]
        return self

    def stats(self) -> dict[str, Any]:
        import httpx

        return httpx.get(self.urls[0].removesuffix("/v1") + "/stats", timeout=60).json()

    def __exit__(self, *exc: Any) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ----------------------------------------------------------------------------- the orchestrator side


def pool_over(urls: list[str]):
    """Two ``openai`` members, each over half the replicas (its endpoint list)."""
    from agora.models.pool import ModelSpec, pool_from_specs

    halves = [tuple(urls[0::2]), tuple(urls[1::2]) or tuple(urls)]
    return pool_from_specs([ModelSpec(name=f"m{j}", backend="openai", model="stub", endpoints=ends, max_retries=3,
                                      timeout_s=600.0) for j, ends in enumerate(halves)])


class TimedStore:
    """Times the runner's writes to a trace store: ``record_question`` calls, rows and seconds."""

    def __init__(self, store: Any):
        self.store, self.rows, self.seconds, self.questions = store, 0, 0.0, 0
        self._lock = threading.Lock()
        original = store.record_question

        def record_question(run_id, protocol, question, results, calls):
            calls = list(calls)
            start = time.perf_counter()
            original(run_id, protocol, question, results, calls)
            took = time.perf_counter() - start
            with self._lock:
                self.seconds += took
                self.rows += 1 + len(results) + len(calls)
                self.questions += 1

        store.record_question = record_question


def open_store(kind: str, work: Path, name: str, postgres_url: str | None):
    """A fresh trace store for one measurement: a SQLite file in ``work`` or a new Postgres database."""
    from agora.traces.store import TraceStore

    if kind == "sqlite":
        return TraceStore(work / f"{name}.db")
    import psycopg

    dbname = f"ceiling_{name.replace('-', '_')}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        exists = conn.execute("select 1 from pg_database where datname = %s", [dbname]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{dbname}"')
    base, _, query = postgres_url.partition("?")
    url = base.rsplit("/", 1)[0] + "/" + dbname + (f"?{query}" if query else "")
    return TraceStore(url)


def _word(i: int) -> str:
    """A word of letters only, distinct for each ``i`` (so no two samples' texts are the same)."""
    letters = ""
    while True:
        i, r = divmod(i, 26)
        letters += chr(97 + r)
        if i == 0:
            return letters


def measure_inserts(store: Any, questions: int, seed: int = 0, warm: bool = False) -> dict[str, Any]:
    """Rows/s of the runner's write path alone: ``questions`` ALIGN-shaped questions (1 question row,
    4 results, 6 model calls of ≈ 400-character completions and ≈ 400-character prompts: 11 rows, as
    the runs below write), one ``record_question`` (one transaction) each, timed one by one. ``warm``:
    each question's samples read first (``find_answer``, outside the timing), as the graph reads them
    just before the runner records the question, so the store finds them in the cache."""
    rng = random.Random(seed)
    store.start_run("inserts", "align", config={}, pool=[], dataset={})
    methods = ["align", "single_agent", "self_consistency", "best_of_n"]  # what an ALIGN question records
    payloads = []
    for q in range(questions):
        qid = f"q{q}"
        calls = []
        for a in range(2):
            first = uuid.uuid4().hex
            for k in range(3):
                answer = rng.randint(2, 40)
                calls.append({"call_id": first if k == 0 else uuid.uuid4().hex, "question_id": qid, "model": f"m{a}",
                              "messages": [{"role": "user", "content": "Q: what is 3 + 4? " * 20}] if k == 0 else None,
                              "messages_of": None if k == 0 else first, "completion": FILLER[:390] + f" Checked {_word(len(calls) + 6 * q)}. The answer is {answer}.",
                              "params": {"n": 3, "temperature": 0.7, "max_tokens": 256, "seed": k},
                              "prompt_tokens": 120, "completion_tokens": 100, "latency_s": 1.2, "finish_reason": "stop",
                              "attempt": 0, "error": None, "node": "agent_sample", "role": "agent", "agent": a})
        results = {m: {"answer": "7", "correct": True, "samples": 6, "completion_tokens": 600, "latency_s": 2.4,
                       "how": "stated", "calls": 2} for m in methods}
        question = {"question_id": qid, "idx": q, "source": "synthetic", "kind": "math", "question": "What is 3 + 4?",
                    "gold": "7", "answer": "7", "correct": True, "wall_s": 2.5, "detail": {"selection": {"agent": 0}}}
        payloads.append((question, results, calls))
    rows = sum(1 + len(r) + len(c) for _, r, c in payloads)
    from agora.tasks.answers import find_answer

    wall = cpu = 0.0
    for question, results, calls in payloads:
        if warm:  # the graph's reading of the question's samples, just before the runner records it
            for c in calls:
                find_answer(c["completion"], "math", 4, question=question["question"])
        cpu0, start = time.process_time(), time.perf_counter()
        store.record_question("inserts", "align", question, results, calls)
        wall, cpu = wall + time.perf_counter() - start, cpu + time.process_time() - cpu0
    return {"questions": questions, "rows": rows, "wall_s": wall, "cpu_s": cpu, "rows_per_s": rows / wall}


def measure_run(args: argparse.Namespace, replicas: int, kind: str, postgres_url: str | None) -> dict[str, Any]:
    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext
    from agora.graphs.runner import run_protocol
    from agora.tasks import synthetic_problems

    name = f"ceiling-{kind}-r{replicas}-q{args.questions}"
    store = open_store(kind, args.work, name, postgres_url)
    problems = synthetic_problems(args.questions, seed=args.seed)
    done_before = len(store.finished_questions(name)) if hasattr(store, "finished_questions") else 0
    config = DelegationConfig(n_agents=2, k_samples=3, max_tokens=256, seed=args.seed)
    with Fleet(args, replicas) as fleet:
        pool = pool_over(fleet.urls)
        timed = TimedStore(store)
        before = fleet.stats()
        cpu, start = time.process_time(), time.perf_counter()
        outcome = run_protocol("align", problems, store=store, run_id=name,
                               context=DelegationContext(pool=pool, config=config), config={"ceiling": True},
                               pool_description=pool.describe(), dataset={"synthetic": args.questions},
                               concurrency=args.concurrency)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        after = fleet.stats()
    per = list(zip(before["replicas"], after["replicas"]))
    requests = sum(b["requests"] - a["requests"] for a, b in per)
    samples = sum(b["samples"] - a["samples"] for a, b in per)
    tokens = sum(b["tokens"] - a["tokens"] for a, b in per)
    busy = sum(b["busy_s"] - a["busy_s"] for a, b in per) / wall
    ran = len(outcome.outcomes) + len(outcome.failed)
    return {
        "store": kind, "replicas": replicas, "questions": args.questions, "ran_this_sitting": ran,
        "done_before": done_before, "failed": len(outcome.failed), "concurrency": args.concurrency,
        "wall_s": wall, "questions_per_s": ran / wall, "requests": requests, "requests_per_s": requests / wall,
        "samples_per_s": samples / wall, "generated_tok_per_s": tokens / wall,
        "orchestrator_cpu_s": cpu, "cpu_ms_per_request": 1000 * cpu / max(1, requests),
        "cpu_ms_per_question": 1000 * cpu / max(1, ran), "orchestrator_cores": cpu / wall,
        "fleet_cpu_s": after["cpu_s"] - before["cpu_s"],
        "store_rows": timed.rows, "store_seconds": timed.seconds,
        "store_rows_per_s": timed.rows / timed.seconds if timed.seconds else None,
        "replicas_busy_sum": busy, "gpus_by_tokens": tokens / wall / args.gpu_tok_s, "gpu_tok_s": args.gpu_tok_s,
        "time_scale": args.time_scale,
    }


def _worker(spec_file: str) -> None:
    """One of N worker processes (``--worker``, see the module docstring): open the store and pool,
    say ready, wait for the go, run the shared run, write its figures."""
    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext
    from agora.graphs.runner import run_protocol
    from agora.tasks import synthetic_problems
    from agora.traces.store import TraceStore

    spec = json.loads(Path(spec_file).read_text())
    store = TraceStore(spec["url"])
    timed = TimedStore(store)
    pool = pool_over(spec["urls"])
    problems = synthetic_problems(spec["questions"], seed=spec["seed"])
    config = DelegationConfig(n_agents=2, k_samples=3, max_tokens=256, seed=spec["seed"])
    Path(spec["ready"]).write_text("ready")
    go = Path(spec["go"])
    while not go.exists():
        time.sleep(0.01)
    cpu, start, started_at = time.process_time(), time.perf_counter(), time.time()
    outcome = run_protocol("align", problems, store=store, run_id=spec["run_id"],
                           context=DelegationContext(pool=pool, config=config), config={"ceiling": True},
                           pool_description=pool.describe(), dataset={"synthetic": spec["questions"]},
                           concurrency=spec["concurrency"])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - start
    Path(spec["out"]).write_text(json.dumps({
        "pid": os.getpid(), "started_at": started_at, "ended_at": started_at + wall, "wall_s": wall, "cpu_s": cpu,
        "recorded": timed.questions, "failed": len(outcome.failed), "store_rows": timed.rows,
        "store_seconds": timed.seconds}))
    store.close()


def measure_workers(args: argparse.Namespace, workers: int, replicas: int, postgres_url: str) -> dict[str, Any]:
    """N worker processes (:func:`_worker`) on one fresh Postgres run against one stub fleet."""
    name = f"ceiling-w{workers}-r{replicas}-q{args.questions}"
    store = open_store("postgres", args.work, f"{name}-{uuid.uuid4().hex[:6]}", postgres_url)
    url = store.path
    folder = Path(tempfile.mkdtemp(prefix="agora-workers-"))
    with Fleet(args, replicas) as fleet:
        procs = []
        for i in range(workers):
            spec = {"url": url, "run_id": name, "questions": args.questions, "seed": args.seed,
                    "concurrency": args.concurrency, "urls": fleet.urls, "ready": str(folder / f"ready-{i}"),
                    "go": str(folder / "go"), "out": str(folder / f"worker-{i}.json")}
            (folder / f"spec-{i}.json").write_text(json.dumps(spec))
            procs.append(subprocess.Popen([sys.executable, __file__, "--worker", str(folder / f"spec-{i}.json")]))
        deadline = time.monotonic() + 600
        while not all((folder / f"ready-{i}").exists() for i in range(workers)):
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise SystemExit("orchestrator_ceiling.py: a worker did not start")
            time.sleep(0.05)
        before = fleet.stats()
        (folder / "go").write_text("go")
        codes = [p.wait() for p in procs]
        after = fleet.stats()
    if any(codes):
        raise SystemExit(f"orchestrator_ceiling.py: worker exit codes {codes}")
    per_worker = [json.loads((folder / f"worker-{i}.json").read_text()) for i in range(workers)]
    wall = max(w["ended_at"] for w in per_worker) - min(w["started_at"] for w in per_worker)
    per = list(zip(before["replicas"], after["replicas"]))
    requests = sum(b["requests"] - a["requests"] for a, b in per)
    samples = sum(b["samples"] - a["samples"] for a, b in per)
    tokens = sum(b["tokens"] - a["tokens"] for a, b in per)
    recorded = sum(w["recorded"] for w in per_worker)
    for w in per_worker:  # its share of the requests: in proportion to the questions it recorded
        w["requests_share"] = requests * w["recorded"] / max(1, recorded)
        w["cpu_ms_per_request"] = 1000 * w["cpu_s"] / max(1.0, w["requests_share"])
    rows = {t: store.db.execute(f"select count(*) from {t} where run_id = ?", [name]).fetchone()[0]
            for t in ("questions", "results", "model_calls")}
    status = store.get_run(name)["status"]
    store.close()
    cpu = sum(w["cpu_s"] for w in per_worker)
    store_rows, store_seconds = sum(w["store_rows"] for w in per_worker), sum(w["store_seconds"] for w in per_worker)
    return {
        "store": "postgres", "workers": workers, "replicas": replicas, "questions": args.questions,
        "concurrency_per_worker": args.concurrency, "recorded": recorded, "rows_in_db": rows, "run_status": status,
        "failed": sum(w["failed"] for w in per_worker), "wall_s": wall, "questions_per_s": recorded / wall,
        "requests": requests, "requests_per_s": requests / wall, "samples_per_s": samples / wall,
        "generated_tok_per_s": tokens / wall, "orchestrator_cpu_s": cpu, "cpu_ms_per_request": 1000 * cpu / max(1, requests),
        "cpu_ms_per_question": 1000 * cpu / max(1, recorded), "orchestrator_cores": cpu / wall,
        "fleet_cpu_s": after["cpu_s"] - before["cpu_s"], "store_rows": store_rows, "store_seconds": store_seconds,
        "store_rows_per_s": store_rows / store_seconds if store_seconds else None,
        "store_rows_per_wall_s": sum(rows.values()) / wall, "per_worker": per_worker,
        "gpus_by_tokens": tokens / wall / args.gpu_tok_s, "gpu_tok_s": args.gpu_tok_s, "time_scale": args.time_scale,
        "load_average": os.getloadavg()[0],
    }


def print_workers(r: dict[str, Any]) -> None:
    print(f"postgres {r['replicas']:4d} replicas, {r['workers']} workers: {r['recorded']:6d} questions in "
          f"{r['wall_s']:7.1f} s: {r['questions_per_s']:6.1f} q/s, {r['requests_per_s']:6.1f} requests/s, "
          f"{r['samples_per_s']:6.0f} samples/s, {r['generated_tok_per_s']:8.0f} generated tok/s; run {r['run_status']}")
    print(f"         orchestrators' CPU {r['cpu_ms_per_request']:.2f} ms per request ({r['cpu_ms_per_question']:.2f} ms "
          f"per question, {r['orchestrator_cores']:.2f} cores busy); per worker: " + ", ".join(
              f"{w['recorded']} q at {w['cpu_ms_per_request']:.2f} ms/request" for w in r["per_worker"]))
    rate = r["store_rows_per_s"]
    print(f"         trace store: {r['store_rows']} rows in {r['store_seconds']:.2f} s of writing = "
          + (f"{rate:,.0f} rows/s" if rate else "-") + f"; {r['store_rows_per_wall_s']:,.0f} rows per second of wall "
          f"time; in the run: {r['rows_in_db']}; failed questions {r['failed']}")


def print_run(r: dict[str, Any]) -> None:
    print(f"{r['store']:8} {r['replicas']:4d} replicas  {r['ran_this_sitting']:6d} questions in {r['wall_s']:7.1f} s: "
          f"{r['questions_per_s']:6.1f} q/s, {r['requests_per_s']:6.1f} requests/s, {r['samples_per_s']:6.0f} samples/s, "
          f"{r['generated_tok_per_s']:8.0f} generated tok/s")
    print(f"         orchestrator CPU {r['cpu_ms_per_request']:.2f} ms per request ({r['cpu_ms_per_question']:.2f} ms per "
          f"question, {r['orchestrator_cores']:.2f} cores busy); stub fleet CPU {r['fleet_cpu_s']:.1f} s")
    rate = r["store_rows_per_s"]
    print(f"         trace store: {r['store_rows']} rows in {r['store_seconds']:.2f} s of writing = "
          f"{rate:,.0f} rows/s" if rate else "         trace store: nothing written")
    print(f"         replicas busy (sum of busy shares) {r['replicas_busy_sum']:.2f}; generated tok/s / gpu_tok_s = "
          f"{r['gpus_by_tokens']:.2f} GPUs' worth; failed questions {r['failed']}"
          + (f"; resumed after {r['done_before']} questions" if r["done_before"] else ""))
    per_core = 1000.0 / r["cpu_ms_per_question"]  # questions/s if the orchestrator had one core to itself
    tokens_per_q = r["generated_tok_per_s"] / r["questions_per_s"]
    print(f"         on one free core (1 / CPU per question): {per_core:.1f} q/s = {per_core * tokens_per_q:,.0f} "
          f"generated tok/s = {per_core * tokens_per_q / r['gpu_tok_s']:.2f} GPUs' worth "
          f"({tokens_per_q:.0f} tokens a question)")


def start_postgres(spec: str | None) -> tuple[str | None, Any]:
    if spec in (None, ""):
        return None, None
    if spec != "auto":
        return spec, None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import postgres_server  # the tests' throw-away server: a system postgres on PATH, else pgserver

    server = postgres_server.start()
    return server.url(), server


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=10000)
    p.add_argument("--replicas", default="8,32,128", help="replica counts, comma-separated (each ≥ 2)")
    p.add_argument("--concurrency", type=int, default=256, help="questions in flight (the runner's threads)")
    p.add_argument("--work", type=Path, default=Path("ceiling"), help="folder of the trace DBs")
    p.add_argument("--out", type=Path, default=None, help="figures as JSON (default WORK/results.json)")
    p.add_argument("--postgres", default=None, help="a postgresql:// URL, or 'auto' to start a throw-away server")
    p.add_argument("--stores", default="sqlite", help="stores for the one-orchestrator runs: sqlite, postgres, both "
                   "(sqlite,postgres) or none")
    p.add_argument("--workers", default="", help="worker counts for the N-workers-on-one-Postgres-run arm, "
                   "comma-separated (each ≥ 2; needs --postgres)")
    p.add_argument("--insert-only", action="store_true", help="only the trace store's insert rate")
    p.add_argument("--insert-questions", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply the simulated latencies (1 = real time)")
    p.add_argument("--median-tokens", type=float, default=80.0)
    p.add_argument("--sigma-tokens", type=float, default=0.7)
    p.add_argument("--tpot-ms", type=float, default=8.0)
    p.add_argument("--sigma-tpot", type=float, default=0.2)
    p.add_argument("--gpu-tok-s", type=float, default=12500.0)
    p.add_argument("--fleet-max-s", type=float, default=4 * 3600.0, help="the stub fleet exits after this long")
    p.add_argument("--fleet", action="store_true", help=argparse.SUPPRESS)  # internal: be the stub fleet
    p.add_argument("--ready", help=argparse.SUPPRESS)
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: be one of N workers (its spec file)
    args = p.parse_args(argv)
    if args.worker:
        import logging

        logging.basicConfig(level=logging.ERROR)
        _worker(args.worker)
        return
    if args.fleet:
        args.replicas = int(args.replicas)
        asyncio.run(_fleet(args))
        return

    import logging

    logging.basicConfig(level=logging.ERROR)
    args.work.mkdir(parents=True, exist_ok=True)
    out = args.out or args.work / "results.json"
    results: dict[str, Any] = json.loads(out.read_text()) if out.is_file() else {}

    def save(key: str, value: dict[str, Any]) -> None:
        value["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        results[key] = value
        out.write_text(json.dumps(results, indent=2))

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"latency model: output tokens log-normal(median {args.median_tokens:g}, σ {args.sigma_tokens:g}), "
          f"{args.tpot_ms:g} ms/token (σ {args.sigma_tpot:g}), saturating at {args.gpu_tok_s:,.0f} tok/s per replica; "
          f"time scale {args.time_scale:g}")
    postgres_url, server = start_postgres(args.postgres)
    try:
        stores = ["sqlite"] + (["postgres"] if postgres_url else [])
        for kind in stores:
            for warm in (False, True):
                key = f"inserts-{kind}-{args.insert_questions}" + ("-warm" if warm else "")
                if key not in results:
                    store = open_store(kind, args.work, f"inserts-{uuid.uuid4().hex[:6]}", postgres_url)
                    save(key, {"store": kind, "warm": warm, **measure_inserts(store, args.insert_questions, warm=warm)})
                r = results[key]
                print(f"trace store alone, {kind}{', answers read before (as in a run)' if warm else ''}: {r['rows']} rows "
                      f"({r['questions']} questions) in {r['wall_s']:.2f} s = {r['rows_per_s']:,.0f} rows/s; "
                      f"{1000 * r['cpu_s'] / r['questions']:.2f} ms CPU per question = {r['rows'] / r['cpu_s']:,.0f} rows "
                      "per CPU-second" + ("  (goal ≥ 5,000 rows/s)" if kind == "sqlite" else ""))
        if args.insert_only:
            return
        for kind in [s for s in args.stores.split(",") if s and s != "none"]:
            if kind == "postgres" and not postgres_url:
                raise SystemExit("orchestrator_ceiling.py: --stores postgres needs --postgres URL|auto")
            for replicas in [int(x) for x in args.replicas.split(",") if x]:
                if replicas < 2:
                    raise SystemExit("orchestrator_ceiling.py: --replicas: each count must be at least 2")
                key = f"run-{kind}-r{replicas}-q{args.questions}-c{args.concurrency}-t{args.time_scale:g}"
                if key not in results:
                    save(key, measure_run(args, replicas, kind, postgres_url))
                print_run(results[key])
        for workers in [int(x) for x in args.workers.split(",") if x]:
            if not postgres_url:
                raise SystemExit("orchestrator_ceiling.py: --workers needs --postgres URL|auto")
            if workers < 2:
                raise SystemExit("orchestrator_ceiling.py: --workers: each count must be at least 2")
            for replicas in [int(x) for x in args.replicas.split(",") if x]:
                key = f"workers-{workers}-postgres-r{replicas}-q{args.questions}-c{args.concurrency}-t{args.time_scale:g}"
                if key not in results:
                    save(key, measure_workers(args, workers, replicas, postgres_url))
                print_workers(results[key])
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
