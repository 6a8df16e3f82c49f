"""Moved to :mod:`agora.models.structured` (the model layer); this old import path is an alias of that module."""

import sys

from agora.models import structured as _moved

sys.modules[__name__] = _moved
