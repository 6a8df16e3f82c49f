"""Moved to :mod:`agora.models.serving` (the model layer); this old import path is an alias of that module."""

import sys

from agora.models import serving as _moved

sys.modules[__name__] = _moved
