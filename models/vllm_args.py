"""Which ``vllm_args`` a pool entry may set (read by the pool loader and by ``agora serve``).

An **allow-list**: a pool entry may set only the engine arguments of :data:`SAFE_VLLM_ARGS`
(memory, precision, batching and scheduling knobs, parsers chosen by their registered name,
logging). Anything else is refused, so an argument added by a later vLLM that names code by
import path, opens the server to the network or writes files is refused until someone reads it
and adds it here. :data:`REFUSED_VLLM_ARGS` only words the refusal of the arguments known to be
dangerous.

``compilation_config`` is allowed only as an optimisation level (``3``) or a table of the keys in
:data:`SAFE_COMPILATION_KEYS`: vLLM's ``CompilationConfig.backend`` and ``inductor_passes`` take
fully qualified import paths (vLLM docs, ``vllm.config.compilation``), and ``pass_config``,
``custom_ops``, ``splitting_ops``, ``inductor_compile_config``, ``debug_dump_path`` and
``cache_dir`` reach code or files.

Kept apart from :mod:`agora.models.serving` so that the pool can check a pool file without
importing the server code (which imports the pool).
"""

from __future__ import annotations

import re
from typing import Any

#: Engine arguments (``vllm.engine.arg_utils.EngineArgs`` / ``vllm serve`` flags, spelt with ``_``)
#: a pool entry may set. None of them names code, an address or a folder to write to.
SAFE_VLLM_ARGS: frozenset[str] = frozenset({
    # model, precision and weights (no trust_remote_code: refused)
    "dtype", "kv_cache_dtype", "quantization", "revision", "tokenizer_revision", "tokenizer", "tokenizer_mode",
    "max_model_len", "seed", "model_impl", "max_logprobs", "logprobs_mode", "disable_sliding_window",
    "disable_cascade_attn", "generation_config", "override_generation_config", "rope_scaling", "rope_theta",
    "enforce_eager", "max_seq_len_to_capture", "compilation_config",
    # memory and KV cache
    "gpu_memory_utilization", "swap_space", "cpu_offload_gb", "block_size", "kv_cache_memory_bytes",
    "num_gpu_blocks_override", "enable_prefix_caching", "prefix_caching_hash_algo", "calculate_kv_scales",
    "mamba_ssm_cache_dtype",
    # parallelism on this machine
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
    "max_parallel_loading_workers", "disable_custom_all_reduce",
    # batching and scheduling
    "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "max_num_partial_prefills",
    "max_long_partial_prefills", "long_prefill_token_threshold", "scheduling_policy", "async_scheduling",
    "num_scheduler_steps", "preemption_mode", "scheduler_delay_factor", "cuda_graph_sizes",
    "max_cudagraph_capture_size",
    # LoRA sizes (the adapters themselves come from the entry's adapters table)
    "max_loras", "max_lora_rank", "max_cpu_loras", "fully_sharded_loras", "lora_dtype",
    # multimodal limits
    "limit_mm_per_prompt", "mm_processor_cache_gb",
    # structured outputs, reasoning and tools, by registered name (their *_plugin import paths are refused)
    "guided_decoding_backend", "reasoning_parser", "tool_call_parser", "enable_auto_tool_choice",
    # OpenAI server behaviour and logging
    "response_role", "return_tokens_as_token_ids", "enable_prompt_tokens_details", "enable_force_include_usage",
    "max_log_len", "disable_log_stats", "disable_log_requests", "enable_log_requests", "enable_log_outputs",
    "disable_fastapi_docs", "uvicorn_log_level", "disable_uvicorn_access_log", "disable_frontend_multiprocessing",
    "enable_server_load_tracking",
})

#: Keys of a ``compilation_config`` table a pool entry may set (levels, modes and CUDA-graph sizes).
SAFE_COMPILATION_KEYS: frozenset[str] = frozenset({
    "level", "mode", "cudagraph_mode", "use_cudagraph", "full_cuda_graph", "cudagraph_capture_sizes",
    "max_cudagraph_capture_size", "cudagraph_num_of_warmups", "compile_sizes", "use_inductor",
})

#: Why the arguments known to be dangerous are refused (every argument not in
#: :data:`SAFE_VLLM_ARGS` is refused too). ``agora serve`` owns the bind address, the port, the
#: served names and the adapters (the pool file it writes depends on them), and a pool entry must
#: not make a server run code that is not vLLM's (a model repository's Python, middleware,
#: plugins, processors and worker classes named by import path) or open it to the network (other
#: addresses, CORS, TLS, distributed endpoints, exporters).
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
    **dict.fromkeys(("download_dir", "hf_config_path", "speculative_config", "hf_overrides", "model_loader_extra_config",
                     "load_format", "pt_load_map_location"),
                    "it loads or writes files or models other than the entry's"),
}
_UNLISTED = ("not one of the vLLM engine arguments a pool file may set (agora.models.vllm_args.SAFE_VLLM_ARGS: "
             "memory, precision, batching and scheduling knobs)")
_ARG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def vllm_args_problem(args: Any) -> str | None:
    """What is wrong with a pool entry's ``vllm_args`` table, or ``None`` when it may be used.

    Refused: a key that is not in :data:`SAFE_VLLM_ARGS` once ``-`` is read as ``_`` (a ``no_``
    prefix is allowed before a listed flag; an abbreviation, which argparse would expand to any
    flag, or another case is refused), a key that is not a plain flag name (``"host=0.0.0.0"``),
    a string value that starts with ``-`` and is not a number (it would be read as another flag
    after a flag that takes no value), and a ``compilation_config`` that is neither a level nor a
    table of :data:`SAFE_COMPILATION_KEYS`. The message of a known-dangerous key says why
    (:data:`REFUSED_VLLM_ARGS`).
    """
    if not isinstance(args, dict):
        return "must be a table of vllm engine arguments"
    for key, value in args.items():
        if not isinstance(key, str) or not _ARG_NAME.fullmatch(key):
            return f"{key!r} is not an argument name (letters, digits, _ and -)"
        name = key.replace("-", "_")
        bare = name[3:] if name.startswith("no_") else name
        if name not in SAFE_VLLM_ARGS and bare not in SAFE_VLLM_ARGS:
            lowered = {name.lower(), bare.lower()}
            refused = next((r for r in REFUSED_VLLM_ARGS if any(r == c or r.startswith(c) for c in lowered)), None)
            return f"{key!r} is refused: {REFUSED_VLLM_ARGS[refused] if refused else _UNLISTED}"
        if isinstance(value, str) and value.startswith("-"):
            try:
                float(value)
            except ValueError:
                return f"{key!r}: the value {value!r:.40} starts with '-' (it would be read as a flag)"
        if bare == "compilation_config" and (problem := _compilation_problem(key, value)):
            return problem
    return None


def _compilation_problem(key: str, value: Any) -> str | None:
    """What is wrong with a ``compilation_config`` value, or ``None`` (an integer level or a table of safe keys)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    if not isinstance(value, dict):
        return f"{key!r} must be an optimisation level (0-3) or a table of {', '.join(sorted(SAFE_COMPILATION_KEYS))}"
    for sub in value:
        if sub not in SAFE_COMPILATION_KEYS:
            return (f"'{key}.{sub}' is refused: vLLM's compilation_config takes import paths (backend, inductor_passes) "
                    f"and file paths; a pool file may set only {', '.join(sorted(SAFE_COMPILATION_KEYS))}")
    return None
