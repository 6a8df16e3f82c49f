"""Moved to :mod:`agora.agents.convert` (the pool's backends load converted folders, and agents sit
below training); this name keeps ``from agora.training.convert import export_hf`` working."""

from agora.agents.convert import (  # noqa: F401
    FEWSHOT_CHAT_TEMPLATE,
    Dtype,
    default_export_dir,
    export_hf,
    is_exported,
    resolve_gguf,
)
