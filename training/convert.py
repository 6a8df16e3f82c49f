"""Moved to :mod:`agora.models.convert` (the pool's backends load converted folders, and agents sit
below training); this name keeps ``from agora.training.convert import export_hf`` working."""

from agora.models.convert import (  # noqa: F401
    FEWSHOT_CHAT_TEMPLATE,
    Dtype,
    default_export_dir,
    export_hf,
    is_exported,
    resolve_gguf,
)
