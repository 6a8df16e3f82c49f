"""Moved to :mod:`agora.models.lora_gguf` (the model layer); this old import path is an alias of that module."""

import sys

from agora.models import lora_gguf as _moved

sys.modules[__name__] = _moved
