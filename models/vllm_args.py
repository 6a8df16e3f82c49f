"""Which ``vllm_args`` a pool entry may set (read by the pool loader and by ``agora serve``).

Kept apart from :mod:`agora.models.serving` so that :mod:`agora.models.pool` can check a pool file
without importing the server code (which imports the pool).
"""

from __future__ import annotations

import re
from typing import Any


#: ``vllm_args`` keys no pool entry may set, with why. ``agora serve`` owns the bind address, the
#: port, the served names and the adapters (the pool file it writes depends on them), and a pool
#: entry must not make a server run code that is not vLLM's (a model repository's Python,
#: middleware, plugins, processors and worker classes named by import path) or open it to the
#: network (other addresses, CORS, TLS, distributed endpoints, exporters).
REFUSED_VLLM_ARGS: dict[str, str] = {
    **dict.fromkeys(("host", "port", "uds", "headless", "data_parallel_address", "data_parallel_rpc_port",
                     "data_parallel_rpc_port_start"),
                    "agora serve binds each server to 127.0.0.1 on a port it chooses (--port sets the first)"),
    **dict.fromkeys(("model", "served_model_name"), "agora serve sets it from the entry's model/path and name"),
    **dict.fromkeys(("enable_lora", "lora_modules"), "agora serve sets it from the entry's adapters table"),
    "config": "a vLLM config file could set any argument; put the arguments in vllm_args",
    **dict.fromkeys(("trust_remote_code", "middleware", "tool_parser_plugin", "reasoning_parser_plugin",
                     "logits_processors", "logits_processor_pattern", "worker_cls", "worker_extension_cls",
                     "scheduler_cls", "distributed_executor_backend", "io_processor_plugin"),
                    "it runs code from outside vLLM (a model repository or an import path)"),
    **dict.fromkeys(("allowed_origins", "allowed_methods", "allowed_headers", "allow_credentials", "root_path",
                     "ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "ssl_cert_reqs", "enable_ssl_refresh",
                     "allowed_local_media_path", "allowed_media_domains", "kv_transfer_config", "kv_events_config",
                     "otlp_traces_endpoint"),
                    "it opens the server or its files to the network"),
}
_ARG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def vllm_args_problem(args: Any) -> str | None:
    """What is wrong with a pool entry's ``vllm_args`` table, or ``None`` when it may be used.

    Refused: a key of :data:`REFUSED_VLLM_ARGS` (spelt with ``-`` or ``_``, in any case, with a
    ``no_`` prefix, or abbreviated: argparse takes a unique prefix for the whole flag), a key that
    is not a plain flag name (``"host=0.0.0.0"``), and a string value that starts with ``-`` and is
    not a number (it would be read as another flag after a flag that takes no value).
    """
    if not isinstance(args, dict):
        return "must be a table of vllm engine arguments"
    for key, value in args.items():
        if not isinstance(key, str) or not _ARG_NAME.fullmatch(key):
            return f"{key!r} is not an argument name (letters, digits, _ and -)"
        name = key.replace("-", "_").lower()
        bare = name[3:] if name.startswith("no_") else name
        for candidate in (name, bare):
            refused = next((r for r in REFUSED_VLLM_ARGS if r == candidate or r.startswith(candidate)), None)
            if refused is not None:
                return f"{key!r} is refused: {REFUSED_VLLM_ARGS[refused]}"
        if isinstance(value, str) and value.startswith("-"):
            try:
                float(value)
            except ValueError:
                return f"{key!r}: the value {value!r:.40} starts with '-' (it would be read as a flag)"
    return None
