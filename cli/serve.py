"""``agora serve``: start one vLLM server per pool model and write the pool file that uses them."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from agora.models.pool import DEFAULT_SPECS
from agora.models.serving import ServeConfig, ServedPool, default_python, serve_mode
from agora.cli._shared import console, err_console, from_options, get_pool, user_errors
from agora.cli._apps import app


@app.command("serve")
def serve(
    pool: Optional[Path] = typer.Option(None, "--pool", help="Pool file (TOML) to serve. Default: the embedded pool."),
    out: Path = typer.Option(Path("served-pool.toml"), "--out", help="Where to write the pool file of the servers."),
    python: Optional[str] = typer.Option(None, "--python", help="Python that has vLLM (default: $AGORA_VLLM_PYTHON, "
                                         "else this one)."),
    port: int = typer.Option(8100, "--port", min=1, max=65535, help="First port; each server takes the next free one."),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="Skip graph compilation (faster start, slower decode)."),
    memory_fraction: Optional[float] = typer.Option(None, "--memory-fraction", min=0.01, max=1.0,
                                                    help="--gpu-memory-utilization per server (default: from free memory)."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", min=16, help="Context length (default: n_ctx)."),
    startup_timeout: float = typer.Option(900.0, "--startup-timeout", min=1.0, help="Seconds to wait for the servers."),
    log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="Server logs (default: <user cache>/agora/serve-logs)."),
) -> None:
    """Serve every model of a pool on vLLM (127.0.0.1), write OUT, and keep serving until Ctrl-C or SIGTERM.

    Then: agora run align --pool OUT ...
    """
    with user_errors():
        specs = [m.spec for m in get_pool(pool)] if pool is not None else list(DEFAULT_SPECS)
        from_options(ServeConfig, python="python", port="port", enforce_eager="enforce_eager",
                     memory_fraction="memory_fraction", max_model_len="max_model_len",
                     startup_timeout_s="startup_timeout", log_dir="log_dir")
        config = ServeConfig(python=python or default_python(), port=port, enforce_eager=enforce_eager,
                             memory_fraction=memory_fraction, max_model_len=max_model_len,
                             startup_timeout_s=startup_timeout, log_dir=log_dir)
        served = ServedPool(specs, config)  # asks each entry's backend whether and how it is served
        on_vllm = [s.name for s in specs if serve_mode(s) == "vllm"]

    def terminate(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        console.print(f"starting vLLM for {escape(', '.join(on_vllm))} with {escape(config.python)}", highlight=False)
        with served:
            out.write_text(served.pool_toml(), encoding="utf-8")
            for plan in served.plans:
                console.print(f"[bold]{escape(plan.spec.name)}[/bold] → {plan.base_url}  (log: {escape(str(plan.log_path))})",
                              highlight=False)
            console.print(f"pool file: [bold]{escape(str(out))}[/bold]  (Ctrl-C stops the servers)", highlight=False)
            while True:
                time.sleep(2.0)
                dead = served.dead()
                if dead:
                    names = ", ".join(p.spec.name for p in dead)
                    err_console.print(f"[red]error:[/red] vLLM server for {escape(names)} exited; see {escape(str(dead[0].log_path))}",
                                      highlight=False)
                    raise typer.Exit(1)
    except typer.Exit:  # a click Exit is a RuntimeError too
        raise
    except KeyboardInterrupt:
        console.print("stopped the vLLM servers", highlight=False)
    except (RuntimeError, ImportError, ValueError, FileNotFoundError) as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
