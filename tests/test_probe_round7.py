"""Probes of bad input, round 7: a pool path that is a folder, a bundle with data after its footer,
reports and replays of a run that is not in the database, a method compared with itself, a
question that is not text."""

from __future__ import annotations

import pytest

from agora.models.errors import PoolConfigError
from agora.models.pool import load_pool


def test_a_pool_path_that_is_a_folder_says_so(tmp_path):
    """It said "pool file not found" about a folder that is there."""
    with pytest.raises(PoolConfigError) as err:
        load_pool(tmp_path)
    assert str(err.value) == f"{tmp_path}: a folder, not a pool file; give the path of a TOML pool file"
