"""Moved to :mod:`agora.models.openai_backend` (the model layer); this old import path is an alias of that module."""

import sys

from agora.models import openai_backend as _moved

sys.modules[__name__] = _moved
