"""Moved to :mod:`agora.models.vllm_args` (the model layer); this old import path is an alias of that module."""

import sys

from agora.models import vllm_args as _moved

sys.modules[__name__] = _moved
