"""Moved to :mod:`agora.models.vllm_offline` (the model layer); this old import path is an alias of that module."""

import sys

from agora.models import vllm_offline as _moved

sys.modules[__name__] = _moved
