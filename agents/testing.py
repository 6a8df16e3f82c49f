"""Moved to :mod:`agora.models.testing` (the model layer); this old import path is an alias of that module."""

import sys

from agora.models import testing as _moved

sys.modules[__name__] = _moved
