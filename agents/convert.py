"""Moved to :mod:`agora.models.convert` (the model layer); this old import path is an alias of that module."""

import sys

from agora.models import convert as _moved

sys.modules[__name__] = _moved
